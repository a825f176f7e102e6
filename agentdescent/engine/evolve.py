"""evolve(): the front door. Check what the caller passed, build the run's parts, run the loop.

What it leaves out: the loop itself (`loop`), what a diff is (strategies), how one is judged (the
optimizer step), where calls run (executors) and how results are stored (the ledger).
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from agentdescent import events as ev
from agentdescent.artifacts.strategies import AppendRules, Strategy
from agentdescent.engine.budget import Allowance
from agentdescent.engine.cancel import CancelToken
from agentdescent.engine.checkpoint import RunFiles, fingerprint
from agentdescent.engine.evaluation import Evaluator, RewardFn, RunFn, Usage
from agentdescent.engine.executors import EXECUTORS, Executor, ThreadExecutor, make_executor
from agentdescent.engine.loop import Loop, Shape
from agentdescent.engine.parallel import ParallelMethod, PipelineParallel, TensorParallel, parallel_method
from agentdescent.engine.pipeline import Pipeline
from agentdescent.engine.replay import JournaledFusion
from agentdescent.engine.sampling import AcceptanceSamples, Sampler
from agentdescent.engine.sharding import Shards
from agentdescent.engine.stopping import stop_rules
from agentdescent.engine.stragglers import Hedger
from agentdescent.engine.validation import Validator
from agentdescent.engine.worker import ProposeFn, Worker, WorkerConfig
from agentdescent.errors import Cancelled, UserError
from agentdescent.governance import Governance, Layer
from agentdescent.ledger import Ledger
from agentdescent.result import EvolveResult
from agentdescent.step import Aggregator, Policies
from agentdescent.step.gate import Approve
from agentdescent.types import Task

TEMPORARY_LEDGER_PREFIX = "agentdescent-ledger-"  # a run without store= keeps its ledger in such a temp folder
FINISH_GRACE_S = 10.0  # how long a finished run waits for calls still running (see `_wind_down`)


def evolve(
    tasks: Sequence[Task],
    reward: RewardFn,
    *,
    run: RunFn,
    propose: ProposeFn,
    strategy: Strategy | None = None,
    rounds: int = 8,
    n_workers: int = 4,
    max_concurrency: int | None = None,
    held_out_frac: float = 0.3,
    patience: int | None = None,
    target_reward: float | None = None,
    asynchronous: bool = False,
    lag_budget: int | None = 3,
    parallel: str | ParallelMethod = "dp",
    executor: str = "thread",
    policies: Policies | None = None,
    aggregator_factory: Callable[..., Aggregator] | None = None,
    artifact_id: str = "artifact",
    blast_radius: Mapping[str, Layer] | None = None,
    approve: Approve | None = None,
    self_verify: bool = True,
    cheap_eval_tasks: int | None = None,
    max_calls: int | None = None,
    max_tokens: int | None = None,
    rollout_timeout: float | None = None,
    reissue_after: float | None = 4.0,
    seed: int = 0,
    store: str | Path | None = None,
    on_event: Callable[[ev.Event], None] | None = None,
    cancel: CancelToken | None = None,
) -> EvolveResult:
    """Improve an artifact on `tasks` and return the best held-out version.

    A round is `n_workers` worker turns: each rolls out a minibatch with `run`, scores it with
    `reward`, reflects on failures with `propose`, and hands back diffs. The aggregator admits,
    rebases, resolves, tests and commits them into a git ledger at `store` (a new temporary
    folder when None; an existing ledger continues from its head). `dev` takes every accepted
    step; `stable` only held-out gains, and the result is `stable`.

    A round is one aggregator step. Synchronous runs dispatch every worker at the start of a
    round and wait for all of them; `asynchronous=True` lets each worker start its next turn on
    the newest snapshot the moment its report is taken into a step, and a round aggregates
    whatever has come back. A diff made on a version `s` commits behind head is rebased onto
    it; `lag_budget` (default 3; None: no limit) and `policies.staleness` (`Staleness("drop")`,
    `"rebase"` or `"discount"`) say what becomes of one past the budget, and each diff's `s`,
    weight η(s) and decision are in `result.history` and the commits' trailers.

    `max_concurrency` caps calls in flight (default: 32, or 4 per worker past 8 workers, at most
    128; acceptance and held-out evaluation fan out over tasks, so even one worker wants many). `rounds`,
    `target_reward`, `patience` (rounds without a held-out gain), `max_calls` and `max_tokens`
    each end the run. Budgets are caps: no rollout or reflection starts once one is spent, the
    run stops inside the round and keeps what was committed (`max_calls` below the held-out
    set's size, which every run measures first, is refused).
    Calls and tokens are those of AgentDescent's model clients used anywhere in the run (see
    `Usage.calls`: with plain functions, each rollout and proposal counts as one call). With
    `max_concurrency=1`, or any concurrency in synchronous mode, the same seed gives the same result.
    `aggregator_factory` receives the `Aggregator` fields as keywords and returns an object with
    its `step` method.

    `blast_radius` maps key patterns to layers (`governance.SKILL_BLAST_RADIUS`,
    `HARNESS_BLAST_RADIUS`): an L0 key is never changed, and an L1 (gated) change must pass the
    stricter bar: the test at the gated threshold, then no held-out task worse than head, then
    `approve(change)` when given (a `GatedChange` in, True to let it land).

    `reissue_after` (default 4): a rollout still running after that many times its task's
    usual duration (the median of its last runs) is run a second time while the call pool has
    room, and the first answer wins; model latency is heavy-tailed and every wave waits for its
    slowest rollout. Both runs are paid for and counted (`result.usage.reissued`, `discarded`).
    None: never. Calls that take under 50 ms are never re-issued.

    `rollout_timeout` (seconds, default None: no limit) bounds each call of `run` (with its
    `reward`) and of `propose`: one that takes longer is a failed rollout or an `error` outcome,
    and is abandoned on its thread. The CLI agents have their own `timeout` (600 s by default),
    which kills the agent's process.

    A `UserError` once the rounds have begun (a reward that is not a number in [0, 1], a
    `propose` that returns something other than text, a missing key), Ctrl-C, a full disk and
    `cancel.cancel()` (a `CancelToken`; it also wakes a run blocked inside a long wave at once)
    stop the run: the result is returned with `error` set and `stop_reason` saying why, and the
    ledger keeps every committed step. Before the rounds begin, the same errors are raised.

    A run keeps a checkpoint and a journal of its rollouts beside its ledger, so the same call
    on the same `store` after it stopped early (or was killed) resumes it: the next round, the
    sampler, the budgets spent, the history and the evaluation cache, with no commit lost or
    made twice. A run on a store whose last run finished, or had other tasks, seed or strategy,
    starts anew from the ledger's head (and says so in a `Warned` event when that is a surprise).

    `executor` says where rollouts and reflections run: `"thread"` (default: a thread per call
    in flight, for calls that wait on a model), `"process"` (worker processes of this machine,
    for CPU-bound or thread-unsafe callables; `run`, `reward` and `propose` must pickle) or
    `"ray"` (threaded actors on the Ray cluster `RAY_ADDRESS` names, or on a local one; needs
    `pip install "agentdescent[ray]"`). The ledger, the aggregator and the workers' turns stay in
    this process with every executor, and a call lost with a dead process or actor is run again.
    `parallel` says how the workers divide the work (`engine/parallel.py`): `"dp"` (default,
    data-parallel: every worker may change every key, each on its own tasks); `"tp"` or
    `TensorParallel(route=...)` (the strategy's keys dealt out, one shard per worker, so that no
    two workers' diffs touch one key; a task goes to the shard `route(task)` names, else to the
    one whose keys fixed it before, and a proposal outside its worker's shard is an `invalid`
    outcome that teaches where its task goes; a strategy without enough keys for `n_workers`,
    or whose keys are not known in advance (AppendRules), is refused); `"pp"` or
    `PipelineParallel(rollouts=, reflections=, verification=)` (a turn's rollouts, reflections
    and verification as stages on pools of their own; asynchronously, a worker's next rollouts
    start while its last turn is reflected on).
    """
    strategy = strategy if strategy is not None else AppendRules()
    policies = policies or Policies()
    train, held_out = split_tasks(_checked_tasks(tasks), held_out_frac, random.Random(f"{seed}:split"))
    _check_options(run=run, propose=propose, reward=reward, rounds=rounds, n_workers=n_workers,
                   max_concurrency=max_concurrency, executor=executor,
                   lag_budget=lag_budget, target_reward=target_reward, max_calls=max_calls, max_tokens=max_tokens,
                   rollout_timeout=rollout_timeout, reissue_after=reissue_after)
    _check_executor(executor, run=run, reward=reward, propose=propose)
    method = parallel_method(parallel)
    governance = Governance.of(strategy, blast_radius)
    shards = Shards.of(strategy, strategy.initial_state(), governance, n_workers, method.route) \
        if isinstance(method, TensorParallel) else None
    if max_calls is not None and max_calls < len(held_out):
        raise UserError(f"max_calls={max_calls} cannot cover measuring the artifact on its {len(held_out)} held-out "
                        f"tasks, which every run does first; give max_calls of at least {len(held_out)} plus what "
                        f"the rounds need (agentdescent plan quotes it), or hold fewer tasks out (held_out_frac)")
    ledger = Ledger(store if store is not None else tempfile.mkdtemp(prefix=TEMPORARY_LEDGER_PREFIX))
    files = RunFiles(ledger.path)
    usage = Usage()
    allowance = Allowance(usage, max_calls=max_calls, max_tokens=max_tokens)
    concurrency = max_concurrency or min(128, max(32, 4 * n_workers))
    calls = make_executor(executor, concurrency, name="agentdescent-call", on_start=files.starts.mark)
    hedger = None if reissue_after is None else Hedger(
        calls, factor=reissue_after, capacity=concurrency, may_start=allowance.may_start,
        on_reissue=lambda: usage.add(reissued=1), on_discard=lambda: usage.add(discarded=1))
    workers = ThreadExecutor(n_workers, name="agentdescent-worker")
    pools = [workers, calls]  # what a cancel abandons and the end shuts down
    reflections = calls
    stage_pools: dict[str, Executor] = {}
    stages: list[Executor] = []
    if isinstance(method, PipelineParallel):  # reflections and verification on pools of their own
        reflections = make_executor(executor, method.reflections or n_workers, name="agentdescent-reflect",
                                    on_start=files.starts.mark)
        stage_pools["verify"] = make_executor(executor, method.verification or concurrency, name="agentdescent-verify",
                                              on_start=files.starts.mark)
        stages = [ThreadExecutor(n_workers, name=f"agentdescent-{stage}") for stage in Pipeline.STAGES]
        pools += [reflections, stage_pools["verify"], *stages]
    if cancel is not None:
        cancel.on_cancel(lambda: [pool.abandon(Cancelled(cancel.reason)) for pool in pools])
    result: EvolveResult | None = None
    try:
        evaluator = Evaluator(strategy=strategy, run=run, reward=reward, pool=calls, usage=usage, timeout=rollout_timeout,
                              journal=files.record, allowance=allowance, hedger=hedger, pools=stage_pools)
        # The step measures every diff on its own failures in its first wave, beside the fusion's
        # first probes, so workers need not first: a turn is a wave shorter, and an asynchronous
        # diff is mostly stale by its step, its worker's measure of no use there. A pipeline keeps
        # verification as a stage of its own, and `cheap_eval_tasks` verifies on other tasks.
        workers_verify = self_verify and (isinstance(method, PipelineParallel) or cheap_eval_tasks is not None)
        # a fusion model's answers are journalled: a step cut short by a kill does not pay for them twice
        fusion = JournaledFusion(inner=policies.fusion, journal=files.record_answer, answers=files.replay)
        aggregator = (aggregator_factory or Aggregator)(
            ledger=ledger, artifact_id=artifact_id, governance=governance, policies=replace(policies, fusion=fusion),
            train=train, score=evaluator.score, lag_budget=lag_budget, oracle=held_out, approve=approve,
            known=evaluator.known, verify_contested=self_verify,
        )
        worker = Worker(
            strategy=strategy, propose=propose, evaluator=evaluator, calls=reflections, policies=policies,
            config=WorkerConfig(artifact_id=artifact_id, self_verify=workers_verify, cheap_eval_tasks=cheap_eval_tasks,
                                timeout=rollout_timeout),
            allowance=allowance, shards=shards, journal=files.record_answer, answers=files.replay,
        )
        pipeline = Pipeline(worker, stages=stages, depth=method.depth) if isinstance(method, PipelineParallel) else None
        loop = Loop(
            ledger=ledger, artifact_id=artifact_id, strategy=strategy, held_out=held_out, evaluator=evaluator,
            aggregator=aggregator, worker=worker, pool=workers,
            sampler=Sampler(policy=policies.task_sampler, train=train, seed=seed, scouts=policies.proposal.scouts,
                            shards=shards),
            samples=AcceptanceSamples(policy=policies.acceptance, train=train, seed=seed),
            validator=Validator(evaluator=evaluator, held_out=held_out, train_ids=frozenset(t.id for t in train),
                                schedule=policies.validation, promotion=policies.promotion, target=target_reward),
            shape=Shape(rounds=rounds, n_workers=n_workers, asynchronous=asynchronous, seed=seed),
            stop_rules=stop_rules(target_reward=target_reward, patience=patience, max_calls=max_calls,
                                  max_tokens=max_tokens),
            emit=on_event or (lambda event: None), files=files, cancel=cancel, temporary=store is None,
            before_step_call=lambda: _start_step_call(allowance, files),
            pipeline=pipeline, shards=shards,
            fingerprint=fingerprint(artifact_id=artifact_id, strategy=strategy, seed=seed, train=train, held_out=held_out),
        )
        result = loop.run()
    finally:
        finished = result is not None and result.error is None
        if hedger is not None:
            hedger.close()
        left = _wind_down(pools, wait=finished)  # a stopped run does not wait for work still in flight
        files.close()
        ledger.close()
    if finished and left and result is not None:  # a stopped run leaves its calls by design
        result.warnings.append(
            f"{left} call{'s were' if left > 1 else ' was'} still running {FINISH_GRACE_S:g} s after the run ended "
            "(a straggler's losing attempt: the other had answered) and left to finish alone; what "
            f"{'they spend is' if left > 1 else 'it spends is'} not in usage")
    return result


def _start_step_call(allowance: Allowance, files: RunFiles) -> None:
    """A model call the step makes itself: within the budget, and in the start log before it starts."""
    allowance.take()
    files.starts.mark()


def _wind_down(pools: Sequence[Executor], *, wait: bool) -> int:
    """Shut the pools down. A finished run waits for the calls still running (a straggler's losing
    attempt: its answer is thrown away, its spend counted), for `FINISH_GRACE_S` in all: one that
    hangs for good must not keep evolve from returning. How many calls were left running."""
    deadline = time.monotonic() + FINISH_GRACE_S
    return sum(pool.shutdown(wait=wait, timeout=max(0.0, deadline - time.monotonic())) for pool in pools)


def split_tasks(tasks: Sequence[Task], held_out_frac: float, rng: random.Random) -> tuple[list[Task], list[Task]]:
    """Seeded train / held-out split. With held_out_frac=0 the train set is also the held-out set."""
    if not 0.0 <= held_out_frac < 1.0:
        raise UserError(f"held_out_frac must be in [0, 1); got {held_out_frac}")
    if held_out_frac == 0:
        return list(tasks), list(tasks)
    order = list(tasks)
    rng.shuffle(order)
    n_held = min(len(order) - 2, max(1, round(len(order) * held_out_frac)))
    return order[n_held:], order[:n_held]


def _checked_tasks(tasks: Sequence[Task]) -> list[Task]:
    tasks = list(tasks)
    wrong = [t for t in tasks if not isinstance(t, Task)]
    if wrong:
        raise UserError(f"tasks must be Task objects; got {type(wrong[0]).__name__}. Build them with Task(id=..., prompt=...)")
    if len(tasks) < 4:
        raise UserError(f"evolve needs at least 4 tasks (some to train on, some held out); got {len(tasks)}")
    seen: set[str] = set()
    dupes = sorted({t.id for t in tasks if t.id in seen or seen.add(t.id)})
    if dupes:
        raise UserError(f"task ids must be unique; repeated: {', '.join(dupes[:5])}. Give each task its own id")
    return tasks


def _check_executor(executor: str, **callables: object) -> None:
    """The callables a process or Ray executor sends away must travel: say which does not, up front."""
    if executor == "process":
        from agentdescent.engine.processes import check_picklable
        check_picklable(**callables)
    elif executor == "ray":
        from agentdescent.engine.ray_executor import check_serializable
        check_serializable(**callables)


def _check_options(
    *, run: object, propose: object, reward: object, rounds: int, n_workers: int, max_concurrency: int | None,
    executor: str, lag_budget: int | None, target_reward: float | None,
    max_calls: int | None, max_tokens: int | None, rollout_timeout: float | None, reissue_after: float | None,
) -> None:
    for name, fn in (("run", run), ("propose", propose), ("reward", reward)):
        if not callable(fn):
            raise UserError(f"{name} must be a callable; got {type(fn).__name__}")
    for name, value in (("rounds", rounds), ("n_workers", n_workers), ("max_concurrency", max_concurrency or 1)):
        if not isinstance(value, int) or value < 1:
            raise UserError(f"{name} must be a positive integer; got {value!r}")
    if executor not in EXECUTORS:
        raise UserError(f"executor={executor!r} is not available; choose one of {', '.join(EXECUTORS)}")
    if lag_budget is not None and lag_budget < 0:
        raise UserError(f"lag_budget must be >= 0 or None; got {lag_budget}")
    if target_reward is not None and not 0.0 <= target_reward <= 1.0:
        raise UserError(f"target_reward must be in [0, 1]; got {target_reward}")
    for name, budget in (("max_calls", max_calls), ("max_tokens", max_tokens)):
        if budget is not None and (not isinstance(budget, int) or budget < 1):
            raise UserError(f"{name} must be a positive integer or None; got {budget!r}")
    if rollout_timeout is not None and (not isinstance(rollout_timeout, (int, float)) or not rollout_timeout > 0):
        raise UserError(f"rollout_timeout must be a number of seconds above 0, or None; got {rollout_timeout!r}")
    if reissue_after is not None and (not isinstance(reissue_after, (int, float)) or not reissue_after > 1):
        raise UserError(f"reissue_after must be a number above 1 (times a task's usual duration), or None; "
                        f"got {reissue_after!r}")

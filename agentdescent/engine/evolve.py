"""evolve(): the front door. Check what the caller passed, build the run's parts, run the loop.

What it leaves out: the loop itself (`loop`), what a diff is (strategies), how one is judged (the
optimizer step), where calls run (executors) and how results are stored (the ledger).
"""

from __future__ import annotations

import contextlib
import os
import random
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace

from pydantic import ValidationError

from agentdescent import events as ev
from agentdescent import halts
from agentdescent.agents.base import catching_strays
from agentdescent.artifacts.strategies import AppendRules, Strategy
from agentdescent.artifacts.workspace import TreeRunner
from agentdescent.config import BATCHED_WAVE, DEFAULTS, Budget, Parallelism, Policies, Settings
from agentdescent.engine import TEMPORARY_LEDGER_PREFIX, ctrl_c
from agentdescent.engine.calls.budget import Allowance
from agentdescent.engine.calls.cancel import CancelToken
from agentdescent.engine.calls.evaluation import Evaluator, RewardFn, RunFn
from agentdescent.engine.calls.executors import Executor, ThreadExecutor
from agentdescent.engine.calls.pools import make_executor
from agentdescent.engine.calls.smallest import Sizes, refusal
from agentdescent.engine.calls.stragglers import Hedger
from agentdescent.engine.loop.decisions import check_scouts
from agentdescent.engine.loop.parallel import PipelineParallel, TensorParallel
from agentdescent.engine.loop.pipeline import Pipeline
from agentdescent.engine.loop.rounds import Loop, Shape
from agentdescent.engine.loop.sampling import AcceptanceSamples, Sampler
from agentdescent.engine.loop.sharding import Shards
from agentdescent.engine.loop.stopping import StopRule, stop_rules
from agentdescent.engine.loop.validation import Validator
from agentdescent.engine.loop.worker import ProposeFn, Worker, WorkerConfig
from agentdescent.engine.persist.checkpoint import RunFiles, fingerprint
from agentdescent.engine.persist.replay import JournaledFusion
from agentdescent.engine.split import FEWEST_TASKS, split_tasks, too_few_to_train
from agentdescent.errors import Cancelled, UserError
from agentdescent.governance import Governance, Layer
from agentdescent.ledger import Ledger
from agentdescent.quoting import first_of
from agentdescent.result import EvolveResult
from agentdescent.returned import plain_callable
from agentdescent.step import Aggregator, stats
from agentdescent.step.policies import rewards_noisy
from agentdescent.types import Task
from agentdescent.usage import Usage

FINISH_GRACE_S = 10.0  # how long a finished run waits for calls still running (see `_wind_down`)


def evolve(
    tasks: Sequence[Task],
    reward: RewardFn,
    *,
    run: RunFn,
    propose: ProposeFn,
    strategy: Strategy | None = None,
    rounds: int = DEFAULTS.rounds,
    n_workers: int = DEFAULTS.n_workers,
    max_concurrency: int | None = DEFAULTS.max_concurrency,
    held_out_frac: float = DEFAULTS.held_out_frac,
    patience: int | None = DEFAULTS.patience,
    target_reward: float | None = DEFAULTS.target_reward,
    artifact_id: str = DEFAULTS.artifact_id,
    blast_radius: Mapping[str, Layer] | None = None,
    self_verify: bool = DEFAULTS.self_verify,
    cheap_eval_tasks: int | None = DEFAULTS.cheap_eval_tasks,
    budget: Budget = DEFAULTS.budget,
    parallelism: Parallelism = DEFAULTS.parallelism,
    policies: Policies | None = None,
    stop: Sequence[StopRule] = (),
    seed: int = DEFAULTS.seed,
    store: str | os.PathLike[str] | None = None,
    on_event: Callable[[ev.Event], object] | None = None,
) -> EvolveResult:
    """Improve an artifact on `tasks` and return the best held-out version.

    A round is `n_workers` worker turns: each rolls out a minibatch with `run`, scores it with
    `reward`, reflects on failures with `propose`, and hands back diffs. The aggregator admits,
    rebases, resolves, tests and commits them into a git ledger at `store` (a new temporary folder
    when None; an existing ledger continues from its head, and an interrupted run on it resumes; a
    store another run uses now is refused).
    `dev` takes every accepted step; `stable` only held-out gains, and the result is `stable`.

    The run stops after `rounds`, at `target_reward` (held-out), after `patience` rounds without a
    held-out gain, when `budget` is spent, or when a rule of `stop` says so (a `CancelToken` among
    them ends it at once, as cancelled). `max_concurrency` caps calls in flight (default: 32, or 4
    per worker past 8 workers, at most 128). `blast_radius` maps key patterns to governance layers.
    `self_verify` and `cheap_eval_tasks` say where diffs are measured before the step; `budget`,
    `parallelism` and `policies` group the rest (`agentdescent.config`). Every keyword, with a
    program for each, is in docs/evolve.md.

    A `UserError` once the rounds have begun, Ctrl-C, a full disk or a cancel stop the run: the
    result is returned with `error` set and `stop_reason` saying why, the ledger keeps every
    committed step, and what the run's calls still had running (agents' processes, HTTP requests)
    is ended (`halts`). Before the rounds begin, the same errors are raised.
    """
    strategy = strategy if strategy is not None else AppendRules()
    policies = policies or Policies()
    _check_objects(strategy=strategy, policies=policies, on_event=on_event, store=store)
    store = None if store is None else os.path.expanduser(store)
    settings = _checked_settings(
        run=run, propose=propose, reward=reward, stop=stop, rounds=rounds, n_workers=n_workers,
        max_concurrency=max_concurrency, held_out_frac=held_out_frac, patience=patience, target_reward=target_reward,
        artifact_id=artifact_id, self_verify=self_verify, cheap_eval_tasks=cheap_eval_tasks, seed=seed, budget=budget,
        parallelism=parallelism)
    budget, parallelism = settings.budget, settings.parallelism
    # the checked values from here on: "3" or 3.0 for rounds is 3, and every use below sees an int
    rounds, n_workers, max_concurrency, held_out_frac = settings.rounds, settings.n_workers, settings.max_concurrency, \
        settings.held_out_frac
    patience, target_reward, cheap_eval_tasks, seed = settings.patience, settings.target_reward, \
        settings.cheap_eval_tasks, settings.seed
    method = parallelism.method
    train, held_out = split_tasks(_checked_tasks(tasks), held_out_frac, random.Random(f"{seed}:split"))
    too_few = too_few_to_train(len(train), len(train) + len(held_out), held_out_frac, policies.acceptance)
    if too_few:
        raise UserError(too_few)
    _check_executor(parallelism.executor, [*train, *held_out], run=run, reward=reward, propose=propose)
    governance = Governance.of(strategy, blast_radius)
    _check_sizes(strategy, governance)
    shards = Shards.of(strategy, strategy.initial_state(), governance, n_workers, method.route) \
        if isinstance(method, TensorParallel) else None
    too_small = refusal(Sizes.of(policies, train=len(train), held_out=len(held_out), workers=n_workers),
                        max_calls=budget.max_calls, tasks=len(train) + len(held_out) if held_out_frac else len(train))
    if too_small:
        raise UserError(too_small)
    stats.load()  # here, on the caller's thread, where a Ctrl-C can be held off it (see stats)
    ledger = Ledger(store if store is not None else tempfile.mkdtemp(prefix=TEMPORARY_LEDGER_PREFIX))
    files = RunFiles(ledger.path)
    try:
        files.claim()  # the store is this run's alone until it returns
    except BaseException:
        ledger.close()
        raise
    usage = Usage()
    allowance = Allowance(usage, max_calls=budget.max_calls, max_tokens=budget.max_tokens)
    concurrency = max_concurrency or (BATCHED_WAVE if parallelism.batched else min(128, max(32, 4 * n_workers)))
    executor = parallelism.executor
    rollouts = method.rollouts if isinstance(method, PipelineParallel) and method.rollouts else concurrency
    def start() -> None:  # each unit, as a pool starts it: within the budget, and on the start log
        _start_call(allowance, usage, files)

    halt = halts.Halt()  # the run's calls carry it, made here or on the pools' threads made from here
    entered = halts.enter(halt)
    calls = make_executor(executor, rollouts, name="agentdescent-call", on_start=start)
    hedger = None if parallelism.reissue_after is None else Hedger(
        calls, factor=parallelism.reissue_after, capacity=calls.width, may_start=allowance.may_start,
        on_reissue=lambda: usage.add(reissued=1), on_discard=lambda: usage.add(discarded=1))
    workers = ThreadExecutor(n_workers, name="agentdescent-worker")
    pools = [workers, calls]  # what a cancel abandons and the end shuts down
    reflections = calls
    stage_pools: dict[str, Executor] = {}
    stages: list[Executor] = []
    if isinstance(method, PipelineParallel):  # reflections and verification on pools of their own
        reflections = make_executor(executor, method.reflections or n_workers, name="agentdescent-reflect",
                                    on_start=start)
        stage_pools["verify"] = make_executor(executor, method.verification or concurrency, name="agentdescent-verify",
                                              on_start=start)
        stages = [ThreadExecutor(n_workers, name=f"agentdescent-{stage}") for stage in Pipeline.STAGES]
        pools += [reflections, stage_pools["verify"], *stages]
    interrupt = CancelToken()  # what a Ctrl-C cancels too (`ctrl_c`), and a `Cancelled` on_event raised
    stop = [*stop, interrupt]
    # A rule that can fire inside a round (a CancelToken) abandons the calls in flight, till the run ends.
    forget: list[Callable[[], None]] = []
    for rule in stop:
        on_cancel = getattr(rule, "on_cancel", None)
        if callable(on_cancel):
            forget.append(on_cancel(_abandoning(pools, rule)))
    result: EvolveResult | None = None
    loop: Loop | None = None
    strays = contextlib.ExitStack()  # open till the work in flight has wound down: it may still call a model
    try:
        timeout = budget.rollout_timeout
        def noisy() -> bool | None:  # whether the run's rewards are samples, from its draws again so far
            return rewards_noisy(policies.acceptance, usage.repeated, usage.disagreed)

        evaluator = Evaluator(strategy=strategy, run=run, reward=reward, pool=calls, usage=usage, timeout=timeout,
                              journal=files.record, hedger=hedger, pools=stage_pools)
        # The step measures every diff on its own failures in its first wave, beside the fusion's
        # first probes, so workers need not first: a turn is a wave shorter, and an asynchronous
        # diff is mostly stale by its step, its worker's measure of no use there. A pipeline keeps
        # verification as a stage of its own, and `cheap_eval_tasks` verifies on other tasks.
        workers_verify = self_verify and (isinstance(method, PipelineParallel) or cheap_eval_tasks is not None)
        # a fusion model's answers are journalled: a step cut short by a kill does not pay for them twice
        fusion = JournaledFusion(inner=policies.fusion, journal=files.record_answer, answers=files.replay)
        aggregator = Aggregator(
            ledger=ledger, artifact_id=artifact_id, governance=governance, policies=replace(policies, fusion=fusion),
            train=train, score=evaluator.score, lag_budget=parallelism.lag_budget, oracle=held_out,
            approve=policies.approve,
            known=evaluator.known, again=evaluator.again, drawn=lambda: (usage.repeated, usage.disagreed),
            draws=evaluator.draws, errors=evaluator.errors,
            verify_contested=self_verify,
        )
        worker = Worker(
            strategy=strategy, propose=propose, evaluator=evaluator, calls=reflections, proposal=policies.proposal,
            config=WorkerConfig(artifact_id=artifact_id, self_verify=workers_verify, cheap_eval_tasks=cheap_eval_tasks,
                                timeout=timeout),
            shards=shards, journal=files.record_answer, answers=files.replay,
            noisy=noisy,
        )
        pipeline = Pipeline(worker, stages=stages, depth=method.depth) if isinstance(method, PipelineParallel) else None
        loop = Loop(
            ledger=ledger, artifact_id=artifact_id, strategy=strategy, held_out=held_out, evaluator=evaluator,
            aggregator=aggregator, worker=worker, pool=workers,
            sampler=Sampler(policy=policies.task_sampler, train=train, seed=seed, scouts=policies.proposal.scouts,
                            shards=shards),
            samples=AcceptanceSamples(policy=policies.acceptance, train=train, seed=seed),
            validator=Validator(evaluator=evaluator, held_out=held_out, train=train,
                                schedule=policies.validation, promotion=policies.promotion, target=target_reward,
                                noisy=noisy, calibration=getattr(policies.acceptance, "calibration", 0),
                                # train draws at the start only where no cap is there for them to use up
                                batched=parallelism.batched,
                                calibrate_train=parallelism.batched and budget.max_calls is None),
            shape=Shape(rounds=rounds, n_workers=n_workers, asynchronous=parallelism.asynchronous, seed=seed,
                        batched=parallelism.batched),
            stop_rules=[*stop_rules(target_reward=target_reward, patience=patience, budget=allowance), *stop],
            allowance=allowance,
            emit=on_event or (lambda event: None), files=files, temporary=store is None,
            before_step_call=start, cancel=interrupt.cancel,
            pipeline=pipeline, shards=shards,
            fingerprint=fingerprint(artifact_id=artifact_id, strategy=strategy, seed=seed, train=train, held_out=held_out),
        )
        # a model call on a thread `run` started finds no meter: counted on the run all the same (`agents.base`)
        strays.enter_context(catching_strays(usage.count_stray, missed=usage.miss_stray))
        with ctrl_c.caught(interrupt), halts.active(halt):
            _load(calls, interrupt, run=run, reward=reward, propose=propose)
            result = loop.run()
    finally:
        finished = result is not None and result.error is None
        if hedger is not None:
            hedger.close()
        left = _wind_down(pools, wait=finished)  # a stopped run does not wait for work still in flight
        strays.close()  # and only then is the bill settled: while a catcher is open, its run counts what it catches
        usage.settle(files.starts.count)  # what was started and never recorded was paid for all the same
        if result is None and loop is not None:  # raised: no result carries the bill, so the last event does
            loop.heartbeat.tell()
        if not finished:  # after the bill: a call ended here stays abandoned, not a failed rollout
            halt(f"the stop of the run it is part of ({result.stop_reason if result is not None else 'an error'})")
        halts.leave(entered)
        files.close()
        ledger.close()
        for forgotten in forget:
            if callable(forgotten):
                forgotten()
        if isinstance(run, TreeRunner):  # its idle workspaces, kept for the run's next rollouts, go with it
            run.close()
    if finished and left and result is not None:  # a stopped run leaves its calls by design
        result.warnings.append(
            f"{left} call{'s were' if left > 1 else ' was'} still running {FINISH_GRACE_S:g} s after the run ended "
            "(a straggler's losing attempt: the other had answered) and left to finish alone; usage counts "
            f"{'each' if left > 1 else 'it'} as a call (abandoned), not what {'they spend' if left > 1 else 'it spends'} "
            "in tokens")
    if result is not None and usage.unattributed:
        result.warnings.append(_unattributed(usage.unattributed))
    return result


def _abandoning(pools: Sequence[Executor], rule: StopRule) -> Callable[[], None]:
    """What a stop rule that fired calls: every pool abandons its calls in flight, for the rule's reason."""
    def abandon() -> None:
        for pool in pools:
            pool.abandon(Cancelled(getattr(rule, "reason", "")))
    return abandon


def _unattributed(calls: int) -> str:
    return (f"{calls} model call{'s' if calls > 1 else ''} made on threads the run did not start (where no meter is) "
            "went on no run's bill and under no budget: another evolve() was running in this process at the time, "
            "and such a call cannot tell which run it served. Hand a thread its work with "
            "contextvars.copy_context().run (pool.submit(contextvars.copy_context().run, fn, *args)), which carries "
            "the rollout's meter along, or run one evolve() at a time in a process")


def _load(pool: Executor, interrupt: CancelToken, **callables: object) -> None:
    """Load the callables where `pool` runs them (`Executor.load`): one that cannot load there is a
    `UserError` now, before any call; a cancel or a Ctrl-C meanwhile is the loop's to report."""
    try:
        pool.load(**callables)
    except KeyboardInterrupt:
        interrupt.cancel(ctrl_c.CTRL_C)
    except Cancelled:
        pass


def _start_call(allowance: Allowance, usage: Usage, files: RunFiles) -> None:
    """A unit of work, or a model call the step makes itself, as it starts: within the budget (or
    `BudgetSpent`), and on the start log before it runs, unless the run has returned."""
    allowance.take()
    usage.start(files.starts.mark)


def _wind_down(pools: Sequence[Executor], *, wait: bool) -> int:
    """Shut the pools down. A finished run waits for the calls still running (a straggler's losing
    attempt: its answer is thrown away, its spend counted), for `FINISH_GRACE_S` in all: one that
    hangs for good must not keep evolve from returning, nor does a Ctrl-C meanwhile lose the result
    (the wait ends there). How many calls were left running."""
    deadline = time.monotonic() + FINISH_GRACE_S
    pools = pools[::-1]  # the first made, which may have started a Ray cluster the others use, goes last
    try:
        return sum(pool.shutdown(wait=wait, timeout=max(0.0, deadline - time.monotonic())) for pool in pools)
    except KeyboardInterrupt:
        return sum(pool.shutdown(wait=False, timeout=0.0) for pool in pools)


def _checked_tasks(tasks: Sequence[Task]) -> list[Task]:
    """The tasks as a list, or a `UserError`: the seed splits them by their order, so it must be theirs."""
    fix = ("[task]" if isinstance(tasks, Task) else "list(tasks.values())" if isinstance(tasks, Mapping)
           else "sorted(tasks, key=lambda t: t.id)" if isinstance(tasks, (set, frozenset))
           else "a list" if isinstance(tasks, (str, bytes)) or not isinstance(tasks, Iterable) else None)
    if fix is not None:
        raise UserError(f"tasks must be a list of Task objects (in an order of yours: the seed splits them by it); got "
                        f"{type(tasks).__name__}: pass {fix}")
    tasks = list(tasks)
    wrong = [t for t in tasks if not isinstance(t, Task)]
    if wrong:
        raise UserError(f"tasks must be Task objects; got {type(wrong[0]).__name__}. Build them with Task(id=..., prompt=...)")
    if len(tasks) < FEWEST_TASKS:
        raise UserError(f"evolve needs at least {FEWEST_TASKS} tasks (some to train on, some held out); got {len(tasks)}")
    dupes = sorted(id_ for id_, n in Counter(t.id for t in tasks).items() if n > 1)
    if dupes:
        raise UserError(f"task ids must be unique; repeated: {', '.join(dupes[:5])}. Give each task its own id")
    return tasks


def _check_executor(executor: str, tasks: Sequence[Task], **callables: object) -> None:
    """The callables and tasks a process or Ray executor sends away must travel: say which does
    not, up front."""
    if executor == "process":
        from agentdescent.engine.calls.processes import check_picklable, check_tasks
        check_picklable(**callables)
        check_tasks(tasks)
    elif executor == "ray":
        from agentdescent.engine.calls.processes import check_tasks
        from agentdescent.engine.calls.ray_cluster import check_serializable, ray_module
        check_serializable(**callables)
        check_tasks(tasks, executor="ray", dumps=ray_module().cloudpickle.dumps)


def _check_sizes(strategy: Strategy, governance: Governance) -> None:
    """A `UserError` naming the files (or keys) a run may change that hold more than a change may
    leave in one, with the fix: every diff to one would be invalid, and the run spend its budget."""
    too_big = governance.too_big(strategy.initial_state())
    if not too_big:
        return
    named = first_of([f"{governance.named(key)} ({size:,} bytes)" for key, size in too_big], 3)
    them = "it" if len(too_big) == 1 else "them"
    fix = (f"leave {them} out of the run (load_tree(..., exclude=[...])), freeze {them} (FileTree(..., frozen=[...])) "
           f"or make {them} smaller" if strategy.folder else "start from a smaller text, or keep the text whole and "
           "learn rules below it with strategy=AppendRules.under(text)")
    raise UserError(f"no change could be made to {named}: over the {governance.max_bytes_per_key:,} bytes one file "
                    f"may hold (agentdescent.governance.MAX_FILE_BYTES); {fix}")


def _check_objects(*, strategy: object, policies: object, on_event: object, store: object) -> None:
    """The options that are objects of ours or the caller's, checked before anything is built."""
    if not all(hasattr(strategy, name) for name in ("initial_state", "render", "frozen")):
        raise UserError(f"strategy must be a strategy object, such as AppendRules() or FileTree(files); got "
                        f"{str(strategy)[:60]!r} ({type(strategy).__name__})")
    if not isinstance(policies, Policies):
        raise UserError(f"policies must be Policies(...) (agentdescent.Policies, every decision with its default); got "
                        f"{type(policies).__name__}")
    check_scouts(policies.proposal, getattr(policies.proposal, "scouts", None))  # a proposal policy of the caller's too
    if on_event is not None and not callable(on_event):
        raise UserError(f"on_event must be a callable that takes each event, or None; got {type(on_event).__name__}")
    if store is not None and (not isinstance(store, (str, os.PathLike)) or not os.fspath(store).strip()):
        raise UserError(f"store must be the path of a ledger folder (made when new), or None for a temporary one; got "
                        f"{store!r}")


def _checked_settings(*, run: object, propose: object, reward: object, stop: Sequence[object],
                      **values: object) -> Settings:
    """`evolve`'s options as `Settings`, checked: a `UserError` naming each that is wrong."""
    for name, fn in (("run", run), ("propose", propose), ("reward", reward)):
        plain_callable(fn, name)
    if (callable(stop) or isinstance(stop, (str, bytes)) or not isinstance(stop, Iterable)
            or not all(callable(rule) for rule in stop)):
        raise UserError(f"stop must be a list of stop rules (callables of progress and usage), such as [token], or () "
                        f"for none (the default); got {str(stop)[:80]}")
    try:
        return Settings.model_validate(values)
    except ValidationError as exc:
        said = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}={e.get('input')!r}: "
                         f"{e['msg'].removeprefix('Value error, ')}" for e in exc.errors()[:5])
        raise UserError(f"evolve() cannot run with these options: {said}") from None

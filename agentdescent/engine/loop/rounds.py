"""The training loop of one run: worker turns dispatched, collected at the barrier, stepped, validated.

Synchronous and asynchronous runs are the same loop with a different barrier: the loop keeps
worker turns in flight, their reports land in a buffer, and the barrier says when the
aggregator drains it. Synchronous: after every worker of the round is back (data-parallel with
all-reduce). Asynchronous: as soon as any report is in; the freed worker pulls the newest
snapshot at once, the lag budget bounds how stale an admitted diff may be, and no step waits on
a held-out measurement (`Measurements.later`).

What it leaves out: what a diff is (strategies), how one is judged (the optimizer step), where
calls run (executors) and how results are stored (the ledger).
"""

from __future__ import annotations

import random
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agentdescent import events as ev
from agentdescent.agents.base import ModelUsage, before_each_call, metering
from agentdescent.artifacts.state import State
from agentdescent.artifacts.strategies import Strategy, kind_of
from agentdescent.engine.calls.budget import Allowance, BudgetSpent
from agentdescent.engine.calls.evaluation import Evaluator
from agentdescent.engine.calls.executors import Executor
from agentdescent.engine.loop import stopping
from agentdescent.engine.loop.dispatch import Dispatcher
from agentdescent.engine.loop.heartbeat import Heartbeat, serialized
from agentdescent.engine.loop.pipeline import Pipeline
from agentdescent.engine.loop.sampling import AcceptanceSamples, Sampler
from agentdescent.engine.loop.sharding import Shards
from agentdescent.engine.loop.stopping import STOPS, FailureWatch, NothingWorked, Progress, StopRule, ended, stop_reason
from agentdescent.engine.loop.validation import Measurements, Validator
from agentdescent.engine.loop.worker import Turn, Worker, WorkerReport
from agentdescent.engine.persist.checkpoint import Checkpoint, RunFiles
from agentdescent.engine.persist.resume import position, resumable, seed_artifact, take_up
from agentdescent.errors import Cancelled
from agentdescent.ledger import Ledger
from agentdescent.result import EvolveResult, StepRecord
from agentdescent.step import Aggregator
from agentdescent.types import Diff, Outcome, Task


@dataclass(frozen=True, kw_only=True)
class Shape:
    """How the run is laid out: how many rounds and workers, and whether a round waits for all."""

    rounds: int
    n_workers: int
    asynchronous: bool
    seed: int
    batched: bool = False  # each wave a round trip: a held-out measurement goes beside the next round's rollouts


@dataclass(kw_only=True)
class Loop:
    """One run: dispatches worker turns, collects them at the barrier, steps and validates."""

    ledger: Ledger
    artifact_id: str
    strategy: Strategy
    held_out: list[Task]
    evaluator: Evaluator
    aggregator: Aggregator
    worker: Worker
    pool: Executor
    sampler: Sampler
    samples: AcceptanceSamples
    validator: Validator
    shape: Shape
    stop_rules: Sequence[StopRule]
    emit: Callable[[ev.Event], object]
    files: RunFiles
    fingerprint: str
    pipeline: Pipeline | None = None  # parallel="pp": a turn's stages on pools of their own
    shards: Shards | None = None  # parallel="tp": each worker's keys, and where tasks go
    temporary: bool = False  # the ledger is a temporary folder of this run's own
    before_step_call: Callable[[], None] = lambda: None  # asked before each model call the step makes itself
    cancel: Callable[[str], None] = lambda reason: None  # stops the run at once, from any thread: its own CancelToken's
    allowance: Allowance | None = None  # the run's budget: the rounds leave what measuring the last commits takes
    history: list[StepRecord] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress)
    failing: FailureWatch = field(default_factory=FailureWatch)  # no round, nor the held-out start, may all fail

    def __post_init__(self) -> None:
        self.emit = serialized(self.emit, self.warnings.append, self.cancel)  # the heartbeat's thread sends events too
        self.heartbeat = Heartbeat(self.evaluator.usage, self.emit, started=self.files.starts.count)  # the bill, told while it grows
        start = self.pipeline.start if self.pipeline is not None else (lambda turn: self.pool.submit(self.worker.work, turn))
        self.dispatcher = Dispatcher(start=start, make_turns=self._turns)
        if self.pipeline is not None and self.shape.asynchronous:
            self.pipeline.refill = self.dispatcher.dispatch
        # An asynchronous run: the workers whose reports a step took go on (a pipeline starts each when it has room).
        self._restart = self.pipeline.collected if self.pipeline is not None else self.dispatcher.dispatch
        self._next_round = 0  # the first round not yet done: where a resumed run goes on
        self._dealt: dict = {"turns": 0, "leads": [], "routes": {}}  # where it is dealt from (`_round_done`)
        self.measured = Measurements(validator=self.validator, state_of=self._state, promote=self.ledger.promote,
                                     stable=self.ledger.stable, emit=self.emit, progress=self.progress, warn=self._warn)

    def run(self) -> EvolveResult:
        existed = self.ledger.has_artifact(self.artifact_id, self.ledger.head())
        head = seed_artifact(self.ledger, self.artifact_id, self.strategy)
        saved, notes = resumable(self.files, kind_of(self.strategy), self.fingerprint)
        self.measured.start = (self.ledger.stable(), None)  # not measured yet
        if saved is None:
            self.files.reset()
        recovered = self._resume(saved) if saved is not None else []
        kept: Counter[str] = Counter(o.kind for o in self.outcomes[: len(self.outcomes) - len(recovered)])
        usage = self.evaluator.usage
        self.emit(ev.RunStarted(
            rounds=self.shape.rounds, n_workers=self.shape.n_workers, train=len(self.sampler.train),
            held_out=len(self.held_out), version=head, ledger=str(self.ledger.path), temporary=self.temporary,
            continued_from=head if existed and saved is None else None,
            resumed_round=self._next_round if saved is not None else None, outcomes=dict(kept),
            calls=usage.calls, tokens=usage.tokens, estimated_tokens=usage.estimated_tokens))
        for note in notes:
            self._warn(note)
        for outcome in recovered:
            self.emit(ev.DiffOutcome(round=outcome.step or 0, outcome=outcome))
        self.heartbeat.start()
        try:
            return self._run(head)
        finally:
            self.heartbeat.stop()

    def _run(self, head: int) -> EvolveResult:
        try:  # a broken contract before the rounds begin is raised; a cancel is a cancelled run
            start, initial = self.measured.start  # where the run starts from (round -1: before any)
            again = initial is not None  # measured by an earlier process of the run
            if initial is None:
                initial = self._begin()
            self.emit(ev.Evaluated(round=-1, version=start, held_out_reward=initial, promoted=False,
                                   best_reward=self.progress.best, again=again))
        except Cancelled as exc:
            return self._result(*stopping.cancelled(exc, " before the first round"))
        except BudgetSpent as exc:
            return self._result(f"stopped before the first round: {exc}", None)
        except NothingWorked as exc:
            return self._result(f"stopped before the first round: {exc}", str(exc), warn=False)
        except KeyboardInterrupt:
            return self._result("interrupted (Ctrl-C) before the first round", "interrupted")
        if self.allowance is not None:  # what measuring the last commits at the end takes is not the rounds' to spend
            self.allowance.keep(len(self.held_out))
        reason, error, warn = "", None, True
        try:
            if head != self.ledger.stable():
                self.measured.now(head, round_=-1)
            reason = self._rounds(self._next_round)
        except BudgetSpent as exc:  # a cap, not an error: keep what was committed, and tell what turns in flight made
            reason = f"stopped: {exc}; every commit so far is kept"
            self._abandon(self._next_round, reason)
        except STOPS as exc:  # a broken contract, Ctrl-C, a cancel, a full disk: stop, keep what was done
            reason, error, warn = ended(exc)
        if error is None:  # the last commits are measured before the run ends, with what the budget kept back
            try:
                self.measured.last(self.ledger.head(), self._next_round - 1, self.history, release=self._release)
            except BudgetSpent:
                pass  # not even that sufficed: the result says which version is unmeasured
            except STOPS as exc:
                reason, error, warn = ended(exc)
        self.measured.settle(wait=error != "interrupted")  # Ctrl-C does not wait: the pools' shutdown cancels it
        return self._result(reason, error, warn=warn)

    def _release(self) -> None:
        if self.allowance is not None:
            self.allowance.release()

    def _result(self, reason: str, error: str | None, *, warn: bool = True) -> EvolveResult:
        start, initial = self.measured.start
        stable, head = self.ledger.stable(), self.ledger.head()
        state = self.ledger.snapshot(self.artifact_id, stable)
        final = None if initial is None else self.measured.final(self._state(stable), measure=error is None)
        if final is not None:  # set beside the end's figure (one measurement, or the start's errors run again), and saved below
            initial = self.measured.initial(stable=stable, final=final, measure=error is None)
        usage = self.evaluator.usage
        unmeasured = head if head != stable and head != self.measured.validated and initial is not None else None
        if warn:  # a run stopped because nothing worked says so in its error
            self._warn_if(stopping.all_failed(usage, self.warnings))
        try:
            self._save(finished=error is None, stop_reason=reason)
        except OSError:
            pass  # a full disk: the last checkpoint stands, and the ledger holds every commit
        if unmeasured is not None:  # told after the checkpoint: a resumed run measures that version first
            self._warn(stopping.unmeasured(head, stable, str(self.ledger.path), error))
        self.heartbeat.stop()  # its last word comes before the end
        self.emit(ev.RunEnded(reason=reason, final_reward=final))
        initial_state = self.ledger.snapshot(self.artifact_id, start)
        return EvolveResult(
            rendered=self.strategy.render(state), state=state, final_reward=final, initial_reward=initial,
            history=self.history, ledger_path=self.ledger.path, outcome_list=self.outcomes, usage=usage,
            stop_reason=reason, error=error, version=stable, initial_version=start, initial_state=initial_state,
            initial_rendered=self.strategy.render(initial_state), frozen=tuple(self.strategy.frozen),
            warnings=list(self.warnings), final_margin=None if final is None else self.validator.margin(state),
            unmeasured=unmeasured, left_out=tuple(getattr(self.strategy, "left_out", None) or ()),
        )

    def _begin(self) -> float:
        """Measure where the run starts, checkpointed before and after: a kill during it resumes
        this run (its rollouts journalled, its calls on its bill), not a new one that forgets them.
        When every rollout of it failed, the run stops (`NothingWorked`) unmeasured: a resume
        measures again (failed rollouts are never journalled, so they run anew). What it measured."""
        self._save(finished=False)
        start = self.measured.start[0]
        self.failing.watch(self.evaluator.usage)
        reward = self.validator.start(self._state(start))
        self.failing.check(self.evaluator.usage, "the held-out measurement at the start")
        self.measured.tell_errors(self._state(start), "at the start")
        self.measured.start = (start, reward)
        self.progress.best, self.measured.validated = reward, start
        self._done(-1)  # the start, before round 0
        return reward

    def _resume(self, saved: Checkpoint) -> list[Outcome]:
        """Take up an interrupted run where its checkpoint left it (`resume.take_up`); the outcomes
        of the rounds that committed after it."""
        self.measured.start = (saved.initial_version, saved.initial_reward)
        self.progress.best, self.progress.since_gain = saved.best, saved.since_gain
        self.sampler.restore(saved.leads)
        if self.shards is not None:
            self.shards.restore(saved.routes)
        tasks = {t.id: t for t in [*self.sampler.train, *self.held_out]}
        if self.allowance is not None and saved.initial_reward is not None:  # the rollouts left in flight are the rounds'
            self.allowance.keep(len(self.held_out))
        recovered = take_up(self.files, saved, evaluator=self.evaluator, tasks=tasks, ledger=self.ledger)
        self.history = [*saved.history, *recovered.history]
        self.outcomes, self.warnings = [*recovered.kept, *recovered.outcomes], list(saved.warnings)
        self.aggregator.declined.update(saved.declined)
        self.worker.memory.restore(saved.refused)
        self.dispatcher.skip(saved.turns + recovered.rounds * self.shape.n_workers)  # what those rounds dispatched
        self._next_round = recovered.next_round
        self._round_done(self.files.journalled if recovered.rounds else saved.dealt_after)
        return recovered.outcomes

    def _done(self, round_: int) -> None:
        self._next_round = round_ + 1
        self._round_done(self.files.journalled)
        self._save(finished=False)

    def _round_done(self, dealt_after: int | None) -> None:
        """Keep where the next round is dealt from: what a checkpoint saved in it holds, to deal it again as it was."""
        self._dealt = {"turns": self.dispatcher.turns, "leads": self.sampler.leads, "dealt_after": dealt_after,
                       "routes": self.shards.routes if self.shards is not None else {}}

    def _save(self, *, finished: bool, stop_reason: str | None = None) -> None:
        start, initial = self.measured.start
        self.files.save(position(
            self.files, self.evaluator, fingerprint=self.fingerprint, strategy=kind_of(self.strategy),
            finished=finished, stop_reason=stop_reason, next_round=self._next_round, **self._dealt, refused=self.worker.memory.held(),
            best=self.progress.best, since_gain=self.progress.since_gain, initial_reward=initial, initial_version=start,
            history=self.history, outcomes=self.outcomes, warnings=self.warnings, declined=self.aggregator.declined))
        self.files.save_queue(self.evaluator.in_flight())

    def _warn(self, message: str) -> None:
        self.warnings.append(message)
        self.emit(ev.Warned(message=message))

    def _warn_if(self, warning: str | None) -> None:
        if warning:
            self._warn(warning)

    def _rounds(self, first: int) -> str:
        """Synchronous: every round dispatches all workers and waits for all of them.
        Asynchronous: a round aggregates whatever has come back, and each worker it collected
        starts its next turn at once on the newest snapshot, while the step runs (a worker that ran
        ahead of the aggregator would make diffs on a snapshot about to change: duplicates). A tp
        worker starts again once the step is done: only its own diffs change its shard."""
        rounds, asynchronous = self.shape.rounds, self.shape.asynchronous
        usage = self.evaluator.usage
        for round_ in range(first, rounds):
            self.measured.take(self.history, wait=False)
            stop = self._stop_reason(round_)
            if stop:
                self._abandon(round_, stop)
                return stop
            self.emit(ev.RoundStarted(round=round_, version=self.ledger.head()))
            self.failing.watch(usage)
            if round_ == first or not asynchronous:
                self.dispatcher.dispatch(range(self.shape.n_workers))
            last = round_ == rounds - 1
            if last and self.pipeline is not None:
                self.pipeline.close()  # no turn starts that the last step would not take
            reports = self._collect(round_, wait_all=last or not asynchronous)
            slots = [r.turn.slot for r in reports] if asynchronous and not last else []
            if slots and self.shards is None:  # the workers back start again now, not when the step is done
                self._restart(slots)
            self._step(round_, reports)
            if slots and self.shards is not None:
                self._restart(slots)  # after: a shard's keys change only by its own worker's diffs
            self._warn_if(stopping.all_failed(usage, self.warnings))
            self._done(round_)
            self.emit(ev.RoundEnded(round=round_, calls=usage.calls))
            self._warn_if(self.failing.check_round(usage, round_, first))  # the round is recorded as done: a resume takes the next
            self.failing.check_reflections([o for o in self.outcomes if o.step == round_], round_, first)
        return stop_reason(self.stop_rules, self.progress, usage) or f"ran all {rounds} rounds"

    def _turns(self, slots: Sequence[int], first: int) -> list[Turn]:
        """A turn of each worker of `slots` on the newest snapshot, numbered from `first`, each
        with its own minibatch."""
        head = self.ledger.head()
        state = self.ledger.snapshot(self.artifact_id, head)
        deals = self.sampler.deal(slots, first, self.evaluator.known(state))
        # a batched synchronous round's turns reflect together: the host's helpers get one wave of them
        meets = self.shape.batched and not self.shape.asynchronous and self.pipeline is None and len(slots) > 1
        together = threading.Barrier(len(slots)) if meets else None
        return [Turn(slot=slot, version=head, state=state, batch=deal.batch, spares=deal.spares,
                     rng=random.Random(f"{self.shape.seed}:turn:{first + i}"), together=together)
                for i, (slot, deal) in enumerate(zip(slots, deals))]

    def _abandon(self, round_: int, reason: str) -> None:
        """The run is stopping: turns still in flight finish, and their diffs get an outcome."""
        if self.pipeline is not None:
            self.pipeline.close()
        reports = self.dispatcher.drain()
        self._unjudged(round_, [o.model_copy(update={"step": round_}) for r in reports for o in r.outcomes],
                       [d for r in reports for d in r.diffs], f"the run stopped before this diff was aggregated: {reason}")

    def _step(self, round_: int, reports: list[WorkerReport]) -> None:
        for state in {id(r.turn.state): r.turn.state for r in reports}.values():
            self.sampler.note(self.evaluator.known(state))
        try:
            self._judge(round_, reports)
        finally:
            for r in reports:
                self.sampler.release([*r.turn.batch, *(t for spare in r.turn.spares for t in spare)])

    def _judge(self, round_: int, reports: list[WorkerReport]) -> None:
        diffs: list[Diff] = [d for r in reports for d in r.diffs]
        early: list[Outcome] = [o.model_copy(update={"step": round_}) for r in reports for o in r.outcomes]
        try:  # the calls the step makes here itself (a fusion model, say) are the run's calls too
            with metering(ModelUsage()) as meter, before_each_call(self.before_step_call):
                report = self.aggregator.step(diffs, round_, sample=self.samples.of(self.ledger.head()))
        except BudgetSpent as spent:
            self._unjudged(round_, early, diffs, f"the run stopped before this diff was judged: {spent}")
            raise
        finally:
            self.evaluator.usage.count_step(meter.spent())
        by_id, told = {d.id: d for d in diffs}, early + report.outcomes
        self.outcomes += told
        landed = tuple(o.diff_id for o in report.outcomes if o.version is not None)
        if self.shards is not None:  # what fixed a task is where it goes next
            self.shards.learn_from([by_id[d] for d in landed if d in by_id])
        record = StepRecord.of(report, round_=round_, outcomes=told, diffs=diffs, held_out=None, promoted=False,
                               usage=self.evaluator.usage)
        self.history.append(record)
        self.worker.memory.judged(told, by_id)  # told to later reflections, and saved with the round
        self._done(round_)  # the step is over, its commit (if any) in: the round is done, saved before anything else
        for outcome in told:
            self.emit(ev.DiffOutcome(round=round_, outcome=outcome, diff=by_id.get(outcome.diff_id)))
        if report.version is not None:
            self.emit(ev.Committed(round=round_, version=report.version, diff_ids=landed))
        head = self.ledger.head()
        if head != self.measured.validated and not self.measured.busy and self.validator.due(
                self._state(head), leads=len(self.sampler.leads)):
            if self.shape.asynchronous or self.shape.batched:
                self.measured.later(head, round_)
            else:
                record.held_out, record.promoted = self.measured.now(head, round_)
        else:
            self.progress.since_gain += 1

    def _stop_reason(self, round_: int) -> str | None:
        """Why the run stops before `round_`; patience is asked only once dev's last commits are measured."""
        usage, head = self.evaluator.usage, self.ledger.head()
        stop = stop_reason(self.stop_rules, self.progress, usage)
        if stop and any(getattr(rule, "after_measuring", False) for rule in self.stop_rules):
            self.measured.take(self.history, wait=True)
            if head != self.measured.validated:
                self.measured.now(head, round_ - 1)
            stop = stop_reason(self.stop_rules, self.progress, usage)
        return stop

    def _collect(self, round_: int, *, wait_all: bool) -> list[WorkerReport]:
        """The round's reports; when a turn ran out of budget, its diffs and theirs get an outcome and the run stops."""
        reports = self.dispatcher.collect(wait_all=wait_all)
        spent = next((r.spent for r in reports if r.spent), None)
        if spent is None:
            return reports
        early = [o.model_copy(update={"step": round_}) for r in reports for o in r.outcomes]
        self._unjudged(round_, early, [d for r in reports for d in r.diffs],
                       f"the run stopped before this diff was judged: {spent}")
        raise BudgetSpent(spent)

    def _unjudged(self, round_: int, early: list[Outcome], diffs: list[Diff], reason: str) -> None:
        """Outcomes for a round the budget ended before its step: what the workers said, and each diff unjudged."""
        for outcome in early:
            self.outcomes.append(outcome)
            self.emit(ev.DiffOutcome(round=round_, outcome=outcome))
        for diff in diffs:
            outcome = Outcome(diff_id=diff.id, kind="unjudged", step=round_, author=diff.author, reason=reason)
            self.outcomes.append(outcome)
            self.emit(ev.DiffOutcome(round=round_, outcome=outcome, diff=diff))

    def _state(self, version: int) -> State:
        return self.ledger.snapshot(self.artifact_id, version)


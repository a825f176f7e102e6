"""The training loop of one run: worker turns dispatched, collected at the barrier, stepped, validated.

Synchronous and asynchronous runs are the same loop with a different barrier: the loop keeps
worker turns in flight, their reports land in a buffer, and the barrier says when the
aggregator drains it. Synchronous: after every worker of the round is back (data-parallel with
all-reduce). Asynchronous: as soon as any report is in; the freed worker pulls the newest
snapshot at once, and the lag budget bounds how stale an admitted diff may be.

What it leaves out: what a diff is (strategies), how one is judged (the optimizer step), where
calls run (executors) and how results are stored (the ledger).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from agentdescent import events as ev
from agentdescent.agents.base import ModelUsage, metering
from agentdescent.artifacts.strategies import Strategy
from agentdescent.engine.dispatch import Dispatcher
from agentdescent.engine.evaluation import Evaluator
from agentdescent.engine.executors import Executor
from agentdescent.engine.sampling import AcceptanceSamples, Sampler
from agentdescent.engine.stopping import Progress, StopRule, stop_reason
from agentdescent.engine.worker import Turn, Worker, WorkerReport
from agentdescent.errors import HeadMoved, UserError
from agentdescent.ledger import Ledger
from agentdescent.result import EvolveResult, StepRecord
from agentdescent.step import Aggregator, StepReport
from agentdescent.step.policies import PromotionPolicy
from agentdescent.types import Diff, Outcome, Task


@dataclass(frozen=True, kw_only=True)
class Shape:
    """How the run is laid out: how many rounds and workers, and whether a round waits for all."""

    rounds: int
    n_workers: int
    asynchronous: bool
    seed: int


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
    promotion: PromotionPolicy
    shape: Shape
    stop_rules: Sequence[StopRule]
    emit: Callable[[ev.Event], None]
    history: list[StepRecord] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    progress: Progress = field(default_factory=Progress)

    def __post_init__(self) -> None:
        self.dispatcher = Dispatcher(pool=self.pool, work=self.worker.work, make_turns=self._turns)

    def run(self) -> EvolveResult:
        head = seed_artifact(self.ledger, self.artifact_id, self.strategy)
        self.emit(ev.RunStarted(rounds=self.shape.rounds, n_workers=self.shape.n_workers,
                                train=len(self.sampler.train), held_out=len(self.held_out), version=head,
                                ledger=str(self.ledger.path)))
        start = self.ledger.stable()
        initial = self.progress.best = self._held_out(start)
        if head != start:
            self._validate(head, round_=-1)
        error = None
        try:
            reason = self._rounds()
        except UserError as exc:  # the caller's contract broken mid-run: stop, keep what was done
            reason, error = f"stopped by an error: {exc}", str(exc)
        except KeyboardInterrupt:
            reason, error = "interrupted (Ctrl-C)", "interrupted"
        finally:
            self.dispatcher.stop()  # whatever ended the run, no worker starts another turn
        stable = self.ledger.stable()
        state = self.ledger.snapshot(self.artifact_id, stable)
        final = self._final_reward(stable, measure=error is None)
        self.emit(ev.RunEnded(reason=reason, final_reward=final))
        return EvolveResult(
            rendered=self.strategy.render(state), state=state, final_reward=final, initial_reward=initial,
            history=self.history, ledger_path=self.ledger.path, outcome_list=self.outcomes, usage=self.evaluator.usage,
            stop_reason=reason, error=error, version=stable, initial_version=start,
            initial_state=self.ledger.snapshot(self.artifact_id, start), frozen=tuple(self.strategy.frozen),
        )

    def _rounds(self) -> str:
        """Synchronous: every round dispatches all workers and waits for all of them.
        Asynchronous: workers are dispatched once and each re-dispatches itself on the newest
        snapshot the moment it finishes; a round aggregates whatever has come back."""
        rounds, asynchronous = self.shape.rounds, self.shape.asynchronous
        usage = self.evaluator.usage
        for round_ in range(rounds):
            stop = stop_reason(self.stop_rules, self.progress, usage)
            if stop:
                self._abandon(round_, stop)
                return stop
            self.emit(ev.RoundStarted(round=round_, version=self.ledger.head()))
            calls, tokens = usage.calls, usage.tokens
            if round_ == 0 or not asynchronous:
                self.dispatcher.dispatch(self.shape.n_workers, redispatch=asynchronous)
            last = round_ == rounds - 1
            if last:
                self.dispatcher.stop()
            self._step(round_, self.dispatcher.collect(wait_all=last or not asynchronous))
            self.progress.round_calls, self.progress.round_tokens = usage.calls - calls, usage.tokens - tokens
            self.emit(ev.RoundEnded(round=round_, calls=usage.calls))
        return stop_reason(self.stop_rules, self.progress, usage) or f"ran all {rounds} rounds"

    def _turns(self, count: int, first: int) -> list[Turn]:
        """`count` turns on the newest snapshot, numbered from `first`, each with its own minibatch."""
        head = self.ledger.head()
        state = self.ledger.snapshot(self.artifact_id, head)
        deals = self.sampler.deal(count, first, self.evaluator.known(state))
        sample, seed = self.samples.of(head), self.shape.seed
        return [
            Turn(worker=f"w{(first + i) % self.shape.n_workers}", version=head, state=state, batch=deal.batch,
                 spares=deal.spares, sample=sample, rng=random.Random(f"{seed}:turn:{first + i}"))
            for i, deal in enumerate(deals)
        ]

    def _abandon(self, round_: int, reason: str) -> None:
        """The run is stopping: turns still in flight finish, and their diffs get an outcome."""
        for report in self.dispatcher.drain():
            for diff in report.diffs:
                outcome = Outcome(diff_id=diff.id, kind="dropped_stale", step=round_, author=diff.author,
                                  reason=f"the run stopped before this diff was aggregated: {reason}")
                self.outcomes.append(outcome)
                self.emit(ev.DiffOutcome(round=round_, outcome=outcome))

    def _step(self, round_: int, reports: list[WorkerReport]) -> None:
        for state in {id(r.turn.state): r.turn.state for r in reports}.values():
            self.sampler.note(self.evaluator.known(state))
        diffs: list[Diff] = [d for r in reports for d in r.diffs]
        early: list[Outcome] = [o.model_copy(update={"step": round_}) for r in reports for o in r.outcomes]
        with metering(ModelUsage()) as meter:  # calls the step makes here itself (a fusion model, say)
            report = self.aggregator.step(diffs, round_, sample=self.samples.of(self.ledger.head()))
        self.evaluator.usage.model.add_spend(meter.spent())
        for outcome in early + report.outcomes:
            self.outcomes.append(outcome)
            self.emit(ev.DiffOutcome(round=round_, outcome=outcome))
        held_out, promoted = None, False
        if report.version is not None:
            landed = tuple(o.diff_id for o in report.outcomes if o.version is not None)
            self.emit(ev.Committed(round=round_, version=report.version, diff_ids=landed))
            held_out, promoted = self._validate(report.version, round_)
        else:
            self.progress.since_gain += 1
        self._record(round_, report, early, diffs, held_out, promoted)

    def _validate(self, version: int, round_: int) -> tuple[float, bool]:
        """The held-out reward of `version`; `stable` moves to it when the promotion policy says so."""
        reward, progress = self._held_out(version), self.progress
        promoted = self.promotion(progress.best, reward) and self.ledger.promote(version)  # False: stable is past it
        if promoted:
            progress.best, progress.since_gain = reward, 0
        else:
            progress.since_gain += 1
        self.emit(ev.Evaluated(round=round_, version=version, held_out_reward=reward, promoted=promoted,
                               best_reward=progress.best))
        return reward, promoted

    def _final_reward(self, stable: int, *, measure: bool) -> float:
        """The held-out reward of `stable`: this run's best, unless another run on the store moved
        `stable` on; a stopped run does not spend calls to find out."""
        if not measure:
            return self.progress.best
        return self._held_out(stable)

    def _held_out(self, version: int) -> float:
        return self.evaluator.mean(self.ledger.snapshot(self.artifact_id, version), self.held_out)

    def _record(self, round_: int, report: StepReport, early: list[Outcome], diffs: list[Diff],
                held_out: float | None, promoted: bool) -> None:
        counts: dict[str, int] = {}
        for o in early + report.outcomes:
            counts[o.kind] = counts.get(o.kind, 0) + 1
        self.history.append(StepRecord(
            round=round_, base_version=report.base_version, version=report.version,
            diffs=[d.id for d in diffs], outcomes=counts,
            staleness=[report.staleness[d.id] for d in diffs],
            acceptance_head=report.head_reward, acceptance_candidate=report.candidate_reward,
            held_out=held_out, promoted=promoted, calls=self.evaluator.usage.calls, timings=report.timings,
        ))


def seed_artifact(ledger: Ledger, artifact_id: str, strategy: Strategy) -> int:
    """Head, once the ledger holds the artifact and `stable` has a version of it.

    The strategy's initial state is committed when the ledger lacks the artifact; a process
    seeding the same store at the same time is no error (the later one takes the other's seed).
    A `stable` left before the artifact existed (a kill between the seed and its promotion) moves
    to the first version that has it."""
    while not ledger.has_artifact(artifact_id, head := ledger.head()):
        try:
            ledger.commit(artifact_id, strategy.initial_state(), expected_version=head,
                          message=f"seed {artifact_id}", trailers={"Step": "seed"})
        except HeadMoved:
            continue  # another writer moved dev first: look again
    stable = ledger.stable()
    if not ledger.has_artifact(artifact_id, stable):
        ledger.promote(next(v for v in range(stable + 1, head + 1) if ledger.has_artifact(artifact_id, v)))
    return head

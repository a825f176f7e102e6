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

import functools
import queue
import random
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field

from agentdescent import events as ev
from agentdescent.artifacts.strategies import Strategy
from agentdescent.engine.evaluation import Evaluator
from agentdescent.engine.executors import Executor
from agentdescent.engine.worker import Turn, Worker, WorkerReport
from agentdescent.ledger import Ledger
from agentdescent.result import EvolveResult, StepRecord
from agentdescent.step import Aggregator, Policies, StepReport
from agentdescent.types import Diff, Outcome, Task


@dataclass(frozen=True, kw_only=True)
class Limits:
    rounds: int
    n_workers: int
    asynchronous: bool
    patience: int | None
    target_reward: float | None
    max_calls: int | None
    max_tokens: int | None


@dataclass(kw_only=True)
class Loop:
    """One run: dispatches worker turns, collects them at the barrier, steps and validates."""

    ledger: Ledger
    artifact_id: str
    strategy: Strategy
    policies: Policies
    train: list[Task]
    held_out: list[Task]
    evaluator: Evaluator
    aggregator: Aggregator
    worker: Worker
    pool: Executor
    limits: Limits
    seed: int
    emit: Callable[[ev.Event], None]
    history: list[StepRecord] = field(default_factory=list)
    outcomes: list[Outcome] = field(default_factory=list)
    buffer: queue.Queue = field(default_factory=queue.Queue)
    turn_of: dict[Future, int] = field(default_factory=dict)
    # Guards the dispatch state shared with the turns' callbacks; re-entrant because a turn that is
    # already done when its callback is added runs that callback at once, on the dispatching thread.
    lock: threading.RLock = field(default_factory=threading.RLock)
    outstanding: int = 0  # turns dispatched and not yet collected
    redispatch: bool = False
    # Train tasks seen failing on an earlier snapshot and not since seen passing or dealt out again:
    # a commit rarely fixes what it was not made from, so they are the likeliest failures to deal.
    leads: set[str] = field(default_factory=set)
    dispatch_error: Exception | None = None
    best: float = 0.0
    since_gain: int = 0
    round_start: tuple[int, int] = (0, 0)  # calls and tokens spent when the current round began
    round_cost: tuple[int, int] = (0, 0)  # calls and tokens the last round took: the next one's estimate
    turns: int = 0

    @functools.cached_property
    def train_ids(self) -> frozenset[str]:
        return frozenset(t.id for t in self.train)

    def run(self) -> EvolveResult:
        head = self._seed_artifact()
        self.emit(ev.RunStarted(rounds=self.limits.rounds, n_workers=self.limits.n_workers, train=len(self.train),
                                held_out=len(self.held_out), version=head, ledger=str(self.ledger.path)))
        start = self.ledger.stable()
        initial = self.best = self._held_out(start)
        if head != self.ledger.stable():
            self._validate(head, round_=-1)
        try:
            reason = self._steps()
        finally:
            with self.lock:  # whatever ended the run, no worker starts another turn
                self.redispatch = False
        stable = self.ledger.stable()
        state = self.ledger.snapshot(self.artifact_id, stable)
        self.emit(ev.RunEnded(reason=reason, final_reward=self.best))
        return EvolveResult(
            rendered=self.strategy.render(state), state=state, final_reward=self.best, initial_reward=initial,
            history=self.history, ledger=self.ledger, outcome_list=self.outcomes, usage=self.evaluator.usage,
            stop_reason=reason, version=stable, initial_version=start, frozen=tuple(self.strategy.frozen),
        )

    def _seed_artifact(self) -> int:
        head = self.ledger.head()
        if self.ledger.has_artifact(self.artifact_id, head):
            return head
        version = self.ledger.commit(
            self.artifact_id, self.strategy.initial_state(), expected_version=head,
            message=f"seed {self.artifact_id}", trailers={"Step": "seed"},
        )
        self.ledger.promote(version)
        return version

    def _steps(self) -> str:
        """Synchronous: every round dispatches all workers and waits for all of them.
        Asynchronous: workers are dispatched once and each re-dispatches itself on the newest
        snapshot the moment it finishes; a round aggregates whatever has come back."""
        asynchronous = self.limits.asynchronous
        for round_ in range(self.limits.rounds):
            stop = self._stop_reason()
            if stop:
                self._abandon(round_, stop)
                return stop
            self.emit(ev.RoundStarted(round=round_, version=self.ledger.head()))
            self.round_start = (self.evaluator.usage.calls, self.evaluator.usage.tokens)
            if round_ == 0 or not asynchronous:
                with self.lock:
                    self.redispatch = asynchronous
                    self._dispatch(self.limits.n_workers)
            if round_ == self.limits.rounds - 1:
                with self.lock:
                    self.redispatch = False
            self._step(round_, self._collect(wait_all=not self.redispatch))
        return self._stop_reason() or f"ran all {self.limits.rounds} rounds"

    def _dispatch(self, count: int) -> None:
        """Start `count` worker turns on the newest snapshot, each with its own minibatch.
        Callers hold `self.lock`."""
        head = self.ledger.head()
        state = self.ledger.snapshot(self.artifact_id, head)
        measured = self.evaluator.known(state)
        self.leads.difference_update(task_id for task_id, reward in measured.items() if reward >= 1.0)
        known = {**dict.fromkeys(self.leads, 0.0), **measured}
        draws = 1 + self.policies.proposal.scouts
        batches = self.policies.task_sampler(self.train, count * draws, self.turns, self.seed, known)
        first, spares = batches[:count], batches[count:]  # spares overlap the next dispatch's walk
        self.leads.difference_update(t.id for b in first for t in b)
        # Sampled now, not at the step, so that workers can verify on it and leave the scores cached.
        rng = random.Random(f"{self.seed}:accept:{self.turns}")
        sample = self.policies.acceptance.sample(self.train, rng)
        for i, batch in enumerate(first):
            turn = Turn(worker=f"w{self.turns % self.limits.n_workers}", version=head, state=state, batch=batch,
                        spares=spares[i::count], sample=sample,
                        rng=random.Random(f"{self.seed}:turn:{self.turns}"))
            future = self.pool.submit(self.worker.work, turn)
            self.turn_of[future] = self.turns
            self.outstanding += 1
            self.turns += 1
            future.add_done_callback(self._returned)

    def _returned(self, future: Future) -> None:
        """A turn finished (on its worker's thread): send the worker off again if asynchronous.
        The turn reaches the buffer whatever happens, and a failed re-dispatch is raised by `_collect`."""
        try:
            with self.lock:
                if self.redispatch and future.exception() is None:
                    self._dispatch(1)
        except Exception as exc:  # carried to the engine's thread, not swallowed here
            self.dispatch_error = exc
        finally:
            self.buffer.put(future)

    def _collect(self, *, wait_all: bool) -> list[WorkerReport]:
        """Wait for every outstanding turn (`wait_all`), or for one and whatever else is in."""
        done: list[Future] = [self.buffer.get()]
        while not self.buffer.empty() or (wait_all and len(done) < self._outstanding()):
            done.append(self.buffer.get())
        with self.lock:
            self.outstanding -= len(done)
            done.sort(key=self.turn_of.pop)  # arrival order must not change the result
        if self.dispatch_error is not None:
            raise self.dispatch_error
        return [f.result() for f in done]

    def _outstanding(self) -> int:
        with self.lock:
            return self.outstanding

    def _abandon(self, round_: int, reason: str) -> None:
        """The run is stopping: turns still in flight finish, and their diffs get an outcome."""
        with self.lock:
            self.redispatch = False
        for report in self._collect(wait_all=True) if self._outstanding() else []:
            for diff in report.diffs:
                outcome = Outcome(diff_id=diff.id, kind="dropped_stale", step=round_, author=diff.author,
                                  reason=f"the run stopped before this diff was aggregated: {reason}")
                self.outcomes.append(outcome)
                self.emit(ev.DiffOutcome(round=round_, outcome=outcome))

    def _step(self, round_: int, reports: list[WorkerReport]) -> None:
        with self.lock:  # an asynchronous dispatch may be reading the leads on another thread
            for state in {id(r.turn.state): r.turn.state for r in reports}.values():
                measured = self.evaluator.known(state)
                self.leads.update(t for t, reward in measured.items() if reward < 1.0 and t in self.train_ids)
        diffs: list[Diff] = [d for r in reports for d in r.diffs]
        early: list[Outcome] = [o.model_copy(update={"step": round_}) for r in reports for o in r.outcomes]
        samples = {id(r.turn.sample): r.turn.sample for r in reports}
        # Turns dispatched together share one acceptance sample, already scored by their verification;
        # turns from different dispatches (asynchronous runs) leave the aggregator to draw its own.
        sample = next(iter(samples.values())) if len(samples) == 1 else None
        report = self.aggregator.step(diffs, round_, sample=sample)
        for outcome in early + report.outcomes:
            self.outcomes.append(outcome)
            self.emit(ev.DiffOutcome(round=round_, outcome=outcome))
        held_out, promoted = None, False
        if report.version is not None:
            landed = tuple(o.diff_id for o in report.outcomes if o.version is not None)
            self.emit(ev.Committed(round=round_, version=report.version, diff_ids=landed))
            held_out, promoted = self._validate(report.version, round_)
        else:
            self.since_gain += 1
        self._record(round_, report, early, diffs, held_out, promoted)
        usage, (calls_before, tokens_before) = self.evaluator.usage, self.round_start
        self.round_cost = (usage.calls - calls_before, usage.tokens - tokens_before)
        self.emit(ev.RoundEnded(round=round_, calls=usage.calls))

    def _validate(self, version: int, round_: int) -> tuple[float, bool]:
        reward = self._held_out(version)
        promoted = self.policies.promotion(self.best, reward)
        if promoted:
            self.ledger.promote(version)
            self.best, self.since_gain = reward, 0
        else:
            self.since_gain += 1
        self.emit(ev.Evaluated(round=round_, version=version, held_out_reward=reward, promoted=promoted, best_reward=self.best))
        return reward, promoted

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
            staleness=[report.base_version - d.base_version for d in diffs],
            acceptance_head=report.head_reward, acceptance_candidate=report.candidate_reward,
            held_out=held_out, promoted=promoted, calls=self.evaluator.usage.calls, timings=report.timings,
        ))

    def _stop_reason(self) -> str | None:
        limits = self.limits
        if limits.target_reward is not None and self.best >= limits.target_reward:
            return f"reached target reward {limits.target_reward} (held-out {self.best:.3f})"
        if limits.patience is not None and self.since_gain >= limits.patience:
            return f"no held-out gain in {self.since_gain} rounds (patience {limits.patience})"
        usage, (round_calls, round_tokens) = self.evaluator.usage, self.round_cost
        if limits.max_calls is not None and usage.calls + max(round_calls, 1) > limits.max_calls:
            return (f"the call budget would not cover another round ({usage.calls} spent, the last round "
                    f"took {round_calls}, max_calls={limits.max_calls})")
        if limits.max_tokens is not None and usage.tokens + max(round_tokens, 1) > limits.max_tokens:
            return (f"the token budget would not cover another round ({usage.tokens} spent, the last round "
                    f"took {round_tokens}, max_tokens={limits.max_tokens})")
        return None

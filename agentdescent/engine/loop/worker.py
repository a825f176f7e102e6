"""A worker's turn: roll out a minibatch on a snapshot, reflect on failures, emit diffs.

This is the gradient computation of the loop. A worker reads a snapshot and returns diffs with
evidence; it never writes the ledger. What it leaves out: choosing its tasks (the sampler) and
deciding what lands (the aggregator).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentdescent.artifacts.state import apply
from agentdescent.artifacts.strategies import InvalidProposal, State, Strategy
from agentdescent.engine.calls.budget import BudgetSpent
from agentdescent.engine.calls.evaluation import Evaluator
from agentdescent.engine.calls.executors import Executor
from agentdescent.engine.calls.units import reflect
from agentdescent.engine.loop.decisions import ProposalPolicy
from agentdescent.engine.loop.sharding import Shards
from agentdescent.engine.persist.replay import Answers, asked
from agentdescent.reflect.memory import Memory
from agentdescent.step.stats import mean_reward
from agentdescent.types import Diff, EvidenceCard, Outcome, OutcomeKind, Reflection, Rollout, Task


class ProposeFn(Protocol):
    """A change that would have helped this rollout (the strategy turns it into a Diff), or None.

    It may raise `InvalidProposal` (an `invalid` outcome) or anything else (an `error` outcome).
    A propose with a callable `batch(rendered, rollouts)` attribute is handed all of a worker's
    chosen failures at once and makes one proposal from them. One that takes a `tried` keyword
    is handed the run's latest refused proposals with their reasons (`reflect.memory`). The four
    arguments are passed by position (`/`), so a function or lambda of any parameter names fits."""

    def __call__(self, rendered: Any, task: Task, output: str, reward: float, /) -> str | None: ...


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    artifact_id: str
    self_verify: bool = True
    # None: verify on the failures the diff was made from, which is where the aggregator's test
    # looks for its gain first (and finds the scores cached);
    # an int k: verify on k tasks of the worker's own minibatch (its failures first).
    cheap_eval_tasks: int | None = None
    timeout: float | None = None  # seconds a call of propose may take (None: no limit)


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One unit of a worker's work: a snapshot and a minibatch."""

    slot: int  # which worker: its name is w<slot>, and under parallel="tp" its shard
    version: int
    state: State
    batch: list[Task]
    rng: random.Random
    spares: list[list[Task]] = field(default_factory=list)  # to scout with when `batch` has nothing
    # A batched round's turns, met once rolled out: their reflections then go out as one wave
    together: threading.Barrier | None = None

    @property
    def worker(self) -> str:
        return f"w{self.slot}"


@dataclass(frozen=True, kw_only=True)
class WorkerReport:
    turn: Turn
    diffs: list[Diff]
    outcomes: list[Outcome] = field(default_factory=list)  # proposals that never became a diff
    spent: str | None = None  # the turn stopped because a budget ran out (why); its diffs are unverified


@dataclass(frozen=True, kw_only=True)
class Rolled:
    """A turn past its rollouts: what it rolled out, and the failures chosen to reflect on."""

    turn: Turn
    rollouts: list[Rollout]
    chosen: list[Rollout]
    spent: str | None = None  # a budget ran out during the rollouts: nothing more of this turn runs


@dataclass(frozen=True, kw_only=True)
class Reflected:
    """A turn past its reflections: the diffs it made, not yet verified."""

    turn: Turn
    rollouts: list[Rollout]
    diffs: list[Diff]
    outcomes: list[Outcome]
    spent: str | None = None


@dataclass(kw_only=True)
class Worker:
    """A turn in three stages: `roll`, `reflect`, `verify` (`work` runs them one after the other;
    a pipeline-parallel run runs each on a pool of its own)."""

    strategy: Strategy
    propose: ProposeFn
    evaluator: Evaluator
    calls: Executor  # where reflections run
    proposal: ProposalPolicy  # which failures a turn reflects on
    config: WorkerConfig
    shards: Shards | None = None  # a tensor-parallel run: a turn's diffs may change only its worker's keys
    journal: Callable[[str, Reflection], None] | None = None  # the run's answer journal: (what was asked, answer)
    answers: Answers = field(default_factory=Answers)  # a resumed run's: what a killed process was answered
    noisy: Callable[[], bool | None] = lambda: False  # whether the run's rewards are samples (`step.policies.rewards_noisy`)
    memory: Memory = field(default_factory=Memory)  # the run's refused proposals, handed to each reflection

    def work(self, turn: Turn) -> WorkerReport:
        """Roll out, reflect and verify; a turn that runs out of budget hands back what it made.
        A turn with others `together` waits, rolled out, until they are too (or one fails)."""
        try:
            rolled = self.roll(turn)
        finally:
            if turn.together is not None:
                meet(turn.together)
        return self.verify(self.reflect(rolled))

    def roll(self, turn: Turn) -> Rolled:
        try:
            rollouts = self.evaluator.rollouts(turn.state, turn.batch)
            chosen = self.proposal(rollouts)
            if not chosen and turn.spares:  # nothing to learn from: scout the spare minibatches, all at once
                spares = [t for batch in turn.spares for t in batch]  # the engine deals `scouts` of them
                rollouts = self.evaluator.rollouts(turn.state, spares)
                chosen = self.proposal(rollouts)
            if chosen and self.noisy():
                chosen = self._repeated(turn.state, chosen)
        except BudgetSpent as spent:
            return Rolled(turn=turn, rollouts=[], chosen=[], spent=str(spent))
        return Rolled(turn=turn, rollouts=rollouts, chosen=chosen)

    def _repeated(self, state: State, chosen: list[Rollout]) -> list[Rollout]:
        """With noisy rewards, the failures that fail again when drawn again: one that passes was
        noise, and a reflection on it would mostly repeat what the artifact already says."""
        below = getattr(self.proposal, "below", 1.0)
        again = self.evaluator.again([(state, [r.task for r in chosen])], "train")[0]
        return [r for r, reward in zip(chosen, again) if reward < below]

    def reflect(self, rolled: Rolled) -> Reflected:
        turn, chosen = rolled.turn, rolled.chosen
        diffs: list[Diff] = []
        outcomes: list[Outcome] = []
        if rolled.spent:
            return Reflected(turn=turn, rollouts=rolled.rollouts, diffs=diffs, outcomes=outcomes, spent=rolled.spent)
        groups = [chosen] if chosen and callable(getattr(self.propose, "batch", None)) else [[r] for r in chosen]
        view, rendered = self.evaluator.view(turn.state)
        tried = self.memory.recent(noisy=self.noisy())
        pending: list[tuple[str, Future[Reflection] | Reflection]] = []
        why = None
        for group in groups:
            key = asked(view, group)
            again = self.answers.take(key)
            if not isinstance(again, Reflection):
                again = self.calls.submit(reflect, self.propose, rendered, group, self.config.timeout, tried)
            pending.append((key, again))
        for group, (key, waiting) in zip(groups, pending):
            try:
                reflection = self._answer(key, waiting)
            except BudgetSpent as spent:  # refused as it was to start: what did start is paid for, and taken
                why = str(spent)
                continue
            diff_id = f"d{turn.rng.getrandbits(40):010x}"
            made = self._diff(diff_id, turn, group, reflection)
            if isinstance(made, Diff):
                diffs.append(made)
            elif made is not None:
                outcomes.append(Outcome(diff_id=diff_id, kind=made[0], reason=made[1], author=turn.worker))
        return Reflected(turn=turn, rollouts=rolled.rollouts, diffs=diffs, outcomes=outcomes, spent=why)

    def _answer(self, key: str, waiting: Future[Reflection] | Reflection) -> Reflection:
        """A reflection's answer, counted (and journalled) once it is back; one a killed process
        paid for comes from its journal, already on the bill."""
        usage = self.evaluator.usage
        if isinstance(waiting, Reflection):
            usage.add(replayed=1)
            return waiting
        reflection = waiting.result()
        journal = self.journal
        usage.count_reflection(reflection, None if journal is None else lambda r: journal(key, r))
        return reflection

    def verify(self, reflected: Reflected) -> WorkerReport:
        turn, diffs = reflected.turn, reflected.diffs
        if reflected.spent is None and self.config.self_verify and diffs:
            try:
                diffs = self._verify(diffs, turn, reflected.rollouts)
            except BudgetSpent as spent:
                return WorkerReport(turn=turn, diffs=diffs, outcomes=reflected.outcomes, spent=str(spent))
        return WorkerReport(turn=turn, diffs=diffs, outcomes=reflected.outcomes, spent=reflected.spent)

    def _diff(
        self, diff_id: str, turn: Turn, group: Sequence[Rollout], reflection: Reflection
    ) -> Diff | tuple[OutcomeKind, str] | None:
        if reflection.failed is not None:
            return reflection.failed, reflection.reason
        proposal = reflection.proposal
        if proposal is None:
            return None
        try:
            edits = self.strategy.edits_for(turn.state, proposal)
        except InvalidProposal as exc:
            return "invalid", f"proposal could not become a diff: {exc}"
        if self.shards is not None:
            outside = self.shards.outside(turn.slot, [e.key for e in edits])
            if outside:  # its task belongs to the shard that holds those keys: it goes there next
                self.shards.learn([r.task.id for r in group], [e.key for e in edits])
                return "invalid", (f"changes {', '.join(outside)}, outside {turn.worker}'s shard "
                                   f"({', '.join(self.shards.keys_of(turn.slot)) or 'new keys only'}): under "
                                   "parallel='tp' each worker changes only its own keys; its task now goes to "
                                   "the worker that holds them")
        evidence = EvidenceCard(
            task_ids=[r.task.id for r in group], rewards=[r.reward for r in group], rationale=proposal[:2000]
        )
        return Diff(
            id=diff_id, artifact_id=self.config.artifact_id, base_version=turn.version,
            edits=edits, evidence=evidence, author=turn.worker,
        )

    def _verify(self, diffs: Sequence[Diff], turn: Turn, rollouts: Sequence[Rollout]) -> list[Diff]:
        """Score each patched state against the snapshot on its verification tasks, all at once."""
        pending = []
        for diff in diffs:
            tasks = self._verification_tasks(diff, turn, rollouts)
            patched = apply(turn.state, {e.key: e.after for e in diff.edits})
            pending.append((diff, tasks, self.evaluator.submit([turn.state, patched], tasks, "verify")))
        return [diff.verified([t.id for t in tasks], mean_reward([f.result().reward for f in before]),
                              mean_reward([f.result().reward for f in after]))
                for diff, tasks, (before, after) in pending]

    def _verification_tasks(self, diff: Diff, turn: Turn, rollouts: Sequence[Rollout]) -> list[Task]:
        own = set(diff.evidence.task_ids)
        if self.config.cheap_eval_tasks is None:
            return list({r.task.id: r.task for r in rollouts if r.task.id in own}.values())
        ordered = sorted(rollouts, key=lambda r: r.task.id not in own)
        return [r.task for r in ordered][: self.config.cheap_eval_tasks]


def meet(barrier: threading.Barrier) -> None:
    """Wait at `barrier` for the others; a broken one (a turn that never started) lets all go on."""
    try:
        barrier.wait()
    except threading.BrokenBarrierError:
        pass

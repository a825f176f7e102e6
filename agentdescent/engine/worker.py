"""A worker's turn: roll out a minibatch on a snapshot, reflect on failures, emit diffs.

This is the gradient computation of the loop. A worker reads a snapshot and returns diffs with
evidence; it never writes the ledger. What it leaves out: choosing its tasks (the sampler) and
deciding what lands (the aggregator).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentdescent.artifacts.state import apply
from agentdescent.artifacts.strategies import InvalidProposal, State, Strategy
from agentdescent.engine.evaluation import Evaluator
from agentdescent.engine.executors import Executor
from agentdescent.engine.units import Reflection, reflect
from agentdescent.step.policies import Policies, acceptance_set
from agentdescent.step.stats import mean_reward
from agentdescent.types import Diff, EvidenceCard, Outcome, Rollout, Task


class ProposeFn(Protocol):
    """A change that would have helped this rollout (the strategy turns it into a Diff), or None.

    It may raise `InvalidProposal` (an `invalid` outcome) or anything else (an `error` outcome).
    A propose with a callable `batch(rendered, rollouts)` attribute is handed all of a worker's
    chosen failures at once and makes one proposal from them."""

    def __call__(self, rendered: Any, task: Task, output: str, reward: float) -> str | None: ...


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    artifact_id: str
    self_verify: bool = True
    # None: verify on what the aggregator will judge the diff on (its evidence plus the snapshot's
    # acceptance sample), so that it finds those scores cached;
    # an int k: verify on k tasks of the worker's own minibatch (its failures first), cheaply.
    cheap_eval_tasks: int | None = None
    timeout: float | None = None  # seconds a call of propose may take (None: no limit)


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One unit of a worker's work: a snapshot, a minibatch, and the snapshot's acceptance sample."""

    worker: str
    version: int
    state: State
    batch: list[Task]
    sample: list[Task]  # the acceptance sample of `version`, which the step judges diffs made on it by
    rng: random.Random
    spares: list[list[Task]] = field(default_factory=list)  # to scout with when `batch` has nothing


@dataclass(frozen=True, kw_only=True)
class WorkerReport:
    turn: Turn
    diffs: list[Diff]
    outcomes: list[Outcome] = field(default_factory=list)  # proposals that never became a diff


@dataclass(kw_only=True)
class Worker:
    strategy: Strategy
    propose: ProposeFn
    evaluator: Evaluator
    calls: Executor
    policies: Policies
    config: WorkerConfig

    def work(self, turn: Turn) -> WorkerReport:
        rollouts = self.evaluator.rollouts(turn.state, turn.batch)
        chosen = self.policies.proposal(rollouts)
        if not chosen and turn.spares:  # nothing to learn from: scout the spare minibatches, all at once
            spares = [t for batch in turn.spares for t in batch]  # the engine deals `scouts` of them
            rollouts = self.evaluator.rollouts(turn.state, spares)
            chosen = self.policies.proposal(rollouts)
        groups = [chosen] if chosen and callable(getattr(self.propose, "batch", None)) else [[r] for r in chosen]
        rendered = self.strategy.render(turn.state)
        pending = [self.calls.submit(reflect, self.propose, rendered, group, self.config.timeout) for group in groups]
        diffs, outcomes = [], []
        for group, future in zip(groups, pending):
            reflection = future.result()
            self.evaluator.usage.count_reflection(reflection)
            diff_id = f"d{turn.rng.getrandbits(40):010x}"
            made = self._diff(diff_id, turn, group, reflection)
            if isinstance(made, Diff):
                diffs.append(made)
            elif made is not None:
                outcomes.append(Outcome(diff_id=diff_id, kind=made[0], reason=made[1], author=turn.worker))
        if self.config.self_verify and diffs:
            diffs = self._verify(diffs, turn, rollouts)
        return WorkerReport(turn=turn, diffs=diffs, outcomes=outcomes)

    def _diff(
        self, diff_id: str, turn: Turn, group: Sequence[Rollout], reflection: Reflection
    ) -> Diff | tuple[str, str] | None:
        if reflection.failed is not None:
            return reflection.failed, reflection.reason
        proposal = reflection.proposal
        if proposal is None:
            return None
        try:
            edits = self.strategy.edits_for(turn.state, proposal)
        except InvalidProposal as exc:
            return "invalid", f"proposal could not become a diff: {exc}"
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
            pending.append((diff, tasks, self.evaluator.submit([turn.state, patched], tasks)))
        verified = []
        for diff, tasks, (before, after) in pending:
            card = diff.evidence.model_copy(update={
                "verify_task_ids": [t.id for t in tasks],
                "verify_before": mean_reward([f.result().reward for f in before]),
                "verify_after": mean_reward([f.result().reward for f in after]),
            })
            verified.append(diff.model_copy(update={"evidence": card}))
        return verified

    def _verification_tasks(self, diff: Diff, turn: Turn, rollouts: Sequence[Rollout]) -> list[Task]:
        own = set(diff.evidence.task_ids)
        if self.config.cheap_eval_tasks is None:
            return acceptance_set([r.task for r in rollouts if r.task.id in own], turn.sample)
        ordered = sorted(rollouts, key=lambda r: r.task.id not in own)
        return [r.task for r in ordered][: self.config.cheap_eval_tasks]

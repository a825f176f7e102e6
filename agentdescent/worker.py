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

from agentdescent.aggregator import apply
from agentdescent.errors import UserError
from agentdescent.evaluation import Evaluator, Rollout
from agentdescent.executors import Executor
from agentdescent.policies import Policies
from agentdescent.strategies import InvalidProposal, State, Strategy
from agentdescent.types import Diff, EvidenceCard, Outcome, Task


class ProposeFn(Protocol):
    def __call__(self, rendered: Any, task: Task, output: str, reward: float) -> str | None:
        """A change that would have helped this rollout (the strategy turns it into a Diff), or None."""


@dataclass(frozen=True, kw_only=True)
class WorkerConfig:
    artifact_id: str
    self_verify: bool = True
    # None: verify on the step's acceptance set, so the aggregator finds those scores cached;
    # an int k: verify on k tasks of the worker's own minibatch (its failures first), cheaply.
    cheap_eval_tasks: int | None = None


@dataclass(frozen=True, kw_only=True)
class Turn:
    """One unit of a worker's work: a snapshot, a minibatch, and the step's acceptance set."""

    worker: str
    version: int
    state: State
    batch: list[Task]
    acceptance: list[Task]
    rng: random.Random


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
        proposals = self.calls.map(lambda r: self._propose(turn.state, r), chosen)
        diffs, outcomes = [], []
        for rollout, proposal in zip(chosen, proposals):
            diff_id = f"d{turn.rng.getrandbits(40):010x}"
            made = self._diff(diff_id, turn, rollout, proposal)
            if isinstance(made, Diff):
                diffs.append(made)
            elif made is not None:
                outcomes.append(Outcome(diff_id=diff_id, kind=made[0], reason=made[1], author=turn.worker))
        if self.config.self_verify and diffs:
            diffs = self._verify(diffs, turn, rollouts)
        return WorkerReport(turn=turn, diffs=diffs, outcomes=outcomes)

    def _propose(self, state: State, rollout: Rollout) -> str | None | Exception:
        self.evaluator.usage.add(proposals=1)
        try:
            proposal = self.propose(self.strategy.render(state), rollout.task, rollout.output, rollout.reward)
        except Exception as exc:  # one failed reflection is an outcome, not the end of the run
            return exc
        if proposal is not None and not isinstance(proposal, str):
            raise UserError(
                f"propose returned {type(proposal).__name__} for task {rollout.task.id!r}; "
                "it must return a str (the proposed change) or None (no proposal)"
            )
        return proposal

    def _diff(
        self, diff_id: str, turn: Turn, rollout: Rollout, proposal: str | None | Exception
    ) -> Diff | tuple[str, str] | None:
        if proposal is None:
            return None
        if isinstance(proposal, Exception):
            return "error", f"propose raised {type(proposal).__name__}: {proposal}"
        try:
            edits = self.strategy.edits_for(turn.state, proposal)
        except InvalidProposal as exc:
            return "invalid", f"proposal could not become a diff: {exc}"
        evidence = EvidenceCard(task_ids=[rollout.task.id], rewards=[rollout.reward], rationale=proposal[:2000])
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
                "verify_before": _mean([f.result().reward for f in before]),
                "verify_after": _mean([f.result().reward for f in after]),
            })
            verified.append(diff.model_copy(update={"evidence": card}))
        return verified

    def _verification_tasks(self, diff: Diff, turn: Turn, rollouts: Sequence[Rollout]) -> list[Task]:
        if self.config.cheap_eval_tasks is None:
            return turn.acceptance
        own = set(diff.evidence.task_ids)
        ordered = sorted(rollouts, key=lambda r: r.task.id not in own)
        return [r.task for r in ordered][: self.config.cheap_eval_tasks]


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0

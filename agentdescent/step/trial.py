"""One step's test: what it judges candidates with, and what it has measured of head so far.

`Judge` holds the scorer, the policies and governance, the train tasks, the evaluation cache and,
for gated (L1) changes, the oracle set and the approver. `Trial` is one step's working state:
head's rewards, measured once and shared by every candidate the step scores, the probe order, and
the rejections so far. What it leaves out: the order of the test (`accept`) and the L1 bar (`gate`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from agentdescent.artifacts.state import State
from agentdescent.governance import Governance
from agentdescent.step.changes import Approve, Component, Scorer
from agentdescent.step.policies import StepPolicies, Verdict
from agentdescent.types import Task


@dataclass(frozen=True, kw_only=True)
class Judge:
    """What the step judges candidates with: the scorer, the policies and governance, the train tasks
    by id, what is already known of a state's rewards (the evaluation cache), and the oracle set
    and approver for gated (L1) changes."""

    score: Scorer
    policies: StepPolicies
    governance: Governance
    train: Mapping[str, Task]
    known: Callable[[State], Mapping[str, float]] = lambda state: {}
    oracle: Sequence[Task] = ()
    approve: Approve | None = None


class Trial:
    """One step's test: head's rewards measured once and shared by every candidate."""

    def __init__(self, head_state: State, probes: Sequence[Task], judge: Judge) -> None:
        self.head_state, self.probes, self.judge = head_state, list(probes), judge
        self.policy = judge.policies.acceptance
        self.head: dict[str, float] = dict(judge.known(head_state))
        self.rejected: dict[str, str] = {}
        self.answers: dict[tuple[tuple[Component, ...], str], float] = {}  # (a subset of parts, task id) -> its reward
        self.charged: dict[tuple[Component, ...], list[str]] = {}  # a culprit group -> the tasks it broke so far
        self.weights: dict[str, float] = {}  # evidence task id -> its weight in the test (η of a discounted diff)

    def score(self, jobs: Sequence[tuple[State, Sequence[Task]]]) -> list[list[float]]:
        """Head on every task of the jobs beside the jobs themselves, in one wave (head is cached)."""
        tasks = list({t.id: t for _, ts in jobs for t in ts}.values())
        head_row, *rows = self.judge.score([(self.head_state, tasks), *jobs])
        self.head.update(zip((t.id for t in tasks), head_row))
        return rows

    def reject(self, parts: Sequence[Component], reason: str) -> None:
        for comp in parts:
            for c in comp.changes:
                self.rejected[c.diff.id] = reason

    def next_wave(self, taken: set[str]) -> list[Task]:
        """Probes not yet taken: `fresh` that head has not been measured on, the rest among those it
        passes (where harm shows), then other unmeasured ones; tasks head fails come last, since
        there a candidate can only gain."""
        free = [t for t in self.probes if t.id not in taken]
        unknown = [t for t in free if t.id not in self.head]
        passing = [t for t in free if self.head.get(t.id, 0.0) > 0.0]
        failing = [t for t in free if self.head.get(t.id, 1.0) <= 0.0]
        picked = {t.id for t in unknown[: self.policy.fresh]}
        ordered = unknown[: self.policy.fresh] + passing + [t for t in unknown if t.id not in picked] + failing
        return ordered[: self.policy.wave]

    def fails_at_head(self, task: Task) -> bool:
        return self.head.get(task.id, 1.0) <= 0.0

    def test(self, ids: Sequence[str], candidate: Sequence[float], head: Sequence[float], *, gated: bool) -> Verdict:
        """The policy's paired test on these tasks, a stale diff's evidence weighted by its η."""
        weights = [self.weights.get(i, 1.0) for i in ids]
        if all(w == 1.0 for w in weights):  # so a policy written without `weights` still serves
            return self.policy(candidate, head, gated=gated)
        return self.policy(candidate, head, gated=gated, weights=weights)


def unique(tasks: Sequence[Task]) -> list[Task]:
    """`tasks` without repeats, in their order."""
    return list({t.id: t for t in tasks}.values())

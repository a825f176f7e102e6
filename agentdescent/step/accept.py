"""Accept: the statistical test of the optimizer step. Each component, then their fusion, against head."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from agentdescent.artifacts.state import State, apply
from agentdescent.governance import Governance
from agentdescent.step.changes import Component
from agentdescent.step.policies import Policies, Verdict, acceptance_set
from agentdescent.step.stats import mean_reward
from agentdescent.types import Task

# Scores each (state, tasks) job, all in flight at once: one row of rewards per job.
Scorer = Callable[[Sequence[tuple[Mapping[str, str], Sequence[Task]]]], list[list[float]]]


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    accepted: list[Component]
    rejected: dict[str, str]  # diff id -> reason
    candidate: State
    head_reward: float | None
    candidate_reward: float | None
    reason: str = ""  # the verdict on the candidate that is committed


def accept(
    components: Sequence[Component],
    head_state: State,
    sample: Sequence[Task],
    score: Scorer,
    policies: Policies,
    governance: Governance,
    train: Mapping[str, Task],
    on_candidate: Callable[[State], None] | None = None,
) -> Acceptance:
    """Score each component against head on its own evidence plus head's `sample`, then the
    fusion of those that pass on all their evidence plus the sample; keep the fusion if it passes
    too, else only the single best component. `on_candidate` hears of the fusion just before its
    test, so that work on it (the engine's held-out evaluation) can run in the same wave."""
    if not components:
        return Acceptance(accepted=[], rejected={}, candidate=head_state, head_reward=None, candidate_reward=None)
    sets = [acceptance_set(_evidence(comp, train), sample) for comp in components]
    union = acceptance_set([t for tasks in sets for t in tasks], sample)
    jobs = [(head_state, union)] + [(apply(head_state, comp.after), tasks) for comp, tasks in zip(components, sets)]
    rows = score(jobs)  # one wave: head on every task any candidate needs, each candidate on its own
    head = dict(zip((t.id for t in union), rows[0]))
    scored = []
    for comp, tasks, row in zip(components, sets, rows[1:]):
        head_row = [head[t.id] for t in tasks]
        scored.append(_Scored(comp, policies.acceptance(row, head_row, gated=governance.gated(comp.after)), row, head_row))
    rejected = {
        c.diff.id: f"rejected: {s.verdict.reason}" for s in scored if not s.verdict.accepted for c in s.component.changes
    }
    passing = [s for s in scored if s.verdict.accepted]
    if not passing:
        return Acceptance(accepted=[], rejected=rejected, candidate=head_state, head_reward=mean_reward(rows[0]), candidate_reward=None)
    if len(passing) > 1:
        fused = _fuse(head_state, [p.component for p in passing])
        tasks = acceptance_set([t for p in passing for t in _evidence(p.component, train)], sample)
        if on_candidate is not None:
            on_candidate(fused)
        fused_row = score([(fused, tasks)])[0]
        head_row = [head[t.id] for t in tasks]
        verdict = policies.acceptance(fused_row, head_row, gated=any(governance.gated(p.component.after) for p in passing))
        if verdict.accepted:
            return Acceptance(
                accepted=[p.component for p in passing], rejected=rejected, candidate=fused,
                head_reward=mean_reward(head_row), candidate_reward=mean_reward(fused_row), reason=verdict.reason,
            )
        passing = [_keep_best(passing, rejected, verdict)]
    best = passing[0]
    return Acceptance(
        accepted=[best.component], rejected=rejected, candidate=apply(head_state, best.component.after),
        head_reward=mean_reward(best.head), candidate_reward=mean_reward(best.rewards), reason=best.verdict.reason,
    )


def _evidence(component: Component, train: Mapping[str, Task]) -> list[Task]:
    """The train tasks the component's diffs were made from."""
    return [train[t] for c in component.changes for t in c.diff.evidence.task_ids if t in train]


class _Scored(NamedTuple):
    component: Component
    verdict: Verdict
    rewards: list[float]
    head: list[float]


def _keep_best(passing: list[_Scored], rejected: dict[str, str], fused: Verdict) -> _Scored:
    """The component to land alone when the fusion of all that passed did not pass."""
    best = max(passing, key=lambda p: (p.verdict.p_improve, p.verdict.comparison.mean_delta))
    for scored in passing:
        if scored is not best:
            for c in scored.component.changes:
                rejected[c.diff.id] = f"passed alone ({scored.verdict.reason}) but the fused candidate did not: {fused.reason}"
    return best


def _fuse(head_state: State, components: Sequence[Component]) -> State:
    merged: dict[str, str | None] = {}
    for comp in components:
        merged.update(comp.after)  # components hold disjoint keys
    return apply(head_state, merged)

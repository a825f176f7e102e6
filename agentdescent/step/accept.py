"""Accept: the statistical test of the optimizer step. Each component, then their fusion, against head."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

from agentdescent.artifacts.state import State, apply
from agentdescent.governance import Governance
from agentdescent.step.changes import Component
from agentdescent.step.gate import Approve, GatedChange, Scorer, approval, oracle_gate
from agentdescent.step.policies import Policies, Verdict, acceptance_set
from agentdescent.step.stats import mean_reward
from agentdescent.types import Task


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    accepted: list[Component]
    rejected: dict[str, str]  # diff id -> reason
    candidate: State
    head_reward: float | None
    candidate_reward: float | None
    reason: str = ""  # the verdict on the candidate that is committed


@dataclass(frozen=True, kw_only=True)
class Judge:
    """What the step judges candidates with: the scorer, the policies and governance, the train tasks
    by id, the oracle set and approver for gated (L1) changes, and who hears of a fused candidate
    just before its test (so that work on it, the engine's held-out evaluation, runs in that wave)."""

    score: Scorer
    policies: Policies
    governance: Governance
    train: Mapping[str, Task]
    oracle: Sequence[Task] = ()
    approve: Approve | None = None
    on_candidate: Callable[[State], None] | None = None


def accept(components: Sequence[Component], head_state: State, sample: Sequence[Task], judge: Judge) -> Acceptance:
    """Score each component against head on its own evidence plus head's `sample`, then the
    fusion of those that pass on all their evidence plus the sample; keep the fusion if it passes
    too, else only the single best component. A gated (L1) component, and a fusion holding one,
    must also pass the oracle gate and the approver."""
    if not components:
        return Acceptance(accepted=[], rejected={}, candidate=head_state, head_reward=None, candidate_reward=None)
    policies, governance = judge.policies, judge.governance
    sets = [acceptance_set(_evidence(comp, judge.train), sample) for comp in components]
    union = acceptance_set([t for tasks in sets for t in tasks], sample)
    jobs = [(head_state, union)] + [(apply(head_state, comp.after), tasks) for comp, tasks in zip(components, sets)]
    rows = judge.score(jobs)  # one wave: head on every task any candidate needs, each candidate on its own
    head = dict(zip((t.id for t in union), rows[0]))
    scored = []
    for comp, tasks, row in zip(components, sets, rows[1:]):
        head_row = [head[t.id] for t in tasks]
        scored.append(_Scored(comp, policies.acceptance(row, head_row, gated=governance.gated(comp.after)), row, head_row))
    rejected = {
        c.diff.id: f"rejected: {s.verdict.reason}" for s in scored if not s.verdict.accepted for c in s.component.changes
    }
    passing = _past_the_gate([s for s in scored if s.verdict.accepted], head_state, judge, rejected)
    if not passing:
        return Acceptance(accepted=[], rejected=rejected, candidate=head_state, head_reward=mean_reward(rows[0]), candidate_reward=None)
    if len(passing) > 1:
        fused = _fuse(head_state, [p.component for p in passing])
        tasks = acceptance_set([t for p in passing for t in _evidence(p.component, judge.train)], sample)
        if judge.on_candidate is not None:
            judge.on_candidate(fused)
        fused_row = judge.score([(fused, tasks)])[0]
        head_row = [head[t.id] for t in tasks]
        gated = any(governance.gated(p.component.after) for p in passing)
        verdict = policies.acceptance(fused_row, head_row, gated=gated)
        refused = oracle_gate([fused], head_state, judge.oracle, judge.score)[0] if gated and verdict.accepted else None
        if verdict.accepted and refused is None:
            return Acceptance(
                accepted=[p.component for p in passing], rejected=rejected, candidate=fused,
                head_reward=mean_reward(head_row), candidate_reward=mean_reward(fused_row), reason=verdict.reason,
            )
        passing = [_keep_best(passing, rejected, refused or verdict.reason)]
    best = passing[0]
    return Acceptance(
        accepted=[best.component], rejected=rejected, candidate=apply(head_state, best.component.after),
        head_reward=mean_reward(best.head), candidate_reward=mean_reward(best.rewards), reason=best.verdict.reason,
    )


def _past_the_gate(passing: list[_Scored], head_state: State, judge: Judge, rejected: dict[str, str]) -> list[_Scored]:
    """The passing components, less the gated ones the oracle or the approver turn down."""
    gated = [s for s in passing if judge.governance.gated(s.component.after)]
    if not gated:
        return passing
    failures = oracle_gate([apply(head_state, s.component.after) for s in gated], head_state, judge.oracle, judge.score)
    turned_down = {}
    for scored, failure in zip(gated, failures):
        reason = failure or approval(_gated_change(scored, head_state, judge.oracle), judge.approve)
        if reason:
            turned_down[id(scored)] = reason
            for c in scored.component.changes:
                rejected[c.diff.id] = f"passed the test ({scored.verdict.reason}) but not the L1 gate: {reason}"
    return [s for s in passing if id(s) not in turned_down]


def _gated_change(scored: _Scored, head_state: State, oracle: Sequence[Task]) -> GatedChange:
    after = scored.component.after
    return GatedChange(
        diff_ids=[c.diff.id for c in scored.component.changes], keys=sorted(after),
        before={k: head_state.get(k) for k in after}, after=dict(after),
        rationale="\n".join(c.diff.evidence.rationale for c in scored.component.changes),
        verdict=f"{scored.verdict.reason}; no task of {len(oracle)} held out is worse",
    )


def _evidence(component: Component, train: Mapping[str, Task]) -> list[Task]:
    """The train tasks the component's diffs were made from."""
    return [train[t] for c in component.changes for t in c.diff.evidence.task_ids if t in train]


class _Scored(NamedTuple):
    component: Component
    verdict: Verdict
    rewards: list[float]
    head: list[float]


def _keep_best(passing: list[_Scored], rejected: dict[str, str], why: str) -> _Scored:
    """The component to land alone when the fusion of all that passed did not pass (`why`)."""
    best = max(passing, key=lambda p: (p.verdict.p_improve, p.verdict.comparison.mean_delta))
    for scored in passing:
        if scored is not best:
            for c in scored.component.changes:
                rejected[c.diff.id] = f"passed alone ({scored.verdict.reason}) but the fused candidate did not: {why}"
    return best


def _fuse(head_state: State, components: Sequence[Component]) -> State:
    merged: dict[str, str | None] = {}
    for comp in components:
        merged.update(comp.after)  # components hold disjoint keys
    return apply(head_state, merged)

"""Accept: the statistical test of the optimizer step, as sequential group testing.

1. Evidence first. Each component is scored against head on the failures its diffs were made
   from, in the wave of the fusion's first probes (or from the cache, where a worker verified
   them on head). One that fixes none of them goes no further.
2. The fusion, then bisection. The fusion of every surviving (L2) component is probed against
   head in waves, on tasks head passes (where harm shows), only while the policy's decision is
   open. A task it breaks is traced to its culprits by splitting the components (`bisect`, one
   rollout a question); each culprit group is judged alone, on what it fixes against what it
   breaks, and leaves unless that passes the bar; the rest are credited separately where the
   tasks they touched are disjoint from the culprits', and scored again only where they are not.
   So a round of good diffs costs one sample however many workers sent them.
3. The paired test of the fusion on its evidence and its probes (`AcceptancePolicy.__call__`).

A gated (L1) component is judged alone at the stricter bar on its evidence and a full sample,
then by the oracle and the approver (`gate`), before it joins the fusion.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from agentdescent.artifacts.state import State, apply
from agentdescent.step.bisect import culprits, search_all
from agentdescent.step.changes import Component
from agentdescent.step.gate import gated_test, oracle_gate
from agentdescent.step.policies import Verdict
from agentdescent.step.stats import mean_reward
from agentdescent.step.trial import Judge, Trial, unique
from agentdescent.types import Task


@dataclass(frozen=True, kw_only=True)
class Acceptance:
    accepted: list[Component]
    rejected: dict[str, str]  # diff id -> reason
    candidate: State
    head_reward: float | None
    candidate_reward: float | None
    reason: str = ""  # the verdict on the candidate that is committed
    held: int = 0  # components whose evidence was measured and that fixed some of it
    failed: int = 0  # components that fixed none of their evidence


@dataclass(kw_only=True)
class _Candidate:
    """Components fused into one state, and its rewards so far by task id."""

    parts: list[Component]
    state: State
    rewards: dict[str, float] = field(default_factory=dict)
    first: list[Task] = field(default_factory=list)  # its first wave of probes, when scored with the evidence


def accept(components: Sequence[Component], head_state: State, probes: Sequence[Task], judge: Judge, *,
           lone_rides: bool = False) -> Acceptance:
    """Judge the step's components against head (see the module's docstring); `probes` is head
    version's probe order (`AcceptancePolicy.sample`); `lone_rides`: a lone component's first
    probes go with its evidence though no worker verified it (the run's diffs mostly hold up)."""
    if not components:
        return Acceptance(accepted=[], rejected={}, candidate=head_state, head_reward=None, candidate_reward=None)
    step = Trial(head_state, probes, judge)
    for comp in components:  # a task two diffs were made from counts as much as the fresher one says
        for c in [*comp.changes, *comp.echoes]:
            for task_id in c.diff.evidence.task_ids:
                step.weights[task_id] = max(step.weights.get(task_id, 0.0), c.eta)
    tasks = {comp: _evidence_tasks(comp, judge.train) for comp in components}
    free = [comp for comp in components if not judge.governance.gated(comp.after)]
    # Evidence not in the cache (diffs come unmeasured, or measured on another version): the fusion's
    # first probes ride in its wave; a lone component's only if it is likely to hold (else a diff
    # that fixes nothing would be probed for nothing): its worker saw it fix something, or most do.
    lone = len(free) == 1 and (lone_rides or all((c.diff.evidence.verified_gain or 0.0) > 0 for c in free[0].changes))
    ahead = free if (len(free) > 1 or lone) and not _measured(step, free, tasks) else []
    evidence, early = _evidence(step, components, tasks, ahead)
    alive = [comp for comp in components if comp in evidence]
    gated = [comp for comp in alive if judge.governance.gated(comp.after)]
    fusion = _fusion_test(step, [comp for comp in alive if comp not in gated], evidence, early)
    passed = gated_test(step, gated, evidence)
    return replace(_combine(step, fusion, passed, evidence), held=len(evidence), failed=len(components) - len(evidence))


def _measured(step: Trial, components: Sequence[Component], tasks: Mapping[Component, list[Task]]) -> bool:
    """Whether head and each component are already measured on the component's evidence."""
    known = step.judge.known
    return all({t.id for t in tasks[comp]} <= step.head.keys() & known(apply(step.head_state, comp.after)).keys()
               for comp in components)


def _evidence(step: Trial, components: Sequence[Component], tasks: Mapping[Component, list[Task]],
              ahead: list[Component]) -> tuple[dict[Component, list[Task]], _Candidate | None]:
    """Each component that fixes at least one of its evidence tasks, with those tasks; and, when
    `ahead` is given, the fusion of `ahead` scored in the same wave on the evidence and the first probes."""
    jobs = [(apply(step.head_state, comp.after), tasks[comp]) for comp in components]
    early = None
    if ahead:
        first = step.next_wave(set())[: step.policy.size]
        early = _Candidate(parts=ahead, state=_fuse(step.head_state, ahead), first=first)
        jobs.append((early.state, unique([t for comp in ahead for t in tasks[comp]] + first)))
    rows = step.score(jobs)
    if early is not None:
        early.rewards = dict(zip((t.id for t in jobs[-1][1]), rows[-1]))
    kept: dict[Component, list[Task]] = {}
    for comp, row in zip(components, rows):
        ts = tasks[comp]
        if any(r > step.head[t.id] for t, r in zip(ts, row)):
            kept[comp] = ts
        else:
            step.reject([comp], f"rejected: fixes none of the {len(ts)} failures it was made from")
    return kept, early


def _fusion_test(step: Trial, parts: list[Component], evidence: Mapping[Component, list[Task]],
                 early: _Candidate | None = None) -> _Candidate | None:
    """The fusion of `parts` probed in waves, culprits of what it breaks bisected out; the candidate
    that is left and its rewards, or None when nothing is. `early` is a fusion already probed
    with the evidence, of `parts` and perhaps of components that then fixed none of theirs."""
    if not parts:
        return None
    judged: set[str] = set()  # broken tasks a culprit that passed its own test answers for
    if early is None:
        first = step.next_wave(set())[: step.policy.size]  # the first probes ride with the evidence
        cand = _Candidate(parts=parts, state=_fuse(step.head_state, parts))
        tasks = unique([t for comp in parts for t in evidence[comp]] + first)
        cand.rewards = dict(zip((t.id for t in tasks), step.score([(cand.state, tasks)])[0]))
    elif len(early.parts) == len(parts):
        first, cand = early.first, early
    else:  # without the components whose evidence failed, credited as culprits are
        first, failed = early.first, [c for c in early.parts if c not in parts]
        cand = _credited(step, early, parts, failed, set(), {**evidence, **{c: _evidence_tasks(c, step.judge.train) for c in failed}})
    taken = {t.id for t in first}
    while True:
        _probe(step, cand, taken, judged)
        broken = [i for i, r in cand.rewards.items() if r < step.head[i] and i not in judged]
        if not broken:
            return cand
        guilty, cleared, answered = _culprits(step, cand, broken)
        judged |= cleared
        if not guilty:
            continue
        parts = [comp for comp in cand.parts if comp not in guilty]
        if not parts:
            return None
        cand = _credited(step, cand, parts, guilty, answered - judged, evidence)


def _credited(step: Trial, old: _Candidate, parts: list[Component], guilty: list[Component], answered: set[str],
              evidence: Mapping[Component, list[Task]]) -> _Candidate:
    """The fusion of `parts`, the culprits gone. Parts that do not interact are credited
    separately: where the old fusion moved a task through a culprit alone (a task it broke, or
    its own evidence), the new one stands where head does; where it moved one through a part that
    stays (its evidence), it keeps the old reward; any other task the old fusion moved (one that
    a part which stays breaks too, say) is scored."""
    cand = _Candidate(parts=parts, state=_fuse(step.head_state, parts))
    kept = {t.id for comp in parts for t in evidence[comp]}
    gone = answered | {t.id for comp in guilty for t in evidence[comp]}
    unsure = []
    for i, r in old.rewards.items():
        if r == step.head[i] or i in kept:
            cand.rewards[i] = r
        elif i in gone:
            cand.rewards[i] = step.head[i]
        else:
            unsure.append(step.judge.train[i])
    if unsure:
        cand.rewards.update(zip((t.id for t in unsure), step.score([(cand.state, unsure)])[0]))
    return cand


def _probe(step: Trial, cand: _Candidate, taken: set[str], judged: set[str]) -> None:
    """Add waves of probes to `cand` while the harm decision is open and the cap allows."""
    policy = step.policy
    while True:
        eligible = [i for i in taken if step.head[i] > 0.0 and i not in judged]
        broken = sum(max(0.0, step.head[i] - cand.rewards[i]) for i in eligible)
        if broken > 0 or policy.harm(len(eligible) - broken, broken, gated=False) is not None:
            return
        wave = step.next_wave(taken)[: policy.size - len(taken)]
        if not wave or (all(step.fails_at_head(t) for t in wave) and len(cand.rewards) >= policy.min_tasks):
            return  # nothing left that can show harm
        cand.rewards.update(zip((t.id for t in wave), step.score([(cand.state, wave)])[0]))
        taken.update(t.id for t in wave)


def _culprits(step: Trial, cand: _Candidate, broken: list[str]) -> tuple[list[Component], set[str], set[str]]:
    """Bisect each task `cand` breaks down to the groups of its parts that break it alone; judge
    each group on what it fixes against what it breaks. The components that fail that, the broken
    tasks of the groups that pass it, and those of the groups that fail it."""
    train, parts, answers = step.judge.train, cand.parts, step.answers
    answers.update({(tuple(parts), i): cand.rewards[i] for i in broken})  # the whole set, measured

    def ask(wave: list[tuple[str, list[Component]]]) -> list[bool]:
        jobs: dict[tuple[Component, ...], tuple[list[Component], list[Task]]] = {}
        for task_id, subset in wave:
            jobs.setdefault(tuple(subset), (subset, []))[1].append(train[task_id])
        rows = step.score([(_fuse(step.head_state, subset), ts) for subset, ts in jobs.values()])
        for key, (_, ts), row in zip(jobs, jobs.values(), rows):
            answers.update(((key, t.id), r) for t, r in zip(ts, row))
        return [answers[(tuple(subset), task_id)] < step.head[task_id] for task_id, subset in wave]

    found = search_all({task_id: culprits(parts, step.policy.split) for task_id in broken}, ask)
    groups: dict[tuple[Component, ...], list[Component]] = {}
    for task_id, task_groups in found.items():
        for group in task_groups:
            key = tuple(group)
            groups[key] = group
            step.charged.setdefault(key, []).append(task_id)  # with what it broke in earlier waves
    guilty, cleared, answered = [], set(), set()
    for key, group in groups.items():
        tasks = step.charged[key]
        verdict = _alone(step, group, key, tasks, answers)
        if verdict.accepted:
            cleared.update(tasks)
            continue
        guilty += group
        answered.update(tasks)
        shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
        what = "together with " + str(len(group) - 1) + " other diffs " if len(group) > 1 else ""
        step.reject(group, f"rejected: {what}breaks {shown}, which head passes ({verdict.reason})")
    return guilty, cleared, answered


def _alone(step: Trial, group: list[Component], key: tuple[Component, ...], broken: list[str],
           answers: Mapping[tuple[tuple[Component, ...], str], float]) -> Verdict:
    """A culprit group on its own: its evidence (for one component, measured in the evidence stage
    and so cached) and the tasks it breaks."""
    evidence = unique([t for comp in group for t in _evidence_tasks(comp, step.judge.train)])
    row = step.score([(_fuse(step.head_state, group), evidence)])[0]
    candidate = row + [answers[(key, i)] for i in broken]
    head = [step.head[t.id] for t in evidence] + [step.head[i] for i in broken]
    return step.test([t.id for t in evidence] + broken, candidate, head, gated=False)


def _combine(step: Trial, free: _Candidate | None, gated: list[Component], evidence: Mapping[Component, list[Task]]) -> Acceptance:
    """The candidate to commit: the L2 fusion with the gated components that passed alone, when the
    whole passes the stricter bar (and the oracle, if it is more than one); else the L2 fusion."""
    train, size = step.judge.train, step.policy.size
    if gated:
        parts = [*(free.parts if free else []), *gated]
        tasks = unique([t for comp in parts for t in evidence[comp]] + step.probes[:size]
                        + [train[i] for i in (free.rewards if free else {})])
        cand = _Candidate(parts=parts, state=_fuse(step.head_state, parts))
        cand.rewards = dict(zip((t.id for t in tasks), step.score([(cand.state, tasks)])[0]))
        accepted = _accepted(step, cand, gated=True)
        if accepted is not None:
            return accepted
        step.reject(gated, "passed alone but the fused candidate did not pass the L1 bar")
    if free is not None:
        accepted = _accepted(step, free, gated=False)
        if accepted is not None:
            return accepted
        if len(free.parts) > 1:  # the parts interact: the one with the best evidence, alone, on the same tasks
            best = max(free.parts, key=lambda comp: _gain(step, comp, evidence))
            alone = _Candidate(parts=[best], state=apply(step.head_state, best.after))
            tasks = [train[i] for i in free.rewards]
            alone.rewards = dict(zip(free.rewards, step.score([(alone.state, tasks)])[0]))
            accepted = _accepted(step, alone, gated=False)
            if accepted is not None:
                why = step.rejected[best.changes[0].diff.id].removeprefix("rejected: ")
                step.reject([comp for comp in free.parts if comp is not best], f"passed alone, but {why}")
                for c in best.changes:
                    step.rejected.pop(c.diff.id, None)
                return accepted
    return Acceptance(accepted=[], rejected=step.rejected, candidate=step.head_state, head_reward=None,
                      candidate_reward=None)


def _gain(step: Trial, comp: Component, evidence: Mapping[Component, list[Task]]) -> float:
    """What `comp` alone gained on its evidence (scored in the evidence stage, so cached)."""
    tasks = evidence[comp]
    row = step.score([(apply(step.head_state, comp.after), tasks)])[0]
    return sum(r - step.head[t.id] for t, r in zip(tasks, row))


def _accepted(step: Trial, cand: _Candidate, *, gated: bool) -> Acceptance | None:
    """The paired test of `cand` on every task it was scored on; the acceptance if it passes."""
    ids = list(cand.rewards)
    row, head_row = [cand.rewards[i] for i in ids], [step.head[i] for i in ids]
    verdict = step.test(ids, row, head_row, gated=gated)
    refused = None
    if verdict.accepted and gated and len(cand.parts) > 1:
        refused = oracle_gate([cand.state], step.head_state, step.judge.oracle, step.judge.score)[0]
    if not verdict.accepted or refused is not None:
        if not gated:
            step.reject(cand.parts, f"rejected: the fused candidate did not pass ({refused or verdict.reason})")
        return None
    return Acceptance(accepted=cand.parts, rejected=step.rejected, candidate=cand.state,
                      head_reward=mean_reward(head_row), candidate_reward=mean_reward(row), reason=verdict.reason)


def _evidence_tasks(component: Component, train: Mapping[str, Task]) -> list[Task]:
    """The train tasks the component's diffs were made from."""
    changes = [*component.changes, *component.echoes]
    return unique([train[t] for c in changes for t in c.diff.evidence.task_ids if t in train])


def _fuse(head_state: State, components: Sequence[Component]) -> State:
    merged: dict[str, str | None] = {}
    for comp in components:
        merged.update(comp.after)  # components hold disjoint keys
    return apply(head_state, merged)

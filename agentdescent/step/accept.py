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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agentdescent.artifacts.state import State, apply
from agentdescent.governance import Governance
from agentdescent.step.bisect import culprits, search_all
from agentdescent.step.changes import Component
from agentdescent.step.gate import Approve, GatedChange, Scorer, approval, oracle_gate
from agentdescent.step.policies import Policies, Verdict
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
    by id, what is already known of a state's rewards (the evaluation cache), and the oracle set
    and approver for gated (L1) changes."""

    score: Scorer
    policies: Policies
    governance: Governance
    train: Mapping[str, Task]
    known: Callable[[State], Mapping[str, float]] = lambda state: {}
    oracle: Sequence[Task] = ()
    approve: Approve | None = None


@dataclass(kw_only=True)
class _Candidate:
    """Components fused into one state, and its rewards so far by task id."""

    parts: list[Component]
    state: State
    rewards: dict[str, float] = field(default_factory=dict)
    first: list[Task] = field(default_factory=list)  # its first wave of probes, when scored with the evidence


class _Step:
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


def accept(components: Sequence[Component], head_state: State, probes: Sequence[Task], judge: Judge) -> Acceptance:
    """Judge the step's components against head (see the module's docstring); `probes` is head
    version's probe order (`AcceptancePolicy.sample`)."""
    if not components:
        return Acceptance(accepted=[], rejected={}, candidate=head_state, head_reward=None, candidate_reward=None)
    step = _Step(head_state, probes, judge)
    for comp in components:  # a task two diffs were made from counts as much as the fresher one says
        for c in [*comp.changes, *comp.echoes]:
            for task_id in c.diff.evidence.task_ids:
                step.weights[task_id] = max(step.weights.get(task_id, 0.0), c.eta)
    tasks = {comp: _evidence_tasks(comp, judge.train) for comp in components}
    free = [comp for comp in components if not judge.governance.gated(comp.after)]
    # Evidence not in the cache (diffs come unmeasured, or measured on another version): the fusion's
    # first probes ride in its wave; a lone component's, only if its worker saw it fix something.
    lone_held = len(free) == 1 and all((c.diff.evidence.verified_gain or 0.0) > 0 for c in free[0].changes)
    ahead = free if (len(free) > 1 or lone_held) and not _measured(step, free, tasks) else []
    evidence, early = _evidence(step, components, tasks, ahead)
    alive = [comp for comp in components if comp in evidence]
    gated = [comp for comp in alive if judge.governance.gated(comp.after)]
    fusion = _fusion_test(step, [comp for comp in alive if comp not in gated], evidence, early)
    passed = _gated_test(step, gated, evidence)
    return _combine(step, fusion, passed, evidence)


def _measured(step: _Step, components: Sequence[Component], tasks: Mapping[Component, list[Task]]) -> bool:
    """Whether head and each component are already measured on the component's evidence."""
    known = step.judge.known
    return all({t.id for t in tasks[comp]} <= step.head.keys() & known(apply(step.head_state, comp.after)).keys()
               for comp in components)


def _evidence(step: _Step, components: Sequence[Component], tasks: Mapping[Component, list[Task]],
              ahead: list[Component]) -> tuple[dict[Component, list[Task]], _Candidate | None]:
    """Each component that fixes at least one of its evidence tasks, with those tasks; and, when
    `ahead` is given, the fusion of `ahead` scored in the same wave on the evidence and the first probes."""
    jobs = [(apply(step.head_state, comp.after), tasks[comp]) for comp in components]
    early = None
    if ahead:
        first = step.next_wave(set())[: step.policy.size]
        early = _Candidate(parts=ahead, state=_fuse(step.head_state, ahead), first=first)
        jobs.append((early.state, _unique([t for comp in ahead for t in tasks[comp]] + first)))
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


def _fusion_test(step: _Step, parts: list[Component], evidence: Mapping[Component, list[Task]],
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
        tasks = _unique([t for comp in parts for t in evidence[comp]] + first)
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


def _credited(step: _Step, old: _Candidate, parts: list[Component], guilty: list[Component], answered: set[str],
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


def _probe(step: _Step, cand: _Candidate, taken: set[str], judged: set[str]) -> None:
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


def _culprits(step: _Step, cand: _Candidate, broken: list[str]) -> tuple[list[Component], set[str], set[str]]:
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


def _alone(step: _Step, group: list[Component], key: tuple[Component, ...], broken: list[str],
           answers: Mapping[tuple[tuple[Component, ...], str], float]) -> Verdict:
    """A culprit group on its own: its evidence (for one component, measured in the evidence stage
    and so cached) and the tasks it breaks."""
    evidence = _unique([t for comp in group for t in _evidence_tasks(comp, step.judge.train)])
    row = step.score([(_fuse(step.head_state, group), evidence)])[0]
    candidate = row + [answers[(key, i)] for i in broken]
    head = [step.head[t.id] for t in evidence] + [step.head[i] for i in broken]
    return step.test([t.id for t in evidence] + broken, candidate, head, gated=False)


def _gated_test(step: _Step, gated: list[Component], evidence: Mapping[Component, list[Task]]) -> list[Component]:
    """The gated components that pass alone: the test at the stricter bar on their evidence and the
    first `size` probes, then the oracle (no held-out task worse) and the approver."""
    if not gated:
        return []
    probes = step.probes[: step.policy.size]
    sets = [_unique([*evidence[comp], *probes]) for comp in gated]
    rows = step.score([(apply(step.head_state, comp.after), ts) for comp, ts in zip(gated, sets)])
    passing: list[tuple[Component, Verdict]] = []
    for comp, ts, row in zip(gated, sets, rows):
        verdict = step.test([t.id for t in ts], row, [step.head[t.id] for t in ts], gated=True)
        if verdict.accepted:
            passing.append((comp, verdict))
        else:
            step.reject([comp], f"rejected: {verdict.reason}")
    judge = step.judge
    failures = oracle_gate([apply(step.head_state, comp.after) for comp, _ in passing], step.head_state,
                           judge.oracle, judge.score)
    passed = []
    for (comp, verdict), failure in zip(passing, failures):
        reason = failure or approval(_gated_change(comp, verdict, step.head_state, judge.oracle), judge.approve)
        if reason:
            step.reject([comp], f"passed the test ({verdict.reason}) but not the L1 gate: {reason}")
        else:
            passed.append(comp)
    return passed


def _combine(step: _Step, free: _Candidate | None, gated: list[Component], evidence: Mapping[Component, list[Task]]) -> Acceptance:
    """The candidate to commit: the L2 fusion with the gated components that passed alone, when the
    whole passes the stricter bar (and the oracle, if it is more than one); else the L2 fusion."""
    train, size = step.judge.train, step.policy.size
    if gated:
        parts = [*(free.parts if free else []), *gated]
        tasks = _unique([t for comp in parts for t in evidence[comp]] + step.probes[:size]
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


def _gain(step: _Step, comp: Component, evidence: Mapping[Component, list[Task]]) -> float:
    """What `comp` alone gained on its evidence (scored in the evidence stage, so cached)."""
    tasks = evidence[comp]
    row = step.score([(apply(step.head_state, comp.after), tasks)])[0]
    return sum(r - step.head[t.id] for t, r in zip(tasks, row))


def _accepted(step: _Step, cand: _Candidate, *, gated: bool) -> Acceptance | None:
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


def _gated_change(comp: Component, verdict: Verdict, head_state: State, oracle: Sequence[Task]) -> GatedChange:
    after = comp.after
    return GatedChange(
        diff_ids=[c.diff.id for c in comp.changes], keys=sorted(after),
        before={k: head_state.get(k) for k in after}, after=dict(after),
        rationale="\n".join(c.diff.evidence.rationale for c in comp.changes),
        verdict=f"{verdict.reason}; no task of {len(oracle)} held out is worse",
    )


def _evidence_tasks(component: Component, train: Mapping[str, Task]) -> list[Task]:
    """The train tasks the component's diffs were made from."""
    changes = [*component.changes, *component.echoes]
    return _unique([train[t] for c in changes for t in c.diff.evidence.task_ids if t in train])


def _unique(tasks: Sequence[Task]) -> list[Task]:
    return list({t.id: t for t in tasks}.values())


def _fuse(head_state: State, components: Sequence[Component]) -> State:
    merged: dict[str, str | None] = {}
    for comp in components:
        merged.update(comp.after)  # components hold disjoint keys
    return apply(head_state, merged)

"""Accept: the statistical test of the optimizer step, as sequential group testing.

1. Evidence first. Each component is scored against head on the failures its diffs were made
   from, in the wave of the fusion's first probes (or from the cache, where a worker verified
   them on head). One that fixes none of them goes no further.
2. The fusion, then bisection. The fusion of every surviving (L2) component is probed against
   head in waves, on tasks head passes (where harm shows), only while the policy's decision is
   open. A task it breaks is traced to its culprits by splitting the components (`bisect`, one
   rollout a question; all broken tasks at once, or `trace_at_once` of them, the others then
   scored again without the culprits found); each culprit group is judged alone, on what it
   fixes against what it breaks, and leaves unless that passes the bar; the rest are credited
   separately where the tasks they touched are disjoint from the culprits', and scored again
   only where they are not.
   So a round of good diffs costs one sample however many workers sent them.
3. The paired test of the fusion on its evidence and its probes (`AcceptancePolicy.__call__`).

Where rewards are samples (`Trial.noisy`), each judgement of one task is drawn again before it
counts: head on the failures a diff was made from (the draw that chose them was a failure by
selection), the diff's gain there over fresh pairs (`Trial.fixes`), a probe where the fusion and
head differ (broken only when a second pair breaks too), and a bisection's "it breaks".

A gated (L1) component is judged alone at the stricter bar on its evidence and a full sample,
then by the oracle and the approver (`gate`), before it joins the fusion.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from agentdescent.artifacts.state import State, apply
from agentdescent.step.bisect import culprits, search_all
from agentdescent.step.changes import Component
from agentdescent.step.gate import gated_test, oracle_gate
from agentdescent.step.policies import Verdict
from agentdescent.step.stats import mean_reward
from agentdescent.step.textmerge import stacked_onto
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
    opened: list[Task] = field(default_factory=list)  # that first wave whole: the parts' evidence and `first`
    settled: dict[str, bool] = field(default_factory=dict)  # with samples: probes drawn again -> broken in both pairs
    probed: set[str] = field(default_factory=set)  # the probes it was scored on (beside its parts' evidence)


def accept(components: Sequence[Component], head_state: State, probes: Sequence[Task], judge: Judge, *,
           lone_rides: bool = False) -> Acceptance:
    """Judge the step's components against head (see the module's docstring); `probes` is head
    version's probe order (`AcceptancePolicy.sample`); `lone_rides`: a lone component's first
    probes go with its evidence though no worker verified it (the run's diffs mostly hold up)."""
    if not components:
        return Acceptance(accepted=[], rejected={}, candidate=head_state, head_reward=None, candidate_reward=None)
    trial = Trial(head_state, probes, judge)
    for comp in components:  # a task two diffs were made from counts as much as the fresher one says
        for c in [*comp.changes, *comp.echoes]:
            for task_id in c.diff.evidence.task_ids:
                trial.weights[task_id] = max(trial.weights.get(task_id, 0.0), c.eta)
    tasks = {comp: _evidence_tasks(comp, judge.train) for comp in components}
    free = [comp for comp in components if not judge.governance.gated(comp.after)]
    # Evidence not in the cache (diffs come unmeasured, or measured on another version): the fusion's
    # first probes ride in its wave; a lone component's only if it is likely to hold (else a diff
    # that fixes nothing would be probed for nothing): its worker saw it fix something, or most do.
    lone = len(free) == 1 and (lone_rides or all((c.diff.evidence.verified_gain or 0.0) > 0 for c in free[0].changes))
    # With noisy rewards most diffs fail their evidence once it is drawn again: probe only those that pass it
    ahead = free if (len(free) > 1 or lone) and not trial.noisy and not _measured(trial, free, tasks) else []
    evidence, early = _evidence(trial, components, tasks, ahead)
    alive = [comp for comp in components if comp in evidence]
    gated = [comp for comp in alive if judge.governance.gated(comp.after)]
    fusion = _fusion_test(trial, [comp for comp in alive if comp not in gated], evidence, early)
    passed = gated_test(trial, gated, evidence)
    return replace(_combine(trial, fusion, passed, evidence), held=len(evidence), failed=len(components) - len(evidence))


def _measured(trial: Trial, components: Sequence[Component], tasks: Mapping[Component, list[Task]]) -> bool:
    """Whether head and each component are already measured on the component's evidence."""
    known = trial.judge.known
    return all({t.id for t in tasks[comp]} <= trial.head.keys() & known(apply(trial.head_state, comp.after)).keys()
               for comp in components)


def _evidence(trial: Trial, components: Sequence[Component], tasks: Mapping[Component, list[Task]],
              ahead: list[Component]) -> tuple[dict[Component, list[Task]], _Candidate | None]:
    """Each component that fixes at least one of its evidence tasks, with those tasks; and, when
    `ahead` is given, the fusion of `ahead` scored in the same wave on the evidence and the first probes."""
    jobs = [(apply(trial.head_state, comp.after), tasks[comp]) for comp in components]
    early = _opening(trial, ahead, tasks) if ahead else None
    if early is not None:
        jobs.append((early.state, early.opened))
    rows = trial.score(jobs)
    if early is not None:
        early.rewards = dict(zip((t.id for t in early.opened), rows[-1]))
    if trial.noisy is not False:  # where a diff seems to fix a failure, head's failing draw there is no evidence
        trial.redraw_head([t for comp, row in zip(components, rows) for t, r in zip(tasks[comp], row)
                           if r > trial.head[t.id]])
    kept: dict[Component, list[Task]] = {}
    for comp, (state, _), row in zip(components, jobs, rows):
        ts = tasks[comp]
        if trial.fixes(state, ts, row):
            kept[comp] = ts
        else:
            trial.reject([comp], f"rejected: fixes none of the {len(ts)} failures it was made from")
    return kept, early


def _fusion_test(trial: Trial, parts: list[Component], evidence: Mapping[Component, list[Task]],
                 early: _Candidate | None = None) -> _Candidate | None:
    """The fusion of `parts` probed in waves, culprits of what it breaks bisected out; the candidate
    that is left and its rewards, or None when nothing is. `early` is a fusion already probed
    with the evidence, of `parts` and perhaps of components that then fixed none of theirs."""
    if not parts:
        return None
    judged: set[str] = set()  # broken tasks a culprit that passed its own test answers for
    if early is None:
        cand = _opening(trial, parts, evidence)
        first = cand.first
        cand.rewards = dict(zip((t.id for t in cand.opened), trial.score([(cand.state, cand.opened)])[0]))
    elif len(early.parts) == len(parts):
        first, cand = early.first, early
    else:  # without the components whose evidence failed, credited as culprits are
        first, failed = early.first, [c for c in early.parts if c not in parts]
        cand = _credited(trial, early, parts, failed, set(), {**evidence, **{c: _evidence_tasks(c, trial.judge.train) for c in failed}})
    taken = {t.id for t in first}
    while True:
        cand.probed = taken
        _probe(trial, cand, taken, judged)
        broken = [i for i, r in cand.rewards.items() if r < trial.head[i] and i not in judged
                  and cand.settled.get(i, not trial.noisy)]
        if broken and trial.noisy:  # a break or two among many kept probes may be chance
            harm, lone = _harm(trial, cand, taken, judged), len(cand.parts) == 1
            if harm is False and lone:
                trial.reject(cand.parts, f"rejected: breaks {', '.join(broken[:5])}, which head passes, drawn twice: "
                                         f"more than one probe in {1 / trial.policy.max_harm:g}")
                return None
            if harm is True or lone:  # safe, or a lone diff undecided: the paired test weighs its breaks
                return cand
        if not broken:
            return cand
        guilty, cleared, answered = _culprits(trial, cand, broken[: trial.policy.trace_at_once])
        judged |= cleared
        if not guilty:
            continue
        parts = [comp for comp in cand.parts if comp not in guilty]
        if not parts:
            return None
        cand = _credited(trial, cand, parts, guilty, answered - judged, evidence)


def _opening(trial: Trial, parts: list[Component], evidence: Mapping[Component, list[Task]]) -> _Candidate:
    """The fusion of `parts` with its first wave, not yet scored: the parts' evidence and the first probes."""
    first = trial.next_wave(set())[: trial.policy.size]
    return _Candidate(parts=parts, state=_fuse(trial.head_state, parts), first=first,
                      opened=unique([t for comp in parts for t in evidence[comp]] + first))


def _credited(trial: Trial, old: _Candidate, parts: list[Component], guilty: list[Component], answered: set[str],
              evidence: Mapping[Component, list[Task]]) -> _Candidate:
    """The fusion of `parts`, the culprits gone. Parts that do not interact are credited
    separately: where the old fusion moved a task through a culprit alone (a task it broke, or
    its own evidence), the new one stands where head does; where it moved one through a part that
    stays (its evidence), it keeps the old reward; any other task the old fusion moved (one that
    a part which stays breaks too, say) is scored."""
    cand = _Candidate(parts=parts, state=_fuse(trial.head_state, parts))
    kept = {t.id for comp in parts for t in evidence[comp]}
    gone = answered | {t.id for comp in guilty for t in evidence[comp]}
    unsure = []
    for i, r in old.rewards.items():
        if r == trial.head[i] or i in kept:
            cand.rewards[i] = r
            if i in old.settled:
                cand.settled[i] = old.settled[i]
        elif i in gone:
            cand.rewards[i] = trial.head[i]
        else:
            unsure.append(trial.judge.train[i])
    if unsure:
        cand.rewards.update(zip((t.id for t in unsure), trial.score([(cand.state, unsure)])[0]))
    return cand


def _probe(trial: Trial, cand: _Candidate, taken: set[str], judged: set[str]) -> None:
    """Add waves of probes to `cand` while the harm decision is open and the cap allows: `size`,
    or with samples twice that once a probe broke twice (one more break may be what decides)."""
    policy = trial.policy
    cap = policy.size
    while True:
        if trial.noisy is not False:  # while the run is finding out too: a probe broken by chance shows noise
            _settle(trial, cand, taken, gains=trial.noisy is None)
        if trial.noisy:
            if _harm(trial, cand, taken, judged) is not None:
                return
            if any(cand.settled.get(i, False) for i in taken):
                cap = 2 * policy.size
        else:
            kept, broken = _kept_broken(trial, cand, taken, judged, counts=lambda i: cand.settled.get(i, True))
            if broken > 0 or policy.harm(kept, broken, gated=False) is not None:
                return
        wave = trial.next_wave(taken)[: cap - len(taken)]
        if not wave or (all(trial.fails_at_head(t) for t in wave) and len(cand.rewards) >= policy.min_tasks):
            return  # nothing left that can show harm
        cand.rewards.update(zip((t.id for t in wave), trial.score([(cand.state, wave)])[0]))
        taken.update(t.id for t in wave)


def _harm(trial: Trial, cand: _Candidate, taken: set[str], judged: set[str]) -> bool | None:
    """With samples: the policy's verdict on the harm rate of `cand` over its probes head passes
    (`AcceptancePolicy.harm_rate`), each probe drawn twice counted as broken by what head's mean
    exceeds the candidate's there."""
    return trial.policy.harm_rate(*_kept_broken(trial, cand, taken, judged, counts=lambda i: i in cand.settled))


def _kept_broken(trial: Trial, cand: _Candidate, taken: set[str], judged: set[str],
                 counts: Callable[[str], bool]) -> tuple[float, float]:
    """Of the probes head passes and no culprit was judged on: how many `cand` kept, and how much
    it broke (by what head exceeds it) where `counts` says a break counts."""
    eligible = [i for i in taken if trial.head[i] > 0.0 and i not in judged]
    broken = sum(max(0.0, trial.head[i] - cand.rewards[i]) for i in eligible if counts(i))
    return len(eligible) - broken, broken


def _settle(trial: Trial, cand: _Candidate, taken: set[str], *, gains: bool) -> None:
    """With samples: each probe where `cand` is below head (and, with `gains`, above it), not yet
    drawn again, gets a second pair of draws; it is broken only when it breaks in both, and its
    rewards become the means. A gain is drawn again only where the paired test hinges on it."""
    train = trial.judge.train
    doubt = [i for i in taken if i in cand.rewards and i not in cand.settled
             and (cand.rewards[i] < trial.head[i] or (gains and cand.rewards[i] > trial.head[i]))]
    if not doubt:
        return
    first = {i: (cand.rewards[i], trial.head[i]) for i in doubt}
    for i, (c, h) in zip(doubt, trial.pairs(cand.state, [train[i] for i in doubt])):
        cand.settled[i] = first[i][0] < first[i][1] and c < h
        cand.rewards[i] = (first[i][0] + c) / 2


def _culprits(trial: Trial, cand: _Candidate, broken: list[str]) -> tuple[list[Component], set[str], set[str]]:
    """Bisect each task `cand` breaks down to the groups of its parts that break it alone; judge
    each group on what it fixes against what it breaks. The components that fail that, the broken
    tasks of the groups that pass it, and those of the groups that fail it."""
    train, parts, answers = trial.judge.train, cand.parts, trial.answers
    answers.update({(tuple(parts), i): cand.rewards[i] for i in broken})  # the whole set, measured

    def ask(wave: list[tuple[str, list[Component]]]) -> list[bool]:
        jobs: dict[tuple[Component, ...], tuple[list[Component], list[Task]]] = {}
        for task_id, subset in wave:
            jobs.setdefault(tuple(subset), (subset, []))[1].append(train[task_id])
        states = {key: _fuse(trial.head_state, subset) for key, (subset, _) in jobs.items()}
        rows = trial.score([(states[key], ts) for key, (_, ts) in jobs.items()])
        for key, (_, ts), row in zip(jobs, jobs.values(), rows):
            answers.update(((key, t.id), r) for t, r in zip(ts, row))
        if trial.noisy:  # "it breaks" is drawn again, and stands only when it breaks again
            doubt = {key: [t for t in ts if answers[(key, t.id)] < trial.head[t.id]] for key, (_, ts) in jobs.items()}
            doubt = {key: ts for key, ts in doubt.items() if ts}
            if doubt:
                assert trial.judge.again is not None
                for key, row in zip(doubt, trial.judge.again([(states[key], ts) for key, ts in doubt.items()])):
                    for t, r in zip(doubt[key], row):
                        answers[(key, t.id)] = r if r < trial.head[t.id] else max(r, answers[(key, t.id)])
        return [answers[(tuple(subset), task_id)] < trial.head[task_id] for task_id, subset in wave]

    found = search_all({task_id: culprits(parts, trial.policy.split) for task_id in broken}, ask)
    groups: dict[tuple[Component, ...], list[Component]] = {}
    for task_id, task_groups in found.items():
        for group in task_groups:
            key = tuple(group)
            groups[key] = group
            trial.charged.setdefault(key, []).append(task_id)  # with what it broke in earlier waves
    guilty, cleared, answered = [], set(), set()
    for key, group in groups.items():
        tasks = trial.charged[key]
        verdict = _alone(trial, group, key, tasks, answers)
        if verdict.accepted:
            cleared.update(tasks)
            continue
        guilty += group
        answered.update(tasks)
        shown = ", ".join(tasks[:5]) + (f" and {len(tasks) - 5} more" if len(tasks) > 5 else "")
        what = "together with " + str(len(group) - 1) + " other diffs " if len(group) > 1 else ""
        trial.reject(group, f"rejected: {what}breaks {shown}, which head passes ({verdict.reason})")
    return guilty, cleared, answered


def _alone(trial: Trial, group: list[Component], key: tuple[Component, ...], broken: list[str],
           answers: Mapping[tuple[tuple[Component, ...], str], float]) -> Verdict:
    """A culprit group on its own: its evidence (for one component, measured in the evidence stage
    and so cached) and the tasks it breaks."""
    evidence = unique([t for comp in group for t in _evidence_tasks(comp, trial.judge.train)])
    row = trial.score([(_fuse(trial.head_state, group), evidence)])[0]
    candidate = row + [answers[(key, i)] for i in broken]
    head = [trial.head[t.id] for t in evidence] + [trial.head[i] for i in broken]
    return trial.test([t.id for t in evidence] + broken, candidate, head, gated=False)


def _combine(trial: Trial, free: _Candidate | None, gated: list[Component], evidence: Mapping[Component, list[Task]]) -> Acceptance:
    """The candidate to commit: the L2 fusion with the gated components that passed alone, when the
    whole passes the stricter bar (and the oracle, if it is more than one); else the L2 fusion."""
    train, size = trial.judge.train, trial.policy.size
    if gated:
        parts = [*(free.parts if free else []), *gated]
        tasks = unique([t for comp in parts for t in evidence[comp]] + trial.probes[:size]
                        + [train[i] for i in (free.rewards if free else {})])
        cand = _Candidate(parts=parts, state=_fuse(trial.head_state, parts))
        cand.rewards = dict(zip((t.id for t in tasks), trial.score([(cand.state, tasks)])[0]))
        accepted = _accepted(trial, cand, gated=True)
        if accepted is not None:
            return accepted
        trial.reject(gated, "passed alone but the fused candidate did not pass the L1 bar")
    if free is not None:
        accepted = _accepted(trial, free, gated=False)
        if accepted is not None:
            return accepted
        if len(free.parts) > 1:  # the parts interact: the one with the best evidence, alone, on the same tasks
            best = max(free.parts, key=lambda comp: _gain(trial, comp, evidence))
            alone = _Candidate(parts=[best], state=apply(trial.head_state, best.after))
            tasks = [train[i] for i in free.rewards]
            alone.rewards = dict(zip(free.rewards, trial.score([(alone.state, tasks)])[0]))
            accepted = _accepted(trial, alone, gated=False)
            if accepted is not None:
                why = trial.rejected[best.changes[0].diff.id].removeprefix("rejected: ")
                trial.reject([comp for comp in free.parts if comp is not best], f"passed alone, but {why}")
                for c in best.changes:
                    trial.rejected.pop(c.diff.id, None)
                return accepted
    return Acceptance(accepted=[], rejected=trial.rejected, candidate=trial.head_state, head_reward=None,
                      candidate_reward=None)


def _gain(trial: Trial, comp: Component, evidence: Mapping[Component, list[Task]]) -> float:
    """What `comp` alone gained on its evidence (scored in the evidence stage, so cached)."""
    tasks = evidence[comp]
    row = trial.score([(apply(trial.head_state, comp.after), tasks)])[0]
    return sum(r - trial.head[t.id] for t, r in zip(tasks, row))


def _accepted(trial: Trial, cand: _Candidate, *, gated: bool) -> Acceptance | None:
    """The paired test of `cand` on every task it was scored on; the acceptance if it passes. With
    samples, probes it gained on by one pair of draws are drawn again when the verdict turns on
    them (it would not pass with them as ties)."""
    ids = list(cand.rewards)
    row, head_row = [cand.rewards[i] for i in ids], [trial.head[i] for i in ids]
    verdict = trial.test(ids, row, head_row, gated=gated)
    unsure = {i for i in cand.probed if i in cand.rewards and i not in cand.settled and cand.rewards[i] > trial.head[i]}
    if verdict.accepted and trial.noisy and unsure:
        as_ties = [trial.head[i] if i in unsure else r for i, r in zip(ids, row)]
        if not trial.test(ids, as_ties, head_row, gated=gated).accepted:
            _settle(trial, cand, unsure, gains=True)
            row, head_row = [cand.rewards[i] for i in ids], [trial.head[i] for i in ids]
            verdict = trial.test(ids, row, head_row, gated=gated)
    refused = None
    if verdict.accepted and gated and len(cand.parts) > 1:
        refused = oracle_gate([cand.state], trial.head_state, trial.judge.oracle, trial.judge.score)[0]
    if not verdict.accepted or refused is not None:
        if not gated:
            trial.reject(cand.parts, f"rejected: the fused candidate did not pass ({refused or verdict.reason})")
        return None
    return Acceptance(accepted=cand.parts, rejected=trial.rejected, candidate=cand.state,
                      head_reward=mean_reward(head_row), candidate_reward=mean_reward(row), reason=verdict.reason)


def _evidence_tasks(component: Component, train: Mapping[str, Task]) -> list[Task]:
    """The train tasks the component's diffs were made from."""
    changes = [*component.changes, *component.echoes]
    return unique([train[t] for c in changes for t in c.diff.evidence.task_ids if t in train])


def _fuse(head_state: State, components: Sequence[Component]) -> State:
    """Head with the components' edits; where two hold one key, each only inserts lines there
    (`resolve` stacks nothing else), and the key holds both insertions."""
    merged: dict[str, str | None] = {}
    for comp in components:
        for key, text in comp.after.items():
            merged[key] = stacked_onto(head_state.get(key, ""), merged.get(key), text)
    return apply(head_state, merged)

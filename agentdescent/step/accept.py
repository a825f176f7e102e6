"""Accept: the statistical test of the optimizer step, as sequential group testing.

1. Evidence first. Each component is scored against head on the failures its diffs were made
   from, in the wave of the fusion's first probes (or from the cache, where a worker verified
   them on head). One that fixes none of them goes no further.
2. The fusion, then bisection. The fusion of every surviving (L2) component is probed against
   head in waves, on tasks head passes (where harm shows), only while the policy's decision is
   open. A task it breaks is traced to its culprits by splitting the components (`bisect`, one
   rollout a question; all broken tasks at once, or `trace_at_once` of them, the others then
   scored again without the culprits found: `tracing`); each culprit group is judged alone, on
   what it fixes against what it breaks, and leaves unless that passes the bar (a culprit of
   diffs merged on one file leaves but for the one of them that passes alone); the rest are credited
   separately where the tasks they touched are disjoint from the culprits', and scored again
   only where they are not.
   So a round of good diffs costs one sample however many workers sent them.
3. The paired test of the fusion on its evidence and its probes (`AcceptancePolicy.__call__`).

Where rewards are samples (`Trial.noisy`), each judgement of one task is drawn again before it
counts: head on the failures a diff was made from (the draw that chose them was a failure by
selection), the diff's gain there over fresh pairs (`Trial.fixing`), a probe where the fusion and
head differ (broken only when a second pair breaks too), and a bisection's "it breaks".

A gated (L1) component is judged alone at the stricter bar on its evidence and a full sample,
then by the oracle and the approver (`gate`), before it joins the fusion; one the approver
declined before is refused first, and judged no further.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from agentdescent.artifacts.state import State, apply
from agentdescent.quoting import bounded
from agentdescent.step.changes import Component
from agentdescent.step.gate import declined_before, gated_test, oracle_gate
from agentdescent.step.stats import mean_reward
from agentdescent.step.tracing import Candidate, evidence_tasks, fuse, trace
from agentdescent.step.trial import Judge, Trial, unique
from agentdescent.types import OutcomeKind, Task

ERROR_CHARS = 600  # of a failed rollout's error, in the reason a change is refused for

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
    kinds: dict[str, OutcomeKind] = field(default_factory=dict)  # rejected diff id -> its outcome kind where no test refused it
    approved: dict[str, str] = field(default_factory=dict)  # accepted diff id -> the L1 change an approver approved


def accept(components: Sequence[Component], head_state: State, probes: Sequence[Task], judge: Judge, *,
           lone_rides: bool = False) -> Acceptance:
    """Judge the step's components against head (see the module's docstring); `probes` is head
    version's probe order (`AcceptancePolicy.sample`); `lone_rides`: a lone component's first
    probes go with its evidence though no worker verified it (the run's diffs mostly hold up)."""
    if not components:
        return Acceptance(accepted=[], rejected={}, candidate=head_state, head_reward=None, candidate_reward=None)
    trial = Trial(head_state, probes, judge)
    components = declined_before(trial, components)
    fusion, passed, evidence = _judged(trial, components, lone_rides) if components else (None, [], {})
    acceptance = _combine(trial, fusion, passed, evidence)
    landed = {c.diff.id for comp in acceptance.accepted for c in comp.changes}
    return replace(acceptance, held=len(evidence), failed=len(components) - len(evidence), kinds=dict(trial.kinds),
                   approved={i: change for i, change in trial.approved.items() if i in landed})


def _judged(trial: Trial, components: Sequence[Component],
            lone_rides: bool) -> tuple[Candidate | None, list[Component], dict[Component, list[Task]]]:
    """The L2 fusion that is left, the gated components that passed alone, and each component's
    evidence (those that fixed some of it)."""
    judge = trial.judge
    for comp in components:  # a task two diffs were made from counts as much as the fresher one says
        for c in [*comp.changes, *comp.echoes]:
            for task_id in c.diff.evidence.task_ids:
                trial.weights[task_id] = max(trial.weights.get(task_id, 0.0), c.eta)
    tasks = {comp: evidence_tasks(comp, judge.train) for comp in components}
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
    return fusion, gated_test(trial, gated, evidence), evidence


def _measured(trial: Trial, components: Sequence[Component], tasks: Mapping[Component, list[Task]]) -> bool:
    """Whether head and each component are already measured on the component's evidence."""
    known = trial.judge.known
    return all({t.id for t in tasks[comp]} <= trial.head.keys() & known(apply(trial.head_state, comp.after)).keys()
               for comp in components)


def _evidence(trial: Trial, components: Sequence[Component], tasks: Mapping[Component, list[Task]],
              ahead: list[Component]) -> tuple[dict[Component, list[Task]], Candidate | None]:
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
    fixing = trial.fixing([(state, tasks[comp], row) for comp, (state, _), row in zip(components, jobs, rows)])
    for comp, (state, _), fixes in zip(components, jobs, fixing):
        if fixes:
            kept[comp] = tasks[comp]
        else:
            trial.reject([comp], _fixes_none(trial.judge.errors(state, tasks[comp]), len(tasks[comp])))
    return kept, early


def _fixes_none(errors: Sequence[str], n: int) -> str:
    """Why a change that fixes none of the `n` failures it was made from is rejected, saying how many
    of its rollouts on them failed with an error, and the first error: where all did, that is why."""
    if not errors:
        return f"rejected: fixes none of the {n} failures it was made from"
    first = bounded(errors[0], ERROR_CHARS)
    if len(errors) == n:
        return f"rejected: every rollout of it on the {n} failures it was made from failed ({n} of {n}), so it fixes " \
               f"none of them; the first error: {first}"
    return f"rejected: fixes none of the {n} failures it was made from ({len(errors)} of its rollouts there failed; the " \
           f"first error: {first})"


def _fusion_test(trial: Trial, parts: list[Component], evidence: dict[Component, list[Task]],
                 early: Candidate | None = None) -> Candidate | None:
    """The fusion of `parts` probed in waves, culprits of what it breaks bisected out; the candidate
    that is left and its rewards, or None when nothing is. `early` is a fusion already probed
    with the evidence, of `parts` and perhaps of components that then fixed none of theirs. A
    diff split out of a guilty merged component joins the parts, and `evidence` with its own."""
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
        cand = _credited(trial, early, parts, failed, set(), {**evidence, **{c: evidence_tasks(c, trial.judge.train) for c in failed}})
    taken = {t.id for t in first}
    while True:
        cand.probed = taken
        _probe(trial, cand, taken, judged)
        broken = [i for i, r in cand.rewards.items() if r < trial.head[i] and i not in judged
                  and cand.settled.get(i, not trial.noisy)]
        if broken and trial.noisy:  # a break or two among many kept probes may be chance
            harm, lone = _harm(trial, cand, taken, judged), len(cand.parts) == 1 and len(cand.parts[0].changes) == 1
            if harm is False and lone:
                trial.reject(cand.parts, f"rejected: breaks {', '.join(broken[:5])}, which head passes, drawn twice: "
                                         "more of its probes than the acceptance policy lets a change break")
                return None
            if harm is True or lone:  # safe, or a lone diff undecided: the paired test weighs its breaks
                return cand  # (diffs merged on one file are traced, and split, as a fusion is)
        if not broken:
            return cand
        traced = trace(trial, cand, broken[: trial.policy.trace_at_once])
        judged |= traced.cleared
        if not traced.guilty:
            continue
        evidence.update((piece, evidence_tasks(piece, trial.judge.train)) for piece in traced.pieces)
        parts = [comp for comp in cand.parts if comp not in traced.guilty] + traced.pieces
        if not parts:
            return None
        cand = _credited(trial, cand, parts, traced.guilty, traced.answered - judged, evidence)


def _opening(trial: Trial, parts: list[Component], evidence: Mapping[Component, list[Task]]) -> Candidate:
    """The fusion of `parts` with its first wave, not yet scored: the parts' evidence and the first probes."""
    first = trial.next_wave(set())[: trial.policy.size]
    return Candidate(parts=parts, state=fuse(trial.head_state, parts), first=first,
                      opened=unique([t for comp in parts for t in evidence[comp]] + first))


def _credited(trial: Trial, old: Candidate, parts: list[Component], guilty: list[Component], answered: set[str],
              evidence: Mapping[Component, list[Task]]) -> Candidate:
    """The fusion of `parts`, the culprits gone. Parts that do not interact are credited
    separately: where the old fusion moved a task through a culprit alone (a task it broke, or
    its own evidence), the new one stands where head does; where it moved one through a part that
    stays (its evidence), it keeps the old reward; any other task the old fusion moved (one that
    a part which stays breaks too, say) is scored."""
    cand = Candidate(parts=parts, state=fuse(trial.head_state, parts))
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


def _probe(trial: Trial, cand: Candidate, taken: set[str], judged: set[str]) -> None:
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


def _harm(trial: Trial, cand: Candidate, taken: set[str], judged: set[str]) -> bool | None:
    """With samples: the policy's verdict on the harm rate of `cand` over its probes head passes
    (`AcceptancePolicy.harm_rate`), each probe drawn twice counted as broken by what head's mean
    exceeds the candidate's there."""
    return trial.policy.harm_rate(*_kept_broken(trial, cand, taken, judged, counts=lambda i: i in cand.settled))


def _kept_broken(trial: Trial, cand: Candidate, taken: set[str], judged: set[str],
                 counts: Callable[[str], bool]) -> tuple[float, float]:
    """Of the probes head passes and no culprit was judged on: how many `cand` kept, and how much
    it broke (by what head exceeds it) where `counts` says a break counts."""
    eligible = [i for i in taken if trial.head[i] > 0.0 and i not in judged]
    broken = sum(max(0.0, trial.head[i] - cand.rewards[i]) for i in eligible if counts(i))
    return len(eligible) - broken, broken


def _settle(trial: Trial, cand: Candidate, taken: set[str], *, gains: bool) -> None:
    """With samples: each probe where `cand` is below head (and, with `gains`, above it), not yet
    drawn again, gets a second pair of draws; it is broken only when it breaks in both, and its
    rewards become the means. A gain is drawn again only where the paired test hinges on it."""
    train = trial.judge.train
    doubt = [i for i in taken if i in cand.rewards and i not in cand.settled
             and (cand.rewards[i] < trial.head[i] or (gains and cand.rewards[i] > trial.head[i]))]
    if not doubt:
        return
    first = {i: (cand.rewards[i], trial.head[i]) for i in doubt}
    for i, (c, h) in zip(doubt, trial.pairs([(cand.state, [train[i] for i in doubt])])[0]):
        cand.settled[i] = first[i][0] < first[i][1] and c < h
        cand.rewards[i] = (first[i][0] + c) / 2


def _combine(trial: Trial, free: Candidate | None, gated: list[Component], evidence: Mapping[Component, list[Task]]) -> Acceptance:
    """The candidate to commit: the L2 fusion with the gated components that passed alone, when the
    whole passes the stricter bar (and the oracle, if it is more than one); else the L2 fusion."""
    train, size = trial.judge.train, trial.policy.size
    if gated:
        parts = [*(free.parts if free else []), *gated]
        tasks = unique([t for comp in parts for t in evidence[comp]] + trial.probes[:size]
                        + [train[i] for i in (free.rewards if free else {})])
        cand = Candidate(parts=parts, state=fuse(trial.head_state, parts))
        cand.rewards = dict(zip((t.id for t in tasks), trial.score([(cand.state, tasks)])[0]))
        accepted = _accepted(trial, cand, gated=True)
        if accepted is not None:
            return accepted
        for comp in gated:
            approved = trial.approved.get(comp.changes[0].diff.id)
            trial.reject([comp], (f"approved as L1 change {approved}, " if approved else "")
                         + "passed alone but the fused candidate did not pass the L1 bar")
    if free is not None:
        accepted = _accepted(trial, free, gated=False)
        if accepted is not None:
            return accepted
        if len(free.parts) > 1:  # the parts interact: the one with the best evidence, alone, on the same tasks
            best = max(free.parts, key=lambda comp: _gain(trial, comp, evidence))
            alone = Candidate(parts=[best], state=apply(trial.head_state, best.after))
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


def _accepted(trial: Trial, cand: Candidate, *, gated: bool) -> Acceptance | None:
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



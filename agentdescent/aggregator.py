"""The optimizer step: admit → rebase → resolve → accept → commit.

Diffs do not add like gradients, so the step is not an average. Each stage is a small function;
`Aggregator.step` threads a batch of diffs through them and gives every diff exactly one
`Outcome`. What it leaves out: producing diffs (workers), scoring (the `Evaluator` it is handed)
and storage (the `Ledger`).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from agentdescent.errors import HeadMoved, LedgerError
from agentdescent.governance import Governance
from agentdescent.ledger import Ledger
from agentdescent.policies import Policies, Verdict, acceptance_set
from agentdescent.strategies import State
from agentdescent.types import Diff, Outcome, OutcomeKind, Task

# Scores each (state, tasks) job, all in flight at once: one row of rewards per job.
Scorer = Callable[[Sequence[tuple[Mapping[str, str], Sequence[Task]]]], list[list[float]]]


@dataclass(frozen=True, kw_only=True)
class Change:
    """A diff rebased onto head: the new text of each key it changes (None deletes the key)."""

    diff: Diff
    staleness: int
    after: dict[str, str | None]
    note: str = ""


@dataclass(kw_only=True)
class Component:
    """Changes that share keys, so they are accepted or rejected together."""

    changes: list[Change]
    after: dict[str, str | None]
    fused_keys: set[str] = field(default_factory=set)


@dataclass(frozen=True, kw_only=True)
class StepReport:
    step: int
    base_version: int
    version: int | None  # the new dev version, or None when nothing landed
    outcomes: list[Outcome]
    head_reward: float | None = None  # mean on the committed candidate's acceptance set
    candidate_reward: float | None = None
    timings: dict[str, float] = field(default_factory=dict)


def apply(state: Mapping[str, str], after: Mapping[str, str | None]) -> State:
    """The state with `after` written over it. apply({"a": "1"}, {"a": None, "b": "2"}) == {"b": "2"}"""
    new = dict(state)
    for key, text in after.items():
        if text is None:
            new.pop(key, None)
        else:
            new[key] = text
    return new


def _outcome(diff: Diff, kind: OutcomeKind, reason: str, step: int, version: int | None = None) -> Outcome:
    return Outcome(diff_id=diff.id, kind=kind, reason=reason, version=version, step=step, author=diff.author)


# -- admit -------------------------------------------------------------------------------------


def admit(diff: Diff, artifact_id: str, governance: Governance) -> tuple[OutcomeKind, str] | None:
    """Schema, size, path safety, then governance. None admits the diff."""
    if diff.artifact_id != artifact_id:
        return "invalid", f"diff is for artifact {diff.artifact_id!r}, this step is for {artifact_id!r}"
    invalid = governance.invalidity(diff)
    if invalid:
        return "invalid", invalid
    refused = governance.refusal(diff)
    return ("refused_by_governance", refused) if refused else None


# -- rebase ------------------------------------------------------------------------------------


def rebase(
    diff: Diff, head: int, head_state: Mapping[str, str], base_state: Mapping[str, str], policies: Policies
) -> Change | tuple[OutcomeKind, str]:
    """Carry `diff` from its base onto head: keys head changed since are merged three-way."""
    staleness = head - diff.base_version
    conflicts, after = [], {}
    for edit in diff.edits:
        base_text, head_text = base_state.get(edit.key), head_state.get(edit.key)
        if edit.before != base_text:
            return "invalid", f"edit of {edit.key!r} does not start from its text at version {diff.base_version}"
        merged = edit.after if head_text == base_text else policies.fusion(base_text, edit.after, head_text)
        if merged is False:
            conflicts.append(edit.key)
        elif merged != head_text:
            after[edit.key] = merged
    if after:
        note = f"; its edit of {', '.join(conflicts)} conflicted with head and was dropped" if conflicts else ""
        return Change(diff=diff, staleness=staleness, after=after, note=note)
    if conflicts:
        return "conflict_lost", f"{', '.join(conflicts)} changed since version {diff.base_version} and the edits overlap"
    return "duplicate", f"head (version {head}) already says this"


# -- resolve -----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Resolution:
    components: list[Component]
    unplaced: dict[str, tuple[OutcomeKind, str]]  # diffs left with no key: duplicates and losers
    lost: dict[str, list[str]]  # diff id -> keys it lost to a better diff


def resolve(changes: Sequence[Change], head_state: Mapping[str, str], policies: Policies) -> Resolution:
    """Fold the step's changes key by key: merge what merges, let the conflict policy settle the
    rest (the loser keeps its other keys), then group changes that share keys into components."""
    text: dict[str, str | None] = {}
    owners: dict[str, list[Change]] = {}
    lost: dict[str, list[str]] = {}
    for change in changes:
        for key, new in change.after.items():
            if key not in text:
                text[key], owners[key] = new, [change]
                continue
            merged = policies.fusion(head_state.get(key), text[key], new)
            if merged is not False:
                if merged != text[key]:
                    owners[key].append(change)
                text[key] = merged
                continue
            rivals = owners[key] + [change]
            winner = rivals[policies.conflict([c.diff for c in rivals], [c.staleness for c in rivals], policies.staleness)]
            for loser in rivals:
                if loser is not winner:
                    lost.setdefault(loser.diff.id, []).append(key)
            text[key], owners[key] = winner.after[key], [winner]
    return Resolution(components=_components(changes, text, owners), unplaced=_unplaced(changes, owners, lost), lost=lost)


def _components(
    changes: Sequence[Change], text: dict[str, str | None], owners: dict[str, list[Change]]
) -> list[Component]:
    """Union the changes that hold a key together; components come out in proposal order."""
    owned = {c.diff.id for holders in owners.values() for c in holders}
    parent = {diff_id: diff_id for diff_id in owned}

    def find(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for holders in owners.values():
        for c in holders[1:]:
            parent[find(c.diff.id)] = find(holders[0].diff.id)
    components: dict[str, Component] = {}
    for c in changes:
        if c.diff.id in owned:
            components.setdefault(find(c.diff.id), Component(changes=[], after={})).changes.append(c)
    for key, holders in owners.items():
        comp = components[find(holders[0].diff.id)]
        comp.after[key] = text[key]
        if len(holders) > 1:
            comp.fused_keys.add(key)
    return list(components.values())


def _unplaced(
    changes: Sequence[Change], owners: dict[str, list[Change]], lost: dict[str, list[str]]
) -> dict[str, tuple[OutcomeKind, str]]:
    owned = {c.diff.id for holders in owners.values() for c in holders}
    verdicts: dict[str, tuple[OutcomeKind, str]] = {}
    for c in changes:
        if c.diff.id in owned:
            continue
        if c.diff.id in lost:
            keys = ", ".join(lost[c.diff.id])
            verdicts[c.diff.id] = ("conflict_lost", f"its edit of {keys} overlapped a diff with better evidence")
        else:
            verdicts[c.diff.id] = ("duplicate", "another diff of this step makes the same change")
    return verdicts


# -- accept ------------------------------------------------------------------------------------


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
    prefetch: Sequence[Task] = (),
) -> Acceptance:
    """Score each component against head on its own evidence plus the step's `sample`, then the
    fusion of those that pass on all their evidence plus the sample; keep the fusion if it passes
    too, else only the single best component. The fusion is also scored on `prefetch` in the same
    wave, so that the validation which follows its commit finds the scores cached."""
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
        return Acceptance(accepted=[], rejected=rejected, candidate=head_state, head_reward=_mean(rows[0]), candidate_reward=None)
    if len(passing) > 1:
        fused = _fuse(head_state, [p.component for p in passing])
        tasks = acceptance_set([t for p in passing for t in _evidence(p.component, train)], sample)
        fused_row = score([(fused, [*tasks, *prefetch])])[0][: len(tasks)]
        head_row = [head[t.id] for t in tasks]
        verdict = policies.acceptance(fused_row, head_row, gated=any(governance.gated(p.component.after) for p in passing))
        if verdict.accepted:
            return Acceptance(
                accepted=[p.component for p in passing], rejected=rejected, candidate=fused,
                head_reward=_mean(head_row), candidate_reward=_mean(fused_row), reason=verdict.reason,
            )
        passing = [_keep_best(passing, rejected, verdict)]
    best = passing[0]
    return Acceptance(
        accepted=[best.component], rejected=rejected, candidate=apply(head_state, best.component.after),
        head_reward=_mean(best.head), candidate_reward=_mean(best.rewards), reason=best.verdict.reason,
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


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


# -- commit ------------------------------------------------------------------------------------


def commit_message(step: int, acceptance: Acceptance) -> tuple[str, dict[str, str]]:
    changes = [c for comp in acceptance.accepted for c in comp.changes]
    keys = sorted({k for comp in acceptance.accepted for k in comp.after})
    subject = f"step {step}: {len(changes)} diff(s) on {len(keys)} key(s)"
    if acceptance.head_reward is not None and acceptance.candidate_reward is not None:
        subject += f", acceptance {acceptance.head_reward:.3f} -> {acceptance.candidate_reward:.3f}"
    trailers = {
        "Step": str(step),
        "Diffs": ",".join(c.diff.id for c in changes),
        "Authors": ",".join(c.diff.author or "-" for c in changes),
        "Base-Versions": ",".join(str(c.diff.base_version) for c in changes),
        "Staleness": ",".join(str(c.staleness) for c in changes),
        "Keys": ",".join(keys),
        "Reward-Head": f"{acceptance.head_reward:.4f}" if acceptance.head_reward is not None else "-",
        "Reward-Candidate": f"{acceptance.candidate_reward:.4f}" if acceptance.candidate_reward is not None else "-",
    }
    return subject, trailers


def commit(
    ledger: Ledger, artifact_id: str, head: int, head_state: State, acceptance: Acceptance,
    step: int, policies: Policies, retries: int = 3,
) -> int:
    """Compare-and-swap the candidate onto `dev`. If another writer moved `dev`, carry the change
    onto the new head by three-way merge and retry; raise `HeadMoved` when it no longer applies."""
    subject, trailers = commit_message(step, acceptance)
    candidate, base, base_state = acceptance.candidate, head, head_state
    for _ in range(retries):
        try:
            return ledger.commit(artifact_id, candidate, expected_version=base, message=subject, trailers=trailers)
        except HeadMoved as moved:
            new_base = ledger.head()
            new_state = ledger.snapshot(artifact_id, new_base)
            carried = _carry(base_state, candidate, new_state, policies)
            if carried is None:
                raise moved
            candidate, base, base_state = carried, new_base, new_state
    raise HeadMoved(base, ledger.head())


def _carry(old: State, ours: State, theirs: State, policies: Policies) -> State | None:
    after: dict[str, str | None] = {}
    for key in set(old) | set(ours):
        if old.get(key) == ours.get(key):
            continue
        merged = policies.fusion(old.get(key), ours.get(key), theirs.get(key))
        if merged is False:
            return None
        after[key] = merged
    return apply(theirs, after)


# -- the step ----------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Aggregator:
    """Owns the write side of one artifact in one ledger. Call `step` from one thread."""

    ledger: Ledger
    artifact_id: str
    governance: Governance
    policies: Policies
    train: Sequence[Task]
    score: Scorer
    lag_budget: int | None = None
    rng: random.Random = field(default_factory=random.Random)
    prefetch: Sequence[Task] = ()  # scored beside a fused candidate: the held-out set

    def step(self, diffs: Sequence[Diff], step: int, sample: Sequence[Task] | None = None) -> StepReport:
        """Aggregate one batch of diffs. `sample` is the step's acceptance sample when the caller
        drew it ahead (so that workers could verify on it); else the acceptance policy draws one."""
        t0 = time.perf_counter()
        head = self.ledger.head()
        head_state = self.ledger.snapshot(self.artifact_id, head)
        verdicts: dict[str, tuple[OutcomeKind, str]] = {}
        changes = self._admit_and_rebase(diffs, head, head_state, verdicts)
        resolution = resolve(changes, head_state, self.policies)
        verdicts.update(resolution.unplaced)
        t1 = time.perf_counter()
        components = resolution.components
        if sample is None:
            sample = self.policies.acceptance.sample(self.train, self.rng)
        acceptance = accept(
            components, head_state, sample, self.score, self.policies, self.governance, self._train_by_id, self.prefetch
        )
        verdicts.update((diff_id, ("rejected_by_test", why)) for diff_id, why in acceptance.rejected.items())
        t2 = time.perf_counter()
        version = self._commit(head, head_state, acceptance, step, verdicts, resolution.lost)
        t3 = time.perf_counter()
        outcomes = [_outcome(d, *verdicts[d.id], step, version if verdicts[d.id][0] in ("committed", "fused") else None) for d in diffs]
        return StepReport(
            step=step, base_version=head, version=version, outcomes=outcomes,
            head_reward=acceptance.head_reward, candidate_reward=acceptance.candidate_reward,
            timings={"prepare": t1 - t0, "accept": t2 - t1, "commit": t3 - t2},
        )

    @functools.cached_property
    def _train_by_id(self) -> dict[str, Task]:
        return {t.id: t for t in self.train}

    def _admit_and_rebase(
        self, diffs: Sequence[Diff], head: int, head_state: State, verdicts: dict[str, tuple[OutcomeKind, str]]
    ) -> list[Change]:
        changes = []
        for diff in diffs:
            refusal = admit(diff, self.artifact_id, self.governance)
            staleness = head - diff.base_version
            if refusal is None and not self.policies.staleness.admit(staleness, self.lag_budget):
                refusal = ("dropped_stale", f"{staleness} versions behind head; the lag budget is {self.lag_budget}")
            if refusal is None:
                try:
                    base_state = head_state if staleness == 0 else self.ledger.snapshot(self.artifact_id, diff.base_version)
                except LedgerError as exc:
                    refusal = ("error", f"could not read its base version {diff.base_version}: {exc}")
                else:
                    rebased = rebase(diff, head, head_state, base_state, self.policies)
                    if isinstance(rebased, Change):
                        changes.append(rebased)
                        continue
                    refusal = rebased
            verdicts[diff.id] = refusal
        return changes

    def _commit(
        self, head: int, head_state: State, acceptance: Acceptance, step: int,
        verdicts: dict[str, tuple[OutcomeKind, str]], lost: dict[str, list[str]],
    ) -> int | None:
        if not acceptance.accepted:
            return None
        try:
            version = commit(self.ledger, self.artifact_id, head, head_state, acceptance, step, self.policies)
        except HeadMoved as exc:
            for comp in acceptance.accepted:
                for c in comp.changes:
                    verdicts[c.diff.id] = ("conflict_lost", f"another writer moved dev and the change no longer applies ({exc})")
            return None
        for comp in acceptance.accepted:
            for c in comp.changes:
                fused = comp.fused_keys & set(c.after)
                kind: OutcomeKind = "fused" if fused else "committed"
                how = f"merged with other diffs on {', '.join(sorted(fused))}; " if fused else ""
                lost_keys = f"; its edit of {', '.join(lost[c.diff.id])} lost to better evidence" if c.diff.id in lost else ""
                landed = f"landed in version {version} ({acceptance.reason})"
                verdicts[c.diff.id] = (kind, f"{how}{landed}{c.note}{lost_keys}")
        return version

"""Resolve: fold one step's changes key by key into components that are accepted or rejected whole.

Edits of different keys fuse; edits of one key merge three-way when their hunks are disjoint; the
conflict policy settles true overlaps (the loser keeps its other keys).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agentdescent.step.changes import Change, Component
from agentdescent.step.folders import Folders
from agentdescent.step.policies import StepPolicies
from agentdescent.types import OutcomeKind


@dataclass(frozen=True, kw_only=True)
class Resolution:
    components: list[Component]
    unplaced: dict[str, tuple[OutcomeKind, str]]  # diffs left with no key: duplicates and losers
    lost: dict[str, list[str]]  # diff id -> keys it lost to a better diff
    contested: set[str] = field(default_factory=set)  # ids of the diffs the conflict policy ranked


def resolve(changes: Sequence[Change], head_state: Mapping[str, str], policies: StepPolicies, *,
            verify: Callable[[Sequence[Change]], Mapping[str, Change]] | None = None) -> Resolution:
    """Fold the step's changes key by key: merge what merges, let the conflict policy settle the
    rest (the loser keeps its other keys), then group changes that share keys into components.
    `verify` measures changes the conflict policy must rank and whose diffs came unmeasured (by
    diff id, each with its card filled in); they are then ranked on what it found."""
    resolution = _fold(changes, head_state, policies)
    while verify is not None and (unmeasured := [c for c in changes if c.diff.id in resolution.contested
                                                 and c.diff.evidence.verify_after is None]):
        measured = verify(unmeasured)
        changes = [measured.get(c.diff.id, c) for c in changes]
        resolution = _fold(changes, head_state, policies)
    return resolution


def _fold(changes: Sequence[Change], head_state: Mapping[str, str], policies: StepPolicies) -> Resolution:
    text: dict[str, str | None] = {}
    owners: dict[str, list[Change]] = {}
    lost: dict[str, list[str]] = {}
    contested: set[str] = set()
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
            contested.update(c.diff.id for c in rivals)
            winner = rivals[policies.conflict([c.diff for c in rivals], [c.staleness for c in rivals], policies.staleness)]
            for loser in rivals:
                if loser is not winner:
                    lost.setdefault(loser.diff.id, []).append(key)
            text[key], owners[key] = winner.after[key], [winner]
    components = _components(changes, text, owners)
    unplaced = _unplaced(changes, owners, lost)
    _echo(changes, components, unplaced)
    return Resolution(components=_without_clashes(components, head_state, unplaced), unplaced=unplaced, lost=lost,
                      contested=contested)


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
            verdicts[c.diff.id] = ("duplicate", "another diff of this round makes the same change")
    return verdicts


def _echo(changes: Sequence[Change], components: Sequence[Component], unplaced: Mapping[str, tuple[OutcomeKind, str]]) -> None:
    """Give each duplicate to the component that makes its change: the failures it was made from
    back that change as much as the first diff's do."""
    for change in changes:
        if unplaced.get(change.diff.id, ("",))[0] != "duplicate":
            continue
        for comp in components:
            if change.after and all(comp.after.get(k, "\0") == v for k, v in change.after.items()):
                comp.echoes.append(change)
                break


def _without_clashes(
    components: Sequence[Component], head_state: Mapping[str, str], unplaced: dict[str, tuple[OutcomeKind, str]]
) -> list[Component]:
    """Components in order, but for one whose new files cannot sit in one folder with those of the
    components before it (`a` beside `a/b`): its diffs lose, as any conflict does."""
    kept: list[Component] = []
    folders = Folders(head_state)
    for comp in components:
        clash = folders.clash(comp.after)
        if clash is None:
            kept.append(comp)
            folders.write(comp.after)
            continue
        for change in comp.changes:
            unplaced[change.diff.id] = ("conflict_lost", f"another diff of this round got there first: {clash}")
    return kept

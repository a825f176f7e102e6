"""Resolve: fold one step's changes key by key into components that are accepted or rejected whole.

Edits of different keys fuse; edits of one key merge three-way when their hunks are disjoint;
edits that only insert lines where another inserts (git's conflict of two rules added at the end of
one list) stack: each stays a component of its own, judged on its own, and the candidate holds
every stacked insertion that passes (`stack_insertions`). The conflict policy settles true overlaps
(the loser keeps its other keys); a merge or a stack whose text would leave a file unreadable that
each edit left readable (`governance.syntax`: two edits that each compile, merged into one that does
not) is one: such a text is never a candidate, and either edit may still land alone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from agentdescent.step.changes import Change, Component
from agentdescent.step.folders import Folders
from agentdescent.step.policies import StepPolicies
from agentdescent.step.textmerge import stack_insertions, stacked_onto
from agentdescent.types import OutcomeKind


@dataclass(frozen=True, kw_only=True)
class Resolution:
    components: list[Component]
    unplaced: dict[str, tuple[OutcomeKind, str]]  # diffs left with no key: duplicates and losers
    lost: dict[str, list[str]]  # diff id -> the keys it lost to a better diff, each with why a merge was refused
    contested: set[str] = field(default_factory=set)  # ids of the diffs the conflict policy ranked


Unreadable = Callable[[str, str | None], str | None]  # why a key's new text leaves its file unreadable, or None


def resolve(changes: Sequence[Change], head_state: Mapping[str, str], policies: StepPolicies, *,
            verify: Callable[[Sequence[Change]], Mapping[str, Change]] | None = None,
            unreadable: Unreadable = lambda key, text: None) -> Resolution:
    """Fold the step's changes key by key: merge what merges, let the conflict policy settle the
    rest (the loser keeps its other keys), then group changes that share keys into components.
    `verify` measures changes the conflict policy must rank and whose diffs came unmeasured (by
    diff id, each with its card filled in); they are then ranked on what it found. `unreadable`
    is asked of each text a merge makes of a key: one it finds broken is a true overlap."""
    resolution = _fold(changes, head_state, policies, unreadable)
    while verify is not None and (unmeasured := [c for c in changes if c.diff.id in resolution.contested
                                                 and c.diff.evidence.verify_after is None]):
        measured = verify(unmeasured)
        changes = [measured.get(c.diff.id, c) for c in changes]
        resolution = _fold(changes, head_state, policies, unreadable)
    return resolution


def _fold(changes: Sequence[Change], head_state: Mapping[str, str], policies: StepPolicies, unreadable: Unreadable) -> Resolution:
    text: dict[str, str | None] = {}
    owners: dict[str, list[Change]] = {}
    stacks: dict[str, list[Change]] = {}  # key -> changes that insert lines where its owners insert
    lost: dict[str, list[str]] = {}
    contested: set[str] = set()
    for change in changes:
        for key, new in change.after.items():
            if key not in text:
                text[key], owners[key] = new, [change]
                continue
            base, stacked = head_state.get(key), stacks.get(key, [])
            piled = [c.after[key] for c in stacked]
            merged = policies.fusion(base, text[key], new)
            broken = None
            if merged is not False and (not stacked or _stacks(base, [merged, *piled])):
                # each side's text was checked alone: only a text the merge made can break the file
                broken = None if merged == text[key] else unreadable(key, _landed(base, [merged, *piled]))
                if broken is None:
                    if merged != text[key]:
                        owners[key].append(change)
                    text[key] = merged
                    continue
            if new in piled:  # the same insertion as a stacked change: a duplicate of it
                continue
            if _stacks(base, [text[key], *piled, new]):
                broken = unreadable(key, _landed(base, [text[key], *piled, new]))
                if broken is None:
                    stacks[key] = [*stacked, change]
                    continue
            rivals = owners[key] + stacked + [change]
            contested.update(c.diff.id for c in rivals)
            winner = rivals[policies.conflict([c.diff for c in rivals], [c.staleness for c in rivals], policies.staleness)]
            for loser in rivals:
                if loser is not winner:
                    lost.setdefault(loser.diff.id, []).append(f"{key} (merged with another diff's edit, {broken})" if broken else key)
            text[key], owners[key] = winner.after[key], [winner]
            stacks.pop(key, None)
    components = _components(changes, head_state, text, owners, stacks)
    unplaced = _unplaced(changes, [*owners.values(), *stacks.values()], lost)
    _echo(changes, components, unplaced)
    return Resolution(components=_without_clashes(components, head_state, unplaced), unplaced=unplaced, lost=lost,
                      contested=contested)


def _stacks(base: str | None, texts: Sequence[str | None]) -> bool:
    """Whether each of `texts` only inserts lines into `base`, an existing file's text."""
    sides = [text for text in texts if text is not None]
    return base is not None and len(sides) == len(texts) and stack_insertions(base, sides) is not None


def _landed(base: str | None, texts: Sequence[str | None]) -> str | None:
    """A key's text once `texts` land on it: the first (an owner's, or a merge of owners'), then
    the lines each of the rest inserts into `base`."""
    return texts[0] if len(texts) == 1 else stack_insertions(base or "", [t or "" for t in texts])


def _components(
    changes: Sequence[Change], head_state: Mapping[str, str], text: dict[str, str | None],
    owners: dict[str, list[Change]], stacks: dict[str, list[Change]],
) -> list[Component]:
    """Union the changes that hold a key together (a stacked change holds its key alone);
    components come out in proposal order."""
    owned = {c.diff.id for holders in [*owners.values(), *stacks.values()] for c in holders}
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
    for key, stacked in stacks.items():
        for c in stacked:  # one that also shares another key with the owners is fused with them here
            comp = components[find(c.diff.id)]
            if comp.after.get(key) is not None and c.after[key] is not None:
                comp.fused_keys.add(key)
            comp.after[key] = stacked_onto(head_state[key], comp.after.get(key), c.after[key])
    return list(components.values())


def _unplaced(
    changes: Sequence[Change], holders: Sequence[Sequence[Change]], lost: dict[str, list[str]]
) -> dict[str, tuple[OutcomeKind, str]]:
    owned = {c.diff.id for held in holders for c in held}
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

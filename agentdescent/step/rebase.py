"""Rebase: carry a diff from the version it was made on onto head, merging keys head changed since."""

from __future__ import annotations

from collections.abc import Mapping

from agentdescent.artifacts.state import apply
from agentdescent.governance import clashes, fold
from agentdescent.step.changes import Change
from agentdescent.step.policies import Policies
from agentdescent.types import Diff, OutcomeKind


def rebase(
    diff: Diff, staleness: int, head_state: Mapping[str, str], base_state: Mapping[str, str], policies: Policies
) -> Change | tuple[OutcomeKind, str]:
    """Carry `diff` from its base onto head, `staleness` versions later: keys head changed since
    are merged three-way."""
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
        clash = folder_clash(head_state, after)
        if clash:
            return "invalid", clash
        note = f"; its edit of {', '.join(conflicts)} conflicted with head and was dropped" if conflicts else ""
        return Change(diff=diff, staleness=staleness, after=after, note=note)
    if conflicts:
        return "conflict_lost", f"{', '.join(conflicts)} changed since version {diff.base_version} and the edits overlap"
    return "duplicate", f"head (version {diff.base_version + staleness}) already says this"


def folder_clash(state: Mapping[str, str], after: Mapping[str, str | None]) -> str | None:
    """Why the keys `after` adds cannot sit beside those of `state` in one folder, or None."""
    added = {k for k, text in after.items() if text is not None and k not in state}
    if not added:
        return None
    # Only keys under the same (folded) top-level name can clash with an added one: look at those
    # alone, not at the whole state once per diff (thousands of keys, dozens of diffs a step).
    tops = {fold(k.split("/", 1)[0]) for k in added}
    near = [k for k in apply(state, after) if fold(k.split("/", 1)[0]) in tops]
    pair = next((p for p in clashes(near) if added & set(p)), None)
    if pair is None:
        return None
    return (f"{pair[0]!r} and {pair[1]!r} cannot both be in one folder "
            "(a file and a folder of one name, or one name spelt two ways)")

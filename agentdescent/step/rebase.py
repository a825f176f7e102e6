"""Rebase: carry a diff from the version it was made on onto head, merging keys head changed since."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from agentdescent.step.changes import Change
from agentdescent.step.folders import Folders
from agentdescent.step.policies import StepPolicies
from agentdescent.step.textmerge import stack_insertions
from agentdescent.types import Diff, OutcomeKind


def rebase(
    diff: Diff, staleness: int, head_state: Mapping[str, str], base_state: Mapping[str, str], policies: StepPolicies,
    head_folders: Folders,
) -> Change | tuple[OutcomeKind, str]:
    """Carry `diff` from its base onto head, `staleness` versions later: keys head changed since
    are merged three-way, or stacked where both only insert lines. `head_folders` indexes head's
    keys (built once a step, for every diff)."""
    conflicts, after = [], {}
    for edit in diff.edits:
        base_text, head_text = base_state.get(edit.key), head_state.get(edit.key)
        if edit.before != base_text:
            return "invalid", f"edit of {edit.key!r} does not start from its text at version {diff.base_version}"
        merged = edit.after if head_text == base_text else onto(policies, base_text, edit.after, head_text)
        if merged is False:
            conflicts.append(edit.key)
        elif merged != head_text:
            after[edit.key] = merged
    if after:
        clash = head_folders.clash(after)
        if clash:
            return "invalid", clash
        note = f"; its edit of {', '.join(conflicts)} conflicted with head and was dropped" if conflicts else ""
        return Change(diff=diff, staleness=staleness, after=after, note=note)
    if conflicts:
        return "conflict_lost", f"{', '.join(conflicts)} changed since version {diff.base_version} and the edits overlap"
    return "duplicate", f"head (version {diff.base_version + staleness}) already says this"


def onto(policies: StepPolicies, base: str | None, ours: str | None, theirs: str | None) -> str | None | Literal[False]:
    """`ours`, made from `base`, carried onto `theirs`: merged by the fusion policy, or stacked after
    theirs where both only insert lines; False when they truly overlap."""
    merged = policies.fusion(base, ours, theirs)
    if merged is False and base is not None and ours is not None and theirs is not None:
        stacked = stack_insertions(base, [theirs, ours])
        return False if stacked is None else stacked
    return merged


"""`show`'s answer cut to one page a host shows whole (`hostwork.PAGE_BYTES` of JSON): hosts cut a
longer tool result, and the part lost would be the diff or the evidence a person judges the run by.

The first page keeps every field, its texts shortened (a rationale, a reason, an edit's line, a
rollout's prompt and output) and its lists cut to what fits (`committed_total`, `rejected_total`,
`files_changed_total` and `markers_left_total` count them all), a pending L1 change's diff first
and whole where a page holds it (`whole` says whether it did), then as much of the patch as the
rest of the page holds. A page from a later `offset` holds only the patch from there on. `diff_continues` says whether there is
more; the next page starts at its `next_offset` (`diff_offset + len(diff)`: a model asked to count
the characters of a long page gets it wrong, and a wrong offset loses or repeats part of the patch).

    first = paged(shown)                               # everything, shortened, and the patch's start
    more = paged(shown, offset=first.next_offset)      # the patch's next part

Left out: what a run shows (`review.show`); the command line prints the whole of it.
"""

from __future__ import annotations

import json

from agentdescent.runs.hostfiles import sent_bytes
from agentdescent.runs.hostwork import PAGE_BYTES, cut_to
from agentdescent.runs.review import DiffView, RolloutView, Shown

TEXT_CHARS = 160  # a rationale, a reason, a rollout's prompt or output, on a page
EDITS_SHOWN, EVIDENCE_SHOWN, LISTED = 3, 5, 8  # a diff's edits and evidence tasks; diffs of each list
FILES_SHOWN = 20  # the files changed a page names: a page, not a folder's listing
LEAST_DIFF_BYTES = 2_000  # the page keeps this much room for the patch, dropping listed diffs for it


def paged(shown: Shown, *, offset: int = 0, budget: int = PAGE_BYTES) -> Shown:
    """The page of `shown` from character `offset` of its patch (see the module docstring)."""
    if offset > 0:
        page = shown.model_copy(update={"committed": [], "rejected": [], "worst_rollouts": [], "files_changed": [],
                                        "markers_left": [], "pending_approval": None, "diff": ""})
    else:
        page = shown.model_copy(update={
            "committed": [_short(d) for d in shown.committed[:LISTED]],
            "rejected": [_short(d) for d in shown.rejected[:LISTED]],
            "worst_rollouts": [_short_rollout(r) for r in shown.worst_rollouts],
            "files_changed": shown.files_changed[:FILES_SHOWN],
            "markers_left": shown.markers_left[:FILES_SHOWN],
            "pending_approval": shown.pending_approval and shown.pending_approval.model_copy(
                update={"diff": "", "rationale": _short_text(shown.pending_approval.rationale, TEXT_CHARS)}),
            "diff": ""})
        pending = shown.pending_approval.diff if shown.pending_approval else ""
        room = 64 if pending else LEAST_DIFF_BYTES  # what is to be approved comes before the run's whole patch
        while _size(page) + len(json.dumps(pending)) > budget - room and (
                page.committed or page.rejected or page.worst_rollouts or page.files_changed or page.markers_left):
            longest = max(("committed", "rejected", "worst_rollouts", "files_changed", "markers_left"),
                          key=lambda name: len(getattr(page, name)))
            page = page.model_copy(update={longest: getattr(page, longest)[:-1]})
        if page.pending_approval is not None:
            cut = cut_to(pending, max(0, budget - _size(page) - room))
            page = page.model_copy(update={"pending_approval": page.pending_approval.model_copy(
                update={"diff": cut, "whole": len(cut) == len(pending)})})
    rest = shown.diff[offset:]
    diff = cut_to(rest, max(0, budget - _size(page) - 64))
    continues = len(diff) < len(rest)
    return page.model_copy(update={"diff": diff, "diff_offset": offset, "diff_continues": continues,
                                   "next_offset": offset + len(diff) if continues else None})


def _size(shown: Shown) -> int:
    return sent_bytes(shown) + 40  # and its next_offset, set last


def _short(diff: DiffView) -> DiffView:
    return diff.model_copy(update={
        "reason": _short_text(diff.reason, TEXT_CHARS), "rationale": _short_text(diff.rationale, TEXT_CHARS),
        "edits": [_short_text(e, TEXT_CHARS) for e in diff.edits[:EDITS_SHOWN]],
        "evidence_tasks": diff.evidence_tasks[:EVIDENCE_SHOWN], "evidence_rewards": diff.evidence_rewards[:EVIDENCE_SHOWN]})


def _short_rollout(rollout: RolloutView) -> RolloutView:
    return rollout.model_copy(update={"prompt": _short_text(rollout.prompt, TEXT_CHARS),
                                      "output": _short_text(rollout.output, TEXT_CHARS)})


def _short_text(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[: chars - 1] + "…"

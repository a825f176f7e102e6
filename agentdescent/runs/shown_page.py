"""`show`'s answer cut to one page a host shows whole (`hostwork.PAGE_BYTES` of JSON): hosts cut a
longer tool result, and the part lost would be the diff or the evidence a person judges the run by.

What it pages is one text: a pending L1 change's diff, then the patch; `offset` counts characters
of the two, the change's first. The first page keeps every field, its texts shortened (a
rationale, a reason, an edit's line, a rollout's prompt and output) and its lists cut to what fits
(`committed_total`, `rejected_total`, `files_changed_total` and `markers_left_total` count them
all), then as much of the change's diff as the page holds (`whole` says whether it held all of it)
and, once that has ended, of the patch. A page from a later `offset` holds only what follows: the
rest of the change's diff (each such page names the change, its `diff_offset` says where its part
starts and its `diff_continues` whether more of it follows), then the patch. `diff_continues` says
whether there is more of either; the next page starts at its `next_offset` (a model asked to count
the characters of a long page gets it wrong, and a wrong offset loses or repeats part of a diff).
A host reads a change to its end before it asks the user to approve it. Beside its part of a
diff, each page lists the lines starting in that part that hold characters a reader does not see,
escaped (`unseen`, each by its number in the whole diff; `unseen_total` counts the diff's), the
part cut shorter to make room for them.

    first = paged(shown)                               # everything, shortened, and the diffs' start
    more = paged(shown, offset=first.next_offset)      # the next part: of the change's diff, then of the patch

Left out: what a run shows (`review.show`); the command line prints the whole of it.
"""

from __future__ import annotations

import json

from agentdescent.runs.hostfiles import sent_bytes
from agentdescent.runs.hostwork import PAGE_BYTES, cut_to
from agentdescent.runs.review import DiffView, PendingApproval, RolloutView, Shown
from agentdescent.runs.unseen import Unseen, starting

TEXT_CHARS = 160  # a rationale, a reason, a rollout's prompt or output, on a page
EDITS_SHOWN, EVIDENCE_SHOWN, LISTED = 3, 5, 8  # a diff's edits and evidence tasks; diffs of each list
FILES_SHOWN = 20  # the files changed a page names: a page, not a folder's listing
LEAST_DIFF_BYTES = 2_000  # the page keeps this much room for the patch, dropping listed diffs for it


def paged(shown: Shown, *, offset: int = 0, budget: int = PAGE_BYTES) -> Shown:
    """The page of `shown` from character `offset` of what it pages, a pending L1 change's diff and
    then the patch (see the module docstring)."""
    pending = shown.pending_approval.diff if shown.pending_approval else ""
    page = _first(shown, budget) if offset == 0 else shown.model_copy(update={
        "committed": [], "rejected": [], "worst_rollouts": [], "files_changed": [], "markers_left": [], "diff": "",
        "unseen": [], "pending_approval": _header(shown, later=True) if offset < len(pending) else None})
    if shown.pending_approval is not None and page.pending_approval is not None:
        part = page.pending_approval.model_copy(update={"diff_offset": offset, "whole": False, "diff_continues": False})
        room = budget - _size(page.model_copy(update={"pending_approval": part})) - 64  # 64: the fields set after
        # at least a character of it: a page that holds none would send the host to this offset again
        cut, hidden = _part(pending, offset, shown.pending_approval.unseen, max(0, room), least=1)
        more = offset + len(cut) < len(pending)
        page = page.model_copy(update={"pending_approval": part.model_copy(
            update={"diff": cut, "unseen": hidden, "whole": offset == 0 and not more, "diff_continues": more})})
        if more:  # the patch starts once the change's diff has ended
            return page.model_copy(update={"diff": "", "diff_offset": 0, "diff_continues": True,
                                           "next_offset": offset + len(cut)})
    start = max(0, offset - len(pending))
    rest = shown.diff[start:]
    diff, hidden = _part(shown.diff, start, shown.unseen, max(0, budget - _size(page) - 64))
    continues = len(diff) < len(rest)
    return page.model_copy(update={"diff": diff, "unseen": hidden, "diff_offset": start, "diff_continues": continues,
                                   "next_offset": len(pending) + start + len(diff) if continues else None})


def _part(diff: str, start: int, unseen: list[Unseen], room: int, least: int = 0) -> tuple[str, list[Unseen]]:
    """The longest part of `diff` from `start` that fits `room` bytes of JSON with the `unseen` lines
    that start in it (at least `least` characters, whatever the room), and those lines."""
    def size(cut: str) -> int:
        return len(json.dumps(cut)) + sent_bytes(starting(diff, unseen, start, start + len(cut)))

    cut = cut_to(diff[start:], room)
    low, high = 0, len(cut)
    while low < high:  # a line listed costs more than its part of the diff: the part is the longest that fits with them
        mid = (low + high + 1) // 2
        low, high = (mid, high) if size(cut[:mid]) <= room else (low, mid - 1)
    cut = cut[:low] or diff[start:start + least]
    return cut, starting(diff, unseen, start, start + len(cut))


def _first(shown: Shown, budget: int) -> Shown:
    """The first page with no diff in it yet: every field, texts shortened, the lists cut to leave
    room for the pending change's diff (or `LEAST_DIFF_BYTES` of the patch)."""
    page = shown.model_copy(update={
        "committed": [_short(d) for d in shown.committed[:LISTED]],
        "rejected": [_short(d) for d in shown.rejected[:LISTED]],
        "worst_rollouts": [_short_rollout(r) for r in shown.worst_rollouts],
        "files_changed": shown.files_changed[:FILES_SHOWN],
        "markers_left": shown.markers_left[:FILES_SHOWN],
        "pending_approval": _header(shown), "diff": "", "unseen": []})
    pending = shown.pending_approval.diff if shown.pending_approval else ""
    room = 64 if pending else LEAST_DIFF_BYTES
    while _size(page) + len(json.dumps(pending)) > budget - room and (
            page.committed or page.rejected or page.worst_rollouts or page.files_changed or page.markers_left):
        longest = max(("committed", "rejected", "worst_rollouts", "files_changed", "markers_left"),
                      key=lambda name: len(getattr(page, name)))
        page = page.model_copy(update={longest: getattr(page, longest)[:-1]})
    return page


def _header(shown: Shown, *, later: bool = False) -> PendingApproval | None:
    """The pending change with no diff yet, its rationale shortened: each page of its diff names it.
    A `later` page leaves out the rationale and names at most `FILES_SHOWN` of its keys."""
    pending = shown.pending_approval
    if pending is None:
        return None
    return pending.model_copy(update={"diff": "", "unseen": [], "rationale": "" if later else _short_text(pending.rationale, TEXT_CHARS),
                                      "keys": pending.keys[:FILES_SHOWN] if later else pending.keys})


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

"""What a write-back should leave in each file when the user edited the target after the run began.

Three versions of every file meet: `base` (what the target held when the run started), `ours`
(what the run learned) and the disk now (`theirs`). A file only the run changed takes the run's
version; a file only the user changed keeps the user's; a file both changed is merged three-way
by git (`step.textmerge.merge_text`) when the edits do not overlap, and is a conflict when they
do, as is a file the run deletes that the user changed. A file the user deleted and the run
changed comes back with the run's version: no text of the user's is lost that way.

    reconcile({"f": b"a\\nb\\nc\\n"}, {"f": b"A\\nb\\nc\\n"}, {"f": b"a\\nb\\nC\\n"}).contents == {"f": b"A\\nb\\nC\\n"}

Left out: reading the disk and writing it (`writeback`), and what to do with a conflict (the
caller refuses, or overwrites when asked to).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from agentdescent.step.textmerge import merge_text

Files = Mapping[str, bytes | None]  # relative path -> bytes, None where the file is absent


@dataclass(frozen=True, kw_only=True)
class Reconciled:
    """The outcome per file: `contents` is what each path must hold after the write (None: absent);
    `merged`, `kept` (the user's edit stands, the run had not changed the file) and `conflicts`
    (both changed it and git cannot merge the two) name paths, sorted."""

    contents: dict[str, bytes | None] = field(default_factory=dict)
    merged: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    conflicts: tuple[str, ...] = ()


def reconcile(base: Files, ours: Files, theirs: Files) -> Reconciled:
    """The three-way outcome over every path in `base` or `ours` (a path only on disk is the
    user's own and is not listed). On a conflict `contents` holds the run's version, which the
    caller writes only when told to overwrite."""
    contents: dict[str, bytes | None] = {}
    merged, kept, conflicts = [], [], []
    for path in sorted(base.keys() | ours.keys()):
        b, o, t = base.get(path), ours.get(path), theirs.get(path)
        contents[path] = o
        if t == b or t == o:
            continue  # the user did not touch it, or made the very change the run made
        if o == b:
            contents[path] = t  # only the user changed it (or deleted it): theirs stands
            kept.append(path)
            continue
        if t is None:
            continue  # the user deleted what the run changed: the run's version comes back
        both = _merged(b, o, t)
        if both is None:
            conflicts.append(path)
        else:
            contents[path] = both
            merged.append(path)
    return Reconciled(contents=contents, merged=tuple(merged), kept=tuple(kept), conflicts=tuple(conflicts))


def _merged(base: bytes | None, ours: bytes | None, theirs: bytes | None) -> bytes | None:
    """The clean three-way merge of two changes to one file, or None: a file the run deletes and
    the user changed, one added on both sides with different text, or text git cannot merge."""
    if base is None or ours is None or theirs is None:
        return None
    try:
        texts = [data.decode("utf-8") for data in (base, ours, theirs)]
    except UnicodeDecodeError:
        return None
    text = merge_text(*texts)
    return None if text is None else text.encode("utf-8")

"""What a write-back should leave in each file when the user edited the target after the run began.

Three versions of every file meet: `base` (what the target held when the run started), `ours`
(what the run learned) and the disk now (`theirs`). A file only the run changed takes the run's
version; a file only the user changed keeps the user's; a file both changed is merged three-way
by git (`step.textmerge.merge_text`) when the edits do not overlap, and is a conflict when they
do, unless the disk's file already holds the run's change (the user merged the two by hand after a
write-back refused them: it stands), as is a file the run deletes that the user changed, and a
file the user deleted that the run changed (deleting it was the user's edit; written back, it
would come back unasked). A file whose line endings or byte-order mark are not the base's (converted
since the run read it, or read through Python's newline translation) is reconciled with the base
and the run's text in its form (`textform.in_form_of`): a file that differs in nothing else takes
the run's change in its own endings and mark (or the run's deletion, whatever its endings), and
one that already holds the run's text in them is left as it is.

    reconcile({"f": b"a\\nb\\nc\\n"}, {"f": b"A\\nb\\nc\\n"}, {"f": b"a\\nb\\nC\\n"}).contents == {"f": b"A\\nb\\nC\\n"}

`against_disk` reads the disk's side without following any link. Left out: writing (`writeback`),
and what to do with a conflict (the caller refuses, or overwrites when asked to).
"""

from __future__ import annotations

import os
import stat
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from agentdescent.artifacts.putback import lstat
from agentdescent.artifacts.textform import BOM, in_form_of, lines_of
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
        b, o = _in_form(b, t), _in_form(o, t)
        contents[path] = o
        if t == o:
            continue
        if t == b:  # only its form is not the base's: the run's change, in the disk's form
            if o is not None:  # a file the run deletes is deleted: there is nothing to merge
                merged.append(path)
            continue
        if o == b:
            contents[path] = t  # only the user changed it (or deleted it): theirs stands
            kept.append(path)
            continue
        if o is None and _same_text(b, t):  # the run deletes it, and the user changed only its endings (mixed too)
            continue
        both = _merged(b, o, t)  # None where the user deleted what the run changed
        if both is None and _holds_the_change(b, o, t):  # merged by hand, after a write-back refused the overlap
            contents[path] = t
            kept.append(path)
        elif both is None:
            conflicts.append(path)
        else:
            contents[path] = both
            merged.append(path)
    return Reconciled(contents=contents, merged=tuple(merged), kept=tuple(kept), conflicts=tuple(conflicts))


def _in_form(data: bytes | None, disk: bytes | None) -> bytes | None:
    """`data` in the line endings and byte-order mark of the `disk` file, where both are text."""
    if data is None or disk is None:
        return data
    try:
        return in_form_of(data.decode("utf-8"), disk.decode("utf-8")).encode("utf-8")
    except UnicodeDecodeError:
        return data


def _same_text(base: bytes | None, theirs: bytes | None) -> bool:
    """Whether the two hold one text, whatever their line endings and byte-order marks."""
    if base is None or theirs is None:
        return False
    try:
        return _plain(base) == _plain(theirs)
    except UnicodeDecodeError:
        return False


def _plain(data: bytes) -> str:
    return data.decode("utf-8").removeprefix(BOM).replace("\r\n", "\n").replace("\r", "\n")


def _holds_the_change(base: bytes | None, ours: bytes | None, theirs: bytes | None) -> bool:
    """Whether the file on disk already holds the run's change to it, lines counted: every line the
    run added is there as often, and no line it removed is left beyond what the run kept."""
    if base is None or ours is None or theirs is None:
        return False
    try:
        b, o, t = (Counter(line.rstrip("\r\n") for line in lines_of(data.decode("utf-8"))) for data in (base, ours, theirs))
    except UnicodeDecodeError:
        return False
    return all(t[line] >= count for line, count in (o - b).items()) and all(t[line] <= o[line] for line in b - o)


def _merged(base: bytes | None, ours: bytes | None, theirs: bytes | None) -> bytes | None:
    """The clean three-way merge of two changes to one file, or None: a file one side deleted and
    the other changed, one added on both sides with different text, or text git cannot merge."""
    if base is None or ours is None or theirs is None:
        return None
    try:
        texts = [data.decode("utf-8") for data in (base, ours, theirs)]
    except UnicodeDecodeError:
        return None
    text = merge_text(*texts)
    return None if text is None else text.encode("utf-8")


def against_disk(target: Path, contents: dict[str, bytes], initial: dict[str, str], base: dict[str, bytes] | None,
                 frozen_keys: set[str]) -> Reconciled:
    """`reconcile` of the run's files (`contents`, and the `initial` ones it deleted) with `base` and
    the folder or file `target` as it is now, over its regular files and absent paths. Anything
    else where a file of the run's was (a symlink, a folder, a path through a link) is the user's
    change: kept where the run leaves the file as it was (it is not written, so nothing goes
    through a link), a conflict where the run deletes it or writes it over a link of the user's,
    and otherwise (a folder, a path through a link) left to the write-back's path checks. Nothing
    to reconcile without a `base`, or when the target is not there at all."""
    if base is None or lstat(target) is None:
        return Reconciled()
    paths = {*base, *contents, *initial} - frozen_keys
    found = {k: _regular_bytes(target, k) for k in paths}
    theirs = {k: data for k, data in found.items() if not isinstance(data, _NotAFile)}
    odd = paths - theirs.keys()
    paths -= odd
    ours = {k: contents.get(k) for k in paths}
    done = reconcile({k: base.get(k) for k in paths}, ours, {k: theirs[k] for k in paths})
    left = {k for k in odd if k in contents and contents[k] == base.get(k)}
    replaced = {k for k in odd - left if k not in contents or os.path.islink(target / k)}
    return replace(done, kept=tuple(sorted({*done.kept, *left})),
                   conflicts=tuple(sorted({*done.conflicts, *replaced})))


class _NotAFile:
    """A folder, a symlink or a special file where a file of the artifact is."""


_NOT_A_FILE = _NotAFile()


def _regular_bytes(target: Path, key: str) -> bytes | None | _NotAFile:
    """The bytes of the regular file at `key`, None when nothing is there, `_NOT_A_FILE` for
    anything else, a path through a symlink included (nothing is followed)."""
    parts = key.split("/") if key else []
    for depth in range(len(parts)):
        info = lstat(target.joinpath(*parts[:depth]))
        if info is None:
            return None
        if not stat.S_ISDIR(info.st_mode):
            return _NOT_A_FILE
    info = lstat(target / key)
    if info is None:
        return None
    return (target / key).read_bytes() if stat.S_ISREG(info.st_mode) else _NOT_A_FILE


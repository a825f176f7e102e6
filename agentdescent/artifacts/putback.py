"""Putting paths under a target back as they are under a source: how a rollback and a restore
change the disk, and the check that keeps them inside the target.

A path is relative posix inside the target, held to the same catalogue as a diff's keys
(`unsafe_key_reason`), and "" for the target itself; anything else is refused before a thing is
touched. Nothing is reached through a symlink, on either side: each folder on the way is opened
without following one (`atomic.parent_of`), so one swapped in meanwhile fails the step.

Left out: which paths to put back and from where (`backups`, `writeback`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from pathlib import Path

from agentdescent import atomic
from agentdescent.errors import UserError
from agentdescent.governance import unsafe_key_reason


def path_reason(rel: object) -> str | None:
    """Why `rel` is not a path inside a target, or None. path_reason("") is None (the target
    itself); path_reason("../x") names the '..'."""
    return None if rel == "" else unsafe_key_reason(rel)


def check_paths(target: Path, paths: Iterable[object]) -> list[str]:
    """`paths` as a list, or `UserError` naming the first that is not a path inside `target`."""
    checked = []
    for rel in paths:
        reason = path_reason(rel)
        if reason or not isinstance(rel, str):
            raise UserError(f"refusing to put back {rel!r} inside {target}: {reason}; nothing was changed. "
                            "A write-back records only paths inside its target, so what listed this one is not "
                            "AgentDescent's: move it away")
        checked.append(rel)
    return checked


def put_back(target: Path, source: Path | None, paths: Iterable[str], *, temps: bool = True) -> None:
    """Make each of `paths` under `target` exactly as under `source` (None: as if it held nothing):
    files with their bytes and mode, symlinks as links, folders as folders. What `source` lacks
    is removed, with the folders above it that it left empty and `source` does not have, and
    (`temps`: the rollback of a write of ours) the temp files an interrupted atomic write left
    beside any of them; a restore leaves a file that only looks like one alone. Nothing is reached
    through a symlink on either side; a path that is not inside the target, or a `source` that is
    itself a symlink, is refused with a `UserError` before anything changes."""
    listed = set(check_paths(target, paths))
    if source is not None and os.path.islink(source):
        raise UserError(f"refusing to put {target} back from {source}: it is a symlink, and a backup's copy never "
                        "is one; nothing was changed")
    entries = listed | {a for p in listed for a in _ancestors(p)}
    for temp in atomic.stray_temps(target / p for p in listed) if temps else ():
        temp.unlink(missing_ok=True)
    for rel in sorted(entries, key=_depth):  # first, so that nothing below is reached through a link
        if os.path.islink(target / rel) and (source is None or not same(source, target, rel)):
            with atomic.parent_of(target, rel) as (folder, name):
                os.unlink(name, dir_fd=folder)
    for rel in sorted(entries, key=_depth, reverse=True):
        _remove_if_unwanted(target, source, rel, must=rel in listed)
    if source is not None:
        for rel in sorted(entries, key=_depth):
            _put(source, target, rel)


def same(source: Path, target: Path, rel: str) -> bool:
    """Whether `rel` under `target` is already what it is under `source`: absent from both, a
    folder in both, the same link, or files with the same mode and bytes."""
    a, b = _entry(source, rel), _entry(target, rel)
    if a is None or b is None:
        return a is None and b is None
    if stat.S_IFMT(a.st_mode) != stat.S_IFMT(b.st_mode):
        return False
    if stat.S_ISDIR(a.st_mode):
        return True
    if stat.S_ISLNK(a.st_mode):
        return os.readlink(source / rel) == os.readlink(target / rel)
    return stat.S_IMODE(a.st_mode) == stat.S_IMODE(b.st_mode) and _same_bytes(source / rel, target / rel)


def _same_bytes(a: Path, b: Path) -> bool:
    """Whether two files hold the same bytes, read a megabyte at a time (`filecmp` caches its
    answers by size and time, which a file rewritten within the same second can fool)."""
    with open(a, "rb") as first, open(b, "rb") as second:
        while True:
            one, other = first.read(1 << 20), second.read(1 << 20)
            if one != other:
                return False
            if not one:
                return True


def _remove_if_unwanted(target: Path, source: Path | None, rel: str, *, must: bool) -> None:
    info = _entry(target, rel)
    if info is None:
        return
    wanted = None if source is None else _entry(source, rel)
    if wanted is not None and stat.S_IFMT(wanted.st_mode) == stat.S_IFMT(info.st_mode):
        return
    with atomic.parent_of(target, rel) as (folder, name):
        if not stat.S_ISDIR(info.st_mode):
            os.unlink(name, dir_fd=folder)
            return
        try:
            os.rmdir(name, dir_fd=folder)
        except OSError:
            if must or wanted is not None:
                raise  # a folder in the way of what must be put back


def _put(source: Path, target: Path, rel: str) -> None:
    info = _entry(source, rel)
    if info is None or same(source, target, rel):
        return
    if stat.S_ISDIR(info.st_mode):
        with atomic.parent_of(target, rel) as (folder, name):
            os.mkdir(name, dir_fd=folder)
            made = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
            try:
                os.fchmod(made, stat.S_IMODE(info.st_mode))
            finally:
                os.close(made)
    elif stat.S_ISLNK(info.st_mode):
        atomic.write_symlink_in(target, rel, os.readlink(source / rel))
    else:
        with open(source / rel, "rb") as copy:  # a block at a time: a large file costs no memory
            atomic.write_bytes_in(target, rel, copy, mode=stat.S_IMODE(info.st_mode))


def _ancestors(rel: str) -> list[str]:
    """_ancestors("a/b/c") == ["a/b", "a", ""]; _ancestors("") == []"""
    if not rel:
        return []
    parts = rel.split("/")
    return ["/".join(parts[:i]) for i in range(len(parts) - 1, -1, -1)]


def _depth(rel: str) -> int:
    return 0 if not rel else rel.count("/") + 1


def _entry(root: Path, rel: str) -> os.stat_result | None:
    """The lstat of `rel` under `root`, or None when it is absent or lies below a symlink."""
    if any(os.path.islink(root / a) for a in _ancestors(rel) if a):
        return None
    return lstat(root / rel)


def lstat(path: Path) -> os.stat_result | None:
    """os.lstat, or None when nothing is there."""
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None

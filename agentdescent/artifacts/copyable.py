"""Whether a target can be backed up whole, asked before the copy starts (and by `plan`, before a
run is paid for), and the copy: a backup copies everything the target holds, the files a run left
out too, but for git's own repository (`.git`, a folder or a worktree's file, at any depth): a
restore never puts one back, a copy of a worktree's `.git` file would point at the live worktree
from inside the backup, and a long history would fill the disk.

A named pipe, a socket or a device cannot be copied (a character device such as /dev/zero reads
without end), nor can a file that cannot be read or a folder that cannot be listed; a copy
larger than the free space beside the target, or than `MAX_BACKUP_BYTES` (a sparse file of
50 GB takes no room until copied), would fill the disk or take minutes; a folder chain deeper than
`MAX_BACKUP_DEPTH` would stop the copy (`shutil.copytree` calls itself once a level) with a
`RecursionError`; a file whose copy's path (`.<name>.bak-N/<name>/<path in it>` beside the target)
would pass the system's `PATH_MAX` cannot be made. Each is found by one walk that follows no link and calls nothing once a level,
and named with its fix.

A write-back's plan and a restore read the target too, to compare it: `readable` names what they
could not read the same way, rather than let a bare PermissionError out (or a CLI tell of a disk
that cannot be written).

Left out: the backup's folder and record (`backups`) and what a run reads of the target (`tree`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shlex
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

from agentdescent.errors import UserError
from agentdescent.governance.paths import is_git_repository
from agentdescent.quoting import first_of
from agentdescent.reading import NAME_MAX, PATH_MAX, shown_path
from agentdescent.walking import walk

__all__ = ["MAX_BACKUP_BYTES", "MAX_BACKUP_DEPTH", "copy", "copy_problems", "readable", "why_not_copied"]

MAX_BACKUP_BYTES = 4 << 30  # a skill or prompt folder is far smaller; past this the backup is refused
MAX_BACKUP_DEPTH = 200  # folders inside folders a backup copies, well within the copy's recursion
_SPARE_BYTES = 64 << 20  # left free beside the target after the copy
_FULL = (errno.ENOSPC, errno.EDQUOT)  # a disk that filled up, a quota spent: space is the fix, not permissions
_NUMBER_BYTES = 6  # room for a backup's number in its folder's name, which copy_problems cannot know yet
_COPIED_AS = ".partial"  # the name the copy has in the backup folder until complete (`backups.PARTIAL`)
_KINDS = {stat.S_IFIFO: "a named pipe", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a device", stat.S_IFBLK: "a device"}


def copy_problems(target: Path) -> list[str]:
    """What keeps `target` from being backed up whole, each with its fix; [] when nothing does."""
    special, unreadable, sizes = [], [], []
    deepest, longest = target, target
    for path, info in _entries(target):
        if stat.S_ISDIR(info.st_mode) and len(path.parts) > len(deepest.parts):
            deepest = path
        if len(os.fsencode(path)) > len(os.fsencode(longest)):
            longest = path
        kind = _KINDS.get(stat.S_IFMT(info.st_mode))
        if kind:
            special.append(f"{path.relative_to(target.parent)} ({kind})")
        elif not _readable(path, info):
            unreadable.append(f"{path.relative_to(target.parent)}")
        elif stat.S_ISREG(info.st_mode):
            sizes.append((info.st_size, path))
    problems = []
    whole = "leaving it out of the run is not enough: the backup copies the whole folder"
    if special:
        problems.append(f"{_listed(special)} cannot be copied into a backup: move it out of {target.name} ({whole})")
    if unreadable:
        problems.append(f"{_listed(unreadable)} cannot be read, so a backup cannot copy it: make it readable "
                        f"(chmod u+rX), or move it out of {target.name} ({whole})")
    deep = _chain(target, deepest)
    if deep is not None:
        problems.append(f"{deep} cannot be copied into a backup, which takes folders at most {MAX_BACKUP_DEPTH} deep: "
                        f"move it out of {target.name} ({whole})")
    too_long = _too_long(target, longest)
    if too_long is not None:
        problems.append(f"{too_long} ({whole})")
    total = sum(size for size, _ in sizes)
    free = _free(target.parent)
    largest = ", ".join(f"{p.relative_to(target.parent)} ({_gb(s)})" for s, p in sorted(sizes, reverse=True)[:3])
    if total > MAX_BACKUP_BYTES:
        problems.append(f"a backup of {target.name} would copy {_gb(total)}, past what a backup may take "
                        f"({_gb(MAX_BACKUP_BYTES)}): move its largest files out of it ({largest})")
    elif free is not None and total > free - _SPARE_BYTES:
        problems.append(f"a backup of {target.name} needs {_gb(total)} and {_gb(_SPARE_BYTES)} left free after it, and "
                        f"the disk beside it has {_gb(free)} free: free some space there"
                        + (f" (its largest files: {largest})" if total > _SPARE_BYTES else ""))
    return problems


def _listed(names: list[str]) -> str:
    return first_of(names, 3)


def _readable(path: Path, info: os.stat_result) -> bool:
    """Whether a copy can read the file, or list and enter the folder (a link is copied as a link)."""
    if stat.S_ISDIR(info.st_mode):
        return os.access(path, os.R_OK | os.X_OK, follow_symlinks=False)
    return not stat.S_ISREG(info.st_mode) or os.access(path, os.R_OK, follow_symlinks=False)


def copy(target: Path, to: Path) -> None:
    """Copy `target` (a file or a folder) to `to`, links as links, but for git's own repositories."""
    if stat.S_ISDIR(os.lstat(target).st_mode):
        shutil.copytree(target, to, symlinks=True, ignore=lambda _, names: {n for n in names if is_git_repository(n)})
    else:
        shutil.copy2(target, to, follow_symlinks=False)


def _entries(target: Path):
    """(path, lstat) of `target` and everything under it that a backup copies, following no link."""
    try:
        yield target, os.lstat(target)
    except OSError:
        return
    if not stat.S_ISDIR(os.lstat(target).st_mode):
        return
    for folder, dirs, files in walk(target):
        dirs[:] = [d for d in dirs if not is_git_repository(d)]
        for name in [*dirs, *files]:
            if is_git_repository(name):
                continue
            path = Path(folder, name)
            try:
                yield path, os.lstat(path)
            except OSError:  # gone since the listing
                continue


def _chain(target: Path, deepest: Path) -> str | None:
    """The folder chain down to `deepest` when it is past `MAX_BACKUP_DEPTH`, said with its depth
    and the start of its path (the whole may be thousands of characters); None when it is not."""
    levels = deepest.relative_to(target).parts
    if len(levels) <= MAX_BACKUP_DEPTH:
        return None
    return f"the folder chain {Path(target.name, *levels[:3])}{os.sep}... ({len(levels):,} folders deep)"


def _too_long(target: Path, longest: Path) -> str | None:
    """Why the copy of `longest` (the longest path under `target`) would have a path the system
    refuses, and the fix; None when it would not. Measured as the backup lays it out, with room
    for the backup's number: `.<name>.bak-N/<name or .partial>/<path in the target>` beside it."""
    name = len(os.fsencode(target.name))
    stem = name if name <= NAME_MAX - 24 else NAME_MAX - 31  # `backups.base_name`: a long name is cut and hashed
    beside = len(os.fsencode(os.path.abspath(target.parent))) + 1 + len(".") + stem + len(".bak-") + _NUMBER_BYTES
    inside = len(os.fsencode(longest)) - len(os.fsencode(target))  # "/<path in the target>"
    length = beside + 1 + max(name, len(_COPIED_AS)) + inside
    if length < PATH_MAX:
        return None
    return (f"{shown_path(longest.relative_to(target.parent))} would have a path of {length:,} bytes in a backup "
            f"(.{target.name}.bak-N{os.sep}{target.name}{os.sep}... beside it), and the system takes at most "
            f"{PATH_MAX - 1:,}: shorten the names of the folders on its way, or move {target.name} to a folder "
            f"with a shorter path than {shown_path(target.parent)}")


def _free(folder: Path) -> int | None:
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def _gb(size: int) -> str:
    return f"{size / (1 << 30):.1f} GB" if size >= 1 << 30 else f"{size / (1 << 20):.1f} MB"


def why_not_copied(target: Path, exc: OSError) -> str:
    """What stopped a copy, and its fix: a disk or quota that filled up; each entry a folder's copy
    failed on (`shutil.Error`, with the cause, "Permission denied"), or the error."""
    full = _full(exc)
    if full:
        return f"{full} while the backup was copied; free some space beside the target (in {target.parent}) and try again"
    if not isinstance(exc, shutil.Error) or not exc.args or not isinstance(exc.args[0], list):
        return f"{exc.strerror or exc}; make the folder beside it writable (and the target readable) and try again"
    failed = [(os.path.relpath(str(source), target), _cause(str(why))) for source, _, why in exc.args[0]]
    shown = "; ".join(f"{path}: {why}" for path, why in failed[:3]) + ("; ..." if failed[3:] else "")
    return f"{len(failed)} of its entries cannot be copied ({shown}); make them readable, or move them out, and try again"


def _full(exc: OSError) -> str:
    """The words of a full disk or an exhausted quota, if that is what stopped the copy ("" if not):
    a folder's copy (`shutil.Error`) keeps only the text of each entry's error."""
    if exc.errno in _FULL:
        return exc.strerror or os.strerror(exc.errno)
    if isinstance(exc, shutil.Error) and exc.args and isinstance(exc.args[0], list):
        causes = {_cause(str(entry[2])) for entry in exc.args[0] if len(entry) == 3}
        return next((os.strerror(code) for code in _FULL if os.strerror(code) in causes), "")
    return ""


def _cause(why: str) -> str:
    """"[Errno 13] Permission denied: '/a/b'" -> "Permission denied" """
    return re.sub(r"^\[Errno \d+\] ", "", re.sub(r": '.*'$", "", why))


@contextlib.contextmanager
def readable(target: Path, doing: str) -> Iterator[None]:
    """Turn a file or folder under `target` that cannot be read while `doing` ("compare skill with
    its backup before restoring it") into a `UserError` naming it (the folder that blocks the way,
    when one does) and the fix. Only reading happens inside, so nothing was changed."""
    try:
        yield
    except PermissionError as exc:
        if exc.filename is None:
            raise
        path = _blocking(target, Path(os.fsdecode(exc.filename)))
        raise UserError(f"cannot read {path} ({exc.strerror}) to {doing}; nothing was changed: make it readable "
                        f"(chmod u+rX {shlex.quote(str(path))}) and try again") from exc


def _blocking(target: Path, path: Path) -> Path:
    """The first folder from `target` down to `path` that cannot be listed or entered, else `path`."""
    if not path.is_relative_to(target):
        return path
    for here in [target, *(target / p for p in reversed(path.relative_to(target).parents[:-1]))]:
        try:
            folder = stat.S_ISDIR(os.lstat(here).st_mode)
        except OSError:
            return path
        if folder and not os.access(here, os.R_OK | os.X_OK, follow_symlinks=False):
            return here
    return path

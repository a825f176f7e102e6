"""Numbered backups beside a write-back's target, the journal of a write in progress, and recovery.

Beside a target `skill` (a folder; a file such as `prompt.md` works the same way):

    .skill.lock            every writer of `skill` holds an flock on it, so two never interleave
    skill.bak-1/           a backup; its number is taken by os.mkdir (exclusive: anything already
      .journal.json        at that name, a dangling symlink too, moves it to the next number)
      skill                the copy, complete once it carries this name: it is copied as
                           `.partial` (symlinks as links, never followed), then renamed

The journal records who took the backup (`write_to` or `restore`), the phase of the write
(`copying`, `applying`, `done`, `rolled back`), whether the target existed, and every path the
write changes. `recover` settles what a killed writer left: a backup still `copying` is removed
(nothing was changed yet); a write still `applying` is rolled back, each of its paths put back
exactly as in the copy, and the temp files of its atomic writes removed. A folder whose target
did not exist holds a journal only, and is removed once its write has ended.

Left out: what to write (`writeback`), power loss (nothing is fsynced: a write survives the
process dying, not the machine), Windows (fcntl), and writers that do not take the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from agentdescent import atomic
from agentdescent.errors import UserError

NAME_MAX = 255  # bytes in one file name on ext4, xfs, btrfs, tmpfs, APFS
JOURNAL = ".journal.json"
PARTIAL = ".partial"
Phase = Literal["copying", "applying", "done", "rolled back"]


class Journal(BaseModel):
    """The record of one write in its backup folder, rewritten atomically at each phase."""

    format: Literal[1] = 1
    made_by: Literal["write_to", "restore"]
    phase: Phase
    existed: bool  # whether the target was there when the backup was taken
    paths: list[str] = []  # every path the write changes, relative posix; "" is the target itself


@dataclass(frozen=True)
class Backup:
    """One `<name>.bak-<number>` folder beside a target."""

    folder: Path
    number: int
    name: str  # the target's name, which the copy carries

    @property
    def copy(self) -> Path:
        return self.folder / self.name

    def journal(self) -> Journal | None:
        """The journal, or None when it is missing or unreadable (a reservation cut short)."""
        try:
            return Journal.model_validate_json((self.folder / JOURNAL).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def record(self, journal: Journal) -> None:
        atomic.write_text(self.folder / JOURNAL, journal.model_dump_json())


def base_name(target: Path) -> str:
    """The stem of the names beside `target`: its name, or when that leaves no room for a suffix,
    a prefix of it and a hash of the whole. base_name(Path("a/skill")) == "skill" """
    name = target.name
    if len(os.fsencode(name)) <= NAME_MAX - 24:
        return name
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:8]
    return os.fsencode(name)[: NAME_MAX - 40].decode("utf-8", "ignore") + "-" + digest


@contextlib.contextmanager
def locked(target: Path) -> Iterator[None]:
    """Hold `target`'s lock until the block ends: an flock on `.<name>.lock` beside it, created
    when missing and left there (removing a lock file races with the next writer)."""
    try:
        import fcntl
    except ImportError:  # Windows
        raise UserError("write_to and restore lock the target with fcntl, which this system lacks; "
                        "use Linux or macOS, or copy result.rendered out yourself") from None
    lock = target.parent / f".{base_name(target)}.lock"
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        raise UserError(f"cannot open the lock file {lock}: {exc.strerror}; it must be a writable "
                        "regular file (not a symlink) in a folder you can write to") from exc
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # which releases the lock


def backups(target: Path) -> list[Backup]:
    """The backup folders beside `target`, oldest first; symlinks and files are not backups."""
    pattern = re.compile(re.escape(base_name(target)) + r"\.bak-([0-9]+)")
    try:
        names = os.listdir(target.parent)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        match = pattern.fullmatch(name)
        info = _lstat(target.parent / name) if match else None
        if match and info is not None and stat.S_ISDIR(info.st_mode):
            found.append(Backup(target.parent / name, int(match.group(1)), target.name))
    return sorted(found, key=lambda b: b.number)


def latest(target: Path) -> Backup | None:
    """The newest complete backup a write_to took (restore's own backups are never picked, so
    restoring twice puts the same content back rather than undoing the first restore)."""
    for backup in reversed(backups(target)):
        journal = backup.journal()
        if journal and journal.made_by == "write_to" and journal.existed and os.path.lexists(backup.copy):
            return backup
    return None


def take(target: Path, *, made_by: Literal["write_to", "restore"], paths: list[str]) -> Backup:
    """Back up the whole of `target` into the next numbered folder and journal the write of
    `paths` as `applying`. The caller holds the lock, then calls `finish` or `rollback`."""
    if target.name in (JOURNAL, PARTIAL):
        raise UserError(f"cannot back up {target}: its name is one the backup folder uses; rename it")
    backup = _reserve(target)
    journal = Journal(made_by=made_by, phase="copying", existed=os.path.lexists(target), paths=paths)
    try:
        backup.record(journal)
        if journal.existed:
            _copy(target, backup)
        backup.record(journal.model_copy(update={"phase": "applying"}))
    except OSError as exc:
        shutil.rmtree(backup.folder, ignore_errors=True)
        raise UserError(f"could not back up {target} into {backup.folder}: {exc}; nothing was changed. "
                        "Make the folder beside it writable (and the target readable) and try again") from exc
    return backup


def finish(backup: Backup, phase: Phase = "done") -> None:
    """Mark the write ended; a folder with no copy in it has nothing to restore and goes."""
    journal = backup.journal()
    if journal is None:
        return
    backup.record(journal.model_copy(update={"phase": phase}))
    if not journal.existed:
        shutil.rmtree(backup.folder)


def rollback(target: Path, backup: Backup) -> None:
    """Put every path the journal lists back as in the copy (gone if the target did not exist)."""
    journal = backup.journal()
    if journal is None:
        return
    put_back(target, backup.copy if journal.existed else None, journal.paths)
    finish(backup, "rolled back")


def recover(target: Path) -> list[Backup]:
    """Settle the writes a killed process left on `target` (the caller holds the lock); returns
    the backups whose writes were rolled back."""
    rolled_back = []
    for backup in backups(target):
        journal = backup.journal()
        if journal is None:
            _remove_if_ours(backup)
        elif journal.phase == "copying":
            shutil.rmtree(backup.folder)  # the target was not touched yet
        elif journal.phase == "applying":
            try:
                rollback(target, backup)
            except OSError as exc:
                raise UserError(f"a write-back to {target} was interrupted, and putting it back from {backup.folder} "
                                f"failed: {exc}; fix the cause (permissions, disk space) and try again") from exc
            rolled_back.append(backup)
        elif not journal.existed:
            shutil.rmtree(backup.folder)
    return rolled_back


def interrupted(target: Path) -> Backup | None:
    """A backup whose write is still `applying`: running now, or killed and not yet recovered."""
    return next((b for b in backups(target) if (j := b.journal()) and j.phase == "applying"), None)


def put_back(target: Path, source: Path | None, paths: Iterable[str]) -> None:
    """Make each of `paths` under `target` exactly as under `source` (None: as if it held nothing):
    files with their bytes and mode, symlinks as links, folders as folders. What `source` lacks
    is removed, with the folders above it that it left empty and `source` does not have, and the
    temp files an interrupted atomic write left beside any of them. Nothing is reached through a
    symlink on either side."""
    listed = set(paths)
    entries = listed | {a for p in listed for a in _ancestors(p)}
    for temp in atomic.stray_temps(target / p for p in listed):
        temp.unlink(missing_ok=True)
    for rel in sorted(entries, key=_depth):  # first, so that nothing below is reached through a link
        if os.path.islink(target / rel) and (source is None or not same(source, target, rel)):
            (target / rel).unlink()
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
    return stat.S_IMODE(a.st_mode) == stat.S_IMODE(b.st_mode) and (source / rel).read_bytes() == (target / rel).read_bytes()


def _reserve(target: Path) -> Backup:
    number = max((b.number for b in backups(target)), default=0) + 1
    while True:
        folder = target.parent / f"{base_name(target)}.bak-{number}"
        try:
            os.mkdir(folder)
        except FileExistsError:
            number += 1
            continue
        return Backup(folder, number, target.name)


def _copy(target: Path, backup: Backup) -> None:
    partial = backup.folder / PARTIAL
    if stat.S_ISDIR(os.lstat(target).st_mode):
        shutil.copytree(target, partial, symlinks=True)
    else:
        shutil.copy2(target, partial, follow_symlinks=False)
    os.rename(partial, backup.copy)


def _remove_if_ours(backup: Backup) -> None:
    """A folder with no journal is ours only if it holds nothing but a partial copy or the temp
    file of a journal write; anything else someone made, and it stays."""
    ours = {PARTIAL} | {t.name for t in atomic.stray_temps([backup.folder / JOURNAL])}
    if set(os.listdir(backup.folder)) <= ours:
        shutil.rmtree(backup.folder)


def _remove_if_unwanted(target: Path, source: Path | None, rel: str, *, must: bool) -> None:
    info = _entry(target, rel)
    if info is None:
        return
    wanted = None if source is None else _entry(source, rel)
    if wanted is not None and stat.S_IFMT(wanted.st_mode) == stat.S_IFMT(info.st_mode):
        return
    if not stat.S_ISDIR(info.st_mode):
        (target / rel).unlink()
        return
    try:
        (target / rel).rmdir()
    except OSError:
        if must or wanted is not None:
            raise  # a folder in the way of what must be put back


def _put(source: Path, target: Path, rel: str) -> None:
    info = _entry(source, rel)
    if info is None or same(source, target, rel):
        return
    dest = target / rel
    if stat.S_ISDIR(info.st_mode):
        dest.mkdir()
        os.chmod(dest, stat.S_IMODE(info.st_mode))
    elif stat.S_ISLNK(info.st_mode):
        atomic.write_symlink(dest, os.readlink(source / rel))
    else:
        atomic.write_bytes(dest, (source / rel).read_bytes(), mode=stat.S_IMODE(info.st_mode))


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
    return _lstat(root / rel)


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None

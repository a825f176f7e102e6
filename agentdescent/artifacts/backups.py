"""Numbered backups beside a write-back's target, the record of each, and recovery after a kill.

Beside a target `skill` (a folder; a file such as `prompt.md` works the same way), and nothing
else: every writer of `skill` holds its lock (`targetlock`), so two never interleave.

    .skill.bak-1/          a backup; its number is recorded, then taken by os.mkdir (exclusive:
                           anything already at that name, a dangling symlink too, moves it on)
      .gitignore           `*`: git leaves the whole folder out
      .journal.json        the record's copy, for a person to read
      skill                the copy, complete once it carries this name: it is copied as
                           `.partial` (symlinks as links, never followed; no `.git`), then renamed

A backup's folder name starts with a dot because hosts scan the folders skills live in (Codex
reads every SKILL.md under `.agents/skills`, however deep, and skips hidden folders): a visible
copy of a skill beside it would be listed as a second skill. Its `.gitignore` keeps it out of the
user's commits: the copy holds what their repository ignores (a key in `.env`, a large data
file); it lies beside the copy, so nothing that puts the copy back ever reads it.

What is a backup is decided by the registry in the user's home (`registry`), never by what lies
beside the target, where a cloned repository can put anything. A folder is acted on only when
it is recorded there under its name and number, its `.journal.json` agrees with the record, and,
before its copy is read, the copy still has the digest recorded when it was complete. Any other
`<name>.bak-N` or `.<name>.bak-N` folder is a `Refusal`: never rolled back from, restored from or
deleted, and named in what the user is told.

The record says who took the backup (`write_to` or `restore`; for an accept, which run), the
phase of the write (`copying`, `applying`, `done`, `rolled back`; `removing` once `remove` has
begun deleting it), whether the target existed, and every path the write changes, each checked
to lie inside the target. The record changes first and the journal, a copy for a person to read, just after; after
a kill it may lag one phase behind. `recover` settles what a killed writer left: a backup still
`copying` is removed (nothing was changed yet); a write still `applying` is rolled back, each of
its paths put back exactly as in the copy, and the temp files of its atomic writes removed; a
backup `removing` is removed the rest of the way (its journal may be gone with part of its copy).
A folder whose target did not exist holds a journal only, and is removed once its write has
ended. A record whose folder is gone is forgotten.

`restorable` picks what `restore` puts back: the newest trusted backup, whoever took it, so that a
restore (which backs the target up first) is undone by the next one; or the backup of a number
asked for.

Left out: what to write (`writeback`), which backups are too old to keep (`pruning`), how paths
are put back (`putback`), power loss (nothing is fsynced: a write survives the process dying, not
the machine), Windows (fcntl), and writers that do not take the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from agentdescent import atomic
from agentdescent.artifacts import registry
from agentdescent.artifacts.copyable import copy, copy_problems, why_not_copied
from agentdescent.artifacts.putback import check_paths, lstat, put_back
from agentdescent.artifacts.registry import MadeBy, Phase, Record
from agentdescent.errors import UserError
from agentdescent.walking import walk

NAME_MAX = 255  # bytes in one file name on ext4, xfs, btrfs, tmpfs, APFS
JOURNAL = ".journal.json"
PARTIAL = ".partial"
IGNORED = ".gitignore"
_BEFORE: dict[str, str] = {"applying": "copying", "done": "applying", "rolled back": "applying"}
ENDED = ("done", "rolled back")  # the phases of a write that is over: its backup is settled


class Journal(BaseModel):
    """The copy of a backup's record in its folder, for a person to read; never acted on alone."""

    format: Literal[1] = 1
    made_by: MadeBy
    phase: Phase
    existed: bool
    paths: list[str] = []


@dataclass(frozen=True)
class Backup:
    """One recorded `.<name>.bak-<number>` folder beside a target, with its record as last read."""

    folder: Path
    number: int
    name: str  # the target's name, which the copy carries
    record: Record

    @property
    def copy(self) -> Path:
        return self.folder / self.name

    @property
    def target(self) -> Path:
        return self.folder.parent / self.name

    def journal(self) -> Journal | None:
        """The journal, or None when it is missing or unreadable (a reservation cut short)."""
        try:
            return Journal.model_validate_json((self.folder / JOURNAL).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def intact(self) -> bool:
        """Whether the copy is still exactly what was recorded when it was complete."""
        if not self.record.existed or self.record.digest is None:
            return False
        try:
            return registry.digest(self.copy) == self.record.digest
        except OSError:
            return False


@dataclass(frozen=True)
class Refusal:
    """A `<name>.bak-N` folder that is left alone, and why."""

    folder: Path
    why: str

    def __str__(self) -> str:
        return f"{self.folder.name} {self.why}: left alone"


@dataclass(frozen=True)
class Survey:
    """The folders beside a target: the recorded backups (oldest first) and the refused ones."""

    backups: list[Backup]
    refused: list[Refusal]
    gone: list[Record]  # records whose folder is no longer there


def folder_name(target: Path, number: int) -> str:
    """The name of backup `number` of `target`: folder_name(Path("a/skill"), 2) == ".skill.bak-2" """
    return f".{base_name(target)}.bak-{number}"


def pattern(target: Path) -> str:
    """A glob of `target`'s backup folders, for a person to read: pattern(Path("a/skill")) == "a/.skill.bak-*" """
    return str(target.parent / f".{base_name(target)}.bak-*")


def base_name(target: Path) -> str:
    """The stem of the names beside `target`: its name, or when that leaves no room for a suffix,
    a prefix of it and a hash of the whole. base_name(Path("a/skill")) == "skill" """
    name = target.name
    if len(os.fsencode(name)) <= NAME_MAX - 24:
        return name
    digest = hashlib.sha256(os.fsencode(name)).hexdigest()[:8]
    return os.fsencode(name)[: NAME_MAX - 40].decode("utf-8", "ignore") + "-" + digest


def survey(target: Path) -> Survey:
    """Sort the `<name>.bak-N` folders beside `target` (symlinks and files are not backups) into
    those the registry records and whose journal agrees, and the refused rest."""
    records = {r.folder: r for r in registry.load(target)}
    folders = _folders(target)
    found, refused = [], []
    for name, number in folders:
        folder, record = target.parent / name, records.get(name)
        if record is None or record.number != number:
            refused.append(Refusal(folder, f"was not made by AgentDescent (no record in {registry.folder()})"))
            continue
        backup = Backup(folder, number, target.name, record)
        if _agrees(backup.journal(), record):
            found.append(backup)
        else:
            refused.append(Refusal(folder, "does not match AgentDescent's record of it (its .journal.json was "
                                           "changed or replaced)"))
    present = {name for name, _ in folders}
    return Survey(backups=found, refused=refused, gone=[r for r in records.values() if r.folder not in present])


def backups(target: Path) -> list[Backup]:
    """The recorded backups beside `target`, oldest first."""
    return survey(target).backups


def restorable(target: Path, number: int | None = None, *, rolled_back: bool = False) -> tuple[Backup | None, list[Refusal]]:
    """The backup `restore` puts back, and every folder refused on the way, by number: backup
    `number` when one is asked for, else the newest whose write ended (a write-back's, or a
    restore's own, so that restoring again undoes a restore) and was not rolled back (its copy is
    what the target holds again), unless `rolled_back`. Only a complete copy that still has its recorded digest
    qualifies; a newer one that does not is refused, and an older one is used."""
    seen = survey(target)
    refused = list(seen.refused)
    chosen = None
    for backup in reversed(seen.backups):
        record = backup.record
        unasked = number is None and record.phase == "rolled back" and not rolled_back
        if (number is not None and backup.number != number) or not record.existed or unasked or (
                record.phase not in ENDED):
            continue
        if backup.intact():
            chosen = backup
            break
        refused.append(Refusal(backup.folder, "was changed after AgentDescent made it (its copy no longer has "
                                              "the digest recorded)"))
    return chosen, sorted(refused, key=lambda r: _number(r.folder.name))


def take(target: Path, *, made_by: MadeBy, paths: list[str], writes: dict[str, str] | None = None,
         run: str | None = None) -> Backup:
    """Back up the whole of `target` into the next numbered folder, recorded (with the stored `run`
    whose accept writes), and mark the write of `paths` (each inside `target`) `applying`, with what
    each will hold (`writes`, as `registry.seen` says it: a rollback then leaves a path that holds
    neither that nor what the copy holds). The caller holds the lock, then calls `finish` or `rollback`."""
    if target.name in (JOURNAL, PARTIAL):
        raise UserError(f"cannot back up {target}: its name is one the backup folder uses; rename it")
    planned = Record(folder="", number=0, made_by=made_by, existed=os.path.lexists(target), phase="copying",
                     paths=check_paths(target, paths), run=run)
    if planned.existed and (problems := copy_problems(target)):
        raise UserError(f"cannot back up {target}: {'; '.join(problems)}; nothing was changed")
    backup = _reserve(target, planned)
    try:
        if backup.name != IGNORED:  # a target named so has its copy there, read by git in its stead
            atomic.write_text(backup.folder / IGNORED, "*\n")
        _write_journal(backup, backup.record)
        if planned.existed:  # copied whole under a name of its own, then named the copy: complete once so named
            copy(target, backup.folder / PARTIAL)
            os.rename(backup.folder / PARTIAL, backup.copy)
        digest = registry.digest(backup.copy) if planned.existed else None
        backup = _store(backup, backup.record.model_copy(update={"phase": "applying", "digest": digest, "after": writes}))
    except OSError as exc:
        shutil.rmtree(backup.folder, ignore_errors=True)
        _forget(target, {backup.number})
        raise UserError(f"could not back up {target} into {backup.folder}: {why_not_copied(target, exc)}; nothing "
                        "was changed") from exc
    return backup


def finish(backup: Backup, phase: Phase = "done", after: dict[str, str] | None = None) -> None:
    """Mark the write ended, with what its paths hold now (`after` and their modes, see `Record`); a
    folder with no copy in it has nothing to restore and goes."""
    modes = None if after is None else registry.file_modes(backup.target, backup.record.paths)
    backup = _store(backup, backup.record.model_copy(update={"phase": phase, "after": after, "modes": modes}))
    if not backup.record.existed:
        shutil.rmtree(backup.folder)
        _forget(backup.target, {backup.number})


def remove(backup: Backup) -> bool:
    """Delete a settled backup and forget it (the caller holds the lock); whether it is gone. It is
    marked `removing` first, so that a kill or a failure part-way leaves a record the next
    `recover` finishes, not a half-deleted folder that no longer matches its record."""
    backup = _store(backup, backup.record.model_copy(update={"phase": "removing"}))
    if _delete(backup.folder):
        _forget(backup.target, {backup.number})
        return True
    return False


def rollback(target: Path, backup: Backup, paths: list[str] | None = None) -> list[str]:
    """Put `paths` (default: every path the record lists) back as in the copy (gone if the target
    did not exist), but for one that holds neither what the write put there nor what the copy
    holds: someone saved it since, and it is left as they saved it. Those left; `UserError` when
    the copy is no longer what was recorded."""
    record = backup.record
    if record.existed and not backup.intact():
        raise UserError(f"a write-back to {target} did not finish, and its backup {backup.folder} was changed since "
                        "it was made (its copy no longer has the digest recorded), so it is not put back: compare "
                        f"the two by hand, then move {backup.folder.name} away to go on")
    source = backup.copy if record.existed else None
    wanted = record.paths if paths is None else paths
    left = [] if record.after is None else [p for p in wanted if registry.saved_since(target, source, p, record.after.get(p))]
    put_back(target, source, [p for p in wanted if p not in left])
    try:
        finish(backup, "rolled back")
    except OSError as exc:  # put back, not recorded: what recovers the record finds the target as it was
        raise UserError(f"{target} was put back from {backup.folder}, but recording that failed ({exc.strerror or exc}): "
                        "free some space or make it writable; the next write-back or restore records it") from exc
    return left


def recover(target: Path) -> tuple[list[Path], list[Refusal]]:
    """Settle the writes a killed process left on `target` (the caller holds the lock); returns
    the folders of the backups whose writes were rolled back, and the folders refused (left alone)."""
    seen = survey(target)
    rolled_back, settled = [], {r.number for r in seen.gone}
    for backup in seen.backups:
        record = backup.record
        if record.phase == "copying":
            shutil.rmtree(backup.folder)  # the target was not touched yet
            settled.add(backup.number)
        elif record.phase == "removing" and _delete(backup.folder):  # one that will not go yet is tried next time
            settled.add(backup.number)
        elif record.phase == "applying":
            try:
                rollback(target, backup)
            except OSError as exc:
                raise UserError(f"a write-back to {target} was interrupted, and putting it back from {backup.folder} "
                                f"failed: {exc}; fix the cause (permissions, disk space) and try again") from exc
            rolled_back.append(backup.folder)
        elif not record.existed:
            shutil.rmtree(backup.folder)
            settled.add(backup.number)
        elif (journal := backup.journal()) is None or journal.phase != record.phase:
            _write_journal(backup, record)  # it lagged behind the record when the writer was killed
    _forget(target, settled)
    return rolled_back, seen.refused


def interrupted(target: Path) -> Backup | None:
    """A recorded backup whose write is still `applying`: running now, or killed and not yet recovered."""
    return next((b for b in backups(target) if b.record.phase == "applying"), None)


def _folders(target: Path) -> list[tuple[str, int]]:
    """(name, number) of each `.<name>.bak-N` folder beside `target`, by number; no symlinks. A
    visible `<name>.bak-N` is listed too: one recorded under that name is still a backup, and one
    that is not is named to the user as left alone."""
    pattern = re.compile(r"\.?" + re.escape(base_name(target)) + r"\.bak-([0-9]+)")
    try:
        names = os.listdir(target.parent)
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for name in names:
        match = pattern.fullmatch(name)
        info = lstat(target.parent / name) if match else None
        if match and info is not None and stat.S_ISDIR(info.st_mode):
            found.append((name, int(match.group(1))))
    return sorted(found, key=lambda f: (f[1], f[0]))


def _agrees(journal: Journal | None, record: Record) -> bool:
    """Whether the journal is the record's copy, or the copy one phase behind (a kill between them)."""
    if journal is None:  # killed before the first journal was written, or after `remove` deleted it
        return record.phase in ("copying", "removing")
    same = (journal.made_by, journal.existed, journal.paths) == (record.made_by, record.existed, record.paths)
    before = ENDED if record.phase == "removing" else (_BEFORE.get(record.phase),)
    return same and journal.phase in (record.phase, *before)


def _reserve(target: Path, planned: Record) -> Backup:
    """Record the next free number, then take its folder with os.mkdir."""
    records = registry.load(target)
    number = max([n for _, n in _folders(target)] + [r.number for r in records], default=0) + 1
    while True:
        name = folder_name(target, number)
        if os.path.lexists(target.parent / name) or os.path.lexists(target.parent / name[1:]):
            number += 1
            continue
        record = planned.model_copy(update={"folder": name, "number": number})
        registry.save(target, [*records, record])
        try:
            os.mkdir(target.parent / name)
        except FileExistsError:  # made by someone who does not take the lock, since the check above
            number += 1
            continue
        except OSError as exc:
            registry.save(target, records)
            raise UserError(f"could not make the backup folder {target.parent / name}: {exc.strerror or exc}; "
                            "nothing was changed. Make the folder beside the target writable and try again") from exc
        return Backup(target.parent / name, number, target.name, record)


def _store(backup: Backup, record: Record) -> Backup:
    """Replace the backup's record in the registry, then its journal."""
    kept = [r for r in registry.load(backup.target) if r.number != backup.number]
    registry.save(backup.target, [*kept, record])
    _write_journal(backup, record)
    return Backup(backup.folder, backup.number, backup.name, record)


def _forget(target: Path, numbers: set[int]) -> None:
    if numbers:
        registry.save(target, [r for r in registry.load(target) if r.number not in numbers])


def _write_journal(backup: Backup, record: Record) -> None:
    journal = Journal(made_by=record.made_by, phase=record.phase, existed=record.existed, paths=record.paths)
    atomic.write_text(backup.folder / JOURNAL, journal.model_dump_json())


def _delete(folder: Path) -> bool:
    """Remove `folder` (never through a symlink); whether it is gone. A copy keeps its folders'
    modes, and a read-only one's entries cannot be unlinked until it is made writable again."""
    shutil.rmtree(folder, ignore_errors=True)
    for here, dirs, _ in walk(folder):
        for name in (".", *dirs):
            path = os.path.join(here, name)
            if not os.path.islink(path):
                with contextlib.suppress(OSError):
                    os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) | stat.S_IRWXU)
    shutil.rmtree(folder, ignore_errors=True)
    return not os.path.lexists(folder)


def _number(name: str) -> int:
    return int(name.rsplit("-", 1)[1])

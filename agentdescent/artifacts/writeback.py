"""Writing an evolved artifact back to disk, and putting the last backup back.

`write_back` compares the artifact with the disk and returns a `WritePlan`: files to write
(created or changed), files already right, files to delete (in the artifact when the run
started and gone from it now; with `prune`, also the files it does not know), the extra files
it leaves alone, and the frozen files it never touches. Given `base`, what the target held when
the run started, a file the user changed since is never lost: it is kept when the run did not
change it, merged three-way when both did and git can merge the two, and otherwise a conflict
that refuses the whole write unless `overwrite` (`reconcile`). Unless it is a dry run, and only when
something changes, it then holds the target's lock, settles a write a killed process left,
backs the whole target up (`.<name>.bak-N` beside it, recorded in `$AGENTDESCENT_HOME/backups`),
deletes what goes and writes each changed file atomically with its mode kept; a failure
part-way puts every touched path back from the backup and raises a `UserError` that names the
file. `restore` puts the newest recorded, intact backup back the same way, after backing the
target up in turn: so a second restore undoes the first, and `restore(path, number)` puts back
an older backup by its number.

Only backups this package recorded are rolled back from or restored; any other `.<name>.bak-N`
folder beside the target (one a cloned repository brought along, one whose copy or journal was
changed since) is left alone and named in `WritePlan.refused` / `Restored.refused`, or in the
error when no backup qualifies. Every path put back is checked to lie inside the target first.

Refused with a `UserError` before anything changes: an unsafe key (`unsafe_key_reason`), a path
through a symlink or over a file, a folder where a file goes, a name too long for the file
system, a text artifact over a folder or a tree over a file, a target that is a symlink.

Left out: the lock, the backups, their record and recovery (`backups`, `registry`); putting
paths back (`putback`); reading a folder into a tree (`tree`). Files a key cannot name (`.git`
and the like) are never listed, deleted, pruned or restored.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path

from agentdescent import atomic
from agentdescent.artifacts import backups, reconcile, registry
from agentdescent.artifacts.putback import path_reason, put_back, same
from agentdescent.commands import command
from agentdescent.errors import UserError
from agentdescent.governance import is_frozen, unsafe_key_reason
from agentdescent.home import HOME_ENV

PATH_MAX = 4096  # bytes in a whole path on Linux


@dataclass(frozen=True, kw_only=True)
class WritePlan:
    """What a write-back changes: relative posix paths, sorted (a text artifact's file is listed
    by its name). `deleted` holds the pruned extras too; `backup` is the copy of the whole target
    taken before the first change (None on a dry run, a no-op, or when nothing was there). A dry
    run lists `conflicts` where a real write would refuse them."""

    target: Path
    written: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    extra: tuple[str, ...] = ()
    frozen: tuple[str, ...] = ()
    merged: tuple[str, ...] = ()  # written, as the merge of the run's change and the user's
    kept: tuple[str, ...] = ()  # changed by the user since the run started, not by the run: left as they are
    conflicts: tuple[str, ...] = ()  # changed by both, beyond a clean merge: refused (written only with overwrite)
    backup: Path | None = None
    refused: tuple[str, ...] = ()  # `.<name>.bak-N` folders beside the target left alone, each with why

    @property
    def changes(self) -> bool:
        return bool(self.written or self.deleted)


@dataclass(frozen=True, kw_only=True)
class Restored:
    """What `restore` did: the backup copy it put back, the copy of the target it took first (the
    next restore puts that back; None when the target already matched), the paths it changed, and
    the numbers of the trusted backups there are now, oldest first."""

    source: Path
    backup: Path | None
    changed: tuple[str, ...]
    refused: tuple[str, ...] = ()  # `.<name>.bak-N` folders passed over, each with why
    numbers: tuple[int, ...] = ()


def write_back(path: str | os.PathLike, rendered: str | Mapping[str, str], *, initial: Mapping[str, str] | None = None,
               base: str | Mapping[str, str] | None = None, frozen: Iterable[str] = (), dry_run: bool = False,
               prune: bool = False, overwrite: bool = False) -> WritePlan:
    """Write `rendered` to `path`: a str becomes one file, a {relative posix path: text} dict a
    folder. `initial` is the artifact when the run started (its keys gone from `rendered` are
    deleted); `base` is what the target held then, in the shape of `rendered` (None: the disk's
    edits are not looked for); `frozen` holds fnmatch patterns of files never touched. `dry_run`
    returns the plan and touches nothing. Raises `UserError` for a refused path, for files both
    the user and the run changed beyond a clean merge (unless `overwrite`), or a failed write (undone)."""
    target = _target(path)
    tree = not isinstance(rendered, str)
    contents = _contents(rendered)
    _check_kind(target, folder=tree)
    initial, frozen = (dict(initial or {}), tuple(frozen)) if tree else ({}, ())
    _check_keys(initial)
    base_files = None if base is None else _contents(base)
    if dry_run:
        _refuse_interrupted(target)
        refused = tuple(map(str, backups.survey(target).refused))
        plan = _plan(target, contents, initial, frozen, prune, base_files, overwrite=overwrite)[0]
        return _named(replace(plan, refused=refused))
    target.parent.mkdir(parents=True, exist_ok=True)
    with backups.locked(target):
        refused = tuple(map(str, backups.recover(target)[1]))
        plan, contents = _plan(target, contents, initial, frozen, prune, base_files, overwrite=overwrite)
        plan = replace(plan, refused=refused)
        if plan.conflicts and not overwrite:
            raise _conflicting(target, plan.conflicts)
        if not plan.changes:
            return _named(plan)
        backup = backups.take(target, made_by="write_to", paths=[*plan.deleted, *plan.written])
        _apply(target, plan, contents, backup)
        backups.finish(backup)
    return _named(replace(plan, backup=backup.copy if os.path.lexists(backup.copy) else None))


def recover(path: str | os.PathLike) -> list[Path]:
    """Roll back a write-back to `path` that a killed process left half-done; returns the backup
    folders it rolled back from (none when there was nothing to do)."""
    target = _target(path)
    if not backups.backups(target):
        return []  # nothing to settle, and no lock file left behind for nothing
    with backups.locked(target):
        return [b.folder for b in backups.recover(target)[0]]


def restore(path: str | os.PathLike, number: int | None = None) -> Restored:
    """Put a recorded, intact backup of `path` back: backup `number`, or the newest whose write
    ended. A folder ends as the backup (files added since are removed; paths a key cannot name,
    `.git` and the like, are left as they are), a file as it was. An interrupted write is recovered
    first, and the current target is backed up first, so that the next restore undoes this one.
    Folders beside it that are not recorded backups, or no longer match their record, are passed
    over and named in `Restored.refused`. Raises `UserError` when no backup qualifies."""
    target = _target(path)
    _check_kind(target, folder=None)
    source, refused = backups.restorable(target, number) if target.parent.is_dir() else (None, [])
    if source is None:
        raise _no_backup(target, refused, number)  # before taking the lock, which would leave a lock file beside it
    with backups.locked(target):
        backups.recover(target)
        source, refused = backups.restorable(target, number)
        if source is None:
            raise _no_backup(target, refused, number)
        paths = _differences(source.copy, target)
        said = tuple(map(str, refused))
        if not paths:
            return Restored(source=source.copy, backup=None, changed=(), refused=said, numbers=_numbers(target))
        backup = backups.take(target, made_by="restore", paths=paths)
        _run(target, backup, [(f"put {target} back from {source.copy}", partial(put_back, target, source.copy, paths))])
        backups.finish(backup)
    return Restored(source=source.copy, backup=backup.copy if os.path.lexists(backup.copy) else None,
                    changed=tuple(paths), refused=said, numbers=_numbers(target))


def _numbers(target: Path) -> tuple[int, ...]:
    """The numbers of the backups restore could put back: ended, recorded and intact."""
    return tuple(b.number for b in backups.backups(target)
                 if b.record.phase in ("done", "rolled back") and b.intact())


def _no_backup(target: Path, refused: list[backups.Refusal], number: int | None = None) -> UserError:
    found = "".join(f"; {r}" for r in refused)
    if number is not None:
        there = ", ".join(map(str, _numbers(target))) or "none"
        return UserError(f"no backup number {number} of {target} to restore{found}; the backups there are: {there} "
                         f"({backups.pattern(target)})")
    return UserError(f"no backup of {target} to restore: write_to takes one ({backups.folder_name(target, 1)[:-1]}N "
                     f"beside it, recorded in {registry.folder()}) before it changes anything, and no recorded, "
                     f"unchanged one is there{found}. "
                     f"A backup made with another {HOME_ENV} is not known here; check the path")


def _target(path: str | os.PathLike) -> Path:
    target = Path(path).absolute()
    if target.name in ("", ".", ".."):
        raise UserError(f"{path} does not name a file or folder; give its name (e.g. skill/ or prompt.md)")
    if len(os.fsencode(target.name)) > backups.NAME_MAX:
        raise UserError(f"the name {target.name[:40]}... is {len(os.fsencode(target.name))} bytes, past the file "
                        f"system's {backups.NAME_MAX}; choose a shorter one")
    return target


def _check_kind(target: Path, *, folder: bool | None) -> None:
    info = _lstat(target)
    if info is None:
        return
    if stat.S_ISLNK(info.st_mode):
        raise UserError(f"{target} is a symlink; write_to and restore never go through one: pass the path it "
                        f"points to ({os.path.realpath(target)})")
    if not stat.S_ISDIR(info.st_mode) and not stat.S_ISREG(info.st_mode):
        raise UserError(f"{target} is a device, a FIFO or a socket, not a file or a folder: write_to and restore "
                        "write only those; pass the path of the file or folder to write")
    if folder is True and not stat.S_ISDIR(info.st_mode):
        raise UserError(f"{target} is a file; write_to needs a folder for a tree artifact: pass a folder path")
    if folder is False and stat.S_ISDIR(info.st_mode):
        raise UserError(f"{target} is a folder; a text artifact is written to a file: pass a file path")


def _contents(rendered: object) -> dict[str, bytes]:
    if isinstance(rendered, str):
        return {"": rendered.encode("utf-8")}
    if not isinstance(rendered, Mapping) or not all(isinstance(t, str) for t in rendered.values()):
        raise UserError(f"cannot write a {type(rendered).__name__} artifact: write_to takes text or "
                        "{relative path: text}; write result.rendered yourself")
    _check_keys(rendered)
    return {key: text.encode("utf-8") for key, text in rendered.items()}


def _check_keys(keys: Iterable[str]) -> None:
    for key in keys:
        reason = unsafe_key_reason(key)
        if reason:
            raise UserError(f"refusing to write {key!r}: {reason}; nothing was changed")


def _refuse_interrupted(target: Path) -> None:
    pending = backups.interrupted(target)
    if pending is not None:
        raise UserError(f"a write-back to {target} is running or was interrupted (journal in {pending.folder}); "
                        f"wait for it, or settle it with result.write_to or `{command('restore', target)}`")


def _plan(target: Path, contents: dict[str, bytes], initial: dict[str, str], frozen: tuple[str, ...], prune: bool,
          base: dict[str, bytes] | None = None, *, overwrite: bool = False) -> tuple[WritePlan, dict[str, bytes]]:
    """What the write does, and the bytes of each file it writes. With `base`, the user's edits
    since the run started are kept or merged in first, and the files beyond a merge are conflicts
    (written as the run has them only with `overwrite`)."""
    on_disk = _files_on_disk(target) if "" not in contents else set()
    frozen_keys = {k for k in {*contents, *initial, *on_disk} if is_frozen(k, frozen)}
    merge = reconcile.against_disk(target, contents, initial, base, frozen_keys)
    leave = set(merge.kept) | (set() if overwrite else set(merge.conflicts))
    contents = {k: v for k, v in contents.items() if k not in leave}
    contents.update({k: merge.contents[k] for k in merge.merged})
    gone = {k for k in initial if k not in contents and k not in frozen_keys | leave and os.path.lexists(target / k)}
    extra = on_disk - contents.keys() - initial.keys() - frozen_keys - leave
    deleted = (gone | extra) if prune else gone
    kept = sorted(k for k in contents if k not in frozen_keys)
    for key in kept:
        _refuse_path(target, key, deleted, may_be_link=False)
    for key in deleted:
        _refuse_path(target, key, deleted, may_be_link=True)
    written = tuple(k for k in kept if _bytes(target / k) != contents[k])
    plan = WritePlan(target=target, written=written, unchanged=tuple(k for k in kept if k not in written),
                     deleted=tuple(sorted(deleted)), extra=tuple(sorted(extra)), frozen=tuple(sorted(frozen_keys)),
                     merged=merge.merged, kept=merge.kept, conflicts=merge.conflicts)
    return plan, contents


def _conflicting(target: Path, paths: tuple[str, ...]) -> UserError:
    names = ", ".join(p or target.name for p in paths[:10]) + (f" and {len(paths) - 10} more" if len(paths) > 10 else "")
    return UserError(f"refusing to write {target}: {len(paths)} file(s) changed on disk since the run started and were "
                     f"changed by the run too, beyond what a merge can join ({names}); nothing was changed. Merge them by "
                     "hand, or replace your edits with the run's version on purpose (overwrite=True; "
                     "`agentdescent accept --overwrite`): the backup taken first keeps yours")


def _refuse_path(target: Path, key: str, deleted: set[str], *, may_be_link: bool) -> None:
    """Raise `UserError` unless `key` can be written (or deleted) inside `target` without going
    through a symlink or over a file, and its path is not too long."""
    if len(os.fsencode(target / key)) >= PATH_MAX:
        raise UserError(f"refusing to write {key!r}: its path is longer than the system's {PATH_MAX} bytes; "
                        "move the target to a shorter path or shorten the key; nothing was changed")
    parts = key.split("/") if key else []
    for depth in range(1, len(parts) + 1):
        rel, last = "/".join(parts[:depth]), depth == len(parts)
        info = _lstat(target / rel)
        if info is None or (not last and rel in deleted):
            return
        problem = _path_problem(info, rel, key, last=last, may_be_link=may_be_link)
        if problem:
            raise UserError(f"refusing to write inside {target}: {problem}; nothing was changed")


def _path_problem(info: os.stat_result, rel: str, key: str, *, last: bool, may_be_link: bool) -> str | None:
    kind = stat.S_IFMT(info.st_mode)
    if kind == stat.S_IFLNK and not (last and may_be_link):
        return f"{rel} is a symlink (write_to never writes through one): replace it or freeze {key!r}"
    if not last and kind != stat.S_IFDIR:
        return f"{rel} is a file where {key!r} needs a folder: move it away"
    if last and kind == stat.S_IFDIR:
        return f"{key} is a folder where the artifact has a file: move it away"
    if last and kind not in (stat.S_IFREG, stat.S_IFLNK):
        return f"{key} is not a regular file (a pipe, socket or device): move it away"
    return None


def _apply(target: Path, plan: WritePlan, contents: dict[str, bytes], backup: backups.Backup) -> None:
    deletions = [(f"delete {target / k}", partial(_delete, target, k)) for k in plan.deleted]
    writes = [(f"write {target / k}", partial(atomic.write_bytes, target / k, contents[k])) for k in plan.written]
    _run(target, backup, deletions + writes)


def _run(target: Path, backup: backups.Backup, steps: list[tuple[str, Callable[[], object]]]) -> None:
    """Run each (description, action) in turn; on any failure roll every change back first, and
    turn an OSError into a `UserError` that names the step, the file and the cause."""
    doing = ""
    try:
        for doing, action in steps:
            action()
    except BaseException as exc:
        _undo(target, backup)
        if isinstance(exc, OSError):
            cause = f"{exc.strerror} ({exc.filename})" if exc.strerror and exc.filename else exc.strerror or str(exc)
            raise UserError(f"could not {doing}: {cause}; every change was undone and {target} is as it was "
                            f"(backup in {backup.folder}): fix the cause and try again") from exc
        raise


def _undo(target: Path, backup: backups.Backup) -> None:
    try:
        backups.rollback(target, backup)
    except OSError as failed:
        raise UserError(f"a write to {target} failed, and putting it back from {backup.folder} failed too "
                        f"({failed}); fix the cause, then `{command('restore', target)}` or the next "
                        "write_to rolls it back (its journal still says 'applying')") from failed


def _delete(target: Path, key: str) -> None:
    """Delete the file at `key`, then the folders above it that this left empty."""
    path = target / key
    path.unlink()
    for folder in path.parents:
        if folder == target:
            return
        try:
            folder.rmdir()
        except OSError:  # not empty: something else lives there
            return


def _files_on_disk(target: Path) -> set[str]:
    """Files and symlinks under the folder `target` whose paths are safe keys, found without
    following links; folders a key cannot name (`.git` and the like) are not entered."""
    found = set()
    for folder, dirs, files in os.walk(target):
        rel = Path(folder).relative_to(target)
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        dirs[:] = [d for d in dirs if d not in links and unsafe_key_reason((rel / d).as_posix()) is None]
        found |= {key for name in (*files, *links) if unsafe_key_reason(key := (rel / name).as_posix()) is None}
    return found


def _differences(source: Path, target: Path) -> list[str]:
    """The paths where `target` is not exactly `source` (both walked without following links)."""
    return sorted(rel for rel in _entries(source) | _entries(target) if not same(source, target, rel))


def _entries(root: Path) -> set[str]:
    """The root itself ("") and every path under it that a key can name, found without following
    links; folders a key cannot name (`.git` and the like) are not entered, so nothing in them is
    ever put back."""
    info = _lstat(root)
    if info is None:
        return set()
    if not stat.S_ISDIR(info.st_mode):
        return {""}
    found = {""}
    for folder, dirs, files in os.walk(root):
        rel = Path(folder).relative_to(root)
        dirs[:] = [d for d in dirs if path_reason((rel / d).as_posix()) is None]
        found |= {key for name in (*dirs, *files) if path_reason(key := (rel / name).as_posix()) is None}
    return found


def _named(plan: WritePlan) -> WritePlan:
    """A text artifact's file is the key "" inside; the plan names it."""
    name = plan.target.name
    named = {field: tuple(k or name for k in getattr(plan, field))
             for field in ("written", "unchanged", "merged", "kept", "conflicts")}
    return replace(plan, **named)


def _bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return None


def _lstat(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None

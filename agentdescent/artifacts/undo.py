"""Putting a write-back's target back as it was: `restore` puts the newest recorded, intact backup
back (or backup `number`), after backing the target up in turn, so that a second restore undoes
the first; `recover` rolls back a write a killed process left half-done. A restore that changed
the target then removes the oldest settled backups past the newest `pruning.KEEP` (`Restored.removed`);
`restore` of a number removed so says so, with the numbers there are.

Only backups this package recorded are restored from; any other `.<name>.bak-N` folder beside the
target (one a cloned repository brought along, one whose copy or journal was changed since) is
passed over and named in `Restored.refused`, or in the error when no backup qualifies. Every path
put back is checked to lie inside the target first, and paths a key cannot name (`.git` and the
like) are never put back.

Left out: writing an artifact (`writeback`); the lock, the backups, their record and recovery
(`backups`, `registry`); putting paths back (`putback`).
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from agentdescent.artifacts import backups, pruning, registry, targetlock
from agentdescent.artifacts.copyable import readable
from agentdescent.artifacts.putback import lstat, path_reason, put_back, same
from agentdescent.artifacts.tree import is_skipped
from agentdescent.artifacts.writeback import check_kind, run_steps, target_path
from agentdescent.errors import UserError
from agentdescent.governance.paths import is_git_repository
from agentdescent.home import HOME_ENV
from agentdescent.quoting import first_of
from agentdescent.walking import walk


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
    left: tuple[str, ...] = ()  # files that differ from the backup but whose names a key cannot hold: left as they are
    settled: tuple[str, ...] = ()  # backups a write a killed process left half done was rolled back from first
    removed: tuple[int, ...] = ()  # numbers of the oldest backups past `pruning.KEEP`, removed once the restore ended


def _untouched(target: Path, before: dict[str, str], rel: str) -> None:
    """`UserError` when `rel` changed since the restore looked (a save while the backup was copied)."""
    if registry.seen(target / rel) != before[rel]:
        raise UserError(f"refusing to restore {target}: {rel or target.name} changed on disk while the restore ran (a "
                        f"save just now?); nothing was put back and your save is as it was: restore again")


def recover(path: str | os.PathLike) -> list[Path]:
    """Roll back a write-back to `path` that a killed process left half-done; returns the backup
    folders it rolled back from (none when there was nothing to do)."""
    target = target_path(path)
    if not backups.backups(target):
        return []  # nothing to settle, and no lock file left behind for nothing
    with targetlock.locked(target):
        return backups.recover(target)[0]


def restore(path: str | os.PathLike, number: int | None = None, *, overwrite: bool = False) -> Restored:
    """Put a recorded, intact backup of `path` back: backup `number`, or the newest whose write
    ended. A folder ends as the backup (files added since are removed; paths a key cannot name,
    `.git` and the like, and editor or cache litter are left as they are), a file as it was. An
    interrupted write is recovered first (a write-back cut short is undone by that alone: an earlier
    one is the next restore's), and the current target is backed up first, so that the next
    restore undoes this one.
    A path edited since the last write-back or restore (`edited_since`) refuses the restore,
    unless `overwrite`: the restore is an undo of that write, not of the user's work after it.
    Folders beside it that are not recorded backups, or no longer match their record, are passed
    over and named in `Restored.refused`. Raises `UserError` when no backup qualifies."""
    target = target_path(path)
    check_kind(target, folder=None)
    source, refused = backups.restorable(target, number) if target.parent.is_dir() else (None, [])
    if source is None and backups.interrupted(target) is None:
        raise _no_backup(target, refused, number)  # before taking the lock, which would leave a lock file beside it
    with targetlock.locked(target):
        cut = backups.interrupted(target)
        settled = tuple(map(str, backups.recover(target)[0]))
        source, refused = backups.restorable(target, number)
        # the write just rolled back was all there was to undo, or it was a write-back: its rollback
        # undid it, and a write before it is the next restore's (a cut-short restore goes on)
        if settled and (source is None or number is None and cut is not None and cut.record.made_by == "write_to"):
            source, refused = backups.restorable(target, number, rolled_back=True)
        if source is None:
            raise _no_backup(target, refused, number)
        with readable(target, f"compare {target.name} with its backup before restoring it"):
            paths, left = _differences(source.copy, target)
            edited = [] if overwrite else edited_since(target, paths)
            before = {rel: registry.seen(target / rel) for rel in paths}
        said = tuple(map(str, refused))
        if not paths:
            return Restored(source=source.copy, backup=None, changed=(), refused=said, numbers=_numbers(target),
                            settled=settled)
        if edited:
            raise _edits_in_the_way(target, edited)
        backup = backups.take(target, made_by="restore", paths=paths,
                              writes={rel: registry.seen(source.copy / rel) for rel in paths})
        putting = partial(put_back, target, source.copy, paths, temps=False)
        run_steps(target, backup, [(f"put {target} back from {source.copy}", paths, putting)],
                  check=partial(_untouched, target, before))
        backups.finish(backup, after={rel: registry.seen(target / rel) for rel in paths})
        removed = pruning.prune(target)
    return Restored(source=source.copy, backup=backup.copy if os.path.lexists(backup.copy) else None,
                    changed=tuple(paths), refused=said, numbers=_numbers(target), left=left, settled=settled,
                    removed=removed)


def edited_since(target: Path, paths: list[str]) -> list[str]:
    """Those of `paths` that hold what the user changed since the last write-back or restore
    ended: a path it wrote that no longer holds what it wrote (its bytes or its mode), or one it
    left that no longer holds what its backup does. A path gone is none (putting it back loses
    nothing); none are known where the last write was recorded without what it wrote."""
    ended = [b for b in backups.backups(target) if b.record.phase == "done" and b.record.existed]
    after = ended[-1].record.after if ended else None
    if after is None:
        return []
    last = ended[-1]
    edited: list[str] = []
    modes = last.record.modes or {}
    for rel in paths:
        now = registry.seen(target / rel)
        if rel not in after:
            changed = not same(last.copy, target, rel)
        else:
            mode = registry.file_modes(target, [rel]).get(rel)
            changed = now != after[rel] or (mode is not None and mode != modes.get(rel, mode))
        if changed and now != "absent" and not now.startswith(f"kind {stat.S_IFDIR}"):
            edited.append(rel)
    return edited


def _edits_in_the_way(target: Path, edited: list[str]) -> UserError:
    names = first_of([rel or target.name for rel in edited], 10)
    return UserError(f"refusing to restore {target}: {len(edited)} path(s) changed since the last write-back or restore "
                     f"({names}), and a restore would put them back too; nothing was changed. Move those edits away "
                     f"first, or restore with --overwrite (overwrite=True): the backup it takes first keeps them")


def _numbers(target: Path) -> tuple[int, ...]:
    """The numbers of the backups restore could put back: ended, recorded and intact."""
    return tuple(b.number for b in backups.backups(target)
                 if b.record.phase in ("done", "rolled back") and b.intact())


def _no_backup(target: Path, refused: list[backups.Refusal], number: int | None = None) -> UserError:
    found = "".join(f"; {r}" for r in refused)
    if number is not None:
        kept = _numbers(target)
        there = ", ".join(map(str, kept)) or "none"
        name = backups.folder_name(target, number)
        if kept and 0 < number < kept[0] and not any(os.path.lexists(target.parent / n) for n in (name, name[1:])):
            return UserError(f"backup {number} of {target} was removed: only the newest {pruning.KEEP} backups of a "
                             f"target are kept, the older ones removed after each write-back or restore{found}; the "
                             f"backups there are: {there} ({backups.pattern(target)})")
        return UserError(f"no backup number {number} of {target} to restore{found}; the backups there are: {there} "
                         f"({backups.pattern(target)})")
    return UserError(f"no backup of {target} to restore: write_to takes one ({backups.folder_name(target, 1)[:-1]}N "
                     f"beside it, recorded in {registry.folder()}) before it changes anything, and no recorded, "
                     f"unchanged one is there{found}. "
                     f"A backup made with another {HOME_ENV} is not known here; check the path")


def _differences(source: Path, target: Path) -> tuple[list[str], tuple[str, ...]]:
    """The paths where `target` is not exactly `source` (both walked once, without following
    links), and, apart, the files that differ whose own names a key cannot hold (`notes: v1.md`,
    `.gitattributes`): a restore leaves those as they are, and says so (at most 20 named)."""
    (named, unnamed), (more_named, more_unnamed) = _entries(source), _entries(target)
    paths = sorted(rel for rel in named | more_named if not same(source, target, rel))
    return paths, tuple(sorted(rel for rel in unnamed | more_unnamed if not same(source, target, rel)))[:20]


def _entries(root: Path) -> tuple[set[str], set[str]]:
    """The root itself ("") and every path under it that a key can name, found without following
    links; and the files whose own names a key cannot hold, but for a worktree's `.git` file (a
    backup leaves it out). Folders a key cannot name (`.git` and the like) are not entered, so
    nothing in them is ever put back or listed; nor is the litter no run reads (`_litter`)."""
    info = lstat(root)
    if info is None:
        return set(), set()
    if not stat.S_ISDIR(info.st_mode):
        return {""}, set()
    found, unnamed = {""}, set()
    for folder, dirs, files in walk(root):
        rel = Path(folder).relative_to(root)
        dirs[:] = [d for d in dirs if path_reason((rel / d).as_posix()) is None and not _litter(root / rel / d)]
        files = [f for f in files if not _litter(root / rel / f)]
        found |= {key for name in (*dirs, *files) if path_reason(key := (rel / name).as_posix()) is None}
        unnamed |= {key for name in files if path_reason(key := (rel / name).as_posix()) and not is_git_repository(name)}
    return found, unnamed


def _litter(path: Path) -> bool:
    """Whether `path` is editor or cache litter `load_tree` always leaves out (`.DS_Store`, a vim
    swap file, `file~`, `__pycache__/`): no run wrote it, so a restore neither counts it as an edit
    in its way nor deletes it (a live swap file included). Git's own files are not litter: they are
    named as left (`_entries`)."""
    return path_reason(path.name) is None and is_skipped(path.name, path.is_dir() and not path.is_symlink(),
                                                         path.is_symlink())

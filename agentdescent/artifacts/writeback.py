"""Writing an evolved artifact back to disk.

`write_back` compares the artifact with the disk and returns a `WritePlan`: files to write
(created or changed), files already right, files to delete (in the artifact when the run
started and gone from it now; with `prune`, also the files it does not know, but never where
`load_tree` does not read: `.venv/`, `node_modules/`, `build/`, editor backups, and the `left_out`
globs the run's tree was read without), the extra files
it leaves alone, and the frozen files it never touches. Given `base`, what the target held when
the run started, a file the user changed since is never lost: it is kept when the run did not
change it, merged three-way when both did and git can merge the two (in the disk's line endings
and byte-order mark, where only those are not the base's), and otherwise a conflict that refuses
the whole write unless `overwrite` (`reconcile`). Unless it is a dry run, and only when
something changes, it then holds the target's lock, settles a write a killed process left,
backs the whole target up (`.<name>.bak-N` beside it, recorded in `$AGENTDESCENT_HOME/backups`),
deletes what goes and writes each changed file atomically with its mode kept, each checked just
before it is touched: a file saved since the plan stops the write. A failure part-way puts every
path it touched back from the backup and raises a `UserError` that names the file. Once the
write has ended, the oldest settled backups past the newest `pruning.KEEP` are removed, still
under the lock, and named in `WritePlan.removed`.

Only backups this package recorded are rolled back from; any other `.<name>.bak-N` folder beside
the target is left alone and named in `WritePlan.refused`.

Refused with a `UserError` before anything changes: an unsafe key (`unsafe_key_reason`), a path
through a symlink or over a file, a folder where a file goes, a name too long for the file
system, a text artifact over a folder or a tree over a file, a target that is a symlink.

Left out: putting a backup back (`undo`); the lock, the backups, their record and recovery
(`backups`, `registry`); putting paths back (`putback`); reading a folder into a tree (`tree`).
Files a key cannot name (`.git` and the like) are never listed, deleted or pruned.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from agentdescent import atomic
from agentdescent.artifacts import backups, pruning, reconcile, registry, targetlock
from agentdescent.artifacts.copyable import readable
from agentdescent.artifacts.putback import lstat
from agentdescent.artifacts.tree import left_out as tree_left_out
from agentdescent.commands import command
from agentdescent.errors import UserError
from agentdescent.governance import is_frozen, unsafe_key_reason
from agentdescent.quoting import first_of
from agentdescent.walking import walk

PATH_MAX = 4096  # bytes in a whole path on Linux
_COMPARING = "compare {} with the run's version before writing it"


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
    settled: tuple[str, ...] = ()  # backups a write a killed process left half done was rolled back from first
    removed: tuple[int, ...] = ()  # numbers of the oldest backups past `pruning.KEEP`, removed once the write ended
    seen: Mapping[str, str] = field(default_factory=dict, repr=False)  # each written or deleted key's `registry.seen`, planned

    @property
    def changes(self) -> bool:
        return bool(self.written or self.deleted)


def write_back(path: str | os.PathLike, rendered: str | Mapping[str, str], *, initial: Mapping[str, str] | None = None,
               base: str | Mapping[str, str] | None = None, frozen: Iterable[str] = (), dry_run: bool = False,
               prune: bool = False, overwrite: bool = False, run: str | None = None, left_out: Iterable[str] = ()) -> WritePlan:
    """Write `rendered` to `path`: a str becomes one file, a {relative posix path: text} dict a
    folder. `initial` is the artifact when the run started (its keys gone from `rendered` are
    deleted); `base` is what the target held then, in the shape of `rendered` (None: the disk's
    edits are not looked for); `frozen` holds fnmatch patterns of files never touched; `left_out`,
    the globs `load_tree` was given to skip (`FileTree(left_out=...)`), files no prune deletes; `run` is the
    stored run whose accept this is, recorded with the backup. `dry_run` returns the plan and
    touches nothing. Raises `UserError` for a refused path, for files both the user and the run
    changed beyond a clean merge (unless `overwrite`), or a failed write (undone)."""
    target = target_path(path)
    tree = not isinstance(rendered, str)
    contents = _contents(rendered)
    check_kind(target, folder=tree)
    initial, frozen, skipped = (dict(initial or {}), tuple(frozen), tuple(left_out)) if tree else ({}, (), ())
    _check_keys(initial)
    base_files = None if base is None else _contents(base)
    if dry_run:
        _refuse_interrupted(target)
        refused = tuple(map(str, backups.survey(target).refused))
        with readable(target, _COMPARING.format(target.name)):
            plan = _plan(target, contents, initial, frozen, prune, base_files, overwrite=overwrite, left_out=skipped)[0]
        return _named(replace(plan, refused=refused))
    target.parent.mkdir(parents=True, exist_ok=True)
    with targetlock.locked(target):
        rolled_back, refusals = backups.recover(target)
        settled = tuple(map(str, rolled_back))
        with readable(target, _COMPARING.format(target.name)):
            plan, contents = _plan(target, contents, initial, frozen, prune, base_files, overwrite=overwrite, left_out=skipped)
        plan = replace(plan, refused=tuple(map(str, refusals)), settled=settled)
        if plan.conflicts and not overwrite:
            raise _conflicting(target, {k: _difference(target, k, initial, base_files) for k in plan.conflicts}, settled)
        if not plan.changes:
            return _named(plan)
        writes = {**dict.fromkeys(plan.deleted, "absent"),
                  **{key: registry.seen_bytes(contents[key]) for key in plan.written}}
        backup = backups.take(target, made_by="write_to", paths=[*plan.deleted, *plan.written], writes=writes, run=run)
        _apply(target, plan, contents, backup)
        backups.finish(backup, after={key: registry.seen(target / key) for key in (*plan.deleted, *plan.written)})
        removed = pruning.prune(target)
    return _named(replace(plan, backup=backup.copy if os.path.lexists(backup.copy) else None, removed=removed))


def target_path(path: str | os.PathLike) -> Path:
    """`path` as every write-back and restore names it: absolute, its folder's `..` and symlinks
    resolved (the registry's name for it), so that `../skill` and `/abs/skill` are one target. An
    empty `path` is refused, not taken for the current folder."""
    if not os.fspath(path).strip():  # Path("") is the current folder: an unset variable would name it
        raise UserError("the path is empty; give the file or folder's name (e.g. skill/ or prompt.md, "
                        "or . for the current folder)")
    given = Path(path).absolute()
    if given.name in ("", ".", ".."):
        raise UserError(f"{path} does not name a file or folder; give its name (e.g. skill/ or prompt.md)")
    target = Path(os.path.realpath(given.parent)) / given.name
    if len(os.fsencode(target.name)) > backups.NAME_MAX:
        raise UserError(f"the name {target.name[:40]}... is {len(os.fsencode(target.name))} bytes, past the file "
                        f"system's {backups.NAME_MAX}; choose a shorter one")
    return target


def check_kind(target: Path, *, folder: bool | None) -> None:
    info = lstat(target)
    if info is None:
        return
    if stat.S_ISLNK(info.st_mode):
        raise UserError(f"{target} is a symlink to {os.path.realpath(target)}; a write-back or restore never goes "
                        "through one: put the folder or file itself where the link is, or write to what it points to")
    if not stat.S_ISDIR(info.st_mode) and not stat.S_ISREG(info.st_mode):
        raise UserError(f"{target} is a device, a FIFO or a socket, not a file or a folder: write_to and restore "
                        "write only those; pass the path of the file or folder to write")
    if folder is True and not stat.S_ISDIR(info.st_mode):
        raise UserError(f"{target} is a file, and what is written there is a folder: move the file away (or put the "
                        "folder back) and try again")
    if folder is False and stat.S_ISDIR(info.st_mode):
        raise UserError(f"{target} is a folder, and what is written there is a file: move the folder away (or put "
                        "the file back) and try again")


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
          base: dict[str, bytes] | None = None, *, overwrite: bool = False,
          left_out: tuple[str, ...] = ()) -> tuple[WritePlan, dict[str, bytes]]:
    """What the write does, and the bytes of each file it writes. With `base`, the user's edits
    since the run started are kept or merged in first, and the files beyond a merge are conflicts
    (written as the run has them only with `overwrite`)."""
    on_disk = _files_on_disk(target) if "" not in contents else set()
    frozen_keys = {k for k in {*contents, *initial, *on_disk} if is_frozen(k, frozen)}
    merge = reconcile.against_disk(target, contents, initial, base, frozen_keys)
    leave = set(merge.kept) | (set() if overwrite else set(merge.conflicts))
    # a path neither left nor in conflict is written as reconcile settled it: merged, or in the disk's line endings and mark
    apart = leave | set(merge.conflicts)
    settled = {k: v for k, v in merge.contents.items() if v is not None and k not in apart}
    contents = {**{k: v for k, v in contents.items() if k not in leave}, **settled}
    gone = {k for k in initial if k not in contents and k not in frozen_keys | leave and os.path.lexists(target / k)}
    # what load_tree never reads (.venv/, node_modules/, build/, editor backups, the run's own excludes) is no file of
    # the artifact: never an extra, never pruned
    extra = {k for k in on_disk - contents.keys() - initial.keys() - frozen_keys - leave if not tree_left_out(k, left_out)}
    deleted = (gone | extra) if prune else gone
    kept = sorted(k for k in contents if k not in frozen_keys)
    for key in kept:  # a link the user made where the run writes is written over only as a conflict overwritten
        _refuse_path(target, key, deleted, may_be_link=key in merge.conflicts)
    for key in deleted:
        _refuse_path(target, key, deleted, may_be_link=True)
    written = tuple(k for k in kept if _bytes(target / k) != contents[k])
    plan = WritePlan(target=target, written=written, unchanged=tuple(k for k in kept if k not in written),
                     deleted=tuple(sorted(deleted)), extra=tuple(sorted(extra)), frozen=tuple(sorted(frozen_keys)),
                     merged=merge.merged, kept=merge.kept, conflicts=merge.conflicts,
                     seen={k: registry.seen(target / k) for k in (*written, *deleted)})
    return plan, contents


def _difference(target: Path, key: str, initial: Mapping[str, str], base: Mapping[str, bytes] | None) -> str:
    """How the disk's `key` differs from what the run started from: "unread" (never in the run: left
    out of it, which a file it created would write over), "gone", "replaced" (a link or a folder
    now), "line endings" (and nothing else: a mix of CRLF and LF, since a file of one kind throughout takes the run's
    change in it, `reconcile`) or "edited"."""
    was = (base or {}).get(key)
    if key not in initial and was is None:
        return "unread"
    info = lstat(target / key)
    if info is None:
        return "gone"
    if not stat.S_ISREG(info.st_mode):
        return "replaced"
    now = (target / key).read_bytes()
    return "line endings" if was is not None and _plain(now) == _plain(was) else "edited"


def _plain(data: bytes) -> bytes:
    """_plain(b"\\xef\\xbb\\xbfa\\r\\n") == b"a\\n" """
    return data.removeprefix(b"\xef\xbb\xbf").replace(b"\r\n", b"\n")


_SAID = {
    "edited": "{} file(s) on disk hold other text than the run started from (edited since it started, or never its "
              "starting point), and the run changed them too, beyond what a merge can join ({})",
    "line endings": "{} file(s) on disk differ from what the run started from only in their line endings, now a mix "
                    "of CRLF and LF, which the run's change cannot be written in, and the run changed them ({})",
    "gone": "{} file(s) the run changed are gone from disk, deleted or renamed since it started ({}); put them back "
            "to have the run's change merged in",
    "replaced": "{} file(s) the run changes or deletes are no longer the regular file it started from: a symlink or "
                "a folder is there now ({})",
    "unread": "{} file(s) the run never read (made on disk since it started, or left out of it: excluded, not text, "
              "or in a folder it skips) would be written over by files it created ({}); rename yours, or, for one it "
              "left out, freeze it for the next run (frozen=...)",
}


def _conflicting(target: Path, kinds: dict[str, str], settled: tuple[str, ...]) -> UserError:
    """The refusal of files both sides changed, told by how the disk's differs (`_difference`)."""
    def named(keys: list[str]) -> str:
        return first_of([p or target.name for p in keys], 10)

    changed = (f"nothing else was changed (a write a killed process left half done was rolled back first, from "
               f"{', '.join(settled)})" if settled else "nothing was changed")
    said = [_SAID[kind].format(len(keys), named(keys)) for kind in _SAID
            if (keys := sorted(k for k, v in kinds.items() if v == kind))]
    return UserError(f"refusing to write {target}: {'; and '.join(said)}; {changed}. Settle them by hand, or replace "
                     "what is on disk with the run's version on purpose (overwrite=True; `agentdescent accept "
                     "--overwrite`): the backup taken first keeps yours")


def _refuse_path(target: Path, key: str, deleted: set[str], *, may_be_link: bool) -> None:
    """Raise `UserError` unless `key` can be written (or deleted) inside `target` without going
    through a symlink or over a file, and its path is not too long."""
    if len(os.fsencode(target / key)) >= PATH_MAX:
        raise UserError(f"refusing to write {key!r}: its path is longer than the system's {PATH_MAX} bytes; "
                        "move the target to a shorter path or shorten the key; nothing was changed")
    parts = key.split("/") if key else []
    for depth in range(1, len(parts) + 1):
        rel, last = "/".join(parts[:depth]), depth == len(parts)
        info = lstat(target / rel)
        if info is None or (not last and rel in deleted):
            return
        problem = _path_problem(info, rel, key, last=last, may_be_link=may_be_link)
        if problem:
            raise UserError(f"refusing to write inside {target}: {problem}; nothing was changed")


def _path_problem(info: os.stat_result, rel: str, key: str, *, last: bool, may_be_link: bool) -> str | None:
    kind = stat.S_IFMT(info.st_mode)
    if kind == stat.S_IFLNK and not (last and may_be_link):
        return (f"{rel} is a symlink, and the run changes {key} (a write-back never writes through a link): put the "
                f"{'file' if last else 'folder'} itself where the link is (a copy of what it points to) and try again")
    if not last and kind != stat.S_IFDIR:
        return f"{rel} is a file where {key!r} needs a folder: move it away"
    if last and kind == stat.S_IFDIR:
        return f"{key} is a folder where the artifact has a file: move it away"
    if last and kind not in (stat.S_IFREG, stat.S_IFLNK):
        return f"{key} is not a regular file (a pipe, socket or device): move it away"
    return None


def _apply(target: Path, plan: WritePlan, contents: dict[str, bytes], backup: backups.Backup) -> None:
    """Delete and write as planned, each file checked just before it is touched: one the user
    saved since it was planned (while the backup was taken, say) stops the write, which undoes
    what it had done and leaves that file, with the edit, alone."""
    def untouched(key: str) -> None:
        if registry.seen(target / key) != plan.seen[key]:
            raise UserError(f"refusing to write {target}: {key or target.name} changed on disk while the write-back "
                            f"ran (an edit saved just now?); every change was undone and {target} is as it was, "
                            "your edit included: write it back again")

    deletions = [(f"delete {target / k}", [k], partial(_delete, target, k)) for k in plan.deleted]
    writes = [(f"write {target / k}", [k], partial(atomic.write_bytes_in, target, k, contents[k])) for k in plan.written]
    run_steps(target, backup, deletions + writes, check=untouched)


def run_steps(target: Path, backup: backups.Backup, steps: Sequence[tuple[str, list[str], Callable[[], object]]], *,
         check: Callable[[str], None] = lambda key: None) -> None:
    """Run each (description, paths, action) in turn, `check` on its paths first. On any failure,
    put back the paths of the steps begun (never one not yet touched, which may hold an edit saved
    meanwhile), and turn an OSError into a `UserError` that names the step, the file and the cause."""
    doing, begun = "", []
    try:
        for doing, paths, action in steps:
            for key in paths:
                check(key)
            begun += paths
            action()
    except BaseException as exc:
        cause = (f"{exc.strerror} ({exc.filename})" if exc.strerror and exc.filename else exc.strerror or str(exc)
                 ) if isinstance(exc, OSError) else str(exc)
        try:
            left = _undo(target, backup, begun)
        except UserError as undone:  # put back, or not, and said so: with what stopped the write
            raise UserError(f"could not {doing}: {cause}; {undone}") from exc
        but = (f" (but for {', '.join(left[:5])}: saved again after this write had written it, and left as saved)"
               if left else "")
        if isinstance(exc, OSError):
            raise UserError(f"could not {doing}: {cause}; every change was undone{but} and {target} is as it was "
                            f"(backup in {backup.folder}): fix the cause and try again") from exc
        if left and isinstance(exc, UserError):
            raise UserError(f"{exc}{but}") from exc
        raise


def _undo(target: Path, backup: backups.Backup, paths: list[str]) -> list[str]:
    """Put `paths` back; those left, saved again since the write wrote them (`backups.rollback`)."""
    try:
        return backups.rollback(target, backup, paths)
    except OSError as failed:
        raise UserError(f"putting it back from {backup.folder} failed too ({failed}); fix the cause, then "
                        f"`{command('restore', target)}` or the next write_to rolls it back (its record still says "
                        "'applying')") from failed


def _delete(target: Path, key: str) -> None:
    """Delete the file at `key`, then the folders above it that this left empty; nothing is
    reached through a symlink (`atomic.parent_of`)."""
    with atomic.parent_of(target, key) as (folder, name):
        os.unlink(name, dir_fd=folder)
    parts = key.split("/")[:-1]
    while parts:
        try:
            with atomic.parent_of(target, "/".join(parts)) as (folder, name):
                os.rmdir(name, dir_fd=folder)
        except OSError:  # not empty: something else lives there
            return
        parts.pop()


def _files_on_disk(target: Path) -> set[str]:
    """Files and symlinks under the folder `target` whose paths are safe keys, found without
    following links; folders a key cannot name (`.git` and the like) are not entered."""
    found = set()
    for folder, dirs, files in walk(target):
        rel = Path(folder).relative_to(target)
        links = [d for d in dirs if os.path.islink(os.path.join(folder, d))]
        dirs[:] = [d for d in dirs if d not in links and unsafe_key_reason((rel / d).as_posix()) is None]
        found |= {key for name in (*files, *links) if unsafe_key_reason(key := (rel / name).as_posix()) is None}
    return found


def _named(plan: WritePlan) -> WritePlan:
    """A text artifact's file is the key "" inside; the plan names it."""
    def named(keys: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(k or plan.target.name for k in keys)

    return replace(plan, written=named(plan.written), unchanged=named(plan.unchanged), merged=named(plan.merged),
                   kept=named(plan.kept), conflicts=named(plan.conflicts))


def _bytes(path: Path) -> bytes | None:
    """The bytes of the regular file at `path`; None for anything else (a link is never followed)."""
    info = lstat(path)
    return path.read_bytes() if info is not None and stat.S_ISREG(info.st_mode) else None


"""Where a stored run's rollouts work: a folder of its own in the system's temporary folder, away
from the run folder and from the user's home.

An agent works in its rollout's workspace, and a CLI agent with a shell reads what lies around
it: beside the run folder are the run's tasks with their gold answers, and Claude Code reads every
CLAUDE.md above its working directory (the user's own, under a home). A rollout folder is made by
`tempfile.mkdtemp` (a fresh name only this user can enter), named after its run, and locked
(flock, shared) by each process of the run that works in it, for as long as it does. It counts
as made only once locked and still there, and `clear` removes one only under an exclusive lock,
which a process locking it waits for: so a folder no process holds is one none works in. What a
killed process left is removed at once by the run's next process, or by `runs --prune`.

A cleanup of the temporary folder (systemd-tmpfiles, tmpreaper, an `rm -rf /tmp/*`) may remove
it while the run works. The run's workspaces are made in a `RolloutFolder`, a path that makes
the folder again (at the same path, only this user's, locked) when it is next asked for: as the
next workspace is made. Where that cannot be done, the run stops with a `UserError` saying that
its temporary folder was removed and that resuming it goes on.

Left out: confining an agent that looks further (any file the user can read, it can): that is its
sandbox's work (`extra_args`).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

from agentdescent import filelock
from agentdescent.commands import command
from agentdescent.errors import UserError
from agentdescent.removal import remove_tree

__all__ = ["ROLLOUTS_PREFIX", "Cleared", "RolloutFolder", "clear", "rollout_folder"]

ROLLOUTS_PREFIX = "agentdescent-rollouts-"
MAKE_TRIES = 3  # a folder removed before it could be locked is made again; removed each time, something removes all

Identity = tuple[int, int]  # a folder's device and inode: the same path may name a folder made again
_held: dict[str, tuple[Identity, int]] = {}  # by path: the folder this process holds, and the descriptor locking it
_holding = threading.Lock()


class RolloutFolder(os.PathLike):
    """The path of a run's rollout folder, to make its workspaces in. `os.fspath` of it (which
    `tempfile.mkdtemp(dir=...)` asks for) has this process hold the folder: made again when it
    was removed meanwhile, locked where another process of the run made it; a `UserError` when
    it cannot be made again. It pickles as its path, for a worker process or a Ray actor."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __fspath__(self) -> str:
        with _holding:
            held = _held.get(self.path)
            if held is None or _identity(self.path) != held[0]:
                _hold_again(self.path)
        return self.path

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"RolloutFolder({self.path!r})"


@contextlib.contextmanager
def rollout_folder(run_id: str) -> Iterator[RolloutFolder]:
    """A new folder for the workspaces of run `run_id`, held until the block ends and removed then;
    those its earlier processes left are removed first."""
    clear(run_id)
    path, made, fd = _locked(lambda: tempfile.mkdtemp(prefix=f"{ROLLOUTS_PREFIX}{run_id}-"))
    with _holding:
        _held[path] = made, fd
    try:
        yield RolloutFolder(path)
    finally:
        remove_tree(path)
        with _holding:
            os.close(_held.pop(path)[1])


class Cleared(NamedTuple):
    removed: int  # folders no process held, removed
    live: int  # kept: a process of a run holds it
    left: int  # kept: no process holds it, but it could not be removed (what another user made inside it, say)


def clear(run_id: str | None = None) -> Cleared:
    """Remove this user's rollout folders of run `run_id` (None: of every run) that no process
    holds, each while holding it alone; what went and what was kept, counted."""
    pattern = f"{ROLLOUTS_PREFIX}{glob.escape(run_id)}-*" if run_id else f"{ROLLOUTS_PREFIX}*"
    removed = live = left = 0
    for path in Path(tempfile.gettempdir()).glob(pattern):
        if not _mine(path) or (run_id and _run_of(path) != run_id):
            continue
        with filelock.alone(path, follow_symlinks=False) as free:
            if free is False:
                live += 1
            elif free and remove_tree(path):
                removed += 1
            elif os.path.lexists(path):  # what another user made inside it, say: not ours to change
                left += 1
    return Cleared(removed, live, left)


def _hold_again(path: str) -> None:
    """Have this process hold the folder at `path` (under `_holding`): the one there, or one made
    again where it is gone; a `UserError` when neither can be."""
    try:
        _, made, fd = _locked(lambda: _at(path))
    except OSError as exc:
        gone = f"{exc.strerror or exc}" + (f": {exc.filename}" if exc.filename and exc.filename != path else "")
        raise UserError(f"the run's temporary folder {path} was removed while the run worked in it (by a cleanup of "
                        f"{os.path.dirname(path)}, say) and cannot be made again ({gone}). Nothing the run committed is "
                        f"lost: {command('resume', _run_of(Path(path)))} goes on from its last commit") from None
    before = _held.get(path)
    _held[path] = made, fd
    if before is not None:
        os.close(before[1])  # its folder is gone


def _at(path: str) -> str:
    """The folder `path`, made where nothing is; where something is, it must be a folder of this
    user's only this user can enter (another process of the run made it again)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise FileExistsError(errno.EEXIST, "something else is there now", path)
    return path


def _locked(make: Callable[[], str]) -> tuple[str, Identity, int]:
    """The folder `make()` makes, locked: its path, identity and the descriptor holding the lock.
    One a `clear` removed before the lock was taken is made again."""
    for _ in range(MAKE_TRIES):
        path = make()
        try:
            fd = filelock.hold_shared(Path(path))
        except FileNotFoundError:
            continue
        made = os.fstat(fd)
        if _identity(path) == (made.st_dev, made.st_ino):
            return path, (made.st_dev, made.st_ino), fd
        os.close(fd)
    raise FileNotFoundError(errno.ENOENT, f"removed each time it was made, {MAKE_TRIES} times", path)


def _identity(path: str) -> Identity | None:
    """The device and inode of what `path` names (a link itself, not followed), None when nothing."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return info.st_dev, info.st_ino


def _mine(path: Path) -> bool:
    """A real folder this user owns: the temporary folder is every user's, and a name there proves nothing."""
    try:
        return not path.is_symlink() and path.is_dir() and path.lstat().st_uid == os.getuid()
    except OSError:  # gone meanwhile
        return False


def _run_of(path: Path) -> str:
    """The run a rollout folder is of: its name, less the prefix and mkdtemp's suffix (which holds no "-")."""
    return path.name.removeprefix(ROLLOUTS_PREFIX).rpartition("-")[0]

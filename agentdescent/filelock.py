"""An exclusive flock on a lock file, waited for a bounded time: what keeps two writers of one
thing (a write-back's target, the Claude Code marketplace folder) from interleaving. And a shared
flock a process holds on a folder for as long as it uses it (`hold_shared`), which another tells
from a folder nobody uses (`held`), or holds alone while it removes one nobody uses (`alone`): a
run's ledger, its rollout folder.

The lock file is created when missing and left there (removing it races with the next holder);
it holds the holder's process id, for the message of one that waits too long. Left out: Windows
(fcntl), and what the lock guards.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from agentdescent.errors import UserError


@contextlib.contextmanager
def holding(lock: Path, *, wait: float, busy: str) -> Iterator[None]:
    """Hold an flock on `lock` until the block ends, waiting `wait` seconds at most for another
    holder; then a `UserError` of `busy`, its `{holder}` filled with what the holder wrote."""
    try:
        import fcntl
    except ImportError:  # Windows
        raise UserError("this needs a file lock (fcntl), which this system lacks; use Linux or macOS") from None
    try:
        lock.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise UserError(f"cannot open the lock file {lock}: {exc.strerror}; it must be a writable "
                        "regular file (not a symlink) in a folder you can write to") from exc
    try:
        until = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= until:
                    holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "another process"
                    raise UserError(busy.format(holder=holder)) from None
                time.sleep(0.1)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        except OSError as exc:  # a full disk: the error of a descriptor names no file, so it is named here
            raise OSError(exc.errno, exc.strerror, str(lock)) from exc
        yield
    finally:
        os.close(fd)  # which releases the lock


def hold_shared(folder: Path, alone: Callable[[], object] | None = None) -> int:
    """Open `folder` and hold a shared flock on it until the descriptor returned is closed. When no
    other process holds one, `alone()` runs first, under an exclusive flock: what a killed holder
    left half done can be settled with nobody else inside."""
    import fcntl

    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        if alone is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                pass
            else:
                alone()
        fcntl.flock(fd, fcntl.LOCK_SH)
    except BaseException:
        os.close(fd)
        raise
    return fd


def held(folder: Path, *, follow_symlinks: bool = True) -> bool | None:
    """Whether some process holds a flock on `folder` now (`hold_shared`); None when it cannot be
    opened (gone, not a folder, or a symlink where none is followed)."""
    with alone(folder, follow_symlinks=follow_symlinks) as free:
        return None if free is None else not free


@contextlib.contextmanager
def alone(folder: Path, *, follow_symlinks: bool = True) -> Iterator[bool | None]:
    """Hold an exclusive flock on `folder` for the block, taken without waiting: True then; False
    when another process holds a flock on it, None when it cannot be opened. A `hold_shared` of
    the folder meanwhile waits for the block's end (so one may remove the folder in it)."""
    import fcntl

    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC | (0 if follow_symlinks else os.O_NOFOLLOW)
    try:
        fd = os.open(folder, flags)
    except OSError:
        yield None
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)

"""The lock every writer of a write-back's target holds: an flock on a file of the registry's
(`$AGENTDESCENT_HOME/backups/<key>.lock`), so that nothing but the backups lands beside the
target and two writes or restores never interleave.

The lock is re-entrant within a thread: `accept` and `restore` hold it across the write and the
run status that records it (a restore that ran between the two would not see the run it undoes),
and the write inside takes it again. Other threads and processes wait for it.

Left out: Windows (fcntl), and writers that do not take the lock.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from agentdescent.artifacts import registry
from agentdescent.errors import UserError

LOCK_WAIT = 60.0  # seconds a write or restore waits for another one of the same target

_held = threading.local()  # .files: the lock files this thread holds


@contextlib.contextmanager
def locked(target: Path, *, wait: float = LOCK_WAIT) -> Iterator[None]:
    """Hold `target`'s lock until the block ends (the lock file is created when missing and left
    there: removing it races with the next writer). Waits `wait` seconds at most for another
    holder, then says who holds it; passes straight through when this thread holds it already."""
    try:
        import fcntl
    except ImportError:  # Windows
        raise UserError("write_to and restore lock the target with fcntl, which this system lacks; "
                        "use Linux or macOS, or copy result.rendered out yourself") from None
    lock = registry.file_of(target).with_suffix(".lock")
    held: set[Path] = _held.__dict__.setdefault("files", set())
    if lock in held:
        yield
        return
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
                    raise UserError(f"another write or restore of {target} has held it for {wait:g} s (process "
                                    f"{holder}, lock {lock}); wait for it to end, or stop it, then try again") from None
                time.sleep(0.1)
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode("ascii"), 0)
        held.add(lock)
        try:
            yield
        finally:
            held.discard(lock)
    finally:
        os.close(fd)  # which releases the lock

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
import threading
from collections.abc import Iterator
from pathlib import Path

from agentdescent import filelock
from agentdescent.artifacts import registry

LOCK_WAIT = 60.0  # seconds a write or restore waits for another one of the same target

_held = threading.local()  # .files: the lock files this thread holds


@contextlib.contextmanager
def locked(target: Path, *, wait: float = LOCK_WAIT) -> Iterator[None]:
    """Hold `target`'s lock until the block ends (the lock file is created when missing and left
    there: removing it races with the next writer). Waits `wait` seconds at most for another
    holder, then says who holds it; passes straight through when this thread holds it already."""
    lock = registry.file_of(target).with_suffix(".lock")
    held: set[Path] = _held.__dict__.setdefault("files", set())
    if lock in held:
        yield
        return
    busy = (f"another write or restore of {target} has held it for {wait:g} s (process {{holder}}, lock {lock}); "
            "wait for it to end, or stop it, then try again")
    with filelock.holding(lock, wait=wait, busy=busy):
        held.add(lock)
        try:
            yield
        finally:
            held.discard(lock)

"""Ray actors kept warm between executors of one process: an executor that shuts down cleanly on
a cluster it did not start gives its actors here, and the next one of the same size takes them
back, since a new actor waits for a Ray worker process to start. Plain bookkeeping: no Ray is
imported here. Left out: the actors themselves (`ray_executor`).
"""

from __future__ import annotations

import threading
from typing import Any


class Idle:
    """Actors of executors that shut down cleanly, by their size, for the next executor of this
    process on the same cluster (a cluster started again is another job: its actors are gone).
    Each holds a worker process, so only the sizes last given back are kept: three, the pools of
    a pipelined run."""

    SIZES = 3

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._job: str | None = None
        self._actors: dict[int, list[Any]] = {}  # oldest size first

    def take(self, job: str, threads: int, most: int) -> list[Any]:
        with self._lock:
            if job != self._job:
                self._job, self._actors = job, {}
            kept = self._actors.pop(threads, [])
            if kept[most:]:
                self._actors[threads] = kept[most:]
            return kept[:most]

    def give(self, job: str, threads: int, actors: list[Any]) -> list[Any]:
        """Keep `actors`; the ones no longer kept (another job's, or of a size given back longest
        ago), for the caller to kill."""
        with self._lock:
            if job != self._job:
                return list(actors)
            self._actors[threads] = self._actors.pop(threads, []) + list(actors)
            dropped = []
            while len(self._actors) > self.SIZES:
                dropped += self._actors.pop(next(iter(self._actors)))
            return dropped


IDLE = Idle()

"""Worker turns in flight, and the barrier that collects them.

The dispatcher starts turns on the worker pool; each finished turn lands in a buffer, and
`collect` is the barrier: every outstanding turn (a synchronous round), or the first one back and
whatever else is in (an asynchronous round). Reports come back in the order their turns were
dispatched, whatever order they finished in.

What it leaves out: what a turn holds (the loop builds them), when turns start (the loop says),
and what a worker does with one.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from agentdescent.engine.calls.executors import get_from, result_of
from agentdescent.engine.loop.worker import Turn, WorkerReport

MakeTurns = Callable[[Sequence[int], int], list[Turn]]  # (workers, number of the first turn) -> turns on the newest snapshot
StartTurn = Callable[[Turn], "Future[WorkerReport]"]  # a turn under way (on the worker pool, or a pipeline's stages)


class Dispatcher:
    def __init__(self, *, start: StartTurn, make_turns: MakeTurns) -> None:
        self._start = start
        self._make_turns = make_turns
        self._buffer: queue.Queue[Future[WorkerReport]] = queue.Queue()
        self._number: dict[Future[WorkerReport], int] = {}
        self._lock = threading.Lock()
        self._outstanding = 0  # dispatched and not yet collected
        self._turns = 0  # turns dispatched so far

    def dispatch(self, workers: Sequence[int]) -> None:
        """Start a turn of each of `workers` now, on the newest snapshot. The turns are numbered
        under the lock and started outside it: starting one may start another at once (a
        pipeline's refill, when a turn's rollouts are done before the call returns)."""
        with self._lock:
            turns = self._make_turns(workers, self._turns)
            first = self._turns
            self._turns += len(turns)
            self._outstanding += len(turns)
        started: list[Future[WorkerReport]] = []
        try:
            for turn in turns:
                future = self._start(turn)
                with self._lock:
                    self._number[future] = first + len(started)
                started.append(future)
        finally:
            with self._lock:
                self._outstanding -= len(turns) - len(started)  # not started (a closed pool): not awaited
            for turn in turns[len(started):]:  # the started ones must not wait for it
                if turn.together is not None:
                    turn.together.abort()
            for future in started:
                future.add_done_callback(self._buffer.put)

    def collect(self, *, wait_all: bool) -> list[WorkerReport]:
        """Wait for every outstanding turn (`wait_all`), or for one and whatever else is in."""
        done = [get_from(self._buffer)]
        while not self._buffer.empty() or (wait_all and len(done) < self.outstanding):
            done.append(get_from(self._buffer))
        with self._lock:
            self._outstanding -= len(done)
            done.sort(key=self._number.pop)  # arrival order must not change the result
        return [result_of(f) for f in done]

    def drain(self) -> list[WorkerReport]:
        """Collect every turn still in flight."""
        return self.collect(wait_all=True) if self.outstanding else []

    def skip(self, turns: int) -> None:
        """Number the next turn `turns`: a resumed run goes on where its sampler left off."""
        with self._lock:
            self._turns = turns

    @property
    def turns(self) -> int:
        """Turns dispatched so far."""
        with self._lock:
            return self._turns

    @property
    def outstanding(self) -> int:
        with self._lock:
            return self._outstanding

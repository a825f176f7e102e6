"""Pipeline-parallel turns (`parallel="pp"`): a worker turn's rollouts, reflections and
verification as three stages, each with a pool of its own, so that a slow reflection never holds
up the rollouts.

A turn enters the rollout stage, then the reflection stage, then verification, and its report is
what the last stage returns. Each stage has a thread per worker, and the calls of each run on a
pool of their own (rollouts on the run's call pool, reflections and verification on theirs:
`PipelineParallel`), so the stages never queue behind one another. In an asynchronous run a
worker starts its next turn as soon as its last one leaves the rollout stage, while that one is
still being reflected on; a worker has at most `depth` turns out at once (`PipelineParallel`, 2
by default), so rollouts never run far ahead of a slow reflection (their diffs would only grow
stale). A synchronous round still
waits for every worker's report, so there the stages only keep their calls apart.

What it leaves out: what each stage does (`Worker.roll`, `reflect`, `verify`), and which turn
runs next (the loop, through `refill`).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future

from agentdescent.engine.calls.executors import Executor, settle
from agentdescent.engine.loop.worker import Rolled, Turn, Worker, WorkerReport


class Pipeline:
    """Turns through `STAGES`, the i-th on `stages[i]` (a thread per worker: each waits on its calls)."""

    STAGES = ("rollouts", "reflection", "verification")

    def __init__(self, worker: Worker, *, stages: Sequence[Executor], depth: int = 2) -> None:
        self._worker = worker
        self._stages = list(stages)
        self._depth = depth  # turns a worker may have out
        self.refill: Callable[[Sequence[int]], None] | None = None  # an asynchronous run: start these workers' next turns
        self._out: Counter[int] = Counter()  # turns of each worker started and not yet collected
        self._rolling: set[int] = set()  # workers with a turn in the rollout stage
        self._closed = False
        self._error: BaseException | None = None  # a refill that failed on a stage's thread, for the loop
        self._lock = threading.Lock()

    def start(self, turn: Turn) -> Future[WorkerReport]:
        """Send `turn` into the first stage; the future of its report."""
        report: Future[WorkerReport] = Future()
        with self._lock:
            self._out[turn.slot] += 1
            self._rolling.add(turn.slot)
        rolled: Future[Rolled] = self._stages[0].submit(self._worker.roll, turn)
        rolled.add_done_callback(lambda done: self._rolled(turn.slot, done, report))
        return report

    def collected(self, slots: Sequence[int]) -> None:
        """The loop took these workers' reports into a step: each may start a turn, unless it has one
        rolling out already (that one starts the next when it leaves the stage)."""
        if self._error is not None:
            raise self._error
        free = []
        with self._lock:
            for slot in slots:
                self._out[slot] -= 1
                if slot not in self._rolling and self._out[slot] < self._depth and not self._closed:
                    free.append(slot)
        if free and self.refill is not None:
            self.refill(free)

    def close(self) -> None:
        """No more turns start on their own: the run is ending."""
        with self._lock:
            self._closed = True

    def _rolled(self, slot: int, done: Future, report: Future[WorkerReport]) -> None:
        with self._lock:
            self._rolling.discard(slot)
            refill = self.refill if not self._closed and self._out[slot] < self._depth else None
        if not self._then(done, report, self._stages[1], self._worker.reflect, self._reflected):
            return
        if refill is not None:
            try:
                refill([slot])
            except BaseException as exc:  # on a stage's thread: the loop raises it at its next collect
                self._error = exc

    def _reflected(self, done: Future, report: Future[WorkerReport]) -> None:
        self._then(done, report, self._stages[2], self._worker.verify, self._verified)

    @staticmethod
    def _verified(done: Future, report: Future[WorkerReport]) -> None:
        error = done.exception()
        if error is not None:
            settle(report, error=error)
        else:
            settle(report, result=done.result())

    @staticmethod
    def _then(done: Future, report: Future[WorkerReport], stage: Executor,
              step: Callable, after: Callable[[Future, Future[WorkerReport]], None]) -> bool:
        """Send the stage's result on to `step` on `stage`; False (the report failed) when it raised."""
        error = done.exception()
        if error is not None:
            settle(report, error=error)
            return False
        try:
            following: Future[object] = stage.submit(step, done.result())
        except BaseException as exc:  # the stage is closed: the run was cancelled
            settle(report, error=exc)
            return False
        following.add_done_callback(lambda next_done: after(next_done, report))
        return True

"""Stragglers: a rollout that runs far longer than its task usually takes is run a second time.

Model latency is heavy-tailed, and every wave of rollouts (a minibatch, a probe wave, a bisection
level, a held-out pass) waits for its slowest member. `Durations` is an online model of how long
each task's rollouts take; `Hedger` re-issues a rollout still running past `factor` times its
task's expected duration, while the call pool has room for it, and the first answer wins. The
other goes on (a thread cannot be stopped) and what it returns is discarded. Both are paid for,
so both are counted as rollouts, and the run's usage counts the re-issued and discarded ones.

What it leaves out: what a rollout is (`units`) and caching it (`evaluation`).
"""

from __future__ import annotations

import heapq
import itertools
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from agentdescent.engine.calls.executors import Executor
from agentdescent.errors import BudgetSpent
from agentdescent.types import Rollout


class Durations:
    """How long a task's rollouts take: the median of its last `per_task`, or of the run's last
    `window` for a task not yet seen; nothing until `warmup` rollouts have been seen at all."""

    def __init__(self, *, per_task: int = 5, window: int = 256, warmup: int = 16) -> None:
        self._per_task, self._warmup = per_task, warmup
        self._tasks: dict[str, deque[float]] = {}
        self._recent: deque[float] = deque(maxlen=window)
        self._seen = 0
        self._lock = threading.Lock()

    def observe(self, task_id: str, seconds: float) -> None:
        with self._lock:
            self._tasks.setdefault(task_id, deque(maxlen=self._per_task)).append(seconds)
            self._recent.append(seconds)
            self._seen += 1

    def expected(self, task_id: str) -> float | None:
        with self._lock:
            if self._seen < self._warmup:
                return None
            return statistics.median(self._tasks.get(task_id) or self._recent)


@dataclass(eq=False)
class _Race:
    """One rollout asked for: the first of its runs to finish settles `future`."""

    future: Future
    task_id: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    then: Callable[[Any], Any] | None
    settled: bool = False  # an attempt has answered for it
    running: int = 0  # its attempts not yet back


class Hedger:
    """Submits rollouts to `pool` and re-issues stragglers (see the module's docstring).

    A rollout is re-issued once, only when fewer than `capacity` attempts are running (the pool's
    width: past it, attempts wait in its queue, where a deadline counted from their submission
    would take waiting for running late, and fresh work would wait behind a second attempt), only
    past `floor` seconds (re-running a call that takes milliseconds buys nothing), and only when
    `may_start()` says the budget allows another call (the pool's `on_start` counts it as it starts;
    a second run refused there leaves the first to answer). A rollout submitted before `durations`
    expected anything, or due while the pool was full, is timed again from the moment it can be
    judged: the model of durations has seen enough, and the pool has room, so that every attempt
    has started. `on_reissue` and `on_discard` hear of each re-issue and each answer thrown away."""

    def __init__(self, pool: Executor, *, factor: float, capacity: int, durations: Durations | None = None,
                 may_start: Callable[[], bool] = lambda: True, on_reissue: Callable[[], None] = lambda: None,
                 on_discard: Callable[[], None] = lambda: None, floor: float = 0.05) -> None:
        self._pool, self._factor, self._capacity, self._floor = pool, factor, capacity, floor
        self.durations = durations or Durations()
        self._may_start, self._on_reissue, self._on_discard = may_start, on_reissue, on_discard
        self._running = 0
        self._deadlines: list[tuple[float, int, _Race]] = []
        # rollouts without a deadline: submitted before `durations` expected anything (a run's first
        # waves, its largest), or due while the pool was full; armed when it is no longer
        self._waiting: list[_Race] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._closed = False
        self._timer: threading.Thread | None = None

    def submit(self, task_id: str, fn: Callable[..., Rollout], *args: Any,
               then: Callable[[Rollout], Rollout] | None = None) -> Future[Rollout]:
        race = _Race(future=Future(), task_id=task_id, fn=fn, args=args, then=then)
        race.future.set_running_or_notify_cancel()
        self._attempt(race)
        with self._wake:
            if not self._arm(race):
                self._waiting.append(race)
        return race.future

    def _arm(self, race: _Race) -> bool:
        """Give `race` its deadline, `factor` times its task's expected duration from now; False
        while nothing is expected yet. Callers hold the lock."""
        expected = self.durations.expected(race.task_id)
        if expected is None:
            return False
        if not self._closed:
            heapq.heappush(self._deadlines, (time.monotonic() + max(self._floor, self._factor * expected), next(self._order), race))
            self._start_timer()
            if self._deadlines[0][2] is race:  # else the watcher wakes for an earlier one anyway
                self._wake.notify()
        return True

    def close(self) -> None:
        """Stop watching for stragglers; attempts already running go on to their end."""
        with self._wake:
            self._closed = True
            self._deadlines.clear()
            self._waiting.clear()
            self._wake.notify()

    def _attempt(self, race: _Race) -> None:
        """Start one attempt of `race`; what the pool raises once it is closed (a cancel, the run's
        end) is raised, the attempt not counted."""
        with self._wake:
            self._running += 1
            race.running += 1
        try:
            attempt = self._pool.submit(race.fn, *race.args, then=race.then)
        except BaseException:
            with self._wake:
                self._running -= 1
                race.running -= 1
            raise
        attempt.add_done_callback(lambda done: self._finished(race, done))

    def _finished(self, race: _Race, attempt: Future) -> None:
        error = attempt.exception() if not attempt.cancelled() else None
        if attempt.cancelled():
            error = RuntimeError("the rollout was cancelled before it started")
        if error is None:
            self.durations.observe(race.task_id, attempt.result().seconds)
        with self._wake:  # one lock for both attempts, so exactly one settles the race
            self._running -= 1
            race.running -= 1
            if self._waiting and self._running < self._capacity:  # every attempt has started: each waiting one is timed from now
                self._waiting = [w for w in self._waiting if w is not race and not w.settled and not self._arm(w)]
            if isinstance(error, BudgetSpent) and race.running:  # never started: the other attempt answers
                return
            first, race.settled = not race.settled, True
        if not first:
            if error is None:
                self._on_discard()
            return
        # outside the lock: the race's callbacks take locks of their own (the evaluator's)
        if error is not None:
            race.future.set_exception(error)
        else:
            race.future.set_result(attempt.result())

    def _start_timer(self) -> None:
        """Callers hold the lock."""
        if self._timer is None:
            self._timer = threading.Thread(target=self._watch, name="agentdescent-stragglers", daemon=True)
            self._timer.start()

    def _watch(self) -> None:
        while True:
            with self._wake:
                while not self._closed and (not self._deadlines or self._deadlines[0][0] > time.monotonic()):
                    self._wake.wait(self._deadlines[0][0] - time.monotonic() if self._deadlines else None)
                if self._closed:
                    return
                _, _, race = heapq.heappop(self._deadlines)
                if race.settled:
                    continue
                if self._running >= self._capacity:  # attempts wait in the pool's queue: armed again once they do not
                    self._waiting.append(race)
                    continue
            if self._may_start():
                try:
                    self._attempt(race)
                except BaseException:  # the pool closed under the race (a cancel abandons it): its first attempt answers
                    return
                self._on_reissue()

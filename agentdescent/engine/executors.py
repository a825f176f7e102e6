"""Where work runs. The engine only sees the `Executor` protocol, so it never knows which one it has.

Threads are the default: a rollout is mostly waiting on a model, so a thread per in-flight call
is the cheap way to keep many in flight. Nothing here queues work that waits on other queued
work, so a bounded pool cannot deadlock: the engine keeps its workers (which wait) and its calls
(which do not) in separate pools.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from agentdescent.errors import UserError

T = TypeVar("T")
R = TypeVar("R")

EXECUTORS = ("thread",)


class Executor(Protocol):
    """Runs callables concurrently; `shutdown` drops queued work and, with `wait`, waits for running work.

    `submit(fn, *args, then=None)` returns a `concurrent.futures.Future` of `fn(*args)`, or of
    `then(fn(*args))`: `then` runs in this process, before the future completes, so that what it
    records (the driver's usage) is there when a waiter wakes. What goes to the call pool is a unit
    of `units` (plain data in and out), so that an executor may run `fn` in another process."""

    def submit(self, fn: Callable[..., T], *args: Any, then: Callable[[T], R] | None = None) -> Future[R]: ...

    def shutdown(self, *, wait: bool = True) -> None: ...


class ThreadExecutor:
    """A pool of at most `max_workers` daemon threads, started as work arrives.

    Not `concurrent.futures.ThreadPoolExecutor`: its threads hold the interpreter open until
    their work returns, so one user call that never returns (a hung model client) would keep a
    stopped run, and the program, from ever ending. Daemon threads do not, and
    `shutdown(wait=False)` abandons such a call.
    """

    def __init__(self, max_workers: int, *, name: str = "agentdescent") -> None:
        self._max, self._name = max_workers, name
        self._work: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)  # released by a thread that waits for work
        self._closed = False
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., T], *args: Any, then: Callable[[T], R] | None = None) -> Future[R]:
        future: Future[R] = Future()
        if self._closed:
            raise RuntimeError("the pool is shut down")
        self._work.put(_Item(future, fn, args, then))
        if not self._idle.acquire(blocking=False):  # no thread is waiting: start one, up to the cap
            with self._lock:
                if len(self._threads) < self._max:
                    thread = threading.Thread(target=self._serve, name=f"{self._name}-{len(self._threads)}",
                                              daemon=True)
                    self._threads.append(thread)
                    thread.start()
        return future

    def shutdown(self, *, wait: bool = True) -> None:
        """Cancel the work not started; with `wait`, also wait for the work running to end."""
        with self._lock:
            self._closed = True
            threads = list(self._threads)
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not None:
                item.future.cancel()
        for _ in threads:
            self._work.put(None)
        if wait:
            for thread in threads:
                thread.join()

    def _serve(self) -> None:
        while True:
            item = self._work.get()
            if item is None:
                return
            item.run()
            self._idle.release()


@dataclass(frozen=True)
class _Item:
    future: Future
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    then: Callable[[Any], Any] | None

    def run(self) -> None:
        if not self.future.set_running_or_notify_cancel():
            return
        try:
            result = self.fn(*self.args)
            if self.then is not None:  # in the same call: a chained second future doubled a rollout's cost
                result = self.then(result)
        except BaseException as exc:  # the waiter gets it, whatever it is
            self.future.set_exception(exc)
        else:
            self.future.set_result(result)


def make_executor(kind: str, max_workers: int, *, name: str) -> Executor:
    if kind == "thread":
        return ThreadExecutor(max_workers, name=name)
    raise UserError(f"executor={kind!r} is not available; choose one of {', '.join(EXECUTORS)}")

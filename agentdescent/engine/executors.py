"""Where work runs. The engine only sees the `Executor` protocol, so it never knows which one it has.

Threads are the default: a rollout is mostly waiting on a model, so a thread per in-flight call
is the cheap way to keep many in flight. Nothing here queues work that waits on other queued
work, so a bounded pool cannot deadlock: the engine keeps its workers (which wait) and its calls
(which do not) in separate pools.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from agentdescent.errors import UserError

T = TypeVar("T")
R = TypeVar("R")

EXECUTORS = ("thread",)


class Executor(Protocol):
    """Runs callables concurrently; `shutdown` waits for running work and drops queued work.

    `submit(fn, *args, then=None)` returns a `concurrent.futures.Future` of `fn(*args)`, or of
    `then(fn(*args))`: `then` runs in this process, before the future completes, so that what it
    records (the driver's usage) is there when a waiter wakes. What goes to the call pool is a unit
    of `units` (plain data in and out), so that an executor may run `fn` in another process."""

    def submit(self, fn: Callable[..., T], *args: Any, then: Callable[[T], R] | None = None) -> Future[R]: ...

    def shutdown(self) -> None: ...


class ThreadExecutor:
    """A thread pool of `max_workers` threads."""

    def __init__(self, max_workers: int, *, name: str = "agentdescent") -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name)

    def submit(self, fn: Callable[..., T], *args: Any, then: Callable[[T], R] | None = None) -> Future[R]:
        if then is None:
            return self._pool.submit(fn, *args)
        # one future per call: chaining a second one doubled the synchronisation a rollout pays for
        return self._pool.submit(lambda: then(fn(*args)))

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def make_executor(kind: str, max_workers: int, *, name: str) -> Executor:
    if kind == "thread":
        return ThreadExecutor(max_workers, name=name)
    raise UserError(f"executor={kind!r} is not available; choose one of {', '.join(EXECUTORS)}")

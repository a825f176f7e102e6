"""Where work runs. The engine only sees the `Executor` protocol, so it never knows which one it has.

Threads are the default: a rollout is mostly waiting on a model, so a thread per in-flight call
is the cheap way to keep many in flight. Nothing here queues work that waits on other queued
work, so a bounded pool cannot deadlock: the engine keeps its workers (which wait) and its calls
(which do not) in separate pools.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, TypeVar

from agentdescent.errors import UserError

T = TypeVar("T")
R = TypeVar("R")

EXECUTORS = ("thread",)


class Executor(Protocol):
    """Runs callables concurrently. `map` keeps the order of its inputs and re-raises the first
    exception; `submit` returns a `concurrent.futures.Future`; `shutdown` waits for running work."""

    def submit(self, fn: Callable[..., R], *args: Any) -> Future[R]: ...

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]: ...

    def shutdown(self) -> None: ...


class ThreadExecutor:
    """A thread pool of `max_workers` threads."""

    def __init__(self, max_workers: int, *, name: str = "agentdescent") -> None:
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix=name)

    def submit(self, fn: Callable[..., R], *args: Any) -> Future[R]:
        # The caller's context goes along, so that a run's usage meter sees calls made in the pool.
        return self._pool.submit(contextvars.copy_context().run, fn, *args)

    def map(self, fn: Callable[[T], R], items: Iterable[T]) -> list[R]:
        futures = [self.submit(fn, item) for item in items]
        return [f.result() for f in futures]

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def make_executor(kind: str, max_workers: int, *, name: str) -> Executor:
    if kind == "thread":
        return ThreadExecutor(max_workers, name=name)
    raise UserError(f"executor={kind!r} is not available; choose one of {', '.join(EXECUTORS)}")

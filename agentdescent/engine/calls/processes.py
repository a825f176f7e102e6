"""The process executor: rollouts and reflections in worker processes of this machine.

For a `run`, `reward` or `propose` that is CPU-bound or not thread-safe. What crosses is a unit
of `units` with the user's callables and plain data (they must pickle: `check_picklable` says
which does not), and the record it returns; the driver's `then` runs here, on the result's way
back. A worker process that dies mid-call (killed, out of memory) breaks the whole pool in
`concurrent.futures`, so the pool is rebuilt and the calls it lost are sent again, up to
`retries` times each; `restarts` counts the rebuilds. A unit lost that many times ends as a unit
that failed does (`units.crashed`): a failed rollout, an `error` reflection.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar

from agentdescent.engine.calls.executors import Outstanding, left_running, settle
from agentdescent.engine.calls.units import crashed
from agentdescent.errors import UserError

T = TypeVar("T")
R = TypeVar("R")


def check_picklable(**callables: object) -> None:
    """Raise a `UserError` naming the first of `callables` that cannot be sent to another process."""
    for name, fn in callables.items():
        try:
            pickle.dumps(fn)
        except Exception as exc:
            raise UserError(
                f"executor='process' sends {name} to other processes, and it cannot be pickled ({type(exc).__name__}: "
                f"{exc}); define it at module level (not a lambda, a nested function or an object holding a lock "
                f"or a client), or use executor='thread'") from None


@dataclass(eq=False)
class _Call:
    future: Future
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    then: Callable[[Any], Any] | None
    tries: int = 0


class ProcessExecutor:
    """At most `max_workers` processes (no more than the machine's CPUs), started by forkserver
    where there is one (the driver has threads, which fork would copy mid-lock), else spawn."""

    def __init__(self, max_workers: int, *, name: str = "agentdescent", retries: int = 2,
                 on_start: Callable[[], None] | None = None) -> None:
        self._max = self.width = max(1, min(max_workers, os.cpu_count() or 1))
        methods = multiprocessing.get_all_start_methods()
        self._context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        self._retries = retries
        self._on_start = on_start  # called in the worker process as it takes each call (`Executor`): it must pickle
        self._lock = threading.Lock()  # the pool and its generation
        self._pool = self._new_pool()
        self._generation = 0  # which pool a call went to: one break rebuilds the pool once
        self._outstanding = Outstanding()
        self.restarts = 0

    def submit(self, fn: Callable[..., T], *args: Any, then: Callable[[T], R] | None = None) -> Future[R]:
        future: Future[R] = self._outstanding.new()
        future.set_running_or_notify_cancel()
        self._send(_Call(future, fn, args, then))
        return future

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> int:
        """See `Executor`; the calls still running past `timeout` are stopped with their processes."""
        unfinished = self._outstanding.close()
        with self._lock:
            pool = self._pool
        left = left_running(unfinished, wait=wait, timeout=timeout)
        processes = _processes_of(pool)  # before the shutdown, which lets go of them
        pool.shutdown(wait=wait and not left, cancel_futures=True)
        if not wait or left:
            _terminate(processes)
        return left

    def abandon(self, error: BaseException) -> None:
        """Fail every call not yet done with `error`, refuse new ones, and stop the processes."""
        self._outstanding.abandon(error)
        with self._lock:
            pool = self._pool
        processes = _processes_of(pool)
        pool.shutdown(wait=False, cancel_futures=True)
        _terminate(processes)

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self._max, mp_context=self._context)

    def _send(self, call: _Call) -> None:
        with self._lock:
            pool, generation = self._pool, self._generation
        try:
            inner = pool.submit(call.fn, *call.args) if self._on_start is None else \
                pool.submit(_started, self._on_start, call.fn, *call.args)
        except BrokenProcessPool:
            self._rebuild(generation)
            return self._send(call)
        except RuntimeError as exc:  # shut down meanwhile
            settle(call.future, error=self._outstanding.closed or exc)
            return
        inner.add_done_callback(lambda done: self._returned(call, done, generation))

    def _returned(self, call: _Call, inner: Future, generation: int) -> None:
        if call.future.done():  # abandoned meanwhile
            return
        error = RuntimeError("the call was cancelled") if inner.cancelled() else inner.exception()
        if isinstance(error, BrokenProcessPool) and call.tries < self._retries and self._outstanding.closed is None:
            call.tries += 1
            self._rebuild(generation)
            self._send(call)
            return
        fallback = None if not isinstance(error, BrokenProcessPool) else crashed(
            call.fn, call.args, f"the worker process running it died, {call.tries + 1} times (killed, out of memory, "
                                "os._exit or a crash in the code it ran, a script calling evolve without an "
                                "`if __name__ == '__main__':` guard, or a function defined under that guard, "
                                "which a worker cannot find: define it at the top of the module; its stderr says which)")
        if error is not None and fallback is None:
            settle(call.future, error=error)
            return
        try:
            result = inner.result() if fallback is None else fallback
            settle(call.future, result=call.then(result) if call.then is not None else result)
        except BaseException as exc:  # the driver's own `then` failed: the waiter hears of it
            settle(call.future, error=exc)

    def _rebuild(self, generation: int) -> None:
        """A worker process died and took the pool with it: a new pool, once per break."""
        with self._lock:
            if generation != self._generation or self._outstanding.closed is not None:
                return
            broken, self._pool = self._pool, self._new_pool()
            self._generation += 1
            self.restarts += 1
        broken.shutdown(wait=False, cancel_futures=True)


def _started(on_start: Callable[[], None], fn: Callable[..., T], *args: Any) -> T:
    """`fn(*args)` in a worker process, `on_start` first: a call queued and cancelled before any
    process took it (a cancelled run's) never started, and is on no bill."""
    on_start()
    return fn(*args)


def _processes_of(pool: ProcessPoolExecutor) -> list:
    """The pool's worker processes (private, but the only handle on them; `shutdown` drops it)."""
    return list((getattr(pool, "_processes", None) or {}).values())


def _terminate(processes: list) -> None:
    """Stop these processes now: a call that never returns, or one queued in a worker after a
    cancel, would otherwise run on and hold up the program's exit."""
    for process in processes:
        try:
            process.terminate()
        except Exception:  # already gone
            pass


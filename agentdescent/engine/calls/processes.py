"""The process executor: rollouts and reflections in worker processes of this machine.

For a `run`, `reward` or `propose` that is CPU-bound or not thread-safe. What crosses is a unit
of `units` with the user's callables and plain data (they must pickle: `check_picklable` says
which does not; and load in a worker: `load` tries them there before the first call, since a
call whose callables do not load breaks its worker as it arrives), and the record it returns;
the driver's `then` runs here, on the result's way back. A worker process that dies mid-call
(killed, out of memory) breaks the whole pool in `concurrent.futures`, so the pool is rebuilt
and the calls it lost are sent again, up to `retries` times each; `restarts` counts the
rebuilds. They go again one at a time, each alone in the pool: any of them may be the one that
killed it (a crash in the user's code), and sent together, the one that kills it every time
would take the others with it each time. A unit lost that many times ends as a unit that failed
does (`units.crashed`): a failed rollout, an `error` reflection.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import threading
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import CancelledError, Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar

from agentdescent.engine.calls.executors import Outstanding, left_running, result_of, settle, starts
from agentdescent.engine.calls.units import crashed, heed_sigint
from agentdescent.errors import UserError
from agentdescent.quoting import described, quoted
from agentdescent.types import Task

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


def check_tasks(tasks: Sequence[Task], *, executor: str = "process",
                dumps: Callable[[object], bytes] = pickle.dumps) -> None:
    """Raise a `UserError` naming the first task, and the field of it, that `dumps` cannot send to
    another process (a lock, an open file or, for pickle, a lambda in its `meta`)."""
    for task in tasks:
        try:
            dumps(task)
        except Exception:
            fields = {**{name: getattr(task, name) for name in ("id", "prompt", "gold")},
                      **{f"meta[{key!r}]": value for key, value in task.meta.items()}}
            name, exc = next(((name, error) for name, value in fields.items()
                              if (error := _unsendable(value, dumps)) is not None), ("meta", None))
            why = f" ({described(exc)})" if exc is not None else ""
            raise UserError(
                f"executor={executor!r} sends each task to other processes, and task {quoted(task.id, 80)} cannot be "
                f"sent: its {name} holds a {type(fields.get(name)).__name__} object{why}; keep plain data in a task (text, "
                "numbers, lists, dicts of those), open files, locks and clients inside run or reward, or use "
                "executor='thread'") from None


def _unsendable(value: object, dumps: Callable[[object], bytes]) -> BaseException | None:
    try:
        dumps(value)
    except Exception as exc:
        return exc
    return None


@dataclass(eq=False)
class _Call:
    future: Future
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    then: Callable[[Any], Any] | None
    tries: int = 0


class ProcessExecutor:
    """At most `max_workers` processes (no more than the machine's CPUs), started by forkserver
    where there is one (the driver has threads, which fork would copy mid-lock), else spawn.

    Calls wait their turn here, with the driver, and are handed to the pool only while a process
    is free for each, so a call handed over starts at once: that is where `on_start` is called (on
    the driver), and what is still queued at a shutdown never starts."""

    def __init__(self, max_workers: int, *, name: str = "agentdescent", retries: int = 2,
                 on_start: Callable[[], None] | None = None) -> None:
        self._max = self.width = max(1, min(max_workers, os.cpu_count() or 1))
        methods = multiprocessing.get_all_start_methods()
        self._context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
        self._retries = retries
        self._on_start = on_start
        self._lock = threading.Lock()  # the pool, its generation, the queue and the count of calls handed over
        self._pool = self._new_pool()
        self._generation = 0  # which pool a call went to: one break rebuilds the pool once
        self._queue: deque[_Call] = deque()  # submitted, not yet handed to a process
        self._lost: deque[_Call] = deque()  # lost in a break, to be sent again alone, before any other
        self._alone: _Call | None = None  # the lost call in the pool, alone
        self._busy = 0  # calls handed to the pool and not back: at most `width`
        self._outstanding = Outstanding()
        self.restarts = 0

    def submit(self, fn: Callable[..., T], *args: Any, then: Callable[[T], R] | None = None) -> Future[R]:
        future: Future[R] = self._outstanding.new()
        with self._lock:
            self._queue.append(_Call(future, fn, args, then))
        self._hand_over()
        return future

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> int:
        """See `Executor`; the calls still running past `timeout` are stopped with their processes."""
        unfinished = self._outstanding.close()
        with self._lock:
            pool, queued, self._queue = self._pool, [*self._lost, *self._queue], deque()
            self._lost = deque()
        for call in queued:  # never started
            if call.future.cancel():
                call.future.set_running_or_notify_cancel()  # `futures.wait` counts only a notified cancel as done
            else:  # one sent again after its process died
                settle(call.future, error=self._outstanding.closed)
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
            pool, self._queue, self._lost = self._pool, deque(), deque()
        processes = _processes_of(pool)
        pool.shutdown(wait=False, cancel_futures=True)
        _terminate(processes)

    def load(self, **callables: object) -> None:
        """Raise a `UserError` naming the first of `callables` that a worker process cannot load
        (it pickles here, but its module, or its own `__setstate__`, fails there), before any call
        is made: a call whose callables cannot load fails before it runs, every time, and is
        still paid for."""
        with self._lock:
            pool = self._pool
        try:
            loading = {name: pool.submit(_load, name, pickle.dumps(fn)) for name, fn in callables.items()}
        except RuntimeError as exc:  # shut down: abandoned by a cancel already
            raise (self._outstanding.closed or exc) from None
        for name, loaded in loading.items():
            try:
                result_of(loaded)
            except UserError as exc:
                raise exc from None  # the worker's traceback (its cause) adds nothing to what it says
            except (BrokenProcessPool, CancelledError):
                if self._outstanding.closed is not None:  # abandoned by a cancel, which stopped its processes
                    raise self._outstanding.closed from None
                raise UserError(f"executor='process' sends {name} to other processes, and the one loading it died "
                                "(os._exit or a crash in the code its module runs as it is imported; its stderr says "
                                "which); make it load in a fresh process, or use executor='thread'") from None

    def _new_pool(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self._max, mp_context=self._context, initializer=heed_sigint)

    def _hand_over(self) -> None:
        """Hand queued calls to the pool while a process is free for each; a call lost in a break
        goes first, alone: into an empty pool, and nothing else until it is back."""
        while True:
            with self._lock:
                call = self._next()
                if call is None:
                    return
                self._busy += 1
            if self._start(call):
                self._send(call)
            else:
                self._left(call)

    def _next(self) -> _Call | None:
        """The call to hand over now, if any; callers hold the lock."""
        if self._outstanding.closed is not None or self._alone is not None:
            return None
        if self._lost:
            if self._busy:
                return None
            self._alone = self._lost.popleft()
            return self._alone
        return self._queue.popleft() if self._queue and self._busy < self._max else None

    def _start(self, call: _Call) -> bool:
        """Whether `call` starts (`executors.starts`)."""
        return starts(call.future, self._on_start, first=call.tries == 0)

    def _send(self, call: _Call) -> None:
        with self._lock:
            pool, generation = self._pool, self._generation
        try:
            if self._outstanding.closed is not None:  # a broken pool is not rebuilt then
                raise RuntimeError("the pool is shut down")
            inner = pool.submit(call.fn, *call.args)
        except BrokenProcessPool:
            self._rebuild(generation)
            return self._send(call)
        except RuntimeError as exc:  # shut down meanwhile
            self._left(call)
            settle(call.future, error=self._outstanding.closed or exc)
            return
        inner.add_done_callback(lambda done: self._on_done(call, done, generation))

    def _left(self, call: _Call) -> None:
        """`call` no longer holds a process."""
        with self._lock:
            self._busy -= 1
            if self._alone is call:
                self._alone = None

    def _on_done(self, call: _Call, inner: Future, generation: int) -> None:
        """`inner` is back. A pool a worker's death broke fails its futures holding the lock its
        `submit` and `shutdown` take (Python 3.12 and later), and what follows a break takes it (a
        new pool, the calls sent again, the broken one shut down): on a thread of its own then, or
        the run hangs for good."""
        if not inner.cancelled() and isinstance(inner.exception(), BrokenProcessPool):
            threading.Thread(target=self._returned, args=(call, inner, generation), name="agentdescent-broken-pool",
                             daemon=True).start()
        else:
            self._returned(call, inner, generation)

    def _returned(self, call: _Call, inner: Future, generation: int) -> None:
        self._left(call)
        try:
            self._settle(call, inner, generation)
        finally:
            self._hand_over()

    def _settle(self, call: _Call, inner: Future, generation: int) -> None:
        if call.future.done():  # abandoned meanwhile
            return
        error = RuntimeError("the call was cancelled") if inner.cancelled() else inner.exception()
        if isinstance(error, BrokenProcessPool) and call.tries < self._retries and self._outstanding.closed is None:
            call.tries += 1
            self._rebuild(generation)
            with self._lock:
                self._lost.append(call)
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


def _load(name: str, payload: bytes) -> None:
    """In a worker process: load `name` as each call of it is loaded there, or say why it cannot."""
    try:
        pickle.loads(payload)
    except KeyboardInterrupt:
        raise  # a Ctrl-C, which the driver heard too
    except BaseException as exc:  # noqa: BLE001 -- its module or its __setstate__ may raise anything, SystemExit too
        raise UserError(
            f"executor='process' sends {name} to other processes, and they cannot load it ({described(exc)}): it "
            "pickles here, but not where it runs; define it at the top of a module (not under `if __name__ == "
            "'__main__':`, which worker processes do not run), make what its module or its __setstate__ needs (a "
            "file, an environment variable) be there too, or use executor='thread'") from None


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


"""Where work runs. The engine only sees the `Executor` protocol, so it never knows which one it has.

Threads are the default: a rollout is mostly waiting on a model, so a thread per in-flight call
is the cheap way to keep many in flight. Nothing here queues work that waits on other queued
work, so a bounded pool cannot deadlock: the engine keeps its workers (which wait) and its calls
(which do not) in separate pools.
"""

from __future__ import annotations

import contextvars
import queue
import threading
from collections.abc import Callable
from concurrent import futures
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")

WAKE_S = 0.2  # how often a waiting thread wakes: soon enough for Ctrl-C, rarely enough to cost nothing


def result_of(future: Future[T]) -> T:
    """`future.result()`, waited for in slices. The kernel hands a process's SIGINT to any of its
    threads and Python runs the handler in the main thread only, between bytecodes: a main thread
    blocked in one long wait on a call that hangs would never see its Ctrl-C."""
    while True:
        try:
            return future.result(timeout=WAKE_S)
        except futures.TimeoutError:  # the builtin TimeoutError from Python 3.11, a class of its own before
            if future.done():  # the call's own TimeoutError, not the slice's
                return future.result()


def get_from(box: queue.SimpleQueue[T] | queue.Queue[T]) -> T:
    """`box.get()`, waited for in slices, as `result_of`."""
    while True:
        try:
            return box.get(timeout=WAKE_S)
        except queue.Empty:
            continue


class Executor(Protocol):
    """Runs callables concurrently; `shutdown` drops queued work and, with `wait`, waits for running
    work, at most `timeout` seconds (None: as long as it takes), and says how many calls were
    still running when it stopped waiting; `abandon(error)` fails every future not yet done with
    `error` at once (a cancelled run).

    `submit(fn, *args, then=None)` returns a `concurrent.futures.Future` of `fn(*args)`, or of
    `then(fn(*args))`: `then` runs in this process, before the future completes, so that what it
    records (the driver's usage) is there when a waiter wakes. What goes to the call pool is a unit
    of `units` (plain data in and out), so that an executor may run `fn` in another process.

    An executor made with `on_start` calls it in this process as each call starts (again when it
    starts again): on the call's own thread, or as it is handed to a worker process or an actor's
    thread that is free for it (calls wait their turn here, not inside the pool). If it raises, the
    call does not start and its future fails with that. A pool of model calls asks the run's
    budget there (`budget.Allowance`) and writes its start log (`checkpoint.StartLog`): work queued
    and never started is neither let through early nor on the bill.

    `width` is how many calls it runs at once; more wait their turn (`stragglers` judges a call
    late only while none waits).

    `load(**callables)` loads the user's callables where the calls will run, before the first is
    submitted, and raises a `UserError` naming one that cannot be loaded there (a process or an
    actor fails to unpickle it); threads share the caller's, so theirs does nothing."""

    width: int

    def load(self, **callables: object) -> None: ...

    def submit(self, fn: Callable[..., T], *args: Any, then: Callable[[T], R] | None = None) -> Future[R]: ...

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> int: ...

    def abandon(self, error: BaseException) -> None: ...


class Outstanding:
    """The futures an executor handed out and has not completed, kept the same way by every
    executor: none is handed out once the pool is closed, and `abandon` fails each at once.

    No lock: every call pool's threads complete futures while the driver hands out new ones, and
    a lock between them made each rollout's submission wait for the completions of others. A set's
    add, discard and copy are each atomic, and a future is added before `closed` is read, so one
    handed out while the pool closes is either in the copy `close` returns or refused."""

    def __init__(self) -> None:
        self._futures: set[Future] = set()
        self.closed: BaseException | None = None  # what handing out a future raises, once closed

    def new(self) -> Future:
        future: Future = Future()
        self._futures.add(future)
        if self.closed is not None:
            self._futures.discard(future)
            raise self.closed
        future.add_done_callback(self._futures.discard)
        return future

    def close(self, error: BaseException | None = None) -> list[Future]:
        """Refuse new work, with `error` (or, if none was given before, "shut down"); the
        futures not yet done."""
        self.closed = error or self.closed or RuntimeError("the pool is shut down")
        return [future for future in list(self._futures) if not future.done()]

    def abandon(self, error: BaseException) -> None:
        for future in self.close(error):
            settle(future, error=error)


def left_running(unfinished: list[Future], *, wait: bool, timeout: float | None) -> int:
    """What every executor's `shutdown` ends with: with `wait`, wait for `unfinished` (what
    `Outstanding.close` handed back), at most `timeout` seconds; how many are still not done."""
    if wait:
        futures.wait(unfinished, timeout)
    return sum(not future.done() for future in unfinished)


class ThreadExecutor:
    """A pool of at most `max_workers` daemon threads, started as work arrives.

    Not `concurrent.futures.ThreadPoolExecutor`: its threads hold the interpreter open until
    their work returns, so one user call that never returns (a hung model client) would keep a
    stopped run, and the program, from ever ending. Daemon threads do not, and
    `shutdown(wait=False)` abandons such a call. Its threads run in a copy of the context it was
    made in (the run's `halts.Halt`), not in that of whichever call happened to start one.
    """

    def __init__(self, max_workers: int, *, name: str = "agentdescent", on_start: Callable[[], None] | None = None) -> None:
        self._max, self._name, self._on_start = max_workers, name, on_start
        self.width = max_workers
        self._work: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._idle = threading.Semaphore(0)  # released by a thread that waits for work
        self._outstanding = Outstanding()
        self._lock = threading.Lock()  # the list of threads
        self._context = contextvars.copy_context()

    def submit(self, fn: Callable[..., T], *args: Any, then: Callable[[T], R] | None = None) -> Future[R]:
        future: Future[R] = self._outstanding.new()
        self._work.put(_Item(future, fn, args, then, self._on_start))
        if not self._idle.acquire(blocking=False):  # no thread is waiting: start one, up to the cap
            with self._lock:
                if len(self._threads) < self._max:
                    thread = threading.Thread(target=self._context.copy().run, args=(self._serve,),
                                              name=f"{self._name}-{len(self._threads)}", daemon=True)
                    self._threads.append(thread)
                    thread.start()
        return future

    def load(self, **callables: object) -> None:
        """Nothing to load: the calls run in this process."""

    def shutdown(self, *, wait: bool = True, timeout: float | None = None) -> int:
        """Cancel the work not started; with `wait`, also wait for the work running to end, at most
        `timeout` seconds. A call still running then goes on alone on its daemon thread: one that
        hangs for good cannot be stopped, only left. How many were left."""
        unfinished = self._outstanding.close()
        with self._lock:
            threads = list(self._threads)
        while True:
            try:
                item = self._work.get_nowait()
            except queue.Empty:
                break
            if item is not None and item.future.cancel():
                item.future.set_running_or_notify_cancel()  # `futures.wait` counts only a notified cancel as done
        for _ in threads:
            self._work.put(None)
        return left_running(unfinished, wait=wait, timeout=timeout)

    def abandon(self, error: BaseException) -> None:
        """Fail every future not yet done with `error`, and refuse new work with it. Calls already
        running go on alone on their threads; what they return is dropped."""
        self._outstanding.abandon(error)

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
    on_start: Callable[[], None] | None

    def run(self) -> None:
        if not starts(self.future, self.on_start, first=True):  # not one its abandoned pool completed while it waited
            return
        try:
            result = self.fn(*self.args)
            if self.then is not None:  # in the same call: a chained second future doubled a rollout's cost
                result = self.then(result)
        except BaseException as exc:  # the waiter gets it, whatever it is
            settle(self.future, error=exc)
        else:
            settle(self.future, result=result)


def starts(future: Future, on_start: Callable[[], None] | None, *, first: bool) -> bool:
    """Whether the call `future` waits on starts now: not abandoned or cancelled meanwhile (`first`:
    its first start, which marks `future` running), and let by `on_start` (a refusal, the budget's,
    fails `future` with what `on_start` raised)."""
    try:
        if future.done() or (first and not future.set_running_or_notify_cancel()):
            return False
    except RuntimeError:  # abandoned just now
        return False
    try:
        if on_start is not None:
            on_start()
    except BaseException as exc:
        settle(future, error=exc)
        return False
    return True


def settle(future: Future, *, result: Any = None, error: BaseException | None = None) -> None:
    """Complete `future` unless it already is (an abandoned pool completed it first)."""
    try:
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
    except InvalidStateError:
        pass

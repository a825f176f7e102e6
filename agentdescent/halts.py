"""Ending a stopped run's calls still in flight: the programs they started and their model requests.

A run makes a `Halt` and enters it (`enter`) where its calls are made; the call pools' threads
carry it (a `ThreadExecutor` runs its threads in the context it was made in), and so does a call
given up on at its time limit (`units.within`). While a call runs, what would end it at once is
registered on the halt of its context (`ending`): a program `process.run_process` starts (its
group is asked to stop, then killed; one being started is waited for, so that none escapes when
the program exits as its run returns), the socket a model request waits on (`agents.deadline`).
`halt(why)` ends them all, and nothing starts after (`came`: a request has no time left,
`agents.http`). The calls of another run, made in a context of their own, are not touched, nor
are calls made where no run is. A call made on a thread a user's callable started itself carries
no context: while one run is active in the process (`active`), it is that run's, as its bill counts
it (`agents.base`: stray calls); while two are, it is neither's.

    halt = Halt();  entered = enter(halt)   # the calls made from here, on the run's threads too
    ...
    halt("the stop of the run it is part of (cancelled)");  leave(entered)

Left out: calls made in other processes (the process and Ray executors stop their workers
instead); when to halt (`evolve`).
"""

from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
import time
from collections.abc import Callable, Iterator

__all__ = ["SLICE_S", "Halt", "acquire", "active", "came", "current", "ending", "enter", "leave"]

SLICE_S = 0.2  # how often a wait a halt cannot wake (a semaphore's) looks for it

_current: contextvars.ContextVar[Halt | None] = contextvars.ContextVar("agentdescent_halt", default=None)
_active: list[Halt] = []  # the halts of the runs active in this process (`active`)
_active_lock = threading.Lock()


class Halt:
    """Called with why (once: a second call does nothing), it ends every call registered on it;
    one that registers later is told it came, and starts nothing."""

    def __init__(self) -> None:
        self.why: str | None = None  # set once it came
        self._ends: dict[int, Callable[[], None]] = {}
        self._keys = itertools.count()
        self._lock = threading.Lock()
        self._came = threading.Event()

    def __call__(self, why: str) -> int:
        """End every call registered now; how many there were."""
        with self._lock:
            if self.why is not None:
                return 0
            self.why, ends, self._ends = why, list(self._ends.values()), {}
            self._came.set()
        for end in ends:
            end()
        return len(ends)

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds`, or less once it came; whether it came."""
        return self._came.wait(seconds)

    @contextlib.contextmanager
    def ending(self, end: Callable[[], None]) -> Iterator[str | None]:
        """While the block runs, the halt calls `end()`, on the halting thread: it must raise
        nothing, and return soon (the halt waits for it). Yields None, or why the halt came
        already: then `end` is not registered, and the block must start nothing."""
        with self._lock:
            key = None if self.why is not None else next(self._keys)
            if key is not None:
                self._ends[key] = end
        try:
            yield self.why if key is None else None
        finally:
            if key is not None:
                with self._lock:
                    self._ends.pop(key, None)


def current() -> Halt | None:
    """The halt of the run whose call this is: its context's, else (a thread the caller's code
    started) the one run active in the process; None where there is neither."""
    found = _current.get()
    if found is None:
        with _active_lock:
            found = _active[0] if len(_active) == 1 else None
    return found


@contextlib.contextmanager
def active(halt: Halt) -> Iterator[None]:
    """Within the block, `halt`'s run is active in this process: a call made where no context
    carries a halt is that run's while it is the only one."""
    with _active_lock:
        _active.append(halt)
    try:
        yield
    finally:
        with _active_lock:
            _active.remove(halt)


def enter(halt: Halt | None) -> contextvars.Token:
    """Make `halt` the one calls made in this context belong to, until `leave`."""
    return _current.set(halt)


def leave(entered: contextvars.Token) -> None:
    _current.reset(entered)


def came(halt: Halt | None) -> str | None:
    """Why `halt` came, or None: not yet, or no halt."""
    return None if halt is None else halt.why


def ending(halt: Halt | None, end: Callable[[], None]) -> contextlib.AbstractContextManager[str | None]:
    """`halt.ending(end)`, or nothing for no halt."""
    return contextlib.nullcontext() if halt is None else halt.ending(end)


def acquire(lock: threading.Semaphore | threading.Lock, seconds: float, halt: Halt | None) -> bool:
    """Whether `lock` was taken within `seconds` (inf: however long it takes) and before `halt`
    came; one taken as it came is let go again."""
    if halt is None:
        return lock.acquire() if seconds == float("inf") else lock.acquire(timeout=max(0.0, seconds))
    until = time.monotonic() + seconds
    while halt.why is None:
        left = until - time.monotonic()
        if lock.acquire(timeout=max(0.0, min(left, SLICE_S))):
            if halt.why is None:
                return True
            lock.release()
            return False
        if left <= SLICE_S:
            return False
    return False

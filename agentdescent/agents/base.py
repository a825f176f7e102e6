"""What every model and agent shares: the usage it records, the meters that collect it, and the
cutoff its caller may set.

A model is any `Callable[[str], str]`; the clients shipped here also carry a `name` and a
`usage` (`ModelUsage`). Each call is recorded on the client's own usage and on every meter
active in the calling context. A meter is opened around one unit of work (a rollout, a
reflection) where that unit runs, and what it counted goes back with the unit's result as a
`Spend`: a context variable cannot cross into another process, plain data can. A unit given up
on at its time limit sets a `cutoff` the same way: the shipped clients end every call made in it
by then, so none runs on, nor starts, after the unit's result is written off. No client knows
about `evolve`.
"""

from __future__ import annotations

import contextvars
import inspect
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, fields

from agentdescent.errors import AgentError
from agentdescent.types import Spend

NOTHING_SPENT = Spend()


@dataclass
class Tally:
    """Counters that many threads add to. Pickled without their lock, so a copy can be stored or
    sent to another process."""

    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False, compare=False)

    def add(self, **counts: float) -> None:
        with self._lock:
            self._add(**counts)

    def _add(self, **counts: float) -> None:
        """`add` for a caller that holds the lock already."""
        for name, value in counts.items():
            setattr(self, name, getattr(self, name) + value)

    def __getstate__(self) -> dict[str, object]:
        with self._lock:
            return {name: value for name, value in self.__dict__.items() if name != "_lock"}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state, _lock=threading.Lock())


@dataclass
class ModelUsage(Tally):
    """Calls, failures, tokens, seconds and cost, added up; safe to update from many threads."""

    calls: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, float]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_")}

    def spent(self) -> Spend:
        """What has been counted so far, as plain data."""
        return Spend(**self.as_dict()) if self.calls else NOTHING_SPENT  # most rollouts of plain functions

    def add_spend(self, spend: Spend) -> None:
        if spend.calls:
            self.add(**spend.model_dump())


Model = Callable[[str], str]
"""A model: text in, text out. Any such callable will do, so a test needs no client. The clients
shipped here also carry a `name` and a `usage` (`ModelUsage`), raise `AgentError` when a call
fails for good and `UserError` when they are misconfigured (a missing key, say)."""


_meters: contextvars.ContextVar[tuple[ModelUsage, ...]] = contextvars.ContextVar("agentdescent_meters", default=())
_before: contextvars.ContextVar[tuple[Callable[[], None], ...]] = contextvars.ContextVar("agentdescent_before", default=())


@dataclass(frozen=True)
class Cutoff:
    """When the calls made in a context must be over, and the limit that says so (for messages)."""

    at: float  # time.monotonic()
    why: str  # e.g. "rollout_timeout=3 s, the limit of the rollout or reflection the call is part of"


_cutoff: contextvars.ContextVar[Cutoff | None] = contextvars.ContextVar("agentdescent_cutoff", default=None)


def record(usage: ModelUsage, **counts: float) -> None:
    """Add `counts` to a client's own usage and to every meter active here."""
    usage.add(**counts)
    for meter in _meters.get():
        meter.add(**counts)


@contextmanager
def metered_call(usage: ModelUsage) -> Iterator[dict[str, float]]:
    """Time one call and record it: the block fills the yielded dict (tokens, cost); an `AgentError`
    records the call as a failure too and goes on; any other error records nothing.

    with metered_call(model.usage) as counts:
        reply = ask(prompt)
        counts.update(input_tokens=..., output_tokens=...)
    """
    for hook in _before.get():  # may refuse the call (a spent budget): then it is not made, nor recorded
        hook()
    counts: dict[str, float] = {}
    start = time.perf_counter()
    try:
        yield counts
    except AgentError:
        record(usage, calls=1, failures=1, seconds=time.perf_counter() - start, **counts)
        raise
    record(usage, calls=1, seconds=time.perf_counter() - start, **counts)


@contextmanager
def metering(meter: ModelUsage) -> Iterator[ModelUsage]:
    """Within this block, model calls made in this context (this thread) also count on `meter`."""
    token = _meters.set(_meters.get() + (meter,))
    try:
        yield meter
    finally:
        _meters.reset(token)


@contextmanager
def before_each_call(hook: Callable[[], None]) -> Iterator[None]:
    """Within this block, `hook()` runs before each model call made in this context (this thread)
    starts; what it raises, the call's caller gets instead of an answer. The loop puts the run's
    budget and start log here around the step's own calls."""
    token = _before.set(_before.get() + (hook,))
    try:
        yield
    finally:
        _before.reset(token)


@contextmanager
def cut_off_at(at: float, why: str) -> Iterator[None]:
    """Within this block, each model call made in this context (this thread) ends by `at`
    (`time.monotonic()`), or by an earlier cutoff already set: a client ends its call then, its own
    timeout notwithstanding, and does not make one it cannot start before. `why` names the limit."""
    outer = _cutoff.get()
    token = _cutoff.set(outer if outer is not None and outer.at <= at else Cutoff(at=at, why=why))
    try:
        yield
    finally:
        _cutoff.reset(token)


def cutoff() -> Cutoff | None:
    """The cutoff set for calls made here (`cut_off_at`), or None."""
    return _cutoff.get()


def estimate_tokens(text: str) -> int:
    """A rough count for clients that report none: about four characters a token."""
    return (len(text) + 3) // 4


def accepts_keyword(fn: Callable[..., object], name: str, *, unknown: bool) -> bool:
    """Whether `fn` takes the keyword `name` (by that name, or through **kwargs); `unknown` when
    its signature cannot be read (a builtin, a C callable)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return unknown
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in parameters)

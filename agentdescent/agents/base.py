"""What every model and agent shares: the usage it records, the meters that collect it, and the
cutoff its caller may set.

A model is any `Callable[[str], str]`; the clients shipped here also carry a `name` and a
`usage` (`ModelUsage`). Each call is recorded on the client's own usage and on every meter
active in the calling context, with its cost: the one its client reports (Claude Code's), else
the `price` its usage was given (a run spec's), else none, and it is counted as `unpriced`. A
meter is opened around one unit of work (a rollout, a reflection) where that unit runs, and what
it counted goes back with the unit's result as a `Spend`: a context variable cannot cross into
another process, plain data can. A unit given up on at its time limit sets a `cutoff` the same
way: the shipped clients end every call made in it by then, so none runs on, nor starts, after
the unit's result is written off. No client knows about `evolve`.

A thread the caller's own code starts (a `ThreadPoolExecutor` inside a `run`) does not inherit
the context, so a call made there finds no meter, and no budget would see it. Such a stray call
goes to a catcher of the process's instead (`catching_strays`): the run active in the process
(`evolve` opens one for its duration, in the driver, where a thread pool runs its units), else the
newest unit of work running here (in a worker process or a Ray actor, where no run is: the call
comes back with that unit's result, and the units an actor runs at once are all one run's). A
stray call cannot tell which of two runs it served, so while two are active it is counted on
neither, and each is told. A call that carries a unit's meter (a thread handed the unit's
context) and ends after the unit returned and its spend was read (`seal`) is a stray call too.
The catchers live in the process, not in a context variable, because the process is all such a
thread shares with the run; a call made in a metered context of a unit still running never
reaches them.
"""

from __future__ import annotations

import contextvars
import inspect
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager
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


@dataclass(frozen=True, kw_only=True)
class Price:
    """What a call whose client reports no cost costs: `per_call` USD, else `per_1k_tokens` USD a
    1,000 of its tokens (a run spec's `price_per_call` and `price_per_1k_tokens`, as its quote reads them)."""

    per_call: float | None = None
    per_1k_tokens: float | None = None

    def of(self, counts: Mapping[str, float]) -> float:
        if self.per_call is not None:
            return self.per_call
        tokens = counts.get("input_tokens", 0) + counts.get("output_tokens", 0)
        return tokens / 1000 * (self.per_1k_tokens or 0.0)


@dataclass
class ModelUsage(Tally):
    """Calls, failures, tokens, seconds and cost, added up; safe to update from many threads.
    `estimated_tokens` are those of `tokens` that were estimated (`estimate_tokens`), not reported
    by a server or an agent; `price` is no count: what the calls recorded on it cost where they
    report no cost."""

    calls: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0
    estimated_tokens: int = 0
    unpriced: int = 0  # calls that reported no cost and had no price: their cost is not in cost_usd
    price: Price | None = field(default=None, compare=False)
    _sealed: bool = field(default=False, init=False, repr=False, compare=False)  # a meter whose unit's spend was read

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def as_dict(self) -> dict[str, float]:
        with self._lock:
            return {f.name: getattr(self, f.name) for f in fields(self) if not f.name.startswith("_") and f.name != "price"}

    def spent(self) -> Spend:
        """What has been counted so far, as plain data."""
        return Spend.model_validate(self.as_dict()) if self.calls else NOTHING_SPENT  # most rollouts of plain functions

    def seal(self) -> Spend:
        """`spent()`, for a meter whose unit of work is done: a call that ends after it (on a thread
        the unit handed its context to and did not wait for) is counted as a stray call, not here,
        where nothing would read it."""
        with self._lock:
            self._sealed = True
        return self.spent()

    def take(self, counts: Mapping[str, float]) -> bool:
        """Add `counts` unless sealed; whether it did."""
        with self._lock:
            if not self._sealed:
                self._add(**counts)
            return not self._sealed

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
    """Add `counts` to a client's own usage and to every meter active here, or, where none is (a
    thread the caller started) or only sealed ones are (a call its unit did not wait for), to the
    process's catcher of stray calls."""
    usage.add(**counts)
    taken = [meter.take(counts) for meter in _meters.get()]
    if not any(taken):  # no meter here, or only those of units already done
        _STRAYS.count(counts)


class _Strays:
    """The process's catchers of stray calls: the runs active here, and the units of work running
    here, newest last."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # held while a call is counted: a catcher let go has counted all it will
        self._runs: list[tuple[Callable[..., None], Callable[[], None]]] = []
        self._units: list[tuple[Callable[..., None], None]] = []

    def count(self, counts: dict[str, float]) -> None:
        with self._lock:
            if len(self._runs) > 1:
                for _, missed in self._runs:
                    missed()
            elif self._runs or self._units:
                (self._runs or self._units)[-1][0](**counts)

    @contextmanager
    def catching(self, count: Callable[..., None], missed: Callable[[], None] | None) -> Iterator[None]:
        catchers: list = self._units if missed is None else self._runs
        catcher = (count, missed)
        with self._lock:
            catchers.append(catcher)
        try:
            yield
        finally:
            with self._lock:
                del catchers[next(i for i, c in enumerate(catchers) if c is catcher)]


_STRAYS = _Strays()


def catching_strays(count: Callable[..., None], *, missed: Callable[[], None] | None = None) -> AbstractContextManager[None]:
    """Within this block, a model call made in this process where no meter is (on a thread the
    caller's code started) is counted by `count(**counts)`. With `missed`, the catcher is a run's:
    it takes such calls before any unit's, and while another run's is open too, neither counts
    them and `missed()` is called for each instead. Without, it is a unit's (`meter.add`): it takes
    them while no run's is open and no unit opened after it is running."""
    return _STRAYS.catching(count, missed)


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
        record(usage, calls=1, failures=1, seconds=time.perf_counter() - start, **_priced(counts, usage.price))
        raise
    record(usage, calls=1, seconds=time.perf_counter() - start, **_priced(counts, usage.price))


def _priced(counts: dict[str, float], price: Price | None) -> dict[str, float]:
    """A call's counts with its cost: its own, else `price`'s, else none, and the call counted unpriced."""
    if "cost_usd" in counts:
        return counts
    return {**counts, "cost_usd": price.of(counts)} if price is not None else {**counts, "unpriced": 1}


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


def estimated(sent: str, said: str) -> dict[str, int]:
    """The counts of a call whose tokens nobody reported: both estimated, and counted as estimates.
    estimated("x" * 40, "y" * 8) == {"input_tokens": 10, "output_tokens": 2, "estimated_tokens": 12}"""
    counts = {"input_tokens": estimate_tokens(sent), "output_tokens": estimate_tokens(said)}
    return {**counts, "estimated_tokens": counts["input_tokens"] + counts["output_tokens"]}


def accepts_keyword(fn: Callable[..., object], name: str, *, unknown: bool) -> bool:
    """Whether `fn` takes the keyword `name` (by that name, or through **kwargs); `unknown` when
    its signature cannot be read (a builtin, a C callable)."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return unknown
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in parameters)

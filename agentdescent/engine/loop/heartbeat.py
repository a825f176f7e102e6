"""The run's bill, told while it grows: a `Spent` event about once a second while calls start and land.

The engine's thread sends every other event, but it spends most of a round waiting on calls, and
a person (or `agentdescent status`, through the run's status file) watching the money go should
not wait for the round's end to see it. A thread of the heartbeat's own reads the usage every
`every` seconds and sends `Spent` when the calls or tokens changed. The calls it tells are those
the budget counts: each call as it starts (`Usage.started_calls`, from the start log), so a call
that hangs is on the bill while it hangs. Events reach `on_event` one at a time: the loop's
emitter takes a lock that this thread takes too (`serialized`).

    beat = Heartbeat(usage, emit, started=files.starts.count);  beat.start();  ...;  beat.stop()

Left out: what the events say (events) and where they go (the caller's `on_event`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from agentdescent import events as ev
from agentdescent.errors import Cancelled
from agentdescent.quoting import described
from agentdescent.usage import Usage

BEAT_S = 1.0  # seconds between two looks at the bill


def serialized(emit: Callable[[ev.Event], object], warn: Callable[[str], None] = lambda said: None,
               cancel: Callable[[str], None] = lambda reason: None) -> Callable[[ev.Event], None]:
    """`emit`, called by one thread at a time. When it raises `Cancelled` (a `CancelToken`'s
    `check()` in the caller's `on_event`, or its own, to stop the run), `cancel` is told its reason:
    the run stops as cancelled, whichever thread sent the event. When it raises anything else (the
    callback broken, an error of ours it met inside included), `warn` is told once and `emit` is
    called no more: a progress display that fails does not take the run, and its result, with it."""
    lock = threading.Lock()
    broken: list[Exception] = []  # the error that broke it, once it has

    def one_at_a_time(event: ev.Event) -> None:
        with lock:
            if broken:
                return
            try:
                emit(event)
                return
            except Cancelled as exc:
                stop = str(exc)
            except Exception as exc:  # noqa: BLE001 -- the caller's callback: any error of theirs
                broken.append(exc)
                stop = None
        if stop is not None:
            cancel(stop)
            return
        warn(f"on_event raised {described(broken[0])} on {type(event).__name__}; it was sent no more events, and "
             "the run went on")

    return one_at_a_time


class Heartbeat:
    """Sends `Spent` from its own thread while the bill grows; `stop` ends it (and sends the last)."""

    def __init__(self, usage: Usage, emit: Callable[[ev.Event], None], *, started: Callable[[], int],
                 every: float = BEAT_S) -> None:
        self._usage, self._emit, self._every = usage, emit, every
        self._started = started  # the units every process of the run started (the start log's length)
        self._told = self._bill()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._told = self._bill()
        self._thread = threading.Thread(target=self._beat, name="agentdescent-heartbeat", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the beat and tell what changed since the last one; again, nothing."""
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
            self.tell()

    def _beat(self) -> None:
        while not self._stopped.wait(self._every):
            self.tell()

    def tell(self) -> None:
        """Send `Spent` when the bill changed since it was last told (asked again after `stop`, once
        the run has settled its bill: what it paid)."""
        now = self._bill()
        if now != self._told:
            self._told = now
            errors = self._usage.errors
            self._emit(ev.Spent(calls=now[0], tokens=now[1], failures=now[2], estimated_tokens=now[3], cost_usd=now[4],
                                unpriced=now[5], failure=errors[0] if errors else None))

    def _bill(self) -> tuple[int, int, int, int, float, int]:
        usage = self._usage
        return (usage.started_calls(self._started()), usage.tokens, usage.failures, usage.estimated_tokens,
                usage.model.cost_usd, usage.unpriced)

"""Stopping a run from outside: a token any thread (or a signal handler) may cancel.

A token is a stop rule: `evolve(stop=[token])` registers the run's pools on the token (its
`on_cancel`), and asks it before each round; `token.cancel()` fails every call
and worker turn still in flight with `Cancelled` at once, so that a run blocked inside a long wave
wakes up, keeps what it committed, closes its ledger and returns. A call that is already running
(a model request, an agent's process) is abandoned on its thread: what it returns later is
dropped, and `evolve` ends it as it returns (`halts`). What it leaves out: deciding what a
cancelled run reports (the loop).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from agentdescent.errors import Cancelled


class CancelToken:
    """`cancel()` once; `cancelled` tells; callbacks registered with `on_cancel` run once each,
    on a thread of their own, so that `cancel()` is safe to call from a signal handler."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._callbacks: list[Callable[[], object]] = []
        self._lock = threading.Lock()
        self.reason = ""

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def cancel(self, reason: str = "cancelled") -> None:
        """Ask the run to stop; the first reason given is the one kept."""
        with self._lock:
            if self._event.is_set():
                return
            self.reason = reason
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        threading.Thread(target=_run_all, args=(callbacks,), name="agentdescent-cancel", daemon=True).start()

    def on_cancel(self, callback: Callable[[], object]) -> Callable[[], None]:
        """Run `callback` when the token is cancelled (at once, on a thread, if it already is); what
        this returns forgets it (a run over: a token kept for many runs holds none of their pools)."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._forget(callback)
        threading.Thread(target=callback, name="agentdescent-cancel", daemon=True).start()
        return lambda: None

    def _forget(self, callback: Callable[[], object]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)

    def wait(self, timeout: float | None = None) -> bool:
        """True once cancelled; False when `timeout` passed first."""
        return self._event.wait(timeout)

    def check(self) -> None:
        """Raise `Cancelled` when the token is cancelled."""
        if self._event.is_set():
            raise Cancelled(self.reason)

    def __call__(self, progress: object, usage: object) -> None:
        """As a stop rule: a cancelled token ends the run, as cancelled, before its next round."""
        self.check()


def _run_all(callbacks: list[Callable[[], object]]) -> None:
    for callback in callbacks:
        callback()

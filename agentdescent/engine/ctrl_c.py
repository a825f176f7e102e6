"""Ctrl-C during `evolve` on the main thread: the KeyboardInterrupt Python raises, and a cancel that
wakes every wait of the run even where that interrupt is lost.

Python raises KeyboardInterrupt in whatever the main thread runs at that instant; in a finalizer
(a git object's `__del__` at a garbage collection) it is printed and dropped, and the run would go
on to its end as if no one had asked it to stop. So while `caught(token)` holds, a Ctrl-C also
cancels `token` (one of the run's stop rules, which abandons every call in flight with
`Cancelled(CTRL_C)`), and the loop reads that as the interrupt. Left out: a program that set a
SIGINT handler of its own (the run store's runner, say), which keeps it, and other threads (only
the main thread can set one).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator

from agentdescent.engine.calls.cancel import CancelToken

CTRL_C = "interrupted (Ctrl-C)"


@contextlib.contextmanager
def caught(token: CancelToken) -> Iterator[None]:
    """For the length of the block, a Ctrl-C cancels `token` with `CTRL_C` as it raises KeyboardInterrupt."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def interrupted(signum: int, frame: object) -> None:
        token.cancel(CTRL_C)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)

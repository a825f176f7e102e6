"""Every socket wait of an httpx client bounded by a deadline the calling thread sets.

httpx applies its timeouts to each operation (each read, each write), so a server that sends a
byte now and then never times out. Here each wait httpcore makes (connect, TLS handshake, read,
write) is cut to the time left before the calling thread's deadline, and none is left once it has
passed: many short waits cannot add up past it. `HTTPModel` sets the deadline around each attempt.
The stop of the run a call is part of (`halts`) ends its waits too: none starts after, and the
socket a read or write waits on is shut down, which wakes it.

    clock = Deadline();  bound_every_socket(client, clock)
    clock.at = time.monotonic() + 30   # this thread's requests on `client` end within 30 s

`timeouts(seconds)` are httpx's own timeouts for a request with that much time left.

Left out: what the call does when the deadline passes (the model's own retry and error).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

from agentdescent import halts

if TYPE_CHECKING:
    import httpx

CONNECT_TIMEOUT = 10.0  # one connection attempt; a server that does not answer is tried again
log = logging.getLogger(__name__)


class Deadline(threading.local):
    """The deadline of the calling thread's current request, if it has one."""

    at: float | None = None  # the time.monotonic() by which this thread's current call must end


def _within(clock: Deadline, timeout: float | None, expired: str) -> float | None:
    """`timeout` cut to the time left before the thread's deadline (with 2 s left, 10.0 and None
    both become 2.0); with none left, or the call's run stopped, httpcore's exception named
    `expired` (e.g. "ReadTimeout")."""
    halted = halts.came(halts.current())
    left = None if clock.at is None else clock.at - time.monotonic()
    if halted or (left is not None and left <= 0):
        import httpcore

        raise getattr(httpcore, expired)(halted or "the call's deadline passed")
    return timeout if left is None else left if timeout is None else min(timeout, left)


class _DeadlineStream:
    """An httpcore network stream whose reads, writes and TLS handshakes wait at most the time left."""

    def __init__(self, stream: Any, clock: Deadline) -> None:
        self._stream, self._clock = stream, clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with halts.ending(halts.current(), self._shut):
            return self._stream.read(max_bytes, _within(self._clock, timeout, "ReadTimeout"))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        with halts.ending(halts.current(), self._shut):
            self._stream.write(buffer, _within(self._clock, timeout, "WriteTimeout"))

    def _shut(self) -> None:
        """Wake the read or write waiting on the socket: it sees the connection end (the base
        class's shutdown, which leaves a TLS socket's state to the thread that uses it)."""
        sock = self._stream.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)

    def start_tls(self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None) -> Any:
        timeout = _within(self._clock, timeout, "ConnectTimeout")
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, timeout), self._clock)


class _DeadlineBackend:
    """An httpcore network backend whose TCP connections are `_DeadlineStream`s (no Unix sockets here)."""

    def __init__(self, backend: Any, clock: Deadline) -> None:
        self._backend, self._clock = backend, clock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    def connect_tcp(self, host: str, port: int, timeout: float | None = None, **options: Any) -> _DeadlineStream:
        timeout = _within(self._clock, timeout, "ConnectTimeout")
        return _DeadlineStream(self._backend.connect_tcp(host, port, timeout=timeout, **options), self._clock)


def bound_every_socket(client: httpx.Client, clock: Deadline) -> None:
    """Wrap the network backend of each pool of `client` (its own, those of environment proxies)."""
    # httpx has no public way to hand its transports an httpcore network backend, though
    # httpcore's pools take one (`ConnectionPool(network_backend=...)`); so this function alone reaches into
    # httpx's `_transport`, `_mounts` and `_pool`, and the pool's `_network_backend`. The
    # trickled-headers test fails if that layout changes.
    found = [getattr(transport, "_pool", None) for transport in (client._transport, *client._mounts.values())]
    pools: list[Any] = [pool for pool in found if hasattr(pool, "_network_backend")]
    for pool in pools:
        pool._network_backend = _DeadlineBackend(pool._network_backend, clock)
    if not pools:
        log.warning("this httpx hides its connection pools: a trickling server is stopped only between bytes")


def timeouts(seconds: float) -> httpx.Timeout:
    """httpx's timeouts for a request with `seconds` left: each wait at most that, a connection
    attempt at most `CONNECT_TIMEOUT` (a server that does not answer is tried again)."""
    import httpx

    return httpx.Timeout(seconds, connect=min(CONNECT_TIMEOUT, seconds))

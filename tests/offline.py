"""A guard against tests reaching beyond this machine, installed for the whole suite by conftest.py.

Every test server here listens on 127.0.0.1; a connection anywhere else means a test would
reach the internet (a real model, a real hub), which the suite must never do. The guard refuses
such a connection before a packet is sent. Subprocesses that tests start are not covered.
"""

from __future__ import annotations

import ipaddress
import socket

_REAL = {"connect": socket.socket.connect, "connect_ex": socket.socket.connect_ex}


def outside_this_machine(family: int, address: object) -> bool:
    """True for an address that is not loopback. outside_this_machine(AF_INET, ("127.0.0.1", 80)) is False."""
    if family not in (socket.AF_INET, socket.AF_INET6) or not isinstance(address, tuple):
        return False
    try:
        return not ipaddress.ip_address(address[0]).is_loopback
    except ValueError:  # a host name: refuse all but localhost rather than guess where it points
        return address[0] != "localhost"


def _guarded(name: str):
    real = _REAL[name]

    def guarded(sock: socket.socket, address: object):
        if outside_this_machine(sock.family, address):
            raise ConnectionRefusedError(f"the test suite may not connect to {address!r}: use a loopback server")
        return real(sock, address)

    guarded.offline_guard = True
    return guarded


def install() -> None:
    for name in _REAL:
        setattr(socket.socket, name, _guarded(name))


def installed() -> bool:
    return all(getattr(getattr(socket.socket, name), "offline_guard", False) for name in _REAL)

"""Processes found by a variable in their environment, whoever their parent is now.

A program can leave one of its own behind in a session of its own (a CLI agent's shell tool starts
its commands so), which no process group reaches; but every process inherits the environment it
was started with, so a mark set there finds them all. A pid names a process only until it ends:
`started_at` reads when it started, so that a pid written down earlier is known to be the same
process still (`is_running`) before it is signalled. Left out: systems without /proc (nothing is
found there, and a pid cannot be told from its successor) and other users' processes (their
environment cannot be read).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

__all__ = ["carrying", "is_running", "kill_carrying", "started_at"]

_PROC = Path("/proc")
_MAX_ENVIRON = 4 * 2**20  # bytes of a process's environment read: well past what exec accepts


def carrying(name: str, value: str) -> list[int]:
    """The pids of the processes whose environment has `name=value`, but for this process and the
    ones it descends from (the shell or service that runs it may carry the mark)."""
    mark = f"\0{name}={value}\0".encode()
    mine = _ancestry()
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(_PROC):
            if entry.name.isdigit() and int(entry.name) not in mine and mark in b"\0" + _environ(entry.name):
                found.append(int(entry.name))
    return found


def kill_carrying(name: str, value: str) -> int:
    """Kill what `carrying` finds; how many there were."""
    pids = carrying(name, value)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def started_at(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since the machine booted (/proc/<pid>/stat's 22nd
    field): what tells it from a later process given the same pid. None when it is gone, a zombie,
    or this system has no /proc."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
        fields = stat.rsplit(")", 1)[1].split()  # the name before it may hold spaces and parentheses
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


def is_running(pid: int, started: int | None) -> bool:
    """Whether `pid` is still the process that started at `started` (`started_at`). Where that
    cannot be told (no start was written down, no /proc here) True: the caller goes by the pid alone."""
    if started is None or started_at(os.getpid()) is None:
        return True
    return started_at(pid) == started


def _environ(pid: str) -> bytes:
    try:
        with open(_PROC / pid / "environ", "rb") as file:
            return file.read(_MAX_ENVIRON)
    except OSError:  # gone since the listing, another user's, or a kernel thread
        return b""


def _ancestry() -> set[int]:
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = (_PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids

"""The programs a run's process left running: agents and graders it started that outlived it.

A run's process that is killed outright (SIGKILL, the kernel's out-of-memory killer, `cancel`
giving up waiting) cannot stop what it started, and a model CLI left running goes on spending;
a program can also leave one of its own behind in a session of its own. Every program a run
starts inherits the run's id in its environment (`RUN_ENV`), so they are found by it, whoever
their parent is now. `stop_left` is called where no process of the run can be alive or still
needs them: when its process starts (an earlier one's), when it ends, and by `cancel`.

Left out: systems without /proc (nothing is found there) and other users' processes (their
environment cannot be read).
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

from agentdescent.runs.store import RUN_ENV

__all__ = ["left_running", "stop_left"]

_PROC = Path("/proc")
_MAX_ENVIRON = 4 * 2**20  # bytes of a process's environment read: well past what exec accepts


def left_running(run_id: str) -> list[int]:
    """The pids of the processes whose environment names run `run_id`, but for this process and
    the ones it descends from."""
    mark = f"\0{RUN_ENV}={run_id}\0".encode()
    mine = _ancestry()
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(_PROC):
            if entry.name.isdigit() and int(entry.name) not in mine and mark in b"\0" + _environ(entry.name):
                found.append(int(entry.name))
    return found


def stop_left(run_id: str) -> int:
    """Kill what `left_running` finds; how many there were."""
    pids = left_running(run_id)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    return len(pids)


def _environ(pid: str) -> bytes:
    try:
        with open(_PROC / pid / "environ", "rb") as file:
            return file.read(_MAX_ENVIRON)
    except OSError:  # gone since the listing, another user's, or a kernel thread
        return b""


def _ancestry() -> set[int]:
    """This process and its ancestors: the shell or service that runs it may carry the run's id."""
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            stat = (_PROC / str(pid) / "stat").read_text(encoding="utf-8", errors="replace")
            pid = int(stat.rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids

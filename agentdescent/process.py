"""Running a helper program to its end, or killing everything it started when it runs too long.

Used by the CLI agents and by external grader programs. A program runs in its own process group
so that a timeout kills its children too, and its stdin is either the given text or closed, so
it can never sit waiting for input. Every program still running is known here, so that a run
being cancelled can kill them all at once (`kill_all`). Left out: retries, streaming output, and
what the output means.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

_running: set[subprocess.Popen[str]] = set()
_running_lock = threading.Lock()
_stopping = False  # set by kill_all: this process is stopping, and starts no program any more


class Stopping(OSError):
    """A program asked to start after `kill_all`: the process is stopping (a cancelled run)."""


@dataclass(frozen=True)
class Finished:
    """A process that ran to its end by itself."""

    returncode: int
    stdout: str
    stderr: str


class TimedOut(Exception):
    """The process outlived its timeout; it and its group were killed. `stderr` is what it wrote."""

    def __init__(self, timeout: float, stderr: str) -> None:
        super().__init__(f"timed out after {timeout:g} s")
        self.stderr = stderr


def run_process(
    argv: Sequence[str], *, timeout: float, stdin: str | None = None, cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None,
) -> Finished:
    """Run `argv` to its end. Raises `TimedOut` after `timeout` seconds (having killed its whole
    process group) and `OSError` when it cannot start (`Stopping` after `kill_all`)."""
    with _running_lock:
        if _stopping:
            raise Stopping(f"not starting {argv[0]}: this process is stopping")
    proc = subprocess.Popen(
        list(argv), cwd=cwd, env=None if env is None else dict(env), text=True, encoding="utf-8",
        errors="replace", stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )
    with _running_lock:
        _running.add(proc)
        stopped = _stopping  # kill_all ran while it started: it missed this one
    if stopped:
        _signal_group(proc)
    try:
        stdout, stderr = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TimedOut(timeout, _stop(proc)) from None
    except BaseException:  # interrupted (Ctrl-C, cancellation): leave nothing running
        _stop(proc)
        raise
    finally:
        with _running_lock:
            _running.discard(proc)
    return Finished(proc.returncode, stdout or "", stderr or "")


def kill_all() -> int:
    """Kill every program `run_process` is running now, with everything each started, and refuse to
    start any more (a call that was about to start one starts none); how many were killed. Their
    callers see them end as killed (a failed call), not hang. For a process that is stopping."""
    global _stopping
    with _running_lock:
        _stopping = True
        procs = list(_running)
    for proc in procs:
        _signal_group(proc)
    return len(procs)


def _signal_group(proc: subprocess.Popen[str]) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, signal.SIGKILL)
        else:  # pragma: no cover - Windows has no process groups to kill
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _stop(proc: subprocess.Popen[str]) -> str:
    """Kill the process and its whole group, reap it, and return what it wrote to stderr."""
    _signal_group(proc)
    try:
        return proc.communicate(timeout=5)[1] or ""
    except subprocess.TimeoutExpired:  # a survivor outside the group still holds the pipes
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        proc.wait()
        return ""

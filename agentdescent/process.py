"""Running a helper program to its end, or killing everything it started when it runs too long or
prints too much.

Used by the CLI agents and by external grader programs. A program runs in its own process group
so that a timeout kills its children too (asked to stop first, `_GRACE_SECONDS` before they are
killed: a CLI agent removes what it keeps of a live session in the user's home), and when it ends, what it left running in a session of
its own is killed too (found by a mark in their environment, `procscan`); its stdin is either
the given text or closed, so it can never sit waiting for input. What it prints is read as it comes, with a bound: past
`max_output` bytes on stdout the whole group is killed; stderr keeps its last `max_output`
bytes. Every program still running is known here, so that a process being stopped can kill them
all at once (`kill_all`); a program started in a run's call is ended with it when that run stops
(`halts`), and none starts in it after. Left out: retries, streaming output to the caller, and
what the output means.
"""

from __future__ import annotations

import contextlib
import io
import os
import secrets
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from agentdescent import halts
from agentdescent.errors import Killed, OutputTooLarge, Stopping, TimedOut
from agentdescent.procscan import kill_carrying

__all__ = ["DEFAULT_MAX_OUTPUT", "Finished", "Killed", "OutputTooLarge", "Stopping", "TimedOut", "kill_all",
           "run_process", "started"]

DEFAULT_MAX_OUTPUT = 16 * 2**20  # bytes of stdout (and of stderr's tail) kept: ample for a grader
_CHUNK = 2**16
_REAP_SECONDS = 5.0  # how long a killed group is given to let go of the pipes
_GRACE_SECONDS = 5.0  # how long a group asked to stop (SIGTERM) has to tidy up before it is killed
_LINGER_SECONDS = 2.0  # how long what a program started may hold its pipes once it ended
_REAPED_SECONDS = 0.5  # and, its group killed, how long the pipes may take to close
CALL_ENV = "AGENTDESCENT_CALL"  # in a program's environment: the call it belongs to

_running: set[subprocess.Popen[bytes]] = set()
_running_lock = threading.Lock()
_stopping = False  # set by kill_all: this process is stopping, and starts no program any more
_started = 0  # programs started so far


@dataclass(frozen=True)
class Finished:
    """A process that ran to its end by itself."""

    returncode: int
    stdout: str
    stderr: str


def run_process(
    argv: Sequence[str], *, timeout: float, stdin: str | None = None, cwd: str | os.PathLike | None = None,
    env: Mapping[str, str] | None = None, max_output: int = DEFAULT_MAX_OUTPUT,
) -> Finished:
    """Run `argv` to its end; its output comes back as UTF-8 text (undecodable bytes replaced,
    newlines as \\n). Raises `TimedOut` after `timeout` seconds and `OutputTooLarge` once stdout
    passes `max_output` bytes (both `Killed`: its whole process group was killed first), and
    `OSError` when it cannot start (`Stopping` after `kill_all`, or once the run of the calling
    context stopped). Stderr past `max_output` bytes keeps only its last `max_output` bytes; a
    program its run's halt ended returns as it ended, killed."""
    global _started
    with _running_lock:
        if _stopping:
            raise Stopping(f"not starting {argv[0]}: this process is stopping")
    call = secrets.token_hex(8)  # marks what the program starts, wherever it goes (`procscan`)
    starting = _Starting(call)
    with halts.ending(halts.current(), starting.end) as halted:
        if halted:
            raise Stopping(f"not starting {argv[0]}: {halted}")
        with starting:
            proc = starting.proc = subprocess.Popen(
                list(argv), cwd=cwd, env={**(os.environ if env is None else env), CALL_ENV: call},
                stdin=subprocess.DEVNULL if stdin is None else subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.PIPE, start_new_session=True,
            )
        with _running_lock:
            _running.add(proc)
            _started += 1
            stopped = _stopping  # kill_all ran while it started: it missed this one
        if stopped:
            _end_group(proc)
        try:
            return _outcome(proc, stdin, timeout, max_output)
        except BaseException:  # interrupted (Ctrl-C, cancellation): leave nothing running
            _kill(proc)
            raise
        finally:
            with _running_lock:
                _running.discard(proc)
            kill_carrying(CALL_ENV, call)  # what it left running in a session of its own (a shell tool's commands)


def started() -> int:
    """How many programs `run_process` started in this process."""
    return _started


def kill_all() -> int:
    """Kill every program `run_process` is running now, with everything each started, and refuse to
    start any more (a call that was about to start one starts none); how many were killed. Their
    callers see them end as killed (a failed call), not hang. For a process that is stopping."""
    global _stopping
    with _running_lock:
        _stopping = True
        procs = list(_running)
    for proc in procs:
        _end_group(proc)
    return len(procs)


class _Starting:
    """A program being started, which its run's halt ends with what it left in a session of its
    own: one the halt comes for while it starts is waited for, else it could start once the run
    (and the whole program, which ends its threads) had let go of it."""

    def __init__(self, call: str) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.call, self._over = call, threading.Event()

    def __enter__(self) -> _Starting:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._over.set()  # started, or failed to

    def end(self) -> None:
        """Once it started (if it does), ask its group to stop and kill what it left elsewhere."""
        if self._over.wait(_GRACE_SECONDS) and self.proc is not None:
            _end_group(self.proc)
            kill_carrying(CALL_ENV, self.call)


class _Reader(threading.Thread):
    """Reads one pipe to its end and keeps at most `limit` bytes of it: the first ones, calling
    `overflow` once when more come (and reading no further), or else the last ones."""

    def __init__(self, pipe: IO[bytes] | None, limit: int, *, overflow: Callable[[], None] | None = None) -> None:
        super().__init__(daemon=True)
        # `run` opens both outputs as pipes, buffered (Popen's default), so each has `read1`
        assert isinstance(pipe, io.BufferedReader), f"a pipe of run's, not {pipe!r}"
        self.pipe, self.limit, self.overflow = pipe, limit, overflow
        self.kept, self.passed = bytearray(), False

    def run(self) -> None:
        try:
            while chunk := self.pipe.read1(_CHUNK):
                self.kept += chunk
                if len(self.kept) > self.limit and self.overflow is not None:
                    self.passed = True
                    self.overflow()
                    return
                if len(self.kept) > 2 * self.limit:  # trimmed now and then, so keeping the tail stays cheap
                    del self.kept[:-self.limit]
        except (OSError, ValueError):  # the pipe broke or was closed: what was read stands
            pass
        finally:
            self.pipe.close()

    def text(self) -> str:
        kept = bytes(self.kept[-self.limit:])
        return kept.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")


def _outcome(proc: subprocess.Popen[bytes], stdin: str | None, timeout: float, max_output: int) -> Finished:
    """Feed stdin, read both outputs, and wait for the process and its pipes, within `timeout`."""
    deadline = time.monotonic() + timeout
    out = _Reader(proc.stdout, max_output, overflow=lambda: _end_group(proc))
    err = _Reader(proc.stderr, max_output)
    out.start()
    err.start()
    if stdin is not None:
        threading.Thread(target=_feed, args=(proc.stdin, stdin.encode("utf-8")), daemon=True).start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise TimedOut(timeout, _stop(proc, err)) from None
    # It ended, but a process it started may still hold the pipes: given a moment to let go, the
    # rest of its group is killed. One that left the group (a session of its own) may hold them on;
    # what the program wrote before it ended is read by then, and stands.
    _join((out, err), min(time.monotonic() + _LINGER_SECONDS, deadline))
    if out.is_alive() or err.is_alive():
        _signal_group(proc)
        _join((out, err), time.monotonic() + _REAPED_SECONDS)
    if out.passed:
        raise OutputTooLarge(max_output, err.text())
    return Finished(proc.returncode, out.text(), err.text())


def _join(readers: tuple[_Reader, ...], until: float) -> None:
    for reader in readers:  # one deadline for them all: each waiting its own would add up
        reader.join(_left(until))


def _left(deadline: float) -> float:
    return max(0.0, deadline - time.monotonic())


def _feed(pipe: IO[bytes], data: bytes) -> None:
    """Write `data` to the program's stdin and close it; a program may end without reading it all."""
    try:
        pipe.write(data)
    except OSError:
        pass
    finally:
        try:
            pipe.close()
        except OSError:
            pass


def _signal_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    try:
        if hasattr(os, "killpg"):
            os.killpg(proc.pid, sig)
        else:  # pragma: no cover - Windows has no process groups to kill
            proc.kill()
    except (ProcessLookupError, PermissionError):
        pass


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """Ask the process's group to stop, and kill it `_GRACE_SECONDS` later whatever it did (on a
    timer: the caller does not wait)."""
    _signal_group(proc, signal.SIGTERM)
    timer = threading.Timer(_GRACE_SECONDS, _signal_group, (proc,))
    timer.daemon = True
    timer.start()


def _kill(proc: subprocess.Popen[bytes]) -> None:
    """Ask the process and its whole group to stop, kill them once it ended or the grace ran out,
    and reap it."""
    _signal_group(proc, signal.SIGTERM)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=_GRACE_SECONDS)
    _signal_group(proc)  # what it started, however the program itself ended
    with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL not yet delivered (a process stuck in the kernel)
        proc.wait(timeout=_REAP_SECONDS)


def _stop(proc: subprocess.Popen[bytes], err: _Reader) -> str:
    """Kill the process and its whole group and return what it wrote to stderr. A survivor
    outside the group may still hold the pipes: their readers are left to end with it."""
    _kill(proc)
    err.join(_REAP_SECONDS)
    return err.text()

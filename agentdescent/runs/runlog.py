"""The run's log: what the run's process and the programs it starts print, on its way to `run.log`.

`capture()` points the process's stdout and stderr (file descriptors 1 and 2, which every program
it starts inherits: a `python:` agent's `subprocess.run`, a grader's command) at a pipe, and a
thread of its own reads that pipe and writes `run.log`. Each line is redacted (`agents.redact`,
every key in every form), what a terminal would act on rather than show (ESC, a bidi override) is
written as its escape (`quoting.shown`: `cat run.log` shows `\\x1b]0;...`, it never retitles the
window), and bytes that are not UTF-8 as `\\xff`. Lines are written whole: a key that reached the
pipe in two writes is redacted whole; a line longer than `LINE_CHARS` is written in parts, cut
where no key is. After `LOG_CHARS` characters one line says the rest is dropped, and the pipe is
still read, so that nothing that prints ever waits on a full log.

`Captured.close()`, as the process ends: its own ends of the pipe close, what they wrote is read
and written (a last line without its newline too), and the reader stops. A program the run
started that outlives it loses the rest of what it prints: it holds the pipe's other end, and its
next write fails (EPIPE; SIGPIPE ends a program that does not ignore it). That is chosen over
giving such programs the log file itself, which would keep what they print from redaction.

Left out: a key split across two lines, and a line of a process killed outright (SIGKILL) that
was not yet written; what the log is shown through (no command prints it).
"""

from __future__ import annotations

import codecs
import os
import select
import sys
import threading
from collections.abc import Callable

from agentdescent.agents.redact import located, redact
from agentdescent.quoting import shown

LOG_CHARS = 16 << 20  # characters of the run's log kept
LINE_CHARS = 1 << 16  # of a line not yet ended, held before a part of it is written
KEY_ROOM = 4_096  # characters of a long line held back at a cut: no key, in any form, is longer
CLOSE_SECONDS = 5.0  # how long close waits for what is left in the pipe
_CHUNK = 1 << 16
_POLL_SECONDS = 0.05


class Captured:
    """The log's writer: `feed` it bytes as they come (`start` reads a pipe on a thread of its own
    that does), `close` or `finish` it at the end. `write(bytes)` puts text in the log (in the run's
    process, the file descriptor of `run.log`)."""

    def __init__(self, write: Callable[[bytes], None]) -> None:
        self._write = write
        self._decode = codecs.getincrementaldecoder("utf-8")(errors="backslashreplace")
        self._held = ""  # the line not yet ended
        self._left = LOG_CHARS
        self._lock = threading.Lock()
        self._done = False
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    def feed(self, data: bytes) -> None:
        with self._lock:
            if self._done:
                return
            text = self._held + self._decode.decode(data)
            end = text.rfind("\n") + 1
            if end == 0 and len(text) > LINE_CHARS:  # a line without end: written in parts, none cutting a key
                end = _cut(text)
            self._held = text[end:]
            self._put(text[:end])

    def end(self, wait: float = -1) -> None:
        """Write the line not yet ended, and nothing more; given up after `wait` seconds (-1: none)
        when the reader holds the log (a disk that does not answer)."""
        if not self._lock.acquire(timeout=wait):
            return
        try:
            if not self._done:
                self._put(self._held + self._decode.decode(b"", final=True))
                self._held, self._done = "", True
        finally:
            self._lock.release()

    def _put(self, text: str) -> None:
        if not text or self._left <= 0:
            return
        text = shown(redact(text))[:self._left]
        self._left -= len(text)
        if self._left <= 0:
            text += f"\n[the run's log reached {LOG_CHARS >> 20} million characters: what is printed after this is dropped]\n"
        try:
            self._write(text.encode("utf-8", "backslashreplace"))
        except OSError:  # a full disk: the line is lost, and the pipe is read on all the same
            pass

    def _lost(self, exc: Exception) -> None:
        try:
            self._write(f"\n[a part of the run's log could not be written: {type(exc).__name__}]\n".encode())
        except OSError:
            pass

    def start(self, fd: int) -> None:
        """Read the pipe `fd` on a thread of its own from now on."""
        self._thread = threading.Thread(target=self.read, args=(fd,), name="agentdescent-run-log", daemon=True)
        self._thread.start()

    def read(self, fd: int) -> None:
        """Read the pipe `fd` until every writer has closed it, or until `close` was asked and it
        holds nothing more; then write the last line. Never writes to stdout or stderr: they are
        this pipe, and a full pipe would wait on this very thread."""
        try:
            while True:
                # asked before looking: what was written before `close` asked is in the pipe by then
                closing = self._closing.is_set()
                ready, _, _ = select.select([fd], [], [], 0 if closing else _POLL_SECONDS)
                if not ready:
                    if closing:
                        break
                    continue
                data = os.read(fd, _CHUNK)
                if not data:
                    break
                try:
                    self.feed(data)
                except Exception as exc:  # noqa: BLE001 -- the pipe is read on whatever happens: a full one stops every writer
                    self._lost(exc)
        finally:
            self.end()

    def close(self) -> None:
        """As the process ends: its own stdout and stderr flushed and closed (to /dev/null), then
        `finish`. Once: a second call does nothing."""
        if self._closing.is_set():
            return
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        os.close(null)
        self.finish()

    def finish(self) -> None:
        """Once this process no longer writes to the pipe: what it holds read and written, and the
        last line, within `CLOSE_SECONDS`; a program that still holds the pipe is not waited for."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join(CLOSE_SECONDS)
        self.end(wait=CLOSE_SECONDS)  # a reader still busy (a program that outlives the run writes on): what it holds, written now


def capture() -> Captured:
    """Route this process's stdout and stderr, and its children's, through a `Captured` into what
    stderr was (the run's log, which `detach` opened); `sys.stdout` becomes `sys.stderr`, so that
    what is printed reaches the log in the order it was printed."""
    log = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    os.close(write_end)
    captured = Captured(lambda data: _write_all(log, data))
    captured.start(read_end)
    sys.stdout = sys.stderr
    return captured


def _cut(text: str) -> int:
    """Where to cut a long line: `KEY_ROOM` characters before its end, or earlier, at the start of
    a key the cut would split."""
    cut = len(text) - KEY_ROOM
    for _, start, end in located(text):
        if start < cut < end:
            return start or cut  # a "key" as long as the line (whitespace between its characters): cut all the same
    return cut


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data):]

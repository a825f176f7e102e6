"""An append-only file of JSON lines, added to from any thread and written behind.

A run of many workers finishes rollouts in bursts on hundreds of threads; were each to take a
lock and write its line, the contended lock would hand the interpreter to another thread and
back, and that, not the write, would be most of what the journal cost a rollout. So a rollout's
thread only puts its entry on a queue; a thread of the journal's own turns the entries into
lines and writes them at most `FLUSH_S` after the first of them was added, and `flush` writes
whatever is queued at once (before a checkpoint that counts the lines). A kill loses at most
`FLUSH_S` of entries, whose rollouts a resumed run pays for again.

`StartLog` is the other kind of append-only file: one byte a call, written before the call
starts, so that what a killed process started is still on the run's bill.
"""

from __future__ import annotations

import errno
import json
import os
import queue
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from agentdescent.errors import UserError

FLUSH_S = 0.1  # the longest an entry waits in memory before it is written


class Journal:
    """Entries appended to `path` as JSON lines; `lines` counts those written so far, `added` those
    taken (written, or queued for the next write)."""

    def __init__(self, path: Path, line: Callable[[Any], dict]) -> None:
        self.path = path
        self.lines = 0
        self.added = 0  # exact when adds do not race: the evaluator journals under the usage's lock
        self._line = line  # an entry as the dict its line holds (made on the writing thread)
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._due = threading.Event()  # entries wait in the queue
        self._lock = threading.Lock()  # the file, and the counting of what reached it
        self._file: TextIO | None = None
        self._writer: threading.Thread | None = None
        self._closed = False
        self._failed: OSError | None = None  # a write behind that failed: the next flush raises it

    def add(self, entry: Any) -> None:
        """Queue `entry` (from any thread; it takes no lock but the first time after each write).
        Once the journal is closed, nothing: what arrives then is a late answer."""
        if self._closed:
            return
        self.added += 1
        self._queue.put(entry)
        if not self._due.is_set():
            if self._writer is None:
                self._start()
            self._due.set()

    def start_at(self, lines: int) -> None:
        """The file holds `lines` lines and nothing is queued (a new run's journal, or a resumed one's read back)."""
        self.lines = self.added = lines

    def flush(self) -> None:
        """Write every entry queued so far, now; an `OSError` (a full disk) is raised."""
        with self._lock:
            if self._failed is not None:
                failed, self._failed = self._failed, None
                raise failed
            entries = []
            while True:
                try:
                    entries.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            if not entries:
                return
            # ASCII escapes: a model's reply may hold a lone surrogate, which no UTF-8 spells
            text = "".join(json.dumps(self._line(e)) + "\n" for e in entries)
            if self._file is None:
                self.path.parent.mkdir(exist_ok=True)
                self._file = self.path.open("a", encoding="utf-8")
            self._file.write(text)
            self._file.flush()
            self.lines += len(entries)

    def close(self) -> None:
        """Write what is queued and close the file; on a full disk what could not be written is lost
        (its rollouts are run again on resume) and closing says nothing of it."""
        self._closed = True
        self._due.set()
        try:
            self.flush()
        except OSError:
            pass
        with self._lock:
            if self._file is not None:
                try:
                    self._file.close()
                except OSError:
                    pass
                self._file = None

    def _start(self) -> None:
        with self._lock:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_behind, name="agentdescent-journal", daemon=True)
                self._writer.start()

    def _write_behind(self) -> None:
        while not self._closed:  # read after each write: a close during the gathering below ends it there
            self._due.wait()
            time.sleep(FLUSH_S)  # the entries of a burst, gathered into one write
            self._due.clear()  # before the queue is read: an entry added from here on sets it again
            try:
                self.flush()
            except OSError as exc:  # a full disk: the next checkpoint's flush raises it, which stops the run
                self._failed = exc


class StartLog:
    """One byte appended for each call as it starts, with one unbuffered write to a file opened
    for appending: cheap enough for every call, and in the kernel's hands before the call runs, so
    that a SIGKILL cannot lose it. Its size is how many calls every process of the run started."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None
        self._lock = threading.Lock()

    def mark(self) -> None:
        with self._lock:
            if self._fd is None:
                self._fd = _opened(self.path)
            os.write(self._fd, b".")

    def count(self) -> int:
        """The calls started: the file's size, where it is a regular file (a link is not followed)."""
        try:
            info = os.lstat(self.path)
        except OSError:
            return 0
        return info.st_size if stat.S_ISREG(info.st_mode) else 0

    def reset(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def _opened(path: Path) -> int:
    """The start log opened to append; `UserError` for anything but a regular file of its own (a
    link would be written through, a FIFO waited on)."""
    path.parent.mkdir(exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENXIO):
            raise
        fd = -1
    if fd < 0 or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd >= 0:
            os.close(fd)
        raise UserError(f"the run's start log {path} is not a regular file of its own (a link, a FIFO); move this "
                        "run's folder out of the store to go on")
    return fd

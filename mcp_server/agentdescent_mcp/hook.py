"""`agentdescent-hook session-start`: one line per active run, for a host's SessionStart hook.

A host runs it at the start of every session, so it must be fast and quiet: it reads each run's
`status.json` in the store with the standard library alone (no import of `agentdescent`, which
costs most of a second), prints nothing when no run is active, and never fails the session (a
store it cannot read is no runs). A run is active while its status says starting or running and
its process holds the run's lock; the rules are those of `agentdescent.runs.store`, and a test
keeps the two in step.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import stat
import sys
from pathlib import Path

LIVE = ("starting", "running")
STATUS_BYTES = 4 << 20  # as `agentdescent.runs.store.FILE_BYTES`


def active_runs(store: Path) -> list[dict]:
    """The status of every run in `store` whose process is alive, oldest first."""
    found = []
    try:
        folders = sorted(p for p in store.iterdir() if p.is_dir())
    except OSError:
        return []
    for folder in folders:
        try:
            status = json.loads(_small_file(folder / "status.json"))
        except (OSError, ValueError, RecursionError):
            continue
        if isinstance(status, dict) and status.get("state") in LIVE and _alive(folder / "lock"):
            found.append(status)
    return sorted(found, key=lambda s: s.get("created") or 0)


def line(status: dict) -> str:
    waiting = f"; waiting on {status['waiting_on']}" if status.get("waiting_on") else ""
    return (f"agentdescent: run {status.get('id')} is {status.get('state')} on {status.get('target')} "
            f"(round {status.get('round', 0)} of {status.get('rounds', '?')}){waiting}; "
            f"the status tool (or {command('status', str(status.get('id')))}) tells more")


def command(*args: str) -> str:
    """A suggested command line, quoted as `agentdescent.commands.command` quotes it."""
    return shlex.join(["agentdescent", *args])


def _small_file(path: Path) -> bytes:
    """A regular file of at most STATUS_BYTES, never through a symlink nor waited on (a FIFO put
    there must not stall the host's session); OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > STATUS_BYTES:
            raise OSError(f"{path} is not a run's status")
        return os.read(fd, STATUS_BYTES)
    finally:
        os.close(fd)


def _alive(lock: Path) -> bool:
    try:
        fd = os.open(lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
    return False


def _store() -> Path:
    home = os.environ.get("AGENTDESCENT_HOME") or str(Path.home() / ".agentdescent")
    return Path(home).expanduser() / "runs"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["session-start"]:
        print("usage: agentdescent-hook session-start", file=sys.stderr)
        return 2
    for status in active_runs(_store()):
        print(line(status))
    return 0


if __name__ == "__main__":
    sys.exit(main())

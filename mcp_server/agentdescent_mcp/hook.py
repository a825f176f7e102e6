"""`agentdescent-hook session-start`: one line per active run, for a host's SessionStart hook.

A host runs it at the start of every session, so it must be fast and quiet: it reads each run's
`status.json` in the store with the standard library alone (no import of `agentdescent`, which
costs most of a second), prints nothing when no run is active, and never fails the session (a
store it cannot read is no runs). A run is active while its status says starting or running and
its process holds the run's lock (the pid and start its status names are still a process, as
`agentdescent.procscan.is_running` tells); the rules are those of `agentdescent.runs.store`, and a test
keeps the two in step: a run is a folder named as the store names one, and the fields printed are
checked as `RunStatus` checks them and as the run's own (its id the folder's name, its target the
spec's): a live run whose status fails is named damaged.

What it prints reaches the host's model as the session's context, so nothing of a status is
printed as it is: the run is named by its folder, the target and what it waits on are quoted as
`agentdescent.quoting` quotes (one line, control and invisible characters gone, cut short; not
redacted, which needs the package), each line is cut to LINE_CHARS and at most RUNS runs are named.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shlex
import stat
import sys
from pathlib import Path

LIVE = ("starting", "running")
FILE_BYTES = 4 << 20  # as `agentdescent.runs.store.FILE_BYTES`
RUN_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")  # as `agentdescent.runs.store._RUN_ID`
RUNS = 10  # runs named; the rest counted
LINE_CHARS = 600
QUOTE_CHARS = 200
_READ_PAST = 4_096  # as `agentdescent.quoting._KEY_ROOM`: a quote reads this far past its limit
# as `agentdescent.invisible.INVISIBLE`: what a reader does not see, which a quote flattens to a space
_INVISIBLE = (
    r"\x00-\x1f\x7f-\x9f\xad\u034f\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u115f\u1160\u17b4\u17b5"
    r"\u180b-\u180f\u200b-\u200f\u2028-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufffb"
    r"\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
)
_CONTROL = re.compile(f"[{_INVISIBLE}\\s]+")
_MARKS = str.maketrans({"«": "‹", "»": "›"})


def active_runs(store: Path) -> list[dict]:
    """The status of every run in `store` whose process is alive, oldest first: its checked fields,
    or {"id": folder, "damaged": True} for one that does not read as a run's status."""
    found = []
    try:
        folders = sorted(p for p in store.iterdir() if RUN_ID.fullmatch(p.name) and not p.is_symlink() and p.is_dir())
    except OSError:
        return []
    for folder in folders:
        status = _status(folder)
        if (status is None or status["state"] in LIVE and _running(status)) and _alive(folder / "lock"):
            found.append(status or {"id": folder.name, "damaged": True, "created": 0.0})
    return sorted(found, key=lambda s: s["created"])


def _status(folder: Path) -> dict | None:
    """The fields the hook reads of `folder`'s status, checked as `RunStatus` checks them; None when it
    cannot be read or one of them fails."""
    try:
        status = json.loads(_small_file(folder / "status.json"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(status, dict):
        return None
    fields = {"id": str, "state": str, "target": str, "round": int, "rounds": int, "created": (int, float),
              "waiting_on": (str, type(None)), "pid": (int, type(None)), "pid_start": (int, type(None))}
    defaults = {"id": "", "state": "starting", "target": "", "round": 0, "rounds": 0, "created": 0.0, "waiting_on": None,
                "pid": None, "pid_start": None}
    checked = {name: status.get(name, defaults[name]) for name in fields}
    if any(not isinstance(value, fields[name]) for name, value in checked.items()):
        return None
    if checked["id"] != folder.name or checked["target"] != _spec_target(folder):
        return None  # another run's status, copied in: its target is not this run's
    return checked


def _spec_target(folder: Path) -> str | None:
    """The target `folder`'s spec names, which its status must name too (as the store's `sealed.own`
    checks); None when the spec cannot be read."""
    try:
        spec = json.loads(_small_file(folder / "spec.json"))
    except (OSError, ValueError, RecursionError):
        return None
    return spec.get("target") if isinstance(spec, dict) else None


def line(status: dict) -> str:
    """What the hook says of one run of `active_runs`, at most LINE_CHARS characters."""
    run = status["id"]
    if status.get("damaged"):
        said = f"agentdescent: run {run} is live, but its status.json is damaged; {command('status', run)} says more"
    else:
        waiting = f"; waiting on {quoted(status['waiting_on'])}" if status.get("waiting_on") else ""
        said = (f"agentdescent: run {run} is {status.get('state')} on {quoted(status.get('target', ''))} (round "
                f"{status.get('round', 0)} of {status.get('rounds', '?')}){waiting}; the status tool (or "
                f"{command('status', run)}) tells more")
    return said if len(said) <= LINE_CHARS else said[:LINE_CHARS] + "..."


def quoted(text: str) -> str:
    """`text` quoted as `agentdescent.quoting.quoted` quotes it, but for redaction: «one line, cut...»."""
    flat = _CONTROL.sub(" ", text[: QUOTE_CHARS + _READ_PAST]).strip().translate(_MARKS)
    return f"«{flat[:QUOTE_CHARS]}{'...' if len(flat) > QUOTE_CHARS or len(text) > QUOTE_CHARS + _READ_PAST else ''}»"


def lines(runs: list[dict]) -> list[str]:
    """A line for each of the first RUNS runs, and one that counts the rest."""
    more = len(runs) - RUNS
    rest = [f"agentdescent: ... and {more} more active runs; the runs tool (or {command('runs')}) lists them"]
    return [line(status) for status in runs[:RUNS]] + (rest if more > 0 else [])


def command(*args: str) -> str:
    """A suggested command line, quoted as `agentdescent.commands.command` quotes it."""
    return shlex.join(["agentdescent", *args])


def _small_file(path: Path) -> bytes:
    """A regular file of at most FILE_BYTES, never through a symlink nor waited on (a FIFO put
    there must not stall the host's session); OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > FILE_BYTES:
            raise OSError(f"{path} is not a run's status")
        return os.read(fd, FILE_BYTES)
    finally:
        os.close(fd)


def _running(status: dict) -> bool:
    """Whether the process `status` names is still the run's (as `agentdescent.procscan.is_running`):
    True where that cannot be told, the lock's word then standing alone."""
    pid, started = status["pid"], status["pid_start"]
    if pid is None or started is None or _started_at(os.getpid()) is None:
        return True
    return _started_at(pid) == started


def _started_at(pid: int) -> int | None:
    """As `agentdescent.procscan.started_at`: /proc/<pid>/stat's 22nd field; None for a zombie or no /proc."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8", errors="replace").rsplit(")", 1)[1].split()
        return None if fields[0] in ("Z", "X") else int(fields[19])
    except (OSError, ValueError, IndexError):
        return None


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
    for said in lines(active_runs(_store())):
        # a lone surrogate (JSON may hold one) cannot be written as UTF-8: it is replaced, never a failure
        sys.stdout.buffer.write((said + "\n").encode("utf-8", "replace"))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())

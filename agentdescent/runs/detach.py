"""Starting a run's process so that it outlives its caller, and stopping it.

`spawn` starts `python -m agentdescent.runs.runner` in a session of its own (no terminal, its own
process group, stdin closed, output to the run's log), so that the CLI call, the MCP server and
the host session may all end while it goes on. `stop` asks it to cancel (SIGTERM), waits for it
to let go of its lock, and kills it if it does not, with the programs it started; a pid whose
process is gone is never signalled, since another process may have it now. Left out: what the run
does (the runner) and the bookkeeping of the store.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

from agentdescent import procscan
from agentdescent.runs import leftovers, origin
from agentdescent.runs.store import RunDir

STOP_GRACE_SECONDS = 15.0  # a cancelled run closes its ledger well within this


def spawn(run: RunDir, spec_file: str | os.PathLike | None = None) -> int:
    """Start the run's process; its pid. The run's lock is taken here and handed to the process, so
    the run is alive from this moment on (no window in which a starting run looks dead); a run
    whose lock someone holds is refused with a `UserError`. The first start records where the run
    was started from (`origin`): the caller's folder, where the run works (see the runner) once the
    process has started, and `spec_file`, the spec file it was started from, if any. The process
    starts in the run's own folder, so that nothing in the caller's (a folder named like a module,
    a planted `json.py`) is imported before the run's own code."""
    origin.write(run, spec_file)
    fd = run.lock()
    try:
        with run.appending("run.log", binary=True) as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "agentdescent.runs.runner", str(run.path), "--lock-fd", str(fd)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                pass_fds=(fd,), cwd=run.path,  # not the caller's folder: a file there must not shadow a module
            )
    finally:
        os.close(fd)  # the child holds the same lock through its copy
    # Reap it if this process outlives it (the MCP server does); if not, init adopts it.
    threading.Thread(target=proc.wait, name=f"agentdescent-reap-{run.id}", daemon=True).start()
    return proc.pid


def stop(run: RunDir, pid: int | None, started: int | None = None, *, grace: float = STOP_GRACE_SECONDS) -> bool:
    """Cancel the run's process and wait for it to end; True when it ended by itself, False when
    it had to be killed (with its whole process group) or was gone already. `pid` is signalled
    only while it is the process that started at `started` (`procscan.is_running`; the status
    writes both): once that process is gone the pid may be another program's, and what still
    holds the run's lock is a program the run left, stopped as the others are."""
    if pid is None or not run.alive():
        return True
    if procscan.is_running(pid, started):
        _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not run.alive():
                return True
            time.sleep(0.05)
        if procscan.is_running(pid, started):  # checked again: it may have ended during the grace
            _signal(-pid, signal.SIGKILL)  # the runner leads its own group, but its agents each have their own
        while procscan.is_running(pid, started) and run.alive() and time.monotonic() < deadline + 5:
            time.sleep(0.05)
    leftovers.release(run)
    return False


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        if pid < 0:
            os.killpg(-pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass

"""The programs a run's process left running: agents and graders it started that outlived it.

A run's process that is killed outright (SIGKILL, the kernel's out-of-memory killer, `cancel`
giving up waiting) cannot stop what it started, and a model CLI left running goes on spending.
Every program a run starts inherits the run's folder in its environment (`RUN_FOLDER_ENV`; the id
alone would be shared by a copy of the folder in another store), so they are found by it
(`procscan`), whoever their parent is now. `stop_left` is called where no process of the
run can be alive or still needs them: when its process starts (an earlier one's), when it ends,
and by `cancel`. One of them may hold the run's lock after its process is gone (a child forked
without exec keeps it): `release`, before a resume takes the lock, stops them and waits for it.
"""

from __future__ import annotations

import os
import time

from agentdescent.procscan import carrying, kill_carrying
from agentdescent.runs.store import RUN_FOLDER_ENV, RunDir

__all__ = ["left_running", "mark", "release", "stop_left"]


def mark(run: RunDir) -> str:
    """What `RUN_FOLDER_ENV` holds in `run`'s programs: its folder's real path, however reached."""
    return os.path.realpath(run.path)


def left_running(run: RunDir) -> list[int]:
    """The pids of the processes whose environment names `run`'s folder, but for this process and
    the ones it descends from."""
    return carrying(RUN_FOLDER_ENV, mark(run))


def stop_left(run: RunDir) -> int:
    """Kill what `left_running` finds; how many there were."""
    return kill_carrying(RUN_FOLDER_ENV, mark(run))


def release(run: RunDir, wait: float = 5.0) -> bool:
    """Whether `run`'s lock is free, its left programs stopped (`stop_left`) when they may hold it,
    within `wait` seconds (its process, as it ends, lets go within them too)."""
    if not run.alive():
        return True
    stop_left(run)
    deadline = time.monotonic() + wait
    while run.alive():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True

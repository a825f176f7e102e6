"""The programs a run's process left running: agents and graders it started that outlived it.

A run's process that is killed outright (SIGKILL, the kernel's out-of-memory killer, `cancel`
giving up waiting) cannot stop what it started, and a model CLI left running goes on spending.
Every program a run starts inherits the run's id in its environment (`RUN_ENV`), so they are found
by it (`procscan`), whoever their parent is now. `stop_left` is called where no process of the
run can be alive or still needs them: when its process starts (an earlier one's), when it ends,
and by `cancel`.
"""

from __future__ import annotations

from agentdescent.procscan import carrying, kill_carrying
from agentdescent.runs.store import RUN_ENV

__all__ = ["left_running", "stop_left"]


def left_running(run_id: str) -> list[int]:
    """The pids of the processes whose environment names run `run_id`, but for this process and
    the ones it descends from."""
    return carrying(RUN_ENV, run_id)


def stop_left(run_id: str) -> int:
    """Kill what `left_running` finds; how many there were."""
    return kill_carrying(RUN_ENV, run_id)

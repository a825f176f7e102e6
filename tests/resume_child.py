"""The resume test's run, killed with SIGKILL at a chosen point: inside the nth rollout, or at the
nth round's event of a kind (`Committed` comes after the commit and the round's checkpoint).

Usage: python resume_child.py STORE rollout|EVENT N
"""

from __future__ import annotations

import itertools
import os
import signal
import sys
from pathlib import Path

from agentdescent import evolve
from tests.test_resume import keyword_reward, keyword_run, keyword_run_options, keyword_tasks


def main() -> None:
    store, where, when = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    count = itertools.count(1)

    def run(rendered, task):
        if where == "rollout" and next(count) == when:
            os.kill(os.getpid(), signal.SIGKILL)
        return keyword_run(rendered, task)

    def on_event(event) -> None:
        if type(event).__name__ == where and event.round == when:
            os.kill(os.getpid(), signal.SIGKILL)

    evolve(keyword_tasks(), keyword_reward, **{**keyword_run_options(store), "run": run}, on_event=on_event)


if __name__ == "__main__":
    main()

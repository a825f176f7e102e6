"""`accept` of a finished run, SIGKILLed right after the write-back's second file: the fault
test's half-done write. Usage: python accept_child.py RUN_ID (the store from AGENTDESCENT_HOME).
Only files inside the run's target count, not the record and journal of its backup."""

from __future__ import annotations

import itertools
import os
import signal
import sys
from pathlib import Path

from agentdescent import atomic
from agentdescent.runs import Service

_write = atomic.write_bytes_in
_count = itertools.count(1)
_target = Path(Service().status(sys.argv[1]).target).absolute()


def write_then_die(root, rel, *args, **kwargs):
    _write(root, rel, *args, **kwargs)
    if (Path(root) / rel).absolute().is_relative_to(_target) and next(_count) == 2:
        os.kill(os.getpid(), signal.SIGKILL)


atomic.write_bytes_in = write_then_die
Service().accept(sys.argv[1])

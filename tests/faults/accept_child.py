"""`accept` of a finished run, SIGKILLed right after the write-back's second file: the fault
test's half-done write. Usage: python accept_child.py RUN_ID (the store from AGENTDESCENT_HOME)."""

from __future__ import annotations

import itertools
import os
import signal
import sys

from agentdescent import atomic
from agentdescent.runs import Service

_write = atomic.write_bytes
_count = itertools.count(1)


def write_then_die(*args, **kwargs):
    _write(*args, **kwargs)
    if next(_count) == 2:
        os.kill(os.getpid(), signal.SIGKILL)


atomic.write_bytes = write_then_die
Service().accept(sys.argv[1])

"""What the run-store tests share: waiting for a detached run (the isolated store is conftest's `service`)."""

from __future__ import annotations

import time

import pytest

from agentdescent.runs import Service
from agentdescent.runs.status import LIVE


def wait(service: Service, run_id: str, *, until=lambda s: s.state not in LIVE, timeout: float = 90.0):
    """Poll the run's status until `until(status)`; the status. A run still going after `timeout` fails the test."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = service.status(run_id)
        if until(status):
            return status
        time.sleep(0.1)
    log = service.store.get(run_id).file("run.log")
    pytest.fail(f"run {run_id} is still {status.state} after {timeout} s; its log: {log.read_text()[-2000:]}")

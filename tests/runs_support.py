"""What the run-store tests share: an isolated store, and waiting for a detached run."""

from __future__ import annotations

import time

import pytest

from agentdescent.runs import Service
from agentdescent.runs.status import LIVE


@pytest.fixture
def service(tmp_path, monkeypatch):
    """A service on a store of the test's own; every run still live at the end is cancelled."""
    monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(_repository_root())  # runs import `tests.keyword_domain` from where they start
    made = Service()
    yield made
    for run in made.runs():
        if run.state in LIVE:
            made.cancel(run.id)


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


def _repository_root():
    from pathlib import Path

    return Path(__file__).resolve().parents[1]

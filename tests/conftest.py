"""Suite-wide set-up: no connection beyond this machine (offline.py), every temporary folder in
pytest's own temporary tree, and the fixtures the tests share (their doubles are in doubles.py)."""

from __future__ import annotations

import tempfile

import pytest

from agentdescent.artifacts.strategies import AppendRules
from agentdescent.engine.evaluation import Evaluator, Usage
from agentdescent.engine.executors import ThreadExecutor
from tests import offline
from tests.doubles import CountingRun, exact


def pytest_configure(config) -> None:  # noqa: ANN001 - pytest's hook signature
    offline.install()


@pytest.fixture(autouse=True)
def temporary_folders_under_pytest(tmp_path_factory, monkeypatch):
    """A run without `store=` keeps its ledger in a new temporary folder: here, that folder is one
    of pytest's own (for child processes too), which pytest cleans up, rather than the machine's."""
    folder = tmp_path_factory.mktemp("tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))


@pytest.fixture
def pool():
    """A call pool, shut down after the test whatever happened."""
    executor = ThreadExecutor(16)
    yield executor
    executor.shutdown()


@pytest.fixture
def make_evaluator(pool):
    """make_evaluator(run=CountingRun(), reward=exact) -> an Evaluator on the test's pool, rendering
    states as a "Rules:" playbook."""

    def make(run=None, reward=exact) -> Evaluator:
        return Evaluator(strategy=AppendRules(header="Rules:"), run=run or CountingRun(), reward=reward, pool=pool,
                         usage=Usage())

    return make

"""Suite-wide set-up: no connection beyond this machine (offline.py), every temporary folder in
pytest's own temporary tree, and the fixtures the tests share (their doubles are in doubles.py)."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agentdescent.agents.redact import DEBUG_HTTP_ENV
from agentdescent.artifacts.strategies import AppendRules
from agentdescent.engine.calls.evaluation import Evaluator
from agentdescent.engine.calls.executors import ThreadExecutor
from agentdescent.errors import UserError
from agentdescent.runs import Service
from agentdescent.runs.status import LIVE
from agentdescent.usage import Usage
from tests import offline
from tests.doubles import CountingRun, exact


def pytest_configure(config) -> None:  # noqa: ANN001 - pytest's hook signature
    offline.install()
    config.add_cleanup(_python3_first_on_path())
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # Started in the background (`cmd &` in a script, nohup), the suite inherits Ctrl-C ignored, and
        # every program a test starts would too: a handler here is reset to the default in each of them.
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _python3_first_on_path() -> Callable[[], None]:
    """`python3` on PATH is the interpreter running the suite, for the stand-in CLIs of
    tests/fake_clis (`#!/usr/bin/env -S python3 -S`): a version manager's shim found first (pyenv's
    runs a dozen shell scripts before Python starts) would cost each of their thousands of calls."""
    folder = Path(tempfile.mkdtemp(prefix="agentdescent-tests-python3-"))
    (folder / "python3").symlink_to(os.path.realpath(sys.executable))
    os.environ["PATH"] = f"{folder}{os.pathsep}{os.environ.get('PATH', '')}"
    return lambda: shutil.rmtree(folder, ignore_errors=True)


def pytest_make_parametrize_id(config, val, argname):  # noqa: ANN001, ANN201 - pytest's hook signature
    """A long text parameter is named by its start and length: pytest puts the test's id in the
    environment of every child process (PYTEST_CURRENT_TEST), where one over 128 KB makes exec fail."""
    if isinstance(val, str) and len(val) > 60:
        return f"{val[:24]!r}...({len(val)} chars)"
    return None


@pytest.fixture(autouse=True)
def temporary_folders_under_pytest(tmp_path_factory, monkeypatch):
    """A run without `store=` keeps its ledger in a new temporary folder: here, that folder is one
    of pytest's own (for child processes too), which pytest cleans up, rather than the machine's."""
    folder = tmp_path_factory.mktemp("tmp")
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))


@pytest.fixture(autouse=True)
def agentdescent_home_under_pytest(tmp_path_factory, monkeypatch):
    """`$AGENTDESCENT_HOME` (the run store, the record of backups) in pytest's temporary tree, for
    child processes too, so that no test reads or writes the real ~/.agentdescent; a fixture that
    needs its own home (`service`) sets it again after this one."""
    monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path_factory.mktemp("agentdescent-home")))


# what would point a client at a real provider, a proxy or a key: a test that builds clients clears them
PROVIDER_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "DEEPSEEK_API_KEY",
                "DEEPSEEK_BASE_URL", "HF_TOKEN", "HF_ENDPOINT", DEBUG_HTTP_ENV, "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY",
                "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture
def no_provider_env(monkeypatch):
    """None of the machine's keys, endpoints or proxies: the test sets what it needs."""
    for name in PROVIDER_ENV:
        monkeypatch.delenv(name, raising=False)


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


@pytest.fixture
def service(tmp_path, monkeypatch):
    """A service on a store of the test's own, runs started from the repository root (where the
    specs' python: refs import from); every run still live at the end is cancelled, and none may
    outlive its cancel."""
    monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(Path(__file__).resolve().parents[1])  # runs import `tests.keyword_domain` from where they start
    made = Service()
    yield made
    for run in made.runs():
        if run.state in LIVE:
            try:
                made.cancel(run.id)
            except UserError:
                pass  # it ended by itself meanwhile
    # A run that wrote its end may still be exiting (the interpreter's shutdown); one cancelled is
    # already gone, since cancel waits for it. On a loaded machine the first can take a while.
    deadline = time.monotonic() + 15
    while (alive := [run.id for run in made.store.all() if run.alive()]) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive, "a run's process outlived its cancel, or its end by 15 s"

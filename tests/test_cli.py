"""The `agentdescent` command, run as a real subprocess."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def agentdescent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentdescent", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env={"PATH": "/usr/bin:/bin", "COLUMNS": "120", "TMPDIR": tempfile.gettempdir()})


def test_demo_runs_offline_and_leaves_a_git_ledger(tmp_path):
    store = tmp_path / "ledger"
    done = agentdescent("demo", "--workers", "4", "--rounds", "10", "--store", str(store))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Held-out reward" in out and "The learned change" in out and "What became of each diff" in out
    assert "+- When a request mentions" in out  # the diff shows rules that were learned
    assert str(store) in out
    log = subprocess.run(["git", "-C", str(store), "log", "--format=%s", "dev"], capture_output=True, text=True)
    subjects = log.stdout.splitlines()
    assert subjects[-1] == "ledger created" and subjects[-2] == "seed artifact"
    assert any(s.startswith("step ") for s in subjects)


def test_demo_other_strategies_run():
    for strategy in ("keyed", "single"):
        done = agentdescent("demo", "--strategy", strategy, "--workers", "3", "--rounds", "3")
        assert done.returncode == 0, done.stderr
        assert "Held-out reward" in done.stdout


def test_bad_store_is_a_clear_error(tmp_path):
    not_a_ledger = tmp_path / "file.txt"
    not_a_ledger.write_text("hello", encoding="utf-8")
    done = agentdescent("demo", "--store", str(not_a_ledger))
    assert done.returncode == 1
    assert "error:" in done.stdout and "is a file" in done.stdout


def test_no_command_prints_help():
    done = agentdescent()
    assert done.returncode == 2 and "demo" in done.stdout
    bad = agentdescent("demo", "--strategy", "nope")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr

"""The benchmark scripts run as documented, at a size small enough for the suite.

They print measurements rather than assert them (wall time on a shared machine is noise); what
is checked here is that each one runs against the current API and prints the line
docs/results.md quotes, so that a change of signature cannot leave a benchmark broken unseen.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.host_clis import host_bin

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("script", "args", "expected"),
    [
        ("aggregator_step.py", ["--keys", "10", "--steps", "3"], "per committed step"),
        ("ledger_commit.py", ["10", "5"], "commits of 1-3 changed keys"),
        ("long_run.py", ["--lengths", "3"], "a round, first tenth -> last tenth"),
        ("speedup.py", ["--signals", "1", "--per-signal", "4", "--seeds", "0", "--rollout-ms", "0",
                        "--propose-ms", "0", "--workers", "2"], "speed-up to held-out 1.0"),
        ("speedup.py", ["--signals", "1", "--per-signal", "4", "--seeds", "0", "--rollout-ms", "1",
                        "--propose-ms", "1", "--workers", "2", "--asynchronous", "--latency", "lognormal"],
         "asynchronous vs synchronous"),
        ("speedup_bound.py", ["--runs", "3"], "rounds to learn every rule"),
        ("speedup_bound.py", ["--runs", "3", "--noise", "0", "0.3"], "learn every rule in"),
        ("async_scaling.py", ["--workers", "1", "2", "--latency-ms", "1", "--steps", "3", "--tasks", "50"], "efficiency"),
        ("gate_cost.py", ["--workers", "2", "--signals", "1", "--per-signal", "4", "--seeds", "0", "--rollout-ms", "0",
                          "--propose-ms", "0", "--split", "16"], "acceptance calls per committed rule"),
        ("gate_error_rates.py", [], "P(accept)"),
        ("gate_error_rates.py", ["--noise", "--seeds", "2", "--p", "0.85", "--flip", "0"], "harmful (plain)"),
        ("noisy_gate.py", ["--seeds", "0", "--workers", "2", "--rounds", "2", "--systems", "ours", "oracle", "--reword", "0.5",
                           "--rollout-ms", "0", "--reflect-ms", "0"], "median calls: ours/oracle"),
        ("journal_cost.py", ["--workers", "2", "--seeds", "0", "--repeats", "1", "--signals", "1", "--per-signal", "4",
                             "--rollout-ms", "0", "--propose-ms", "0"], "shipped / bookkeeping off"),
        ("service.py", ["--repeats", "1", "--rounds", "3", "--status-calls", "20"], "detached-run overhead"),
        ("startup.py", ["--repeats", "1"], "MCP server: start, initialize, tools/list"),
        ("folder_memory.py", ["--bulk-files", "1", "--rounds", "1"], "peak per byte of target"),
        ("thread_waves.py", ["--sizes", "8", "16", "--repeats", "1"], "ThreadPoolExecutor"),
        ("ray_overhead.py", ["--sizes", "4", "--repeats", "1"], "with one taken back warm"),
        ("call_cost.py", ["--waves", "2", "--states", "4", "--tasks", "4", "--latency-ms", "1"], "us of CPU a rollout"),
        ("tree_rollout.py", ["--files", "10", "--seeds", "0", "--latency-ms", "0", "--rounds", "1", "--workers", "2",
                             "--repeats", "3"],
         "skill folder to held-out 1.0"),
        ("tree_rollout.py", ["--noise", "--seeds", "0", "--latency-ms", "0", "--noisy-rounds", "1", "--workers", "2"],
         "| 2 |"),
        ("host_cost.py", ["--tasks", "12", "--workers", "2", "--rounds", "1", "--seeds", "0"],
         "median of 1: host requests"),
        ("host_cost.py", ["--host", "codex", "--tasks", "8", "--workers", "1", "--rounds", "1", "--seeds", "0"],
         "median of 1: host requests"),
    ],
)
def test_benchmark_runs(script, args, expected):
    if script == "host_cost.py":  # through the pinned Claude Code or Codex; skipped where it is not installed
        host = args[args.index("--host") + 1] if "--host" in args else "claude"
        args = [*args, f"--{host}", str(host_bin(host))]
    # A temporary folder of a short name: Ray puts its sockets under it, and a socket's path may
    # not pass 107 bytes (pytest's own folders, under xdist, come near that).
    short = Path(tempfile.mkdtemp(prefix="bench-", dir="/tmp"))
    try:
        done = subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                              timeout=120, cwd=ROOT, env={**os.environ, "TMPDIR": str(short)})
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-2000:]
    assert expected in done.stdout

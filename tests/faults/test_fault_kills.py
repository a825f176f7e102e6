"""SIGKILL at seeded random points of a run: the ledger stays whole, nothing committed is lost, and
the next run on the store continues. The points fall in rollouts, aggregator steps (between a
commit's objects and its ref update), validation and promotion, as the timing lands them. The
clock starts at the run's first event, not at the child's start, so that a slow import on a busy
machine does not move the kills before the ledger exists."""

from __future__ import annotations

import os
import random
import select
import signal
import subprocess
import sys
from pathlib import Path

from agentdescent import evolve
from agentdescent.ledger import Ledger
from agentdescent.testing import RouterReflector, demo_strategy, route, route_reward, router_tasks

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
KILLS = 8


def history(store: Path) -> list[tuple[int, str]]:
    with Ledger(store) as ledger:
        return [(r.version, r.sha) for r in ledger.log()]


def test_a_run_killed_at_random_points_loses_nothing_and_resumes(tmp_path):
    rng = random.Random(20261201)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    killed, survived, lost, promoted = 0, 0, 0, 0
    for kill in range(KILLS):
        store = tmp_path / f"ledger-{kill}"
        child = subprocess.Popen([sys.executable, str(HERE / "kill_child.py"), str(store), str(kill)], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        readable, _, _ = select.select([child.stdout], [], [], 60)
        started = bool(readable) and child.stdout.readline().strip() == "started"
        try:
            child.wait(timeout=rng.uniform(0.1, 1.8) if started else 0)  # somewhere in the run
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGKILL)
            killed += 1
        _, stderr = child.communicate()
        assert started, f"the child did not start its run within 60 s: {stderr}"
        fsck = subprocess.run(["git", "-C", str(store), "fsck", "--strict", "--no-dangling"], capture_output=True,
                              text=True)
        assert fsck.returncode == 0, fsck.stdout + fsck.stderr
        before = history(store)
        assert [v for v, _ in before] == list(range(len(before) - 1, -1, -1))  # one unbroken history
        with Ledger(store) as ledger:
            stable = ledger.stable()
        resumed = evolve(router_tasks(kill, signals=8, per_signal=4), route_reward, run=route,
                         propose=RouterReflector("append", seed=kill), strategy=demo_strategy("append"), rounds=1,
                         n_workers=2, seed=kill, store=store)
        after = history(store)
        lost += len(set(before) - set(after))
        survived += resumed.error is None and resumed.initial_version == stable
        promoted += stable >= 1
    print(f"kills: {killed} of {KILLS} runs killed ({promoted} after a promotion), {survived} resumed from the "
          f"stable version they left, {lost} commits lost")
    assert killed == KILLS and (survived, lost) == (KILLS, 0)

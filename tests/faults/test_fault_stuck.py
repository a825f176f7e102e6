"""Calls that never return: a timeout turns them into failures, and Ctrl-C stops the run with its result."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from agentdescent import UserError, evolve
from tests.doubles import year_program

HERE = Path(__file__).parent
ROOT = HERE.parents[1]


def test_a_hanging_run_and_a_hanging_propose_are_failures_under_rollout_timeout(tmp_path):
    tasks, reward, run, propose = year_program()
    forever = threading.Event()

    def hanging_run(rendered, task):
        if task.id == "t3":
            forever.wait()  # never set: this call never returns on its own
        return run(rendered, task)

    def hanging_propose(rendered, task, output, r):
        if task.id == "t4":
            forever.wait()
        return propose(rendered, task, output, r)

    started = time.perf_counter()
    result = evolve(tasks, reward, run=hanging_run, propose=hanging_propose, rounds=3, n_workers=2,
                    rollout_timeout=0.3, store=tmp_path / "ledger")
    assert result.error is None and time.perf_counter() - started < 30
    assert any("rollout_timeout=0.3" in error for error in result.usage.errors)
    assert result.usage.failures >= 1 and result.final_reward > result.initial_reward  # t3 fails for good
    timed_out = [o for o in result.outcome_list if "propose took longer" in o.reason]
    assert all(o.kind == "error" for o in timed_out)


@pytest.mark.parametrize("bad", [0, -1, "5"])
def test_a_bad_timeout_is_refused(bad):
    tasks, reward, run, propose = year_program()
    with pytest.raises(UserError, match="rollout_timeout"):
        evolve(tasks, reward, run=run, propose=propose, rollout_timeout=bad)


def test_ctrl_c_stops_a_stuck_run_cleanly_with_its_result(tmp_path):
    """The rollouts hang for good after the first commit and there is no timeout: Ctrl-C (SIGINT)
    must still end evolve with a result, and the program with it, promptly."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, str(HERE / "stuck_child.py"), str(tmp_path / "ledger")],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 60)
        assert ready and child.stdout.readline().strip() == "committed"
        time.sleep(0.3)  # let the validation's rollouts hang
        child.send_signal(signal.SIGINT)
        try:
            out, err = child.communicate(timeout=20)
        except subprocess.TimeoutExpired:  # say where every thread of it is, to find the hang
            child.send_signal(signal.SIGUSR1)
            time.sleep(1)
            child.kill()
            pytest.fail(f"the run did not end within 20 s of Ctrl-C; its threads:\n{child.communicate()[1][-12000:]}")
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert "stop reason: interrupted (Ctrl-C); error: interrupted; committed: 1" in out


def test_a_ctrl_c_the_kernel_hands_to_a_worker_thread_still_stops_the_run(tmp_path):
    """Python runs signal handlers in the main thread only, and a process's SIGINT may land on any
    of its threads: one that lands on a hanging rollout's thread must still end the run (seen in
    a loaded suite as a run that ignored its Ctrl-C; here the child sends it to such a thread)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, str(HERE / "stuck_child.py"), str(tmp_path / "ledger"),
                              "--ctrl-c-to-a-worker"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
    try:
        out, err = child.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGUSR1)
        time.sleep(1)
        child.kill()
        pytest.fail(f"the run did not end on its Ctrl-C; its threads:\n{child.communicate()[1][-12000:]}")
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert "stop reason: interrupted (Ctrl-C); error: interrupted; committed: 1" in out

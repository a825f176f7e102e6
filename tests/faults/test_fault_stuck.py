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

from agentdescent import Budget, UserError, evolve
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
                    budget=Budget(rollout_timeout=0.3), store=tmp_path / "ledger")
    assert result.error is None and time.perf_counter() - started < 30
    assert any("rollout_timeout=0.3" in error for error in result.usage.errors)
    assert result.usage.failures >= 1 and result.final_reward > result.initial_reward  # t3 fails for good
    timed_out = [o for o in result.outcome_list if "propose took longer" in o.reason]
    assert all(o.kind == "error" for o in timed_out)


@pytest.mark.parametrize("bad", [0, -1, "5"])
def test_a_bad_timeout_is_refused(bad):
    tasks, reward, run, propose = year_program()
    with pytest.raises(UserError, match="rollout_timeout"):
        evolve(tasks, reward, run=run, propose=propose, budget=Budget(rollout_timeout=bad))


def _stuck_child(tmp_path, *flags: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, str(HERE / "stuck_child.py"), str(tmp_path / "ledger"), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _ended_interrupted(child: subprocess.Popen, timeout: float) -> None:
    """The child ends within `timeout` seconds with the result of an interrupted run; if it does
    not, the test fails with every thread's stack (the child dumps them on SIGUSR1)."""
    try:
        try:
            out, err = child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGUSR1)
            time.sleep(1)
            child.kill()
            pytest.fail(f"the run did not end within {timeout:g} s of its Ctrl-C; its threads:\n"
                        f"{child.communicate()[1][-12000:]}")
    finally:
        child.kill()
    assert child.returncode == 0, err
    assert "stop reason: interrupted (Ctrl-C); error: interrupted; committed: 1" in out


def test_ctrl_c_stops_a_stuck_run_cleanly_with_its_result(tmp_path):
    """The rollouts hang for good after the first commit and there is no timeout: Ctrl-C (SIGINT)
    must still end evolve with a result, and the program with it, promptly."""
    child = _stuck_child(tmp_path)
    try:
        ready, _, _ = select.select([child.stdout], [], [], 60)
        assert ready and child.stdout.readline().strip() == "committed"
        time.sleep(0.3)  # let the validation's rollouts hang
        child.send_signal(signal.SIGINT)
    except BaseException:
        child.kill()
        raise
    _ended_interrupted(child, timeout=20)


def test_a_ctrl_c_the_kernel_hands_to_a_worker_thread_still_stops_the_run(tmp_path):
    """Python runs signal handlers in the main thread only, and a process's SIGINT may land on any
    of its threads: one that lands on a hanging rollout's thread must still end the run (seen in
    a loaded suite as a run that ignored its Ctrl-C; here the child sends it to such a thread)."""
    _ended_interrupted(_stuck_child(tmp_path, "--ctrl-c-to-a-worker"), timeout=60)

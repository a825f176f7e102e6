"""A run is alive while its own process holds its lock: a program the run started that outlives its
process, killed outright (the out-of-memory killer), keeps the run neither "running" (to status,
runs and the SessionStart hook) nor from a resume, and a pid its status names is signalled only
while it is still that process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from agentdescent_mcp import hook

from agentdescent import procscan
from agentdescent.runs import detach, leftovers
from agentdescent.runs.status import LIVE
from agentdescent.runs.store import RUN_FOLDER_ENV, RunDir
from tests import keyword_domain as domain
from tests.procutil import gone
from tests.runs_support import wait


def holding(run: RunDir) -> subprocess.Popen:
    """A program of `run` (its mark in its environment) that takes the run's lock once it is free,
    says "held", and keeps it: what a child forked without exec does."""
    code = ("import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR); fcntl.flock(fd, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(300)")
    return subprocess.Popen([sys.executable, "-c", code, str(run.file("lock"))], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, RUN_FOLDER_ENV: leftovers.mark(run)}, start_new_session=True)


def test_a_killed_run_whose_program_kept_its_descriptors_is_interrupted_and_resumes(service, tmp_path, monkeypatch):
    """An agent's program started without closing descriptors (`os.system("cmd &")`) outlived the
    run's process killed outright with the run's lock: the run said running for good and refused a
    resume. It is interrupted, the program named, and a resume stops it and goes on."""
    left = tmp_path / "left"
    left.mkdir()
    monkeypatch.setenv("KEYWORD_LEAVE", str(left))
    monkeypatch.setenv("KEYWORD_LEAVE_FDS", "1")
    monkeypatch.setenv("KEYWORD_DELAY", "0.2")
    run_id = service.start(domain.spec(tmp_path)).run_id
    run = service.store.get(run_id)
    try:
        status = wait(service, run_id, until=lambda s: s.state not in LIVE or (s.pid is not None and any(left.iterdir())))
        os.kill(status.pid, signal.SIGKILL)
        killed = wait(service, run_id, until=lambda s: s.state not in LIVE, timeout=10)
        pids = [int(p.name) for p in left.iterdir()]
        assert killed.state == "interrupted" and "program(s) it started still run" in killed.message
        assert pids and not any(gone(pid, polls=1) for pid in pids)
        assert not run.alive()  # the descriptor of the lock was not theirs to inherit

        monkeypatch.delenv("KEYWORD_LEAVE")
        monkeypatch.setenv("KEYWORD_DELAY", "0")
        service.resume(run_id)
        assert wait(service, run_id, timeout=120).state == "finished"
        assert all(gone(pid) for pid in pids)  # the resumed process stopped them
    finally:
        leftovers.stop_left(run)


def test_a_program_holding_a_dead_runs_lock_leaves_it_interrupted_and_a_resume_stops_it(service, tmp_path, monkeypatch):
    """A program holds the lock after the run's process is gone (a child forked without exec keeps
    it): the run is interrupted, the program named, and a resume stops it before taking the lock."""
    monkeypatch.setenv("KEYWORD_DELAY", "0.2")
    run_id = service.start(domain.spec(tmp_path)).run_id
    run = service.store.get(run_id)
    status = wait(service, run_id, until=lambda s: s.pid is not None or s.state not in LIVE)
    holder = holding(run)
    try:
        os.kill(status.pid, signal.SIGKILL)
        assert holder.stdout.readline() == "held\n" and run.alive()
        # the kernel frees the lock as a killed process closes its files, a moment before it is a zombie
        killed = wait(service, run_id, until=lambda s: s.state != "starting" and s.state != "running", timeout=10)
        assert killed.state == "interrupted" and "program(s) it started still run" in killed.message
        assert hook.active_runs(service.store.root) == []  # the SessionStart hook names it no more

        monkeypatch.setenv("KEYWORD_DELAY", "0")
        service.resume(run_id)  # stops the holder first: the lock is the new process's to take
        assert holder.wait(timeout=10) == -signal.SIGKILL
        assert wait(service, run_id, timeout=120).state == "finished"
    finally:
        holder.kill()
        holder.wait()


def test_a_pid_that_is_no_longer_the_runs_process_is_never_signalled(service, tmp_path):
    """The run's process is gone and its pid is another program's now (pids wrap): status does not
    take that program for the run, and stopping the run signals what the run left, not it."""
    run_id = service.start(domain.spec(tmp_path)).run_id
    wait(service, run_id)
    run = service.store.get(run_id)
    bystander = subprocess.Popen(["sleep", "60"], start_new_session=True)
    holder = holding(run)
    try:
        assert holder.stdout.readline() == "held\n"
        started = procscan.started_at(bystander.pid)
        assert started is not None and procscan.is_running(bystander.pid, started)
        assert not procscan.is_running(bystander.pid, started + 1)
        run.write_status(run.recorded().model_copy(update={"state": "running", "pid": bystander.pid,
                                                           "pid_start": started + 1}))
        assert service.status(run_id).state == "interrupted"

        assert detach.stop(run, bystander.pid, started + 1, grace=1) is False
        assert holder.wait(timeout=10) == -signal.SIGKILL and not run.alive()
        assert bystander.poll() is None
    finally:
        for process in (bystander, holder):
            process.kill()
            process.wait()

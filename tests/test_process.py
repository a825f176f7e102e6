"""run_process: output and exit code back, stdin given or closed, the whole group killed on timeout
or when stdout passes its cap."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time

import pytest

from agentdescent.process import Killed, OutputTooLarge, TimedOut, run_process
from tests.procutil import gone


def test_stdin_text_reaches_the_program_and_output_comes_back():
    done = run_process([sys.executable, "-c", "import sys; print(sys.stdin.read().upper()); sys.exit(3)"],
                       timeout=20, stdin="héllo")
    assert (done.returncode, done.stdout.strip()) == (3, "HÉLLO")


def test_without_stdin_the_program_reads_end_of_file_at_once():
    done = run_process([sys.executable, "-c", "import sys; print(repr(sys.stdin.read()))"], timeout=20)
    assert done.stdout.strip() == "''"


def test_a_timeout_kills_the_program_and_what_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen(['sleep', '60'])\nopen({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "sys.stderr.write('working\\n'); sys.stderr.flush(); time.sleep(60)\n"
    )
    with pytest.raises(TimedOut) as raised:
        run_process([sys.executable, "-c", script], timeout=1)
    assert "working" in raised.value.stderr
    assert gone(int(pid_file.read_text()))


def test_a_timed_out_program_is_asked_to_stop_before_it_is_killed(tmp_path):
    """A CLI agent told to stop (SIGTERM) removes the session files it keeps in the user's home;
    killed outright, it leaves them there for good."""
    tidied = tmp_path / "tidied"
    script = ("import pathlib, signal, sys, time\n"
              f"signal.signal(signal.SIGTERM, lambda *_: (pathlib.Path({str(tidied)!r}).write_text('yes'), sys.exit(0)))\n"
              "print('ready', file=sys.stderr, flush=True); time.sleep(60)\n")
    with pytest.raises(TimedOut):
        run_process([sys.executable, "-c", script], timeout=2)
    assert tidied.read_text() == "yes"


def test_a_program_that_ignores_the_request_to_stop_is_killed_after_the_grace(tmp_path, monkeypatch):
    from agentdescent import process

    monkeypatch.setattr(process, "_GRACE_SECONDS", 1.0)
    pid_file = tmp_path / "pid"
    script = ("import os, signal, time\n"
              f"signal.signal(signal.SIGTERM, signal.SIG_IGN); open({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
              "time.sleep(60)\n")
    with pytest.raises(TimedOut):
        run_process([sys.executable, "-c", script], timeout=2)
    assert gone(int(pid_file.read_text()))


def test_kill_all_ends_every_running_program_and_starts_no_more(monkeypatch):
    """What a cancelled run's process does: the agents it started are killed at once, and a rollout
    that was about to start one starts none."""
    import threading

    from agentdescent import process

    monkeypatch.setattr(process, "_stopping", False)
    ended: list = []
    threads = [threading.Thread(target=lambda: ended.append(process.run_process(["sleep", "30"], timeout=60)))
               for _ in range(3)]
    for thread in threads:
        thread.start()
    while len(process._running) < 3:
        time.sleep(0.01)
    assert process.kill_all() == 3
    for thread in threads:
        thread.join(10)
    assert [f.returncode for f in ended] == [-signal.SIGTERM] * 3
    with pytest.raises(process.Stopping, match="stopping"):
        process.run_process(["true"], timeout=5)


def test_stdout_past_the_cap_kills_the_program_and_what_it_started(tmp_path):
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys, time\n"
        f"child = subprocess.Popen(['sleep', '60'])\nopen({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "sys.stderr.write('flooding\\n'); sys.stderr.flush()\n"
        "for _ in range(400): sys.stdout.buffer.write(b'x' * 65536)\n"
        "time.sleep(60)\n"
    )
    start = time.monotonic()
    with pytest.raises(OutputTooLarge, match="more than 1,000,000 bytes") as raised:
        run_process([sys.executable, "-c", script], timeout=60, max_output=1_000_000)
    assert time.monotonic() - start < 20  # killed on the spot, not at the timeout
    assert isinstance(raised.value, Killed) and raised.value.limit == 1_000_000
    assert "flooding" in raised.value.stderr
    assert gone(int(pid_file.read_text()))


def test_output_up_to_the_cap_comes_back_whole():
    done = run_process([sys.executable, "-c", "import sys; sys.stdout.write('é' * 500)"], timeout=20, max_output=1000)
    assert done.stdout == "é" * 500  # 1,000 bytes: at the cap, not past it


def test_stderr_past_the_cap_keeps_its_tail_and_the_program_its_exit_code():
    script = "import sys\nfor n in range(5000): print(f'warning {n}', file=sys.stderr)\nprint('done'); sys.exit(4)"
    done = run_process([sys.executable, "-c", script], timeout=20, max_output=1000)
    assert (done.returncode, done.stdout) == (4, "done\n")
    assert len(done.stderr.encode("utf-8")) <= 1000 and done.stderr.endswith("warning 4999\n")


def test_stdin_the_program_does_not_read_does_not_block_it():
    done = run_process([sys.executable, "-c", "print('ignored')"], timeout=20, stdin="x" * 2_000_000)
    assert (done.returncode, done.stdout) == (0, "ignored\n")


def test_a_large_stdin_arrives_whole_while_output_is_read():
    script = "import sys; data = sys.stdin.read(); print(len(data)); print('e' * len(data), file=sys.stderr)"
    done = run_process([sys.executable, "-c", script], timeout=20, stdin="x" * 1_000_000)
    assert done.stdout == "1000000\n" and len(done.stderr) == 1_000_001


@pytest.mark.parametrize("own_session", [False, True])
def test_a_program_that_ended_is_not_held_up_by_what_it_left_holding_its_output(tmp_path, own_session):
    """Its answer stands and comes back at once; a child it left is killed, in its group or in a
    session of its own (found by the call's mark in its environment)."""
    pid_file = tmp_path / "child.pid"
    script = (
        "import subprocess, sys\n"
        f"child = subprocess.Popen(['sleep', '60'], start_new_session={own_session})\n"
        f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
        "print('the answer')\n"
    )
    started = time.monotonic()
    done = run_process([sys.executable, "-c", script], timeout=60)
    child = int(pid_file.read_text())
    try:
        assert (done.returncode, done.stdout.strip()) == (0, "the answer")
        assert time.monotonic() - started < 30  # not the whole timeout
        assert gone(child)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child, signal.SIGKILL)

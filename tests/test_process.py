"""run_process: output and exit code back, stdin given or closed, the whole group killed on timeout."""

from __future__ import annotations

import sys
import time

import pytest

from agentdescent.process import TimedOut, run_process
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
    assert [f.returncode for f in ended] == [-9, -9, -9]
    with pytest.raises(process.Stopping, match="stopping"):
        process.run_process(["true"], timeout=5)

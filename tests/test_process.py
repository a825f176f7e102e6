"""run_process: output and exit code back, stdin given or closed, the whole group killed on timeout."""

from __future__ import annotations

import sys

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

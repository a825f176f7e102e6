"""The `agentdescent` command, run as a real subprocess, and `guarded`, which every verb runs through."""

from __future__ import annotations

import argparse
import errno
import io
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from rich.console import Console

from agentdescent import atomic
from agentdescent.cli.guard import guarded, script
from agentdescent.errors import LedgerError, UserError
from agentdescent.ledger import Ledger

ROOT = Path(__file__).resolve().parents[1]
DIFF_ID = re.compile(r"\bd[0-9a-f]{10}\b")
FAST = ("--workers", "4", "--rounds", "10")  # about a second


def agentdescent(*args: str, columns: int = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentdescent", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "COLUMNS": str(columns),
                                            "TMPDIR": tempfile.gettempdir()})


def test_demo_runs_offline_and_leaves_a_git_ledger(tmp_path):
    store = tmp_path / "ledger"
    done = agentdescent("demo", *FAST, "--store", str(store))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "Held-out reward" in out and "The learned change" in out and "What became of each diff" in out
    assert "+- When a request mentions" in out  # the diff shows rules that were learned
    assert f"new ledger at {store}" in out
    log = subprocess.run(["git", "-C", str(store), "log", "--format=%s", "dev"], capture_output=True, text=True)
    subjects = log.stdout.splitlines()
    assert subjects[-1] == "ledger created" and subjects[-2] == "seed artifact"
    assert subjects[-3].startswith("round 1: ")  # rounds are counted from 1, as the user reads them
    with Ledger(store) as ledger:
        rounds = [r.trailers["Round"] for r in ledger.log() if r.trailers.get("Round", "seed") != "seed"]
    assert rounds and min(map(int, rounds)) == 1 and all("Step" not in r.trailers for r in ledger.log())


def test_the_report_explains_itself():
    out = agentdescent("demo", *FAST).stdout
    assert "P(improve)=p (bar b), +w/-l on n tasks: p is the posterior probability" in out
    assert "calls: rollouts and proposals, each one model call for a real model" in out
    assert "time: the evolution alone (the whole command: " in out
    assert re.search(r"--- version 1 \(start\)\n\+\+\+ version (\d+) \(after \d+ commits?\)", out)
    assert "what it means" in out and "the acceptance test did not find it an improvement" in out


def test_piped_at_80_columns_no_path_or_command_is_broken(tmp_path):
    store = tmp_path / "a-ledger-folder-with-a-long-name-so-the-command-cannot-fit-in-eighty-columns"
    out = agentdescent("demo", *FAST, "--store", str(store), columns=80).stdout
    lines = out.splitlines()
    assert f"  git -C {store} log --stat dev" in lines
    assert f"  agentdescent report {store}" in lines
    assert f"new ledger at {store}" in lines and f"Ledger: {store}" in lines
    assert all(len(line) <= 80 for line in lines if str(store) not in line)  # the tables fit


def test_every_diff_is_listed_with_all_diffs(tmp_path):
    store = tmp_path / "ledger"
    some = agentdescent("demo", *FAST, "--store", str(store)).stdout
    hidden = int(re.search(r"(\d+) more diffs? not listed: --all-diffs lists every one", some).group(1))
    every = agentdescent("demo", *FAST, "--all-diffs", "--store", str(tmp_path / "again")).stdout
    assert "not listed" not in every
    assert len(set(DIFF_ID.findall(every))) == len(set(DIFF_ID.findall(some))) + hidden  # same seed, same diffs
    with Ledger(tmp_path / "again") as ledger:
        landed = {d for r in ledger.log() for d in r.trailers.get("Diffs", "").split(",") if d}
    assert landed and landed <= set(DIFF_ID.findall(every))
    assert "adds When a request mentions" in every  # each row shows the rule it proposed


def test_a_removal_reads_as_one():
    """Seed 5 lands a filler rule, then a diff that removes it: the list shows that diff even
    without --all-diffs, although the learned change no longer holds the rule."""
    out = agentdescent("demo", "--seed", "5").stdout
    assert re.search(r"removes When a request mentions '\w+', route it to \w+\.", out)
    assert re.search(r"1 landed diff removed text \(round \d+\)", out)


def test_a_second_run_on_a_store_says_it_continues_and_warns_of_another_strategy(tmp_path):
    store = tmp_path / "ledger"
    assert agentdescent("demo", *FAST, "--store", str(store)).returncode == 0
    again = agentdescent("demo", *FAST, "--store", str(store))
    assert re.search(rf"continuing the ledger at {re.escape(str(store))} from version \d+", again.stdout)
    other = agentdescent("demo", *FAST, "--store", str(store), "--strategy", "keyed", columns=200)
    warnings = [line for line in other.stdout.splitlines() if "AppendRules" in line and "KeyedRules" in line]
    assert len(warnings) == 2  # as it arrives, and again in the report
    assert warnings[0].startswith("warning: ") and "1 warning:" in other.stdout


def test_counts_are_pluralised():
    out = agentdescent("demo", "--workers", "1", "--rounds", "1").stdout
    assert "1 worker, at most 1 round," in out and "1 workers" not in out
    assert "evolving: at most 1 round," in out and "round 1 of 1 done" in out  # a pipe: a line a round, not a bar


def test_demo_other_strategies_run():
    for strategy in ("keyed", "single"):
        done = agentdescent("demo", "--strategy", strategy, "--workers", "3", "--rounds", "3")
        assert done.returncode == 0, done.stderr
        assert "Held-out reward" in done.stdout


def test_bad_store_is_a_clear_error(tmp_path):
    not_a_ledger = tmp_path / "file.txt"
    not_a_ledger.write_text("hello", encoding="utf-8")
    done = agentdescent("demo", "--store", str(not_a_ledger))
    assert done.returncode == 2  # a usage error
    assert done.stderr.startswith(f"error: --store {not_a_ledger} is a file") and "Traceback" not in done.stderr
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.md").write_text("x", encoding="utf-8")
    done = agentdescent("demo", "--store", str(tmp_path / "notes"))
    assert done.returncode == 2 and "holds other files, not a ledger" in done.stderr
    done = agentdescent("demo", "--store", str(not_a_ledger / "ledger"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"error: --store {not_a_ledger / 'ledger'} runs through {not_a_ledger}, a file, not a folder")


def test_flags_are_checked_with_their_own_names():
    for flag in ("--workers", "--rounds"):
        done = agentdescent("demo", flag, "0")
        assert done.returncode == 2 and "Traceback" not in done.stdout + done.stderr
        assert done.stderr.startswith(f"error: {flag} must be a positive whole number; got 0. Try {flag} ")
        assert "n_workers" not in done.stderr and "=" not in done.stderr


def test_debug_shows_the_traceback(tmp_path):
    (tmp_path / "file.txt").write_text("hello", encoding="utf-8")
    done = agentdescent("--debug", "demo", "--store", str(tmp_path / "file.txt"))
    assert done.returncode == 2 and "Traceback" in done.stderr and "error: --store" in done.stderr


def test_no_command_prints_help():
    done = agentdescent()
    assert done.returncode == 2 and "demo" in done.stdout
    bad = agentdescent("demo", "--strategy", "nope")
    assert bad.returncode == 2 and "invalid choice" in bad.stderr


def test_guarded_turns_errors_into_exit_codes(capsys, monkeypatch):
    def failing(error: Exception):
        def command(args: argparse.Namespace, console: Console) -> int:
            raise error
        return command

    quiet = argparse.Namespace(debug=False)
    assert guarded(failing(UserError("--flag is wrong; use --flag 3")), quiet, Console()) == 2
    assert guarded(failing(LedgerError("git failed")), quiet, Console()) == 1
    assert guarded(lambda args, console: 0, quiet, Console()) == 0
    said = capsys.readouterr()
    assert said.err.splitlines() == ["error: --flag is wrong; use --flag 3", "error: git failed"]
    assert guarded(failing(UserError("bad")), argparse.Namespace(debug=True), Console()) == 2
    assert "Traceback" in capsys.readouterr().err
    monkeypatch.setenv("AGENTDESCENT_HOME", "/store")
    read_only = OSError(errno.EROFS, "Read-only file system", "/store/runs/r-1/status.json")
    assert guarded(failing(read_only), quiet, Console()) == 1  # the machine's trouble, not a bug: one line
    assert capsys.readouterr().err.splitlines() == [
        "error: cannot write /store/runs/r-1/status.json in the folder /store/runs/r-1: Read-only file system; free "
        "some space or make the folder writable (or set AGENTDESCENT_HOME to a folder that is) and try again"]
    not_home = PermissionError(errno.EPERM, "Operation not permitted", "/work/ro/sk.agentdescent.yaml")
    assert guarded(failing(not_home), quiet, Console()) == 1  # AGENTDESCENT_HOME moves nothing there: not named
    assert capsys.readouterr().err.splitlines() == [
        "error: cannot write /work/ro/sk.agentdescent.yaml in the folder /work/ro: Operation not permitted; free some "
        "space or make the folder writable and try again"]
    with pytest.raises(OSError):  # any other OSError is a bug: its traceback stays
        guarded(failing(OSError(errno.EBADF, "Bad file descriptor")), quiet, Console())


@pytest.mark.parametrize(("returned", "status"), [(None, 0), (3, 3), ("done", 0), (object(), 0), (True, 0)])
def test_a_program_run_as_the_examples_run_exits_with_its_int_status_and_0_for_anything_else(returned, status, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["program"])
    with pytest.raises(SystemExit) as exited:
        script(lambda: returned)
    assert exited.value.code == status


@pytest.mark.skipif(not Path("/sys/kernel").is_dir(), reason="needs sysfs, where no one may make a file")
def test_a_file_its_folder_refuses_is_named_not_the_temp_file_of_its_atomic_write(capsys):
    def write(args: argparse.Namespace, console: Console) -> int:
        atomic.write_text("/sys/kernel/run.agentdescent.yaml", "x")
        return 0

    assert guarded(write, argparse.Namespace(debug=False), Console()) == 1
    said = capsys.readouterr().err
    assert said.startswith("error: cannot write /sys/kernel/run.agentdescent.yaml in the folder /sys/kernel: ")
    assert ".tmp" not in said and "AGENTDESCENT_HOME" not in said


def test_a_machine_without_git_gets_one_line_saying_so(tmp_path):
    env = {"PATH": str(tmp_path), "HOME": str(tmp_path), "AGENTDESCENT_HOME": str(tmp_path / "home"),
           "TMPDIR": tempfile.gettempdir()}  # no git on PATH
    doctor = subprocess.run([sys.executable, "-m", "agentdescent", "doctor"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120, env=env)
    assert "problem: git is not on PATH" in doctor.stdout and "Traceback" not in doctor.stderr
    demo = subprocess.run([sys.executable, "-m", "agentdescent", "demo"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)
    assert demo.returncode == 2 and "error: git is not on PATH" in demo.stderr and "Traceback" not in demo.stderr


def test_doctor_only_reads_and_asks_each_cli_its_version_once(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name in ("claude", "codex"):
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho asked >> {tmp_path / name}.calls\necho '{name} 1.0'\n", encoding="utf-8")
        script.chmod(0o755)
    home = tmp_path / "not" / "made" / "yet"
    done = subprocess.run([sys.executable, "-m", "agentdescent", "doctor"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env={"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path),
                                            "AGENTDESCENT_HOME": str(home), "TMPDIR": tempfile.gettempdir()})
    assert done.returncode == 0, done.stderr
    assert f"run store: {home / 'runs'} (writable; not there yet: the first run makes it)" in done.stdout
    assert not (tmp_path / "not").exists()  # a mistyped home is not made by being checked
    for name in ("claude", "codex"):
        assert (tmp_path / f"{name}.calls").read_text(encoding="utf-8") == "asked\n"


def test_a_terminal_that_is_not_utf_8_or_a_closed_stdout_gets_output_not_a_traceback():
    base = {**os.environ, "COLUMNS": "120"}
    ascii_only = subprocess.run([sys.executable, "-m", "agentdescent", "demo", "--rounds", "3"], cwd=ROOT,
                                capture_output=True, env={**base, "PYTHONIOENCODING": "ascii"}, timeout=120)
    assert ascii_only.returncode == 0 and b"\\xb1" in ascii_only.stdout and b"Traceback" not in ascii_only.stderr
    closed = subprocess.run(f"{sys.executable} -m agentdescent demo --rounds 3 >&-", shell=True, cwd=ROOT,
                            capture_output=True, env=base, timeout=120)
    assert closed.returncode == 0 and b"Traceback" not in closed.stderr


def test_columns_0_gets_the_default_width_not_silence(tmp_path):
    """Rich takes COLUMNS=0 for a width of nothing and printed nothing at all, errors included."""
    missing = agentdescent("report", str(tmp_path / "missing"), columns=0)
    assert missing.returncode == 2 and missing.stderr.startswith("error: ") and "there is no folder" in missing.stderr
    helped = agentdescent("demo", "--rounds", "2", "--store", str(tmp_path / "ledger"), columns=0)
    assert helped.returncode == 0 and "AgentDescent demo" in helped.stdout


def test_what_would_reorder_or_break_a_printed_line_is_shown_escaped():
    from agentdescent.cli.terminal import coloured, console_for

    out = io.StringIO()
    console_for(out, width=200).print(coloured("+rule \u202eabc\u202c\n+first\u2028sep\n+lone \ud83d\n"), soft_wrap=True)
    assert out.getvalue() == "+rule \\u202eabc\\u202c\n+first\\u2028sep\n+lone \\ud83d\n"


INTERRUPTED_WHILE_IMPORTING = """\
import os, signal, sys
from importlib.abc import MetaPathFinder

class Interrupt(MetaPathFinder):  # Ctrl-C as the verbs are imported, as a user's lands in the first 0.3 s
    def find_spec(self, name, path=None, target=None):
        if name == "agentdescent.cli.verbs":
            os.kill(os.getpid(), signal.SIGINT)
        return None

sys.meta_path.insert(0, Interrupt())
from agentdescent.cli import main
sys.exit(main(["runs"]))
"""


def test_ctrl_c_while_the_verbs_import_ends_quietly_with_130():
    done = subprocess.run([sys.executable, "-c", INTERRUPTED_WHILE_IMPORTING], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stderr) == (130, "interrupted\n")


@pytest.mark.parametrize("closed", ["stdin", "stdout"])
def test_the_mcp_server_with_stdin_or_stdout_closed_says_so(closed):
    redirect = "<&-" if closed == "stdin" else "</dev/null >&-"
    for program, code in (("-m agentdescent mcp", 2), ("-c 'from agentdescent_mcp.server import main; main()'", 1)):
        done = subprocess.run(f"{sys.executable} {program} {redirect}", shell=True, cwd=ROOT, capture_output=True,
                              text=True, timeout=120, env={**os.environ, "PYTHONPATH": f"{ROOT}:{ROOT / 'mcp_server'}"})
        assert done.returncode == code and done.stderr.startswith(
            f"error: the MCP server talks over stdin and stdout, and this process was started with its {closed} closed; "
            "start it with both open"), done.stderr

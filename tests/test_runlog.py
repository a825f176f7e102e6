"""The run's log: what the run's process and the programs it starts print reaches `run.log`
redacted, its terminal escapes shown as text, line by line, capped, and the last line kept."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from agentdescent.runs import runlog
from agentdescent.runs.runlog import Captured
from tests import keyword_domain as domain
from tests.runs_support import wait

KEY = "sk-runlog-7f3a9c2e1b5d4a60"
MARKER = "[redacted OPENAI_API_KEY]"


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


def logged() -> tuple[Captured, list[bytes]]:
    out: list[bytes] = []
    return Captured(out.append), out


def text(out: list[bytes]) -> str:
    return b"".join(out).decode("utf-8")


def test_a_key_split_across_two_writes_of_one_line_is_redacted_whole(key):
    log, out = logged()
    log.feed(f"token {KEY[:7]}".encode())
    assert out == []  # the line is held until it ends
    log.feed(f"{KEY[7:]} sent\nnext".encode())
    assert text(out) == f"token {MARKER} sent\n"
    log.end()
    assert text(out).endswith("\nnext") and KEY not in text(out)  # the last line, without its newline, at the end


def test_terminal_escapes_and_bytes_that_are_not_utf8_are_written_as_text():
    log, out = logged()
    euro = "€".encode()
    log.feed(b"\x1b]0;title\x07\x1b[2J\tdata-\xff.txt " + euro[:1])
    log.feed(euro[1:] + b"\n")  # a character split across two reads is read whole
    assert text(out) == "\\x1b]0;title\\x07\\x1b[2J\tdata-\\xff.txt €\n"


def test_a_line_longer_than_the_hold_is_written_in_parts_none_cutting_a_key(key, monkeypatch):
    monkeypatch.setattr(runlog, "LINE_CHARS", 200)
    monkeypatch.setattr(runlog, "KEY_ROOM", 60)
    log, out = logged()
    line = "x" * 150 + KEY + "y" * 100  # the cut 60 characters before the end falls inside the key
    log.feed(line.encode())
    assert out and KEY[:5] not in text(out)  # written up to the key
    log.feed(b"\n")
    assert text(out) == "x" * 150 + MARKER + "y" * 100 + "\n"


def test_past_the_cap_one_line_says_the_rest_is_dropped(monkeypatch):
    monkeypatch.setattr(runlog, "LOG_CHARS", 22)
    log, out = logged()
    log.feed(b"0123456789\n0123456789\n0123456789\n")
    log.feed(b"more\n")
    log.end()
    assert text(out).startswith("0123456789\n0123456789\n\n[the run's log reached")
    assert text(out).endswith("what is printed after this is dropped]\n")


def test_finishing_writes_what_the_pipe_holds_without_waiting_on_a_program_that_outlives_it(key):
    read_end, write_end = os.pipe()
    log, out = logged()
    log.start(read_end)
    child = subprocess.Popen(["sleep", "30"], stdout=write_end)  # holds the pipe open
    try:
        os.write(write_end, f"last words {KEY}".encode())  # no newline
        os.close(write_end)
        began = time.monotonic()
        log.finish()
        assert time.monotonic() - began < runlog.CLOSE_SECONDS
        assert text(out) == f"last words {MARKER}"
    finally:
        child.kill()
        child.wait()
        os.close(read_end)


def test_what_a_run_and_its_programs_print_reaches_run_log_redacted_and_shown_as_text(service, tmp_path, key):
    spec = domain.spec(tmp_path, scorer="python:tests.failing_scorers:chatty", rounds=1)
    run_id = service.start(spec).run_id
    run = service.store.get(run_id)
    assert wait(service, run_id, timeout=120).state == "finished"
    deadline = time.monotonic() + 3  # the process ends at once: the program still holding its log is not waited for
    while run.alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not run.alive()
    log = run.file("run.log").read_text(encoding="utf-8")
    for line in (f"printed: {MARKER}", f"stderr: Bearer {MARKER}", f"WARNING:somelib:retrying with api_key={MARKER}",
                 f"in two writes: {MARKER} end", f"child: {MARKER}", "\\x1b]0;pwned-title\\x07\\x1b[2J escapes"):
        assert line in log.splitlines(), line
    assert "\x1b" not in log and log.endswith("scored;")  # the last line, without its newline, written at the end
    time.sleep(3.5)  # the program that outlived the run has tried to write by now
    files = [p for p in run.path.rglob("*") if p.is_file()]
    assert [p.name for p in files if KEY.encode() in p.read_bytes()] == []

"""A stopped run ends the calls it had in flight: its CLI agents' processes (stand-in `claude`,
tests/fake_clis, as real subprocesses) and its HTTP requests (a real loopback server), when a
`CancelToken` or a Ctrl-C stops it; another run's calls, and a later run, go on."""

from __future__ import annotations

import math
import os
import secrets
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from agentdescent import CancelToken, Task, claude_code, evolve, halts
from agentdescent.engine.calls.executors import ThreadExecutor
from agentdescent.engine.calls.units import within
from agentdescent.errors import AgentError, Stopping
from agentdescent.process import run_process
from agentdescent.procscan import carrying
from tests.doubles import settles
from tests.loopback import LoopbackServer, Response, openai_chat
from tests.procutil import gone
from tests.test_agents_http import KEY, gpt

FAKES = Path(__file__).parent / "fake_clis"
ROOT = Path(__file__).resolve().parent.parent
MARK = "AGENTDESCENT_TEST_RUN"  # in each stand-in agent's environment: which test run started it
TASKS = [Task(id=f"t{i:02d}", prompt=f"ticket {i}") for i in range(12)]


@pytest.fixture
def marks():
    """A new mark for each run of the test; whatever carries one is killed at the end, whatever happened."""
    made: list[str] = []

    def mark() -> str:
        made.append(secrets.token_hex(6))
        return made[-1]

    yield mark
    for value in made:
        for pid in carrying(MARK, value):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def agent(mark: str, mode: str, tmp_path: Path):
    return claude_code(executable=str(FAKES / "claude"), timeout=120,
                       env={"FAKE_CLI_MODE": mode, "FAKE_CLI_PIDS": str(tmp_path / f"{mark}.json"), MARK: mark})


def runs(model, **options):
    """evolve() on TASKS with `model` as the rollouts' agent, no proposals, one round."""
    return evolve(TASKS, lambda task, output: 1.0, run=lambda rendered, task: model(task.prompt),
                  propose=lambda *a: None, rounds=1, n_workers=1, **options)


def test_a_cancelled_run_kills_its_agents_but_not_another_run_s_and_a_later_run_runs_its_own(tmp_path, marks):
    """Its agents (a `sleep` each beside them) ran on after evolve returned, to their own timeout."""
    mine, other = marks(), marks()
    token, other_token, theirs = CancelToken(), CancelToken(), {}
    background = threading.Thread(target=lambda: theirs.update(result=runs(agent(other, "hang", tmp_path),
                                                                           stop=[other_token])))
    background.start()

    def cancel_when_both_run() -> None:
        settles(lambda: carrying(MARK, mine) and carrying(MARK, other), 60)
        token.cancel("the test's")

    threading.Thread(target=cancel_when_both_run, daemon=True).start()
    try:
        result = runs(agent(mine, "hang", tmp_path), stop=[token])
        still = set(carrying(MARK, other))
        assert result.stop_reason == "cancelled (the test's)"
        assert settles(lambda: not carrying(MARK, mine)), "the cancelled run's agents outlived it"
        assert still and still <= set(carrying(MARK, other)), "the other run's agents were killed with it"
        # what was in flight is on the bill as abandoned, not as rollouts that failed
        assert result.usage.calls == result.usage.abandoned > 0 and result.usage.failures == 0
    finally:
        other_token.cancel("the test is over")
        background.join(60)
    assert theirs["result"].stop_reason == "cancelled (the test is over)"
    assert settles(lambda: not carrying(MARK, other))
    later = agent(marks(), "ok", tmp_path)
    again = runs(later)
    assert again.error is None and later.usage.calls > 0 and later.usage.failures == 0


def test_a_ctrl_c_kills_the_run_s_agents_before_the_program_exits(tmp_path, marks):
    """The script printed its result and exited; every agent it had started ran on."""
    mark = marks()
    program = (
        "import os, signal, sys, threading, time\n"
        "from agentdescent import Task, claude_code, evolve\n"
        "from agentdescent.procscan import carrying\n"
        f"agent = claude_code(executable={str(FAKES / 'claude')!r}, timeout=120, env={{{MARK!r}: {mark!r}}})\n"
        "tasks = [Task(id=f't{i:02d}', prompt=f'ticket {i}') for i in range(12)]\n"
        "def interrupt():  # as soon as one runs: the others are being started\n"
        f"    while not carrying({MARK!r}, {mark!r}):\n"
        "        time.sleep(0.05)\n"
        "    os.kill(os.getpid(), signal.SIGINT)\n"
        "threading.Thread(target=interrupt, daemon=True).start()\n"
        "result = evolve(tasks, lambda t, o: 1.0, run=lambda rendered, task: agent(task.prompt),\n"
        "                propose=lambda *a: None, rounds=1, n_workers=1)\n"
        "print('stopped:', result.stop_reason, flush=True)\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_CLI_MODE": "hang", "FAKE_CLI_PIDS": str(tmp_path / "pids.json")}
    done = subprocess.run([sys.executable, "-c", program], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "stopped: interrupted (Ctrl-C)" in done.stdout
    assert settles(lambda: not carrying(MARK, mark)), "the run's agents outlived the program"


def _client_connections(port: int) -> int:
    """This machine's TCP connections to `port` still open at the client's end (/proc/net/tcp:
    ESTABLISHED or CLOSE_WAIT, the server gone but the client's socket not closed)."""
    with open("/proc/net/tcp", encoding="ascii") as table:
        rows = [line.split() for line in table.readlines()[1:]]
    return sum(int(row[2].split(":")[1], 16) == port and row[3] in ("01", "08") for row in rows)


def _call_threads(before: set[threading.Thread]) -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t not in before and t.name.startswith("agentdescent-call") and t.is_alive()}


@pytest.mark.usefixtures("no_provider_env")
@pytest.mark.parametrize("server_does", ["refuse", "hang"])
def test_a_cancelled_run_s_http_calls_end_with_it_and_send_nothing_more(monkeypatch, server_does):
    """After evolve returned, each call retried a busy server to its 300 s deadline (or waited that
    long on a hung one), on threads and sockets of its own."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    busy = {"refuse": Response(status=503, delay=0.2, body={"error": {"message": "busy"}}), "hang": Response(delay=60)}
    with LoopbackServer(openai_chat(lambda prompt: busy[server_does])) as server:
        model = gpt(server, max_retries=10_000, backoff=(0.05, 0.2))
        token, before = CancelToken(), set(threading.enumerate())

        def cancel_when_asked() -> None:
            settles(lambda: len(server.requests) >= 6, 60)
            token.cancel("the test's")

        threading.Thread(target=cancel_when_asked, daemon=True).start()
        result = runs(model, stop=[token])
        sent = len(server.requests)
        assert result.stop_reason == "cancelled (the test's)"
        assert settles(lambda: not _call_threads(before)), f"calls still running: {_call_threads(before)}"
        # a request in transit as evolve returned may still land, one a call at most; no retry starts
        assert len(server.requests) - sent <= result.usage.abandoned
        assert settles(lambda: _client_connections(int(server.url.rsplit(":", 1)[1])) == 0)
        assert result.usage.calls == result.usage.abandoned > 0 and result.usage.failures == 0


def test_a_cancelled_run_ends_the_calls_its_run_made_on_threads_of_its_own_too(monkeypatch):
    """A `run` that hands its model call to a thread it starts: no context reaches that thread, and
    its call retried a busy server after evolve returned. While the run is the only one active,
    the call is the run's (its bill counts it), and the run's stop ends it."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    busy = Response(status=503, delay=0.2, body={"error": {"message": "busy"}})
    with LoopbackServer(openai_chat(lambda prompt: busy)) as server:
        model = gpt(server, max_retries=10_000, backoff=(0.05, 0.2))
        token, threads, cancelled, said = CancelToken(), [], threading.Event(), []

        def call(prompt: str) -> None:
            try:
                model(prompt)
            except AgentError as exc:
                said.append(str(exc))

        def hands_off(rendered, task):
            threads.append(threading.Thread(target=call, args=(task.prompt,), daemon=True))
            threads[-1].start()
            cancelled.wait(60)  # the run is still going when the cancel comes
            return "handed off"

        def cancel_when_asked() -> None:
            settles(lambda: len(server.requests) >= 6, 60)
            token.cancel("the test's")
            cancelled.set()

        threading.Thread(target=cancel_when_asked, daemon=True).start()
        result = evolve(TASKS, lambda task, output: 1.0, run=hands_off, propose=lambda *a: None, rounds=1,
                        n_workers=1, stop=[token])
        assert result.stop_reason == "cancelled (the test's)" and threads
        assert settles(lambda: not any(t.is_alive() for t in threads)), "a call on the run's own thread still runs"
        assert said and all("within the stop of the run it is part of (cancelled (the test's))" in text for text in said)
        sent = len(server.requests)
        assert not settles(lambda: len(server.requests) > sent, 1.0)  # no retry after


# --- the parts: a halt, and what carries it ----------------------------------------------------


def test_a_halt_ends_what_is_registered_once_and_tells_what_registers_later():
    halt, ended = halts.Halt(), []
    with halt.ending(lambda: ended.append("over")) as came:
        assert came is None  # over before the halt: forgotten
    with halt.ending(lambda: ended.append("in flight")):
        assert halt("the test's stop") == 1 and halt("again") == 0
    with halt.ending(lambda: ended.append("late")) as came:
        assert came == "the test's stop"  # it must start nothing
    assert ended == ["in flight"] and halts.came(halt) == "the test's stop" and halts.came(None) is None
    assert halt.wait(60) and not halts.acquire(threading.Semaphore(1), math.inf, halt)


def test_a_wait_for_a_lock_ends_when_the_halt_comes():
    halt, held = halts.Halt(), threading.Semaphore(0)
    threading.Timer(0.3, halt, ("the test's stop",)).start()
    assert not halts.acquire(held, math.inf, halt)
    assert halts.acquire(threading.Semaphore(1), math.inf, None) and not halts.acquire(held, 0.05, None)


def test_a_program_of_a_halted_run_is_killed_and_none_starts_after(tmp_path):
    halt, pids = halts.Halt(), tmp_path / "pids"
    script = (f"import os, subprocess, time\nchild = subprocess.Popen(['sleep', '60'])\n"
              f"open({str(pids)!r} + '.new', 'w').write(str(child.pid))\nos.replace({str(pids)!r} + '.new', {str(pids)!r})\n"
              "time.sleep(60)")
    entered = halts.enter(halt)
    try:
        threading.Thread(target=lambda: settles(pids.exists) and halt("the test's stop"), daemon=True).start()
        finished = run_process([sys.executable, "-c", script], timeout=60)
        assert finished.returncode == -signal.SIGTERM and gone(int(pids.read_text()))
        with pytest.raises(Stopping, match="not starting .*: the test's stop"):
            run_process([sys.executable, "-c", "pass"], timeout=60)
    finally:
        halts.leave(entered)
    assert run_process([sys.executable, "-c", "print('a later call')"], timeout=60).stdout == "a later call\n"


def test_the_pool_threads_and_a_timed_call_carry_the_halt_of_where_the_pool_was_made():
    halt = halts.Halt()
    entered = halts.enter(halt)
    try:
        pool = ThreadExecutor(1, name="carries")
    finally:
        halts.leave(entered)
    other = ThreadExecutor(1, name="carries-none")
    try:
        assert pool.submit(halts.current).result(10) is halt
        assert pool.submit(within, 10, halts.current, lambda: None).result(10) is halt
        assert other.submit(halts.current).result(10) is None  # made where no run is
    finally:
        pool.shutdown()
        other.shutdown()

"""The ledger at the points a kill or a second process can catch it: every state opens and continues."""

from __future__ import annotations

import multiprocessing
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import git
import pytest

from agentdescent import UserError, evolve
from agentdescent import events as ev
from agentdescent.ledger import Ledger
from tests.doubles import year_program

ROOT = Path(__file__).resolve().parents[2]


def fsck(path) -> None:
    done = subprocess.run(["git", "-C", str(path), "fsck", "--strict", "--no-dangling"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def run_on(store, rounds=2):
    tasks, reward, run, propose = year_program()
    return evolve(tasks, reward, run=run, propose=propose, rounds=rounds, n_workers=2, store=store)


def test_a_kill_right_after_git_init_leaves_a_store_the_next_run_opens(tmp_path):
    store = tmp_path / "ledger"
    git.Repo.init(store, bare=True, initial_branch="dev").close()  # what an older version left when killed there
    result = run_on(store)
    assert result.final_reward == 1.0
    fsck(store)


def test_a_kill_between_the_root_refs_leaves_a_store_the_next_run_opens(tmp_path):
    store = tmp_path / "ledger"
    Ledger(store).close()
    (store / "refs" / "heads" / "stable").unlink()  # dev written, stable not yet
    assert run_on(store).final_reward == 1.0
    fsck(store)


def test_a_kill_between_the_seed_and_its_promotion_leaves_a_store_the_next_run_continues(tmp_path):
    store = tmp_path / "ledger"
    with Ledger(store) as ledger:
        ledger.commit("artifact", {}, expected_version=0, message="seed artifact")  # killed before promote
    result = run_on(store)
    assert result.initial_version == 1 and result.final_reward == 1.0  # the seed was promoted, then learned on
    fsck(store)


def test_creating_a_ledger_leaves_nothing_half_made_beside_it(tmp_path):
    Ledger(tmp_path / "ledger").close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger"]


def _start(store, barrier, results):
    barrier.wait()
    try:
        results.put(("ok", run_on(store, rounds=1).final_reward))
    except UserError as exc:  # another starter's run held the store: refused, as it must be
        results.put(("refused" if "another run uses the store" in str(exc) else "error", str(exc)))
    except Exception as exc:  # reported to the parent, which fails the test with it
        results.put(("error", f"{type(exc).__name__}: {exc}"))


def test_processes_starting_together_on_one_empty_store_agree_on_one_ledger(tmp_path):
    context = multiprocessing.get_context("fork")
    for race in range(5):
        store, results = tmp_path / f"ledger-{race}", context.Queue()
        barrier = context.Barrier(3)
        starters = [context.Process(target=_start, args=(store, barrier, results)) for _ in range(3)]
        for p in starters:
            p.start()
        for p in starters:
            p.join(60)
        outcomes = [results.get(timeout=5) for _ in starters]
        kinds = [kind for kind, _ in outcomes]
        assert "ok" in kinds and set(kinds) <= {"ok", "refused"}, outcomes
        fsck(store)
        with Ledger(store) as ledger:
            seeds = [r for r in ledger.log() if r.trailers.get("Round") == "seed"]
            assert len(seeds) == 1 and ledger.stable() >= seeds[0].version


def test_stable_only_moves_forward_whoever_promotes(tmp_path):
    with Ledger(tmp_path / "ledger") as ledger:
        for version in range(10):
            ledger.commit("a", {"k": str(version)}, expected_version=version, message=f"v{version + 1}")
        assert ledger.promote(5) and not ledger.promote(3) and ledger.stable() == 5
        others = [Ledger(tmp_path / "ledger") for _ in range(4)]
        threads = [threading.Thread(target=lambda lg=lg, v=v: lg.promote(v)) for lg in others for v in (2, 7, 9, 4, 10, 6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert ledger.stable() == 10
        for other in others:
            other.close()


def test_a_second_run_on_a_store_in_use_is_refused_at_once_and_runs_once_the_first_returned(tmp_path):
    """Two runs on one store would share its checkpoint and start log, each billed for the other's calls."""
    store, started, release = tmp_path / "ledger", threading.Event(), threading.Event()

    def hold(event) -> None:  # the first run waits at its start, the store held, till the second has tried
        if isinstance(event, ev.RunStarted):
            started.set()
            release.wait(60)

    tasks, reward, run, propose = year_program()
    results = []
    first = threading.Thread(target=lambda: results.append(
        evolve(tasks, reward, run=run, propose=propose, rounds=2, n_workers=2, store=store, on_event=hold)))
    first.start()
    try:
        assert started.wait(60)
        with pytest.raises(UserError, match=f"another run uses the store {re.escape(str(store))} now .*store of its own"):
            run_on(store)
    finally:
        release.set()
        first.join(120)
    assert results[0].error is None and results[0].usage.abandoned == 0
    again = run_on(store)  # the first returned: the store is free, and the run continues from it
    assert again.error is None and again.initial_version == results[0].version


def test_a_run_that_raised_lets_go_of_its_store(tmp_path):
    store = tmp_path / "ledger"
    Ledger(store).close()
    (store / "agentdescent").mkdir()
    (store / "agentdescent" / "checkpoint.json").write_text("not json", encoding="utf-8")
    for _ in range(2):  # the same refusal twice: the first run's claim went with its error
        with pytest.raises(UserError, match="checkpoint .* cannot be read"):
            run_on(store)


HOLDER = """
import sys
from agentdescent import evolve, events
from tests.doubles import year_program
tasks, reward, run, propose = year_program()
def hold(event):
    if isinstance(event, events.RunStarted):
        print("started", flush=True)
        sys.stdin.read()
evolve(tasks, reward, run=run, propose=propose, rounds=2, n_workers=2, store=sys.argv[1], on_event=hold)
"""


def test_a_run_in_another_process_holds_its_store_until_that_process_dies(tmp_path):
    store = tmp_path / "ledger"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(store)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline() == "started\n"
        with pytest.raises(UserError, match=f"another run uses the store .* now \\(process {holder.pid}\\)"):
            run_on(store)
    finally:
        holder.kill()
        holder.wait(60)
        holder.stdout.close()
        holder.stdin.close()
    assert run_on(store).error is None  # a killed holder let go with its process

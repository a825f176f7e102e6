"""The ledger at the points a kill or a second process can catch it: every state opens and continues."""

from __future__ import annotations

import multiprocessing
import subprocess
import threading

import git

from agentdescent import evolve
from agentdescent.ledger import Ledger
from tests.doubles import year_program


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
        assert all(kind == "ok" for kind, _ in outcomes), outcomes
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


def test_two_runs_on_one_store_at_once_both_finish_and_lose_nothing(tmp_path):
    store = tmp_path / "ledger"
    Ledger(store).close()
    results = []
    threads = [threading.Thread(target=lambda: results.append(run_on(store, rounds=3))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(results) == 2 and all(r.error is None for r in results)
    fsck(store)
    with Ledger(store) as ledger:
        versions = [r.version for r in ledger.log()]
        assert versions == list(range(ledger.head(), -1, -1))  # one unbroken history

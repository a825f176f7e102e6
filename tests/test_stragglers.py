"""Stragglers: a rollout far past its task's usual duration is run again, and the first answer wins."""

from __future__ import annotations

import threading
import time
from concurrent import futures

import pytest

from agentdescent import Parallelism, evolve
from agentdescent.engine.calls.executors import ThreadExecutor
from agentdescent.engine.calls.stragglers import Durations, Hedger
from agentdescent.errors import BudgetSpent, UserError
from agentdescent.testing import RouterReflector, route, route_reward, router_tasks
from agentdescent.types import Rollout, Task

TASK = Task(id="t", prompt="p")


def warmed(seconds: float = 0.01, n: int = 16) -> Durations:
    durations = Durations(warmup=n)
    for _ in range(n):
        durations.observe("t", seconds)
    return durations


class Attempts:
    """A rollout whose first run hangs until released and whose later runs answer at once."""

    def __init__(self) -> None:
        self.calls = 0
        self.release = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, label: str) -> Rollout:
        with self._lock:
            self.calls += 1
            first = self.calls == 1
        if first:
            self.release.wait(5)
        return Rollout(task=TASK, output=label if not first else "slow", reward=1.0, seconds=0.01)


def hedger(pool, durations, **kwargs) -> tuple[Hedger, dict]:
    counts = {"reissued": 0, "discarded": 0}
    h = Hedger(pool, factor=3, capacity=8, durations=durations, floor=0.02,
               on_reissue=lambda: counts.__setitem__("reissued", counts["reissued"] + 1),
               on_discard=lambda: counts.__setitem__("discarded", counts["discarded"] + 1), **kwargs)
    return h, counts


def test_a_straggler_is_run_again_and_the_first_answer_wins():
    pool, attempts = ThreadExecutor(4), Attempts()
    h, counts = hedger(pool, warmed())
    try:
        rollout = h.submit("t", attempts, "fast").result(timeout=2)
        assert rollout.output == "fast" and counts["reissued"] == 1
        attempts.release.set()  # the first run answers late: thrown away, and counted
        deadline = time.monotonic() + 2
        while counts["discarded"] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert counts["discarded"] == 1 and attempts.calls == 2
    finally:
        attempts.release.set()
        h.close()
        pool.shutdown()


def test_nothing_is_run_again_before_the_model_of_durations_has_seen_enough():
    pool, attempts = ThreadExecutor(4), Attempts()
    h, counts = hedger(pool, Durations(warmup=16))
    try:
        future = h.submit("t", attempts, "fast")
        time.sleep(0.2)
        assert not future.done() and counts["reissued"] == 0
        attempts.release.set()
        assert future.result(timeout=2).output == "slow"
    finally:
        attempts.release.set()
        h.close()
        pool.shutdown()


def quick(label: str) -> Rollout:
    return Rollout(task=Task(id="u", prompt="p"), output=label, reward=1.0, seconds=0.001)


def test_a_straggler_submitted_before_anything_was_expected_is_watched_once_something_is():
    """A run's first waves are its largest, and go out before the model of durations has seen a
    rollout: their stragglers were never run again."""
    pool, attempts = ThreadExecutor(8), Attempts()
    h, counts = hedger(pool, Durations(warmup=3))
    try:
        future = h.submit("t", attempts, "fast")
        for _ in range(3):
            h.submit("u", quick, "u").result(timeout=5)
        assert future.result(timeout=5).output == "fast" and counts["reissued"] == 1
    finally:
        attempts.release.set()
        h.close()
        pool.shutdown()


def test_a_straggler_due_while_the_pool_was_full_is_watched_again_once_it_is_not():
    pool, attempts, holding = ThreadExecutor(8), Attempts(), threading.Event()
    h, counts = hedger(pool, warmed())
    h._capacity = 2
    try:
        future = h.submit("t", attempts, "fast")
        held = h.submit("u", lambda label: holding.wait(5) and quick(label), "u")  # the pool is full while this runs
        time.sleep(0.2)  # past the straggler's deadline
        assert counts["reissued"] == 0 and not future.done()
        holding.set()
        held.result(timeout=5)
        assert future.result(timeout=5).output == "fast" and counts["reissued"] == 1
    finally:
        attempts.release.set()
        holding.set()
        h.close()
        pool.shutdown()


@pytest.mark.parametrize("why", ["budget", "full pool"])
def test_a_straggler_is_not_run_again_past_the_budget_or_when_the_pool_is_full(why):
    pool, attempts = ThreadExecutor(4), Attempts()
    kwargs = {"may_start": lambda: False} if why == "budget" else {}
    h, counts = hedger(pool, warmed(), **kwargs)
    if why == "full pool":
        h._capacity = 1  # the straggler itself fills it
    try:
        future = h.submit("t", attempts, "fast")
        time.sleep(0.2)
        assert not future.done() and counts["reissued"] == 0 and attempts.calls == 1
    finally:
        attempts.release.set()
        h.close()
        pool.shutdown()


def test_a_second_run_the_budget_refuses_as_it_starts_leaves_the_first_to_answer():
    """The pool asks the budget as each call starts: a refused second run never ran, and must not
    fail a rollout whose first run is still under way."""
    starts = []

    def within_budget() -> None:
        starts.append(len(starts))
        if len(starts) > 1:
            raise BudgetSpent("the call budget is spent")

    pool, attempts = ThreadExecutor(2, on_start=within_budget), Attempts()  # one thread for the first run, one free
    h, counts = hedger(pool, warmed())
    try:
        future = h.submit("t", attempts, "fast")
        deadline = time.monotonic() + 5
        while len(starts) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        futures.wait([pool.submit(abs, -1)], timeout=5)  # after the refused run, on the same free thread
        assert counts["reissued"] == 1 and not future.done()
        attempts.release.set()
        assert future.result(timeout=5).output == "slow" and attempts.calls == 1
    finally:
        attempts.release.set()
        h.close()
        pool.shutdown()


def test_the_expected_duration_is_the_tasks_own_median_or_the_runs():
    durations = Durations(warmup=3)
    assert durations.expected("a") is None
    for seconds in (0.1, 0.3, 0.2):
        durations.observe("a", seconds)
    durations.observe("b", 5.0)
    assert durations.expected("a") == pytest.approx(0.2)
    assert durations.expected("new") == pytest.approx(0.25)  # the run's median of 0.1, 0.2, 0.3, 5


def test_evolve_counts_the_stragglers_it_ran_again_as_calls():
    """The 20th and 30th rollouts hang for a second; each is run again, and both runs are paid for."""
    tasks = [Task(id=f"t{i}", prompt=str(i), gold="x") for i in range(40)]
    count = iter(range(1, 10**6))
    lock = threading.Lock()

    def run(rendered, task):
        with lock:
            n = next(count)
        time.sleep(1.0 if n in (20, 30) else 0.01)
        return "x" if "x" in rendered else ""

    result = evolve(tasks, lambda t, o: float(o == t.gold), run=run, propose=lambda r, t, o, w: "say x",
                    rounds=2, n_workers=2, seed=1, parallelism=Parallelism(reissue_after=2.0))
    usage = result.usage
    assert usage.reissued >= 1
    assert usage.calls == usage.rollouts + usage.proposals  # every run of `run` is a call


def test_reissue_after_must_be_above_one():
    with pytest.raises(UserError, match="reissue_after"):
        Parallelism(reissue_after=1.0)


def test_a_finished_run_returns_though_a_stragglers_first_attempt_never_does(monkeypatch):
    """The straggler was re-issued and its re-issue answered, but its first attempt hangs for good:
    the run must still return (after a short grace, with a warning that says so), not wait on it
    for ever at the end."""
    import agentdescent.engine.evolve as evolve_module

    monkeypatch.setattr(evolve_module, "FINISH_GRACE_S", 0.5)
    calls, lock, forever = {"n": 0}, threading.Lock(), threading.Event()

    def run(rendered, task):
        with lock:
            calls["n"] += 1
            n = calls["n"]
        if n == 40:
            forever.wait()  # this attempt never returns; the re-issue of its task does
        time.sleep(0.06)
        return route(rendered, task)

    box = []
    thread = threading.Thread(target=lambda: box.append(evolve(
        router_tasks(0, signals=1)[:16], route_reward, run=run, propose=RouterReflector(), rounds=2,
        parallelism=Parallelism(reissue_after=2))), daemon=True)
    thread.start()
    thread.join(60)
    forever.set()
    assert box, "evolve did not return while a discarded attempt hung"
    result = box[0]
    assert result.usage.reissued >= 1 and result.error is None
    assert any("1 call was still running 0.5 s after the run ended" in w for w in result.warnings), result.warnings


def test_a_straggler_due_again_on_a_pool_a_cancel_closed_is_left_to_its_first_run(monkeypatch):
    """The watcher re-issued a straggler on a pool a cancel had closed (its futures not yet failed):
    the pool's refusal escaped the watcher's thread as a traceback in the run's log."""
    escaped = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    pool, attempts = ThreadExecutor(4), Attempts()
    h, counts = hedger(pool, warmed())
    try:
        race = h.submit("t", attempts, "fast")
        pool._outstanding.close(RuntimeError("cancelled by the user"))  # closed, the first run not yet failed
        time.sleep(0.3)  # past the straggler's deadline (3 x 10 ms, at least 20 ms)
        assert escaped == [] and counts["reissued"] == 0 and attempts.calls == 1
        attempts.release.set()
        assert race.result(timeout=2).output == "slow"  # the first run answers the race
    finally:
        attempts.release.set()
        h.close()
        pool.shutdown()

"""Parallel methods: tensor-parallel shards (no two workers' diffs on one key, tasks routed to the
shard that fixes them, strategies that cannot shard refused) and pipeline-parallel stages (a
worker's next rollouts start while its last turn is reflected on; each stage on its own pool)."""

from __future__ import annotations

import json
import threading
import time
from collections import defaultdict
from concurrent.futures import Future

import pytest

from agentdescent import AppendRules, FileTree, KeyedRules, SingleSlot, Task, UserError, events, evolve
from agentdescent.config import Budget, Parallelism, Policies
from agentdescent.engine.calls.executors import ThreadExecutor
from agentdescent.engine.loop.parallel import PipelineParallel, TensorParallel, parallel_method
from agentdescent.engine.loop.pipeline import Pipeline
from agentdescent.engine.loop.sampling import Sampler
from agentdescent.engine.loop.sharding import Shards
from agentdescent.governance import Governance
from agentdescent.testing import SIGNALS, RouterReflector, demo_strategy, route, route_reward, router_tasks
from tests.doubles import InFlight, router

CATEGORIES = list(SIGNALS)  # KeyedRules deals them out round-robin: w0 billing, w1 shipping, ...


def by_gold(task: Task) -> str | None:
    return task.gold if task.gold in SIGNALS else None


def diffs_of(run_events):
    return [(e.round, e.diff, e.outcome) for e in run_events if isinstance(e, events.DiffOutcome) and e.diff]


@pytest.mark.parametrize("asynchronous", [False, True])
def test_no_two_workers_diffs_touch_one_key_and_each_stays_in_its_shard(tmp_path, asynchronous):
    seen = []
    # an asynchronous step takes what has arrived, fewer diffs on a loaded machine: more steps, same target
    result = router(kind="keyed", n_workers=5, rounds=80 if asynchronous else 40, target_reward=1.0,
                    parallelism=Parallelism(method="tp", asynchronous=asynchronous), store=tmp_path / "ledger",
                    on_event=seen.append)
    assert result.final_reward == 1.0
    authors = defaultdict(set)
    for _, diff, outcome in diffs_of(seen):
        for key in diff.keys:
            authors[key].add(diff.author)
    assert authors and all(authors[c] <= {f"w{i}"} for i, c in enumerate(CATEGORIES) if c in authors)
    outside = [o for o in result.outcome_list if o.kind == "invalid"]
    assert outside and all("outside" in o.reason and "shard" in o.reason for o in outside)  # learning where tasks go
    saved = json.loads((tmp_path / "ledger" / "agentdescent" / "checkpoint.json").read_text())
    assert saved["routes"]  # what it learned is kept for a resumed run


def test_a_routing_function_sends_each_task_to_its_shard_and_spares_the_misrouted_proposals():
    learned = router(kind="keyed", n_workers=5, rounds=40, target_reward=1.0, parallelism=Parallelism(method="tp"))
    routed = router(kind="keyed", n_workers=5, rounds=40, target_reward=1.0, parallelism=Parallelism(method=TensorParallel(route=by_gold)))
    assert routed.final_reward == learned.final_reward == 1.0

    def misrouted(result):  # a proposal for a category another worker holds (not a misfire's removal)
        return sum(o.kind == "invalid" for o in result.outcome_list)
    assert misrouted(routed) < misrouted(learned)


def test_the_sampler_deals_a_worker_its_shard_and_the_tasks_not_routed_yet():
    tasks = [Task(id=f"t{i}", prompt="", gold=CATEGORIES[i % 5]) for i in range(40)]
    shards = Shards(CATEGORIES, 5)
    shards.learn([t.id for t in tasks[:20]], [tasks[0].gold])  # the first twenty are fixed by w0's key
    deals = Sampler(policy=Policies().task_sampler, train=tasks, seed=0, scouts=0, shards=shards).deal(
        [0, 1, 2, 3, 4], 0, {})
    first = {t.id for t in tasks[:20]}
    assert {t.id for t in deals[0].batch} <= {t.id for t in tasks}
    assert all(not ({t.id for t in deal.batch} & first) for deal in deals[1:])  # nobody else gets them
    dealt = [t.id for deal in deals for t in deal.batch]
    assert len(dealt) == len(set(dealt))  # and no task twice


def test_a_route_beats_what_was_learned_and_a_new_key_has_one_owner():
    shards = Shards(["a", "b", "c"], 3, route=lambda task: "c" if task.id == "t1" else None)
    shards.learn(["t1", "t2"], ["a"])
    t1, t2 = Task(id="t1", prompt=""), Task(id="t2", prompt="")
    assert shards.eligible(2, [t1, t2]) == [t1] and shards.eligible(0, [t1, t2]) == [t2]
    assert shards.owner("new/file.md") == shards.owner("new/file.md") in (0, 1, 2)
    assert shards.outside(0, ["a", "b"]) == ["b"]


@pytest.mark.parametrize("strategy, workers, says", [
    (AppendRules(), 2, "KeyedRules"),  # its keys are hashes of rules not yet written
    (SingleSlot("x"), 2, "n_workers=1"),
    (KeyedRules(["tone", "format", "length"]), 4, "n_workers=3"),
    (FileTree({"SKILL.md": "s", "hooks/a.sh": "x", "hooks/b.sh": "y"}, frozen=["hooks/*"]), 2, "n_workers=1"),
])
def test_tp_refuses_a_strategy_that_cannot_give_each_worker_keys(strategy, workers, says):
    with pytest.raises(UserError, match=says):
        Shards.of(strategy, strategy.initial_state(), Governance.of(strategy), workers, None)


def test_tp_refuses_a_strategy_that_does_not_say_its_keys_and_bad_methods_are_refused():
    class Opaque:
        frozen, editable, max_keys_per_diff = (), ("*",), None

    with pytest.raises(UserError, match="key_space"):
        Shards.of(Opaque(), {}, Governance(), 2, None)
    with pytest.raises(UserError, match="dp, tp, pp"):
        parallel_method("mp")
    with pytest.raises(UserError, match="reflections"):
        parallel_method(PipelineParallel(reflections=0))
    with pytest.raises(UserError, match="depth"):
        parallel_method(PipelineParallel(depth=0))
    with pytest.raises(UserError, match="route"):
        parallel_method(TensorParallel(route="billing"))
    with pytest.raises(UserError, match="n_workers=5"):
        router(kind="keyed", n_workers=8, parallelism=Parallelism(method="tp"))


class Stages:
    """Stand-in stages: `roll` returns at once, `reflect` waits until `release` is set."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.rolled: list[int] = []

    def roll(self, turn):
        self.rolled.append(turn)
        return turn

    def reflect(self, turn):
        assert self.release.wait(10)
        return turn

    def verify(self, turn):
        return f"report of {turn}"


class Turnish:
    def __init__(self, slot: int, number: int) -> None:
        self.slot, self.number = slot, number


@pytest.mark.parametrize("depth", [2, 3])
def test_a_worker_rolls_out_its_next_turn_while_its_last_is_reflected_on_and_no_further(depth):
    stages = Stages()
    pools = [ThreadExecutor(depth, name=f"test-{i}") for i in range(3)]
    pipeline = Pipeline(stages, stages=pools, depth=depth)
    reports: list[Future] = []
    numbers = iter(range(1, 100))
    pipeline.refill = lambda slots: reports.extend(pipeline.start(Turnish(s, next(numbers))) for s in slots)
    try:
        first = pipeline.start(Turnish(0, 0))
        deadline = time.monotonic() + 5
        while len(stages.rolled) < depth and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # room for one more, which must not start: turn 0 is still out
        assert [t.number for t in stages.rolled] == list(range(depth))
        stages.release.set()
        assert first.result(5) == f"report of {stages.rolled[0]}"
        pipeline.collected([0])  # its report taken into a step: one more may start
        deadline = time.monotonic() + 5
        while len(stages.rolled) < depth + 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [t.number for t in stages.rolled] == list(range(depth + 1))
        pipeline.close()
    finally:
        for pool in pools:
            pool.shutdown(wait=True)


def test_pipelined_runs_reach_the_reward_and_reflections_keep_to_their_own_pool():
    reflecting = InFlight()
    from agentdescent.testing import RouterReflector, route
    reflector = RouterReflector("append", seed=0)

    def propose(rendered, task, output, reward):
        with reflecting:
            time.sleep(0.002)
            return reflector(rendered, task, output, reward)

    for asynchronous in (False, True):
        result = router(n_workers=4, rounds=60, target_reward=1.0, propose=propose, run=route,
                        parallelism=Parallelism(asynchronous=asynchronous, method=PipelineParallel(reflections=1)))
        assert result.final_reward == 1.0
    assert reflecting.peak == 1  # one reflection at a time, however many workers wait on one


def test_a_pipeline_s_rollout_stage_holds_the_calls_it_is_given():
    rolling = InFlight()

    def run(rendered, task):
        with rolling:
            time.sleep(0.002)
            return route(rendered, task)

    router(n_workers=4, rounds=3, run=run, parallelism=Parallelism(method=PipelineParallel(rollouts=1, verification=1)))
    assert rolling.peak <= 2  # one rolling out, one verifying

def test_a_synchronous_pipelined_run_is_reproducible():
    first, second = (router(n_workers=4, rounds=8, parallelism=Parallelism(method="pp")) for _ in range(2))
    assert [h.diffs for h in first.history] == [h.diffs for h in second.history]
    assert first.final_reward == second.final_reward


class Inline:
    """An executor that runs each call at once, in the caller's thread: a stage done before
    `submit` returns, as a fast rollout stage sometimes is."""

    def submit(self, fn, *args, then=None):
        future: Future = Future()
        future.set_result(fn(*args))
        return future


def test_a_turn_whose_rollouts_are_done_before_it_is_started_does_not_lock_the_dispatcher():
    from agentdescent.engine.loop.dispatch import Dispatcher

    stages = Stages()
    stages.release.set()
    pools = [Inline(), ThreadExecutor(2, name="test-reflect"), ThreadExecutor(2, name="test-verify")]
    pipeline = Pipeline(stages, stages=pools)
    dispatcher = Dispatcher(start=pipeline.start,
                            make_turns=lambda slots, first: [Turnish(s, first + i) for i, s in enumerate(slots)])
    pipeline.refill = dispatcher.dispatch  # the refill runs inside the first dispatch, on its thread
    starting = threading.Thread(target=dispatcher.dispatch, args=([0],), daemon=True)
    starting.start()
    starting.join(5)
    try:
        assert not starting.is_alive(), "dispatch locked itself"
        assert dispatcher.turns == 2 and [t.number for t in stages.rolled] == [0, 1]  # and no third: depth 2
        reports = dispatcher.collect(wait_all=True)
        assert reports == [f"report of {t}" for t in stages.rolled]  # in the order the turns were dispatched
    finally:
        pipeline.close()
        for pool in pools[1:]:
            pool.shutdown(wait=True)


@pytest.mark.parametrize("batched", [True, False])
def test_a_batched_round_reflects_once_every_worker_has_rolled_out(tmp_path, batched):
    """A batched run's workers meet once rolled out, so that the host's helpers get a round's
    reflections in one wave: no reflection starts while another worker's rollout is still out.
    (Unbatched, a worker reflects as soon as its own rollouts are in.)"""
    said: list[str] = []
    lock = threading.Lock()
    rolling = threading.Event()  # set once the round starts: the held-out start is measured by then

    def run(rendered, task):
        with lock:
            slow = rolling.is_set() and "slow" not in said
            if slow:
                said.append("slow")
        if slow:  # the round's first rollout, in one worker's minibatch, comes back last
            time.sleep(0.5)
            with lock:
                said.append("slow done")
        return route(rendered, task)

    def propose(rendered, task, output, reward):
        with lock:
            said.append("reflect")
        return RouterReflector("append")(rendered, task, output, reward)

    def on_event(event):
        if isinstance(event, events.RoundStarted):
            rolling.set()

    evolve(router_tasks(0), route_reward, run=run, propose=propose, strategy=demo_strategy("append"), rounds=1,
           n_workers=3, store=tmp_path / "ledger", on_event=on_event, budget=Budget(max_calls=5000),
           parallelism=Parallelism(batched=batched, reissue_after=None))  # no second run of the slow one
    assert "slow done" in said and "reflect" in said
    assert (said.index("slow done") < said.index("reflect")) == batched

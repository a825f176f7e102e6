import time

import pytest

from agentdescent.artifacts.state import state_hash
from agentdescent.artifacts.strategies import AppendRules
from agentdescent.engine.calls.evaluation import Evaluator
from agentdescent.engine.calls.units import check_reward
from agentdescent.errors import UserError
from agentdescent.types import Rollout, Task
from agentdescent.usage import Usage
from tests.doubles import CountingRun, numbered_tasks

TASKS = numbered_tasks(4, gold="{i}")


GOOD = {"r1": "answer with the gold"}
BAD = {"r1": "say nothing"}


def test_rewards_are_computed_from_the_rendered_state(make_evaluator):
    run = CountingRun()
    ev = make_evaluator(run)
    assert ev.rewards([GOOD, BAD], TASKS) == [[1.0] * 4, [0.0] * 4]
    assert ev.mean(GOOD, TASKS) == 1.0
    assert all(r.startswith("Rules:\n- ") for r, _ in run.calls)
    rows = ev.rollouts(GOOD, TASKS[:2])
    assert [(r.task.id, r.output, r.reward, r.error) for r in rows] == [("t0", "0", 1.0, None), ("t1", "1", 1.0, None)]


def test_same_state_and_task_is_not_rerun(make_evaluator):
    run = CountingRun()
    ev = make_evaluator(run)
    first = ev.rewards([GOOD], TASKS)
    again = ev.rewards([GOOD, dict(GOOD)], TASKS)
    assert again == [first[0], first[0]]
    assert len(run.calls) == len(TASKS)
    assert ev.usage.rollouts == ev.usage.cache_misses == len(TASKS)
    assert ev.usage.cache_hits == 2 * len(TASKS)


def test_cache_ignores_dict_insertion_order(make_evaluator):
    run = CountingRun()
    ev = make_evaluator(run)
    ev.rewards([{"a": "answer", "b": "x"}], TASKS[:1])
    ev.rewards([{"b": "x", "a": "answer"}], TASKS[:1])
    assert len(run.calls) == 1 and ev.usage.cache_hits == 1


def test_different_states_do_run(make_evaluator):
    run = CountingRun()
    ev = make_evaluator(run)
    ev.rewards([GOOD], TASKS)
    ev.rewards([BAD], TASKS)
    ev.rewards([GOOD], [Task(id="new", prompt="p", gold="g")])
    assert len(run.calls) == 2 * len(TASKS) + 1
    assert ev.usage.cache_hits == 0


def test_failing_run_is_data_not_a_crash(make_evaluator):
    run = CountingRun(fail_on={"t2"})
    ev = make_evaluator(run)
    rows = ev.rollouts(GOOD, TASKS)
    assert [r.reward for r in rows] == [1.0, 1.0, 0.0, 1.0]
    failed = rows[2]
    assert failed.error is not None and "t2" in failed.error and "model down" in failed.error
    assert all(r.error is None for i, r in enumerate(rows) if i != 2)
    assert ev.usage.failures == 1
    assert len(ev.usage.errors) == 1 and "model down" in ev.usage.errors[0]


def test_usage_keeps_counting_failures_beyond_the_stored_errors():
    usage = Usage()
    for i in range(30):
        usage.count_rollout(Rollout(task=Task(id=f"t{i}", prompt="p"), output="", reward=0.0, error=f"e{i}"))
    assert usage.failures == 30
    assert 0 < len(usage.errors) < 30 and usage.errors[0] == "e0"


@pytest.mark.parametrize("bad", ["0.5", None, b"1", float("nan"), 1.5, -0.1, float("inf")])
def test_bad_reward_stops_with_user_error(bad, make_evaluator):
    ev = make_evaluator(reward=lambda task, output: bad)
    with pytest.raises(UserError) as info:
        ev.rewards([GOOD], [Task(id="task-7", prompt="p")])
    assert "task-7" in str(info.value)
    assert "[0, 1]" in str(info.value)


def test_many_returns_rows_in_the_order_of_states(pool):
    # the run echoes the rendered state, and later states finish first
    def run(rendered, task):
        time.sleep(0.003 * (6 - int(rendered[-1])))
        return rendered

    ev = Evaluator(strategy=AppendRules(), run=run, reward=lambda t, o: 0.0, pool=pool, usage=Usage())
    states = [{"r": f"rule {i}"} for i in range(6)]
    rows = ev.many(states, TASKS[:2])
    assert len(rows) == len(states)
    for state, row in zip(states, rows):
        assert [r.task.id for r in row] == ["t0", "t1"]
        assert all(r.output == f"- {state['r']}" for r in row)


def test_non_string_output_is_stringified(pool):
    ev = Evaluator(strategy=AppendRules(), run=lambda r, t: 42, reward=lambda t, o: float(o == "42"), pool=pool,
                   usage=Usage())
    [rollout] = ev.rollouts({}, TASKS[:1])
    assert rollout.output == "42" and rollout.reward == 1.0


def test_state_hash_stable_and_order_insensitive():
    a = {"x": "1", "y": "2"}
    b = {"y": "2", "x": "1"}
    assert state_hash(a) == state_hash(dict(a)) == state_hash(b)
    assert state_hash(a) != state_hash({"x": "1", "y": "3"})
    assert state_hash({"x": "1"}) != state_hash({"x1": ""})
    assert state_hash({}) != state_hash({"": ""})


def test_check_reward_accepts_numbers_in_range():
    task = Task(id="t", prompt="p")
    for value in (0, 1, 0.0, 0.25, 1.0):
        got = check_reward(value, task)
        assert isinstance(got, float) and got == value


class _CountedRender(AppendRules):
    def __init__(self):
        super().__init__()
        self.renders = 0

    def render(self, state):
        self.renders += 1
        return super().render(state)


def test_a_state_is_rendered_once_however_often_it_is_scored_and_known_holds_what_came_back(pool):
    strategy = _CountedRender()
    ev = Evaluator(strategy=strategy, run=lambda r, t: t.id, reward=lambda t, o: float(o == "t1"), pool=pool,
                   usage=Usage())
    head = {"r": "rule"}
    ev.score([(head, TASKS[:2]), (head, TASKS[2:4])])
    ev.rollouts(head, TASKS[:1])
    assert strategy.renders == 1
    assert ev.known(head) == {"t0": 0.0, "t1": 1.0, "t2": 0.0, "t3": 0.0}  # in the order they started
    assert ev.known(dict(head)) == ev.known(head)  # an equal state is viewed again and shares the rollouts
    assert strategy.renders == 2
    assert ev.known({"r": "another rule"}) == {}


def test_a_rollout_that_failed_with_an_error_is_no_measurement_and_runs_again_when_next_asked(make_evaluator):
    run = CountingRun(fail_on={"t2"})  # a provider's burst of 429s, say
    ev = make_evaluator(run)
    assert ev.rewards([GOOD, BAD], TASKS) == [[1.0, 1.0, 0.0, 1.0], [0.0] * 4]
    assert ev.known(GOOD) == {"t0": 1.0, "t1": 1.0, "t3": 1.0} and len(ev.errors(GOOD, TASKS)) == 1
    run.fail_on.clear()  # the burst is over
    assert ev.rewards([GOOD, BAD], TASKS) == [[1.0] * 4, [0.0] * 4]  # BAD's zeros that ran are measurements: cached
    assert len(run.calls) == ev.usage.rollouts == 10 and ev.usage.cache_hits == 6  # t2 anew on each, each counted
    assert ev.errors(GOOD, TASKS) == [] and ev.known(GOOD)["t2"] == 1.0
    ev.rewards([GOOD, BAD], TASKS)
    assert len(run.calls) == 10  # measured now: from the cache


def test_a_draw_again_that_failed_with_an_error_is_no_sample(make_evaluator):
    run = CountingRun()
    ev = make_evaluator(run)
    ev.rewards([GOOD], TASKS[:2])
    run.fail_on.add("t1")
    assert ev.again([(GOOD, TASKS[:2])]) == [[1.0, 0.0]]
    assert ev.draws(GOOD, "t0") == [1.0, 1.0] and ev.draws(GOOD, "t1") == [1.0]
    assert (ev.usage.repeated, ev.usage.disagreed) == (1, 0)  # an error does not say the rewards are samples
    assert ev.known(GOOD) == {"t0": 1.0, "t1": 1.0}

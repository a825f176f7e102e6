"""The units of work cross into another process as plain data and bring their usage back."""

from __future__ import annotations

import multiprocessing
import pickle
import threading
from concurrent.futures import Future, ProcessPoolExecutor

import pytest

from agentdescent.artifacts.state import state_hash
from agentdescent.artifacts.strategies import AppendRules
from agentdescent.engine.calls.evaluation import Evaluator
from agentdescent.engine.calls.units import reflect, roll_out
from agentdescent.errors import UserError
from agentdescent.types import Rollout, Task
from agentdescent.usage import Usage
from tests.doubles import asking_propose, asking_run, judging_reward, numbered_tasks

TASKS = numbered_tasks(3)


class ProcessPool:
    """The Executor protocol over worker processes started fresh (spawn): whatever a unit needs
    must be pickled, or the test fails."""

    def __init__(self) -> None:
        self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, fn, *args, then=None):
        ran = self._pool.submit(fn, *args)
        if then is None:
            return ran
        out = Future()  # `then` runs here, in the driver, before a waiter wakes
        ran.add_done_callback(lambda done: out.set_result(then(done.result())))
        return out

    def shutdown(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


@pytest.fixture(scope="module")
def processes():
    pool = ProcessPool()
    yield pool
    pool.shutdown()


def test_a_rollout_run_in_another_process_brings_its_usage_back(processes):
    rollout = processes.submit(roll_out, asking_run, judging_reward, "- answer", TASKS[0]).result()
    assert (rollout.output, rollout.reward) == ("ok", 1.0)
    assert rollout.spend.calls == 2  # the run's model and the judge, counted where they ran
    assert rollout.spend.input_tokens > 0 and rollout.spend.output_tokens > 0


def test_a_reflection_run_in_another_process_brings_its_usage_back(processes):
    failed = Rollout(task=TASKS[0], output="?", reward=0.0)
    reflection = processes.submit(reflect, asking_propose, "", [failed]).result()
    assert reflection.proposal == "answer the question" and reflection.spend.calls == 1


def test_an_evaluator_on_processes_keeps_cache_and_usage_with_the_driver(processes):
    usage = Usage()
    evaluator = Evaluator(strategy=AppendRules(), run=asking_run, reward=judging_reward, pool=processes, usage=usage)
    state = {"r": "answer"}
    assert evaluator.score([(state, TASKS)]) == [[1.0, 1.0, 1.0]]
    assert (usage.rollouts, usage.model.calls, usage.cache_hits) == (3, 6, 0)
    assert evaluator.score([(state, TASKS)]) == [[1.0, 1.0, 1.0]]  # from the driver's cache: nothing sent
    assert (usage.rollouts, usage.model.calls, usage.cache_hits) == (3, 6, 3)


def test_a_state_has_the_same_name_in_another_process(processes):
    """The evaluation cache (and a run store on disk) keys rollouts by it; the child process has
    its own string-hash seed."""
    state = {"SKILL.md": "be brief ✓\n", "a/b.md": ""}
    assert processes.submit(state_hash, state).result() == state_hash(state)


def test_usage_can_be_pickled_and_keeps_counting():
    usage = Usage()
    usage.add(rollouts=2)
    usage.model.add(calls=3)
    copy = pickle.loads(pickle.dumps(usage))
    copy.add(rollouts=1)
    copy.model.add(calls=1)
    assert (copy.rollouts, copy.model.calls, usage.rollouts, usage.model.calls) == (3, 4, 2, 3)


def test_a_rollout_hands_run_and_reward_a_copy_of_its_task():
    task = Task(id="t", prompt="p", meta={"expected": "ok", "notes": ["kept"]})

    def reward(task, output):
        task.meta["notes"].append("changed")
        return float(output == task.meta.pop("expected"))

    assert [roll_out(lambda rendered, task: "ok", reward, "", task).reward for _ in range(2)] == [1.0, 1.0]
    assert task.meta == {"expected": "ok", "notes": ["kept"]}
    with pytest.raises(UserError, match="the meta of task «u» cannot be copied .*plain data"):
        roll_out(lambda rendered, task: "ok", reward, "", Task(id="u", prompt="p", meta={"lock": threading.Lock()}))


def test_a_task_with_no_meta_gets_a_meta_of_its_own_too():
    """A task with an empty meta was copied shallow: a reward that wrote to it wrote to the
    caller's task, and every later rollout of it saw the write."""
    task = Task(id="t", prompt="p")

    def reward(task, output):
        seen = dict(task.meta)
        task.meta["visits"] = task.meta.get("visits", 0) + 1
        return float(not seen)

    assert [roll_out(lambda rendered, task: "ok", reward, "", task).reward for _ in range(3)] == [1.0, 1.0, 1.0]
    assert task.meta == {}


def test_a_reflection_hands_propose_a_copy_of_its_task():
    task = Task(id="t", prompt="p", meta={"expected": "ok"})

    def propose(rendered, task, output, value):
        return f"say {task.meta.pop('expected')}"

    failed = Rollout(task=task, output="no", reward=0.0)
    assert [reflect(propose, "", [failed]).proposal for _ in range(2)] == ["say ok", "say ok"]
    assert task.meta == {"expected": "ok"}

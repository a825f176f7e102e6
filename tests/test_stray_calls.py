"""Model calls a `run` makes on threads of its own (a `ThreadPoolExecutor`), which inherit no meter:
counted on the run's bill and under its budget, on a rollout's where no run is in the process,
and on no bill, with a warning, when two runs share the process."""

from __future__ import annotations

import contextvars
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from agentdescent import Budget, evolve
from agentdescent.agents.base import ModelUsage, catching_strays
from agentdescent.agents.openai_compat import openai_compatible
from agentdescent.engine.calls.units import roll_out
from agentdescent.testing import RouterReflector, route_prompt, route_reward, router_tasks
from tests.loopback import LoopbackServer, openai_chat

pytestmark = pytest.mark.usefixtures("no_provider_env")


class Billing:
    """A loopback chat server answering as the router agent, adding up the usage it reports."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests = self.tokens = 0
        self._answer = openai_chat(route_prompt)

    def __call__(self, request):
        response = self._answer(request)
        with self._lock:
            self.requests += 1
            self.tokens += response.body["usage"]["total_tokens"]
        return response


def asking_from_threads(model, pool: ThreadPoolExecutor, times: int = 2):
    """A `run` that asks its model `times` times at once, on the pool's threads."""
    def run(rendered: str, task) -> str:
        return list(pool.map(lambda _: model(f"{rendered}\n\n{task.prompt}"), range(times)))[0]
    return run


def test_calls_a_run_makes_on_its_own_threads_are_on_the_bill_and_the_token_budget_stops_the_run(tmp_path):
    """They were on no bill: a run under max_tokens=10000 ran all its rounds on 65,912 tokens."""
    billing = Billing()
    with LoopbackServer(billing) as server, ThreadPoolExecutor(4) as pool:
        model = openai_compatible("m", base_url=server.url + "/v1", api_key_env=None)
        result = evolve(router_tasks(0, signals=1), route_reward, run=asking_from_threads(model, pool),
                        propose=RouterReflector(), rounds=20, n_workers=2, budget=Budget(max_tokens=3000),
                        store=tmp_path / "store")
    usage = result.usage
    assert "token budget is spent" in result.stop_reason, result.stop_reason
    assert (usage.model.calls, usage.tokens) == (billing.requests, billing.tokens) == (model.usage.calls, model.usage.tokens)
    assert usage.stray_calls == billing.requests > 0
    assert usage.calls == usage.rollouts + usage.proposals + usage.stray_calls  # each stray call billed once
    assert not result.warnings


def test_a_call_made_on_a_thread_of_the_run_while_it_winds_down_is_its_stray_call(tmp_path, monkeypatch):
    """The run's catcher closed before its calls in flight were waited for: a call they made then went
    to a running rollout's meter (the newest unit's, whichever it was) or, with none, on no bill."""
    from agentdescent.engine import evolve as evolving

    billing, wind_down = Billing(), evolving._wind_down
    with LoopbackServer(billing) as server, ThreadPoolExecutor(1) as pool:
        model = openai_compatible("m", base_url=server.url + "/v1", api_key_env=None)

        def calling_as_it_winds_down(pools, *, wait):
            pool.submit(model, "a call of work still in flight").result()
            return wind_down(pools, wait=wait)

        monkeypatch.setattr(evolving, "_wind_down", calling_as_it_winds_down)
        result = evolve(router_tasks(0, signals=1), route_reward, run=asking_from_threads(model, pool), propose=RouterReflector(),
                        rounds=1, n_workers=1, store=tmp_path / "store")
    usage = result.usage
    assert usage.stray_calls == usage.model.calls == billing.requests > 1
    assert usage.calls == usage.rollouts + usage.proposals + usage.stray_calls


def test_two_runs_at_once_in_one_process_count_their_stray_calls_on_neither_and_say_so(tmp_path):
    """Whose run a thread's call served cannot be told: each is warned, neither is billed for it."""
    billing = Billing()
    started = {"a": threading.Event(), "b": threading.Event()}
    results = {}

    def both_running(name: str, run):
        def waiting(rendered: str, task) -> str:
            started[name].set()
            assert all(event.wait(60) for event in started.values())  # each run's first calls come with both active
            return run(rendered, task)
        return waiting

    with LoopbackServer(billing) as server, ThreadPoolExecutor(4) as pool:
        model = openai_compatible("m", base_url=server.url + "/v1", api_key_env=None)

        def one(name: str) -> None:
            results[name] = evolve(router_tasks(0, signals=1), route_reward,
                                   run=both_running(name, asking_from_threads(model, pool)), propose=RouterReflector(),
                                   rounds=1, n_workers=1, store=tmp_path / name)

        threads = [threading.Thread(target=one, args=(name,)) for name in started]
        [thread.start() for thread in threads]
        [thread.join() for thread in threads]
    a, b = results["a"].usage, results["b"].usage
    assert a.unattributed == b.unattributed > 0  # each told of every call neither could claim
    assert a.model.calls + b.model.calls + a.unattributed == billing.requests
    for result in results.values():
        assert any("went on no run's bill" in w and "contextvars.copy_context().run" in w for w in result.warnings)


def test_where_no_run_is_active_a_rollouts_thread_calls_come_back_with_it():
    """As in a worker process or a Ray actor: the rollout that ran catches them, and they travel
    back in its spend."""
    billing = Billing()
    task = router_tasks(0, signals=1)[0]
    with LoopbackServer(billing) as server, ThreadPoolExecutor(3) as pool:
        model = openai_compatible("m", base_url=server.url + "/v1", api_key_env=None)
        rollout = roll_out(asking_from_threads(model, pool, times=3), route_reward, "", task)
        model("a call made after the rollout, on no rollout's bill")
    assert rollout.error is None and billing.requests == 4
    assert rollout.spend.calls == 3 and rollout.spend.input_tokens + rollout.spend.output_tokens > 0


def test_a_call_its_rollout_handed_its_context_to_and_did_not_wait_for_is_a_stray_call_not_lost():
    """The rollout's spend is read as it returns; a call carrying its meter that ends later was
    added to that meter, which nothing read again: on no bill. It is the run's stray call."""
    billing, ended = Billing(), threading.Event()
    task = router_tasks(0, signals=1)[0]
    strays = ModelUsage()
    with LoopbackServer(billing) as server, ThreadPoolExecutor(1) as pool:
        model = openai_compatible("m", base_url=server.url + "/v1", api_key_env=None)

        def hands_off(rendered: str, task) -> str:
            pool.submit(contextvars.copy_context().run, lambda: ended.wait(10) and model(task.prompt))
            return "general"  # waits for none of it

        with catching_strays(strays.add, missed=lambda: None):
            rollout = roll_out(hands_off, route_reward, "", task)
            ended.set()
            pool.shutdown(wait=True)
    assert billing.requests == 1 and rollout.spend.calls == 0
    assert strays.calls == 1 and strays.input_tokens > 0

"""A rollout given up on at its `rollout_timeout` takes its HTTP model calls with it: the one it
was in ends at the same deadline (its slot freed), one still waiting for a slot is never sent, and
the run's bill matches what the server saw."""

from __future__ import annotations

import json
import threading
import time

import pytest

from agentdescent import Budget, SingleSlot, Task, evolve, reflector, scorer
from agentdescent.agents.base import cut_off_at
from agentdescent.engine.calls import units
from agentdescent.engine.calls.units import roll_out
from agentdescent.errors import AgentError
from tests import keyword_domain as domain
from tests.doubles import settles
from tests.loopback import LoopbackServer, Response, openai_chat
from tests.test_agents_http import KEY, gpt

TASK = Task(id="t", prompt="p")

pytestmark = pytest.mark.usefixtures("no_provider_env")


@pytest.fixture
def keyed(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)


@pytest.fixture
def left_running():
    """The threads of abandoned calls this test left running: those an earlier test of the same
    process left are not its own."""
    before = units.abandoned_threads()
    return lambda: units.abandoned_threads() - before


def exact(task, output):
    return float(output == "ok")


def test_a_rollout_abandoned_at_its_timeout_ends_its_hung_call_and_frees_the_slot(keyed, left_running):
    def reply(prompt):  # by what is asked, not by the order requests come in
        return Response(delay=60) if "hang" in prompt else "ok"  # the loopback ends its wait on close

    with LoopbackServer(openai_chat(reply)) as server:
        model = gpt(server, max_concurrency=1)  # its own timeout: the default 300 s
        assert model("warm up") == "ok"  # its HTTP client made, so that the hung call is surely sent in time
        hung = roll_out(lambda rendered, task: model("hang"), exact, "", TASK, timeout=1)
        assert "rollout_timeout=1 s" in hung.error  # given up on, or the call ended at that cutoff first: one instant
        assert settles(lambda: not left_running())  # its thread is not left in the call
        answered = roll_out(lambda rendered, task: model("go"), exact, "", TASK, timeout=30)  # long before the hung call's 300 s
        assert answered.reward == 1.0  # the slot is free again
    assert len(server.requests) == 3 and (model.usage.calls, model.usage.failures) == (3, 1)


def test_a_call_that_gets_no_slot_before_its_rollouts_timeout_is_never_sent_nor_billed(keyed, left_running):
    release = threading.Event()

    def reply(prompt):
        if prompt == "first":
            release.wait(10)  # holds the model's one slot
        return "ok"

    with LoopbackServer(openai_chat(reply)) as server:
        model = gpt(server, max_concurrency=1)
        first = threading.Thread(target=model, args=("first",))
        first.start()
        assert settles(lambda: len(server.requests) == 1)
        waited = roll_out(lambda rendered, task: model("second"), exact, "", TASK, timeout=0.3)
        gave_up = settles(lambda: not left_running(), seconds=2)  # not left blocked on the slot
        release.set()
        first.join(10)
        time.sleep(0.3)  # room for a request sent late
    assert gave_up and len(server.requests) == 1
    assert waited.reward == 0.0 and waited.spend.calls == 0 and (model.usage.calls, model.usage.failures) == (1, 0)


def test_an_abandoned_rollout_brings_back_what_its_calls_had_cost_by_then(keyed):
    replies = iter(["a first answer", Response(delay=60)])
    with LoopbackServer(openai_chat(lambda prompt: next(replies))) as server:
        model = gpt(server)
        abandoned = roll_out(lambda rendered, task: model("one") + model("two"), exact, "", TASK, timeout=2)
    assert "rollout_timeout=2 s" in abandoned.error and len(server.requests) == 2
    # the first call's tokens; the hung one is a call too where it ended at the cutoff before the rollout gave up
    assert (abandoned.spend.input_tokens, abandoned.spend.output_tokens) == (1, 3) and abandoned.spend.calls in (1, 2)


def test_a_call_says_which_cutoff_ended_it_and_is_not_made_once_it_has_passed(keyed):
    with LoopbackServer(openai_chat(lambda prompt: Response(delay=60))) as server:
        model = gpt(server)
        with cut_off_at(time.monotonic() + 1.0, "the test's limit"), pytest.raises(AgentError) as ended:
            model("go")  # the message says the cutoff, not the 300 s timeout, ended it
        assert "no complete reply within the test's limit, which ends it before its own timeout=300 s" in str(ended.value)
        with cut_off_at(time.monotonic() - 1, "the test's limit"), \
                pytest.raises(AgentError, match="the call was not made: the test's limit ran out before it got one"):
            model("late")
    assert len(server.requests) == 1 and (model.usage.calls, model.usage.failures) == (1, 1)


def test_a_few_hung_calls_neither_stall_the_run_nor_leave_its_bill_apart_from_the_servers(keyed, left_running):
    """Eight rollouts' requests (as many as the model's slots) are never answered; each rollout
    that sent one is abandoned at rollout_timeout, and the rest of the run goes on."""
    chat = openai_chat(lambda p: domain.next_rule(p) if "<instructions>" in p else domain.answer(p))
    count, billed, lock = iter(range(1, 10_000)), [], threading.Lock()

    def handle(request):
        with lock:  # the rollouts' requests are counted, not the reflections'
            number = 0 if "<instructions>" in json.dumps(request.json) else next(count)
        if 20 <= number < 28:  # some of the first round's (the 14 before measure the start)
            return Response(delay=60)
        response = chat(request)
        with lock:
            billed.append(response.body["usage"])
        return response

    tasks = [Task(**task) for task in domain.tasks()]
    with LoopbackServer(handle) as server:
        model = gpt(server)
        result = evolve(tasks, scorer("exact"), run=lambda rendered, task: model(f"{rendered}\n\n{task.prompt}"),
                        propose=reflector(model), strategy=SingleSlot("Answer with the code.\n"), rounds=2, n_workers=2,
                        budget=Budget(rollout_timeout=1))
        sent = len(server.requests)
        assert settles(lambda: not left_running())  # no thread left in a call, nor waiting for a slot
        assert len(server.requests) == sent  # nor sending one late
    assert result.stop_reason == "ran all 2 rounds", result.stop_reason
    assert all("rollout_timeout=1 s" in error for error in result.usage.errors)
    # each rollout of a hung request is one call; one abandoned while it still waited for a slot is
    # one call as a unit, as a rollout of plain functions is, but no model call: nothing was sent
    unsent = result.usage.failures - 8
    assert len(server.requests) <= result.usage.calls <= len(server.requests) + unsent
    assert result.usage.model.calls - result.usage.model.failures == len(billed)
    assert result.usage.model.input_tokens == sum(usage["prompt_tokens"] for usage in billed)
    assert result.usage.model.output_tokens == sum(usage["completion_tokens"] for usage in billed)

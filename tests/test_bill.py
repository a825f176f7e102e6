"""The bill of a detached run: live while it runs, true after a kill, capped across kills, and its
money: what the CLI agents report, and the spec's price for the calls that report none.

The agent and the reflector of these runs count each call that reaches them in a file of the
test's own (`keyword_domain.counted_answer`, `counted_rule`): the real bill, set beside what the
run reports. The kills are real SIGKILLs of the run's process, at random moments.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from pathlib import Path

import pytest

from agentdescent import Task, evolve
from agentdescent.agents.base import ModelUsage, Price, metering
from agentdescent.agents.scripted import scripted
from agentdescent.cli.main import main
from agentdescent.engine.calls.executors import ThreadExecutor
from agentdescent.engine.persist.checkpoint import RunFiles
from agentdescent.engine.persist.journal import StartLog
from agentdescent.report import write_report
from agentdescent.result import EvolveResult
from agentdescent.runs.status import LIVE
from agentdescent.usage import RunReturned, Usage, dollars, money_spent
from tests import keyword_domain as domain
from tests.loopback import LoopbackServer, openai_chat
from tests.runs_support import wait

CAP = 200
KILLS = 8


def counted_spec(folder, **fields) -> dict:
    return domain.spec(folder, agent="python:tests.keyword_domain:counted_answer",
                       reflector="python:tests.keyword_domain:counted_rule", **fields)


def real_calls(path) -> int:
    return path.stat().st_size if path.exists() else 0


def test_max_calls_holds_across_random_kills_and_the_bill_reported_is_the_real_one(service, tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("KEYWORD_CALLS", str(calls))
    monkeypatch.setenv("KEYWORD_DELAY", "0.15")  # rollouts and reflections in flight when a kill comes
    rng = random.Random(29)
    run_id = service.start(counted_spec(tmp_path, budget={"max_calls": CAP}, target_reward=None)).run_id
    run = service.store.get(run_id)
    kills = 0
    while kills < KILLS:
        status = wait(service, run_id, until=lambda s: s.pid is not None or s.state not in LIVE)
        if status.state not in LIVE:
            break
        # at a random point of the process's start or work: a random time, or a random number of
        # calls if they come first (a fast machine's lives would spend the cap in fewer than KILLS)
        deadline, until = time.monotonic() + rng.uniform(0.2, 0.8), real_calls(calls) + rng.randint(0, CAP // (2 * KILLS))
        while time.monotonic() < deadline and real_calls(calls) < until:
            time.sleep(0.01)
        if service.status(run_id).state not in LIVE:
            break
        os.kill(status.pid, signal.SIGKILL)
        kills += 1
        killed = wait(service, run_id, until=lambda s: s.state == "interrupted")
        usage, _ = RunFiles(run.ledger).bill()
        assert killed.calls == usage.calls >= real_calls(calls)  # true after the kill, read from its files
        service.resume(run_id)
    done = wait(service, run_id, timeout=180)
    assert done.state == "finished", done
    assert kills == KILLS, f"the run ended after {kills} kills; the cap is too small to test"
    result = EvolveResult.from_json(run.file("result.json").read_text(encoding="utf-8"))
    real = real_calls(calls)
    assert real <= CAP
    # A call counts from the moment it starts: one a kill caught before it reached the agent is on
    # the bill and not in the agent's count; never the other way round.
    assert real <= result.usage.calls <= real + kills
    assert done.calls == result.usage.calls
    assert "the call budget is spent" in done.stop_reason


def test_status_read_from_another_process_shows_the_bill_while_the_run_goes(service, tmp_path, monkeypatch):
    monkeypatch.setenv("KEYWORD_CALLS", str(tmp_path / "calls"))
    monkeypatch.setenv("KEYWORD_DELAY", "0.3")  # a round takes seconds: the bill must move inside it
    run_id = service.start(counted_spec(tmp_path)).run_id
    during = wait(service, run_id, until=lambda s: s.state not in LIVE or (s.round == 0 and s.calls > 0))
    assert during.state == "running" and during.round == 0 and during.tokens > 0  # before the first round ends
    after = wait(service, run_id, until=lambda s: s.state not in LIVE or s.round >= 1)
    assert after.calls >= during.calls > 0
    service.cancel(run_id)


def test_a_run_cancelled_before_its_first_measurement_says_so_not_zero(service, tmp_path, monkeypatch):
    monkeypatch.setenv("KEYWORD_DELAY", "2")  # the held-out measurement at the start takes a while
    run_id = service.start(domain.spec(tmp_path)).run_id
    wait(service, run_id, until=lambda s: s.state == "running")
    cancelled = service.cancel(run_id)
    assert cancelled.state == "cancelled" and cancelled.initial_reward is None and cancelled.best_reward is None
    assert "not measured yet" in cancelled.message and "0.000" not in cancelled.message


def test_a_contract_broken_mid_run_leaves_the_calls_it_started_on_the_bill():
    real, lock = [0], threading.Lock()

    def run(rendered, task):
        with lock:
            real[0] += 1
        time.sleep(0.005)  # rollouts in flight when the contract breaks
        return "2026" if "year" in rendered else "x"

    def reward(task, output):
        with lock:
            scored = real[0]
        return 1.5 if scored > 60 else float("2026" in output)  # out of [0, 1] once the rounds have begun

    def propose(*args):
        with lock:
            real[0] += 1
        return "state the year"

    result = evolve([Task(id=f"t{i}", prompt=str(i)) for i in range(24)], reward, run=run,
                    propose=propose, rounds=3, n_workers=4)
    assert "it must be in [0, 1]" in result.error
    assert result.usage.abandoned > 0 and result.usage.calls == result.usage.units + result.usage.abandoned
    returned = result.usage.as_record()
    time.sleep(0.2)  # the calls left running finish
    assert result.usage.calls == real[0]  # each call that ran is on the bill, and none that did not
    assert result.usage.as_record() == returned  # the calls left running change nothing once it has returned


def test_a_call_a_pool_thread_takes_after_the_run_returned_never_starts(tmp_path):
    """The run settles its bill from the start log as it returns; a call a pool thread took just
    before the pools shut down is refused, not run off the bill."""
    usage, starts = Usage(), StartLog(tmp_path / "starts")
    pool = ThreadExecutor(1, on_start=lambda: usage.start(starts.mark))
    release, ran = threading.Event(), []
    try:
        first = pool.submit(release.wait, 60)
        late = pool.submit(ran.append, "late")
        deadline = time.monotonic() + 60
        while starts.count() < 1 and time.monotonic() < deadline:  # the thread took the first
            time.sleep(0.01)
        usage.settle(starts.count)
        release.set()
        assert first.result(timeout=60) is True
        with pytest.raises(RunReturned):
            late.result(timeout=60)
        assert ran == [] and starts.count() == 1 and usage.abandoned == 1
    finally:
        release.set()
        pool.shutdown()
        starts.close()


def test_a_run_killed_after_it_ended_and_before_its_result_was_recorded_is_recorded_on_resume(service, tmp_path,
                                                                                               monkeypatch):
    """Its checkpoint said it had ended: the resume started a new run on its ledger, which took the
    bill and the history for another run's (489 calls became 50) and paid for the start again."""
    calls = tmp_path / "calls"
    monkeypatch.setenv("KEYWORD_CALLS", str(calls))
    run_id = service.start(counted_spec(tmp_path, rounds=3)).run_id
    done = wait(service, run_id)
    assert done.state == "finished"
    run, paid = service.store.get(run_id), real_calls(calls)
    deadline = time.monotonic() + 30
    while run.alive() and time.monotonic() < deadline:  # its status is written before its process lets go of the lock
        time.sleep(0.05)
    run.file("result.json").unlink()  # as a SIGKILL between the checkpoint and the result leaves it
    run.write_status(done.model_copy(update={"state": "interrupted", "calls": 0, "outcomes": {}}))
    service.resume(run_id)
    again = wait(service, run_id)
    assert again.state == "finished" and real_calls(calls) == paid  # nothing ran again
    assert again.calls == done.calls and again.outcomes == done.outcomes
    assert again.best_reward == done.best_reward and again.initial_reward == done.initial_reward
    assert run.file("result.json").exists()


def test_a_call_that_reports_no_cost_is_priced_at_its_clients_price_or_counted_as_unpriced():
    model, meter = scripted(lambda prompt: "a reply of some words"), ModelUsage()
    model.usage.price = Price(per_1k_tokens=0.5)
    with metering(meter):
        model("a prompt " * 100)
    assert model.usage.tokens > 0 and model.usage.cost_usd == pytest.approx(model.usage.tokens / 1000 * 0.5)
    assert meter.as_dict() == model.usage.as_dict() and model.usage.unpriced == 0
    per_call = scripted(lambda prompt: "ok")
    per_call.usage.price = Price(per_call=0.02, per_1k_tokens=0.5)  # a price a call wins, as in the quote
    per_call("a")
    per_call("b")
    assert per_call.usage.cost_usd == pytest.approx(0.04)
    bare = scripted(lambda prompt: "ok")
    bare("a")
    assert (bare.usage.cost_usd, bare.usage.unpriced) == (0, 1)


@pytest.mark.parametrize("price", [0.5, None])
def test_the_runs_money_is_the_cli_agents_own_and_the_specs_price_for_the_http_calls(service, tmp_path, capsys, price):
    """A run whose agent is Claude Code (a stand-in that reports $0.0125 a call) and whose reflector
    is an HTTP model: its calls were left out of the money, and nothing said so."""
    told, chat = [], openai_chat(domain.next_rule)

    def reflector(request):  # the tokens the server tells of each reflection
        answer = chat(request)
        told.append(answer.body["usage"]["total_tokens"])
        return answer

    fake = str(Path(__file__).parent / "fake_clis" / "claude")
    with LoopbackServer(reflector) as server:
        spec = domain.spec(tmp_path, agent={"kind": "claude_code", "options": {"executable": fake}}, rounds=2,
                           reflector={"kind": "openai", "model": "m", "options": {"base_url": server.url + "/v1",
                                                                                 "api_key_env": None}},
                           target_reward=None, price_per_1k_tokens=price)
        run_id = service.start(spec).run_id
        done = wait(service, run_id)
    assert done.state == "finished", done
    result = EvolveResult.from_json(service.store.get(run_id).text("result.json"))
    model, reflections = result.usage.model, len(told)
    assert reflections and model.calls > reflections
    cli = (model.calls - reflections) * 0.0125
    expected = cli + (sum(told) / 1000 * price if price else 0)
    assert model.cost_usd == pytest.approx(expected) and done.cost_usd == pytest.approx(expected)
    assert model.unpriced == done.unpriced == (0 if price else reflections)
    assert main(["status", run_id]) == 0 and f" tokens, {money_spent(done.cost_usd, done.unpriced)}\n" in capsys.readouterr().out
    summary = write_report(run_id, store=service.store).read_text(encoding="utf-8").split("<dt>calls</dt>")[1][:400]
    if price:
        assert f"{dollars(model.cost_usd)}</dd>" in summary
    else:
        assert f"{dollars(model.cost_usd)}, not counting {reflections} calls with no known cost" in summary

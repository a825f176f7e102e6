"""The figures a detached run reports: its calls while calls are in flight and when it stops at
the start, and its held-out rewards at the start and the end when the start's measurement had
rollouts that failed with an error. After the count of calls started itself and the last word of a
run that raised, each through the real runner and store; a model, where one is needed, is a
loopback HTTP server."""

from __future__ import annotations

import json
import pickle
import random
import threading
import time

import pytest

from agentdescent import events, evolve, scripted
from agentdescent.engine import evolve as evolve_module
from agentdescent.engine.persist.checkpoint import RunFiles
from agentdescent.engine.persist.journal import StartLog
from agentdescent.engine.split import split_tasks
from agentdescent.errors import UserError
from agentdescent.runs.status import LIVE
from agentdescent.types import Rollout, Spend, Task
from agentdescent.usage import Usage
from tests import keyword_domain as domain
from tests.loopback import LoopbackServer, Response, openai_chat
from tests.runs_support import wait
from tests.test_doomed_runs import held_out_ids

START_RULES = "Answer with the code.\nrule k0. rule k1.\n"  # the held-out tasks asking for k0 or k1 pass at the start


def settled(service, run_id: str) -> int:
    """The run's bill read from its ledger's files: each call on its start log counted once."""
    return RunFiles(service.store.get(run_id).ledger).bill()[0].calls


def test_the_calls_started_count_each_call_in_flight_once_and_are_the_bill_once_settled(tmp_path):
    usage, starts = Usage(), StartLog(tmp_path / "starts")
    try:
        for _ in range(3):
            usage.start(starts.mark)
        usage.count_rollout(Rollout(task=Task(id="a", prompt="a"), output="", reward=1.0, spend=Spend(calls=2)))
        assert (usage.calls, usage.started_calls(starts.count())) == (2, 4)  # two in flight, at one call each
        usage.settle(starts.count)  # the two left in flight are abandoned: on the bill, and not twice
        assert usage.calls == usage.started_calls(starts.count()) == 4
    finally:
        starts.close()


def test_the_bill_keeps_its_estimated_tokens_and_stray_calls_and_reads_one_written_without_them():
    usage = Usage()
    usage.count_rollout(Rollout(task=Task(id="a", prompt="a"), output="", reward=1.0,
                                spend=Spend(calls=2, input_tokens=30, output_tokens=5, estimated_tokens=10)))
    usage.count_stray(calls=1, input_tokens=8, estimated_tokens=8)
    for again in (Usage.from_record(json.loads(json.dumps(usage.as_record()))), pickle.loads(pickle.dumps(usage))):
        assert (again.calls, again.stray_calls, again.tokens, again.estimated_tokens) == (3, 1, 43, 18)
    older = {name: value for name, value in usage.as_record().items() if name not in ("stray_calls", "unattributed")}
    older["model"] = {name: value for name, value in older["model"].items() if name != "estimated_tokens"}
    read = Usage.from_record(older)  # a checkpoint of a run written before these were kept
    assert (read.calls, read.tokens, read.estimated_tokens, read.stray_calls) == (3, 43, 0, 0)
    assert Spend(**{"calls": 1, "input_tokens": 4}).estimated_tokens == 0  # a journal's rollout line, likewise


def test_a_run_that_raises_sends_its_settled_bill_last_with_the_calls_that_landed_after_the_heartbeat(
        tmp_path, monkeypatch):
    made: list[Usage] = []
    monkeypatch.setattr(evolve_module, "Usage", lambda: made.append(Usage()) or made[-1])  # the run's, to watch
    tasks = [Task(id=f"t{i}", prompt=str(i)) for i in range(12)]
    bad, slow = split_tasks(tasks, 0.3, random.Random("0:split"))[1][:2]  # held out: measured at the start
    model, release = scripted(lambda asked: "ok"), threading.Event()

    def run(rendered, task):  # `slow` asks a metered model four times, once the heartbeat has had its last word
        if task.id == slow.id:
            release.wait(60)
            for _ in range(4):
                model(task.prompt)
        return "ok"

    def on_event(event):
        if isinstance(event, events.Spent) and threading.current_thread() is threading.main_thread() and not release.is_set():
            release.set()  # the heartbeat's last word (the run has raised): `slow`'s two draws land now, before the bill settles
            deadline = time.monotonic() + 60
            while made[0].model.calls < 8 and time.monotonic() < deadline:
                time.sleep(0.01)
        seen.append(event)

    seen: list = []
    with pytest.raises(UserError, match="nan"):
        evolve(tasks, lambda task, output: float("nan") if task.id == bad.id else 1.0, run=run,
               propose=lambda *failure: None, rounds=1, store=tmp_path / "ledger", on_event=on_event)
    spent = [e.calls for e in seen if isinstance(e, events.Spent)]
    assert made[0].model.calls == 8 and made[0].settled
    assert isinstance(seen[-1], events.Spent) and spent[-1] == made[0].calls  # the heartbeat's last word told less
    assert spent[-1] == RunFiles(tmp_path / "ledger").bill()[0].calls


def test_a_run_stopped_by_its_scorer_at_the_start_reports_every_call_it_started(service, tmp_path, monkeypatch):
    calls = tmp_path / "calls"
    monkeypatch.setenv("KEYWORD_CALLS", str(calls))
    monkeypatch.setenv("KEYWORD_DELAY", "0.2")  # the start's rollouts are in flight when the scorer breaks
    spec = domain.spec(tmp_path, agent="python:tests.keyword_domain:counted_answer",
                       scorer="python:tests.failing_scorers:nan_later")
    run_id = service.start(spec).run_id
    status = wait(service, run_id)
    assert status.state == "failed" and "nan" in status.error, status
    reached = calls.stat().st_size  # the calls that reached the agent
    # the settled bill: the calls the broken rollout and those left in flight made are paid for too
    assert status.calls == settled(service, run_id) >= reached > 0


def test_status_counts_the_calls_in_flight_as_the_budget_does(service, tmp_path, monkeypatch, no_provider_env):
    answered = 4
    seen = []

    def reply(prompt: str):  # the first calls are answered, the rest hang until the run is cancelled
        seen.append(prompt)
        return domain.answer(prompt) if len(seen) <= answered else Response(delay=3600, body={})

    with LoopbackServer(openai_chat(reply)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-test-key-0001")
        spec = domain.spec(tmp_path, agent={"kind": "openai", "model": "m", "options": {"max_retries": 0}})
        run_id = service.start(spec).run_id
        live = wait(service, run_id, timeout=60,
                    until=lambda s: s.state not in LIVE or (len(server.requests) > answered and s.calls >= len(server.requests)))
        assert live.state == "running" and live.round == 0, live  # still measuring where it starts
        cancelled = service.cancel(run_id)
        assert cancelled.state == "cancelled"
        assert cancelled.calls == settled(service, run_id) >= len(server.requests)


@pytest.mark.parametrize("reflector, changed", [("silent", False), ("next_rule", True)])
def test_a_grader_busy_at_the_start_shows_no_held_out_gain_the_artifact_did_not_make(
        service, tmp_path, monkeypatch, reflector, changed):
    (tmp_path / "prompt.md").write_text(START_RULES, encoding="utf-8")
    monkeypatch.setenv("BUSY_TASK", "t12")  # held out, asks for k0: right at the start, its scorer busy there
    tasks = domain.tasks()
    held_out = held_out_ids(tasks)
    assert "t12" in held_out
    start = sum(t["gold"] in ("k0", "k1") for t in tasks if t["id"] in held_out) / len(held_out)
    spec = domain.spec(tmp_path, scorer="python:tests.failing_scorers:busy_at_first",
                       reflector=f"python:tests.keyword_domain:{reflector}", **({} if changed else {"rounds": 1}))
    status = wait(service, service.start(spec).run_id, timeout=120)
    assert status.state == "finished", status
    assert any("the held-out reward at the start counts 1 of 7" in w for w in status.warnings)
    if changed:  # the start's figure is measured again where it failed: the gain is the artifact's
        assert status.best_reward == 1.0 and status.initial_reward == pytest.approx(start)
        assert any(f"at the start is {start:.3f}, not the" in w and "first measured" in w for w in status.warnings)
    else:  # nothing committed: the same version at the start and the end, one figure
        assert "committed" not in status.outcomes and status.version == status.stable_version
        assert status.initial_reward == status.best_reward == pytest.approx(start)
        assert f"held-out {start:.3f} -> {start:.3f}" in status.message

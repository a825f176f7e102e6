"""The run service: specs refused with every problem, a plan with a quote, detached runs followed,
shown, accepted and rejected, and the host as the worker."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from agentdescent import events
from agentdescent.cli.watch import next_step
from agentdescent.errors import UserError
from agentdescent.ledger import Ledger
from agentdescent.runs.hostwork import Answer, whole_prompt
from agentdescent.runs.mailbox import Claim
from agentdescent.runs.rolloutdir import ROLLOUTS_PREFIX
from agentdescent.runs.spec import SpecError, read_spec
from agentdescent.runs.status import LIVE, RunStatus, StatusTracker
from tests import keyword_domain as domain
from tests.procutil import gone
from tests.runs_support import wait

LEAD = "Answer with the code.\n"


def test_a_bad_spec_lists_every_problem_by_field(service, tmp_path):
    with pytest.raises(SpecError) as caught:
        read_spec({"target": "x", "tasks": [], "agent": "gpt-4", "n_workers": 0, "rouds": 3})
    assert {p.field for p in caught.value.problems} == {"agent.kind", "n_workers", "rouds"}
    (tmp_path / "skill").mkdir()
    (tmp_path / "skill" / "SKILL.md").write_text("# s\n", encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        service.plan({"target": str(tmp_path / "skill"), "tasks": domain.tasks()[:2], "frozen": ["hooks/*"],
                      "agent": "codex", "reflector": "python:no_such_module:fn"}, base=tmp_path)
    fields = {p.field: p.message for p in caught.value.problems}
    assert set(fields) == {"frozen[0]", "tasks", "agent", "reflector"}
    assert "matches no file" in fields["frozen[0]"] and "at least 6" in fields["tasks"]
    assert "not on PATH" in fields["agent"] and "no_such_module" in fields["reflector"]
    with pytest.raises(SpecError, match="target: .* does not exist"):
        service.plan({**domain.spec(tmp_path), "target": "missing.md"}, base=tmp_path)


def test_a_key_in_a_spec_is_refused_and_a_yaml_spec_reads_paths_from_its_folder(tmp_path):
    with pytest.raises(SpecError, match="credential"):
        read_spec({"target": "p.md", "tasks": "t.jsonl", "agent": {"kind": "openai", "model": "m",
                                                                   "options": {"api_key": "sk-123"}}})
    with pytest.raises(SpecError, match="env.OPENAI_API_KEY"):
        read_spec({"target": "p.md", "tasks": "t.jsonl", "agent": {"kind": "codex",
                                                                   "options": {"env": {"OPENAI_API_KEY": "x"}}}})
    folder = tmp_path / "specs"
    folder.mkdir()
    (folder / "run.yaml").write_text("target: ../prompt.md\ntasks: {file: tasks.jsonl, gold: answer}\n"
                                     "agent: openai:gpt-4o-mini\nscorer: contains\n", encoding="utf-8")
    spec = read_spec(folder / "run.yaml")
    assert spec.target == str(tmp_path / "prompt.md") and spec.tasks.file == str(folder / "tasks.jsonl")
    assert spec.scorer.name == "contains" and spec.agent.label == "openai:gpt-4o-mini"


def test_plan_quotes_calls_and_cost_before_anything_runs(service, tmp_path):
    plan = service.plan({**domain.spec(tmp_path), "price_per_call": 0.01, "max_calls": 500})
    assert plan.tasks == 24 and plan.train + plan.held_out == 24 and plan.kind == "text"
    assert 0 < plan.quote.calls_low <= plan.quote.calls_high <= 500
    assert plan.quote.cost_high_usd == pytest.approx(plan.quote.calls_high * 0.01)
    assert service.runs() == []  # nothing started


def test_a_detached_run_is_followed_shown_and_accepted_with_a_backup(service, tmp_path):
    started = service.start(domain.spec(tmp_path))
    assert started.state == "starting"
    done = wait(service, started.run_id)
    assert done.state == "finished", done
    assert done.best_reward == 1.0 and done.initial_reward < 1.0 and done.calls > 0
    assert done.outcomes.get("committed", 0) == domain.RULES
    shown = service.show(started.run_id)
    assert "+rule k0." in shown.diff and shown.files_changed == ["prompt.md"]
    (tmp_path / "change.patch").write_text(shown.diff, encoding="utf-8")
    applies = subprocess.run(["git", "apply", "--check", "change.patch"], cwd=tmp_path, capture_output=True, text=True)
    assert applies.returncode == 0, applies.stderr  # the file's own name, every line ended
    assert len(shown.committed) == domain.RULES and all(d.evidence_tasks for d in shown.committed)
    assert shown.final_reward == 1.0 and all(r.reward < 1 for r in shown.worst_rollouts)  # none of a full reward
    assert (tmp_path / "prompt.md").read_text(encoding="utf-8") == LEAD  # nothing written yet

    dry = service.accept(started.run_id, dry_run=True)
    assert dry.dry_run and dry.written == ["prompt.md"] and dry.backup is None
    assert (tmp_path / "prompt.md").read_text(encoding="utf-8") == LEAD
    accepted = service.accept(started.run_id)
    text = (tmp_path / "prompt.md").read_text(encoding="utf-8")
    assert all(f"rule k{i}." in text for i in range(domain.RULES))
    assert accepted.backup and (tmp_path / ".prompt.md.bak-1").exists() and accepted.backup in accepted.message
    assert service.status(started.run_id).state == "accepted"
    with pytest.raises(UserError, match="already accepted"):
        service.accept(started.run_id)


def test_show_lists_the_rollouts_that_fell_short_lowest_first_and_none_that_did_not(service, tmp_path):
    started = service.start(domain.spec(tmp_path, rounds=1, n_workers=1))
    assert wait(service, started.run_id).state == "finished"
    worst = service.show(started.run_id).worst_rollouts
    assert worst and all(r.reward < 1 for r in worst), worst  # one round learns a rule or two of the domain's
    assert [r.reward for r in worst] == sorted(r.reward for r in worst)


def test_two_accepts_at_once_write_once(service, tmp_path):
    run = service.start(domain.spec(tmp_path)).run_id
    wait(service, run)
    answers: list = []

    def accept() -> None:
        try:
            answers.append(service.accept(run))
        except UserError as exc:
            answers.append(exc)

    threads = [threading.Thread(target=accept) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(not isinstance(a, UserError) for a in answers) == 1
    assert all("accept" in str(a) for a in answers if isinstance(a, UserError))
    assert sorted(p.name for p in tmp_path.iterdir() if ".bak-" in p.name) == [".prompt.md.bak-1"]


def test_reject_writes_nothing_and_accept_refuses_runs_that_are_not_finished(service, tmp_path, monkeypatch):
    monkeypatch.setenv("KEYWORD_DELAY", "0.05")  # slow enough to be caught running
    run = service.start(domain.spec(tmp_path)).run_id
    wait(service, run, until=lambda s: s.state == "running")
    with pytest.raises(UserError, match="still running"):
        service.accept(run)
    cancelled = service.cancel(run)
    assert cancelled.state == "cancelled"
    with pytest.raises(UserError, match="cancelled, not finished"):
        service.accept(run)
    with pytest.raises(UserError, match=r"no L1 change abc waits: run \S+ is cancelled.* resume \S+ goes on and asks again"):
        service.accept(run, change="abc")  # the change it had pending: a resume asks again, not accept or reject
    rejected = service.reject(run)
    assert "not touched" in rejected.message and service.status(run).state == "rejected"
    assert "(it had not finished: it ends here, and cannot be resumed)" in rejected.message
    assert rejected.next == service.status(run).next == "agentdescent evolve SPEC starts a new run"
    with pytest.raises(UserError, match="rejected before it finished, so it has no final version"):
        service.accept(run)
    with pytest.raises(UserError, match="was rejected, so there is nothing to resume; agentdescent evolve SPEC"):
        service.resume(run)
    assert (tmp_path / "prompt.md").read_text(encoding="utf-8") == LEAD


def test_unknown_ids_list_the_known_ones_and_a_prefix_is_enough(service, tmp_path):
    run = service.start(domain.spec(tmp_path)).run_id
    with pytest.raises(UserError) as caught:
        service.status("nope")
    assert run in str(caught.value)
    assert service.status(run[:8]).id == run
    wait(service, run)


def test_a_run_resumed_twice_at_once_starts_once_and_the_other_is_told_it_is_this_run(service, tmp_path, monkeypatch):
    """The second resume was told that another run was being started on the target."""
    from agentdescent.runs.service import RESUME_LOCK

    monkeypatch.setenv("KEYWORD_DELAY", "0.05")  # slow enough to be cancelled running
    run_id = service.start(domain.spec(tmp_path)).run_id
    wait(service, run_id, until=lambda s: s.state == "running")
    service.cancel(run_id)
    with service.store.get(run_id).holding(RESUME_LOCK, "held"):  # as a resume of this run holds it while it starts
        with pytest.raises(UserError, match=rf"^run {run_id} is being resumed right now, by another command; "
                                            rf"agentdescent watch {run_id} follows it$"):
            service.resume(run_id)
    answers: list = []
    threads = [threading.Thread(target=lambda: answers.append(_tried(service.resume, run_id))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    refused = [str(a) for a in answers if isinstance(a, UserError)]
    assert len(refused) == 3 and all(f"run {run_id} is" in said and "another run" not in said for said in refused)


def _tried(call, *args):
    """What `call(*args)` returned, or the `UserError` it raised."""
    try:
        return call(*args)
    except UserError as exc:
        return exc


def test_a_second_run_on_one_target_is_refused_unless_asked_and_runs_do_not_interfere(service, tmp_path, monkeypatch):
    monkeypatch.setenv("KEYWORD_DELAY", "0.02")
    first = service.start(domain.spec(tmp_path)).run_id
    with pytest.raises(UserError, match=f"run {first} is already evolving"):
        service.start(domain.spec(tmp_path))
    second = service.start(domain.spec(tmp_path), allow_concurrent=True).run_id
    other = tmp_path / "other"
    other.mkdir()
    third = service.start(domain.spec(other)).run_id
    ends = [wait(service, r) for r in (first, second, third)]
    assert [e.state for e in ends] == ["finished"] * 3
    assert all(e.outcomes.get("committed") == domain.RULES for e in ends)
    assert len({service.store.get(r).ledger for r in (first, second, third)}) == 3


def test_a_run_started_beside_another_on_purpose_resumes_beside_it(service, tmp_path, monkeypatch):
    """Resumed, it was refused while the other ran, and told to ask with --allow-concurrent, which
    resume does not take."""
    def stopped(**options) -> str:  # a run ended, then marked cancelled: one resume takes up
        run_id = service.start(domain.spec(tmp_path, rounds=1), **options).run_id
        wait(service, run_id)
        run = service.store.get(run_id)
        run.write_status(run.status().model_copy(update={"state": "cancelled"}))
        return run_id

    alone = stopped()
    monkeypatch.setenv("KEYWORD_DELAY", "0.2")
    going = service.start(domain.spec(tmp_path, rounds=40, target_reward=None)).run_id
    monkeypatch.delenv("KEYWORD_DELAY")
    beside = stopped(allow_concurrent=True)
    with pytest.raises(UserError, match=f"run {going} is already evolving .*then resume this one, which was started "
                                        "alone$") as refused:
        service.resume(alone)
    assert "--allow-concurrent" not in str(refused.value)
    service.resume(beside)
    assert wait(service, beside).state == "finished" and service.status(going).state in LIVE


def test_the_host_does_the_rollouts_and_the_reflections(service, tmp_path):
    """No model: the host (here, the test) takes what the run posts, grouped by candidate, and
    answers it in batches; the text artifact comes once per candidate, beside the tasks."""
    run = service.start({**domain.spec(tmp_path), "agent": "host", "reflector": "host", "host_timeout": 60}).run_id
    waiting = wait(service, run, until=lambda s: s.waiting_on is not None)
    assert "rollout" in waiting.waiting_on
    assert f"ask for the host work of AgentDescent run {run}" in next_step(waiting)  # what a shell user is told to do
    written = service.store.get(run)  # status.json itself has it, for the SessionStart hook
    deadline = time.monotonic() + 5
    while written.status().waiting_on is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "rollout" in written.status().waiting_on
    holder, answered_twice, known = Claim(holder="test", pid=os.getpid()), False, {}
    while service.status(run).state in ("starting", "running"):
        work = service.host_next(run, holder, wait=1)
        answers = []
        for group in work.work:
            assert len(json.dumps(work.model_dump())) < 8_000
            if group.context is not None:
                known[group.candidate] = group.context  # sent once: the first time this holder meets it
            for request in group.requests:
                if group.kind == "rollout":
                    answers.append(Answer(request_id=request.request_id,
                                          answer=domain.answer(f"{known[group.candidate]}\n\n{request.prompt}")))
                else:
                    asked = whole_prompt(group, request, known.get(group.candidate))  # its artifact in its place
                    answers.append(Answer(request_id=request.request_id, answer=domain.next_rule(asked)))
        if answers:
            assert service.host_submit(run, answers).received == [a.request_id for a in answers]
            if not answered_twice:
                again = service.host_submit(run, answers[:1])
                why = next(iter(again.refused.values()))  # answered, or already taken up by the run and gone
                assert again.received == [] and ("already answered" in why or "no such open request" in why)
                answered_twice = True
    done = service.status(run)
    assert done.state == "finished" and done.best_reward == 1.0 and done.waiting_on is None
    late = service.host_submit(run, [Answer(request_id="abc123", answer="late")])
    assert "is finished: nothing waits for answers" in late.refused["abc123"]
    assert not service.host_next(run, holder).running


def test_a_host_that_never_answers_fails_its_rollouts_and_the_run_stops_saying_so(service, tmp_path):
    run = service.start({**domain.spec(tmp_path), "agent": "host", "reflector": "host", "host_timeout": 0.3,
                         "rounds": 1}).run_id
    done = wait(service, run)
    assert done.state == "failed" and "no answer" in done.error
    assert "every rollout of the held-out measurement at the start failed" in done.error


@pytest.mark.parametrize("ending", ["cancel", "rollout_timeout"])
def test_a_host_run_that_ended_leaves_no_request_in_its_mailbox(service, tmp_path, ending):
    """Cancelled, its process ended before its waits withdrew their requests; failed with every
    rollout abandoned at rollout_timeout, its requests stayed for host_timeout: either way the
    mailbox said the host had work nobody waited for."""
    fields = {"budget": {"rollout_timeout": 1}} if ending == "rollout_timeout" else {}
    run = service.start({**domain.spec(tmp_path), "agent": "host", "host_timeout": 600, "rounds": 1, **fields}).run_id
    wait(service, run, until=lambda s: s.waiting_on is not None)
    if ending == "cancel":
        service.cancel(run)
    done = wait(service, run)
    assert done.state == ("cancelled" if ending == "cancel" else "failed") and done.waiting_on is None, done
    assert not list(service.store.get(run).file("mailbox").glob("*.request.json"))


def test_events_and_status_are_plain_json_a_watcher_can_read(service, tmp_path):
    run = service.start(domain.spec(tmp_path)).run_id
    wait(service, run)
    folder = service.store.get(run)
    kinds = [json.loads(line)["event"] for line in folder.file("events.jsonl").read_text().splitlines()]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunEnded" and "Committed" in kinds
    assert json.loads(folder.file("status.json").read_text())["state"] == "finished"
    assert [r.id for r in service.runs()] == [run]


def test_a_run_that_ends_while_its_status_is_read_is_not_called_interrupted(service, tmp_path, monkeypatch):
    run = service.start(domain.spec(tmp_path)).run_id
    finished = wait(service, run)
    folder = service.store.get(run)
    folder.write_status(finished.model_copy(update={"state": "running"}))  # as read just before the last write
    alive = type(folder).alive

    def ends_meanwhile(self):  # the process writes `finished` and lets go of its lock before we look
        self.write_status(finished)
        return alive(self)

    monkeypatch.setattr(type(folder), "alive", ends_meanwhile)
    assert folder.status().state == "finished"
    monkeypatch.setattr(type(folder), "alive", alive)
    # and one that really died running, while it waited on the user's approval: nothing waits now
    folder.write_status(finished.model_copy(update={"state": "running", "waiting_on": "your approval of an L1 change"}))
    interrupted = folder.status()
    assert interrupted.state == "interrupted" and interrupted.waiting_on is None and "resume" in interrupted.next


@pytest.mark.parametrize("approve", [True, False])
def test_an_l1_change_waits_for_the_users_approval(service, tmp_path, approve):
    from tests import l1_domain

    run = service.start(l1_domain.spec(tmp_path)).run_id
    waiting = wait(service, run, until=lambda s: s.waiting_on is not None or s.state not in ("starting", "running"))
    assert waiting.waiting_on and "approval" in waiting.waiting_on, waiting
    pending = service.show(run).pending_approval
    assert pending.keys == ["scripts/answer.sh"] and "+echo yes" in pending.diff and pending.change in waiting.waiting_on
    dry = service.accept(run, dry_run=True)  # says what it would approve, and approves nothing
    assert dry.dry_run and dry.approved is None and dry.message.startswith(f"would approve L1 change {pending.change}")
    assert service.show(run).pending_approval == pending
    with pytest.raises(UserError, match=f"names the change it answers: .*--change {pending.change}"):
        service.accept(run) if approve else service.reject(run)  # which change is not said: refused
    answered = service.accept(run, change=pending.change) if approve else service.reject(run, change=pending.change)
    assert answered.approved is approve and "scripts/answer.sh" in answered.message
    done = wait(service, run)  # declined, the change is proposed again in each later round, and nobody is asked
    landed = done.outcomes.get("committed", 0)
    assert (landed == 1 and done.best_reward == 1.0) if approve else (landed == 0 and done.best_reward == 0.0)
    shown = service.show(run)
    if approve:
        assert f"; approved as L1 change {pending.change}" in shown.committed[0].reason
        with Ledger(service.store.get(run).ledger) as ledger:
            assert [c.trailers.get("Approved") for c in ledger.log() if "Diffs" in c.trailers] == [pending.change]
    else:
        first, *again = [d for d in shown.rejected if d.outcome == "declined"]
        assert f"the approver declined L1 change {pending.change}; it passed the test" in first.reason
        assert again and all(d.reason.startswith("an earlier round proposed the same change to scripts/answer.sh, and "
                                                 f"the approver declined L1 change {pending.change}") for d in again)
        assert done.outcomes["declined"] == 1 + len(again) and "rejected_by_test" not in done.outcomes
        assert f"{1 + len(again)} L1 diffs passed the test but were declined or went unanswered" in done.message
        assert done.next.startswith("nothing to write back") and shown.next == done.next


def pending_change(service, run: str, *, besides: str | None = None):
    """The L1 change the run waits on, once it waits on one other than `besides`."""
    wait(service, run, until=lambda s: s.state not in LIVE or bool(
        s.waiting_on and "approval" in s.waiting_on and (besides is None or besides not in s.waiting_on)))
    pending = service.show(run).pending_approval
    assert pending is not None and pending.change != besides, service.status(run)
    return pending


def test_accept_and_reject_answer_only_the_change_they_name(service, tmp_path):
    """The run posts its next L1 change a moment after the first is approved: a second accept or
    reject naming the first (a retry, a second client) is refused, naming the one pending now."""
    from tests import l1_domain

    run = service.start(l1_domain.two_scripts(tmp_path)).run_id
    first = pending_change(service, run)
    assert first.keys == ["scripts/a.sh"]
    approved = service.accept(run, change=first.change)
    assert approved.approved is True and f"approved L1 change {first.change} to scripts/a.sh" in approved.message
    second = pending_change(service, run, besides=first.change)
    assert second.keys == ["scripts/b.sh"] and "curl" in second.diff
    for answer in (service.accept, service.reject):
        with pytest.raises(UserError) as refused:
            answer(run, change=first.change)
        said = str(refused.value)
        assert f"no L1 change {first.change} waits" in said, said
        assert f"the pending one now is L1 change {second.change} (to scripts/b.sh)" in said, said
        assert f"agentdescent show {run} shows it; then agentdescent {answer.__name__} {run} --change {second.change}" in said
    assert service.show(run).pending_approval.change == second.change  # neither answered it
    assert service.reject(run, change=second.change).approved is False
    while (status := wait(service, run, until=lambda s: s.waiting_on or s.state not in LIVE)).state in LIVE:
        if (pending := service.show(run).pending_approval) is not None:  # it may have been withdrawn meanwhile
            service.reject(run, change=pending.change)  # proposed again: declined again
    assert status.state == "finished", status
    shown = service.show(run)
    assert shown.files_changed == ["scripts/a.sh"] and "curl" not in shown.diff
    with pytest.raises(UserError, match=f"no L1 change {second.change} waits: run {run} is finished"):
        service.reject(run, change=second.change)  # a late answer does not reject the whole run
    assert service.status(run).state == "finished"


@pytest.mark.parametrize("ending", ["timeout", "cancel"])
def test_an_l1_change_nobody_answered_says_why_it_was_declined(service, tmp_path, ending):
    from tests import l1_domain

    run = service.start(l1_domain.spec(tmp_path, host_timeout=2 if ending == "timeout" else 60, rounds=1)).run_id
    if ending == "cancel":
        pending_change(service, run)
        service.cancel(run)
    wait(service, run)
    [declined] = [d for d in service.show(run).rejected if d.outcome == "declined"]
    said = ("no answer came within host_timeout=2 s" if ending == "timeout"
            else "the run was cancelled while it waited for the approval")
    assert re.match(f"{said}, so L1 change \\w+ is declined; it passed the test", declined.reason), declined.reason
    assert "the approver declined" not in declined.reason


def test_a_spec_with_a_model_reaches_it_over_http_from_the_runs_process(service, tmp_path, monkeypatch, no_provider_env):
    """The agent and reflector are `openai:` models: the run's process calls a loopback server that
    speaks the chat-completions API, with the key and the address from the environment."""
    from tests.loopback import LoopbackServer, openai_chat

    def reply(prompt: str) -> str:
        return domain.next_rule(prompt) if "<instructions>" in prompt else domain.answer(prompt)

    with LoopbackServer(openai_chat(reply)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-test-key-0001")
        spec = {**domain.spec(tmp_path), "agent": "openai:test-model"}
        spec.pop("reflector")  # the agent reflects too
        run = service.start(spec).run_id
        done = wait(service, run)
    assert done.state == "finished" and done.best_reward == 1.0 and done.tokens > 0
    assert done.outcomes.get("committed") == domain.RULES


def test_tasks_from_a_hugging_face_dataset(service, tmp_path, monkeypatch, no_provider_env):
    from tests.test_huggingface import FakeDatasetsServer

    hub = FakeDatasetsServer()
    try:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        monkeypatch.setenv("AGENTDESCENT_CACHE", str(tmp_path / "cache"))  # not the machine's cache
        spec = {**domain.spec(tmp_path), "tasks": {"hf": "acme/qa", "split": "train", "limit": 30, "prompt": "q",
                                                   "gold": "a"}}
        plan = service.plan(spec)
        assert plan.tasks == 30
        with pytest.raises(SpecError, match="tasks.hf: .*does not exist"):
            service.plan({**spec, "tasks": {"hf": "acme/missing", "prompt": "q"}})
    finally:
        hub.loopback.close()


def test_a_run_started_from_inside_a_run_is_refused(service, tmp_path, monkeypatch):
    """The recursion guard: a rollout's agent (a plugin evolving itself, say) carries the run's id in
    its environment, and the service refuses to start or resume a run there."""
    run = service.start(domain.spec(tmp_path)).run_id
    wait(service, run)
    monkeypatch.setenv("AGENTDESCENT_RUN", run)
    with pytest.raises(UserError, match=f"part of run {run}"):
        service.start(domain.spec(tmp_path))
    with pytest.raises(UserError, match="from inside itself"):
        service.resume(run)
    assert [r.id for r in service.runs()] == [run]


def test_the_run_s_agents_see_the_recursion_marker(service, tmp_path, monkeypatch):
    """Every process a run starts inherits the marker: here the agent writes what it saw."""
    monkeypatch.setenv("KEYWORD_MARKER_DIR", str(tmp_path))
    run = service.start({**domain.spec(tmp_path), "agent": "python:tests.keyword_domain:marker_seen",
                         "rounds": 1}).run_id
    wait(service, run)
    assert (tmp_path / "marker").read_text(encoding="utf-8") == run


def test_a_run_started_from_a_folder_that_holds_a_module_s_name_still_runs(service, tmp_path, monkeypatch):
    """The run's process starts in its own folder: the caller's `agentdescent/` (a store, a clone)
    is not imported in the package's place."""
    origin = tmp_path / "work"
    (origin / "agentdescent").mkdir(parents=True)
    (origin / "tests").symlink_to(Path(__file__).resolve().parent)  # where the spec's python: agents are
    monkeypatch.chdir(origin)
    done = wait(service, service.start(domain.spec(tmp_path)).run_id)
    assert done.state == "finished", done


def test_a_field_asked_for_again_and_again_is_worked_out_once_a_write():
    written, asked = [], []
    tracker = StatusTracker(RunStatus(id="r", state="running"), written.append)
    tracker.update()
    for n in range(50):  # a wave of requests posted within a moment, each asking what the run waits on
        tracker.update_later(waiting_on=lambda n=n: asked.append(n) or f"the host: {n + 1} open")
    deadline = time.monotonic() + 10  # the write waits WRITE_EVERY, and a loaded machine's timer thread longer
    while written[-1].waiting_on != "the host: 50 open" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert asked[-1] == 49 and len(asked) <= 2 and written[-1].waiting_on == "the host: 50 open"  # not 50 times


def test_a_resumed_runs_start_sent_again_is_not_taken_for_its_last_measurement():
    """The start's held-out reward, sent again by a resumed run, read as the newest: status said
    the reward fell back (last measured 0.320 after 0.520) until the next measurement."""
    written = []
    tracker = StatusTracker(RunStatus(id="r", state="running"), written.append)
    started = dict(rounds=5, n_workers=2, train=10, held_out=5, ledger="/l")
    tracker.on_event(events.RunStarted(**started, version=1))
    tracker.on_event(events.Evaluated(round=-1, version=1, held_out_reward=0.32, promoted=False, best_reward=0.32))
    tracker.on_event(events.Evaluated(round=1, version=3, held_out_reward=0.52, promoted=True, best_reward=0.52))
    tracker.on_event(events.RunStarted(**started, version=3, resumed_round=2))
    tracker.on_event(events.Evaluated(round=-1, version=1, held_out_reward=0.32, promoted=False, best_reward=0.52,
                                      again=True))
    status = tracker.status
    assert (status.initial_reward, status.last_held_out, status.best_reward, status.stable_version) == (0.32, 0.52, 0.52, 3)
    tracker.on_event(events.Evaluated(round=2, version=4, held_out_reward=0.84, promoted=True, best_reward=0.84))
    assert (tracker.status.last_held_out, tracker.status.stable_version) == (0.84, 4)


def test_programs_a_killed_run_left_running_are_named_by_status_and_stopped_by_cancel(service, tmp_path, monkeypatch):
    """A model CLI left running by a run's process killed outright goes on spending: `status` says
    they run, `cancel` stops them; a run that ends leaves none behind."""
    left = tmp_path / "left"
    left.mkdir()
    monkeypatch.setenv("KEYWORD_LEAVE", str(left))
    monkeypatch.setenv("KEYWORD_DELAY", "0.2")
    run_id = service.start(domain.spec(tmp_path)).run_id
    status = wait(service, run_id, until=lambda s: s.pid is not None or s.state not in LIVE)
    while not any(left.iterdir()) and service.status(run_id).state in LIVE:
        time.sleep(0.05)
    os.kill(status.pid, signal.SIGKILL)
    killed = wait(service, run_id, until=lambda s: s.state == "interrupted")
    pids = [int(p.name) for p in left.iterdir()]
    assert pids and "program(s) it started still run" in killed.message and "cancel" in killed.next
    assert "program(s) it started still run" in next(r for r in service.runs() if r.id == run_id).message  # runs too
    cancelled = service.cancel(run_id)
    assert cancelled.state == "cancelled" and "(now stopped)" in cancelled.message
    assert all(gone(pid) for pid in pids)
    assert service.status(run_id).state == "cancelled"

    for pid_file in left.iterdir():
        pid_file.unlink()
    monkeypatch.setenv("KEYWORD_DELAY", "0")
    service.resume(run_id)
    assert wait(service, run_id, timeout=120).state == "finished"
    assert any(left.iterdir()) and all(gone(int(p.name)) for p in left.iterdir())


def test_line_separators_in_tasks_and_events_are_text_not_line_breaks(service, tmp_path):
    """U+2028 ends no line of JSON: a task holding one is read back whole (the run was called
    damaged), and so is an event (a folder run's diff keeps one: `show` dropped the diff)."""
    tasks = [{**task, "prompt": task["prompt"].replace("request", "re\u2028quest")} for task in domain.tasks()]
    run_id = service.start(domain.spec(tmp_path, tasks=tasks)).run_id
    assert wait(service, run_id, timeout=120).state == "finished"
    events = service.store.get(run_id).file("events.jsonl")
    events.write_text(events.read_text(encoding="utf-8").replace("rule k0.", "rule\u2028k0."), encoding="utf-8")
    assert len(service.show(run_id).committed) == domain.RULES


def test_a_reflection_by_an_agent_that_works_in_a_folder_gets_an_empty_one_of_its_own(tmp_path):
    from agentdescent.runs.spec import AgentSpec
    from agentdescent.runs.wiring import _as_model

    seen: list[tuple[str, list[str]]] = []

    def agent(prompt: str, *, cwd: str) -> str:
        seen.append((cwd, os.listdir(cwd)))
        Path(cwd, "notes.md").write_text(prompt, encoding="utf-8")  # what one reflection leaves, the next must not read
        return "a rule"

    reflect = _as_model(agent, AgentSpec.model_validate("claude_code"), tmp_path)
    assert reflect("first") == reflect("second") == "a rule"
    assert [listed for _, listed in seen] == [[], []] and seen[0][0] != seen[1][0]
    assert list(tmp_path.iterdir()) == []  # each removed once it answered


def test_a_resumed_run_clears_the_workspaces_its_killed_process_left(service, tmp_path):
    run_id = service.start(domain.spec(tmp_path, rounds=1)).run_id
    wait(service, run_id)
    left = Path(tempfile.gettempdir()) / f"{ROLLOUTS_PREFIX}{run_id}-left0000" / "agentdescent-ws-left"
    left.mkdir(parents=True)
    service.store.get(run_id).write_status(service.status(run_id).model_copy(update={"state": "cancelled"}))
    service.resume(run_id)
    wait(service, run_id)
    assert not left.exists()


@pytest.mark.parametrize("tool", [["git", "apply"], ["patch", "-p1", "--quiet"]], ids=["git-apply", "patch"])
def test_show_s_patch_of_a_file_whose_name_has_a_space_applies(tmp_path, tool):
    from agentdescent.runs.patch import patch

    (tmp_path / "my prompt.md").write_text("Answer.\n", encoding="utf-8")
    (tmp_path / "change.patch").write_text(patch("Answer.\n", "Answer.\nCite the year.\n", name="my prompt.md"),
                                           encoding="utf-8")
    with open(tmp_path / "change.patch", "rb") as change:
        done = subprocess.run(tool, cwd=tmp_path, stdin=change, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "my prompt.md").read_text(encoding="utf-8") == "Answer.\nCite the year.\n"


def test_plan_refuses_a_target_a_write_back_left_half_done(service, tmp_path):
    """A run would start from half of one version and half of another."""
    from agentdescent.artifacts import backups, targetlock

    spec = domain.spec(tmp_path)
    with targetlock.locked(tmp_path / "prompt.md"):
        backups.take(tmp_path / "prompt.md", made_by="write_to", paths=[""])
    with pytest.raises(SpecError, match=r"a write-back to it was interrupted .*agentdescent restore .* settles it"):
        service.plan(spec)


def test_reject_while_an_accept_writes_is_refused_not_recorded_over_it(service, tmp_path):
    run_id = service.start(domain.spec(tmp_path, rounds=2)).run_id
    wait(service, run_id)
    with service.store.get(run_id).holding("accept.lock", "busy"):  # an accept is writing the target
        with pytest.raises(UserError, match="an accept of run .* is writing right now"):
            service.reject(run_id)
    assert service.status(run_id).state == "finished"


def test_a_restore_racing_an_accept_waits_for_its_status_and_then_undoes_it(service, tmp_path, monkeypatch):
    """The restore must see the run as accepted, or it cannot say that it undid it."""
    from agentdescent.runs import verdict

    run_id = service.start(domain.spec(tmp_path, rounds=2)).run_id
    wait(service, run_id)
    write_back, racing = verdict.write_back, []

    def write_then_race(*args, **kwargs):
        plan = write_back(*args, **kwargs)
        racing.append(threading.Thread(target=lambda: racing.append(service.restore(tmp_path / "prompt.md"))))
        racing[0].start()
        racing[0].join(0.5)  # a restore that does not wait for the accept's status ends here
        return plan

    monkeypatch.setattr(verdict, "write_back", write_then_race)
    service.accept(run_id)
    racing[0].join(30)
    assert racing[1].runs == {run_id: "restored"}
    assert (tmp_path / "prompt.md").read_text(encoding="utf-8") == LEAD
    assert service.status(run_id).state == "restored"


def test_a_runs_state_follows_whether_the_target_holds_its_version(service, tmp_path):
    """`restore --backup N`, and a second run's accept over the first's, left a run `accepted` whose
    version the target no longer held."""
    target = tmp_path / "prompt.md"
    first = service.start(domain.spec(tmp_path, rounds=2)).run_id
    wait(service, first)
    service.accept(first)
    service.restore(target)
    service.restore(target)  # the run's version back: accepted again
    assert service.status(first).state == "accepted"
    oldest = service.restore(target, 1)  # what the target held before the run
    assert oldest.runs == {first: "restored"} and target.read_text(encoding="utf-8") == LEAD
    assert service.status(first).state == "restored" and "no longer holds" in service.status(first).message

    service.accept(first)
    target.write_text("Answer with the code, briefly.\n", encoding="utf-8")  # the next run starts from an edit
    second = service.start(domain.spec(tmp_path, rounds=2)).run_id
    wait(service, second)
    service.accept(second)
    assert service.status(first).state == "restored"  # the second run's write replaced it
    assert f"run {second}'s write-back replaced it" in service.status(first).message
    back = service.restore(target)  # the newest backup: what the target held before the second accept
    assert back.runs.get(second) == "restored"


def test_a_restore_cut_short_is_told_by_status_and_accept_and_settled_by_the_next_restore(service, tmp_path):
    """A restore SIGKILLed half-way left the target a mix; status still said "accepted", and accept
    refused as "already accepted"."""
    from agentdescent.artifacts import backups

    target = tmp_path / "prompt.md"
    run_id = service.start(domain.spec(tmp_path, rounds=2)).run_id
    wait(service, run_id)
    service.accept(run_id)
    evolved = target.read_text(encoding="utf-8")
    backups.take(target, made_by="restore", paths=[""], writes={})  # a restore killed before its write
    target.write_text("half of one, half of the other\n", encoding="utf-8")
    told = service.status(run_id)
    assert told.state == "accepted" and "cut short and left it half done" in told.message
    assert told.next.startswith("agentdescent restore ") and f"agentdescent accept {run_id}" in told.next
    with pytest.raises(UserError, match="cut short and left it half done: agentdescent restore"):
        service.accept(run_id)
    service.restore(target)  # rolls the cut-short restore back first, then restores
    assert backups.interrupted(target) is None
    assert target.read_text(encoding="utf-8") == LEAD and service.status(run_id).state == "restored"
    service.accept(run_id)
    assert target.read_text(encoding="utf-8") == evolved


def test_an_accepted_runs_backup_removed_by_hand_is_not_offered_to_restore(service, tmp_path):
    import shutil

    run_id = service.start(domain.spec(tmp_path, rounds=2)).run_id
    wait(service, run_id)
    backup = Path(service.accept(run_id).backup)
    shutil.rmtree(backup.parent)
    told = service.status(run_id)
    assert f"its backup {backup} is no longer there" in told.message and "restore" not in told.next


@pytest.mark.skipif(os.geteuid() == 0 and not __import__("shutil").which("setpriv"),
                    reason="root lists every folder without setpriv")
def test_status_of_a_run_whose_targets_folder_cannot_be_listed_is_still_told(service, tmp_path):
    """Its backups could not be listed, and `status` and every `runs` listing failed."""
    import sys

    project = tmp_path / "project"
    project.mkdir()
    run_id = service.start(domain.spec(project, rounds=2)).run_id
    wait(service, run_id)
    service.accept(run_id)
    project.chmod(0o311)  # enter and write, but not list
    as_a_user = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    try:
        told = [subprocess.run([*as_a_user, sys.executable, "-m", "agentdescent", *verb], capture_output=True, text=True,
                               timeout=120, env={**os.environ}) for verb in (("status", run_id), ("runs",))]
    finally:
        project.chmod(0o755)
    assert [done.returncode for done in told] == [0, 0], [done.stderr for done in told]
    assert f"run {run_id} (accepted)" in told[0].stdout


def test_an_accept_killed_after_its_write_is_recorded_by_the_next_and_a_restore_follows_it(service, tmp_path):
    """The next accept found nothing to write and recorded no file of the run's, so that a restore
    of the killed accept's backup left the run `accepted` on a target without its version."""
    from agentdescent.artifacts.writeback import write_back
    from agentdescent.result import EvolveResult

    target = tmp_path / "prompt.md"
    run_id = service.start(domain.spec(tmp_path, rounds=2)).run_id
    wait(service, run_id)
    run = service.store.get(run_id)
    result = EvolveResult.from_json(run.file("result.json").read_text(encoding="utf-8"))
    write_back(target, result.rendered, base=LEAD, run=run_id)  # the killed accept's write, its status never recorded
    backup = str(target.parent / ".prompt.md.bak-1" / "prompt.md")
    again = service.accept(run_id)  # named the killed accept's backup, where it said "nothing needed changing"
    assert again.backup == backup and again.written == ["prompt.md"] and "was written already" in again.message
    assert again.next == f"agentdescent restore {target} puts it back"
    told = service.status(run_id)
    assert told.state == "accepted" and told.backup == backup and told.next.startswith("agentdescent restore")
    back = service.restore(target)
    assert target.read_text(encoding="utf-8") == LEAD and back.runs == {run_id: "restored"}


def test_an_accept_finding_its_version_written_by_another_runs_accept_claims_none_of_it(service, tmp_path):
    """Two runs on one target that ended with the same version: the second accept said its own accept
    had been cut short after writing, and took the first run's backup as its own."""
    first, second = (service.start(domain.spec(tmp_path), allow_concurrent=True).run_id for _ in range(2))
    wait(service, first)
    wait(service, second)
    made = [service.store.get(run).file("result.json").read_text(encoding="utf-8") for run in (first, second)]
    assert json.loads(made[0])["rendered"] == json.loads(made[1])["rendered"]  # the domain learns its rules in order
    backup = service.accept(first).backup
    again = service.accept(second)
    assert again.message == f"{tmp_path / 'prompt.md'} already holds this run's version, written by run {first}'s " \
                            "accept; nothing was written"
    assert (again.backup, again.written, again.next) == (None, [], "")
    told = service.status(second)
    assert told.state == "accepted" and told.backup is None and f"written by run {first}'s accept" in told.message
    assert service.status(first).backup == backup
    assert service.restore(tmp_path / "prompt.md").runs == {first: "restored", second: "restored"}


def test_a_run_whose_spec_or_tasks_were_edited_since_it_started_is_not_resumed_as_another(service, tmp_path):
    """Resumed, it became a new run on the old one's ledger: its bill began again at 0, and the
    agent received 262 calls under max_calls=150."""
    run_id = service.start(domain.spec(tmp_path, rounds=2)).run_id
    wait(service, run_id)
    run = service.store.get(run_id)
    status = run.status()
    run.write_status(status.model_copy(update={"state": "cancelled"}))
    made = run.file("spec.json").read_text(encoding="utf-8")
    run.file("spec.json").write_text(json.dumps({**json.loads(made), "seed": 7}), encoding="utf-8")
    with pytest.raises(UserError, match="its spec.json is not as the run was made"):
        service.resume(run_id)
    told = service.status(run_id)  # status says so too, rather than advise the resume it refuses
    assert "spec.json is not as the run was made" in told.error and "agentdescent resume" not in told.next
    run.file("spec.json").write_text(made, encoding="utf-8")
    (run.file("tasks.jsonl")).write_text("", encoding="utf-8")
    with pytest.raises(UserError, match="its tasks.jsonl is not as the run was made"):
        service.resume(run_id)
    run.file("tasks.jsonl").unlink()
    with pytest.raises(UserError, match="its tasks.jsonl is missing"):
        service.resume(run_id)


def test_a_run_whose_status_was_deleted_is_listed_as_damaged_not_hidden(service, tmp_path):
    run_id = service.start(domain.spec(tmp_path, rounds=1)).run_id
    wait(service, run_id)
    service.store.get(run_id).file("status.json").unlink()
    [listed] = service.runs()
    assert (listed.id, listed.state) == (run_id, "damaged") and "status.json is missing" in listed.message


def test_a_python_agent_whose_module_raises_as_it_is_imported_is_named(tmp_path, monkeypatch):
    from agentdescent.runs.build import resolve_ref

    (tmp_path / "broken_agent_module.py").write_text("raise RuntimeError('no config file')\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UserError, match="cannot load 'broken_agent_module:answer': importing it raised .*no config file"):
        resolve_ref("broken_agent_module:answer")


def test_a_copy_of_a_run_folder_never_claims_the_originals_programs(service, tmp_path):
    """Programs were known by the run's id alone: `cancel` of a copy of a live run's folder in
    another store killed the original's agents."""
    import shutil
    import sys

    from agentdescent.runs import leftovers
    from agentdescent.runs.store import RUN_ENV, RUN_FOLDER_ENV, RunDir

    run_id = service.start(domain.spec(tmp_path, rounds=1)).run_id
    wait(service, run_id)
    original = service.store.get(run_id)
    copy = RunDir(tmp_path / "elsewhere" / "runs" / run_id)
    shutil.copytree(original.path, copy.path)
    agent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                             env={**os.environ, RUN_ENV: run_id, RUN_FOLDER_ENV: leftovers.mark(original)})
    try:
        deadline = time.monotonic() + 10
        while agent.pid not in leftovers.left_running(original) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert leftovers.left_running(copy) == [] and agent.pid in leftovers.left_running(original)
        assert leftovers.stop_left(copy) == 0 and agent.poll() is None
    finally:
        agent.kill()
        agent.wait()


def test_a_run_whose_origin_file_is_damaged_works_in_its_own_folder(tmp_path, monkeypatch):
    """A FIFO in origin.json's place is damage the run's store names (a `UserError`, a `ValueError`);
    the runner works in the run's own folder, as for an origin that is missing."""
    from agentdescent.runs import runner
    from agentdescent.runs.store import RunDir

    run = RunDir(tmp_path / "run-1")
    run.path.mkdir()
    os.mkfifo(run.file("origin.json"))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("sys.path", list(__import__("sys").path))
    runner._enter_origin(run)
    assert Path.cwd() == run.path


def test_the_money_a_status_says_is_the_sum_without_float_noise():
    """A sum of many prices was written as 4.749999999999943 dollars in status.json."""
    written = []
    tracker = StatusTracker(RunStatus(id="r", state="running"), written.append)
    spent = 0.0
    for _ in range(475):  # as a run adds up its calls' prices (sum() itself compensates from Python 3.12)
        spent += 0.01
    tracker.on_event(events.Spent(calls=475, tokens=0, cost_usd=spent))
    assert spent != 4.75 and tracker.status.cost_usd == 4.75

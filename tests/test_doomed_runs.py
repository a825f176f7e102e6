"""A run that cannot learn stops before it spends its budget: when every rollout of the held-out
measurement at the start, of the first round, of a later round or of a later held-out measurement
failed with an error (the agent or the scorer raised), or every reflection of the first round did,
the run ends with `result.error` naming the first error and the fix its cause calls for, and a
detached run as `failed`. Rollouts that ran and scored 0 are no such failure. Past the first round,
a change whose every rollout fails is refused with its error while the run goes on, and reflections
that fail for good (a key refused, a prompt too long) stop the run at once, others after a few
rounds. Failures all of one task, once some rollout passed, are that task's: a warning, not a
stop. `plan` tries the scorer first."""

from __future__ import annotations

import itertools
import json
import random
import sys
import threading

import pytest

from agentdescent import BetaAcceptance, KeyedRules, SingleSlot, Task, events, evolve, reflector, scorer, scripted
from agentdescent.agents.waits import refusal
from agentdescent.config import Parallelism
from agentdescent.engine.calls.units import check_reward
from agentdescent.engine.loop.stopping import FailureWatch, NothingWorked
from agentdescent.engine.split import split_tasks
from agentdescent.errors import AgentError, UserError
from agentdescent.runs import runlog
from agentdescent.runs.spec import SpecError, read_spec
from agentdescent.runs.status import LIVE
from agentdescent.types import Rollout
from agentdescent.usage import Usage
from tests import failing_scorers
from tests import keyword_domain as domain
from tests.doubles import year_program
from tests.procutil import gone
from tests.runs_support import wait


def held_out_ids(tasks) -> set[str]:
    """The ids of the tasks a run with the default split and seed holds out."""
    tasks = [t if isinstance(t, Task) else Task(**t) for t in tasks]
    return {t.id for t in split_tasks(tasks, 0.3, random.Random("0:split"))[1]}


def start_calls(tasks) -> int:
    """What the start's measurement costs: each held-out task, and as many (at most the
    calibration) drawn again to find out whether rewards are samples."""
    held_out = len(held_out_ids(tasks))
    return held_out + min(held_out, BetaAcceptance().calibration)


def test_a_reward_that_always_raises_stops_the_run_at_the_held_out_measurement():
    tasks, _, run, propose = year_program()

    def swapped(output, task):
        return float(output == task.gold)

    result = evolve(tasks, swapped, run=run, propose=propose, rounds=4, n_workers=2)
    assert "every rollout of the held-out measurement at the start failed" in result.error
    assert "AttributeError" in result.error and "has no attribute 'gold'" in result.error
    assert result.usage.calls == start_calls(tasks) and result.history == []
    assert result.initial_reward is None and result.warnings == []


def test_a_run_stopped_there_measures_again_once_resumed_with_the_scorer_fixed(tmp_path):
    tasks, _, run, propose = year_program()

    def swapped(output, task):
        return float(output == task.gold)

    stopped = evolve(tasks, swapped, run=run, propose=propose, rounds=4, n_workers=2, store=tmp_path / "ledger")
    assert stopped.error is not None
    half = lambda task, output: 0.5  # noqa: E731 - scores what the failed rollouts would have scored 0
    seen: list = []
    resumed = evolve(tasks, half, run=run, propose=propose, rounds=4, n_workers=2, store=tmp_path / "ledger",
                     on_event=seen.append)
    assert next(e for e in seen if isinstance(e, events.RunStarted)).resumed_round == 0
    assert resumed.error is None and resumed.initial_reward == 0.5  # measured anew, not read back as failures


def test_a_first_round_that_only_fails_stops_the_run_after_that_round():
    tasks, reward, run, propose = year_program()
    held_out = held_out_ids(tasks)

    def train_breaks(task, output):
        if task.id not in held_out:
            raise RuntimeError(f"grader down for {task.id}")
        return reward(task, output)

    result = evolve(tasks, train_breaks, run=run, propose=propose, rounds=4, n_workers=2)
    assert "every rollout of the first round failed" in result.error and "grader down for" in result.error
    assert len(result.history) == 1 and result.usage.calls == result.history[0].calls  # nothing after round 0
    assert result.initial_reward == 0.0


def test_a_scorer_that_goes_down_after_the_first_round_stops_the_run_at_the_round_that_only_failed():
    tasks = [Task(id=f"t{i}", prompt=f"item {i}") for i in range(40)]
    _, reward, run, propose = year_program()
    graded = itertools.count(1)
    worked = start_calls(tasks) + 4 * 4  # the start's measurement and the first round of 4 workers

    def goes_down(task, output):
        if next(graded) > worked:
            raise ConnectionError("grading service unreachable")
        return reward(task, output)

    result = evolve(tasks, goes_down, run=run, propose=propose, rounds=20, n_workers=4)
    assert result.error.startswith("every rollout of round 2 failed") and "grading service unreachable" in result.error
    assert len(result.history) == 2 and result.initial_reward == 0.0


@pytest.mark.parametrize("asynchronous", [False, True])
def test_a_held_out_measurement_whose_every_rollout_failed_stops_the_run_and_is_no_reward(asynchronous):
    tasks, reward, run, propose = year_program()
    held_out, graded = held_out_ids(tasks), itertools.count(1)

    def held_out_goes_down(task, output):  # the train tasks still score: no round is all failures
        if task.id in held_out and next(graded) > start_calls(tasks):
            raise ConnectionError("grading service unreachable")
        return reward(task, output)

    result = evolve(tasks, held_out_goes_down, run=run, propose=propose, rounds=4, n_workers=2,
                    parallelism=Parallelism(asynchronous=asynchronous))
    assert result.error.startswith("every rollout of a held-out measurement failed")
    assert "grading service unreachable" in result.error
    assert [r.held_out for r in result.history if r.held_out is not None] == []
    assert result.initial_reward == result.final_reward == 0.0  # the start's, measured before the outage


def test_a_held_out_measurement_in_the_background_is_no_part_of_the_round_it_ran_beside():
    """Asynchronous, a round's turns may all have come back before it began, so that its window
    holds only the previous version's held-out measurement: its failures are that measurement's
    to name, not a round that "only failed"."""
    watch, usage = FailureWatch(), Usage()

    def failed(purpose: str, error: str = "grading service unreachable") -> None:
        usage.count_rollout(Rollout(task=Task(id="t", prompt=""), output="", reward=0.0, error=error), purpose)

    watch.watch(usage)
    for _ in range(4):
        failed("validate")
    watch.check_round(usage, 2, 0)  # no stop: the measurement's own check names it
    watch.check_round(usage, 0, 0)
    for _ in range(4):
        failed("train", "agent down")
    with pytest.raises(NothingWorked, match=r"every rollout of round 3 failed \(4 of 4\), the committed artifact's among"):
        watch.check_round(usage, 2, 0)


class LandsWhileRead(Usage):
    """A usage on which a held-out rollout lands, from another thread, as soon as `failures` is read
    while `armed`: what an asynchronous run's measurement in the background may do while a round is
    checked. The landing waits for the usage's lock if the reader holds it."""

    armed: bool = False
    landing: threading.Thread | None = None

    def __getattribute__(self, name: str):
        if name == "failures" and object.__getattribute__(self, "armed"):
            object.__setattr__(self, "armed", False)
            landed = Rollout(task=Task(id="h1", prompt=""), output="", reward=0.0, error="scorer raised: boom")
            landing = threading.Thread(target=self.count_rollout, args=(landed, "validate"))
            object.__setattr__(self, "landing", landing)
            landing.start()
            landing.join(timeout=0.5)
        return object.__getattribute__(self, name)


def test_a_held_out_rollout_landing_while_a_round_is_checked_does_not_hide_the_rollout_that_passed():
    """The watch read the rollouts, then the failures: a held-out failure landing between them took
    the place of the round's one pass, and the run stopped as if every rollout had failed."""
    watch, usage = FailureWatch(), LandsWhileRead()
    watch.watch(usage)
    usage.count_rollout(Rollout(task=Task(id="t1", prompt=""), output="2026", reward=1.0), "train")
    usage.count_rollout(Rollout(task=Task(id="t2", prompt=""), output="", reward=0.0, error="agent raised: x"), "train")
    usage.armed = True
    watch.check_round(usage, 0, 0)  # one of the round's two passed: no stop
    usage.landing.join()
    assert usage.counts("rollouts", "failures", "validate", "validate_failures") == (3, 2, 1, 1)


def test_an_agent_that_always_raises_stops_the_run_too():
    tasks, reward, _, propose = year_program()

    def unreachable(rendered, task):
        raise ConnectionError("the model server refused the connection")

    result = evolve(tasks, reward, run=unreachable, propose=propose, rounds=4, n_workers=2)
    assert "refused the connection" in result.error and result.usage.calls == start_calls(tasks)
    assert result.error.endswith("Fix the agent or the scorer (plan checks the scorer), then resume the run (evolve(..., "
                                 "store=...) given what you fixed) or start it again; a run of a spec resumes with the "
                                 "spec stored with it, so after a fix to the spec start a new run: agentdescent evolve SPEC")


@pytest.mark.parametrize("propose", [lambda rendered, task: "x",  # its signature is wrong
                                     lambda *args: (_ for _ in ()).throw(PermissionError("401: invalid x-api-key"))])
def test_a_reflector_that_always_fails_stops_the_run_after_the_first_round(propose):
    tasks, reward, run, _ = year_program()
    result = evolve(tasks, reward, run=run, propose=propose, rounds=6, n_workers=2)
    assert "every reflection of the first round failed" in result.error and "Fix the reflector" in result.error
    assert ", then resume the run (evolve(..., store=...) given what you fixed) or start it again; " in result.error
    assert len(result.history) == 1 and result.outcomes() == {"error": 2 * 2}  # workers x reflections per worker


@pytest.mark.parametrize("reply, said", [("I'm sorry, but I can't help with that.", "no <rule> tag"),
                                         ('```json\n{"rule": "Say the year."}\n```', "no <rule> tag"),
                                         ("<rule>I'm sorry, but I can't help with that.</rule>", "is a refusal")])
def test_a_model_reflector_whose_every_reply_is_unreadable_stops_the_run_saying_why(reply, said):
    """Such a run finished every round with no outcome at all and no word of why."""
    tasks, reward, run, _ = year_program()
    propose = reflector(scripted(lambda prompt: reply))
    result = evolve(tasks, reward, run=run, propose=propose, rounds=6, n_workers=2)
    assert "every reflection of the first round failed" in result.error and said in result.error
    assert "Fix the reflector (propose: a model that replies in the form its prompt asks" in result.error
    assert len(result.history) == 1 and result.outcomes() == {"invalid": 2 * 2}
    assert all("cannot be read as a rule" in o.reason for o in result.outcome_list)
    assert propose.stats == {"unreadable": 2 * 2}


def test_a_few_unreadable_replies_of_a_small_first_round_do_not_stop_the_run():
    """A model's odd reply may be noise: a first round of one worker (two reflections) goes on."""
    tasks, reward, run, _ = year_program()
    replies = iter(["I'm sorry, but I can't help with that."] * 2)
    result = evolve(tasks, reward, run=run, propose=reflector(scripted(lambda prompt: next(replies, "<rule>Say the year.</rule>"))),
                    rounds=3, n_workers=1)
    assert result.error is None and result.outcomes()["invalid"] == 2 and "committed" in result.outcomes()


def test_proposals_the_strategy_cannot_use_are_no_failed_reflections():
    tasks, reward, run, _ = year_program()
    result = evolve(tasks, reward, run=run, propose=lambda *a: "colour: blue", strategy=KeyedRules(["tone"]),
                    rounds=2, n_workers=2)
    assert result.error is None and len(result.history) == 2 and set(result.outcomes()) == {"invalid"}


def test_a_reflector_that_has_nothing_to_say_is_no_failure():
    tasks, reward, run, _ = year_program()
    result = evolve(tasks, reward, run=run, propose=lambda *args: None, rounds=2, n_workers=2)
    assert result.error is None and len(result.history) == 2


def test_a_hard_task_set_that_scores_zero_without_errors_runs_every_round():
    tasks, _, run, propose = year_program()
    result = evolve(tasks, lambda task, output: 0.0, run=run, propose=propose, rounds=3, n_workers=2)
    assert result.error is None and len(result.history) == 3 and result.usage.failures == 0


@pytest.mark.parametrize("field", ["reflector", "agent"])  # "agent": the agent reflects too, with its options
def test_a_spec_run_whose_reflections_are_cut_names_the_field_to_raise_and_a_new_run_for_it(
        service, tmp_path, monkeypatch, no_provider_env, field):
    """The hint said "the agent's options" whichever field made the model, and the advice to raise
    it, then resume: a resume runs the spec stored with the run, and its reflections were cut again."""
    from tests.loopback import LoopbackServer, openai_chat

    def reply(prompt: str) -> str:  # the answers fit in 3 tokens, a rule does not
        return "<rule>Name the code of the task.</rule>" if "<instructions>" in prompt else domain.answer(prompt)

    model = {"kind": "openai", "model": "m", "options": {"max_tokens": 3, "max_retries": 0}}
    with LoopbackServer(openai_chat(reply)) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/v1")
        monkeypatch.setenv("OPENAI_API_KEY", "sk-loopback-test-key-0001")
        spec = domain.spec(tmp_path, **{field: model})
        if field == "agent":
            spec.pop("reflector")
        status = wait(service, service.start(spec).run_id)
    assert status.state == "failed" and "every reflection of the first round failed" in status.error, status
    assert f"raise it with max_tokens=6 (in the run spec: the {field}'s options: {{max_tokens: 6}})" in status.error
    assert ("Fix the reflector (propose: its key, its model, its arguments), then resume the run (evolve(..., store=...) "
            "given what you fixed) or start it again; a run of a spec resumes with the spec stored with it, so after a "
            "fix to the spec start a new run: agentdescent evolve SPEC") in status.error
    assert status.next.endswith("; a resume runs the spec stored with the run, so after a fix to the spec start a new "
                                "run instead: agentdescent evolve SPEC")


def test_a_detached_run_whose_scorer_fails_every_rollout_ends_failed_naming_it(service, tmp_path):
    spec = domain.spec(tmp_path, scorer="python:tests.failing_scorers:picky")  # plan's try passes: it gets the gold
    status = wait(service, service.start(spec).run_id)
    assert status.state == "failed", status
    assert status.message.startswith("stopped before the first round: every rollout"), status.message  # said once
    assert "every rollout of the held-out measurement at the start failed" in status.error
    assert "cannot score" in status.error and status.calls == start_calls(domain.spec(tmp_path)["tasks"])
    assert status.failures == status.calls and "cannot score" in status.failure  # what `status` shows


@pytest.mark.parametrize("name, said", [("swapped", "AttributeError"), ("word", "reward returned 'yes' (str) for task 't00'")])
def test_plan_tries_a_python_scorer_and_names_the_scorer_field(service, tmp_path, name, said):
    with pytest.raises(SpecError) as caught:
        service.plan(domain.spec(tmp_path, scorer=f"python:tests.failing_scorers:{name}"))
    (problem,) = caught.value.problems
    assert problem.field == "scorer" and said in problem.message and "the first task" in problem.message


@pytest.mark.parametrize("name, value", [("nan", "nan"), ("inf", "-inf"), ("minus_one", "-1"), ("two", "2.0"),
                                         ("huge", "an int of 1329 bits")])
def test_plan_refuses_a_python_scorer_that_returns_a_number_outside_0_1_in_the_run_s_words(service, tmp_path, name, value):
    with pytest.raises(SpecError) as caught:
        service.plan(domain.spec(tmp_path, scorer=f"python:tests.failing_scorers:{name}"))
    (problem,) = caught.value.problems
    with pytest.raises(UserError) as run_said:  # what the run would stop with at its first rollout
        check_reward(getattr(failing_scorers, name)(None, ""), Task(id="t00", prompt=""))
    assert problem.field == "scorer" and f"reward returned {value} for task 't00'" in problem.message
    assert str(run_said.value) in problem.message


def test_plan_tries_a_grader_command_and_a_built_in_scorer(service, tmp_path):
    with pytest.raises(SpecError) as caught:
        service.plan(domain.spec(tmp_path, scorer={"command": ["false"]}))
    assert [p.field for p in caught.value.problems] == ["scorer"] and "exited with code 1" in str(caught.value)
    with pytest.raises(SpecError) as caught:
        service.plan(domain.spec(tmp_path, scorer={"name": "regex", "pattern": "(unclosed"}))
    assert [p.field for p in caught.value.problems] == ["scorer"] and "pattern" in str(caught.value)
    assert service.plan(domain.spec(tmp_path, scorer={"command": ["echo", "0.5"]})).tasks == 24


def test_a_grader_command_is_held_to_the_spec_s_timeout_and_told_how_to_raise_it(service, tmp_path):
    hang = [sys.executable, "-c", "import time; time.sleep(120)"]
    with pytest.raises(SpecError) as caught:
        service.plan(domain.spec(tmp_path, scorer={"command": hang, "timeout": 0.5}))
    (problem,) = caught.value.problems
    assert problem.field == "scorer" and "within 0.5s and was killed" in problem.message
    assert "scorer: {command: [...], timeout: SECONDS}" in problem.message
    slow = [sys.executable, "-c", "import time; time.sleep(0.5); print(1)"]
    assert service.plan(domain.spec(tmp_path, scorer={"command": slow, "timeout": 60})).tasks == 24
    with pytest.raises(SpecError) as caught:
        service.plan(domain.spec(tmp_path, scorer={"name": "exact", "timeout": 60}))
    assert "timeout is for a grader command" in str(caught.value)


def test_a_grader_command_s_relative_paths_are_read_from_the_spec_s_folder(service, tmp_path):
    folder = tmp_path / "specs"  # the service plans from the repository's root, another folder
    (folder / "g").mkdir(parents=True)
    (folder / "g" / "grade.py").write_text("import sys\nsys.stdin.read()\nprint(open(sys.argv[1]).read())\n", encoding="utf-8")
    (folder / "half.txt").write_text("0.5\n", encoding="utf-8")
    (folder / "g" / "grade.sh").write_text("#!/bin/sh\ncat >/dev/null\necho 1\n", encoding="utf-8")
    (folder / "g" / "grade.sh").chmod(0o755)
    for command, read in [([sys.executable, "g/grade.py", "half.txt", "-v", "no-such-file"],
                           [sys.executable, str(folder / "g/grade.py"), str(folder / "half.txt"), "-v", "no-such-file"]),
                          (["./g/grade.sh"], [str(folder / "g/grade.sh")])]:
        (folder / "run.json").write_text(json.dumps(domain.spec(tmp_path, scorer={"command": command})), encoding="utf-8")
        assert service.plan(folder / "run.json").tasks == 24
        assert read_spec(folder / "run.json").scorer.command == read


def test_a_run_whose_scorer_spins_past_its_timeout_ends_and_its_process_with_it(service, tmp_path):
    """Each call abandoned at its timeout spins on in a thread of its own (a dozen of them): the run's
    process ends anyway once the run said how it ended (it stayed at full CPU for minutes)."""
    tasks = [{"id": f"t{i:03d}", "prompt": f"request {i} (code k{i % 6})", "gold": f"k{i % 6}"} for i in range(20)]
    spec = domain.spec(tmp_path, tasks=tasks, scorer="python:tests.failing_scorers:spinning", budget={"rollout_timeout": 1})
    run_id = service.start(spec).run_id
    status = wait(service, run_id, until=lambda s: s.pid is not None or s.state not in LIVE)
    pid = status.pid
    ended = wait(service, run_id, timeout=120)
    assert ended.state == "failed" and "rollout_timeout" in ended.error
    assert gone(pid, polls=1000)


def test_what_a_run_s_code_prints_is_kept_in_its_log_up_to_a_cap(service, tmp_path):
    spec = domain.spec(tmp_path, scorer="python:tests.failing_scorers:loud", rounds=1)
    run_id = service.start(spec).run_id
    assert wait(service, run_id, timeout=120).state in ("finished", "failed")
    log = service.store.get(run_id).file("run.log").read_text(encoding="utf-8")
    assert len(log) < runlog.LOG_CHARS + 1_000 and log.rstrip().endswith("what is printed after this is dropped]")


def test_a_run_its_own_code_stops_mid_run_keeps_the_key_and_lone_surrogates_out_of_its_files(service, tmp_path,
                                                                                             monkeypatch):
    key = "sk-stop-7f3a9c2e1b5d4a60"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    spec = domain.spec(tmp_path, scorer="python:tests.failing_scorers:refusing")
    run_id = service.start(spec).run_id
    status = wait(service, run_id, timeout=120)
    said = "the grading service refused the key [redacted OPENAI_API_KEY] for data-\\udcff.txt"
    assert status.state == "failed" and status.error == said and status.stop_reason == f"stopped by an error: {said}"
    run = service.store.get(run_id)
    assert [p.name for p in run.path.rglob("*") if p.is_file() and key.encode() in p.read_bytes()] == []


@pytest.mark.parametrize("gold", [None, " "])
def test_plan_refuses_tasks_some_of_which_have_no_gold_answer(service, tmp_path, gold):
    """A null in the gold column fails the scorer on that task, mid-run, after the calls before it;
    a blank one is matched by no output."""
    tasks = domain.tasks()
    tasks[20] = {**tasks[20], "gold": gold}
    with pytest.raises(SpecError, match=r"1 of the 24 tasks have no gold answer \(the first: 't20'\)"):
        service.plan(domain.spec(tmp_path, tasks=tasks))


def test_plan_refuses_inline_tasks_with_an_empty_prompt_as_it_refuses_a_files(service, tmp_path):
    tasks = domain.tasks()
    tasks[3], tasks[7] = {**tasks[3], "prompt": ""}, {**tasks[7], "prompt": " \n"}
    with pytest.raises(SpecError, match=r"2 of the tasks have an empty prompt \(the first: 't03'\); give each its request"):
        service.plan(domain.spec(tmp_path, tasks=tasks))


def test_plan_refuses_a_csv_whose_gold_or_prompt_cells_are_empty_as_it_refuses_nulls(service, tmp_path):
    """An empty cell is how a CSV spells a missing value: read as a gold of "", no output matched it,
    and the held-out ceiling fell below 1.0 without a word."""
    rows = domain.tasks()
    path = tmp_path / "tasks.csv"

    def write(blank: dict[int, str]) -> None:
        lines = ["id,prompt,gold"] + [",".join(f'"{row[k]}"' if (i, k) not in blank else blank[i, k]
                                               for k in ("id", "prompt", "gold")) for i, row in enumerate(rows)]
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")

    write({(5, "gold"): "", (9, "gold"): '"  "'})
    with pytest.raises(SpecError, match=r"2 of the 24 tasks have no gold answer \(the first: 't05'\) while the others"):
        service.plan(domain.spec(tmp_path, tasks=str(path)))
    write({(3, "prompt"): "", (7, "prompt"): '" "'})
    with pytest.raises(SpecError, match=r"2 of 24 rows cannot be made tasks: rows 4 and 8: the prompt is empty or null"):
        service.plan(domain.spec(tmp_path, tasks=str(path)))


def test_plan_warns_that_a_python_agent_or_scorer_is_unbounded_without_a_rollout_timeout(service, tmp_path):
    said = service.plan(domain.spec(tmp_path, scorer="python:tests.failing_scorers:loud")).warnings
    assert any(w.startswith("no budget.rollout_timeout: a python: agent or scorer that never returns") for w in said)
    bounded = service.plan(domain.spec(tmp_path, budget={"rollout_timeout": 60})).warnings
    assert not any("rollout_timeout" in w for w in bounded)


def test_an_agent_executable_given_as_a_path_that_is_no_program_says_so(service, tmp_path):
    with pytest.raises(SpecError, match=r"'/nonexistent/claude' is not an executable file: install it"):
        service.plan({**domain.spec(tmp_path), "agent": {"kind": "claude_code", "options": {"executable": "/nonexistent/claude"}},
                      "reflector": "python:tests.keyword_domain:next_rule"})


def refused(status: int, body: str, *, retried: bool = False) -> AgentError:
    """The error an HTTP client of ours raises when the server refused a call for good."""
    said, attempts = (f"{refusal(status)}: «{body}»", "5 attempts") if retried else (f"HTTP {status} (not retried): «{body}»", "1 attempt")
    return AgentError(f"model-x: POST http://127.0.0.1:9/v1/messages failed after {attempts}: {said}")


def keyword_run(*, run=None, model=None, rounds=8, **options):
    """The keyword domain (each rule learned one a commit) evolved from plain callables: `run(prompt)`
    for the agent, `model(prompt)` for the reflector's model."""
    tasks = [Task(**t) for t in domain.tasks()]
    return evolve(tasks, scorer("exact"), run=lambda rendered, task: (run or domain.answer)(f"{rendered}\n\n{task.prompt}"),
                  propose=reflector(model or domain.next_rule), strategy=SingleSlot("Answer with the code.\n"),
                  rounds=rounds, n_workers=2, **options)


def too_long_from_the_second_rule(prompt):
    if "rule k1." in prompt:
        raise refused(400, '{"error": {"message": "prompt is too long: 203524 tokens > 200000 maximum"}}')
    return domain.next_rule(prompt)


@pytest.mark.parametrize("error, fix", [(refused(400, "prompt is too long: 203524 tokens > 200000 maximum"), "shrink the artifact"),
                                        (refused(401, "invalid x-api-key"), "The key is refused (HTTP 401)"),
                                        (refused(404, "model not found"), "check the model's name")])
def test_a_reflector_refused_for_good_after_the_first_round_stops_the_run_at_that_round(error, fix):
    def reflector_model(prompt):
        if "rule k1." in prompt:  # once the artifact holds two rules
            raise error
        return domain.next_rule(prompt)

    result = keyword_run(model=reflector_model, rounds=12)
    commits = [r.round for r in result.history if r.version is not None]
    stopped = len(result.history) - 1
    assert len(commits) == 2 and stopped == commits[-1] + 1  # the round after the second commit
    assert result.error.startswith(f"every reflection of round {stopped + 1} failed") and fix in result.error
    assert "Fix the reflector" not in result.error
    assert result.outcomes()["error"] == sum(o.step == stopped for o in result.outcome_list)


@pytest.mark.parametrize("error, said", [(refused(503, "overloaded", retried=True), "The server kept failing (HTTP 503)"),
                                         (ConnectionError("the reflector's server refused the connection"), "Fix the reflector")])
def test_a_reflector_that_keeps_failing_with_errors_that_may_pass_stops_the_run_after_a_few_rounds(error, said):
    from agentdescent.engine.loop.stopping import FAILING_ROUNDS

    def reflector_model(prompt):
        if "rule k1." in prompt:
            raise error
        return domain.next_rule(prompt)

    result = keyword_run(model=reflector_model, rounds=12)
    second = [r.round for r in result.history if r.version is not None][-1]
    assert len(result.history) == second + 1 + FAILING_ROUNDS  # each of those rounds paid its reflections, no more
    assert result.error.startswith(f"every reflection of rounds {second + 2} to {second + 1 + FAILING_ROUNDS} failed")
    assert said in result.error


def test_a_change_whose_every_rollout_fails_is_refused_with_its_error_and_the_run_goes_on():
    def agent(prompt):  # the artifact with the third rule is too long for the agent's model; head is not
        if "rule k2." in prompt:
            raise refused(400, "This model's maximum context length is 8192 tokens (context_length_exceeded)")
        return domain.answer(prompt)

    result = keyword_run(run=agent, rounds=4)  # rounds 3 and 4 try it: fewer than FAILING_ROUNDS in a row
    assert result.error is None and len(result.history) == 4 and result.state["prompt"].count("rule k") == 2
    refusals = [o.reason for o in result.outcome_list if o.kind == "rejected_by_test"]
    assert refusals and all(r.startswith("rejected: every rollout of it on the") for r in refusals)
    assert "failed (4 of 4), so it fixes none of them; the first error: " in refusals[0]
    assert "maximum context length is 8192 tokens" in refusals[0]


def test_changes_whose_every_rollout_fails_round_after_round_stop_the_run_naming_the_error():
    def agent(prompt):  # every change that makes the artifact longer than two rules fails
        if len(domain.known(prompt)) > 2:
            raise refused(400, "prompt is too long: 8200 tokens > 8192 maximum")
        return domain.answer(prompt)

    asked = itertools.count()

    def reflector_model(prompt):  # past two rules, any rule the artifact lacks: a new change each time
        missing = sorted(set(range(domain.RULES)) - domain.known(prompt))
        return domain.next_rule(prompt) if len(missing) > domain.RULES - 2 else f"<rule>rule k{missing[next(asked) % len(missing)]}.</rule>"

    result = keyword_run(run=agent, model=reflector_model, rounds=20)
    assert "all of changes under test, so the run cannot learn anything" in result.error
    assert "The prompt is too long for the model (HTTP 400): shrink the artifact" in result.error
    assert len(result.history) < 20


def test_a_key_refused_on_changes_under_test_stops_the_run_at_once_though_head_s_rollouts_are_cached():
    def agent(prompt):  # the key is revoked once two rules landed: head's rollouts are all in the cache by then
        if "rule k2." in prompt:
            raise refused(401, "Incorrect API key provided")
        return domain.answer(prompt)

    result = keyword_run(run=agent, rounds=12)
    stopped = len(result.history)
    assert result.error.startswith(f"every rollout of round {stopped} failed") and "The key is refused (HTTP 401)" in result.error
    assert "the committed artifact's among them" not in result.error
    assert stopped < 12


def test_a_run_rate_limited_through_its_retries_says_so_instead_of_blaming_the_agent():
    tasks, reward, _, propose = year_program()

    def limited(rendered, task):
        raise refused(429, "Rate limit reached", retried=True)

    result = evolve(tasks, reward, run=limited, propose=propose, rounds=4, n_workers=2)
    assert "The provider kept the calls rate limited (HTTP 429) past their deadline: lower max_concurrency" in result.error
    assert "Fix the agent or the scorer" not in result.error


def test_rounds_whose_rollouts_that_ran_all_failed_on_one_task_warn_once_and_the_run_goes_on():
    """The other tasks' passes are cached and a failed rollout is not, so a round may run nothing but
    the one broken task, several times: that read as an agent that cannot work, and stopped the run."""
    tasks = [Task(id=f"t{i}", prompt="") for i in range(6)]

    def run(rendered, task):
        if task.id == "t1":
            raise RuntimeError("t1's fixture is missing")
        return "ok"

    result = evolve(tasks, lambda task, output: 1.0, run=run, held_out_frac=0, propose=lambda *_: "a rule",
                    rounds=4, n_workers=4)
    assert result.error is None and len(result.history) == 4
    told = [w for w in result.warnings if "all of them on task «t1»" in w]
    assert len(told) == 1 and "t1's fixture is missing" in told[0] and "the run goes on" in told[0]
    assert result.usage.failed_tasks["t1"] > 4  # run again round after round, never on any other task
    assert set(result.usage.failed_tasks) == {"t1"}


def test_a_key_refused_on_the_one_task_that_ran_is_no_task_s_fault():
    """Failures all of one task are that task's, but for an error no task causes: a key refused stops
    the run once a round ran enough, and is never told as a broken task."""
    key = str(refused(401, "Incorrect API key provided"))

    def watched(ran: int) -> tuple[FailureWatch, Usage]:
        watch, usage = FailureWatch(), Usage()
        usage.count_rollout(Rollout(task=Task(id="t0", prompt=""), output="ok", reward=0.5))  # the run has passed before
        watch.watch(usage)
        for _ in range(ran):
            usage.count_rollout(Rollout(task=Task(id="t1", prompt=""), output="", reward=0.0, error=key))
        return watch, usage

    watch, usage = watched(3)
    assert watch.check_round(usage, 2, 0) is None and not watch.told  # too few to stop on; not told as t1's
    for ran, check in ((4, lambda w, u: w.check_round(u, 2, 0)), (1, lambda w, u: w.check(u, "the first round"))):
        with pytest.raises(NothingWorked, match=r"The key is refused \(HTTP 401\)"):
            check(*watched(ran))

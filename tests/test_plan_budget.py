"""A budget is checked against the smallest run before anything starts: plan and start refuse a
`max_calls` that cannot measure the held-out set twice and pay for one round, naming the budget
that can and the other ways out, and plan warns about a budget that affords only some rounds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from agentdescent.runs.quote import smallest_run
from agentdescent.runs.spec import SpecError
from tests import keyword_domain as domain
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]
# The keyword domain: 24 tasks, 0.3 of them held out (7), 2 workers: 2 x 7 + 2 x (4 + 1) calls.
HELD_OUT, WORKERS = 7, 2
LEAST = 2 * HELD_OUT + WORKERS * 5


def refused(call) -> str:
    """The one problem a call refuses the spec with; it must be on max_calls."""
    with pytest.raises(SpecError) as caught:
        call()
    assert [p.field for p in caught.value.problems] == ["budget.max_calls"]
    return caught.value.problems[0].message


def many_tasks(count: int) -> list[dict]:
    return [{"id": f"t{i:04d}", "prompt": f"request {i} (code k{i % domain.RULES})", "gold": f"k{i % domain.RULES}"}
            for i in range(count)]


def test_the_smallest_run_is_both_held_out_measurements_and_one_round():
    assert smallest_run(held_out=25, workers=4) == 70
    assert smallest_run(held_out=HELD_OUT, workers=WORKERS) == LEAST == 24


def test_a_budget_below_the_smallest_run_is_refused_by_plan_and_by_start_alike(service, tmp_path):
    spec = domain.spec(tmp_path, budget={"max_calls": LEAST - 1})
    said = refused(lambda: service.plan(spec))
    assert said.startswith(f"max_calls={LEAST - 1} is below the smallest run, {LEAST} calls: the {HELD_OUT} held-out")
    assert f"Give max_calls of at least {LEAST}" in said and "run at most 1 worker," in said
    assert refused(lambda: service.start(spec)) == said
    assert service.runs() == [] and not service.store.root.exists()  # no run folder, not even the store


def test_a_held_out_set_the_budget_cannot_measure_is_refused_with_a_fraction_that_fits(service, tmp_path):
    spec = domain.spec(tmp_path, tasks=many_tasks(1000), held_out_frac=0.5, n_workers=4, budget={"max_calls": 400})
    said = refused(lambda: service.plan(spec))  # 500 held out: the engine could not even measure them once
    assert "the 500 held-out tasks measured at the start and at the end (1,000)" in said
    assert "at least 1,020" in said and "hold out at most 190 of the 1,000 tasks (held_out_frac=0.19)" in said
    assert "run at most" not in said  # one worker would not fit either
    assert refused(lambda: service.start(spec)) == said
    plan = service.plan({**spec, "held_out_frac": 0.19})  # the way out it names: 2 x 190 + 4 x 5 = 400
    assert plan.held_out == 190 and plan.quote.calls_low == plan.quote.calls_high == 400
    assert service.runs() == []


@pytest.mark.parametrize("batched", [False, True])  # a batched run draws no train task at the start under a cap
def test_a_budget_just_at_the_smallest_run_is_quoted_and_its_run_ends_well(service, tmp_path, batched):
    spec = domain.spec(tmp_path, budget={"max_calls": LEAST}, parallelism={"batched": batched})
    plan = service.plan(spec)
    assert plan.held_out == HELD_OUT and plan.quote.calls_low == plan.quote.calls_high == LEAST
    assert f"smallest run, both held-out measurements and one round at the low end: {LEAST} calls" in plan.quote.basis
    assert any(f"affords at most 1 of the {spec['rounds']} rounds" in w for w in plan.warnings), plan.warnings
    done = wait(service, service.start(spec).run_id)
    assert done.state == "finished" and done.error is None and done.calls <= LEAST, done
    assert done.outcomes, done  # its round ran: the start did not spend what the round needed


def test_the_quote_counts_the_reflections_the_spec_s_proposal_policy_takes(service, tmp_path):
    quoted = {n: service.plan({**domain.spec(tmp_path), "policies": {"proposal": {"max_proposals": n}}}).quote
              for n in (2, 3)}
    assert "up to 2 reflections" in quoted[2].basis and "up to 3 reflections" in quoted[3].basis
    assert quoted[3].calls_high > quoted[2].calls_high and quoted[3].calls_low == quoted[2].calls_low


def test_a_budget_that_affords_only_some_rounds_is_quoted_with_a_warning(service, tmp_path):
    rounds = domain.spec(tmp_path)["rounds"]
    full = LEAST + (rounds - 1) * WORKERS * 5  # the quote's low end, uncapped
    plan = service.plan(domain.spec(tmp_path, budget={"max_calls": 60}))
    assert plan.quote.calls_low == plan.quote.calls_high == 60
    assert any(f"max_calls=60 affords at most 4 of the {rounds} rounds" in w and f"{full} would pay for all" in w
               for w in plan.warnings), plan.warnings
    plenty = service.plan(domain.spec(tmp_path, budget={"max_calls": full}))
    assert plenty.quote.calls_low == full and not any("affords" in w for w in plenty.warnings)


def test_a_max_tokens_under_the_smallest_run_is_a_warning_not_a_refusal(service, tmp_path):
    plan = service.plan(domain.spec(tmp_path, budget={"max_tokens": 100}))
    needed = LEAST * plan.quote.tokens_per_call
    assert any(f"max_tokens=100 is below the about {needed:,} tokens the smallest run takes" in w
               for w in plan.warnings), plan.warnings
    plenty = service.plan(domain.spec(tmp_path, budget={"max_tokens": needed}))
    assert not any("max_tokens" in w for w in plenty.warnings)


def test_a_task_set_too_small_for_the_run_is_a_warning_with_the_way_out(service, tmp_path):
    plan = service.plan(domain.spec(tmp_path, tasks=many_tasks(6), n_workers=4))  # 4 train, 2 held out
    assert (plan.train, plan.held_out) == (4, 2)
    assert any(w.startswith("only 2 held-out tasks: the held-out reward moves in steps of 0.5") and "give 16 or more"
               in w for w in plan.warnings), plan.warnings
    assert any(w.startswith("4 workers share 4 train tasks") and "n_workers: 1, or more tasks" in w
               for w in plan.warnings), plan.warnings
    with pytest.raises(SpecError, match="5 tasks; a run needs at least 6 .some held out, enough left to judge a change"):
        service.plan(domain.spec(tmp_path, tasks=many_tasks(5)))  # 3 to train on: no change could ever be committed
    with pytest.raises(SpecError, match="7 tasks; a run needs at least 8"):
        service.plan(domain.spec(tmp_path, tasks=many_tasks(7), held_out_frac=0.5))
    one = service.plan(domain.spec(tmp_path, tasks=many_tasks(6), n_workers=1))
    assert not any("train task" in w for w in one.warnings), one.warnings
    (tmp_path / "big").mkdir()
    (tmp_path / "big/prompt.md").write_text("Answer with the code.\n" * 25_000, encoding="utf-8")  # 550,000 characters
    big = service.plan(domain.spec(tmp_path / "big"))
    assert any(w.startswith("the artifact is about 137,500 tokens, and every reflection's prompt holds all of it")
               for w in big.warnings), big.warnings
    enough = service.plan(domain.spec(tmp_path))  # 17 train, 7 held out, 2 workers
    assert not any("held-out tasks:" in w or "train task" in w or "tokens" in w for w in enough.warnings), enough.warnings


def test_the_cli_refuses_the_support_router_example_at_50_calls(tmp_path):
    example = yaml.safe_load((ROOT / "examples/specs/support-router.yaml").read_text(encoding="utf-8"))
    target = tmp_path / "my-skill"
    subprocess.run(["cp", "-r", str(ROOT / "examples/skills/support-router"), str(target)], check=True)
    tasks = {**example["tasks"], "file": str(ROOT / "examples/specs" / example["tasks"]["file"])}
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({**example, "target": str(target), "tasks": tasks, "budget": {"max_calls": 50}}), encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "agentdescent", "plan", str(spec)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "COLUMNS": "400", "TMPDIR": tempfile.gettempdir(),
                               "AGENTDESCENT_HOME": os.environ["AGENTDESCENT_HOME"]})
    assert done.returncode == 2 and done.stdout == "", done
    assert "budget.max_calls: max_calls=50 is below the smallest run, 70 calls" in done.stderr
    assert "Give max_calls of at least 70" in done.stderr


def test_a_file_larger_than_a_reflector_s_reply_is_a_warning_naming_the_option(service, tmp_path):
    """A reflection gives a changed file back whole; `claude` replies hold 4,096 tokens unless told
    otherwise, so a routing file of about 6,000 would come back cut. A frozen file is never given back."""
    target = tmp_path / "support-router"
    shutil.copytree(ROOT / "examples/skills/support-router", target)
    (target / "routing/big.md").write_text("- word\n" * 3500, encoding="utf-8")  # 24,500 characters
    spec = {"target": str(target), "tasks": {"file": str(ROOT / "examples/specs/support-router-tasks.jsonl"),
                                             "prompt": "request", "gold": "team"},
            "scorer": "exact", "agent": "python:agentdescent.testing:route_by_skill", "reflector": "claude:claude-test"}
    warned = [w for w in service.plan(spec).warnings if "routing/big.md" in w]
    assert warned == ["routing/big.md is about 6,125 tokens, more than the 4,096 a reply of the reflector "
                      "(claude:claude-test) may hold: a reflection that changes it gives it back whole, and that reply "
                      "would be cut off and refused; set the reflector's options: {max_tokens: 13000}, or leave the "
                      "file out (exclude: [...])"]
    roomy = {**spec, "reflector": {"kind": "claude", "model": "claude-test", "options": {"max_tokens": 13000}}}
    assert not any("routing/big.md" in w for w in service.plan(roomy).warnings)
    assert not any("routing/big.md" in w for w in service.plan({**spec, "frozen": ["routing/big.md"]}).warnings)
    offline = {**spec, "reflector": "python:agentdescent.testing:SkillReflector"}  # a limit we cannot know
    assert not any("routing/big.md" in w for w in service.plan(offline).warnings)

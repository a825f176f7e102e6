"""A budget is checked against the smallest run before anything starts: plan, start and evolve
refuse a `max_calls` that cannot measure the held-out set twice and pay for one round with its
acceptance test, naming the budget that can and the other ways out, and plan warns about a budget
that affords only some rounds, or may not pay for a first round that commits. The quote reads the
spec's sizes, and brackets what runs really spend."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

from agentdescent import Budget, Policies, Task, UserError, evolve
from agentdescent.engine.calls.smallest import Sizes, smallest_run
from agentdescent.engine.loop.decisions import FailuresFirst, WorstFirst
from agentdescent.engine.split import split_tasks
from agentdescent.reflect import reflector
from agentdescent.runs.quote import quote
from agentdescent.runs.spec import SpecError
from agentdescent.step.policies import BetaAcceptance
from agentdescent.testing import RouterReflector, route, route_reward, router_tasks
from tests import keyword_domain as domain
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]
# The keyword domain: 24 tasks, 0.3 of them held out (7), 17 to train on, 2 workers. The smallest run:
# the 7 held-out tasks at the start, drawn again, and at the end (21), and a round of 36: head and a
# change each on the 17 train tasks (the acceptance test's 32, as many as there are), a reflection a worker.
HELD_OUT, TRAIN, WORKERS = 7, 17, 2
LEAST = 3 * HELD_OUT + 2 * TRAIN + WORKERS
LATER = TRAIN + WORKERS  # a further round at the least: one change tested, a reflection a worker


def refused(call) -> str:
    """The one problem a call refuses the spec with; it must be on max_calls."""
    with pytest.raises(SpecError) as caught:
        call()
    assert [p.field for p in caught.value.problems] == ["budget.max_calls"]
    return caught.value.problems[0].message


def many_tasks(count: int) -> list[dict]:
    return [{"id": f"t{i:04d}", "prompt": f"request {i} (code k{i % domain.RULES})", "gold": f"k{i % domain.RULES}"}
            for i in range(count)]


def test_the_smallest_run_is_both_held_out_measurements_and_one_round_with_its_acceptance_test():
    assert smallest_run(Sizes(train=TRAIN, held_out=HELD_OUT, workers=WORKERS)) == LEAST == 57
    # 8 workers' minibatches roll head out on 32 of the 40 train tasks, as many as the test needs of head
    assert smallest_run(Sizes(train=40, held_out=25, workers=8)) == 25 + 24 + (32 + 32 + 8) + 25
    assert smallest_run(Sizes(train=40, held_out=25, workers=8, probes=8, calibration=0)) == 25 + (32 + 8 + 8) + 25


def test_a_budget_below_the_smallest_run_is_refused_by_plan_and_by_start_alike(service, tmp_path):
    spec = domain.spec(tmp_path, budget={"max_calls": LEAST - 1})
    said = refused(lambda: service.plan(spec))
    assert said.startswith(f"max_calls={LEAST - 1} is below the smallest run, {LEAST} calls: the {HELD_OUT} held-out")
    assert f"Give max_calls of at least {LEAST}" in said and "run at most 1 worker," in said
    assert refused(lambda: service.start(spec)) == said
    assert service.runs() == [] and not service.store.root.exists()  # no run folder, not even the store
    tasks = [Task(id=t["id"], prompt=t["prompt"], gold=t["gold"]) for t in domain.tasks()]  # split as the spec's are
    with pytest.raises(UserError) as caught:  # evolve refused only a budget under the held-out set
        evolve(tasks, lambda task, output: 0.0, run=lambda rendered, task: "", propose=lambda *a: None,
               n_workers=WORKERS, budget=Budget(max_calls=LEAST - 1))
    assert str(caught.value) == said


def test_a_held_out_set_the_budget_cannot_measure_is_refused_with_a_fraction_that_fits(service, tmp_path):
    spec = domain.spec(tmp_path, tasks=many_tasks(1000), held_out_frac=0.5, n_workers=4, budget={"max_calls": 400})
    said = refused(lambda: service.plan(spec))  # 500 held out: the engine could not even measure them once
    assert ("the 500 held-out tasks measured at the start (and 24 of them drawn again, to learn whether the rewards "
            "are samples) and at the end (1,024)") in said
    assert "at least 1,092" in said and "hold out at most 154 of the 1,000 tasks (held_out_frac=0.15)" in said
    assert "run at most" not in said  # one worker would not fit either
    assert refused(lambda: service.start(spec)) == said
    plan = service.plan({**spec, "held_out_frac": 0.15})  # the way out it names: 2 x 150 + 24 + (32 + 32 + 4) = 392
    assert plan.held_out == 150 and plan.quote.calls_low == plan.quote.calls_high == 400
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


def test_the_quote_reads_the_spec_s_minibatch_test_size_scouts_and_cheap_eval_tasks(service, tmp_path):
    def quoted(**fields):
        return service.plan({**domain.spec(tmp_path), **fields}).quote

    base = quoted()
    smaller_test = quoted(policies={"acceptance": {"size": 8}})
    assert smaller_test.calls_low < base.calls_low and smaller_test.calls_high < base.calls_high
    assert "the fusion and head on up to 8 probes" in smaller_test.basis
    assert quoted(policies={"acceptance": {"wave": 4}}).calls_high < base.calls_high
    assert quoted(policies={"acceptance": {"rewards": "exact"}}).calls_low == base.calls_low - HELD_OUT  # none drawn again
    assert quoted(policies={"task_sampler": {"size": 8}}).calls_high > base.calls_high
    assert quoted(policies={"proposal": {"scouts": 3}}).calls_high > base.calls_high
    assert "each verified on 4 tasks" in quoted(cheap_eval_tasks=4).basis
    assert quoted(cheap_eval_tasks=4).calls_high > base.calls_high


def test_the_quote_of_a_run_whose_blast_radius_gates_a_file_counts_the_l1_gate(service, tmp_path):
    """Each L1 change that passes is tested alone and scored on the whole held-out set: a run of 4
    workers spent twice the high end of a quote that left that out."""
    from tests import l1_domain

    spec = l1_domain.spec(tmp_path)  # a skill: scripts/answer.sh is L1 (the skill's blast radius)
    plan = service.plan(spec)
    gated, free, probes = plan.quote, service.plan({**spec, "blast_radius": {"*": "L2"}}).quote, min(32, plan.train)
    alone = (spec["n_workers"] * 2 + 1) * (probes + plan.held_out)  # each reflection alone, and the candidate joining them
    assert gated.round_high == free.round_high + alone and gated.calls_low == free.calls_low
    assert gated.calls_high > free.calls_high
    assert (f"each of up to 2 L1 changes alone (and the candidate that joins those that pass) on up to {probes} "
            f"probes and the {plan.held_out} held-out tasks (the L1 gate's oracle)") in gated.basis
    assert "L1" not in free.basis


@pytest.mark.parametrize("options", [{"n_workers": 4, "rounds": 1}, {"n_workers": 4, "rounds": 2}])
def test_the_quote_of_a_gated_run_is_above_what_it_really_spends(options):
    """Every change of the router's is L1 here: tested alone, then on the held-out set, many of them
    pass the test; a quote without the gate was below what such runs spent."""
    tasks = router_tasks(0, signals=2)
    result = evolve(tasks, route_reward, run=route, propose=RouterReflector(), blast_radius={"*": "L1"}, **options)
    train, held_out = split_tasks(tasks, 0.3, random.Random("0:split"))
    sizes = Sizes.of(Policies(), train=len(train), held_out=len(held_out), workers=options["n_workers"])
    cost = quote(sizes, rounds=options["rounds"], artifact_chars=0, prompt_chars=0, max_calls=None, price_per_call=None,
                 price_per_1k_tokens=None, gated=True)
    assert result.outcomes().get("rejected_by_test") and cost.calls_low <= result.usage.calls <= cost.calls_high, (
        cost.calls_low, result.usage.calls, cost.calls_high)


def test_a_budget_that_affords_only_some_rounds_is_quoted_with_a_warning(service, tmp_path):
    rounds = domain.spec(tmp_path)["rounds"]
    full = LEAST + (rounds - 1) * LATER  # the quote's low end, uncapped
    cap = LEAST + 3 * LATER
    plan = service.plan(domain.spec(tmp_path, budget={"max_calls": cap}))
    assert plan.quote.calls_low == plan.quote.calls_high == cap
    assert any(f"max_calls={cap} affords at most 4 of the {rounds} rounds" in w and f"{full} would pay for all" in w
               for w in plan.warnings), plan.warnings
    # nor might the first round commit: one where a change breaks probes and is bisected takes far more
    assert any(w.startswith(f"max_calls={cap} leaves {cap - 3 * HELD_OUT} calls for the rounds after the 21 held-out "
                            f"rollouts, and a first round takes {LEAST - 3 * HELD_OUT} calls (one change tested) to ")
               and "the run may stop before it commits anything" in w for w in plan.warnings), plan.warnings
    plenty = service.plan(domain.spec(tmp_path, budget={"max_calls": full}))
    assert plenty.quote.calls_low == full and not any("affords" in w or "may stop" in w for w in plenty.warnings)


def test_a_max_tokens_under_the_smallest_run_is_a_warning_not_a_refusal(service, tmp_path):
    plan = service.plan(domain.spec(tmp_path, budget={"max_tokens": 100}))
    needed = LEAST * plan.quote.tokens_per_call
    assert any(f"max_tokens=100 is below the about {needed:,} tokens the smallest run takes" in w
               for w in plan.warnings), plan.warnings
    plenty = service.plan(domain.spec(tmp_path, budget={"max_tokens": needed}))
    assert not any("is below" in w for w in plenty.warnings)


def test_a_max_tokens_caps_the_quote_at_the_calls_it_lets_start(service, tmp_path):
    """max_tokens bounds the bill in tokens: priced by the token, the quote's money stops at what it
    pays for, and the low end at the calls it lets start at the quote's tokens a call; that is a
    guess (a short reply is far fewer tokens), so the high end of the calls is not cut by it."""
    free = service.plan(domain.spec(tmp_path, price_per_1k_tokens=0.5))
    assert any("only rounds bound the bill" in w for w in free.warnings)
    per = free.quote.tokens_per_call
    cap = (free.quote.calls_low + free.quote.calls_high) // 2 * per + per // 2
    plan = service.plan(domain.spec(tmp_path, price_per_1k_tokens=0.5, budget={"max_tokens": cap}))
    start = -(-cap // per)  # a call starts while the tokens spent are under the cap
    assert (plan.quote.calls_low, plan.quote.calls_high) == (free.quote.calls_low, free.quote.calls_high)
    assert (plan.quote.calls_cap, plan.quote.calls_by_tokens) == (None, start)
    assert plan.quote.cost_high_usd == pytest.approx(start * per / 1000 * 0.5, abs=1e-4)
    assert f"max_tokens={cap}" in plan.quote.basis and "the calls running when it is reached" in plan.quote.basis
    assert not any("only rounds" in w for w in plan.warnings), plan.warnings
    assert any(w.startswith(f"no budget.max_calls: max_tokens={cap:,} bounds the bill") for w in plan.warnings)
    low = service.plan(domain.spec(tmp_path, price_per_1k_tokens=0.5, budget={"max_tokens": 10 * per}))
    assert (low.quote.calls_low, low.quote.calls_high) == (10, free.quote.calls_high)


def test_priced_by_the_call_a_max_tokens_alone_leaves_the_high_end_of_the_money_as_it_is(service, tmp_path):
    """A run whose calls were half the quote's tokens a call spent twice the calls (and the money) the
    quote's high end said: max_tokens counted at a guessed size bounds neither."""
    free = service.plan(domain.spec(tmp_path, price_per_call=0.01))
    capped = service.plan(domain.spec(tmp_path, price_per_call=0.01, budget={"max_tokens": 10 * free.quote.tokens_per_call}))
    assert capped.quote.calls_high == free.quote.calls_high and capped.quote.cost_high_usd == free.quote.cost_high_usd
    assert capped.quote.calls_low == 10 and "a guess, which caps the low end)" in capped.quote.basis


def test_the_quote_counts_held_out_evaluation_at_the_validation_share_the_spec_sets(service, tmp_path):
    """`policies.validation.share` 1 measures the held-out set after every commit: runs went past the
    high end the quote gave at the shipped fifth, whose basis said so."""
    spec = domain.spec(tmp_path, tasks=many_tasks(100), held_out_frac=0.9)
    shipped = service.plan(spec)
    every = service.plan({**spec, "policies": {"validation": {"share": 1.0}}})
    assert "at most 20% of the calls and a pass a round" in shipped.quote.basis
    assert "at most 100% of the calls and a pass a round" in every.quote.basis
    rest = every.quote.calls_high - every.rounds * every.held_out  # a pass a round, after its commit
    assert shipped.quote.calls_high == rest + -(-rest * 20 // 80) < every.quote.calls_high  # 0.2 / (1 - 0.2) of the rest


def test_the_quotes_money_is_to_the_cent_at_both_ends(service, tmp_path):
    plan = service.plan(domain.spec(tmp_path, price_per_1k_tokens=0.5))
    assert plan.quote.cost_low_usd >= 1
    assert f"calls, ${plan.quote.cost_low_usd:,.2f}-${plan.quote.cost_high_usd:,.2f}: " in plan.next


def test_a_task_set_too_small_for_the_run_is_a_warning_with_the_way_out(service, tmp_path):
    plan = service.plan(domain.spec(tmp_path, tasks=many_tasks(6), n_workers=4))  # 4 train, 2 held out
    assert (plan.train, plan.held_out) == (4, 2)
    assert ("only 2 held-out tasks: the held-out reward moves in steps of 0.5, too coarse to tell a better version from "
            "luck; give 12 or more tasks (held_out_frac=0.3 holds out 4 of 12)") in plan.warnings, plan.warnings
    fifth = service.plan(domain.spec(tmp_path, tasks=many_tasks(8), held_out_frac=0.2))  # 2 held out: 18 hold out 4
    assert any(w.startswith("only 2 held-out tasks") and w.endswith("give 18 or more tasks (held_out_frac=0.2 holds out 4 "
                                                                     "of 18)") for w in fifth.warnings), fifth.warnings
    assert not any("held-out tasks:" in w for w in service.plan(domain.spec(tmp_path, tasks=many_tasks(12))).warnings)
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


def test_a_held_out_set_whose_measurement_is_most_of_the_run_is_a_warning_naming_the_share_to_hold_out(service, tmp_path):
    plan = service.plan(domain.spec(tmp_path, tasks=many_tasks(1000), rounds=4))  # 300 held out, 700 to train on
    ends = 300 + 24 + 300  # at the start, 24 of them drawn again, and at the end
    low = ends + (32 + 32 + 2) + 3 * (32 + 2)
    assert plan.quote.calls_low == low
    assert (f"the held-out measurement at the start and the end takes {ends} of the {low} calls at the quote's low end "
            f"({ends / low:.0%}): 300 held-out tasks, where 200 are enough to tell a gain of 0.1 from chance; "
            "held_out_frac: 0.2 holds out at most 200 of the 1,000 tasks") in plan.warnings[-1], plan.warnings
    fewer = service.plan(domain.spec(tmp_path, tasks=many_tasks(1000), rounds=4, held_out_frac=0.2))
    assert fewer.held_out == 200 and not any("held-out measurement" in w for w in fewer.warnings), fewer.warnings
    longer = service.plan(domain.spec(tmp_path, tasks=many_tasks(1000), rounds=24))  # the rounds are most of it
    assert not any("held-out measurement" in w for w in longer.warnings), longer.warnings


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
    assert "budget.max_calls: max_calls=50 is below the smallest run, 142 calls" in done.stderr
    assert "Give max_calls of at least 142" in done.stderr


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


def keyword_run() -> dict:
    tasks = [Task(id=t["id"], prompt=t["prompt"], gold=t["gold"]) for t in domain.tasks()]
    return dict(tasks=tasks, reward=lambda task, output: float(output.strip() == task.gold),
                run=lambda rendered, task: domain.answer(f"{rendered}\n\n{task.prompt}"), propose=reflector(domain.next_rule))


def router_run() -> dict:
    return dict(tasks=router_tasks(0, signals=1), reward=route_reward, run=route, propose=RouterReflector())


@pytest.mark.parametrize("domain_run, options", [
    (keyword_run, {"n_workers": 1, "rounds": 1}), (keyword_run, {"n_workers": 4, "rounds": 1}),
    (keyword_run, {"n_workers": 2, "rounds": 3}), (keyword_run, {"n_workers": 2, "rounds": 8}),
    (keyword_run, {"n_workers": 2, "rounds": 1, "size": 8}), (keyword_run, {"n_workers": 2, "rounds": 1, "minibatch": 8}),
    (keyword_run, {"n_workers": 2, "rounds": 1, "cheap_eval_tasks": 4}),
    (router_run, {"n_workers": 4, "rounds": 1}), (router_run, {"n_workers": 4, "rounds": 3}),
    (router_run, {"n_workers": 8, "rounds": 3}), (router_run, {"n_workers": 4, "rounds": 1, "size": 8}),
    (router_run, {"n_workers": 4, "rounds": 1, "minibatch": 2, "scouts": 3}),
    (router_run, {"n_workers": 4, "rounds": 1, "cheap_eval_tasks": 6}),
])
def test_the_quote_brackets_what_runs_really_spend(domain_run, options):
    """The low end left out the acceptance test any proposal brings (head and the change on up to 32
    train tasks) and the draws again at the start: a run's first round took about 120 calls where
    the quote's low end counted 20, and a budget between them planned without a word and stopped
    with no round done."""
    options = dict(options)
    size, minibatch, scouts = options.pop("size", 32), options.pop("minibatch", 4), options.pop("scouts", 1)
    policies = Policies(task_sampler=FailuresFirst(size=minibatch), proposal=WorstFirst(scouts=scouts),
                        acceptance=BetaAcceptance(size=size))
    parts = domain_run()
    result = evolve(parts["tasks"], parts["reward"], run=parts["run"], propose=parts["propose"], policies=policies,
                    **options)
    train, held_out = split_tasks(parts["tasks"], 0.3, random.Random("0:split"))
    sizes = Sizes.of(policies, train=len(train), held_out=len(held_out), workers=options["n_workers"])
    cost = quote(sizes, rounds=options["rounds"], artifact_chars=0, prompt_chars=0, max_calls=None, price_per_call=None,
                 price_per_1k_tokens=None, scouts=scouts, cheap_eval_tasks=options.get("cheap_eval_tasks"))
    assert cost.calls_low <= result.usage.calls <= cost.calls_high, (cost.calls_low, result.usage.calls, cost.calls_high)
    assert 2 * cost.calls_low >= result.usage.calls  # the low end counts what any proposal brings: no wild underestimate

"""One description of a run: `evolve`'s defaults are `config.Settings`', a spec is a `Settings` with
its own fields beside, and every option of `evolve` reaches a run from a spec."""

from __future__ import annotations

import inspect

import pytest

from agentdescent import BetaAcceptance, Budget, Parallelism, Policies, Staleness, evolve
from agentdescent.config import DEFAULTS, Settings
from agentdescent.runs.spec import RunSpec, SpecError, read_spec

# evolve's parameters that are not data: the user's code, the artifact, and where the run is kept and heard from
NOT_DATA = {"tasks", "reward", "run", "propose", "strategy", "blast_radius", "stop", "store", "on_event", "policies"}


def test_evolve_s_defaults_are_the_settings_defaults():
    parameters = inspect.signature(evolve).parameters
    data = {name: p.default for name, p in parameters.items() if name not in NOT_DATA}
    assert set(data) == set(Settings.model_fields) - {"policies"}
    assert data == {name: getattr(DEFAULTS, name) for name in data}


def test_every_option_of_evolve_is_a_field_of_a_spec():
    assert set(Settings.model_fields) <= set(RunSpec.model_fields)
    parameters = set(inspect.signature(evolve).parameters) - {"tasks", "reward", "run", "propose", "strategy", "stop",
                                                              "store", "on_event"}
    assert parameters <= set(RunSpec.model_fields)


def test_a_spec_sets_the_budget_the_parallelism_and_the_gate(tmp_path):
    spec = read_spec({"target": "p.md", "tasks": "t.jsonl", "agent": "python:m:f", "n_workers": 3,
                      "budget": {"max_calls": 400, "rollout_timeout": 30},
                      "parallelism": {"asynchronous": True, "lag_budget": 1, "method": "pp", "reissue_after": None},
                      "policies": {"acceptance": {"confidence": 0.9, "size": 48}, "staleness": {"how": "rebase"}}},
                     base=tmp_path)
    options = spec.evolve_options()
    assert options["budget"] == Budget(max_calls=400, rollout_timeout=30) and options["n_workers"] == 3
    parallelism = options["parallelism"]
    assert parallelism.asynchronous and parallelism.lag_budget == 1 and parallelism.method.name == "pp"
    policies = options["policies"]
    assert isinstance(policies, Policies) and policies.acceptance == BetaAcceptance(confidence=0.9, size=48)
    assert policies.staleness == Staleness("rebase")


@pytest.mark.parametrize(("agents", "parallelism", "batched"), [
    ({"agent": "host"}, {}, True), ({"agent": "python:m:f", "reflector": {"kind": "host"}}, {"lag_budget": 1}, True),
    ({"agent": "host"}, {"batched": False}, False), ({"agent": "python:m:f"}, {}, False)])
def test_a_run_the_host_answers_is_batched_unless_its_spec_says_otherwise(tmp_path, agents, parallelism, batched):
    spec = read_spec({"target": "p.md", "tasks": "t.jsonl", **agents, "parallelism": parallelism}, base=tmp_path)
    assert spec.evolve_options()["parallelism"].batched is batched


@pytest.mark.parametrize(("agents", "proposal", "reflections"), [
    ({"agent": "host"}, {}, 3), ({"agent": "python:m:f", "reflector": {"kind": "host"}}, {"scouts": 2}, 3),
    ({"agent": "host", "reflector": "python:m:g"}, {}, 2), ({"agent": "host"}, {"max_proposals": 1}, 1),
    ({"agent": "python:m:f"}, {}, 2)])
def test_a_run_the_host_reflects_for_reflects_on_three_failures_a_worker_unless_its_spec_says_otherwise(
        tmp_path, agents, proposal, reflections):
    """The host answers a round's reflections in one request however many they are."""
    spec = read_spec({"target": "p.md", "tasks": "t.jsonl", **agents, "policies": {"proposal": proposal}}, base=tmp_path)
    assert spec.evolve_options()["policies"].proposal.max_proposals == reflections
    assert spec.policies.proposal.scouts == proposal.get("scouts", 1)


def test_a_bad_option_is_a_problem_named_by_its_field(tmp_path):
    with pytest.raises(SpecError) as caught:
        read_spec({"target": "p.md", "tasks": "t.jsonl", "agent": "python:m:f", "budget": {"max_calls": 0},
                   "parallelism": {"executor": "gpu"}, "policies": {"acceptance": {"split": 1}}}, base=tmp_path)
    fields = {p.field: p.message for p in caught.value.problems}
    assert set(fields) == {"budget", "parallelism", "policies.acceptance.split"}  # a policy's own check, at its field
    assert "max_calls" in fields["budget"] and "executor" in fields["parallelism"]


def test_an_earlier_name_of_a_field_is_read_into_its_place_and_said(tmp_path):
    spec = read_spec({"target": "p.md", "tasks": "t.jsonl", "agent": "python:m:f", "workers": 2, "max_calls": 90},
                     base=tmp_path)
    assert spec.n_workers == 2 and spec.budget.max_calls == 90
    assert spec.moved == ["workers: n_workers", "max_calls: budget.max_calls"]


def test_an_earlier_name_beside_the_field_s_name_now_is_refused_naming_both(tmp_path):
    """Read into its place, the earlier one was dropped for the other while plan said it was read."""
    with pytest.raises(SpecError) as caught:
        read_spec({"target": "p.md", "tasks": "t.jsonl", "agent": "host", "max_calls": 100,
                   "budget": {"max_calls": 5000}, "workers": 1, "n_workers": 4}, base=tmp_path)
    said = str(caught.value)
    assert "max_calls and budget.max_calls are both given" in said and "keep budget.max_calls and remove max_calls" in said
    assert "workers and n_workers are both given" in said
    spec = read_spec({"target": "p.md", "tasks": "t.jsonl", "agent": "host", "max_calls": 100,
                      "budget": {"max_tokens": 5000}}, base=tmp_path)
    assert (spec.budget.max_calls, spec.budget.max_tokens) == (100, 5000)


def test_the_objects_refuse_what_cannot_run_where_they_are_made():
    with pytest.raises(ValueError, match="reissue_after"):
        Parallelism(reissue_after=0.5)
    with pytest.raises(ValueError, match="rollout_timeout"):
        Budget(rollout_timeout=-1)

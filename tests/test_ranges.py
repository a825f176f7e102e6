"""Every shipped policy refuses a setting outside what the code that reads it can act on, where
the policy is made: `evolve` before anything runs, a spec as a problem at the field's path, and
`plan` with exit 2. A setting at the edge of its range is taken."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import pytest

from agentdescent import Policies, evolve
from agentdescent.engine.loop.decisions import Amortized, Epochs, FailuresFirst, OnHeldOutGain, RandomMinibatches, WorstFirst
from agentdescent.errors import OutOfRange, UserError
from agentdescent.runs.spec import SpecError, read_spec
from agentdescent.step.policies import BetaAcceptance
from agentdescent.step.staleness import Staleness
from agentdescent.testing import RouterReflector, route, route_reward, router_tasks

ROOT = Path(__file__).resolve().parents[1]
SPEC = {"target": "p.md", "tasks": "t.jsonl", "agent": "python:m:f"}
NAN = float("nan")

REFUSED = [  # (the spec's slot, the policy, its field, a value no one could mean, the range the error names)
    ("task_sampler", FailuresFirst, "size", 0, "whole number >= 1"),
    ("task_sampler", FailuresFirst, "size", -4, "whole number >= 1"),
    ("task_sampler", Epochs, "size", 0, "whole number >= 1"),
    ("task_sampler", RandomMinibatches, "size", 2.5, "whole number >= 1"),
    ("proposal", WorstFirst, "scouts", -1, "whole number >= 0"),
    ("proposal", WorstFirst, "max_proposals", 0, "whole number >= 1"),
    ("proposal", WorstFirst, "max_proposals", -1, "whole number >= 1"),
    ("proposal", WorstFirst, "below", 5, "number in (0, 1]"),
    ("proposal", WorstFirst, "below", 0, "number in (0, 1]"),
    ("validation", Amortized, "share", 7, "number in [0, 1]"),
    ("validation", Amortized, "share", -1, "number in [0, 1]"),
    ("validation", Amortized, "min_known", 0, "whole number >= 1"),
    ("promotion", OnHeldOutGain, "min_gain", -1, "number in [0, 1)"),
    ("promotion", OnHeldOutGain, "min_gain", 1, "number in [0, 1)"),
    ("staleness", Staleness, "decay", -1, "number >= 0, finite"),
    ("staleness", Staleness, "decay", NAN, "number >= 0, finite"),
    ("acceptance", BetaAcceptance, "fresh", -1, "whole number >= 0"),
    ("acceptance", BetaAcceptance, "prior", 0, "number above 0, finite"),
    ("acceptance", BetaAcceptance, "ride", -0.5, "number >= 0, finite"),
    ("acceptance", BetaAcceptance, "min_decisive", -1, "number >= 0, finite"),
    ("acceptance", BetaAcceptance, "wave", 2.5, "whole number >= 1"),
    ("acceptance", BetaAcceptance, "threshold", 0, "number in (0, 1]"),
]


@pytest.mark.parametrize("slot, policy, name, value, span", REFUSED)
def test_a_setting_out_of_its_range_is_refused_where_the_policy_is_made(slot, policy, name, value, span):
    with pytest.raises(OutOfRange) as caught:
        policy(**{name: value})
    assert str(caught.value).startswith(f"{policy.__name__}({name}={value!r}): must be a {span} (")


@pytest.mark.parametrize("slot, policy, name, value, span", REFUSED)
def test_a_spec_names_the_setting_at_its_path_with_its_range(tmp_path, slot, policy, name, value, span):
    with pytest.raises(SpecError) as caught:
        read_spec({**SPEC, "policies": {slot: {name: value}}}, base=tmp_path)
    [problem] = caught.value.problems
    assert problem.field == f"policies.{slot}.{name}"
    assert span in problem.message or "must be a valid integer" in problem.message  # 2.5: the schema's own word


@pytest.mark.parametrize("made", [
    lambda: WorstFirst(scouts=0, max_proposals=1, below=1.0), lambda: WorstFirst(below=0.5, scouts=3),
    lambda: Amortized(share=0), lambda: Amortized(share=1, min_known=1), lambda: OnHeldOutGain(min_gain=0.5),
    lambda: Staleness(decay=0), lambda: Staleness(decay=9), lambda: FailuresFirst(size=1), lambda: Epochs(100),
    lambda: BetaAcceptance(fresh=0), lambda: BetaAcceptance(fresh=17), lambda: BetaAcceptance(wave=1), lambda: BetaAcceptance(ride=1.5),
    lambda: BetaAcceptance(ride=0, min_decisive=0, prior=0.5)])
def test_a_setting_at_the_edge_of_its_range_is_taken(made):
    made()


def test_a_quoted_number_in_a_spec_is_read_as_the_number(tmp_path):
    spec = read_spec({**SPEC, "policies": {"proposal": {"scouts": "2"}, "validation": {"share": "0.5"}}}, base=tmp_path)
    assert (spec.policies.proposal.scouts, spec.policies.validation.share) == (2, 0.5)


def _within(seconds: float, call) -> dict:
    """What `call` returned or raised, on a thread: a call that never returns fails the test, not the suite."""
    out: dict = {}

    def go() -> None:
        try:
            out["value"] = call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test to assert on
            out["error"] = exc

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s"
    return out


def _evolve(**options):
    return evolve(router_tasks(0, signals=1), route_reward, run=route, propose=RouterReflector(), rounds=2, **options)


def test_evolve_with_no_turn_to_deal_is_refused_rather_than_waiting_for_one():
    """scouts=-1 asked the sampler for no minibatch at all, and the loop waited for a turn forever."""
    out = _within(60, lambda: _evolve(policies=Policies(proposal=WorstFirst(scouts=-1))))
    assert isinstance(out.get("error"), UserError) and "WorstFirst(scouts=-1): must be a whole number >= 0" in str(out["error"])


@dataclasses.dataclass(frozen=True)
class OwnProposal:
    scouts: int = -1

    def __call__(self, rollouts):
        return WorstFirst()(rollouts)


def test_evolve_refuses_a_proposal_policy_of_the_caller_s_with_scouts_below_0():
    out = _within(60, lambda: _evolve(policies=Policies(proposal=OwnProposal())))
    assert isinstance(out.get("error"), UserError) and "OwnProposal(scouts=-1): must be a whole number >= 0" in str(out["error"])


def test_stop_none_is_refused_naming_stop_and_the_default():
    with pytest.raises(UserError, match=r"stop must be a list of stop rules .*or \(\) for none \(the default\); got None"):
        _evolve(stop=None)


def test_plan_refuses_a_setting_out_of_range_in_one_line_with_exit_2(tmp_path):
    spec = tmp_path / "run.yaml"
    spec.write_text("target: p.md\ntasks: t.jsonl\nagent: python:m:f\npolicies: {proposal: {scouts: -1}}\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "agentdescent", "plan", str(spec)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin", "TMPDIR": tempfile.gettempdir(),
                               "AGENTDESCENT_HOME": os.environ["AGENTDESCENT_HOME"]})
    assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done
    problems = [line for line in done.stderr.splitlines() if line.startswith("  ")]
    assert done.stderr.startswith("error: the run spec has 1 problem:") and len(problems) == 1, done.stderr
    assert problems[0].startswith("  policies.proposal.scouts: must be a whole number >= 0") and problems[0].endswith("got -1")

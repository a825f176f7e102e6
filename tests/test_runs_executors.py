"""Run specs on the process and Ray executors: a text target and a folder target run in worker
processes (or on Ray) as on threads, the agents and reflectors the spec names sent there in the
library's own wrappers; what cannot be sent is refused by plan, before any run starts."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest

from agentdescent.runs.spec import SpecError
from tests import keyword_domain as domain
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]


def skill_spec(folder: Path, executor: str) -> dict:
    """The shipped support-router skill (a copy) with the package's offline stand-ins, which work
    in the rollout's workspace (route_by_skill reads the skill there)."""
    target = folder / "my-skill"
    shutil.copytree(ROOT / "examples/skills/support-router", target)
    return {"target": str(target), "scorer": "exact",
            "tasks": {"file": str(ROOT / "examples/specs/support-router-tasks.jsonl"), "prompt": "request",
                      "gold": "team"},
            "agent": "python:agentdescent.testing:route_by_skill", "reflector": "python:agentdescent.testing:SkillReflector",
            "prompt": "Use the support-router skill. Which team handles this request? Answer with the team's name only."
                      "\n\n{task}",
            "name": "support-router", "editable": ["SKILL.md", "routing/*"], "frozen": ["hooks/*"],
            "n_workers": 2, "rounds": 2, "budget": {"max_calls": 2000}, "parallelism": {"executor": executor}}


def test_a_text_target_runs_on_processes(service, tmp_path):
    """The spec's prompt and its python: agent went to the workers in closures, which cannot be
    pickled: every such run failed as it started."""
    run = service.start(domain.spec(tmp_path, rounds=4, parallelism={"executor": "process"})).run_id
    done = wait(service, run, timeout=180)
    assert done.state == "finished" and done.failures == 0, done
    assert done.best_reward > done.initial_reward, done


def test_a_folder_target_runs_on_processes_each_rollout_in_a_workspace(service, tmp_path):
    """tree_runner held a lock and a pool of workspaces, and could not be sent."""
    run = service.start(skill_spec(tmp_path, "process")).run_id
    done = wait(service, run, timeout=180)
    assert done.state == "finished" and done.failures == 0, done
    assert done.best_reward > done.initial_reward > 0, done  # the agent read the skill in its workspace


def test_a_folder_target_runs_on_ray(service, tmp_path, monkeypatch):
    pytest.importorskip("ray", reason='the Ray executor needs pip install "agentdescent[ray]"')
    # the local cluster the run's process starts keeps its sockets there, and a socket's path may
    # not pass 107 bytes: pytest's temporary folders are too deep
    sockets = Path(tempfile.mkdtemp(prefix="ad-ray-", dir="/tmp"))
    monkeypatch.setenv("RAY_TMPDIR", str(sockets))
    try:
        run = service.start(skill_spec(tmp_path, "ray")).run_id
        done = wait(service, run, timeout=300)
    finally:
        shutil.rmtree(sockets, ignore_errors=True)
    assert done.state == "finished" and done.failures == 0, done
    assert done.best_reward > done.initial_reward > 0, done


def test_plan_refuses_what_the_executor_cannot_send_with_the_fix(service, tmp_path):
    with pytest.raises(SpecError) as refused:
        service.plan({**domain.spec(tmp_path), "agent": "python:tests.keyword_domain:locked_answer",
                      "parallelism": {"executor": "process"}})
    assert [p.field for p in refused.value.problems] == ["agent"]
    said = refused.value.problems[0].message
    assert "executor 'process' sends 'tests.keyword_domain:locked_answer' to other processes" in said
    assert "cannot be pickled: TypeError" in said and "use executor: thread" in said
    with pytest.raises(SpecError, match=r"parallelism.executor.*the host answers only through the run's own process"):
        service.plan({**domain.spec(tmp_path), "agent": "host", "parallelism": {"executor": "process"}})
    assert service.plan({**domain.spec(tmp_path), "agent": "python:tests.keyword_domain:locked_answer"}).tasks

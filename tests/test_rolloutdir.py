"""A run's rollout folder in the shared temporary folder: one a cleanup removed mid-run is made
again and the run goes on as it would have."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from agentdescent.errors import UserError
from agentdescent.runs.rolloutdir import ROLLOUTS_PREFIX, rollout_folder
from agentdescent.runs.store import RUN_ENV
from agentdescent.testing import SkillReflector
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]
WIPES_ENV = "ROLLOUTDIR_TEST_WIPES"  # the file `WipesTheRolloutFolderOnce` names what it removed in


class WipesTheRolloutFolderOnce(SkillReflector):
    """The offline reflector, which at its first reflection removes the run's rollout folder whole,
    as a cleanup of the temporary folder would (no rollout is out meanwhile: the run has one worker)."""

    wiped = False

    def __call__(self, prompt: str) -> str:
        if not WipesTheRolloutFolderOnce.wiped:
            WipesTheRolloutFolderOnce.wiped = True
            for folder in Path(tempfile.gettempdir()).glob(f"{ROLLOUTS_PREFIX}{os.environ[RUN_ENV]}-*"):
                shutil.rmtree(folder)
                with open(os.environ[WIPES_ENV], "a", encoding="utf-8") as said:
                    said.write(folder.name + "\n")
        return super().__call__(prompt)


def skill_spec(folder: Path, **fields) -> dict:
    target = folder / "support-router"
    shutil.copytree(ROOT / "examples/skills/support-router", target)
    return {"target": str(target), "tasks": {"file": str(ROOT / "examples/specs/support-router-tasks.jsonl"),
                                             "prompt": "request", "gold": "team"},
            "scorer": "exact", "agent": "python:agentdescent.testing:route_by_skill",
            "reflector": "python:agentdescent.testing:SkillReflector", "n_workers": 1, "rounds": 2, **fields}


def test_a_rollout_folder_removed_mid_run_is_made_again_and_the_run_ends_as_an_undisturbed_one(service, tmp_path,
                                                                                                 monkeypatch):
    """Every rollout after the removal failed with FileNotFoundError, and the run stopped saying to
    fix the agent or the scorer."""
    wipes = tmp_path / "wipes"
    monkeypatch.setenv(WIPES_ENV, str(wipes))
    (tmp_path / "calm").mkdir()
    (tmp_path / "wiped").mkdir()
    calm = service.start(skill_spec(tmp_path / "calm")).run_id
    wiped = service.start(skill_spec(tmp_path / "wiped", reflector="python:tests.test_rolloutdir:WipesTheRolloutFolderOnce")).run_id
    calm, wiped = wait(service, calm, timeout=180), wait(service, wiped, timeout=180)
    assert wipes.read_text(encoding="utf-8").startswith(f"{ROLLOUTS_PREFIX}{wiped.id}-")
    assert wiped.state == "finished" and wiped.failures == 0, wiped
    same = ("state", "round", "initial_reward", "best_reward", "outcomes", "failures")
    assert {k: getattr(wiped, k) for k in same} == {k: getattr(calm, k) for k in same}
    assert calm.outcomes.get("committed") and calm.best_reward > calm.initial_reward, calm
    assert not list(Path(tempfile.gettempdir()).glob(f"{ROLLOUTS_PREFIX}{wiped.id}-*"))  # the one made again went too


def test_a_rollout_folder_that_cannot_be_made_again_stops_the_run_saying_so(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with rollout_folder("r1-abc") as folder:
        path = Path(str(folder))
        with tempfile.TemporaryDirectory(dir=folder) as workspace:
            assert Path(workspace).parent == path
        shutil.rmtree(path)
        with tempfile.TemporaryDirectory(dir=folder):  # made again
            assert path.stat().st_mode & 0o777 == 0o700
        shutil.rmtree(path)
        path.write_text("someone else's\n", encoding="utf-8")  # what a folder cannot be made over
        with pytest.raises(UserError) as stopped:
            tempfile.mkdtemp(dir=folder)
        path.unlink()
    said = str(stopped.value)
    assert f"the run's temporary folder {path} was removed while the run worked in it" in said
    assert "cannot be made again" in said and "agentdescent resume r1-abc goes on from its last commit" in said
    assert "agent or the scorer" not in said

"""A run's rollout folder in the shared temporary folder: one a cleanup removed mid-run is made
again and the run goes on as it would have; what a killed run left, `runs --prune` removes at
once, and what a live run works in it keeps."""

from __future__ import annotations

import io
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from agentdescent import filelock
from agentdescent.cli.prune import prune
from agentdescent.errors import UserError
from agentdescent.removal import remove_tree
from agentdescent.runs.rolloutdir import ROLLOUTS_PREFIX, clear, rollout_folder
from agentdescent.runs.status import LIVE
from agentdescent.runs.store import RUN_ENV
from agentdescent.testing import SkillReflector
from tests import keyword_domain as domain
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


def test_prune_removes_a_killed_run_s_rollout_folder_at_once_and_keeps_a_live_run_s(service, tmp_path, monkeypatch):
    """A killed run's folder was kept for ten minutes after its last change, 'a run may still work
    in' it, though no process held its lock; and longer where the clock had gone back."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))  # the runs' and prune's own: prune removes what no process holds
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    for name in ("killed", "live"):
        (tmp_path / name).mkdir()
    monkeypatch.setenv("KEYWORD_KILL_AT", "5")  # its agent kills the run's process at its 5th call
    killed = wait(service, service.start(domain.spec(tmp_path / "killed")).run_id)
    monkeypatch.delenv("KEYWORD_KILL_AT")
    assert killed.state == "interrupted", killed
    left = list(temp.glob(f"{ROLLOUTS_PREFIX}{killed.id}-*"))
    assert len(left) == 1
    ahead = left[0].stat().st_mtime + 3600  # made an hour "later": the clock went back since
    os.utime(left[0], (ahead, ahead))
    live = service.start(domain.spec(tmp_path / "live", agent="python:tests.slow_agent:answer")).run_id
    deadline = time.monotonic() + 60
    while not (working := list(temp.glob(f"{ROLLOUTS_PREFIX}{live}-*"))) and time.monotonic() < deadline:
        time.sleep(0.1)
    said = io.StringIO()
    assert prune(Console(file=said, width=400)) == 0
    assert not left[0].exists() and len(working) == 1 and working[0].is_dir()
    assert "removed 1 rollout folder that stopped runs left there; kept 1 that a live run's process holds" in said.getvalue()
    assert service.status(live).state in LIVE


def test_a_folder_removed_as_it_is_made_is_made_again_before_any_rollout_works_in_it(tmp_path, monkeypatch):
    """`runs --prune` removes at once a rollout folder no process holds: one a run has made and not
    yet locked may go, before the lock is taken or while it is waited for."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made, mkdtemp = [], tempfile.mkdtemp

    def make(**where) -> str:
        path = mkdtemp(**where)
        made.append(path)
        if len(made) == 1:
            assert clear() == (1, 0, 0)  # a prune before the run locks it
        elif len(made) == 2:  # a prune that holds it alone as the run asks for its lock, and removes it
            holding = threading.Event()

            def prune_it() -> None:
                with filelock.alone(Path(path)):
                    holding.set()
                    time.sleep(0.3)
                    remove_tree(path)
            threading.Thread(target=prune_it).start()
            holding.wait()
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", make)
    with rollout_folder("r1-abc") as folder:
        assert str(folder) == made[2] and os.path.isdir(made[2]) and not any(map(os.path.exists, made[:2]))
        assert clear() == (0, 1, 0)  # the one it works in, locked
    assert not os.path.exists(made[2])

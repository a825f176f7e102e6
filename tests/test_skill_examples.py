"""Skill folders evolved end to end: the shipped example, the project's own skill, and the directory
quickstart run as a user runs it against a stand-in `claude` and a loopback Anthropic server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from agentdescent import Task, scorer
from agentdescent.testing import routing_truth
from examples.evolve_own_skill import QUESTIONS, STEPS, answer_from_skill, evolve_own_skill
from examples.evolve_own_skill import SKILL as OWN_SKILL
from examples.skill_dir_evolution import SKILL, TEAMS, SkillReflector, evolve_skill, listed_words
from tests.loopback import LoopbackServer, anthropic_messages

ROOT = Path(__file__).resolve().parents[1]
FAKES = Path(__file__).parent / "fake_clis"


def folder(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


def test_the_example_skill_improves_offline_and_is_written_back(tmp_path):
    copy = tmp_path / "support-router"
    shutil.copytree(SKILL, copy)
    pristine = folder(copy)
    result = evolve_skill(copy, workers=4, rounds=12, store=tmp_path / "ledger")
    assert result.initial_reward < 0.5 and result.final_reward == 1.0
    assert result.outcomes()["committed"] >= 5
    assert result.state["hooks/pre.sh"] == pristine["hooks/pre.sh"].decode()  # frozen
    assert result.state["references/teams.md"] == pristine["references/teams.md"].decode()  # read-only context
    plan = result.write_to(copy)
    assert plan.backup is not None and folder(plan.backup) == pristine  # the whole folder, as it was
    assert plan.written and set(plan.written) <= {f"routing/{team}.md" for team in TEAMS}
    assert all(listed_words((copy / "routing" / f"{team}.md").read_text(encoding="utf-8")) for team in TEAMS)
    assert (copy / "hooks" / "pre.sh").read_bytes() == pristine["hooks/pre.sh"]
    assert folder(SKILL) == pristine  # the shipped example is never written


def test_the_project_s_own_skill_answers_its_procedure_and_puts_a_lost_step_back(tmp_path):
    workspace = tmp_path / "workspace"
    shutil.copytree(OWN_SKILL, workspace / ".claude" / "skills" / "agentdescent")
    for question, word, _ in QUESTIONS:  # the shipped skill teaches its whole procedure
        assert scorer("contains")(Task(id="q", prompt=question, gold=word), answer_from_skill(question, str(workspace)))
    copy = tmp_path / "degraded" / "agentdescent"
    shutil.copytree(OWN_SKILL, copy)
    step = next(s for s in STEPS if s.startswith("Ask the user before you write anything back"))
    skill_md = copy / "SKILL.md"
    skill_md.write_text(skill_md.read_text(encoding="utf-8").replace(f"\n8. {step}", ""), encoding="utf-8")
    result = evolve_own_skill(copy, store=tmp_path / "l2")
    assert result.initial_reward < result.final_reward == 1.0
    assert step in result.state["SKILL.md"]
    plan = result.write_to(copy)
    assert plan.written == ("SKILL.md",) and plan.backup is not None
    assert step in skill_md.read_text(encoding="utf-8")
    again = result.write_to(copy)
    assert again.written == () and again.backup is None  # nothing left to write: no second backup


def test_the_directory_quickstart_runs_as_written_against_a_stand_in_claude(tmp_path):
    """`--claude` runs each rollout with the `claude` executable found on PATH (here the stand-in,
    which answers without routing) and reflects with the Anthropic API (here a loopback server
    speaking it, with the offline reflector's logic)."""
    copy = tmp_path / "support-router"
    reflector = SkillReflector(0, noise=0.0, silence=0.0)
    with LoopbackServer(anthropic_messages(reflector)) as server:
        env = {**os.environ, "PATH": f"{FAKES}{os.pathsep}{os.environ['PATH']}", "ANTHROPIC_BASE_URL": server.url,
               "ANTHROPIC_API_KEY": "sk-ant-test-quickstart", "FAKE_CLI_LOG": str(tmp_path / "claude.log"),
               "PYTHONPATH": str(ROOT)}
        env.pop("FAKE_CLI_MODE", None)
        done = subprocess.run([sys.executable, "-m", "examples.skill_dir_evolution", "--claude", "--into", str(copy),
                               "--rounds", "2", "--workers", "2"], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=180)
        reflections = [r.json for r in server.requests]
    assert done.returncode == 0, done.stderr
    runs = (tmp_path / "claude.log").read_text(encoding="utf-8").splitlines()
    assert len(runs) >= 8 and all('"cwd": "' in line and "agentdescent-ws-" in line for line in runs)
    assert reflections and '<file path="routing/billing.md">' in reflections[0]["messages"][-1]["content"]
    assert "held-out reward: " in done.stdout and "written back:" in done.stdout
    assert (copy / "hooks" / "pre.sh").read_bytes() == (SKILL / "hooks" / "pre.sh").read_bytes()
    assert "sk-ant-test-quickstart" not in done.stdout + done.stderr


def test_routing_truth_reads_what_the_files_really_hold():
    tasks = [Task(id="a", prompt="please: my invoice is wrong", gold="billing"),
             Task(id="b", prompt="please track my parcel", gold="shipping"),
             Task(id="c", prompt="help: the app crash again", gold="technical")]
    state = {"routing/billing.md": "# billing\n\n- invoice\n- please\n", "routing/technical.md": "# technical\n\n- crash\n"}
    truth = routing_truth(state, tasks)
    # "please", a filler under billing, sends the parcel request to billing too
    assert (truth.learnt, truth.to_learn, truth.fillers) == (2, 3, 1) and truth.right == 2 / 3

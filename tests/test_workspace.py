"""tree_runner: each rollout in its own workspace, the tree where the host reads it, nothing left behind."""

from __future__ import annotations

import gc
import os
import pickle
import re
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agentdescent.agents import claude_code, scripted
from agentdescent.artifacts.workspace import AgentOutput, tree_runner
from agentdescent.errors import AgentError, UserError
from agentdescent.types import Task
from tests.doubles import InFlight

FAKES = Path(__file__).parent / "fake_clis"
TREE = {"SKILL.md": "# Router\nbe brief\n", "references/api.md": "api\n", "hooks/pre.sh": "changed by a diff\n"}
TASK = Task(id="t1", prompt="route this")


def listing(prompt, cwd):
    """An agent that answers with every file it can see, and writes one of its own."""
    Path(cwd, "answer.txt").write_text(f"done: {prompt}\n", encoding="utf-8")
    return "\n".join(sorted(str(p.relative_to(cwd)) for p in Path(cwd).rglob("*") if p.is_file()))


def looking(prompt, cwd):
    """An agent that answers with every file it can see, and changes none."""
    return "\n".join(sorted(str(p.relative_to(cwd)) for p in Path(cwd).rglob("*") if p.is_file()))


@pytest.mark.parametrize("layout, name, where", [
    ("claude_skill", "router", ".claude/skills/router/"),
    ("claude_agents", None, ".claude/agents/"),
    ("agents_skill", "router", ".agents/skills/router/"),
    ("root", None, ""),
])
def test_each_layout_puts_the_tree_where_its_host_reads_it(tmp_path, layout, name, where):
    run = tree_runner(scripted(listing), layout=layout, name=name, workdir=tmp_path)
    output = run(TREE, TASK)
    assert isinstance(output, AgentOutput)
    assert output.splitlines() == sorted([f"{where}{key}" for key in TREE] + ["answer.txt"])
    assert output.files == {"answer.txt": "done: route this\n"}  # what the agent wrote, for the reward
    assert list(tmp_path.iterdir()) == []  # the workspace is gone


def test_the_overlay_beats_the_candidate_and_fixtures_are_staged(tmp_path):
    seen = {}

    def agent(prompt, cwd):
        seen.update({str(p.relative_to(cwd)): p.read_text(encoding="utf-8") for p in Path(cwd).rglob("*") if p.is_file()})
        return "ok"

    task = Task(id="t2", prompt="p", meta={"files": {"inbox/ticket.txt": "my parcel is late"}})
    run = tree_runner(scripted(agent), layout="root", overlay={"hooks/pre.sh": "exit 0\n"},
                      fixtures={"data/common.csv": "a,b\n"}, workdir=tmp_path)
    run(TREE, task)
    assert seen["hooks/pre.sh"] == "exit 0\n"  # the pristine frozen file, not the candidate's
    assert seen["inbox/ticket.txt"] == "my parcel is late" and seen["data/common.csv"] == "a,b\n"


def test_a_failed_rollout_keeps_its_workspace_only_when_asked(tmp_path):
    def broken(prompt, cwd):
        raise AgentError("the model gave up")

    with pytest.raises(AgentError, match="the model gave up"):
        tree_runner(scripted(broken), layout="root", workdir=tmp_path)(TREE, TASK)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(AgentError, match="workspace is kept at") as caught:
        tree_runner(scripted(broken), layout="root", workdir=tmp_path, keep_failed=True)(TREE, TASK)
    [kept] = tmp_path.iterdir()
    assert str(kept) in str(caught.value) and (kept / "SKILL.md").read_text(encoding="utf-8") == TREE["SKILL.md"]


def test_concurrent_rollouts_see_their_own_candidate_and_live_workspaces_are_bounded(tmp_path):
    in_flight = InFlight()

    def agent(prompt, cwd):
        with in_flight:
            time.sleep(0.01)
            return Path(cwd, "SKILL.md").read_text(encoding="utf-8")

    run = tree_runner(scripted(agent), layout="root", max_workspaces=4, workdir=tmp_path)
    candidates = [{"SKILL.md": f"candidate {i}\n"} for i in range(24)]
    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(lambda tree: run(tree, TASK), candidates))
    assert answers == [tree["SKILL.md"] for tree in candidates]
    assert 1 < in_flight.peak <= 4 and len(list(tmp_path.iterdir())) <= 4  # clean ones wait for their candidate again
    run.close()
    assert list(tmp_path.iterdir()) == []


def test_a_clean_workspace_serves_its_candidate_again_and_a_changed_one_never_does(tmp_path):
    seen = []

    def agent(prompt, cwd):
        files = sorted(str(p.relative_to(cwd)) for p in Path(cwd).rglob("*") if p.is_file())
        seen.append((cwd, files, Path(cwd, "SKILL.md").read_text(encoding="utf-8")))
        if prompt == "scribble":
            Path(cwd, "SKILL.md").write_text("scribbled\n", encoding="utf-8")
        return "ok"

    run = tree_runner(scripted(agent), layout="root", workdir=tmp_path)
    tree = {"SKILL.md": "pristine\n"}
    run(tree, Task(id="a", prompt="read", meta={"files": {"inbox/a.txt": "for a"}}))
    run(tree, Task(id="b", prompt="scribble"))
    output = run(tree, Task(id="c", prompt="read"))
    (first, first_files, _), (second, second_files, _), (third, _, third_text) = seen
    assert first == second and first_files == ["SKILL.md", "inbox/a.txt"] and second_files == ["SKILL.md"]
    assert third != second and third_text == "pristine\n"  # the scribbled workspace was not reused
    assert output.files == {}
    run(tree, Task(id="d", prompt="read"))
    assert seen[-1][0] == third  # clean again, so reused
    run.close()
    assert list(tmp_path.iterdir()) == []


def test_what_a_cli_keeps_in_a_workspace_on_its_own_account_is_no_work_and_no_change(tmp_path):
    """Claude Code's temp files (`.tmp`) and a plugin host's home (`.home`) came back as files the
    agent made, and kept every workspace from serving its candidate again."""
    seen = []

    def agent(prompt, cwd):
        seen.append((cwd, sorted(str(p.relative_to(cwd)) for p in Path(cwd).rglob("*") if p.is_file())))
        for kept in (".tmp/claude-0/probe", ".home/.claude.json"):
            Path(cwd, kept).parent.mkdir(parents=True, exist_ok=True)
            Path(cwd, kept).write_text("the CLI's own\n", encoding="utf-8")
        if prompt == "work":
            Path(cwd, "answer.txt").write_text("42\n", encoding="utf-8")
        return "ok"

    run = tree_runner(scripted(agent), layout="root", workdir=tmp_path)
    assert run({"SKILL.md": "x\n"}, Task(id="a", prompt="read")).files == {}
    assert run({"SKILL.md": "x\n"}, Task(id="b", prompt="work")).files == {"answer.txt": "42\n"}
    (first, _), (second, second_files) = seen
    assert second == first and second_files == ["SKILL.md"]  # served again, without the first call's own files
    run.close()


def test_a_real_cli_agent_runs_in_the_workspace(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", f"{FAKES}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.delenv("FAKE_CLI_MODE", raising=False)
    output = tree_runner(claude_code(), layout="root", workdir=tmp_path)(TREE, TASK)
    assert "SKILL.md says: # Router\nbe brief" in output  # the stand-in `claude` read the candidate from its cwd


@pytest.mark.parametrize("options, says", [
    ({"layout": "nowhere"}, "layout='nowhere' is not one of"),
    ({"layout": "claude_skill"}, "needs name="),
    ({"layout": "claude_skill", "name": "../up"}, "needs name="),
    ({"layout": "root", "overlay": {"../x": "y"}}, "overlay"),
    ({"layout": "root", "max_workspaces": 0}, "max_workspaces"),
])
def test_bad_options_are_refused_with_the_fix(options, says):
    with pytest.raises(UserError, match=says):
        tree_runner(scripted(listing), **options)


def test_an_agent_without_a_working_folder_and_bad_fixtures_are_refused(tmp_path):
    with pytest.raises(UserError, match="takes cwd="):
        tree_runner(lambda prompt: "x", layout="root")
    run = tree_runner(scripted(listing), layout="claude_skill", name="router", workdir=tmp_path)
    inside = Task(id="t3", prompt="p", meta={"files": {".claude/skills/router/SKILL.md": "hijack"}})
    with pytest.raises(UserError, match="would overwrite the artifact's own folder"):
        run(TREE, inside)
    escaping = Task(id="t4", prompt="p", meta={"files": {"../../etc/x": "y"}})
    with pytest.raises(UserError, match="'..'"):
        run(TREE, escaping)


class _Reply:
    """A client's reply object, whose text is an attribute."""

    def __init__(self) -> None:
        self.text = "ok"


async def _async_agent(prompt, *, cwd):
    return "ok"


def _generator_agent(prompt, *, cwd):
    yield "ok"


@pytest.mark.parametrize("agent, says", [
    (_async_agent, "tree_runner's agent returned coroutine for task «t1», not its answer: an async or generator "
                   "function (or a callable object with one) was given; give a plain function"),
    (_generator_agent, "tree_runner's agent returned generator for task «t1», not its answer"),
    (lambda prompt, cwd: None, "tree_runner's agent returned None for task «t1»; it must return its answer as text"),
    (lambda prompt, cwd: _Reply(), "tree_runner's agent returned a _Reply object for task «t1», which has no text of "
                                   "its own"),
])
def test_an_agent_that_returns_no_text_stops_the_run_saying_so(tmp_path, agent, says):
    """Its str() was taken for the answer ('<coroutine object ...>', 'None'): every rollout scored 0
    and the run ended as if it had learnt nothing, with no error."""
    from agentdescent import FileTree, evolve

    run = tree_runner(agent, layout="root", workdir=tmp_path)
    with warnings.catch_warnings(record=True) as heard:
        warnings.simplefilter("always")
        with pytest.raises(UserError, match=re.escape(says)):
            run(TREE, TASK)
        gc.collect()
    assert [w for w in heard if "never awaited" in str(w.message)] == []  # closed, not left to the collector
    assert list(tmp_path.iterdir()) == []
    tasks = [Task(id=f"t{i}", prompt=f"p{i}") for i in range(8)]
    with pytest.raises(UserError, match="tree_runner's agent returned"):
        evolve(tasks, lambda task, output: 0.0, run=run, propose=lambda *args: None, strategy=FileTree(TREE), rounds=1)


def test_an_idle_workspace_changed_while_it_waited_is_not_handed_to_the_next_rollout(tmp_path):
    """A rollout of another candidate (or a program an agent left running) edits an idle
    workspace, the frozen hook too: the next rollout of its candidate gets a fresh one."""
    seen: list[dict] = []

    def agent(prompt, cwd):
        seen.append({str(p.relative_to(cwd)): p.read_text(encoding="utf-8") for p in Path(cwd).rglob("*") if p.is_file()})
        if prompt == "meddle":
            for idle in Path(cwd).parent.iterdir():
                if idle != Path(cwd) and (idle / "hooks/pre.sh").exists():
                    (idle / "hooks/pre.sh").write_text("rm -r ~\n", encoding="utf-8")
        return "ok"

    run = tree_runner(scripted(agent), layout="root", overlay={"hooks/pre.sh": "exit 0\n"}, workdir=tmp_path)
    run(TREE, TASK)  # its workspace waits, idle
    run({**TREE, "SKILL.md": "other\n"}, Task(id="t9", prompt="meddle"))
    run(TREE, TASK)
    assert seen[-1]["hooks/pre.sh"] == "exit 0\n"


def test_what_an_agent_wrote_comes_back_within_caps_and_never_through_a_link(tmp_path, monkeypatch):
    from agentdescent.artifacts import workspace as workspace_module

    monkeypatch.setattr(workspace_module, "MAX_OUTPUT_FILES", 3)

    def agent(prompt, cwd):
        for i in range(5):
            Path(cwd, f"note-{i}.md").write_text(f"note {i}\n", encoding="utf-8")
        Path(cwd, "zeros.md").write_bytes(b"\0" * 10)  # binary, as a tree reads it
        (Path(cwd) / "out").mkdir()
        (Path(cwd) / "out" / "passwd").symlink_to("/etc/passwd")
        return "ok"

    output = tree_runner(scripted(agent), layout="root", workdir=tmp_path)(TREE, TASK)
    assert output.files == {f"note-{i}.md": f"note {i}\n" for i in range(3)}


@pytest.mark.skipif(os.geteuid() == 0, reason="root removes what it cannot write")
def test_a_workspace_the_agent_made_unwritable_is_removed_all_the_same(tmp_path):
    def agent(prompt, cwd):
        (Path(cwd) / "cache").mkdir()
        (Path(cwd) / "cache" / "x").write_text("x", encoding="utf-8")
        os.chmod(Path(cwd) / "cache", 0o555)
        return "ok"

    tree_runner(scripted(agent), layout="root", workdir=tmp_path)(TREE, TASK)
    assert list(tmp_path.iterdir()) == []


def test_evolve_removes_the_idle_workspaces_of_its_tree_runner_when_it_returns(tmp_path):
    """A notebook running evolve again and again kept up to 32 staged copies of the artifact a run
    in the temp folder, until the process ended."""
    from agentdescent import FileTree, evolve

    def answers(prompt, cwd):
        return "yes" if "be brief" in Path(cwd, "SKILL.md").read_text(encoding="utf-8") else "no"

    run = tree_runner(scripted(answers), layout="root", workdir=tmp_path)
    tasks = [Task(id=f"t{i}", prompt=f"p{i}", gold="yes") for i in range(8)]
    result = evolve(tasks, lambda task, output: float(output == task.gold), run=run, propose=lambda *args: None,
                    strategy=FileTree(TREE), rounds=1, n_workers=2)
    assert result.usage.rollouts > 0 and list(tmp_path.iterdir()) == []
    assert run(TREE, TASK) == "yes"  # the runner stays usable


def test_a_folder_chain_an_agent_made_a_thousand_deep_is_walked_and_removed(tmp_path):
    def agent(prompt, cwd):
        deep = Path(cwd)
        for _ in range(1_000):  # a level at a time: os.makedirs recurses
            deep = deep / "a"
            deep.mkdir()
        (deep / "x.md").write_text("deep\n", encoding="utf-8")
        return "ok"

    output = tree_runner(scripted(agent), layout="root", workdir=tmp_path)(TREE, TASK)
    assert output.files == {"/".join(["a"] * 1_000 + ["x.md"]): "deep\n"}
    assert list(tmp_path.iterdir()) == []


def test_a_copy_sent_to_another_process_works_alone_and_its_idle_workspaces_go_with_it(tmp_path):
    """The process and Ray executors pickle the runner: its lock and pool of workspaces made that
    fail for every folder target; a copy gets a bound and a pool of its own, cleared as it goes."""
    run = tree_runner(scripted(looking), layout="claude_skill", name="router", workdir=tmp_path, max_workspaces=3)
    copy = pickle.loads(pickle.dumps(run))
    assert copy.max_workspaces == 3 and copy._idle is not run._idle
    assert ".claude/skills/router/SKILL.md" in copy(TREE, TASK)
    assert len(list(tmp_path.iterdir())) == 1  # kept clean for the copy's next rollout of this candidate
    del copy
    gc.collect()
    assert list(tmp_path.iterdir()) == []

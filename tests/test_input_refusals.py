"""Input no later step can take, refused where it is read with one line naming it and the fix:
text no UTF-8 file can hold (a lone surrogate, from a JSON or YAML escape), in a spec or a tasks
file; a NUL, which no command line passes, in a task; a prompt longer than a command-line
argument, for a CLI agent; a path no system can look up (a name too long, a symlink loop); an
empty PATH. Run through the real readers, the real `agentdescent` command and the MCP server."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agentdescent.artifacts.undo import restore
from agentdescent.dataloader import json_rows, jsonl_rows, tasks_from
from agentdescent.errors import UserError
from agentdescent.runs import read_spec
from agentdescent.runs.build import problems
from agentdescent.runs.spec_problems import SpecError
from agentdescent.runs.status import RunStatus
from agentdescent.runs.store import RunStore
from agentdescent.types import Task
from tests import keyword_domain as domain
from tests.test_cli_verbs import ROOT, agentdescent, spec_file
from tests.test_writeback import SKILL, make, snapshot
from tests.writeback_child import result_of

FIX = "write the character itself or remove it"


def test_a_lone_surrogate_in_a_tasks_file_names_the_file_the_line_and_the_column(tmp_path):
    lines = tmp_path / "tasks.jsonl"
    lines.write_text('{"prompt": "p1", "gold": "g"}\n\n{"prompt": "\\ud800", "gold": "g"}\n', encoding="utf-8")
    with pytest.raises(UserError) as caught:
        jsonl_rows(lines)
    assert f"{lines}: line 3: column 'prompt' holds a lone surrogate" in str(caught.value) and FIX in str(caught.value)
    whole = tmp_path / "tasks.json"
    whole.write_text('{"rows": [{"prompt": "p"}, {"prompt": "p", "\\udc80": 1}]}', encoding="utf-8")
    with pytest.raises(UserError, match=r"tasks\.json: item 1: a column name holds a lone surrogate"):
        json_rows(whole)
    paired = tmp_path / "paired.jsonl"  # a pair is one character, which UTF-8 spells
    paired.write_text('{"prompt": "\\ud83d\\ude00"}\n', encoding="utf-8")
    assert jsonl_rows(paired) == [{"prompt": "\U0001f600"}]


def test_rows_from_elsewhere_holding_a_lone_surrogate_are_no_tasks():
    with pytest.raises(UserError) as caught:
        tasks_from([{"p": "a", "g": "b"}, {"p": "a", "g": "b\ud800"}], prompt="p", gold="g")
    assert "row 2: the gold holds a lone surrogate" in str(caught.value) and FIX in str(caught.value)


@pytest.mark.parametrize("text, field", [
    ('target: p.md\ntasks: t.jsonl\nagent: host\nprompt: "{task}\\ud800"\n', "prompt"),
    ('target: p.md\ntasks: {file: t.jsonl, "\\udc80": 1}\nagent: host\n', "tasks"),
])
def test_a_lone_surrogate_in_a_spec_names_its_field(tmp_path, text, field):
    path = tmp_path / "run.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        read_spec(path)
    [problem] = caught.value.problems
    assert problem.field == field and "lone surrogate" in problem.message and FIX in problem.message
    top = tmp_path / "run.json"
    top.write_text('{"target": "p.md", "tasks": "t.jsonl", "agent": "host", "\\ud800": 1}', encoding="utf-8")
    with pytest.raises(SpecError) as caught:
        read_spec(top)
    assert caught.value.problems[0].field == "spec" and "a key of it holds a lone surrogate" in str(caught.value)


def test_plan_and_evolve_refuse_a_lone_surrogate_and_leave_no_run_folder(tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in domain.tasks()) + '{"prompt": "\\ud800", "gold": "k0"}\n',
                     encoding="utf-8")
    done = agentdescent("plan", spec_file(tmp_path, tasks=str(tasks)))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "line 25: column 'prompt' holds a lone surrogate" in done.stderr
    spec = Path(spec_file(tmp_path))
    spec.write_text(spec.read_text(encoding="utf-8").replace('"n_workers"', '"prompt": "{task}\\ud800", "n_workers"'),
                    encoding="utf-8")
    done = agentdescent("evolve", str(spec), env={"AGENTDESCENT_HOME": str(tmp_path / "home")})
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "prompt: holds a lone surrogate" in done.stderr and FIX in done.stderr
    runs = Path(tmp_path / "home" / "runs")
    assert not runs.exists() or list(runs.iterdir()) == []


def test_a_run_folder_whose_files_cannot_be_written_is_taken_away(tmp_path):
    spec = read_spec(domain.spec(tmp_path))
    store = RunStore(tmp_path / "runs")
    with pytest.raises(Exception, match="surrogates not allowed"):  # a task no tasks_from made: the store's own care
        store.create(spec, [Task(id="t", prompt="\ud800")], "text", RunStatus())
    assert list((tmp_path / "runs").iterdir()) == []


LONG = "x" * 256  # one name over the 255 bytes a name of a path may have


@pytest.mark.parametrize("verb", [["init", LONG], ["report", LONG], ["plan", "long.yaml"]])
def test_a_name_too_long_is_one_line_naming_the_path_not_a_traceback(tmp_path, verb):
    (tmp_path / "long.yaml").write_text(f"target: {LONG}\ntasks: t.jsonl\nagent: host\n", encoding="utf-8")
    done = agentdescent(*[str(tmp_path / arg) if arg == "long.yaml" else arg for arg in verb])
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert "is too long for the system" in done.stderr and "give a shorter path" in done.stderr
    assert "xxxxxxxxxx...xxxxxxxxxx" in done.stderr  # the path named, cut to a line


def test_a_long_codex_home_and_a_symlink_loop_are_named_with_their_fix(tmp_path):
    done = agentdescent("install", "codex", "--without-cli", env={"CODEX_HOME": str(tmp_path / LONG),
                                                                   "HOME": str(tmp_path)})
    assert done.returncode == 2 and "Traceback" not in done.stderr and "give a shorter path" in done.stderr
    (tmp_path / "loop").symlink_to("loop")
    done = agentdescent("restore", str(tmp_path / "loop" / "x"))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot follow the path '{tmp_path / 'loop' / 'x'}'" in done.stderr and "symlink" in done.stderr


def test_the_mcp_server_answers_a_path_too_long_as_a_tool_error(tmp_path, monkeypatch):
    import anyio
    import mcp
    from agentdescent_mcp.server import server

    monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / LONG))

    async def main() -> None:
        async with mcp.Client(server, mode="legacy") as client:
            result = await client.call_tool("runs", {})
            assert result.is_error and "is too long for the system" in result.content[0].text
            result = await client.call_tool("plan", {"spec": {"target": str(tmp_path / LONG), "tasks": "t.jsonl",
                                                              "agent": "host"}})
            assert result.is_error and "target: the path" in result.content[0].text

    anyio.run(main)


def test_restore_refuses_an_empty_path_and_takes_dot_for_the_current_folder(tmp_path):
    folder = make(tmp_path / "skill", SKILL)
    before = snapshot(folder)
    result_of({"SKILL.md": "evolved\n"}, SKILL).write_to(folder)
    env = {"PATH": "/usr/bin:/bin", "TMPDIR": tempfile.gettempdir(), "AGENTDESCENT_HOME": os.environ["AGENTDESCENT_HOME"],
           "PYTHONPATH": str(ROOT)}  # the code under test, from outside its folder

    def restore_from_inside(path: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "agentdescent", "restore", path], cwd=folder, capture_output=True,
                              text=True, timeout=60, env=env)

    done = restore_from_inside("")  # restore "$TARGET" with TARGET unset
    assert done.returncode == 2 and "PATH is empty (a shell variable that is not set?)" in done.stderr, done.stderr
    assert (folder / "SKILL.md").read_text(encoding="utf-8") == "evolved\n"
    with pytest.raises(UserError, match="the path is empty"):
        restore("")
    done = restore_from_inside(".")
    assert done.returncode == 0, done.stderr
    assert snapshot(folder) == before


@pytest.mark.parametrize("frozen", [[], ["hooks/*"]])
def test_plan_refuses_an_exclude_that_leaves_out_every_file(tmp_path, frozen):
    folder = make(tmp_path / "skill", SKILL)
    spec = spec_file(tmp_path, target=str(folder), exclude=["*"], frozen=frozen)
    done = agentdescent("plan", spec)
    assert done.returncode == 2, done.stdout
    assert f"exclude: it leaves out every file of {folder} (['*']), so a run would have nothing to evolve" in done.stderr
    assert "frozen" not in done.stderr  # what follows from it is not told as a problem of its own
    assert agentdescent("plan", spec_file(tmp_path, target=str(folder), exclude=["refs/*"], frozen=frozen)).returncode == 0
    (tmp_path / "empty").mkdir()  # a folder with no file to leave out: a run may write its first files
    assert agentdescent("plan", spec_file(tmp_path, target=str(tmp_path / "empty"), exclude=["*"])).returncode == 0


@pytest.mark.parametrize("verb", ["status", "show", "accept"])
def test_a_run_argument_is_echoed_bounded(verb):
    done = agentdescent(verb, "x" * 5000)
    assert done.returncode == 2 and done.stderr.startswith("error: no run «xxxx"), done.stderr
    assert "...»" in done.stderr and len(done.stderr) < 400
    said = agentdescent(verb, "line one\nline two").stderr
    assert "no run «line one line two»" in said and len(said.splitlines()) == 1


def test_a_nul_in_a_task_is_refused_where_the_tasks_load_naming_the_row_and_the_column(tmp_path):
    with pytest.raises(UserError) as caught:
        tasks_from([{"q": "a", "a": "1"}, {"q": "b\0", "a": "2"}], prompt="q", gold="a")
    said = str(caught.value)
    assert "row 2: the prompt (column «q») holds a NUL character" in said and "remove it from the file" in said
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in domain.tasks()[:-1]) + '{"id": "x", "prompt": "p", "gold": "k\\u0000"}\n',
                     encoding="utf-8")
    done = agentdescent("plan", spec_file(tmp_path, tasks=str(tasks), agent="claude_code"))
    assert done.returncode == 2 and "row 24: the gold (column «gold») holds a NUL character" in done.stderr, done.stderr


def test_tasks_larger_as_a_run_keeps_them_than_its_files_may_hold_are_refused_by_plan(tmp_path, monkeypatch):
    """A control character is one byte in a CSV file and six in the run's tasks.jsonl: plan says
    so, and no run is stored that would read back as damaged."""
    from agentdescent.runs import store as store_module

    monkeypatch.setattr(store_module, "DATA_BYTES", 50_000)
    rows = [{**row, "prompt": row["prompt"] + "\x01" * 400} for row in domain.tasks()]
    csv_file = tmp_path / "tasks.csv"
    csv_file.write_text("id,prompt,gold\n" + "".join(f"{r['id']},{r['prompt']},{r['gold']}\n" for r in rows),
                        encoding="utf-8")
    assert csv_file.stat().st_size < 50_000
    spec = read_spec(domain.spec(tmp_path, tasks={"file": str(csv_file), "id": "id"}), base=tmp_path)
    [said] = [p.message for p in problems(spec) if p.field == "tasks.file"]
    assert said.startswith("the 24 tasks come to ") and "over the 50,000 a run's file may hold" in said
    with pytest.raises(UserError, match="over the 50,000 a run's file may hold"):
        RunStore(tmp_path / "runs").create(spec, tasks_from(rows, prompt="prompt", gold="gold", id="id"), "x",
                                           RunStatus(state="starting", target=spec.target))
    assert list((tmp_path / "runs").iterdir()) == []

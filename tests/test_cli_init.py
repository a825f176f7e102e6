"""`agentdescent init TARGET [TASKS]`, run as a real subprocess: a first spec written beside the
target (its tasks' columns told apart, the agent chosen from what the machine has) that `plan`
takes as it is; an existing spec kept unless --force; `plan` on a folder pointing at `init`; and
the shipped example spec planned from another folder than the repository's."""

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

from agentdescent.artifacts.workspace import skill_name
from agentdescent.runs.spec import read_spec
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]
SKILL, TASKS = ROOT / "examples/skills/support-router", ROOT / "examples/specs/support-router-tasks.jsonl"
FAKE_CLIS = ROOT / "tests/fake_clis"


def agentdescent(*args: str, cwd: Path, path: str = "/usr/bin:/bin", **env: str) -> subprocess.CompletedProcess:
    """This checkout's command in `cwd`, with a PATH of `path` and no provider key unless `env` sets one."""
    return subprocess.run([sys.executable, "-m", "agentdescent", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=120, env={"PATH": path, "COLUMNS": "200", "TMPDIR": tempfile.gettempdir(),
                                            "AGENTDESCENT_HOME": os.environ["AGENTDESCENT_HOME"],
                                            "PYTHONPATH": str(ROOT), **env})


def a_skill_and_its_tasks(folder: Path) -> None:
    shutil.copytree(SKILL, folder / "my-skill")
    shutil.copy(TASKS, folder / "tasks.jsonl")


def test_init_writes_a_spec_that_plan_takes_as_it_is(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    done = agentdescent("init", "my-skill", "tasks.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = tmp_path / "my-skill.agentdescent.yaml"
    assert "wrote my-skill.agentdescent.yaml: a run spec for my-skill" in done.stdout
    assert "prompt from column 'request', gold from column 'team', id from column 'id'" in done.stdout
    assert "agent and reflector: host (no agent CLI is on PATH and no model key is set" in done.stdout
    assert done.stdout.rstrip().endswith("next: agentdescent plan my-skill.agentdescent.yaml checks it and quotes the run")
    text = written.read_text(encoding="utf-8")
    assert "# Columns of the tasks file: \"id\", \"request\", \"team\"" in text  # commented for the reader
    spec = read_spec(written)
    assert (spec.tasks.file, spec.tasks.prompt, spec.tasks.gold, spec.tasks.id) == (str(tmp_path / "tasks.jsonl"),
                                                                                  "request", "team", "id")
    assert spec.target == str(tmp_path / "my-skill") and spec.agent.kind == "host" and spec.frozen == ["hooks/*"]
    assert spec.prompt == "Use the support-router skill.\n\n{task}"  # the name SKILL.md gives, as a host knows it
    planned = agentdescent("plan", "my-skill.agentdescent.yaml", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert "tasks: 84 (59 train, 25 held out)" in planned.stdout and "agent: host" in planned.stdout


@pytest.mark.parametrize("head", [
    "# Support router\n",  # no front matter
    "---\ndescription: routes\n---\n",  # no name in it
    "---\nname: Support Router; rm -rf ~\n---\n",  # not a name a host takes
    "---\nname: ../../etc\n---\n",  # nor a path
    "---\ndescription: x\n---\nname: elsewhere\n",  # a name past the front matter
    None,  # no SKILL.md
])
def test_a_skill_whose_file_gives_no_valid_name_is_named_by_its_folder(head):
    assert skill_name(head, "my-skill") == "my-skill"
    assert skill_name("---\ndescription: routes\nname: 'support-router'\n---\n", "my-skill") == "support-router"
    assert skill_name("\ufeff---\r\nname: support-router\r\n---\r\n", "my-skill") == "support-router"  # BOM, CRLF


def test_a_skill_in_a_folder_named_otherwise_is_rolled_out_under_its_own_name(service, tmp_path):
    a_skill_and_its_tasks(tmp_path)  # my-skill/SKILL.md names itself support-router, where the agent looks
    spec = {"target": str(tmp_path / "my-skill"), "tasks": {"file": str(tmp_path / "tasks.jsonl"), "prompt": "request",
                                                            "gold": "team"},
            "scorer": "exact", "agent": "python:agentdescent.testing:route_by_skill",
            "reflector": "python:agentdescent.testing:SkillReflector", "n_workers": 1, "rounds": 1}
    done = wait(service, service.start(spec).run_id)
    assert done.state == "finished" and done.error is None and done.initial_reward is not None, done


def test_init_gives_a_small_task_set_the_workers_it_can_feed(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    rows = (tmp_path / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    (tmp_path / "tasks.jsonl").write_text("\n".join(rows[:12]) + "\n", encoding="utf-8")
    assert agentdescent("init", "my-skill", "tasks.jsonl", cwd=tmp_path).returncode == 0
    spec = read_spec(tmp_path / "my-skill.agentdescent.yaml")
    assert spec.n_workers == 2  # 12 tasks: 4 held out, 8 train, a minibatch of 4 for each of 2 workers
    planned = agentdescent("plan", "my-skill.agentdescent.yaml", cwd=tmp_path)
    assert planned.returncode == 0 and "train tasks" not in planned.stdout + planned.stderr, planned.stdout


def test_init_holds_out_of_a_large_file_as_many_tasks_as_measure_a_version_and_says_so(tmp_path):
    """The default share of 2,000 rows would hold out 600, and measuring them at the start and the
    end would be most of the run's calls."""
    a_skill_and_its_tasks(tmp_path)
    rows = [json.loads(line) for line in TASKS.read_text(encoding="utf-8").splitlines()]
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps({**rows[i % len(rows)], "id": f"r{i}"}) + "\n"
                                                  for i in range(2000)), encoding="utf-8")
    done = agentdescent("init", "my-skill", "tasks.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert ("held out: 200 of the 2,000 tasks (held_out_frac: 0.1; the default 0.3 would hold out 600): enough to "
            "tell a gain of 0.1 from chance") in " ".join(done.stdout.split()), done.stdout
    spec = read_spec(tmp_path / "my-skill.agentdescent.yaml")
    assert spec.held_out_frac == 0.1 and spec.budget.max_calls == 1500  # twice the low end, 744
    planned = agentdescent("plan", "my-skill.agentdescent.yaml", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    assert "tasks: 2000 (1800 train, 200 held out)" in planned.stdout and "warning: the held-out measurement" not in planned.stdout


def test_init_keeps_an_existing_spec_unless_forced(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    written = tmp_path / "my-skill.agentdescent.yaml"
    written.write_text("# mine\n", encoding="utf-8")
    done = agentdescent("init", "my-skill", "tasks.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "error: my-skill.agentdescent.yaml already exists; plan it (agentdescent plan my-skill.agentdescent.yaml), " \
           "or write it again with agentdescent init my-skill tasks.jsonl --force" in done.stderr
    assert written.read_text(encoding="utf-8") == "# mine\n"
    assert agentdescent("init", "my-skill", "tasks.jsonl", "--force", cwd=tmp_path).returncode == 0
    assert read_spec(written).tasks.prompt == "request"


def test_init_chooses_the_agent_from_what_the_machine_has(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    on_path = agentdescent("init", "my-skill", "tasks.jsonl", cwd=tmp_path, path=f"{FAKE_CLIS}:/usr/bin:/bin")
    assert "agent and reflector: claude_code (the claude CLI is on PATH)" in on_path.stdout, on_path.stderr
    keyed = agentdescent("init", "my-skill", "tasks.jsonl", "--force", cwd=tmp_path, ANTHROPIC_API_KEY="sk-ant-test-only")
    assert "agent and reflector: claude:claude-sonnet-4-5 (ANTHROPIC_API_KEY is set)" in keyed.stdout, keyed.stderr
    spec = yaml.safe_load((tmp_path / "my-skill.agentdescent.yaml").read_text(encoding="utf-8"))
    assert spec["agent"] == spec["reflector"] == "claude:claude-sonnet-4-5"


def test_init_drafts_the_model_agentdescent_model_names_and_warns_of_a_guess_for_another_server(tmp_path):
    """The dataset quickstart exports AGENTDESCENT_MODEL as the model the user's server knows; a
    server that serves only that model answers 404 to the name init would guess otherwise."""
    a_skill_and_its_tasks(tmp_path)
    local = {"OPENAI_API_KEY": "sk-local", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    named = agentdescent("init", "my-skill", "tasks.jsonl", cwd=tmp_path, AGENTDESCENT_MODEL="my-local-model", **local)
    assert named.returncode == 0, named.stderr
    assert ("agent and reflector: openai:my-local-model (OPENAI_API_KEY is set and AGENTDESCENT_MODEL names the model)"
            in named.stdout and "warning" not in named.stdout), named.stdout
    spec = read_spec(tmp_path / "my-skill.agentdescent.yaml")
    assert spec.agent.label == spec.reflector_spec.label == "openai:my-local-model"
    guessed = agentdescent("init", "my-skill", "tasks.jsonl", "--force", cwd=tmp_path, **local)
    assert ("warning: the model name gpt-4o-mini is a guess: OPENAI_BASE_URL points at another server than "
            "api.openai.com, which may not serve it; write the model your server serves in agent: and reflector: "
            "(openai:MODEL), or export AGENTDESCENT_MODEL=MODEL and init again with --force") in " ".join(guessed.stdout.split())
    assert "127.0.0.1" not in guessed.stdout  # a base URL may carry what is not for the screen
    openai = agentdescent("init", "my-skill", "tasks.jsonl", "--force", cwd=tmp_path, OPENAI_API_KEY="sk-test",
                          OPENAI_BASE_URL="https://API.openai.com/v1")
    assert "openai:gpt-4o-mini (OPENAI_API_KEY is set)" in openai.stdout and "warning" not in openai.stdout, openai.stdout
    claude = agentdescent("init", "my-skill", "tasks.jsonl", "--force", cwd=tmp_path, ANTHROPIC_API_KEY="sk-ant-test-only",
                          AGENTDESCENT_MODEL="claude-opus-4-1")
    assert "agent and reflector: claude:claude-opus-4-1" in claude.stdout, claude.stdout


def test_plan_of_a_host_spec_names_the_cheaper_agent_this_machine_has(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    agentdescent("init", "my-skill", "tasks.jsonl", cwd=tmp_path)  # no CLI, no key: host, and no warning
    alone = agentdescent("plan", "my-skill.agentdescent.yaml", cwd=tmp_path)
    assert alone.returncode == 0 and "costs this conversation's requests" not in alone.stdout, alone.stdout
    found = agentdescent("plan", "my-skill.agentdescent.yaml", cwd=tmp_path, path=f"{FAKE_CLIS}:/usr/bin:/bin")
    assert found.returncode == 0, found.stderr
    said = " ".join(found.stdout.split())
    assert ("the host is to do the rollouts and reflections, which costs this conversation's requests and context, but "
            "the claude CLI is on PATH: agent: claude_code and reflector: claude_code cost none of them") in said, said


def test_init_on_a_plugin_gives_its_rollouts_an_agent_plan_takes(tmp_path):
    """A plugin's rollouts load it into Claude Code: init wrote codex (or a key's model) for them,
    which plan then refused."""
    shutil.copytree(ROOT / "plugins" / "claude-code", tmp_path / "my-plugin")
    shutil.copy(TASKS, tmp_path / "tasks.jsonl")
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "codex").symlink_to(FAKE_CLIS / "codex")
    for path, said in ((f"{tmp_path / 'bin'}:/usr/bin:/bin", "agent: host, reflector: codex (the codex CLI is on "
                        "PATH; a plugin's rollouts load it into Claude Code, so host does them)"),
                       (f"{FAKE_CLIS}:/usr/bin:/bin", "agent and reflector: claude_code (the claude CLI is on PATH)")):
        done = agentdescent("init", "my-plugin", "tasks.jsonl", "--force", cwd=tmp_path, path=path)
        assert said in done.stdout, done.stdout + done.stderr
        planned = agentdescent("plan", "my-plugin.agentdescent.yaml", cwd=tmp_path, path=path)
        assert planned.returncode == 0, planned.stderr
        assert "costs this conversation's requests" not in planned.stdout  # the host's rollouts have no other way


def a_project(folder: Path) -> Path:
    """A repository's root as people keep one: its AGENTS.md and CLAUDE.md, one more in a sub-folder, some code."""
    project = folder / "project"
    (project / "src" / "api").mkdir(parents=True)
    (project / "AGENTS.md").write_text("# Agents\n\nAPI handlers live in src/api.\n", encoding="utf-8")
    (project / "CLAUDE.md").write_text("@AGENTS.md\n", encoding="utf-8")
    (project / "src" / "api" / "AGENTS.md").write_text("Handlers return JSON.\n", encoding="utf-8")
    (project / "src" / "api" / "app.py").write_text("def handler():\n    return {}\n", encoding="utf-8")
    shutil.copy(TASKS, folder / "tasks.jsonl")
    return project


def test_init_of_a_project_lays_it_at_each_rollouts_root_where_its_agent_reads_its_instructions(tmp_path):
    """A folder with AGENTS.md or CLAUDE.md at its top was laid under .claude/agents/ (the default for
    subagent definitions), where Claude Code took its files for subagents and Codex read none of them."""
    a_project(tmp_path)
    done = agentdescent("init", "project", "tasks.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "project.agentdescent.yaml").read_text(encoding="utf-8")
    assert "layout: root   # AGENTS.md and CLAUDE.md at its top: a project" in text
    assert read_spec(tmp_path / "project.agentdescent.yaml").layout == "root"
    planned = agentdescent("plan", "project.agentdescent.yaml", cwd=tmp_path)
    assert planned.returncode == 0 and "layout" not in planned.stdout, planned.stdout + planned.stderr
    (tmp_path / "agents").mkdir()  # a folder of subagent definitions keeps its layout
    (tmp_path / "agents" / "reviewer.md").write_text("---\nname: reviewer\ndescription: Reviews.\n---\nReview.\n",
                                                    encoding="utf-8")
    assert agentdescent("init", "agents", "tasks.jsonl", cwd=tmp_path).returncode == 0
    assert read_spec(tmp_path / "agents.agentdescent.yaml").layout is None


def test_plan_of_a_project_without_a_layout_says_where_its_rollouts_would_lay_it_and_the_fix(service, tmp_path):
    project = a_project(tmp_path)
    spec = {"target": str(project), "tasks": {"file": str(tmp_path / "tasks.jsonl"), "prompt": "request", "gold": "team"},
            "agent": "host"}
    [said] = [w for w in service.plan(spec).warnings if ".claude/agents/" in w]
    assert said.startswith("the folder holds AGENTS.md and CLAUDE.md at its top, as a project does, yet each rollout")
    assert "set layout: root" in said
    assert not [w for w in service.plan({**spec, "layout": "root"}).warnings if ".claude/agents/" in w]
    (project / "CLAUDE.md").unlink()
    (project / "AGENTS.md").unlink()  # sub-folders' AGENTS.md alone: a folder, not a project's top
    assert not [w for w in service.plan(spec).warnings if ".claude/agents/" in w]


def test_init_refuses_a_text_target_the_run_could_not_read_before_writing_its_spec(tmp_path):
    """A prompt saved as UTF-16 (as Windows editors do) got a spec, which plan then refused."""
    (tmp_path / "system.txt").write_bytes("You are a release assistant.\n".encode("utf-16"))
    shutil.copy(TASKS, tmp_path / "tasks.jsonl")
    done = agentdescent("init", "system.txt", "tasks.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and "UTF-16 (it starts with the byte-order mark FF FE); save it as UTF-8" in done.stderr, done.stderr
    assert not (tmp_path / "system.txt.agentdescent.yaml").exists()


def test_init_without_tasks_names_the_file_to_write(tmp_path):
    (tmp_path / "prompt.md").write_text("Answer briefly.\n", encoding="utf-8")
    done = agentdescent("init", "prompt.md", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "tasks: none given; the spec names a file for you to write" in done.stdout
    assert f"next: write the tasks in {tmp_path / 'prompt.md.tasks.jsonl'}" in done.stdout
    spec = yaml.safe_load((tmp_path / "prompt.md.agentdescent.yaml").read_text(encoding="utf-8"))
    assert spec["tasks"] == {"file": "prompt.md.tasks.jsonl"} and spec["prompt"] == "{task}"


def test_init_refuses_a_missing_target_and_help_shows_an_example(tmp_path):
    done = agentdescent("init", "nowhere", cwd=tmp_path)
    assert done.returncode == 2 and "error: nowhere does not exist; give the folder or the text file to improve" in done.stderr
    helped = agentdescent("init", "--help", cwd=tmp_path)
    assert "agentdescent init my-skill tasks.jsonl" in helped.stdout and "--force" in helped.stdout


def test_init_writes_beside_the_folder_it_is_run_in_and_refuses_what_plan_would(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    done = agentdescent("init", ".", "../tasks.jsonl", cwd=tmp_path / "my-skill")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "my-skill.agentdescent.yaml").is_file() and not list((tmp_path / "my-skill").glob("*.yaml"))
    assert read_spec(tmp_path / "my-skill.agentdescent.yaml").target == str(tmp_path / "my-skill")
    rooted = agentdescent("init", "/", cwd=tmp_path)
    assert rooted.returncode == 2 and "/ is the root folder" in rooted.stderr and not Path("/.agentdescent.yaml").exists()


def test_init_of_a_folder_holding_its_tasks_keeps_them_out_of_the_rollouts_and_names_it_by_its_folder(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    shutil.move(tmp_path / "tasks.jsonl", tmp_path / "my-skill" / "tasks.jsonl")
    done = agentdescent("init", ".", "tasks.jsonl", cwd=tmp_path / "my-skill")
    assert done.returncode == 0 and f"a run spec for {tmp_path / 'my-skill'};" in done.stdout, done.stderr
    text = (tmp_path / "my-skill.agentdescent.yaml").read_text(encoding="utf-8")
    assert text.startswith('# A run spec for "my-skill"') and 'exclude: ["tasks.jsonl"]' in text
    planned = agentdescent("plan", "my-skill.agentdescent.yaml", "--json", cwd=tmp_path)
    assert planned.returncode == 0, planned.stderr
    shipped = sum(1 for path in (tmp_path / "my-skill").rglob("*") if path.is_file())
    assert json.loads(planned.stdout)["files"] == shipped - 1  # not one the rollouts see, nor one the run may change
    (tmp_path / "other.agentdescent.yaml").mkdir()
    (tmp_path / "other").mkdir()
    for flags in ((), ("--force",)):
        refused = agentdescent("init", "other", *flags, cwd=tmp_path)
        assert refused.returncode == 2 and "where the spec of other goes, is a folder" in refused.stderr
        assert "Traceback" not in refused.stderr


def test_init_warns_of_too_few_rows_and_of_no_gold_column(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    (tmp_path / "two.csv").write_text("id;request\nr1;my invoice\nr2;a bug\n", encoding="utf-8")
    done = agentdescent("init", "my-skill", "two.csv", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "warning: two.csv holds 2 row(s): a run needs at least 6 (some held out, enough left" in done.stdout
    assert "warning: no column of the tasks reads as the expected answer (gold)" in done.stdout


@pytest.mark.parametrize("rows", [8, 12])
def test_init_warns_of_too_few_held_out_tasks_exactly_where_plan_does(tmp_path, rows):
    """12 rows hold out the 4 the held-out reward needs at the default held_out_frac; 8 hold out 2."""
    a_skill_and_its_tasks(tmp_path)
    lines = (tmp_path / "tasks.jsonl").read_text(encoding="utf-8").splitlines()
    (tmp_path / "tasks.jsonl").write_text("\n".join(lines[:rows]) + "\n", encoding="utf-8")
    drafted = agentdescent("init", "my-skill", "tasks.jsonl", cwd=tmp_path)
    planned = agentdescent("plan", "my-skill.agentdescent.yaml", cwd=tmp_path)
    assert drafted.returncode == planned.returncode == 0, drafted.stderr + planned.stderr
    coarse = ("the held-out reward moves in steps of 0.5, too coarse to tell a better version from luck; give 12 or more "
              "tasks (held_out_frac=0.3 holds out 4 of 12)")
    said, quoted = " ".join(drafted.stdout.split()), " ".join(planned.stdout.split())
    if rows == 8:
        assert f"warning: tasks.jsonl holds 8 rows, of which 2 are held out: {coarse}" in said, said
        assert f"warning: only 2 held-out tasks: {coarse}" in quoted, quoted
    else:
        assert "warning" not in said and "held-out tasks:" not in quoted, said + quoted


def test_init_reads_the_columns_of_the_first_rows_not_the_first_row_alone(tmp_path):
    """A first row lacking `team` (72 of 84 rows have it) drafted gold: null and warned that no
    column read as the answer."""
    a_skill_and_its_tasks(tmp_path)
    rows = [json.loads(line) for line in TASKS.read_text(encoding="utf-8").splitlines()]
    for row in rows[::7]:
        del row["team"]
    (tmp_path / "gaps.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    done = agentdescent("init", "my-skill", "gaps.jsonl", cwd=tmp_path)
    assert done.returncode == 0 and "gold from column 'team'" in done.stdout and "warning" not in done.stdout, done
    text = (tmp_path / "my-skill.agentdescent.yaml").read_text(encoding="utf-8")
    assert '# Columns of the tasks file: "id", "request", "team"' in text and 'gold: "team"' in text


def test_init_does_not_take_a_column_whose_values_repeat_as_the_id(tmp_path):
    """It drafted `id: id` without a word, and plan refused the spec it had written."""
    a_skill_and_its_tasks(tmp_path)
    rows = [json.loads(line) for line in TASKS.read_text(encoding="utf-8").splitlines()]
    rows[5]["id"] = rows[4]["id"]
    (tmp_path / "dup.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    done = agentdescent("init", "my-skill", "dup.jsonl", cwd=tmp_path)
    assert done.returncode == 0 and "gold from column 'team'; check them" in done.stdout, done
    assert "warning: the column «id» reads as the id, but «r004» is on rows 5 and 6 (counting rows from 1)" in done.stdout
    assert read_spec(tmp_path / "my-skill.agentdescent.yaml").tasks.id is None
    planned = agentdescent("plan", "my-skill.agentdescent.yaml", cwd=tmp_path)
    assert planned.returncode == 0 and "tasks: 84 (" in planned.stdout, planned.stderr


def test_init_refuses_a_target_whose_name_is_not_utf_8(tmp_path):
    """No spec can hold the name, and plan refused the lone surrogate init wrote for it."""
    a_skill_and_its_tasks(tmp_path)
    odd = os.fsdecode(b"sk\xff")
    (tmp_path / "my-skill").rename(tmp_path / odd)
    done = agentdescent("init", odd, "tasks.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and "error: the folder «sk\\udcff» holds a name that is not UTF-8 text" in done.stderr
    assert "rename the folder or file of that name to UTF-8 text, then init again" in done.stderr
    assert not list(tmp_path.glob("*.agentdescent.yaml"))


def test_init_names_a_column_with_braces_so_that_plan_reads_that_column(tmp_path):
    """Written as it is, `the {question}` read as a format string of a column `question`."""
    a_skill_and_its_tasks(tmp_path)
    rows = [{"the {question}": f"my invoice {i} is wrong", "team": "billing"} for i in range(12)]
    (tmp_path / "brace.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    done = agentdescent("init", "my-skill", "brace.jsonl", cwd=tmp_path)
    assert done.returncode == 0 and "prompt from column 'the {question}'" in done.stdout, done.stderr
    assert read_spec(tmp_path / "my-skill.agentdescent.yaml").tasks.prompt == "the {{question}}"
    planned = agentdescent("plan", "my-skill.agentdescent.yaml", cwd=tmp_path)
    assert planned.returncode == 0 and "tasks: 12 (" in planned.stdout, planned.stderr


def test_plan_on_a_tasks_file_says_to_write_a_spec_for_what_it_evolves(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    done = agentdescent("plan", "tasks.jsonl", cwd=tmp_path)
    assert done.returncode == 2 and "agentdescent init FOLDER_OR_FILE tasks.jsonl" in done.stderr


def test_plan_on_a_folder_says_to_write_a_spec_first(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    done = agentdescent("plan", "my-skill", cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert "write a spec first: agentdescent init my-skill [TASKS]" in done.stderr


def test_the_example_spec_plans_from_any_folder(tmp_path):
    """Its python: stand-ins are the package's (agentdescent.testing), not the repository's."""
    shutil.copytree(ROOT / "examples/specs", tmp_path / "examples/specs")
    shutil.copytree(SKILL, tmp_path / "my-skill")  # the spec's target: ../../my-skill
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = agentdescent("plan", str(tmp_path / "examples/specs/support-router.yaml"), cwd=elsewhere)
    assert done.returncode == 0, done.stderr
    assert "agent: python:agentdescent.testing:route_by_skill" in done.stdout


def test_init_does_not_read_a_skill_file_that_is_a_link_out_of_the_folder(tmp_path):
    a_skill_and_its_tasks(tmp_path)
    outside = tmp_path / "elsewhere.md"
    outside.write_text("---\nname: sk-live-4f9a8b7c6d5e\n---\n", encoding="utf-8")
    (tmp_path / "my-skill" / "SKILL.md").unlink()
    (tmp_path / "my-skill" / "SKILL.md").symlink_to(outside)
    done = agentdescent("init", "my-skill", "tasks.jsonl", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    written = (tmp_path / "my-skill.agentdescent.yaml").read_text(encoding="utf-8")
    assert "sk-live" not in written and "Use the my-skill skill." in written

"""What a folder target holds besides text files a run may change. Files that are not text (an
image, a template a skill ships) are carried as they are: `load_tree(binary=...)` collects them
rather than refusing the folder, `plan` names them, every rollout finds them in its workspace byte
for byte, and the write-back leaves them alone. Files a run cannot read (a symlink, a file past the
limits) are named at once, with the spec's way to leave them out (`exclude`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from agentdescent import load_tree
from agentdescent.errors import UserError
from agentdescent.runs.rolloutdir import ROLLOUTS_PREFIX
from agentdescent.runs.spec import SpecError
from agentdescent.testing import route_by_skill
from tests.runs_support import wait

ROOT = Path(__file__).resolve().parents[1]
LOGO = bytes(range(256)) * 4  # a NUL byte and bytes no UTF-8 text holds
LOGO_PATH = Path(".claude/skills/support-router/assets/logo.png")  # where a rollout's workspace has it


def sees_the_logo(prompt: str, cwd: str) -> str:
    """The support-router agent, which answers only where the skill's logo is there as shipped, and
    where no run's tasks lie in a folder above its workspace (an agent with a shell would read their
    gold answers)."""
    logo = Path(cwd, LOGO_PATH)
    if any((folder / "tasks.jsonl").exists() for folder in Path(cwd).parents):
        return "the run's tasks are within reach"
    return route_by_skill(prompt, cwd) if logo.is_file() and logo.read_bytes() == LOGO else "no logo"


def runs_its_script(prompt: str, cwd: str) -> str:
    """The support-router agent, which answers only where the skill's script runs as `./route.sh`
    would: staged with its execute bit, as in the folder."""
    script = Path(cwd, LOGO_PATH.parent.parent, "scripts", "route.sh")
    if not os.access(script, os.X_OK):
        raise PermissionError(f"{script}: Permission denied")
    return route_by_skill(prompt, cwd)


def spec_of(target: Path, **fields) -> dict:
    return {"target": str(target), "tasks": {"file": str(ROOT / "examples/specs/support-router-tasks.jsonl"),
                                             "prompt": "request", "gold": "team"},
            "scorer": "exact", "agent": "python:tests.test_folder_files:sees_the_logo",
            "reflector": "python:agentdescent.testing:SkillReflector", "n_workers": 2, "rounds": 2, **fields}


def a_skill_with_a_logo(folder: Path) -> Path:
    target = folder / "support-router"
    shutil.copytree(ROOT / "examples/skills/support-router", target)
    (target / "assets").mkdir()
    (target / "assets/logo.png").write_bytes(LOGO)
    return target


def test_load_tree_collects_what_is_not_text_and_counts_it_in_the_limits(tmp_path):
    target = a_skill_with_a_logo(tmp_path)
    (target / "latin1.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(UserError, match="it is binary"):
        load_tree(target)
    binary: dict[str, bytes] = {}
    tree = load_tree(target, binary=binary)
    assert binary == {"assets/logo.png": LOGO, "latin1.txt": "café".encode("latin-1")}
    assert "SKILL.md" in tree and not set(binary) & set(tree)
    with pytest.raises(UserError, match="max_total_bytes"):
        load_tree(target, binary={}, max_total_bytes=sum(len(t.encode()) for t in tree.values()) + 10)


def test_a_skill_with_a_binary_file_is_evolved_with_it_in_every_rollout_and_it_is_left_alone(service, tmp_path):
    target = a_skill_with_a_logo(tmp_path)
    spec = spec_of(target)
    assert service.plan(spec).carried == ["assets/logo.png"]
    run = service.start(spec).run_id
    done = wait(service, run)
    assert done.state == "finished" and done.outcomes.get("committed"), done  # the rollouts saw the logo
    assert not list(Path(tempfile.gettempdir()).glob(f"{ROLLOUTS_PREFIX}{run}-*"))  # its workspaces went with its process
    before = (target / "assets/logo.png").stat().st_mtime_ns
    written = service.accept(run)
    assert "assets/logo.png" not in written.written
    assert (target / "assets/logo.png").read_bytes() == LOGO
    assert (target / "assets/logo.png").stat().st_mtime_ns == before


def test_files_a_run_cannot_read_are_named_with_the_spec_s_way_to_leave_them_out(service, tmp_path):
    target = a_skill_with_a_logo(tmp_path)
    (target / "notes.md").symlink_to(ROOT / "README.md")
    (target / "data").mkdir()
    (target / "data/huge[1].md").write_text("x" * 1_000_001, encoding="utf-8")
    with pytest.raises(SpecError) as refused:
        service.plan(spec_of(target))
    [problem] = refused.value.problems
    assert problem.field == "target" and problem.message.startswith("cannot read 2 of its files: leave them out")
    assert '"notes.md": it is a symlink' in problem.message and "over max_file_bytes" in problem.message
    assert 'exclude: ["data/huge[[]1].md", "notes.md"] in the spec' in problem.message  # literal globs
    (target / "data/huge2.md").write_text("x" * 1_000_001, encoding="utf-8")
    with pytest.raises(SpecError) as refused:
        service.plan(spec_of(target))
    assert 'exclude: ["data/*", "notes.md"] in the spec' in refused.value.problems[0].message  # a folder of them
    plan = service.plan(spec_of(target, exclude=["data/*", "notes.md"]))
    assert plan.carried == ["assets/logo.png"] and plan.files == len(load_tree(ROOT / "examples/skills/support-router"))
    (target / "data/kept.md").write_text("a file the run reads\n", encoding="utf-8")
    with pytest.raises(SpecError) as refused:  # a folder with a file the run reads is not left out whole
        service.plan(spec_of(target))
    assert 'exclude: ["data/huge2.md", "data/huge[[]1].md", "notes.md"] in the spec' in refused.value.problems[0].message


def test_the_exclude_named_for_a_name_that_is_not_utf8_is_one_a_spec_can_hold(service, tmp_path):
    """A file named notes-\xe9t\xe9.md (Latin-1) was named with exclude: ["notes-\\udce9t\\udce9.md"], which
    the spec's check then refused as a lone surrogate."""
    target = a_skill_with_a_logo(tmp_path)
    with open(os.path.join(os.fsencode(target), b"notes-\xe9t\xe9.md"), "wb") as latin1:
        latin1.write(b"old notes\n")
    with pytest.raises(SpecError) as refused:
        service.plan(spec_of(target))
    [problem] = refused.value.problems
    assert 'leave it out of the run with exclude: ["notes-?t?.md"] in the spec' in problem.message
    assert service.plan(spec_of(target, exclude=["notes-?t?.md"])).carried == ["assets/logo.png"]


def test_a_folder_past_the_file_count_is_told_to_leave_out_its_bulk_never_its_core(service, tmp_path):
    target = a_skill_with_a_logo(tmp_path)
    (target / "zz-core.md").write_text("sorted last, past the cut\n", encoding="utf-8")
    (target / "cache").mkdir()
    for i in range(2_010):
        (target / f"cache/{i}.json").write_text("{}", encoding="utf-8")
    with pytest.raises(SpecError) as refused:
        service.plan(spec_of(target))
    [problem] = refused.value.problems
    assert problem.message == ('holds more than a run reads (max_files=2,000): leave out what the run does not need '
                               'with exclude: ["cache/*"] in the spec, then plan again')
    assert service.plan(spec_of(target, exclude=["cache/*"])).files == len(load_tree(target, exclude=["cache/*"], binary={}))


def test_a_plan_names_the_first_files_carried_and_counts_them_all(service, tmp_path):
    """A tool's answer stays under a page however many the folder holds."""
    target = a_skill_with_a_logo(tmp_path)
    for i in range(40):
        (target / "assets" / f"icon-{i:02d}.png").write_bytes(LOGO)
    plan = service.plan(spec_of(target))
    assert plan.carried_total == 41 and len(plan.carried) == 20 and plan.carried[0] == "assets/icon-00.png"


def test_a_folder_accept_could_not_back_up_is_refused_before_the_run_is_paid_for(service, tmp_path):
    """Leaving a named pipe out of the run passes the run's reading, not the backup accept takes."""
    target = a_skill_with_a_logo(tmp_path)
    os.mkfifo(target / "assets" / "pipe")
    with pytest.raises(SpecError, match="accept would not be able to write a result back: .*pipe \\(a named pipe\\)"):
        service.plan(spec_of(target, exclude=["assets/pipe"]))


@pytest.mark.parametrize(("agent", "layout"), [("codex", "agents_skill"), ("claude_code", "claude_skill"),
                                               ("host", "claude_skill")])
def test_a_skill_is_laid_out_where_its_agent_looks_for_skills(tmp_path, agent, layout):
    """Codex reads .agents/skills, Claude Code .claude/skills; a spec's layout: says otherwise."""
    from agentdescent.runs import build
    from agentdescent.runs.spec import read_spec

    target = a_skill_with_a_logo(tmp_path)
    spec = read_spec({**spec_of(target), "agent": agent, "reflector": "host"})
    tree = load_tree(target, binary={})
    assert build.assemble(spec, [], tree).layout == layout
    assert build.assemble(spec.model_copy(update={"layout": "root"}), [], tree).layout == "root"


def test_plan_refuses_a_tasks_file_inside_the_target_and_warns_of_an_editable_glob_matching_nothing(service, tmp_path):
    """The gold answers went into every rollout's workspace; `editable: [route/*]` with the files in
    routing/ refused every change, and the run spent its budget for nothing."""
    target = a_skill_with_a_logo(tmp_path)
    inside = target / "evals.jsonl"
    shutil.copy(ROOT / "examples/specs/support-router-tasks.jsonl", inside)
    spec = spec_of(target, tasks={"file": str(inside), "prompt": "request", "gold": "team"})
    with pytest.raises(SpecError) as refused:
        service.plan(spec)
    [problem] = refused.value.problems
    assert problem.field == "tasks.file" and "add 'evals.jsonl' to exclude" in problem.message
    assert service.plan({**spec, "exclude": ["evals.jsonl"]}).files == len(load_tree(ROOT / "examples/skills/support-router"))
    warned = service.plan(spec_of(target, editable=["route/*"])).warnings
    assert any(w.startswith("editable[0] 'route/*' matches no file of") for w in warned)


def test_what_the_run_did_not_read_no_change_may_write(tmp_path):
    """A change creating an excluded file, the logo, or a file where load_tree never reads
    committed, and accept then refused it as the user's own edit (or, told to overwrite, wrote over
    the user's file)."""
    from agentdescent.governance import Governance
    from agentdescent.runs import build
    from agentdescent.runs.spec import read_spec

    target = a_skill_with_a_logo(tmp_path)
    (target / "notes").mkdir()
    (target / "notes" / "private.md").write_text("mine\n", encoding="utf-8")
    spec = read_spec({**spec_of(target, exclude=["notes/*"]), "blast_radius": "skill"})
    assets: dict[str, bytes] = {}
    parts = build.assemble(spec, [], build.read_target(spec, assets), assets)
    rules = Governance.of(parts.strategy, parts.blast_radius)
    unread = ("notes/private.md", "assets/logo.png", "build/helper.py", "routing/node_modules/x.js", ".DS_Store")
    assert [rules.rule(key)[0] for key in unread] == ["L0"] * len(unread)
    # what load_tree reads, as it matches names (case and all; a `*` in a skipped name stays in it)
    read = ("SKILL.md", "routing/new.md", "Build/steps.md", "Notes/private.md", ".github/notes.tmp", "scripts/uv.lock")
    assert [key for key in read if rules.layer(key) == "L0"] == []
    for key in read:
        (target / key).parent.mkdir(parents=True, exist_ok=True)
        (target / key).write_text("x\n", encoding="utf-8")
    assert set(read) <= set(load_tree(target, exclude=["notes/*"], binary={}))


def test_plan_says_to_move_out_what_a_backup_cannot_copy_rather_than_to_exclude_it(service, tmp_path):
    """The first plan said to exclude a FIFO; the second then said excluding it was not enough."""
    target = a_skill_with_a_logo(tmp_path)
    os.mkfifo(target / "assets" / "pipe")
    with pytest.raises(SpecError) as refused:
        service.plan(spec_of(target))
    [problem] = refused.value.problems
    assert "move it out of" in problem.message and "exclude" not in problem.message.split("(")[0]


@pytest.mark.skipif(os.geteuid() == 0 and not shutil.which("setpriv"), reason="root reads every file without setpriv")
def test_plan_refuses_a_file_no_backup_can_read_even_when_excluded(tmp_path):
    """With the exclude plan suggested, the run was paid for and accept could not back the folder up."""
    target = a_skill_with_a_logo(tmp_path)
    draft = target / "references" / "draft.md"
    draft.parent.mkdir(exist_ok=True)
    draft.write_text("draft\n", encoding="utf-8")
    draft.chmod(0)
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps(spec_of(target, exclude=["references/draft.md"])), encoding="utf-8")
    as_a_user = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"] if os.geteuid() == 0 else []
    env = {**os.environ, "AGENTDESCENT_HOME": str(tmp_path / "home")}
    try:
        planned = subprocess.run([*as_a_user, sys.executable, "-m", "agentdescent", "plan", str(spec)], cwd=ROOT,
                                 env=env, capture_output=True, text=True, timeout=120)
    finally:
        draft.chmod(0o644)
    assert planned.returncode == 2, planned.stdout + planned.stderr
    assert "draft.md cannot be read, so a backup cannot copy it" in planned.stderr


def test_a_script_the_folder_holds_executable_runs_in_every_rollout_and_a_resumed_one(service, tmp_path):
    """Every rollout's workspace had written it 0644: `./scripts/route.sh` failed with Permission
    denied in each, though it ran once written back."""
    target = a_skill_with_a_logo(tmp_path)
    (target / "scripts").mkdir()
    (target / "scripts" / "route.sh").write_text("#!/bin/sh\necho route\n", encoding="utf-8")
    (target / "scripts" / "route.sh").chmod(0o755)
    spec = spec_of(target, agent="python:tests.test_folder_files:runs_its_script", target_reward=1.0)
    done = wait(service, service.start(spec).run_id)
    assert done.state == "finished" and done.outcomes.get("committed") and done.failures == 0, done
    from agentdescent.runs import build
    from agentdescent.runs.spec import read_spec

    stored = service.store.get(done.id)
    assert stored.executable() == {"scripts/route.sh"}  # a resumed run stages it so too
    assert build.assemble(read_spec(spec), [], load_tree(target, binary={}), stored.assets(), stored.executable()).executable


def test_a_text_file_saved_in_another_encoding_is_named_with_it_and_a_skill_md_is_refused(service, tmp_path):
    """Notepad's "Unicode" (UTF-16), UTF-32 and Latin-1 files are not text a run can change: plan
    says which encoding each is in and to save it as UTF-8, rather than carrying it unexplained."""
    target = a_skill_with_a_logo(tmp_path)
    (target / "notes.md").write_bytes("# Notes\nbe brief\n".encode("utf-16"))
    (target / "old.txt").write_bytes("café\n".encode("latin-1"))
    plan = service.plan(spec_of(target))
    [said] = [w for w in plan.warnings if "notes.md" in w]
    assert said.startswith("notes.md (UTF-16 (it starts with the byte-order mark FF FE)); old.txt (not valid UTF-8 "
                           "(byte 0xe9 at offset 3; Latin-1")
    assert "save them as UTF-8 for the run to change them" in said and "assets/logo.png" not in said
    (target / "SKILL.md").write_bytes((target / "SKILL.md").read_text(encoding="utf-8").encode("utf-32"))
    with pytest.raises(SpecError, match=r"its SKILL.md is UTF-32 \(it starts with the byte-order mark FF FE 00 00\), "
                                        r"and a skill's SKILL.md is the text a run changes: save it as UTF-8"):
        service.plan(spec_of(target))
    folder = tmp_path / "agents"
    folder.mkdir()
    (folder / "helper.md").write_bytes("Réponds.\n".encode("latin-1"))
    with pytest.raises(SpecError, match=r"none of its 1 files is UTF-8 text, so a run would have nothing to change: "
                                        r"helper.md \(not valid UTF-8"):
        service.plan(spec_of(folder))


@pytest.mark.parametrize("folder, suggested", [("my:skill", "my-skill"), ("con", "con-skill"), ("skill.", "skill")])
def test_plan_refuses_a_skill_folder_name_no_rollout_can_use_and_says_to_set_name(service, tmp_path, folder, suggested):
    """A folder named my:skill, its SKILL.md's name: not a valid one, passed plan; the run then
    failed as it started, with a message naming the Python `name=` argument."""
    target = tmp_path / folder
    shutil.copytree(ROOT / "examples/skills/support-router", target)
    skill = target / "SKILL.md"
    skill.write_text(skill.read_text(encoding="utf-8").replace("name: support-router", "name: Support_Router"),
                     encoding="utf-8")
    with pytest.raises(SpecError) as refused:
        service.plan(spec_of(target))
    [problem] = refused.value.problems
    assert problem.field == "name" and f"named {folder!r}" in problem.message and "name=" not in problem.message
    assert problem.message.endswith(f"set name: in the spec (lowercase letters, digits and hyphens), e.g. name: {suggested}")
    assert service.plan(spec_of(target, name=suggested)).target == str(target)


def test_a_glob_spelt_as_a_file_name_holding_a_bracket_is_told_how_to_name_it(service, tmp_path):
    """frozen: ["hooks/[pre].sh"] for a file named so was refused as matching no file, 'its files are
    ... hooks/[pre].sh', without a word on `[` or how to write it."""
    target = a_skill_with_a_logo(tmp_path)
    (target / "hooks" / "pre.sh").rename(target / "hooks" / "[pre].sh")
    how = "`[` starts a character class in a glob: to name the file hooks/[pre].sh, write 'hooks/[[]pre].sh'"
    with pytest.raises(SpecError) as refused:
        service.plan(spec_of(target, frozen=["hooks/[pre].sh"]))
    [problem] = refused.value.problems
    assert problem.field == "frozen[0]" and problem.message.endswith(f"matches no file of {target}; {how}")
    warned = service.plan(spec_of(target, frozen=["hooks/[[]pre].sh"], editable=["hooks/[pre].sh", "routing/*"])).warnings
    assert f"editable[0] 'hooks/[pre].sh' ({how}) matches no file of {target}: it lets a change add files there, and no more" \
        in warned


def test_many_editable_globs_that_match_no_file_yet_are_one_warning_that_fits_a_page(service, tmp_path):
    """Each was a warning of its own, the target's path in each: forty of them passed the page a
    host shows whole, cutting the plan's quote off its end."""
    target = a_skill_with_a_logo(tmp_path)
    places = [f"references/topic-{n:02d}/*.md" for n in range(40)]
    warned = [w for w in service.plan(spec_of(target, editable=["SKILL.md", *places])).warnings if "editable[" in w]
    assert warned == [f"editable[1] 'references/topic-00/*.md'; editable[2] 'references/topic-01/*.md'; editable[3] "
                      f"'references/topic-02/*.md'; editable[4] 'references/topic-03/*.md'; editable[5] "
                      f"'references/topic-04/*.md' and 35 more match no file of {target} (a typo?): each lets a change "
                      "add files there, and no more"]

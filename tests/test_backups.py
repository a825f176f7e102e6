"""Which `.<name>.bak-N` folders are backups: only those recorded in $AGENTDESCENT_HOME/backups,
with a journal that agrees and an intact copy. Planted, forged and altered folders are left
alone and named, whether reached by `restore` (the function and the command), a write-back, or
a run's `accept`; and the record itself (its file, its digest, where home is)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest

from agentdescent import UserError
from agentdescent.artifacts import backups, registry
from agentdescent.artifacts.undo import recover, restore
from agentdescent.artifacts.writeback import write_back
from tests import keyword_domain as domain
from tests.runs_support import wait
from tests.test_writeback import agentdescent, files_of, make, snapshot
from tests.writeback_child import result_of

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = ["../../../victim.txt", "../../../outside.txt"]


def plant(target: Path, number: int, *, phase="applying", paths=HOSTILE, content: dict | None = None) -> Path:
    """A `.<name>.bak-<number>` folder as a cloned repository could carry it: a copy of the target
    (or `content`) and a journal of our format saying what the attacker likes."""
    folder = target.parent / f".{target.name}.bak-{number}"
    copy = folder / target.name
    if target.is_dir():
        make(copy, content if content is not None else {k: v.decode() for k, v in files_of(target).items()})
    else:
        folder.mkdir()
        copy.write_text((content or {}).get("", target.read_text(encoding="utf-8")), encoding="utf-8")
    journal = {"format": 1, "made_by": "write_to", "phase": phase, "existed": True, "paths": paths}
    (folder / backups.JOURNAL).write_text(json.dumps(journal), encoding="utf-8")
    return folder


def sandbox(tmp_path: Path) -> tuple[Path, list[Path]]:
    """A skill three folders down, with a real backup (bak-1), and the files the hostile journal
    aims at: `../../../x` from the target and from a backup's copy."""
    skill = make(tmp_path / "a" / "b" / "my-skill", {"SKILL.md": "mine\n", "refs/a.md": "a\n"})
    result_of({"SKILL.md": "evolved\n", "refs/a.md": "a\n"}).write_to(skill)
    sentinels = [tmp_path / "victim.txt", tmp_path / "outside.txt", tmp_path / "a" / "victim.txt",
                 tmp_path / "a" / "outside.txt"]
    for path in sentinels:
        path.write_text(f"the user's own {path.name}\n", encoding="utf-8")
    return skill, sentinels


def outside(tmp_path: Path, target: Path) -> dict[str, object]:
    """Everything under `tmp_path` but the target and our own backups of it."""
    ours = {b.folder for b in backups.backups(target)}
    return {k: v for k, v in snapshot(tmp_path).items()
            if not any((tmp_path / k).is_relative_to(p) for p in (target, *ours))}


def test_restore_leaves_a_planted_hostile_backup_alone_and_restores_the_real_one(tmp_path):
    skill, _ = sandbox(tmp_path)
    planted = plant(skill, 7)
    before = outside(tmp_path, skill)
    done = restore(skill)
    assert outside(tmp_path, skill) == before  # the victim, the outside file and the planted folder as they were
    assert done.source == tmp_path / "a" / "b" / ".my-skill.bak-1" / "my-skill"
    assert files_of(skill) == {"SKILL.md": b"mine\n", "refs/a.md": b"a\n"}
    assert done.refused == (f".my-skill.bak-7 was not made by AgentDescent (no record in {registry.folder()}): "
                            "left alone",)
    assert planted.is_dir()


def test_the_restore_command_names_the_planted_folder_and_changes_nothing_outside(tmp_path):
    skill, _ = sandbox(tmp_path)
    plant(skill, 7)
    before = outside(tmp_path, skill)
    done = agentdescent("restore", str(skill))
    assert done.returncode == 0, done.stderr
    said = done.stdout.replace("\n", "")
    assert f"restored {skill} from {skill.parent / '.my-skill.bak-1' / 'my-skill'}" in said
    assert ".my-skill.bak-7 was not made by AgentDescent" in said and "left alone" in said
    assert outside(tmp_path, skill) == before and files_of(skill)["SKILL.md"] == b"mine\n"


def test_a_write_back_never_rolls_back_from_a_planted_journal(tmp_path):
    skill, _ = sandbox(tmp_path)
    plant(skill, 7)
    before = outside(tmp_path, skill)
    plan = result_of({"SKILL.md": "again\n", "refs/a.md": "a\n"}).write_to(skill)
    assert outside(tmp_path, skill) == before
    assert plan.written == ("SKILL.md",) and plan.backup == skill.parent / ".my-skill.bak-8" / "my-skill"
    assert [why.split(" ")[0] for why in plan.refused] == [".my-skill.bak-7"]
    assert recover(skill) == [] and backups.interrupted(skill) is None  # the planted 'applying' is not ours
    assert result_of({"SKILL.md": "x\n"}).write_to(skill, dry_run=True).refused == plan.refused


def test_accept_of_a_finished_run_changes_nothing_outside_the_target(service, tmp_path):
    work = tmp_path / "a" / "b"
    work.mkdir(parents=True)
    run = service.start(domain.spec(work)).run_id
    assert wait(service, run).state == "finished"
    target = work / "prompt.md"
    for path in (tmp_path / "victim.txt", tmp_path / "outside.txt", tmp_path / "a" / "outside.txt"):
        path.write_text("the user's own\n", encoding="utf-8")
    plant(target, 7, content={"": "attacker\n"})
    dry = agentdescent("accept", run, "--dry-run")  # the terminal names every folder left alone on a line of its own
    assert dry.returncode == 0, dry.stderr
    assert "beside it: .prompt.md.bak-7 was not made by AgentDescent" in dry.stdout.replace("\n", "")
    before = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("home")}
    accepted = service.accept(run)
    after = {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("home")}
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed <= {"a/b/prompt.md"} | {k for k in after if k.startswith("a/b/.prompt.md.bak-8")}
    assert "rule k0." in target.read_text(encoding="utf-8") and accepted.backup == str(work / ".prompt.md.bak-8" / "prompt.md")
    assert ".prompt.md.bak-7 was not made by AgentDescent" in accepted.message and len(accepted.refused) == 1


def test_a_planted_higher_numbered_backup_does_not_win(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    result_of({"SKILL.md": "evolved\n"}).write_to(skill)
    planted = plant(skill, 99, phase="done", paths=["SKILL.md"], content={"SKILL.md": "planted\n"})
    done = restore(skill)
    assert done.source == tmp_path / ".skill.bak-1" / "skill" and files_of(skill) == {"SKILL.md": b"mine\n"}
    assert [why.split(" ")[0] for why in done.refused] == [".skill.bak-99"]
    assert files_of(planted / "skill") == {"SKILL.md": b"planted\n"}
    assert done.backup == tmp_path / ".skill.bak-100" / "skill"  # numbers go on past the planted one


def test_a_recorded_backup_whose_copy_was_changed_is_refused_and_named(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "v0\n"})
    result_of({"SKILL.md": "v1\n"}).write_to(skill)
    result_of({"SKILL.md": "v2\n"}).write_to(skill)
    (tmp_path / ".skill.bak-2" / "skill" / "SKILL.md").write_text("tampered\n", encoding="utf-8")
    done = restore(skill)
    assert done.source == tmp_path / ".skill.bak-1" / "skill" and files_of(skill) == {"SKILL.md": b"v0\n"}
    assert done.refused == (".skill.bak-2 was changed after AgentDescent made it (its copy no longer has the digest "
                            "recorded): left alone",)
    os.chmod(tmp_path / ".skill.bak-1" / "skill", 0o700)  # a mode counts as much as the bytes
    with pytest.raises(UserError) as caught:
        restore(skill, 1)
    said = str(caught.value)
    assert "no backup number 1 of" in said and ".skill.bak-1 was changed after" in said and "are: 3 " in said
    assert (tmp_path / ".skill.bak-2" / "skill" / "SKILL.md").read_text(encoding="utf-8") == "tampered\n"


def test_a_journal_changed_after_the_fact_is_not_acted_on(tmp_path):
    skill, _ = sandbox(tmp_path)
    journal = tmp_path / "a" / "b" / ".my-skill.bak-1" / backups.JOURNAL
    forged = {**json.loads(journal.read_text(encoding="utf-8")), "phase": "applying", "paths": HOSTILE}
    journal.write_text(json.dumps(forged), encoding="utf-8")
    before = outside(tmp_path, skill)
    with pytest.raises(UserError, match=".my-skill.bak-1 does not match AgentDescent's record of it"):
        restore(skill)
    assert recover(skill) == [] and outside(tmp_path, skill) == before
    assert files_of(skill)["SKILL.md"] == b"evolved\n"


def test_an_interrupted_write_whose_backup_was_changed_is_not_rolled_back(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    half = backups.take(skill, made_by="write_to", paths=["SKILL.md"])  # a writer that died here
    (skill / "SKILL.md").write_text("half\n", encoding="utf-8")
    (half.copy / "SKILL.md").write_text("tampered\n", encoding="utf-8")
    with pytest.raises(UserError, match="was changed since it was made .* move .skill.bak-1 away to go on"):
        result_of({"SKILL.md": "evolved\n"}).write_to(skill)
    assert files_of(skill) == {"SKILL.md": b"half\n"}
    os.rename(half.folder, tmp_path / "set-aside")  # the user looked, and moved it away
    assert result_of({"SKILL.md": "evolved\n"}).write_to(skill).backup == tmp_path / ".skill.bak-1" / "skill"


def test_a_backup_made_with_another_home_is_unknown_here(tmp_path, monkeypatch):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    result_of({"SKILL.md": "evolved\n"}).write_to(skill)
    monkeypatch.setenv("AGENTDESCENT_HOME", str(tmp_path / "another-home"))
    with pytest.raises(UserError) as caught:
        restore(skill)
    said = str(caught.value)
    assert ".skill.bak-1 was not made by AgentDescent" in said and "another AGENTDESCENT_HOME is not known here" in said
    assert files_of(skill) == {"SKILL.md": b"evolved\n"}


def test_the_record_holds_each_backup_with_its_phase_paths_and_digest(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n", "old.md": "old\n"})
    plan = result_of({"SKILL.md": "evolved\n"}, {"SKILL.md": "", "old.md": ""}).write_to(skill)
    (file,) = registry.folder().glob("*.json")  # beside it, the target's lock
    held = json.loads(file.read_text(encoding="utf-8"))
    assert held["target"] == str(skill) and file == registry.file_of(skill)
    assert held["backups"] == [{"folder": ".skill.bak-1", "number": 1, "made_by": "write_to", "existed": True,
                                "phase": "done", "paths": ["old.md", "SKILL.md"], "digest": registry.digest(plan.backup),
                                "after": {"old.md": "absent", "SKILL.md": registry.seen(skill / "SKILL.md")},
                                "modes": {"SKILL.md": 0o644}, "run": None}]
    restore(skill)  # restore's own backup is recorded too
    assert [(r.made_by, r.phase) for r in registry.load(skill)] == [("write_to", "done"), ("restore", "done")]
    (tmp_path / "link").symlink_to(tmp_path, target_is_directory=True)
    assert registry.file_of(tmp_path / "link" / "skill") == file  # one folder by two paths has one record


def test_a_damaged_record_is_a_clear_error(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    result_of({"SKILL.md": "evolved\n"}).write_to(skill)
    held = json.loads(registry.file_of(skill).read_text(encoding="utf-8"))
    held["backups"][0]["paths"] = ["../escape.md"]
    registry.file_of(skill).write_text(json.dumps(held), encoding="utf-8")
    with pytest.raises(UserError, match="is damaged .* delete it to go on"):
        restore(skill)


def test_restore_leaves_what_a_key_cannot_name_as_it_is(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n", ".git/HEAD": "ref: main\n"})
    result_of({"SKILL.md": "evolved\n"}).write_to(skill)
    (skill / ".git" / "HEAD").write_text("ref: other\n", encoding="utf-8")
    done = restore(skill)
    assert done.changed == ("SKILL.md",) and (skill / ".git" / "HEAD").read_text(encoding="utf-8") == "ref: other\n"
    assert done.left == ()  # what is inside .git is not a restore's business, nor listed


def test_a_restore_names_the_files_it_leaves_because_no_key_can_hold_their_names(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n", "notes: v1.md": "v1\n"})
    result_of({"SKILL.md": "evolved\n"}).write_to(skill)
    (skill / "notes: v1.md").write_text("v2\n", encoding="utf-8")
    done = restore(skill)
    assert done.changed == ("SKILL.md",) and done.left == ("notes: v1.md",)
    assert (skill / "notes: v1.md").read_text(encoding="utf-8") == "v2\n"


def test_a_symlinked_target_or_backup_folder_is_never_used(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    result_of({"SKILL.md": "evolved\n"}).write_to(skill)
    (tmp_path / "alias").symlink_to(skill, target_is_directory=True)
    with pytest.raises(UserError, match="is a symlink to .*; a write-back or restore never goes through one"):
        restore(tmp_path / "alias")
    os.rename(tmp_path / ".skill.bak-1", tmp_path / "elsewhere")
    (tmp_path / ".skill.bak-1").symlink_to(tmp_path / "elsewhere", target_is_directory=True)  # same name, now a link
    with pytest.raises(UserError, match="no backup of"):
        restore(skill)
    assert files_of(skill) == {"SKILL.md": b"evolved\n"} and files_of(tmp_path / "elsewhere" / "skill") == {"SKILL.md": b"mine\n"}


def test_artifacts_do_not_import_the_run_service_and_home_has_one_definition():
    from agentdescent import home
    from agentdescent.runs import store

    assert store.home is home.home and store.HOME_ENV == home.HOME_ENV == "AGENTDESCENT_HOME"
    code = "import sys, agentdescent.artifacts.writeback; print(sorted(m for m in sys.modules if '.runs' in m))"
    loaded = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stderr


def test_backups_are_hidden_folders_and_a_visible_look_alike_is_left_alone(tmp_path):
    """Hosts skip hidden folders when they look for skills (tests/test_host_codex.py shows Codex
    doing so), so a backup of a skill folder never reads as a second skill."""
    skill = make(tmp_path / "skills" / "my-skill", {"SKILL.md": "---\nname: my-skill\n---\nmine\n"})
    plan = result_of({"SKILL.md": "---\nname: my-skill\n---\nevolved\n"}).write_to(skill)
    assert plan.backup == tmp_path / "skills" / ".my-skill.bak-1" / "my-skill"
    skills = sorted(p.relative_to(tmp_path / "skills").as_posix() for p in (tmp_path / "skills").rglob("SKILL.md")
                    if not any(part.startswith(".") for part in p.relative_to(tmp_path / "skills").parts))
    assert skills == ["my-skill/SKILL.md"]
    visible = make(tmp_path / "skills" / "my-skill.bak-2", {"my-skill/SKILL.md": "planted\n"})
    done = restore(skill)
    assert done.source == plan.backup and files_of(skill)["SKILL.md"] == b"---\nname: my-skill\n---\nmine\n"
    assert done.refused == (f"my-skill.bak-2 was not made by AgentDescent (no record in {registry.folder()}): "
                            "left alone",)
    assert done.backup == tmp_path / "skills" / ".my-skill.bak-3" / "my-skill" and visible.is_dir()


def test_a_large_file_is_backed_up_compared_and_put_back_a_block_at_a_time(tmp_path):
    folder = make(tmp_path / "skill", {"SKILL.md": "be brief\n"})
    with open(folder / "data.bin", "wb") as big:
        big.truncate(64 << 20)  # 64 MB, sparse: cheap to make, read whole all the same
    tracemalloc.start()
    try:
        write_back(folder, {"SKILL.md": "be brief, evolved\n"}, initial={"SKILL.md": ""})
        (folder / "data.bin").write_bytes(b"changed")
        restore(folder, overwrite=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert (folder / "data.bin").stat().st_size == 64 << 20 and (folder / "SKILL.md").read_text() == "be brief\n"
    assert peak < 16 << 20  # the file was never held whole


def test_what_a_backup_cannot_copy_is_refused_before_anything_is_copied(tmp_path, monkeypatch):
    """A named pipe or a device (a copy of /dev/zero never ends), or a copy past the free space
    or the cap (a sparse 50 GB file takes no room until copied), is named with its fix, and no
    backup folder is made."""
    from agentdescent.artifacts import copyable

    folder = tmp_path / "skill"
    folder.mkdir()
    (folder / "SKILL.md").write_text("x\n", encoding="utf-8")
    os.mkfifo(folder / "pipe")
    with pytest.raises(UserError, match=r"skill/pipe \(a named pipe\) cannot be copied into a backup: move it out"):
        backups.take(folder, made_by="write_to", paths=["SKILL.md"])
    (folder / "pipe").unlink()
    with open(folder / "sparse.bin", "wb") as sparse:
        sparse.truncate(copyable.MAX_BACKUP_BYTES + 1)
    too_big = r"would copy 4.0 GB, past what a backup may take .* move its largest files out of it \(skill/sparse.bin"
    with pytest.raises(UserError, match=too_big):
        backups.take(folder, made_by="write_to", paths=["SKILL.md"])
    assert not [p for p in tmp_path.iterdir() if ".bak-" in p.name]


def test_a_nearly_full_disk_is_named_with_what_a_backup_needs(tmp_path, monkeypatch):
    """A 3 MB disk was told its 2 KB skill "would copy 0.0 MB, past what a backup may take" and to
    move its largest files out, which could not help."""
    import collections

    from agentdescent.artifacts import copyable

    skill, _ = sandbox(tmp_path)
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(copyable.shutil, "disk_usage", lambda path: usage(3 << 20, 0, 3 << 20))
    [problem] = copyable.copy_problems(skill)
    assert "needs 0.0 MB and 64.0 MB left free after it, and the disk beside it has 3.0 MB free" in problem
    assert problem.endswith("free some space there")


def git_in(folder: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(folder), "-c", "user.name=u", "-c", "user.email=u@x", *args],
                          capture_output=True, text=True, check=True, timeout=60).stdout


def test_a_backup_inside_a_git_checkout_is_never_committed_and_never_put_back(tmp_path):
    """The copy holds what the repository ignores (a key in `.env`): a `git add -A` after a
    write-back committed it from the backup folder."""
    git_in(tmp_path, "init", "-q")
    skill = make(tmp_path / "my-skill", {"SKILL.md": "mine\n", ".env": "STRIPE_KEY=sk_live_1\n"})
    (tmp_path / ".gitignore").write_text("my-skill/.env\n", encoding="utf-8")
    git_in(tmp_path, "add", "-A")
    git_in(tmp_path, "commit", "-qm", "skill")
    result_of({"SKILL.md": "evolved\n"}).write_to(skill)
    assert (tmp_path / ".my-skill.bak-1" / "my-skill" / ".env").is_file()
    assert git_in(tmp_path, "status", "--porcelain", "-uall").splitlines() == [" M my-skill/SKILL.md"]
    done = restore(skill)
    assert files_of(skill) == {"SKILL.md": b"mine\n", ".env": b"STRIPE_KEY=sk_live_1\n"}  # no .gitignore brought in
    assert done.changed == ("SKILL.md",) and done.numbers == (1, 2)
    assert git_in(tmp_path, "status", "--porcelain", "-uall") == ""


def test_a_file_or_folder_that_cannot_be_read_is_named_with_its_fix_by_a_plan_and_a_restore(tmp_path):
    """An unreadable file made a dry-run accept end in a bare PermissionError (and the CLI say the
    disk could not be written)."""
    from tests.test_removal import as_a_user

    said = as_a_user("""
    import json, os, tempfile
    from pathlib import Path
    from agentdescent.artifacts.undo import restore
    from agentdescent.artifacts.writeback import write_back
    from agentdescent.cli.guard import _unwritable
    from agentdescent.errors import UserError

    skill = Path(tempfile.mkdtemp()) / "skill"
    (skill / "refs").mkdir(parents=True)
    base = {"SKILL.md": "a\\n", "refs/teams.md": "t\\n"}
    for key, text in base.items():
        (skill / key).write_text(text)
    said = {}

    def attempt(name, call):
        try:
            call()
        except UserError as exc:
            said[name] = str(exc).replace(str(skill), "SKILL")

    write_back(skill, {**base, "SKILL.md": "b\\n"}, initial=base, base=base)
    os.chmod(skill / "refs/teams.md", 0)
    attempt("plan", lambda: write_back(skill, {**base, "SKILL.md": "c\\n"}, initial=base, base=base, dry_run=True))
    attempt("restore", lambda: restore(skill))
    said["cli"] = _unwritable(PermissionError(13, "Permission denied", str(skill / "refs/teams.md")))
    os.chmod(skill / "refs/teams.md", 0o644)
    os.chmod(skill / "refs", 0)
    attempt("folder", lambda: write_back(skill, {**base, "SKILL.md": "c\\n"}, initial=base, base=base, dry_run=True))
    os.chmod(skill / "refs", 0o755)
    said["cli"] = said["cli"].replace(str(skill), "SKILL")
    print(json.dumps(said))
    """, tmp_path)
    fix = "nothing was changed: make it readable (chmod u+rX SKILL/{0}) and try again"
    assert said["plan"] == ("cannot read SKILL/refs/teams.md (Permission denied) to compare skill with the run's "
                            "version before writing it; " + fix.format("refs/teams.md"))
    assert said["restore"] == ("cannot read SKILL/refs/teams.md (Permission denied) to compare skill with its backup "
                               "before restoring it; " + fix.format("refs/teams.md"))
    assert said["folder"].startswith("cannot read SKILL/refs (Permission denied)") and fix.format("refs") in said["folder"]
    assert said["cli"] == ("cannot read SKILL/refs/teams.md: Permission denied; make it readable (chmod u+rX "
                           "SKILL/refs/teams.md) and try again")


def test_git_s_own_repository_is_left_out_of_a_backup_its_size_check_and_a_restore(tmp_path):
    """A skill folder that is a repository with a long history was refused as too large to back
    up (told to move `.git/objects/pack/...` out), and a worktree's `.git` file was copied into the
    backup, where it pointed at the live worktree."""
    from agentdescent.artifacts import copyable

    skill = make(tmp_path / "my-skill", {"SKILL.md": "mine\n", "vendored/lib.md": "lib\n"})
    git_in(skill, "init", "-q")
    git_in(skill, "add", "-A")
    git_in(skill, "commit", "-qm", "skill")
    with open(skill / ".git" / "objects" / "history.pack", "wb") as sparse:
        sparse.truncate(copyable.MAX_BACKUP_BYTES + 1)
    (skill / "vendored" / ".git").write_text("gitdir: ../.git/modules/vendored\n", encoding="utf-8")
    assert copyable.copy_problems(skill) == []
    plan = result_of({"SKILL.md": "evolved\n", "vendored/lib.md": "lib\n"}).write_to(skill)
    assert files_of(plan.backup) == {"SKILL.md": b"mine\n", "vendored/lib.md": b"lib\n"}
    done = restore(skill)
    assert done.changed == ("SKILL.md",) and done.left == ()
    assert (skill / "vendored" / ".git").is_file() and git_in(skill, "status", "--porcelain") == ""

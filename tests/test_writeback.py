"""The write-back: its plan, backups, modes, locking, refusals, undo on failure, recovery after a
kill, and `restore` (the function and the command). Real files and real processes throughout."""

from __future__ import annotations

import hashlib
import json
import os
import random
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from agentdescent import EvolveResult, FileTree, Task, UserError, evolve, load_tree
from agentdescent.artifacts import backups, targetlock
from agentdescent.artifacts.undo import recover, restore
from agentdescent.artifacts.writeback import write_back
from tests.writeback_child import result_of

ROOT = Path(__file__).resolve().parents[1]
SKILL = {"SKILL.md": "be brief\n", "refs/a.md": "a\n", "refs/old.md": "old\n", "hooks/pre.sh": "exit 0\n"}


def make(folder: Path, files: dict[str, str]) -> Path:
    for key, text in files.items():
        (folder / key).parent.mkdir(parents=True, exist_ok=True)
        (folder / key).write_text(text, encoding="utf-8")
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    """{relative path: bytes} of every file under `folder`."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def snapshot(folder: Path) -> dict[str, object]:
    """Every entry under `folder`, found without following links: a file as (mode, bytes), a link
    as its target, a folder as its mode."""
    seen: dict[str, object] = {}
    for path in sorted(folder.rglob("*")):
        info = os.lstat(path)
        rel = path.relative_to(folder).as_posix()
        if stat.S_ISLNK(info.st_mode):
            seen[rel] = ("link", os.readlink(path))
        elif stat.S_ISDIR(info.st_mode):
            seen[rel] = ("dir", stat.S_IMODE(info.st_mode))
        else:
            seen[rel] = (stat.S_IMODE(info.st_mode), path.read_bytes())
    return seen


def journal_of(copy: Path) -> backups.Journal:
    return backups.Journal.model_validate_json((copy.parent / backups.JOURNAL).read_text(encoding="utf-8"))


def spec(tmp_path: Path, rendered, initial=None, name="spec.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"rendered": rendered, "initial": initial or {}}), encoding="utf-8")
    return path


def child(spec_path: Path, target: Path, *options: str, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.writeback_child", str(spec_path), str(target), *options],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, **popen)


def agentdescent(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentdescent", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "COLUMNS": "80", "TMPDIR": tempfile.gettempdir(),
                                                 "AGENTDESCENT_HOME": os.environ["AGENTDESCENT_HOME"]})


def test_the_plan_lists_what_is_written_unchanged_deleted_extra_and_frozen(tmp_path):
    folder = make(tmp_path / "skill", {**SKILL, "hooks/pre.sh": "my hook\n", "notes.txt": "mine\n", "hooks/x.sh": "x\n"})
    final = {"SKILL.md": "be concise\n", "refs/a.md": "a\n", "refs/new/b.md": "b\n", "hooks/pre.sh": "exit 1\n"}
    plan = result_of(final, SKILL, frozen=["hooks/*"]).write_to(folder)
    assert (plan.written, plan.unchanged, plan.deleted) == (("SKILL.md", "refs/new/b.md"), ("refs/a.md",), ("refs/old.md",))
    assert (plan.extra, plan.frozen) == (("notes.txt",), ("hooks/pre.sh", "hooks/x.sh"))
    assert files_of(folder) == {"SKILL.md": b"be concise\n", "refs/a.md": b"a\n", "refs/new/b.md": b"b\n",
                                "hooks/pre.sh": b"my hook\n", "hooks/x.sh": b"x\n", "notes.txt": b"mine\n"}
    assert plan.backup == tmp_path / ".skill.bak-1" / "skill"
    assert files_of(plan.backup)["refs/old.md"] == b"old\n" and journal_of(plan.backup).phase == "done"


def test_a_no_op_makes_no_backup_and_a_dry_run_touches_nothing(tmp_path):
    folder = make(tmp_path / "skill", SKILL)
    before = snapshot(tmp_path)
    result = result_of({**SKILL, "SKILL.md": "new\n", "extra/c.md": "c\n"}, SKILL)
    dry = result.write_to(folder, dry_run=True)
    assert snapshot(tmp_path) == before  # no lock file, no backup, nothing written
    assert (dry.written, dry.backup) == (("SKILL.md", "extra/c.md"), None)
    done = result.write_to(folder)
    assert (done.written, done.deleted) == (dry.written, dry.deleted) and done.backup is not None
    again = result.write_to(folder)
    assert (again.written, again.deleted, again.backup) == ((), (), None)
    assert [b.number for b in backups.backups(folder)] == [1]


def test_prune_deletes_extras_and_the_folders_they_leave_empty_but_never_frozen_files(tmp_path):
    """Nor what load_tree never reads: a user's environment, dependencies, builds and editor backups
    beside the skill were deleted as files the run did not know."""
    unread = {".venv/lib.py": "v\n", "node_modules/dep/index.js": "d\n", "build/out.js": "b\n", "ref.md~": "r\n"}
    folder = make(tmp_path / "skill", {**SKILL, "stray/one.md": "1\n", "hooks/local.sh": "mine\n", **unread})
    result = result_of(SKILL, SKILL, frozen=["hooks/*"])
    assert result.write_to(folder).extra == ("stray/one.md",) and (folder / "stray/one.md").exists()
    plan = result.write_to(folder, prune=True)
    assert (plan.deleted, plan.extra, plan.frozen) == (("stray/one.md",), ("stray/one.md",), ("hooks/local.sh", "hooks/pre.sh"))
    assert not (folder / "stray").exists() and (folder / "hooks/local.sh").read_text(encoding="utf-8") == "mine\n"
    assert all((folder / key).read_text(encoding="utf-8") == text for key, text in unread.items())
    assert files_of(plan.backup)["stray/one.md"] == b"1\n"


def test_prune_leaves_the_files_the_run_s_tree_was_read_without(tmp_path):
    """A tree read with exclude= and handed to FileTree(left_out=...) was pruned of them: the notes
    the user chose to keep out of the run were deleted as files it did not know."""
    folder = make(tmp_path / "skill", {**SKILL, "notes/mine.md": "keep me\n", "stray.md": "s\n"})
    tree = load_tree(folder, exclude=["notes/*", "stray.md"])
    run = evolve([Task(id=f"t{i}", prompt="") for i in range(6)], lambda task, output: 1.0, run=lambda files, task: "ok",
                 propose=lambda *_: "unused", strategy=FileTree(tree, left_out=["notes/*"]), rounds=1)
    for result in (run, EvolveResult.from_json(run.to_json())):
        plan = result.write_to(folder, prune=True, dry_run=True)
        assert plan.deleted == ("stray.md",) and plan.extra == ("stray.md",)
    run.write_to(folder, prune=True)
    assert (folder / "notes/mine.md").read_text(encoding="utf-8") == "keep me\n" and not (folder / "stray.md").exists()


def test_file_modes_are_kept_and_new_files_get_the_umask_mode(tmp_path):
    folder = make(tmp_path / "skill", {"SKILL.md": "x\n", "run.sh": "echo\n"})
    os.chmod(folder / "SKILL.md", 0o644)
    os.chmod(folder / "run.sh", 0o755)
    with open(tmp_path / "plain.txt", "w", encoding="utf-8"):
        pass  # the mode open(..., "w") gives under this umask
    result_of({"SKILL.md": "y\n", "run.sh": "echo hi\n", "new.md": "n\n"}).write_to(folder)
    modes = {name: stat.S_IMODE(os.stat(folder / name).st_mode) for name in ("SKILL.md", "run.sh", "new.md")}
    assert modes == {"SKILL.md": 0o644, "run.sh": 0o755, "new.md": stat.S_IMODE(os.stat(tmp_path / "plain.txt").st_mode)}


def test_backups_are_numbered_and_never_overwritten(tmp_path):
    folder = make(tmp_path / "skill", {"SKILL.md": "v0\n"})
    copies = [result_of({"SKILL.md": f"v{n}\n"}).write_to(folder).backup for n in (1, 2, 3)]
    assert copies == [tmp_path / f".skill.bak-{n}" / "skill" for n in (1, 2, 3)]
    assert [files_of(c) for c in copies] == [{"SKILL.md": f"v{n}\n".encode()} for n in (0, 1, 2)]


def test_a_symlink_planted_at_the_next_backup_name_is_not_written_through(tmp_path):
    folder = make(tmp_path / "skill", {"SKILL.md": "v0\n"})
    (tmp_path / ".skill.bak-1").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    plan = result_of({"SKILL.md": "v1\n"}).write_to(folder)
    assert plan.backup == tmp_path / ".skill.bak-2" / "skill"
    assert not (tmp_path / "elsewhere").exists() and os.readlink(tmp_path / ".skill.bak-1") == str(tmp_path / "elsewhere")


def test_concurrent_write_tos_in_threads_take_distinct_complete_backups(tmp_path):
    for round_ in range(5):
        folder = make(tmp_path / f"skill{round_}", {f"f{i}.md": "original\n" for i in range(50)})
        states = {who: {f"f{i}.md": f"{who}\n" for i in range(50)} for who in ("a", "b")}
        barrier = threading.Barrier(2)
        plans = {}

        def write(who):
            barrier.wait()
            plans[who] = result_of(states[who]).write_to(folder)

        threads = [threading.Thread(target=write, args=(who,)) for who in states]
        [t.start() for t in threads]
        [t.join() for t in threads]
        assert plans["a"].backup != plans["b"].backup
        last = next((who for who in states if files_of(folder) == {k: v.encode() for k, v in states[who].items()}), None)
        assert last is not None, "the target is a mix of both writes"
        first = "b" if last == "a" else "a"
        assert {tuple(files_of(p.backup).values())[0] for p in plans.values()} == {b"original\n", f"{first}\n".encode()}
        assert all(len(files_of(p.backup)) == 50 and journal_of(p.backup).phase == "done" for p in plans.values())


def test_concurrent_write_tos_in_processes_take_distinct_complete_backups(tmp_path):
    folder = make(tmp_path / "skill", {f"f{i}.md": "original\n" for i in range(200)})
    specs = [spec(tmp_path, {f"f{i}.md": f"{who}\n" for i in range(200)}, name=f"{who}.json") for who in "ab"]
    pipes = [os.pipe() for _ in specs]
    procs = [child(s, folder, "--ready", str(w), pass_fds=(w,)) for s, (r, w) in zip(specs, pipes)]
    for r, w in pipes:
        os.close(w)
        assert os.read(r, 1) == b"r"
        os.close(r)
    for proc in procs:
        proc.communicate(timeout=60)
    assert [proc.returncode for proc in procs] == [0, 0]
    copies = [b.copy for b in backups.backups(folder)]
    assert len(copies) == 2 and all(len(files_of(c)) == 200 for c in copies)
    assert {files_of(c)["f0.md"] for c in copies} | {files_of(folder)["f0.md"]} == {b"original\n", b"a\n", b"b\n"}


def test_a_write_waits_a_bounded_time_for_another_and_names_its_holder(tmp_path):
    """A stuck writer (or a stray process holding the lock) never makes write_to or restore hang."""
    folder = make(tmp_path / "skill", {"SKILL.md": "x\n"})
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
                               "from agentdescent.artifacts import targetlock\n"
                               "with targetlock.locked(Path(sys.argv[1])):\n    print('held', flush=True); time.sleep(60)",
                               str(folder)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(UserError, match=rf"another write or restore of .*skill has held it for 0.5 s \(process {holder.pid}, "):
            with targetlock.locked(folder, wait=0.5):
                pass
    finally:
        holder.kill()
        holder.wait()
    with targetlock.locked(folder, wait=5):  # free once its holder is gone
        pass


def test_an_error_part_way_is_undone_and_names_the_file(tmp_path):
    folder = make(tmp_path / "skill", {"a.md": "a\n", "c.md": "c\n", "old.md": "old\n"})
    os.chmod(folder / "c.md", 0o600)
    before = snapshot(folder)
    final = {"a.md": "a2\n", "big.md": "x" * 5000, "c.md": "c2\n"}  # deletes old.md, writes a.md, then fails on big.md
    proc = child(spec(tmp_path, final, {"a.md": "", "c.md": "", "old.md": ""}), folder, "--fsize", "2000")
    message = proc.communicate(timeout=60)[1]
    assert proc.returncode == 3
    assert "big.md" in message and "File too large" in message and "undone" in message
    assert snapshot(folder) == before
    (copy,) = [b.copy for b in backups.backups(folder)]
    assert journal_of(copy).phase == "rolled back"


@pytest.mark.parametrize("edited", ["refs/a.md", "SKILL.md"])  # a file written by the run, and one it leaves
def test_an_edit_saved_while_the_write_back_runs_is_never_lost(tmp_path, monkeypatch, edited):
    start = {"SKILL.md": "be brief\n", "refs/a.md": "a\n"}
    folder = make(tmp_path / "skill", start)
    take = backups.take

    def take_then_edit(target, **record):  # the copy of a large target takes seconds: an edit lands meanwhile
        backup = take(target, **record)
        (folder / "refs/a.md").write_text("a\nMY EDIT\n", encoding="utf-8")
        return backup

    monkeypatch.setattr(backups, "take", take_then_edit)
    run = {"SKILL.md": "be brief\n", "refs/a.md": "a, evolved\n"} if edited == "refs/a.md" else \
          {"SKILL.md": "be brief, evolved\n", "refs/a.md": "a\n"}
    if edited == "refs/a.md":
        with pytest.raises(UserError, match="refs/a.md changed on disk while the write-back ran .* your edit included"):
            write_back(folder, run, initial=start, base=start)
        assert files_of(folder) == {"SKILL.md": b"be brief\n", "refs/a.md": b"a\nMY EDIT\n"}
    else:  # the run does not touch the file edited: its write goes on, and the edit stays
        write_back(folder, run, initial=start, base=start)
        assert files_of(folder) == {"SKILL.md": b"be brief, evolved\n", "refs/a.md": b"a\nMY EDIT\n"}



def test_a_folder_swapped_for_a_symlink_while_the_write_back_runs_is_never_written_through(tmp_path, monkeypatch):
    """The swap lands during the backup's copy, after the plan checked every folder: the write
    fails on it, everything is undone, and the folder outside, a copy of the one swapped out (so
    that a check by its files' bytes passes), is untouched."""
    start = {"SKILL.md": "be brief\n", "refs/a.md": "a\n"}
    folder = make(tmp_path / "skill", start)
    outside = make(tmp_path / "outside", {"a.md": "a\n"})
    take = backups.take

    def take_then_swap(target, **record):
        backup = take(target, **record)
        (folder / "refs").rename(folder / "refs.real")
        (folder / "refs").symlink_to(outside, target_is_directory=True)
        return backup

    monkeypatch.setattr(backups, "take", take_then_swap)
    with pytest.raises(UserError, match=r"refs/a.md: a folder on the way is a symlink, and none is followed"):
        write_back(folder, {"SKILL.md": "be brief, evolved\n", "refs/a.md": "a, evolved\n"}, initial=start, base=start)
    assert files_of(outside) == {"a.md": b"a\n"} and files_of(folder)["SKILL.md"] == b"be brief\n"

@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_folder_part_way_is_undone(tmp_path):
    folder = make(tmp_path / "skill", {"SKILL.md": "x\n", "refs/a.md": "a\n"})
    before = snapshot(folder)
    os.chmod(folder / "refs", 0o555)
    try:
        with pytest.raises(UserError, match="refs/a.md"):
            result_of({"SKILL.md": "y\n", "refs/a.md": "b\n"}).write_to(folder)
    finally:
        os.chmod(folder / "refs", 0o755)
    assert snapshot(folder) == before


def test_a_symlinked_folder_inside_the_target_is_refused_and_nothing_is_written(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = make(tmp_path / "skill", {"SKILL.md": "x\n"})
    (folder / "refs").symlink_to(outside, target_is_directory=True)
    before = snapshot(tmp_path)
    with pytest.raises(UserError, match="refs is a symlink"):
        result_of({"SKILL.md": "y\n", "refs/a.md": "a\n"}).write_to(folder)
    assert snapshot(tmp_path) == before


def test_a_folder_symlink_inside_the_target_cannot_reach_a_frozen_folder(tmp_path):
    """The folder issue's case: `inlink -> hooks` let a diff's `inlink/pre.sh` overwrite the frozen hook."""
    folder = make(tmp_path / "skill", {"SKILL.md": "x\n", "hooks/pre.sh": "exit 0\n"})
    (folder / "inlink").symlink_to("hooks", target_is_directory=True)
    with pytest.raises(UserError, match="inlink is a symlink"):
        result_of({"SKILL.md": "x\n", "hooks/pre.sh": "exit 0\n", "inlink/pre.sh": "rm -rf ~\n"}).write_to(folder)
    assert (folder / "hooks" / "pre.sh").read_text(encoding="utf-8") == "exit 0\n"


def test_over_long_names_are_user_errors_and_a_long_but_legal_name_works(tmp_path):
    with pytest.raises(UserError, match="longer than"):
        result_of({"a" * 300 + ".md": "x"}).write_to(tmp_path / "skill")
    with pytest.raises(UserError, match="300 bytes"):
        result_of("text").write_to(tmp_path / ("p" * 300))
    target = tmp_path / ("p" * 247 + ".md")  # 250 bytes: the temp file, lock and backup names still fit
    target.write_text("mine", encoding="utf-8")
    plan = result_of("evolved").write_to(target)
    assert plan.written == (target.name,) and plan.backup.read_text(encoding="utf-8") == "mine"
    assert restore(target).source == plan.backup and target.read_text(encoding="utf-8") == "mine"
    assert not tmp_path.joinpath("skill").exists()


def test_the_wrong_kind_of_target_is_refused(tmp_path):
    (tmp_path / "file").write_text("x", encoding="utf-8")
    (tmp_path / "folder").mkdir()
    with pytest.raises(UserError, match="is a file, and what is written there is a folder: move the file away"):
        result_of({"a.md": "a"}).write_to(tmp_path / "file")
    with pytest.raises(UserError, match="is a folder, and what is written there is a file"):
        result_of("text").write_to(tmp_path / "folder")


def test_a_text_artifact_is_written_and_restored_with_its_mode(tmp_path):
    target = tmp_path / "prompt.md"
    target.write_text("my own edits", encoding="utf-8")
    os.chmod(target, 0o640)
    plan = result_of("- state the year").write_to(target)
    assert (plan.written, plan.deleted, plan.extra) == (("prompt.md",), (), ())
    assert plan.backup.read_text(encoding="utf-8") == "my own edits" and stat.S_IMODE(os.stat(target).st_mode) == 0o640
    done = restore(target)
    assert target.read_text(encoding="utf-8") == "my own edits" and stat.S_IMODE(os.stat(target).st_mode) == 0o640
    assert done.source == plan.backup and done.backup.read_text(encoding="utf-8") == "- state the year"
    again = restore(target)  # the first restore backed the evolved text up: a second one puts it back
    assert again.source == done.backup and target.read_text(encoding="utf-8") == "- state the year"
    assert stat.S_IMODE(os.stat(target).st_mode) == 0o640 and again.numbers == (1, 2, 3)
    assert restore(target, 1).changed == ("",) and target.read_text(encoding="utf-8") == "my own edits"
    assert restore(target, 1).backup is None  # already as backup 1 holds it: nothing to do, no new backup


def test_restore_leaves_a_folder_exactly_as_its_backup(tmp_path):
    folder = make(tmp_path / "skill", SKILL)
    before = snapshot(folder)
    result_of({"SKILL.md": "new\n", "more/b.md": "b\n"}, SKILL).write_to(folder)
    make(folder, {"added/later.md": "later\n"})
    done = restore(folder, overwrite=True)
    assert snapshot(folder) == before
    assert files_of(done.backup)["added/later.md"] == b"later\n"
    assert journal_of(done.backup).made_by == "restore"



def test_restore_keeps_a_file_of_the_user_s_that_looks_like_a_temp_file(tmp_path):
    """The temp files of an interrupted write are swept when it is rolled back, not by a restore."""
    folder = make(tmp_path / "skill", {**SKILL, "refs/.a.md.0123abcd.tmp": "my notes\n"})
    result_of({**SKILL, "refs/a.md": "a, evolved\n", "refs/.a.md.0123abcd.tmp": "my notes\n"}, SKILL).write_to(folder)
    restore(folder)
    assert (folder / "refs/.a.md.0123abcd.tmp").read_text() == "my notes\n"

def test_a_restore_refuses_to_undo_edits_made_after_the_write_back_unless_told(tmp_path):
    folder = make(tmp_path / "skill", SKILL)
    result_of({**SKILL, "SKILL.md": "evolved\n"}, SKILL).write_to(folder)
    make(folder, {"refs/notes.md": "two hours of work\n", "refs/a.md": "a, edited by hand\n"})
    (folder / "refs/old.md").unlink()  # a path gone since: putting it back loses nothing
    after = snapshot(folder)
    with pytest.raises(UserError) as refused:
        restore(folder)
    assert "2 path(s) changed since the last write-back or restore (refs/a.md, refs/notes.md)" in str(refused.value)
    assert "--overwrite" in str(refused.value) and snapshot(folder) == after
    make(folder, {"SKILL.md": "evolved, then edited\n"})  # a file the write-back wrote, edited since
    with pytest.raises(UserError, match=r"3 path\(s\) changed .* \(SKILL.md, refs/a.md, refs/notes.md\)"):
        restore(folder)
    (folder / "refs/notes.md").unlink()
    make(folder, {"SKILL.md": "evolved\n", "refs/a.md": "a\n"})  # the edits taken back by hand: nothing in the way
    restore(folder)
    assert files_of(folder) == {key: text.encode() for key, text in SKILL.items()}
    assert restore(folder).changed and (folder / "SKILL.md").read_text() == "evolved\n"  # a restore undone by the next



@pytest.mark.parametrize("made_by", ["write-back", "restore"])
def test_a_mode_changed_since_the_last_write_refuses_a_restore_whether_it_wrote_the_file_or_not(tmp_path, made_by):
    """`chmod +x` on a file the write-back wrote was undone silently, and on one it left refused."""
    folder = make(tmp_path / "skill", SKILL)
    result_of({**SKILL, "SKILL.md": "evolved\n"}, SKILL).write_to(folder)
    if made_by == "restore":
        restore(folder)
        restore(folder)  # the last write is now a restore's, which wrote SKILL.md back as evolved
    for rel in ("SKILL.md", "refs/a.md"):  # written by the last write, and left by it
        (folder / rel).chmod(0o755)
        with pytest.raises(UserError, match=rf"1 path\(s\) changed since the last write-back or restore \({rel}\)"):
            restore(folder)
        assert (folder / "SKILL.md").read_text() == "evolved\n"
        (folder / rel).chmod(0o644)
    (folder / "SKILL.md").chmod(0o755)
    restore(folder, overwrite=True)
    assert files_of(folder) == {key: text.encode() for key, text in SKILL.items()}


def test_editor_and_cache_litter_neither_refuses_a_restore_nor_is_deleted_by_it(tmp_path):
    """A .DS_Store or a `file~` refused a restore as an edit, and --overwrite then deleted them, a
    live vim swap file included."""
    folder = make(tmp_path / "skill", SKILL)
    result_of({**SKILL, "SKILL.md": "evolved\n"}, SKILL).write_to(folder)
    litter = {".DS_Store": "finder\n", "__pycache__/x.pyc": "c\n", ".SKILL.md.swp": "vim\n", "SKILL.md~": "evolved\n"}
    make(folder, litter)
    done = restore(folder)
    assert done.changed == ("SKILL.md",) and done.left == ()
    assert files_of(folder) == {key: text.encode() for key, text in {**SKILL, **litter}.items()}

def test_a_journal_left_applying_is_rolled_back_before_the_next_write(tmp_path):
    folder = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    before = snapshot(folder)
    half = backups.take(folder, made_by="write_to", paths=["SKILL.md", "new.md"])  # a writer that died here
    make(folder, {"SKILL.md": "half\n", "new.md": "half\n"})
    (folder / ".new.md.0123abcd.tmp").write_text("torn", encoding="utf-8")
    with pytest.raises(UserError, match="interrupted"):
        result_of({"SKILL.md": "evolved\n"}).write_to(folder, dry_run=True)
    assert recover(folder) == [half.folder] and snapshot(folder) == before
    assert journal_of(half.copy).phase == "rolled back"


def test_the_restore_command_puts_the_original_back_and_backs_up_first(tmp_path):
    folder = make(tmp_path / "skill", SKILL)
    before = snapshot(folder)
    evolved = {"SKILL.md": "evolved\n", "refs/a.md": "a\n", "hooks/pre.sh": "exit 0\n"}  # refs/old.md deleted
    result_of(evolved, SKILL).write_to(folder)
    done = agentdescent("restore", str(folder))
    assert done.returncode == 0, done.stderr
    assert snapshot(folder) == before
    assert files_of(tmp_path / ".skill.bak-2" / "skill") == {"SKILL.md": b"evolved\n", "hooks/pre.sh": b"exit 0\n",
                                                            "refs/a.md": b"a\n"}
    said = done.stdout.replace("\n", "")
    assert f"restored {folder} from {tmp_path / '.skill.bak-1' / 'skill'}" in said
    assert str(tmp_path / ".skill.bak-2" / "skill") in said and str(tmp_path / ".skill.bak-*") in said


def test_the_restore_command_without_a_backup_says_so_and_exits_2(tmp_path):
    make(tmp_path / "skill", SKILL)
    done = agentdescent("restore", str(tmp_path / "skill"))
    assert done.returncode == 2  # a usage error: the path has no backup
    said = done.stderr.replace("\n", "")
    assert said.startswith("error: ") and "Traceback" not in done.stdout + done.stderr
    assert "no backup of" in said and "write_to takes one" in said and "check the path" in said
    assert agentdescent("restore").returncode == 2


# 500 files rather than the 2,000: each round backs up, writes, and rolls back or
# restores every file, and creating a file costs ~0.35 ms on the 2-core test machine, so ten
# rounds took ~28 s with 2,000 files and ~14 s with 1,000; with 500 they take ~9 s (half of it
# starting the children), and a write-back still lasts long enough (~0.25 s) for ten seeded
# kills to land at different points, most in the backup copy or the apply phase.
KILL_FILES = 500


def test_a_write_back_killed_at_random_points_ends_whole_and_restore_brings_back_the_original(tmp_path):
    original = {f"d{i % 10}/f{i:03d}.md": f"original {i}\n" for i in range(KILL_FILES)}
    evolved = {k: v.replace("original", "evolved") for k, v in original.items() if not k.endswith("7.md")}
    evolved.update({f"added/g{i:02d}.md": f"added {i}\n" for i in range(50)})
    as_bytes = {k: v.encode() for k, v in original.items()}, {k: v.encode() for k, v in evolved.items()}
    folder = make(tmp_path / "skill", original)
    spec_path = spec(tmp_path, evolved, original)

    def start() -> tuple[subprocess.Popen, float]:
        r, w = os.pipe()
        proc = child(spec_path, folder, "--ready", str(w), pass_fds=(w,))
        os.close(w)
        assert os.read(r, 1) == b"r"  # the child is past its imports, about to call write_to
        os.close(r)
        return proc, time.perf_counter()

    proc, started = start()
    proc.communicate(timeout=60)
    duration = time.perf_counter() - started  # of a whole write-back: the range the kills fall in
    assert proc.returncode == 0 and files_of(folder) == as_bytes[1]
    restore(folder)
    rng, ends = random.Random(11), []
    for _ in range(10):
        proc, started = start()
        time.sleep(rng.uniform(0, duration))
        proc.kill()
        proc.communicate(timeout=60)
        rolled_back = recover(folder)
        after = files_of(folder)
        assert after in as_bytes, "the target is a mix of the old and the new artifact"
        assert not [p for p in folder.rglob("*") if p.name.endswith(".tmp")]
        assert all(b.journal().phase in ("done", "rolled back") for b in backups.backups(folder))
        ends.append("complete" if after == as_bytes[1] else "rolled back" if rolled_back else "untouched")
        if after == as_bytes[1]:
            restore(folder)  # undoes the write that completed; one that did not left the original
        assert files_of(folder) == as_bytes[0]
    assert ends.count("complete") < 10, f"no kill landed before the write-back ended: {ends}"


def test_a_fifo_or_a_device_is_never_written_nor_waited_on(tmp_path):
    fifo = tmp_path / "prompt.md"
    os.mkfifo(fifo)
    before = sorted(os.listdir(tmp_path))
    for target in (fifo, Path("/dev/null")):
        with pytest.raises(UserError, match="is a device, a FIFO or a socket, not a file or a folder"):
            result_of("evolved\n").write_to(target)
        with pytest.raises(UserError):
            restore(target)
    assert sorted(os.listdir(tmp_path)) == before and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_a_fifo_inside_the_target_is_named_with_the_way_out_and_nothing_is_written(tmp_path):
    folder = make(tmp_path / "skill", {"SKILL.md": "be brief\n"})
    os.mkfifo(folder / "pipe")
    with pytest.raises(UserError) as refused:
        result_of({"SKILL.md": "evolved\n"}, {"SKILL.md": ""}).write_to(folder)
    assert "skill/pipe (a named pipe) cannot be copied into a backup: move it out of skill" in str(refused.value)
    assert (folder / "SKILL.md").read_text() == "be brief\n" and backups.backups(folder) == []


def test_restore_names_a_file_it_leaves_on_one_line(tmp_path):
    """A name with a line break would print a line of its own: it is named as Python would write it."""
    from agentdescent.runs.restoring import restore as restore_run
    from agentdescent.runs.store import RunStore

    folder = make(tmp_path / "skill", SKILL)
    result_of({**SKILL, "SKILL.md": "evolved\n"}, SKILL).write_to(folder)
    (folder / "nl\nFAKE: restored OK.md").write_text("x\n", encoding="utf-8")
    said = restore_run(RunStore(tmp_path / "runs"), folder).message
    assert "'nl\\nFAKE: restored OK.md'" in said and "\n" not in said


def test_a_write_back_undone_part_way_leaves_a_file_saved_again_after_it_wrote_it(tmp_path, monkeypatch):
    """The user saves the first file it wrote, then the second before it gets there: the write
    stops, and neither save is undone (the first was put back over before)."""
    from agentdescent import atomic

    start = {"SKILL.md": "be brief\n", "refs/a.md": "a\n"}
    folder = make(tmp_path / "skill", start)
    write = atomic.write_bytes_in

    def write_then_user_saves(root, rel, *args, **kwargs):
        write(root, rel, *args, **kwargs)
        if rel == "SKILL.md":
            (folder / "SKILL.md").write_text("be brief, evolved\nMY LINE\n", encoding="utf-8")
            (folder / "refs/a.md").write_text("a\nMY OTHER LINE\n", encoding="utf-8")

    monkeypatch.setattr(atomic, "write_bytes_in", write_then_user_saves)
    with pytest.raises(UserError, match=r"refs/a.md changed on disk .*but for SKILL.md: saved again"):
        write_back(folder, {"SKILL.md": "be brief, evolved\n", "refs/a.md": "a, evolved\n"}, initial=start, base=start)
    assert files_of(folder) == {"SKILL.md": b"be brief, evolved\nMY LINE\n", "refs/a.md": b"a\nMY OTHER LINE\n"}


def seen_as(text: str) -> str:
    """What `registry.seen` says of a file holding `text`."""
    return f"file {hashlib.sha256(text.encode()).hexdigest()}"


def test_recovering_a_killed_write_leaves_a_file_saved_after_the_kill(tmp_path):
    folder = make(tmp_path / "skill", {"SKILL.md": "be brief\n", "refs/a.md": "a\n"})
    with targetlock.locked(folder):
        backups.take(folder, made_by="write_to", paths=["SKILL.md", "refs/a.md"],
                     writes={"SKILL.md": seen_as("evolved\n"), "refs/a.md": seen_as("a, evolved\n")})
    (folder / "refs/a.md").write_text("a, evolved\n", encoding="utf-8")  # written; then the process was killed
    (folder / "SKILL.md").write_text("be brief\nMY LINE\n", encoding="utf-8")  # a save after the kill
    assert recover(folder)
    assert files_of(folder) == {"SKILL.md": b"be brief\nMY LINE\n", "refs/a.md": b"a\n"}


def test_a_save_while_the_restore_copies_its_backup_refuses_the_restore(tmp_path, monkeypatch):
    folder = make(tmp_path / "skill", SKILL)
    result_of({**SKILL, "SKILL.md": "evolved\n"}, SKILL).write_to(folder)
    take = backups.take

    def take_then_save(target, **record):
        backup = take(target, **record)
        (folder / "SKILL.md").write_text("evolved\nMY SAVE\n", encoding="utf-8")
        return backup

    monkeypatch.setattr(backups, "take", take_then_save)
    with pytest.raises(UserError, match="SKILL.md changed on disk while the restore ran"):
        restore(folder)
    assert (folder / "SKILL.md").read_text() == "evolved\nMY SAVE\n"


def test_restore_settles_an_interrupted_write_it_finds(tmp_path):
    folder = make(tmp_path / "skill", SKILL)
    with targetlock.locked(folder):
        backups.take(folder, made_by="write_to", paths=["SKILL.md"])
    (folder / "SKILL.md").write_text("half written\n", encoding="utf-8")
    restore(folder)  # it said there was no backup to restore
    assert (folder / "SKILL.md").read_text() == SKILL["SKILL.md"] and backups.interrupted(folder) is None


def test_a_restore_after_a_killed_restore_says_it_settled_it_and_puts_back_the_backup_asked_for(tmp_path):
    """It rolled the killed restore back, then took that rolled-back copy (what the target held
    again) for the newest backup: "already matches; nothing changed", the write-back never undone."""
    folder = make(tmp_path / "skill", SKILL)
    write_back(folder, {**SKILL, "SKILL.md": "evolved\n"}, initial=SKILL)  # an accept: backup 1 holds SKILL
    with targetlock.locked(folder):  # a restore of backup 1, killed half way
        backups.take(folder, made_by="restore", paths=["SKILL.md"])
    (folder / "SKILL.md").write_text(SKILL["SKILL.md"], encoding="utf-8")
    done = restore(folder)
    assert done.settled and (folder / "SKILL.md").read_text() == SKILL["SKILL.md"]
    assert done.source == tmp_path / ".skill.bak-1" / "skill" and done.changed == ("SKILL.md",)


def test_a_restore_after_a_killed_write_back_undoes_that_one_only(tmp_path):
    """It rolled the cut-short write-back back, then went on to put back the backup of the accept
    before it: what status told the user would roll the half-done write back undid their accept too."""
    folder = make(tmp_path / "skill", SKILL)
    write_back(folder, {**SKILL, "SKILL.md": "accepted\n"}, initial=SKILL)  # an accept the user keeps
    with targetlock.locked(folder):  # a second write-back, killed half way
        backups.take(folder, made_by="write_to", paths=["SKILL.md"])
    (folder / "SKILL.md").write_text("half written\n", encoding="utf-8")
    done = restore(folder)
    assert done.settled and done.changed == () and (folder / "SKILL.md").read_text() == "accepted\n"
    restore(folder)  # the next restore undoes the accept before it
    assert (folder / "SKILL.md").read_text() == SKILL["SKILL.md"]


def test_a_write_after_a_killed_write_says_it_rolled_that_one_back(tmp_path):
    folder = make(tmp_path / "skill", SKILL)
    with targetlock.locked(folder):  # a write-back killed half way
        backups.take(folder, made_by="write_to", paths=["SKILL.md"])
    (folder / "SKILL.md").write_text("half written\n", encoding="utf-8")
    plan = write_back(folder, {**SKILL, "SKILL.md": "evolved\n"}, initial=SKILL)
    assert plan.settled == (str(tmp_path / ".skill.bak-1"),) and (folder / "SKILL.md").read_text() == "evolved\n"


def test_a_file_the_run_never_read_is_named_as_such_not_as_the_users_edit(tmp_path):
    """A library run whose tree left out a file the folder holds, and whose result creates it."""
    folder = tmp_path / "skill"
    (folder / "notes").mkdir(parents=True)
    (folder / "SKILL.md").write_text("# s\n", encoding="utf-8")
    (folder / "notes" / "private.md").write_text("mine\n", encoding="utf-8")
    with pytest.raises(UserError) as refused:
        write_back(folder, {"SKILL.md": "# s\n", "notes/private.md": "the run's\n"}, initial={"SKILL.md": "# s\n"},
                   base={"SKILL.md": "# s\n"})
    said = str(refused.value)
    assert "1 file(s) the run never read" in said and "(notes/private.md)" in said and "since the run started" not in said
    assert (folder / "notes" / "private.md").read_text(encoding="utf-8") == "mine\n"


def test_a_rollback_that_puts_the_files_back_but_cannot_record_it_says_so(tmp_path):
    """The backup's journal could not be written (a full disk, here a folder made read-only): the
    error said putting the files back had failed and the journal still said 'applying', while
    the target was whole again and its record said 'rolled back'."""
    from tests.test_removal import as_a_user

    found = as_a_user("""
    import json, os, tempfile
    from pathlib import Path
    os.environ["AGENTDESCENT_HOME"] = tempfile.mkdtemp()
    from agentdescent.artifacts import backups, targetlock
    from agentdescent.artifacts.undo import restore
    from agentdescent.errors import UserError
    folder = Path(tempfile.mkdtemp()) / "skill"
    folder.mkdir()
    (folder / "SKILL.md").write_text("be brief\\n")
    with targetlock.locked(folder):  # a write-back killed half way
        backup = backups.take(folder, made_by="write_to", paths=["SKILL.md"])
    (folder / "SKILL.md").write_text("half written\\n")
    os.chmod(backup.folder, 0o555)
    try:
        restore(folder)
        said = ""
    except UserError as exc:
        said = str(exc)
    print(json.dumps({"said": said, "now": (folder / "SKILL.md").read_text(),
                      "phase": backups.backups(folder)[0].record.phase}))
    """, tmp_path)
    assert found["now"] == "be brief\n" and found["phase"] == "rolled back"
    assert "was put back from" in found["said"] and "recording that failed (Permission denied)" in found["said"]

"""How many backups of a target are kept: the newest `pruning.KEEP`, the oldest past them removed
and forgotten once a write-back or restore ends; folders the registry does not trust, changed
copies and the backups of writes not yet settled are never touched; a removed backup asked for
by number is named as removed; a run's status stops naming a backup that is gone. Real files,
real processes for the command."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentdescent import UserError
from agentdescent.artifacts import backups, pruning, registry
from agentdescent.artifacts.undo import restore
from tests import keyword_domain as domain
from tests.runs_support import wait
from tests.test_backups import plant
from tests.test_writeback import agentdescent, files_of, make
from tests.writeback_child import result_of

KEEP = pruning.KEEP


def versions(skill: Path, count: int, start: int = 0) -> list:
    """Write `count` versions of the skill back, one after the other; their plans."""
    return [result_of({"SKILL.md": f"version {n}\n"}).write_to(skill) for n in range(start, start + count)]


def numbers_on_disk(target: Path) -> list[int]:
    found = [p.name for p in target.parent.iterdir() if p.name.startswith(f".{target.name}.bak-")]
    return sorted(int(name.rsplit("-", 1)[1]) for name in found)


def test_write_backs_and_restores_past_keep_keep_the_newest_keep_and_forget_the_rest(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    plans = versions(skill, KEEP + 2)  # backups 1 .. KEEP+2
    assert [p.removed for p in plans[:KEEP]] == [()] * KEEP
    assert plans[KEEP].removed == (1,) and plans[KEEP + 1].removed == (2,)
    restored = [restore(skill) for _ in range(3)]  # backups KEEP+3 .. KEEP+5
    assert [r.removed for r in restored] == [(3,), (4,), (5,)]
    newest = list(range(6, KEEP + 6))
    assert [b.number for b in backups.backups(skill)] == newest == numbers_on_disk(skill)
    assert [r.number for r in registry.load(skill)] == newest
    assert restored[-1].numbers == tuple(newest)
    assert pruning.said((3,)) == f"removed backup 3, the oldest past the {KEEP} kept"
    assert pruning.said((1, 2, 3, 5)) == f"removed backups 1 to 3, 5, the oldest past the {KEEP} kept"


def test_a_restore_after_pruning_puts_back_the_newest_backup(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    versions(skill, KEEP + 3)
    assert files_of(skill) == {"SKILL.md": f"version {KEEP + 2}\n".encode()}
    done = restore(skill)
    assert done.source == tmp_path / f".skill.bak-{KEEP + 3}" / "skill"
    assert files_of(skill) == {"SKILL.md": f"version {KEEP + 1}\n".encode()}
    again = restore(skill)  # undoes the restore, from the backup it took
    assert again.source == tmp_path / f".skill.bak-{KEEP + 4}" / "skill"
    assert files_of(skill) == {"SKILL.md": f"version {KEEP + 2}\n".encode()}


def test_an_untrusted_look_alike_and_a_changed_copy_are_never_removed(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    planted = plant(skill, 99, phase="done", paths=["SKILL.md"])
    visible = plant(skill, 98, phase="done", paths=["SKILL.md"]).rename(tmp_path / "skill.bak-98")
    versions(skill, 1)  # backup 100: numbers go on past the planted folder
    changed = tmp_path / ".skill.bak-100" / "skill" / "SKILL.md"
    changed.write_text("the user kept this here\n", encoding="utf-8")
    plans = versions(skill, KEEP + 2, start=1)
    assert [b for p in plans for b in p.removed] == [101, 102]  # 100 is not intact: neither counted nor removed
    assert planted.is_dir() and files_of(planted / "skill") == {"SKILL.md": b"mine\n"}
    assert visible == tmp_path / "skill.bak-98" and visible.is_dir()  # a visible look-alike too
    assert changed.read_text(encoding="utf-8") == "the user kept this here\n"
    assert [b.number for b in backups.backups(skill)] == [100, *range(103, 103 + KEEP)]
    assert any(r.startswith(".skill.bak-99 was not made by AgentDescent") for r in plans[-1].refused)


def test_the_backup_of_a_write_not_settled_is_never_removed(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    versions(skill, KEEP)
    half = backups.take(skill, made_by="write_to", paths=["SKILL.md"])  # a writer killed mid-write, not recovered
    assert pruning.prune(skill, keep=1) == tuple(range(1, KEEP))  # the settled ones past the newest settled
    assert half.folder.is_dir() and half.record.phase == "applying"
    assert [b.number for b in backups.backups(skill)] == [KEEP, KEEP + 1]


def test_a_removal_cut_short_is_finished_by_the_next_writer(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    versions(skill, 3)
    first = backups.backups(skill)[0]
    records = registry.load(skill)  # as `remove` leaves it when killed after deleting the journal
    registry.save(skill, [r.model_copy(update={"phase": "removing"}) if r.number == 1 else r for r in records])
    (first.folder / backups.JOURNAL).unlink()
    assert backups.restorable(skill, 1)[0] is None  # never put back once its removal has begun
    result_of({"SKILL.md": "again\n"}).write_to(skill)
    assert not first.folder.exists() and [r.number for r in registry.load(skill)] == [2, 3, 4]


def test_a_folder_that_will_not_go_now_is_removed_by_the_next_writer(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n", "docs/a.md": "a\n"})
    (skill / "docs").chmod(0o555)  # the copy keeps the mode: its files cannot be unlinked as they are
    try:
        plans = [result_of({"SKILL.md": f"v{n}\n", "docs/a.md": "a\n"}).write_to(skill) for n in range(KEEP + 1)]
    finally:
        (skill / "docs").chmod(0o755)
    assert plans[-1].removed == (1,) and not (tmp_path / ".skill.bak-1").exists()


def test_restore_of_a_removed_backup_says_it_was_removed_and_which_there_are(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    versions(skill, KEEP + 3)
    with pytest.raises(UserError, match=f"backup 2 of {skill} was removed: only the newest {KEEP} backups"):
        restore(skill, 2)
    done = agentdescent("restore", str(skill), "--backup", "3")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    said = " ".join(done.stderr.split())
    assert f"backup 3 of {skill} was removed" in said
    assert f"the backups there are: {', '.join(map(str, range(4, KEEP + 4)))} " in said
    assert "no backup number 99" in str(pytest.raises(UserError, restore, skill, 99).value)


def test_the_restore_command_says_what_it_removed_and_lists_only_the_kept(tmp_path):
    skill = make(tmp_path / "skill", {"SKILL.md": "mine\n"})
    versions(skill, KEEP)
    done = agentdescent("restore", str(skill))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stdout.split())
    assert f"removed backup 1, the oldest past the {KEEP} kept" in said
    assert f"backups {', '.join(map(str, range(2, KEEP + 2)))} in {tmp_path / '.skill.bak-*'}" in said


def test_a_run_whose_backup_was_removed_stops_naming_it_and_is_accepted_again(service, tmp_path):
    target = tmp_path / "prompt.md"
    run_id = service.start(domain.spec(tmp_path, rounds=2)).run_id
    wait(service, run_id)
    service.accept(run_id)  # backup 1: what the target held
    back = service.restore(target)  # backup 2: the run's version
    assert back.runs == {run_id: "restored"} and service.status(run_id).backup == str(tmp_path / ".prompt.md.bak-2" / "prompt.md")
    for n in range(KEEP):  # write-backs outside any run: backups 3 .. KEEP+2, 1 and 2 removed
        result_of(f"edit {n}\n").write_to(target)
    assert not (tmp_path / ".prompt.md.bak-2").exists()
    again = service.restore(target)
    assert again.removed == [3] and "removed backup 3" in again.message
    status = service.status(run_id)
    assert status.state == "restored" and status.backup is None
    assert "is no longer there" in status.message and run_id in status.next and "writes the run's version again" in status.next
    accepted = service.accept(run_id, overwrite=True)  # over the edits made outside it
    assert "rule k" in target.read_text(encoding="utf-8") and accepted.removed == [4]
    assert service.status(run_id).state == "accepted"


def test_a_restore_lists_at_most_the_kept_backups_even_before_any_was_removed():
    from agentdescent.runs.restoring import listing

    assert listing(Path("a/skill"), list(range(1, KEEP + 5))) == (
        f"backups {', '.join(map(str, range(5, KEEP + 5)))} (and 4 older, removed by the next write-back or restore) "
        "in a/.skill.bak-*")
    assert listing(Path("a/skill"), [1, 2]) == "backups 1, 2 in a/.skill.bak-*"

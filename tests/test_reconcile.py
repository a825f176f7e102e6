"""A write-back never loses what the user wrote after the run started: the three-way outcome per
file (artifacts/reconcile.py), the write-back that follows it, and `accept` on a real run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent import UserError
from agentdescent.artifacts.reconcile import Reconciled, reconcile
from agentdescent.artifacts.writeback import write_back
from tests.mcp_support import REPO, demo_spec
from tests.runs_support import wait

# --- the outcome per file ---------------------------------------------------------------------


@pytest.mark.parametrize(("base", "ours", "theirs", "expected", "kind"), [
    (b"a\n", b"A\n", b"a\n", b"A\n", None),                                  # only the run changed it
    (b"a\n", b"a\n", b"U\n", b"U\n", "kept"),                                # only the user did
    (b"a\nb\nc\n", b"A\nb\nc\n", b"a\nb\nC\n", b"A\nb\nC\n", "merged"),      # both, apart
    (b"a\n", b"A\n", b"U\n", b"A\n", "conflicts"),                           # both, on the same line
    (b"a\n", None, b"U\n", None, "conflicts"),                               # the run deletes the user's edit
    (b"a\n", b"a\n", None, None, "kept"),                                    # the user deleted it, the run did not touch it
    (b"a\n", b"A\n", None, b"A\n", "conflicts"),                             # the user deleted what the run changed
    (None, b"new\n", b"new\n", b"new\n", None),                              # both added the same file
    (None, b"new\n", b"mine\n", b"new\n", "conflicts"),                      # both added it, differently
    (b"a\n", b"A\n", b"\xff\n", b"A\n", "conflicts"),                        # the user's file is no longer text
], ids=["run-only", "user-only", "merged", "same-line", "delete-vs-edit", "user-deleted", "user-deleted-run-changed",
        "both-added-same", "both-added-different", "not-text"])
def test_each_file_takes_the_side_that_changed_it(base, ours, theirs, expected, kind):
    done = reconcile({"f": base}, {"f": ours}, {"f": theirs})
    assert done.contents == {"f": expected}
    for name in ("merged", "kept", "conflicts"):
        assert getattr(done, name) == (("f",) if name == kind else ())


lines = st.lists(st.sampled_from(["a", "b", "c", "d", "e", "x", "y"]), max_size=8)


@settings(max_examples=150, deadline=None)
@given(base=lines, ours=lines, theirs=lines)
def test_a_clean_outcome_keeps_every_line_the_user_added(base, ours, theirs):
    text = {name: "".join(f"{line}\n" for line in value).encode() for name, value in
            (("base", base), ("ours", ours), ("theirs", theirs))}
    done = reconcile({"f": text["base"]}, {"f": text["ours"]}, {"f": text["theirs"]})
    if done.conflicts:
        assert done.contents["f"] == text["ours"]  # what an overwrite would write; nothing is written without it
        return
    result = done.contents["f"].decode().splitlines()
    assert set(theirs) - set(base) <= set(result)
    if text["theirs"] == text["base"]:
        assert done.contents["f"] == text["ours"]
    if text["ours"] == text["base"]:
        assert done.contents["f"] == text["theirs"]


# --- the write-back ---------------------------------------------------------------------------


def a_skill(folder: Path) -> dict[str, str]:
    tree = {"SKILL.md": "# skill\nroute requests\n", "routing/billing.md": "one\ntwo\nthree\n", "old.md": "gone\n"}
    for path, text in tree.items():
        (folder / path).parent.mkdir(parents=True, exist_ok=True)
        (folder / path).write_text(text, encoding="utf-8")
    return tree


def test_the_users_edits_are_kept_or_merged_and_a_conflict_changes_nothing(tmp_path):
    folder = tmp_path / "skill"
    base = a_skill(folder)
    learned = {"SKILL.md": base["SKILL.md"], "routing/billing.md": "ONE\ntwo\nthree\n"}
    (folder / "SKILL.md").write_text("# skill\nroute requests\nmy own note\n", encoding="utf-8")
    (folder / "routing/billing.md").write_text("one\ntwo\nTHREE\n", encoding="utf-8")
    plan = write_back(folder, learned, initial=base, base=base)
    assert (folder / "SKILL.md").read_text(encoding="utf-8").endswith("my own note\n")
    assert (folder / "routing/billing.md").read_text(encoding="utf-8") == "ONE\ntwo\nTHREE\n"
    assert not (folder / "old.md").exists()  # deleted by the run, untouched by the user
    assert (plan.kept, plan.merged, plan.deleted) == (("SKILL.md",), ("routing/billing.md",), ("old.md",))
    assert "my own note" in (plan.backup / "SKILL.md").read_text(encoding="utf-8")

    before = {p: (folder / p).read_bytes() for p in ("SKILL.md", "routing/billing.md")}
    (folder / "routing/billing.md").write_text("uno\ntwo\nTHREE\n", encoding="utf-8")
    again = {"SKILL.md": base["SKILL.md"], "routing/billing.md": "EINS\ntwo\nthree\n"}
    dry = write_back(folder, again, initial=base, base=base, dry_run=True)
    assert dry.conflicts == ("routing/billing.md",) and "routing/billing.md" not in dry.written
    with pytest.raises(UserError, match=r"hold other text than the run started from.*routing/billing\.md.*overwrite"):
        write_back(folder, again, initial=base, base=base)
    assert (folder / "routing/billing.md").read_text(encoding="utf-8") == "uno\ntwo\nTHREE\n"
    assert (folder / "SKILL.md").read_bytes() == before["SKILL.md"]
    forced = write_back(folder, again, initial=base, base=base, overwrite=True)
    assert (folder / "routing/billing.md").read_text(encoding="utf-8") == "EINS\ntwo\nthree\n"
    assert (forced.backup / "routing/billing.md").read_text(encoding="utf-8") == "uno\ntwo\nTHREE\n"


def test_a_file_the_run_deletes_and_the_user_edited_is_a_conflict(tmp_path):
    folder = tmp_path / "skill"
    base = a_skill(folder)
    (folder / "old.md").write_text("gone? no, I rewrote it\n", encoding="utf-8")
    with pytest.raises(UserError, match="old.md"):
        write_back(folder, {k: v for k, v in base.items() if k != "old.md"}, initial=base, base=base)
    assert (folder / "old.md").read_text(encoding="utf-8") == "gone? no, I rewrote it\n"



@pytest.mark.parametrize("replaced", ["symlink", "folder"])
def test_a_file_the_run_deletes_and_the_user_replaced_is_a_conflict_and_stays(tmp_path, replaced):
    """A file the user turned into a link (or a folder) was left out of the comparison, and deleted."""
    folder = tmp_path / "skill"
    base = a_skill(folder)
    (folder / "old.md").unlink()
    if replaced == "symlink":
        (folder / "old.md").symlink_to("routing/billing.md")
    else:
        (folder / "old.md").mkdir()
        (folder / "old.md" / "mine.md").write_text("mine\n", encoding="utf-8")
    learned = {k: v for k, v in base.items() if k != "old.md"}
    assert write_back(folder, learned, initial=base, base=base, dry_run=True).conflicts == ("old.md",)
    with pytest.raises(UserError, match="old.md"):
        write_back(folder, learned, initial=base, base=base)
    assert os.path.islink(folder / "old.md") if replaced == "symlink" else (folder / "old.md" / "mine.md").is_file()
    assert (folder / "routing/billing.md").read_text(encoding="utf-8") == base["routing/billing.md"]


def test_links_the_user_made_where_the_run_changes_nothing_are_kept_and_the_write_goes_on(tmp_path):
    """A file or folder the run left as it was, made a link by the user, refused the whole accept
    with a fix (freeze it in the spec) that a run already made cannot take."""
    folder, elsewhere = tmp_path / "skill", tmp_path / "elsewhere"
    base = a_skill(folder)
    (folder / "routing" / "faq.md").write_text("faq\n", encoding="utf-8")
    base["routing/faq.md"] = "faq\n"
    (folder / "notes").mkdir()
    (folder / "SKILL.md").rename(folder / "notes" / "SKILL-real.md")
    (folder / "SKILL.md").symlink_to("notes/SKILL-real.md")
    learned = {**base, "old.md": "changed by the run\n"}
    plan = write_back(folder, learned, initial=base, base=base)
    assert plan.written == ("old.md",) and plan.kept == ("SKILL.md",)
    assert os.readlink(folder / "SKILL.md") == "notes/SKILL-real.md"
    shutil.move(folder / "routing", elsewhere)
    (folder / "routing").symlink_to(elsewhere)
    plan = write_back(folder, {**learned, "old.md": "again\n"}, initial=base, base=learned)
    assert plan.written == ("old.md",) and plan.kept == ("SKILL.md", "routing/billing.md", "routing/faq.md")
    assert os.readlink(folder / "routing") == str(elsewhere)
    changes_under_the_link = {**learned, "old.md": "again\n", "routing/faq.md": "FAQ\n"}
    with pytest.raises(UserError, match=r"routing is a symlink, and the run changes routing/faq\.md .*put the folder "
                                        r"itself where the link is"):
        write_back(folder, changes_under_the_link, initial=base, base={**learned, "old.md": "again\n"})
    assert (elsewhere / "faq.md").read_text(encoding="utf-8") == "faq\n"


def test_a_file_the_run_changes_and_the_user_made_a_link_is_a_conflict_overwritten_only_when_told(tmp_path):
    folder, outside = tmp_path / "skill", tmp_path / "outside.md"
    base = a_skill(folder)
    outside.write_text("one\ntwo\nthree\n", encoding="utf-8")
    (folder / "routing/billing.md").unlink()
    (folder / "routing/billing.md").symlink_to(outside)
    learned = {**base, "routing/billing.md": "ONE\ntwo\nthree\n"}
    with pytest.raises(UserError, match="routing/billing.md"):
        write_back(folder, learned, initial=base, base=base)
    assert os.readlink(folder / "routing/billing.md") == str(outside)
    plan = write_back(folder, learned, initial=base, base=base, overwrite=True)
    assert plan.conflicts == ("routing/billing.md",) and "routing/billing.md" in plan.written
    assert not os.path.islink(folder / "routing/billing.md")
    assert (folder / "routing/billing.md").read_text(encoding="utf-8") == "ONE\ntwo\nthree\n"
    assert outside.read_text(encoding="utf-8") == "one\ntwo\nthree\n"  # the link was replaced, never written through
    assert os.readlink(plan.backup / "routing/billing.md") == str(outside)


def test_a_conflict_says_how_the_disk_differs_line_endings_a_file_gone_or_replaced(tmp_path):
    """Line endings alone, or a file deleted or renamed, were told as text edited since the start."""
    folder = tmp_path / "skill"
    base = a_skill(folder)
    (folder / "notes.md").write_text("a\nb\n", encoding="utf-8")
    base["notes.md"] = "a\nb\n"
    (folder / "routing/billing.md").write_bytes(b"one\r\ntwo\nthree\r\n")
    (folder / "SKILL.md").rename(folder / "SKILL-renamed.md")
    (folder / "notes.md").unlink()
    (folder / "notes.md").symlink_to("SKILL-renamed.md")
    learned = {"SKILL.md": "# skill\nroute all requests\n", "routing/billing.md": "ONE\ntwo\nthree\n",
               "old.md": "gone\n", "notes.md": "a\nB\n"}
    with pytest.raises(UserError) as refused:
        write_back(folder, learned, initial=base, base=base)
    said = str(refused.value)
    assert "1 file(s) on disk differ from what the run started from only in their line endings, now a mix of CRLF " \
           "and LF, which the run's change cannot be written in, and the run changed them (routing/billing.md)" in said
    assert "dos2unix" not in said and "accept again" not in said  # the file is the user's: never told to convert it
    assert "1 file(s) the run changed are gone from disk, deleted or renamed since it started (SKILL.md)" in said
    assert "no longer the regular file it started from: a symlink or a folder is there now (notes.md)" in said
    assert "hold other text" not in said

def test_a_file_whose_line_endings_or_mark_alone_are_not_the_base_s_takes_the_run_s_change_in_them(tmp_path):
    """Converted to CRLF or given a byte-order mark after the run read it, a file is no conflict:
    the run's change is written in the file's form, and an edit of the user's beside it merges."""
    folder = tmp_path / "skill"
    base = a_skill(folder)
    (folder / "routing/billing.md").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    (folder / "SKILL.md").write_bytes(b"\xef\xbb\xbf# skill\nroute requests\n")
    base["notes.md"] = "a\nb\nc\n"
    (folder / "notes.md").write_bytes(b"a\r\nb\r\nc\r\nmine\r\n")
    learned = {"SKILL.md": "# skill\nroute all requests\n", "routing/billing.md": "ONE\ntwo\nthree\n",
               "old.md": "gone\n", "notes.md": "A\nb\nc\n"}
    plan = write_back(folder, learned, initial=base, base=base)
    assert (folder / "routing/billing.md").read_bytes() == b"ONE\r\ntwo\r\nthree\r\n"
    assert (folder / "SKILL.md").read_bytes() == b"\xef\xbb\xbf# skill\nroute all requests\n"
    assert (folder / "notes.md").read_bytes() == b"A\r\nb\r\nc\r\nmine\r\n"
    assert plan.merged == ("SKILL.md", "notes.md", "routing/billing.md") and plan.conflicts == ()
    assert reconcile({"f": b"a\n"}, {"f": b"A\n"}, {"f": b"A\r\n"}).contents == {"f": b"A\r\n"}  # made it already


@pytest.mark.parametrize("converted", [b"gone\r\n", b"\xef\xbb\xbfgone\n", b"gone\r"], ids=["crlf", "byte-order-mark", "cr"])
def test_a_file_the_run_deletes_whose_line_endings_or_mark_alone_changed_is_deleted(tmp_path, converted):
    """It was planned as written and merged (with no text), and the write crashed on it."""
    folder = tmp_path / "skill"
    base = a_skill(folder)
    (folder / "old.md").write_bytes(converted)
    learned = {"SKILL.md": "# skill\nroute all requests\n", "routing/billing.md": base["routing/billing.md"]}
    dry = write_back(folder, learned, initial=base, base=base, dry_run=True)
    assert (dry.written, dry.deleted, dry.merged, dry.conflicts) == (("SKILL.md",), ("old.md",), (), ())
    assert reconcile({"f": b"gone\n"}, {"f": None}, {"f": converted}) == Reconciled(contents={"f": None})
    mixed = reconcile({"f": b"a\nb\n"}, {"f": None}, {"f": b"a\r\nb\n"})  # no form to write the run's change in: none is needed
    assert mixed == Reconciled(contents={"f": None})
    plan = write_back(folder, learned, initial=base, base=base)
    assert (plan.written, plan.deleted, plan.merged) == (dry.written, dry.deleted, dry.merged)
    assert not (folder / "old.md").exists() and (plan.backup / "old.md").read_bytes() == converted
    assert (folder / "SKILL.md").read_text(encoding="utf-8") == learned["SKILL.md"]


def test_a_file_the_user_made_where_the_run_made_one_is_refused_as_the_users_own(tmp_path):
    """The refusal said the file was left out of the run and to freeze it: it did not exist then."""
    folder = tmp_path / "skill"
    base = a_skill(folder)
    (folder / "tips.md").write_text("my tips\n", encoding="utf-8")
    with pytest.raises(UserError, match=r"made on disk since it started.*\(tips\.md\); rename yours"):
        write_back(folder, {**base, "tips.md": "the run's tips\n"}, initial=base, base=base)
    assert (folder / "tips.md").read_text(encoding="utf-8") == "my tips\n"


def test_a_file_already_holding_the_run_s_text_in_other_line_endings_is_left_in_them(tmp_path):
    """Converted to CRLF by the user: a file the run did not change, one where the user made the
    run's very change, and one both added were written over in LF."""
    folder = tmp_path / "skill"
    base = a_skill(folder)
    (folder / "SKILL.md").write_bytes(b"# skill\r\nroute requests\r\n")
    (folder / "routing/billing.md").write_bytes(b"ONE\r\ntwo\r\nthree\r\n")
    (folder / "new.md").write_bytes(b"\xef\xbb\xbfadded\r\n")
    on_disk = {path: (folder / path).read_bytes() for path in ("SKILL.md", "routing/billing.md", "new.md")}
    learned = {"SKILL.md": base["SKILL.md"], "routing/billing.md": "ONE\ntwo\nthree\n", "new.md": "added\n"}
    for dry_run in (True, False):
        plan = write_back(folder, learned, initial=base, base=base, dry_run=dry_run)
        assert (plan.written, plan.deleted) == ((), ("old.md",)) and plan.unchanged == tuple(sorted(on_disk))
    assert {path: (folder / path).read_bytes() for path in on_disk} == on_disk


def test_a_crlf_file_read_the_ordinary_python_way_is_written_back_with_the_change_in_crlf(tmp_path):
    """`Path.read_text` gives the run the file with LF: the file is not the run's base, yet the
    user never edited it."""
    from agentdescent import SingleSlot, evolve
    from tests.doubles import year_program

    tasks, reward, run, propose = year_program()
    prompt = tmp_path / "system_prompt.md"
    prompt.write_bytes(b"Line one.\r\nLine two.\r\n")
    result = evolve(tasks, reward, run=run, propose=propose, strategy=SingleSlot(prompt.read_text(encoding="utf-8")),
                    rounds=1, n_workers=1)
    plan = result.write_to(prompt)
    assert prompt.read_bytes() == b"Line one.\r\nLine two.\r\nalways state the year\r\n"
    assert plan.written == ("system_prompt.md",) and plan.conflicts == ()


def test_a_text_target_edited_since_the_start_merges(tmp_path):
    target = tmp_path / "prompt.md"
    target.write_text("Added by me.\nAnswer with the code.\n\nSay please.\n", encoding="utf-8")
    plan = write_back(target, "Answer with the code.\n\nSay please.\nrule k0.\n", base="Answer with the code.\n\nSay please.\n")
    assert target.read_text(encoding="utf-8") == "Added by me.\nAnswer with the code.\n\nSay please.\nrule k0.\n"
    assert plan.merged == ("prompt.md",) and plan.written == ("prompt.md",)


# --- accept on a run ------------------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "agentdescent", *args], capture_output=True, text=True, timeout=120,
                          env=os.environ.copy(), cwd=REPO)


def test_edits_made_while_a_run_goes_survive_its_accept(service, tmp_path):
    target = tmp_path / "skill"
    shutil.copytree(REPO / "examples/skills/support-router", target)
    started = service.start(demo_spec(target))
    with (target / "SKILL.md").open("a", encoding="utf-8") as handle:
        handle.write("A line I added by hand.\n")
    billing = target / "routing/billing.md"
    billing.write_text("A line I put on top.\n" + billing.read_text(encoding="utf-8"), encoding="utf-8")
    assert wait(service, started.run_id).state == "finished"
    assert "routing/billing.md" in service.show(started.run_id).files_changed

    dry = cli("accept", started.run_id, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "kept as it changed on disk since the run started: SKILL.md" in dry.stdout and "would write: SKILL.md" not in dry.stdout
    assert "routing/billing.md (merged with what changed on disk)" in dry.stdout
    done = service.accept(started.run_id)
    assert done.kept == ["SKILL.md"] and "routing/billing.md" in done.merged
    assert (target / "SKILL.md").read_text(encoding="utf-8").endswith("A line I added by hand.\n")
    assert billing.read_text(encoding="utf-8").startswith("A line I put on top.\n")
    assert billing.read_text(encoding="utf-8") != "A line I put on top.\n" + (
        REPO / "examples/skills/support-router/routing/billing.md").read_text(encoding="utf-8")  # the run's edit is in


def finished_skill_run(service, tmp_path) -> tuple[Path, str, list[str]]:
    """A copy of support-router evolved to its end: the copy, the run's id, the files it changes."""
    target = tmp_path / "skill"
    shutil.copytree(REPO / "examples/skills/support-router", target)
    started = service.start(demo_spec(target))
    assert wait(service, started.run_id).state == "finished"
    return target, started.run_id, service.show(started.run_id).files_changed


def test_files_converted_to_crlf_while_a_run_goes_take_its_change_in_crlf_on_accept(service, tmp_path):
    target, run_id, changed = finished_skill_run(service, tmp_path)
    for path in changed:
        (target / path).write_bytes((target / path).read_bytes().replace(b"\n", b"\r\n"))
    done = service.accept(run_id)
    assert set(done.written) == set(changed) and not done.conflicts
    run_s = {path: (Path(done.backup) / path).read_bytes() for path in changed}  # the backup: the user's CRLF files
    for path in changed:
        now = (target / path).read_bytes()
        assert now.count(b"\r\n") == now.count(b"\n") and now != run_s[path], path


def test_an_edit_that_cannot_merge_stops_the_accept_until_overwrite(service, tmp_path):
    target, run_id, changed = finished_skill_run(service, tmp_path)
    mine = {path: f"my own version of {path}\n" for path in changed}
    for path, text in mine.items():
        (target / path).write_text(text, encoding="utf-8")
    with pytest.raises(UserError, match="nothing was changed"):
        service.accept(run_id)
    assert {path: (target / path).read_text(encoding="utf-8") for path in changed} == mine
    assert service.status(run_id).state == "finished"
    done = service.accept(run_id, overwrite=True)
    assert set(done.written) == set(changed)
    assert all((Path(done.backup) / path).read_text(encoding="utf-8") == mine[path] for path in changed)


def test_a_target_moved_away_while_the_run_goes_is_not_made_anew_by_its_accept(service, tmp_path):
    """Made anew, the folder would hold only the files the run read: its frozen hook would be gone."""
    target = tmp_path / "skill"
    shutil.copytree(REPO / "examples/skills/support-router", target)
    started = service.start(demo_spec(target))
    target.rename(tmp_path / "skill-moved")
    assert wait(service, started.run_id).state == "finished"
    for dry_run in (True, False):
        with pytest.raises(UserError, match=r"skill is not there: it was moved or deleted after run .* Put it back"):
            service.accept(started.run_id, dry_run=dry_run)
    assert not target.exists() and service.status(started.run_id).state == "finished"
    (tmp_path / "skill-moved").rename(target)
    done = service.accept(started.run_id)
    assert done.written and (target / "hooks/pre.sh").is_file()


def test_a_file_merged_by_hand_after_a_refused_write_back_stands():
    """Accept said to merge by hand and accept again; the hand-merged file conflicted again, for ever."""
    base, ours = {"f": b"a\nb\n"}, {"f": b"a\nRULE1\nRULE2\nb\n"}
    merged_by_hand = {"f": b"a\nRULE2\nMINE\nRULE1\nb\n"}
    done = reconcile(base, ours, merged_by_hand)
    assert done.kept == ("f",) and done.conflicts == () and done.contents == merged_by_hand
    assert reconcile(base, ours, {"f": b"a\nMINE\nb\n"}).conflicts == ("f",)  # without the run's lines: still both
    assert reconcile({"f": b"a\nb\nc\n"}, {"f": b"a\nc\n"}, {"f": b"a\nb\nX\nc\n"}).conflicts == ("f",)  # b kept


def test_a_line_split_where_str_splitlines_breaks_does_not_pass_for_the_run_s_change():
    """The run swapped the two halves of a line held together by U+2028, the user edited that line:
    the disk holds both halves, but not the run's line, so it is a conflict, not a hand merge."""
    base, ours = {"f": "A.\u2028B.\n".encode()}, {"f": "B.\u2028A.\n".encode()}
    done = reconcile(base, ours, {"f": "A.\u2028B!\nB.\n".encode()})
    assert done.conflicts == ("f",) and done.kept == ()

"""Putting paths back stays inside the target, whatever a journal, a record or a caller lists:
properties over arbitrary path lists (absolute, '..', backslashes, NUL, empty segments, long
names, unicode), each checked against sentinel files beside and above the target."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent import UserError
from agentdescent.artifacts import backups, putback, registry
from agentdescent.artifacts.registry import Record
from agentdescent.artifacts.undo import recover, restore
from tests.test_writeback import make, snapshot
from tests.writeback_child import result_of

SEGMENT = st.sampled_from(["..", ".", "", "a", "refs", "SKILL.md", "victim.txt", "above.txt", "x" * 300, "n\x00l",
                           "b\\..\\..", "C:", "ü", "e\u0301", "日本", ".git", "CON", "end.", "\u202e"]) | st.text(max_size=6)
PATH = st.builds(lambda lead, parts: lead + "/".join(parts), st.sampled_from(["", "", "/", "//", "\\", "C:\\"]),
                 st.lists(SEGMENT, max_size=5))
PATHS = st.lists(PATH, max_size=6)
BOUNDED = settings(max_examples=40, deadline=None)


def sandbox(root: Path) -> tuple[Path, Path]:
    """box/above.txt, box/victim.txt, box/a/{beside.txt,victim.txt}, the target box/a/target and a
    copy of it with different content at box/a/copy/target (and beside the copy, files of its own)."""
    box = root / "box"
    make(box, {"above.txt": "above\n", "victim.txt": "victim\n", "a/beside.txt": "beside\n", "a/victim.txt": "v\n"})
    target = make(box / "a" / "target", {"SKILL.md": "now\n", "refs/a.md": "a\n", "added.md": "later\n"})
    make(box / "a" / "copy", {"target/SKILL.md": "then\n", "target/refs/a.md": "a0\n", "victim.txt": "from copy\n",
                              "above.txt": "from copy\n"})
    return box, target


def outside(box: Path, target: Path) -> dict[str, object]:
    """Every entry under `box` but the target's and the journals in its backup folders."""
    return {k: v for k, v in snapshot(box).items() if not (box / k).is_relative_to(target)
            and not k.endswith(backups.JOURNAL) and backups.JOURNAL + "." not in k}


def inside(target: Path, rel: str) -> bool:
    joined = os.path.normpath(os.path.join(target, rel))
    return joined == str(target) or joined.startswith(str(target) + os.sep)


@BOUNDED
@given(paths=PATHS, from_copy=st.booleans())
def test_put_back_changes_nothing_outside_the_target(paths, from_copy):
    with tempfile.TemporaryDirectory() as folder:
        box, target = sandbox(Path(folder))
        before, inner = outside(box, target), snapshot(target)
        try:
            putback.put_back(target, box / "a" / "copy" / "target" if from_copy else None, paths)
        except UserError:
            assert any(putback.path_reason(p) for p in paths) and snapshot(target) == inner  # refused up front
        except OSError:
            pass  # a path the file system cannot hold: it failed, inside the target
        else:
            assert all(putback.path_reason(p) is None and inside(target, p) for p in paths)
        assert outside(box, target) == before


@settings(max_examples=300, deadline=None)
@given(rel=PATH | st.text())
def test_every_path_accepted_lies_inside_the_target(rel):
    if putback.path_reason(rel) is None:
        assert inside(Path("/t/target"), rel) and "\x00" not in rel and "\\" not in rel
        assert rel == "" or not {"", ".", ".."} & set(rel.split("/"))


@BOUNDED
@given(paths=PATHS, phase=st.sampled_from(["applying", "copying", "done"]))
def test_recover_and_restore_never_act_on_a_planted_journal(paths, phase):
    with tempfile.TemporaryDirectory() as folder:
        box, target = sandbox(Path(folder))
        original = snapshot(target)
        result_of({"SKILL.md": "evolved\n", "refs/a.md": "a\n"}).write_to(target)
        planted = box / "a" / ".target.bak-7"
        make(planted, {"target/SKILL.md": "planted\n", "victim.txt": "planted\n"})
        (planted / backups.JOURNAL).write_text(json.dumps({"format": 1, "made_by": "write_to", "phase": phase,
                                                           "existed": True, "paths": paths}), encoding="utf-8")
        before = snapshot(box)
        assert recover(target) == [] and snapshot(box) == before
        done = restore(target)
        assert done.refused[0].startswith(".target.bak-7 was not made by AgentDescent")
        assert snapshot(target) == original  # from the real backup, bak-1
        made = box / "a" / ".target.bak-8"  # restore's own backup of what it replaced
        assert {k: v for k, v in snapshot(box).items() if not (box / k).is_relative_to(target)
                and not (box / k).is_relative_to(made)} == {k: v for k, v in before.items()
                                                           if not (box / k).is_relative_to(target)}


@BOUNDED
@given(paths=PATHS)
def test_a_forged_record_is_refused_or_kept_inside_the_target(paths):
    """A record in the registry itself with arbitrary paths: either refused as damaged, or its
    rollback touches the target only."""
    with tempfile.TemporaryDirectory() as folder:
        box, target = sandbox(Path(folder))
        forged = box / "a" / ".target.bak-1"
        make(forged, {"target/SKILL.md": "forged\n", "victim.txt": "forged\n"})
        journal = {"format": 1, "made_by": "write_to", "phase": "applying", "existed": True, "paths": paths}
        (forged / backups.JOURNAL).write_text(json.dumps(journal), encoding="utf-8")
        record = {"folder": forged.name, "number": 1, "digest": registry.digest(forged / "target"), **journal}
        del record["format"]
        registry.file_of(target).parent.mkdir(parents=True, exist_ok=True)
        registry.file_of(target).write_text(json.dumps({"format": 1, "target": registry.key(target),
                                                        "backups": [record]}), encoding="utf-8")
        before = outside(box, target)
        refused = any(putback.path_reason(p) for p in paths)
        try:
            recover(target)
        except UserError as exc:  # damaged, or a valid path the file system could not put back
            assert ("damaged" in str(exc)) == refused
        else:
            assert not refused
        assert outside(box, target) == before


@BOUNDED
@given(paths=PATHS.filter(lambda ps: any(putback.path_reason(p) for p in ps)))
def test_rollback_of_a_record_that_skipped_validation_still_refuses_its_paths(paths):
    with tempfile.TemporaryDirectory() as folder:
        box, target = sandbox(Path(folder))
        (box / "a" / ".target.bak-1").mkdir()
        record = Record.model_construct(folder=".target.bak-1", number=1, made_by="write_to", existed=False,
                                        phase="applying", paths=paths, digest=None)
        before = snapshot(box)
        with pytest.raises(UserError, match="refusing to put back"):
            backups.rollback(target, backups.Backup(box / "a" / ".target.bak-1", 1, "target", record))
        assert snapshot(box) == before


def test_put_back_goes_through_no_symlink_on_either_side(tmp_path):
    target = make(tmp_path / "target", {"SKILL.md": "now\n"})
    copy = make(tmp_path / "copy" / "target", {"SKILL.md": "then\n", "refs/a.md": "a0\n"})
    make(tmp_path / "elsewhere", {"a.md": "not the target's\n"})
    (target / "refs").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    (copy / "hooks").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    putback.put_back(target, copy, ["refs/a.md", "hooks/a.md", "hooks"])
    assert (tmp_path / "elsewhere" / "a.md").read_text(encoding="utf-8") == "not the target's\n"
    assert not (target / "refs").is_symlink() and (target / "refs" / "a.md").read_text(encoding="utf-8") == "a0\n"
    assert os.readlink(target / "hooks") == str(tmp_path / "elsewhere")  # a link put back as a link, not entered
    (tmp_path / "link-copy").symlink_to(copy, target_is_directory=True)
    with pytest.raises(UserError, match="it is a symlink"):
        putback.put_back(target, tmp_path / "link-copy", ["SKILL.md"])

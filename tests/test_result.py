"""EvolveResult: outcome counts and the opt-in write-back (backup first, atomic, frozen untouched)."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
from dataclasses import replace

import pytest

from agentdescent import FileTree, UserError, evolve
from agentdescent.result import EvolveResult
from tests.doubles import echo, numbered_tasks


def text_result(tmp_path) -> EvolveResult:
    tasks = numbered_tasks(8)
    return evolve(tasks, lambda t, o: float("year" in o), run=echo, propose=lambda *a: "state the year",
                  rounds=2, n_workers=2, store=tmp_path / "ledger")


def tree_result(tmp_path, tree) -> EvolveResult:
    """A tree run whose proposals add a line to SKILL.md and try to rewrite the frozen hook."""
    tasks = numbered_tasks(8)
    strategy = FileTree(tree, frozen=["hooks/*"])
    proposal = '<file path="SKILL.md">be concise\n</file>'
    return evolve(tasks, lambda t, o: float("concise" in o), run=lambda r, t: r.get("SKILL.md", ""),
                  propose=lambda *a: proposal, strategy=strategy, rounds=2, n_workers=2, store=tmp_path / "ledger")


def test_a_result_whose_ledger_is_gone_says_so_and_makes_no_new_one(tmp_path):
    result = EvolveResult.from_json(text_result(tmp_path).to_json())
    shutil.rmtree(result.ledger_path)  # `runs --prune`, or a cleaned temp folder
    with pytest.raises(UserError, match=f"ledger is no longer at {re.escape(str(result.ledger_path))}: .*result.state"):
        result.ledger
    assert not result.ledger_path.exists()
    assert "state the year" in result.write_to(tmp_path / "rules.md").target.read_text(encoding="utf-8")


def test_a_rendering_json_gives_back_is_stored_and_any_other_is_refused_by_name(tmp_path):
    """A custom strategy's render may return anything (the docs' Bullets returns a list)."""
    result = text_result(tmp_path)
    listed = replace(result, rendered=["- state the year"], initial_rendered=[])
    again = EvolveResult.from_json(listed.to_json())
    assert again == listed and again.rendered == ["- state the year"]
    for name, value, kind in [("rendered", object(), "object"), ("rendered", ("- a",), "tuple"),
                              ("initial_rendered", {1: "a"}, "dict")]:
        with pytest.raises(UserError, match=f"to_json cannot store result.{name}: the strategy's render returned a "
                                            f"{kind}, which JSON does not give back as it is"):
            replace(result, **{name: value}).to_json()


def test_from_json_refuses_a_format_it_does_not_read(tmp_path):
    stored = json.loads(text_result(tmp_path).to_json())
    assert stored["format"] == 1
    for written in (2, "1"):
        with pytest.raises(UserError, match=f"stored in format «{written}», and this version of agentdescent reads "
                                            "format 1 only"):
            EvolveResult.from_json(json.dumps({**stored, "format": written}))


def test_outcomes_count_each_kind(tmp_path):
    result = text_result(tmp_path)
    assert result.outcomes() == {"committed": 1, "duplicate": 3}  # 2 workers x 2 proposals, all the same
    assert sum(result.outcomes().values()) == len(result.outcome_list)


def test_a_result_is_plain_data_that_pickles_and_opens_its_ledger(tmp_path):
    result = text_result(tmp_path)
    copy = pickle.loads(pickle.dumps(result))
    assert (copy.state, copy.history, copy.outcome_list) == (result.state, result.history, result.outcome_list)
    assert copy.usage.calls == result.usage.calls > 0
    assert copy.ledger_path == tmp_path / "ledger"
    with copy.ledger as ledger:
        assert ledger.snapshot("artifact", copy.version) == copy.state


def test_text_write_back_backs_up_first(tmp_path):
    result = text_result(tmp_path)
    target = tmp_path / "prompt.md"
    assert result.write_to(target).backup is None  # nothing to back up yet
    assert target.read_text(encoding="utf-8") == "- state the year"
    target.write_text("my own edits", encoding="utf-8")
    with pytest.raises(UserError, match="hold other text than the run started from.*prompt.md"):
        result.write_to(target)  # the user's edit and the run's change do not merge: nothing is lost
    assert target.read_text(encoding="utf-8") == "my own edits"
    backup = result.write_to(target, overwrite=True).backup
    assert backup is not None and backup.read_text(encoding="utf-8") == "my own edits"
    assert target.read_text(encoding="utf-8") == "- state the year"
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_tree_write_back_leaves_frozen_files_alone(tmp_path):
    result = tree_result(tmp_path, {"SKILL.md": "old\n", "hooks/pre.sh": "exit 0\n"})
    assert result.state["SKILL.md"] == "be concise\n"
    folder = tmp_path / "skill"
    (folder / "hooks").mkdir(parents=True)
    (folder / "hooks" / "pre.sh").write_text("my hook\n", encoding="utf-8")
    (folder / "SKILL.md").write_text("old\n", encoding="utf-8")  # as the run started: a file gone would be a deletion of yours
    backup = result.write_to(folder).backup
    assert (folder / "SKILL.md").read_text(encoding="utf-8") == "be concise\n"
    assert (folder / "hooks" / "pre.sh").read_text(encoding="utf-8") == "my hook\n"
    assert (backup / "hooks" / "pre.sh").read_text(encoding="utf-8") == "my hook\n"


def test_frozen_files_are_refused_as_diffs(tmp_path):
    tasks = numbered_tasks(8)
    strategy = FileTree({"SKILL.md": "x\n", "hooks/pre.sh": "exit 0\n"}, frozen=["hooks/*"])
    result = evolve(tasks, lambda t, o: 0.0, run=lambda r, t: "", strategy=strategy, rounds=1, n_workers=2,
                    propose=lambda *a: '<file path="hooks/pre.sh">rm -rf /\n</file>', store=tmp_path / "l")
    assert result.outcomes() == {"refused_by_governance": 2 * 2}  # workers x proposals per worker
    assert "hooks/pre.sh" in result.outcome_list[0].reason
    assert result.state["hooks/pre.sh"] == "exit 0\n"


def test_tree_write_back_never_follows_a_symlink_out(tmp_path):
    """A folder the user linked elsewhere holds a file the run left as it was: kept, never written
    through (a link over a file the run changes is refused: tests/test_reconcile.py)."""
    result = tree_result(tmp_path, {"SKILL.md": "old\n", "refs/a.md": "a\n"})
    outside = tmp_path / "outside"
    outside.mkdir()
    folder = tmp_path / "skill"
    folder.mkdir()
    (folder / "SKILL.md").write_text("old\n", encoding="utf-8")
    (folder / "refs").symlink_to(outside, target_is_directory=True)
    plan = result.write_to(folder)
    assert plan.written == ("SKILL.md",) and plan.kept == ("refs/a.md",)
    assert os.path.islink(folder / "refs") and not list(outside.iterdir())


def test_tree_cannot_be_written_over_a_file(tmp_path):
    result = tree_result(tmp_path, {"SKILL.md": "old\n"})
    (tmp_path / "skill").write_text("x", encoding="utf-8")
    with pytest.raises(UserError, match="is a file"):
        result.write_to(tmp_path / "skill")

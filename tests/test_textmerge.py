import git
import pytest

from agentdescent.errors import LedgerError
from agentdescent.step.textmerge import merge_text

BASE = "x\ny\nz"


def test_disjoint_edits_merge():
    assert merge_text(BASE, "X\ny\nz", "x\ny\nZ") == "X\ny\nZ"


def test_both_append_different_lines_conflicts():
    assert merge_text(BASE, BASE + "\na", BASE + "\nb") is None


def test_identical_edits_give_that_edit():
    assert merge_text(BASE, "x\nY\nz", "x\nY\nz") == "x\nY\nz"


def test_one_side_unchanged_round_trips_exactly():
    assert merge_text(BASE, BASE + "\na", BASE) == "x\ny\nz\na"
    assert merge_text("a", "a", "a") == "a"
    assert merge_text("", "", "") == ""
    assert merge_text("x\n", "x\n", "x\ny\n") == "x\ny\n"


def test_unicode_round_trips():
    assert merge_text("é\nb\nc\n", "É\nb\nc\n", "é\nb\nç\n") == "É\nb\nç\n"


def test_git_failure_raises_ledger_error(monkeypatch):
    def fail(*args, **kwargs):
        raise git.GitCommandError(["git", "merge-file"], 255, b"boom")

    monkeypatch.setattr(git.Git, "merge_file", fail, raising=False)
    with pytest.raises(LedgerError, match="merge-file"):
        merge_text(BASE, "a", "b")

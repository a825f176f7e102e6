import git
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentdescent.errors import LedgerError
from agentdescent.step.textmerge import merge_text, stack_insertions

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


def test_insertions_at_one_place_stack_in_order():
    rules = "# billing\n\nwords:\n"
    assert stack_insertions(rules, [rules + "- invoice\n", rules + "- payment\n"]) == rules + "- invoice\n- payment\n"
    assert stack_insertions(rules, [rules + "- invoice\n", rules + "- invoice\n"]) == rules + "- invoice\n"  # once
    assert stack_insertions("a\nb\n", ["x\na\nb\n", "a\nb\ny\n"]) == "x\na\nb\ny\n"  # apart: both, where they go


def test_a_side_that_changes_or_removes_a_line_does_not_stack():
    assert stack_insertions("a\nb\n", ["a\nb\nc\n", "a\n"]) is None
    assert stack_insertions("a\nb\n", ["a\nB\n"]) is None


def test_lines_appended_after_a_last_line_with_no_newline_stack():
    assert stack_insertions("Route.", ["Route.\nA\n", "Route.\nB\n"]) == "Route.\nA\nB\n"
    assert stack_insertions("Route.", ["Route.\n", "Route."]) == "Route.\n"


@pytest.mark.parametrize("inside", ["\x0c", "\x0b", "\x1e", "\x85", "\u2028", "\u2029"])
def test_a_line_holding_what_str_splitlines_breaks_at_is_one_line(inside):
    base = f"Be helpful.{inside}Be kind.\n"
    assert stack_insertions(base, [base + "A\n", base + "B\n"]) == base + "A\nB\n"
    assert stack_insertions(base, [f"Be helpful.{inside}X\nBe kind.\n"]) is None  # a changed line is no insertion


def test_lines_appended_to_a_crlf_text_with_no_last_line_break_stack_with_crlf():
    base = "Be helpful.\r\nBe kind."
    assert stack_insertions(base, [base + "\r\nA\r\n", base + "\r\nB\r\n"]) == "Be helpful.\r\nBe kind.\r\nA\r\nB\r\n"


def test_a_line_with_no_newline_never_runs_into_the_next():
    assert stack_insertions("", ["tracking", "help"]) is None  # not "trackinghelp"
    assert stack_insertions("a\n", ["a\nb", "a\nc"]) is None
    assert stack_insertions("a\n", ["a\nb", "a\nc\n"]) is None
    assert stack_insertions("a\n", ["a\nb\n", "a\nc"]) == "a\nb\nc"  # the unterminated line is the last


_LINES = st.lists(st.sampled_from(["x\n", "y\n", "\n", "- a\n", "- b\n"]), max_size=8)


@given(base=_LINES, inserts=st.lists(st.lists(st.tuples(st.integers(0, 8), _LINES), max_size=3), min_size=1, max_size=3))
def test_stacking_keeps_base_and_every_side_in_order(base, inserts):
    sides = []
    for side_inserts in inserts:
        lines = list(base)
        for at, block in sorted(side_inserts, reverse=True):
            lines[min(at, len(lines)):min(at, len(lines))] = block
        sides.append(lines)
    stacked = stack_insertions("".join(base), ["".join(lines) for lines in sides])
    assert stacked is not None
    out = stacked.splitlines(keepends=True)
    assert _subsequence(base, out) and all(_subsequence(lines, out) for lines in sides)
    if len(sides) == 1:
        assert out == sides[0]  # one side stacked alone is itself


def _subsequence(part: list[str], whole: list[str]) -> bool:
    rest = iter(whole)
    return all(line in rest for line in part)

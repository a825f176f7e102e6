"""A change keeps the form of the file it changes: a model answers a CRLF file with LF lines (or a
line is appended with LF), leaves out a byte-order mark and the blanks lines ended with; as it came
the user's file would change on every line, mix both, and stop merging line by line with other
changes of it."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from agentdescent.artifacts.strategies import AppendRules, FileTree, SingleSlot
from agentdescent.artifacts.textform import BOM, edged, final_break, in_form_of, line_ending, matching
from agentdescent.runs import build
from agentdescent.runs.spec import RunSpec
from agentdescent.step.textmerge import stack_insertions

CRLF_SKILL = {"SKILL.md": "# Router\r\n\r\nRead routing/.\r\n", "routing/billing.md": "# billing\r\n\r\n- invoice\r\n"}


def test_line_ending_is_one_kind_throughout_or_none():
    assert line_ending("a\r\nb\r\n") == "\r\n" and line_ending("a\nb") == "\n"
    assert line_ending("a\r\nb\n") is None and line_ending("one line") is None and line_ending(None) is None
    assert (final_break("a\r\n"), final_break("a\n"), final_break("a")) == ("\r\n", "\n", "")


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\r\n"), max_size=8), min_size=1, max_size=6),
       st.sampled_from(["\n", "\r\n"]), st.sampled_from(["x\r\ny\r\n", "x\ny\n", "x\r\ny\n", "x"]))
def test_a_text_takes_the_endings_of_one_that_has_one_kind_and_keeps_its_lines(lines, ending, like):
    text = ending.join(lines) + ending
    out = matching(text, like)
    assert out.replace("\r\n", "\n") == text.replace("\r\n", "\n")  # the same lines
    assert line_ending(out) == (line_ending(like) or ending)


def test_a_whole_file_answered_with_lf_keeps_the_file_s_crlf_and_so_only_inserts():
    tree = FileTree(CRLF_SKILL)
    state = tree.initial_state()
    ours = '<file path="routing/billing.md">\n# billing\n\n- invoice\n- receipt\n</file>'
    theirs = '<file path="routing/billing.md">\n# billing\n\n- invoice\n- charged\n</file>'
    [edit] = tree.edits_for(state, ours)
    assert edit.after == "# billing\r\n\r\n- invoice\r\n- receipt\r\n"
    [other] = tree.edits_for(state, theirs)
    assert stack_insertions(edit.before, [edit.after, other.after]) == \
        "# billing\r\n\r\n- invoice\r\n- receipt\r\n- charged\r\n"  # two insertions stack, as in an LF file
    [new] = tree.edits_for(state, '<file path="routing/account.md">\n# account\n</file>')
    assert new.after == "# account\r\n"  # a new file as the folder's files are


def test_a_file_keeps_its_byte_order_mark():
    assert edged("a\nb\n", like=f"{BOM}x\ny") == f"{BOM}a\nb\n"
    assert edged(f"{BOM}a\n", like=f"{BOM}x\n") == f"{BOM}a\n" and edged("a\n", like="x\n") == "a\n"
    tree = FileTree({"notes.md": f"{BOM}# Notes\r\n- one"})
    [edit] = tree.edits_for(tree.initial_state(), '<file path="notes.md">\n# Notes\n- one\n- two\n</file>')
    assert edit.after == f"{BOM}# Notes\r\n- one\r\n- two\r\n"  # a last line break added stays: lines stack after it


def test_a_line_given_back_without_its_trailing_blanks_gets_them_back():
    before = "# Steps\nFirst this.  \nThen that.\n\n  \n"  # a Markdown hard break, and a line of blanks
    assert edged("# Steps\nFirst this.\nThen that.\nLast.\n\n\n", like=before) == \
        "# Steps\nFirst this.  \nThen that.\nLast.\n\n  \n"
    tree = FileTree({"steps.md": before})
    ours, theirs = (tree.edits_for(tree.initial_state(), f'<file path="steps.md">\n# Steps\nFirst this.\nThen that.\n\n\n'
                                                         f'{extra}\n</file>')[0].after for extra in ("A.", "B."))
    assert stack_insertions(before, [ours, theirs]) is not None  # both only insert lines, as in the file


def test_only_a_line_s_end_gets_its_blanks_back_not_a_place_str_splitlines_breaks_at():
    assert edged("Be helpful.\u2028Be kind.\n", like="Be helpful.  \u2028Be kind.\n") == "Be helpful.\u2028Be kind.\n"
    assert edged("a\x0cb\nc\n", like="a\x0cb  \n") == "a\x0cb  \nc\n"  # at its end, they come back


@given(st.lists(st.sampled_from(["a", "a ", "a  ", "b", "", "  ", "c\t"]), max_size=8),
       st.lists(st.sampled_from(["a", "a ", "b", "", "  ", "c"]), max_size=8))
def test_giving_back_trailing_blanks_changes_no_line_s_words(new, old):
    text, like = "".join(f"{line}\n" for line in new), "".join(f"{line}\n" for line in old)
    assert [line.rstrip() for line in edged(text, like).splitlines()] == [line.rstrip() for line in new]


def test_a_file_of_mixed_endings_keeps_each_kept_line_s_own_and_takes_new_lines_as_given():
    tree = FileTree({"a.md": "x\r\ny\n"})
    [edit] = tree.edits_for(tree.initial_state(), '<file path="a.md">\nx\ny\nz\n</file>')
    assert edit.after == "x\r\ny\nz\n"


def test_text_targets_keep_their_endings_and_their_last_line_break():
    slot = SingleSlot("You are kind.\r\nBe brief.\r\n")
    [edit] = slot.edits_for(slot.initial_state(), "Cite the year.")
    assert edit.after == "You are kind.\r\nBe brief.\r\nCite the year.\r\n"
    expected = {"You are kind.\r\n": "You are kind.\r\n- Cite the year.\r\n",
                "You are kind.\n": "You are kind.\n- Cite the year.\n", "You are kind.": "You are kind.\n- Cite the year."}
    spec = RunSpec.model_validate({"target": "prompt.md", "tasks": [{"id": "t", "prompt": "q", "gold": "a"}],
                                   "agent": "python:x:y", "strategy": "append"})
    for content, rendered in expected.items():
        rules = build.assemble(spec, [], content).strategy
        assert isinstance(rules, AppendRules) and rules.render({"rule-1": "Cite the year."}) == rendered


def test_a_text_in_the_form_of_a_file_takes_its_endings_and_its_mark_or_its_lack_of_one():
    assert in_form_of("a\nb\n", like=BOM + "x\r\n") == BOM + "a\r\nb\r\n"
    assert in_form_of(BOM + "a\r\nb\r\n", like="x\n") == "a\nb\n"
    assert in_form_of("a\nb\n", like="x\r\ny\n") == "a\nb\n"  # a file of mixed endings gives none of them

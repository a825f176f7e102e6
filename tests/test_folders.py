"""The folder index of the step: it answers what a check of the whole state answers, and stays
right as components are written over it one after another."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from agentdescent.artifacts.state import apply
from agentdescent.governance import clashes
from agentdescent.step.folders import Folders


def _whole_state_clash(state: dict[str, str], after: dict[str, str | None]) -> tuple[str, str] | None:
    """The check the index replaces: every key of the state after the change, looked at."""
    added = {k for k, text in after.items() if text is not None and k not in state}
    return next((p for p in clashes(apply(state, after)) if added & set(p)), None)


# Few names, two spellings, a look-alike and a full-width slash, so that clashes are common.
_names = st.sampled_from(["a", "A", "b", "a\uff0fb", "notes.md", "Notes.md", "nоtes.md", "refs", "Refs"])
_keys = st.lists(_names, min_size=1, max_size=3).map("/".join)
_changes = st.dictionaries(_keys, st.one_of(st.none(), st.just("x")), max_size=4)


def test_a_file_beside_a_folder_of_its_name_and_two_spellings_clash():
    folders = Folders({"notes.md": "x", "refs/a.md": "y", "SKILL.md": "z"})
    assert "'notes.md' and 'notes.md/x.md'" in folders.clash({"notes.md/x.md": "new"})
    assert "'Refs/b.md' and 'refs/a.md'" in folders.clash({"Refs/b.md": "new"})
    assert "one name spelt two ways" in folders.clash({"skill.md": "new"})
    assert folders.clash({"refs/b.md": "new", "notes.md": "edited", "other/c.md": "new"}) is None
    assert folders.clash({"notes.md": None, "notes.md/x.md": "new"}) is None  # the file goes, the folder may come
    assert folders.clash({"refs\uff0fa.md": "new"}) is not None  # a full-width slash is read as a slash


def test_written_changes_are_seen_by_the_next_check_and_deleted_keys_are_not():
    folders = Folders({"a.md": "x"})
    folders.write({"docs/x.md": "new"})
    assert folders.clash({"docs": "a file"}) is not None
    folders.write({"docs/x.md": None})
    assert folders.clash({"docs": "a file"}) is None


@settings(max_examples=300, deadline=None)
@given(state=st.dictionaries(_keys, st.just("x"), max_size=6), changes=st.lists(_changes, min_size=1, max_size=4))
def test_the_index_agrees_with_a_check_of_the_whole_state(state, changes):
    folders, current = Folders(state), dict(state)
    for after in changes:
        expected = _whole_state_clash(current, after)
        found = folders.clash(after)
        assert (found is None) == (expected is None), (current, after, found)
        if expected is not None:
            assert f"{expected[0]!r} and {expected[1]!r}" in found
        if found is None:  # as the step does: only a change that fits is written over the state
            folders.write(after)
            current = apply(current, after)

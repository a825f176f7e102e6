"""load_tree: a folder read into `{relative posix path: text}`, exactly, with nothing followed and
every refusal naming the file, the limit and the fix (or skipped and listed when asked)."""

from __future__ import annotations

import os

import pytest

from agentdescent import FileTree, UserError, load_tree

SKILL = {
    "SKILL.md": b"---\nname: pdf-forms\ndescription: Fill PDF forms. Use when a form must be filled.\n---\n\n"
                b"# PDF forms\n\nRead `references/api.md` first.\n",
    "references/api.md": b"# API\n\n- `fill(form, values)` \xe2\x80\x94 fills a form\n",
    "scripts/run.sh": b"#!/bin/sh\nset -eu\npython -m forms \"$@\"\n",
    "hooks/pre.sh": b"#!/bin/sh\nexit 0\n",
}


def write(root, files: dict[str, bytes]):
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)
    return root


def skill(tmp_path, extra: dict[str, bytes] | None = None):
    return write(tmp_path / "skill", {**SKILL, **(extra or {})})


def test_a_skill_folder_round_trips_exactly_in_key_order(tmp_path):
    root = skill(tmp_path)
    (root / "scripts" / "run.sh").chmod(0o755)
    tree = load_tree(root)
    assert tree == {key: data.decode("utf-8") for key, data in SKILL.items()}
    assert list(tree) == sorted(SKILL)
    assert FileTree(tree).initial_state() == tree  # the README's `FileTree(load_tree("my-skill/"))`
    assert load_tree(str(root) + "/") == tree


def test_line_endings_and_a_bom_are_kept_as_on_disk(tmp_path):
    root = write(tmp_path / "s", {"crlf.md": b"a\r\nb\r\n", "mixed.md": b"a\nb\r\nc\r", "bom.md": b"\xef\xbb\xbfhi\n"})
    assert load_tree(root) == {"bom.md": "\ufeffhi\n", "crlf.md": "a\r\nb\r\n", "mixed.md": "a\nb\r\nc\r"}


def test_keys_are_sorted_posix_paths_whatever_the_order_on_disk(tmp_path):
    names = ["z.md", "a/b.md", "a-c.md", "B.md", "a.md", "a/a/z.md", "é.md"]
    root = write(tmp_path / "s", {name: name.encode("utf-8") for name in names})
    first = load_tree(root)
    assert list(first) == sorted(names) and list(load_tree(root)) == list(first)


def test_version_control_cache_build_and_editor_litter_are_left_out(tmp_path):
    litter = [".git/config", ".git/objects/ab/cd", ".hg/store", ".svn/entries", "__pycache__/m.cpython-311.pyc",
              "references/__pycache__/x.pyc", ".pytest_cache/v", ".mypy_cache/x", ".ruff_cache/x", ".tox/x",
              "node_modules/pkg/index.js", ".venv/bin/python", "venv/lib/x", "build/lib/x.py", "scripts/dist/x",
              "forms.egg-info/PKG-INFO", "SKILL.md.bak-3/SKILL.md", "old.bak-20260101-120000/SKILL.md",
              "SKILL.md.bak-20260101-120000", ".SKILL.md.lock", ".SKILL.md.1f2e3d4c.tmp", ".DS_Store",
              "references/Thumbs.db", "stray.pyc", ".SKILL.md.swp", "SKILL.md~", ".gitattributes", ".gitmodules"]
    root = skill(tmp_path, {path: b"\0binary or not, never read\xff" for path in litter})
    (root / "scripts" / "build").write_bytes(b"make\n")  # a file named like a skipped folder is kept
    (root / "nested").mkdir()
    (root / "nested" / ".git").write_bytes(b"gitdir: ../.git/modules/nested\n")  # a submodule's pointer file
    os.symlink("user@host.1234:1700000000", root / ".#SKILL.md")  # emacs's lock: a dangling symlink
    os.symlink(tmp_path, root / "references" / ".venv")  # a linked environment
    assert load_tree(root) == {**{k: v.decode("utf-8") for k, v in SKILL.items()}, "scripts/build": "make\n"}


def test_include_picks_files_at_any_depth_and_exclude_wins(tmp_path):
    root = skill(tmp_path, {"references/old.md": b"old\n", "notes.txt": b"n\n"})
    assert list(load_tree(root, include=["*.md"])) == ["SKILL.md", "references/api.md", "references/old.md"]
    assert list(load_tree(root, include=["*.md"], exclude=["*/old.md"])) == ["SKILL.md", "references/api.md"]
    assert list(load_tree(root, exclude=["references", "scripts/*", "hooks/*"])) == ["SKILL.md", "notes.txt"]
    assert load_tree(root, include=["nothing-matches"]) == {}


def test_exclude_leaves_out_a_folder_unwalked_and_silences_what_it_matches(tmp_path):
    root = skill(tmp_path, {"data/blob.bin": b"\0\1\2", "assets/logo.png": b"\x89PNG\0"})
    os.symlink(tmp_path, root / "data" / "up")
    os.mkfifo(root / "pipe")
    assert load_tree(root, exclude=["data", "*.png", "pipe"]) == load_tree(skill(tmp_path / "clean"))


def _binary(root):
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR")
    return "logo.png", "binary"


def _not_utf8(root):
    (root / "notes.md").write_bytes(b"caf\xe9 au lait\n")  # latin-1
    return "notes.md", "not valid UTF-8"


def _oversize(root):
    (root / "references" / "big.md").write_bytes(b"x" * 1_001)
    return "references/big.md", "max_file_bytes=1,000"


def _link_to_a_file_inside(root):
    os.symlink("SKILL.md", root / "alias.md")
    return "alias.md", "symlink"


def _link_to_a_folder_outside(root):
    outside = root.parent / "outside"
    write(outside, {"secret.md": b"not part of the skill\n"})
    os.symlink(outside, root / "references" / "shared")
    return "references/shared", "symlink"


def _fifo(root):
    os.mkfifo(root / "scripts" / "pipe")
    return "scripts/pipe", "FIFO"


def _newline_in_name(root):
    (root / "a\nb.md").write_bytes(b"x\n")
    return "a\nb.md", "cannot be a key"


def _backslash_in_name(root):
    (root / "refs\\api.md").write_bytes(b"x\n")
    return "refs\\api.md", "cannot be a key"


def _case_clash(root):
    (root / "skill.md").write_bytes(b"lower case\n")
    return "skill.md", "'SKILL.md'"


def _case_clash_sorting_first(root):
    """A stray SKILL.MD sorts before SKILL.md: the refusal said to exclude the real one, and a
    skipping load dropped it."""
    (root / "SKILL.MD").write_bytes(b"an old copy\n")
    return "SKILL.MD", "it and 'SKILL.md' would be one file"


REFUSALS = [_binary, _not_utf8, _oversize, _link_to_a_file_inside, _link_to_a_folder_outside, _fifo,
            _newline_in_name, _backslash_in_name, _case_clash, _case_clash_sorting_first]


@pytest.mark.parametrize("hazard", REFUSALS, ids=lambda hazard: hazard.__name__.strip("_"))
def test_each_refusal_names_the_file_the_rule_and_the_fix(tmp_path, hazard):
    root = skill(tmp_path)
    key, rule = hazard(root)
    with pytest.raises(UserError) as refused:
        load_tree(root, max_file_bytes=1_000)
    message = str(refused.value)
    assert repr(key)[1:-1] in message and rule in message and "exclude=[" in message, message
    assert "on_unreadable='skip'" in message


@pytest.mark.parametrize("hazard", REFUSALS, ids=lambda hazard: hazard.__name__.strip("_"))
def test_each_refusal_is_skipped_and_listed_when_asked(tmp_path, hazard):
    root = skill(tmp_path)
    key, rule = hazard(root)
    skipped: list[tuple[str, str]] = []
    tree = load_tree(root, max_file_bytes=1_000, on_unreadable="skip", skipped=skipped)
    assert tree == {k: v.decode("utf-8") for k, v in SKILL.items()}
    assert [k for k, _ in skipped] == [key] and rule in skipped[0][1]
    assert load_tree(root, max_file_bytes=1_000, on_unreadable="skip") == tree  # listing is optional


@pytest.mark.parametrize("needed, stray", [("SKILL.md", "SKILL.MD"), (".claude-plugin/plugin.json", ".claude-plugin/PLUGIN.json"),
                                           ("SKILL.md", "Skill.md")])
def test_of_a_clashing_pair_the_name_a_host_needs_is_kept_and_the_stray_named(tmp_path, needed, stray):
    root = write(tmp_path / "folder", {needed: b"{}\n", stray: b"stray\n", "notes.md": b"n\n"})
    with pytest.raises(UserError, match=f"cannot load .*{stray}': it and '{needed}' would be one file") as refused:
        load_tree(root)
    assert f"rename it, or exclude=['{stray}']" in str(refused.value)
    skipped: list[tuple[str, str]] = []
    assert sorted(load_tree(root, on_unreadable="skip", skipped=skipped)) == sorted([needed, "notes.md"])
    assert [key for key, _ in skipped] == [stray]


def test_a_huge_file_is_refused_by_its_size_before_a_byte_is_read(tmp_path):
    root = skill(tmp_path)
    with open(root / "dump.log", "wb") as handle:  # 5 GB, sparse: nothing is written
        handle.truncate(5 * 2**30)
    with pytest.raises(UserError, match=r"dump\.log.*5,368,709,120 bytes, over max_file_bytes=1,000,000"):
        load_tree(root)


def test_too_many_files_names_the_folder_and_the_limit_or_keeps_the_first(tmp_path):
    root = write(tmp_path / "many", {f"f{i}.md": b"x\n" for i in range(5)})
    with pytest.raises(UserError, match=r"many.*more than max_files=3 files.*max_files=\.\.\..*exclude="):
        load_tree(root, max_files=3)
    skipped: list[tuple[str, str]] = []
    assert list(load_tree(root, max_files=3, on_unreadable="skip", skipped=skipped)) == ["f0.md", "f1.md", "f2.md"]
    assert skipped == [("f3.md", "it is past max_files=3"), ("f4.md", "it is past max_files=3")]


def test_too_much_in_all_names_the_folder_the_limit_and_the_largest_files(tmp_path):
    root = write(tmp_path / "heavy", {"a.md": b"a" * 400, "b.md": b"b" * 450, "c.md": b"c" * 100})
    with pytest.raises(UserError, match=r"heavy.*950 bytes in all, over max_total_bytes=900.*largest: b\.md"):
        load_tree(root, max_total_bytes=900)
    skipped: list[tuple[str, str]] = []
    assert list(load_tree(root, max_total_bytes=900, on_unreadable="skip", skipped=skipped)) == ["a.md", "b.md"]
    assert skipped == [("c.md", "it is past max_total_bytes=900")]  # the first files in key order, then none


def test_a_missing_path_or_a_file_is_refused_with_the_fix(tmp_path):
    with pytest.raises(UserError, match=r"no folder at .*nowhere.*pass the path of the skill"):
        load_tree(tmp_path / "nowhere", on_unreadable="skip")
    root = skill(tmp_path)
    with pytest.raises(UserError, match=r"SKILL\.md' is a file, not a folder; pass the folder that holds it"):
        load_tree(root / "SKILL.md")


def test_the_folder_itself_may_be_reached_through_a_symlink(tmp_path):
    root = skill(tmp_path)
    os.symlink(root, tmp_path / "linked-skill")
    assert load_tree(tmp_path / "linked-skill") == load_tree(root)


@pytest.mark.parametrize("arguments, problem", [
    ({"exclude": "*.png"}, "exclude must be a list of glob patterns"),
    ({"include": [1]}, "include must be a list of glob patterns"),
    ({"on_unreadable": "ignore"}, "on_unreadable must be 'error' or 'skip'"),
    ({"max_files": 0}, "max_files must be a positive whole number"),
    ({"max_file_bytes": 1.5}, "max_file_bytes must be a positive whole number"),
    ({"skipped": ()}, "skipped must be a list"),
])
def test_a_bad_argument_is_named(tmp_path, arguments, problem):
    with pytest.raises(UserError, match=problem):
        load_tree(skill(tmp_path), **arguments)


def test_a_folder_swapped_for_a_link_while_the_tree_is_read_is_not_read_through(tmp_path, monkeypatch):
    """The walk listed the folder; a link put in its place before its files are read is refused,
    and the file outside is never read."""
    from agentdescent.artifacts import tree as tree_module

    root = tmp_path / "skill"
    (root / "refs").mkdir(parents=True)
    (root / "SKILL.md").write_text("skill\n", encoding="utf-8")
    (root / "refs" / "a.md").write_text("a\n", encoding="utf-8")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "a.md").write_text("SECRET\n", encoding="utf-8")
    read = tree_module._Walk.read

    def swap_then_read(self, files):
        (root / "refs").rename(root / "refs.real")
        (root / "refs").symlink_to(tmp_path / "outside", target_is_directory=True)
        return read(self, files)

    monkeypatch.setattr(tree_module._Walk, "read", swap_then_read)
    skipped: list = []
    loaded = load_tree(root, on_unreadable="skip", skipped=skipped)
    assert loaded == {"SKILL.md": "skill\n"} and [key for key, _ in skipped] == ["refs/a.md"]

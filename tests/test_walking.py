"""`walking.walk` lists what `os.walk` lists, and a chain of folders a thousand deep, which stops
`os.walk`, `Path.rglob` and `shutil.rmtree` with a RecursionError, is walked and removed; `plan`
names such a chain in a target (a backup could not copy it) instead of failing with a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentdescent.artifacts.copyable import MAX_BACKUP_DEPTH, copy_problems
from agentdescent.removal import remove_tree
from agentdescent.walking import entries, walk
from tests.test_cli_verbs import agentdescent

DEEP = 1_000


@pytest.fixture(autouse=True)
def removed_after(tmp_path):
    """What a test made is removed by `remove_tree`, which cuts a deep chain first (pytest's own
    clean-up, and `shutil.rmtree`, recurse once a level), and is gone."""
    yield
    for entry in list(tmp_path.iterdir()):
        assert remove_tree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink() is None
    assert list(tmp_path.iterdir()) == []


def chain(folder: Path, depth: int) -> Path:
    """`depth` folders, one in another, under `folder`, and a file at the bottom (made a level at a
    time: `os.makedirs` and `Path.mkdir(parents=True)` recurse too)."""
    folder.mkdir(parents=True, exist_ok=True)
    bottom = folder
    for _ in range(depth):
        bottom = bottom / "a"
        bottom.mkdir()
    (bottom / "x.md").write_text("deep\n", encoding="utf-8")
    return bottom


def test_walk_lists_what_os_walk_lists_and_prunes_as_it_does(tmp_path):
    for folder in ("a/b/c", "a/d", "e", ".hidden/f"):
        (tmp_path / folder).mkdir(parents=True)
    for file in ("f1", "a/f2", "a/b/c/f3", ".hidden/f/f4"):
        (tmp_path / file).write_text("x", encoding="utf-8")
    (tmp_path / "to-a").symlink_to("a")
    (tmp_path / "to-f1").symlink_to("f1")
    (tmp_path / "nowhere").symlink_to("missing")
    assert list(walk(tmp_path)) == list(os.walk(tmp_path))
    ours, theirs = [], []
    for found, walker in ((ours, walk), (theirs, os.walk)):
        for folder, folders, _ in walker(tmp_path):
            folders[:] = [name for name in folders if not name.startswith(".")]
            found.append(folder)
    assert ours == theirs and str(tmp_path / ".hidden") not in ours
    assert sorted(entries(tmp_path)) == sorted(p for p in tmp_path.rglob("*") if not p.is_dir())


def test_a_chain_a_thousand_deep_is_walked_to_its_end(tmp_path):
    bottom = chain(tmp_path, DEEP)
    assert [str(bottom / "x.md")] == [str(p) for p in entries(tmp_path)]
    if sys.version_info < (3, 12):  # where os.walk still recurses: the walk above is what it could not do
        said = subprocess.run([sys.executable, "-c", "import os, sys; list(os.walk(sys.argv[1]))", str(tmp_path)],
                              capture_output=True, text=True, timeout=60)
        assert "RecursionError" in said.stderr


def test_plan_names_a_chain_too_deep_for_a_backup_even_when_excluded(tmp_path):
    skill = tmp_path / "skill"
    skill.mkdir()
    (skill / "SKILL.md").write_text("---\nname: s\ndescription: d\n---\nAnswer.\n", encoding="utf-8")
    chain(skill / "vendor", DEEP)
    [problem] = copy_problems(skill)
    assert problem.startswith(f"the folder chain {Path('skill', 'vendor', 'a', 'a')}{os.sep}... (1,001 folders deep) "
                              f"cannot be copied into a backup, which takes folders at most {MAX_BACKUP_DEPTH} deep")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(f'{{"id": "t{i}", "q": "q{i}", "a": "a"}}\n' for i in range(12)), encoding="utf-8")
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"target: {skill}\nexclude: [vendor]\ntasks: {{file: {tasks}, prompt: q, gold: a, id: id}}\n"
                    "scorer: exact\nagent: host\nreflector: host\n", encoding="utf-8")
    done = agentdescent("plan", str(spec))
    assert done.returncode == 2 and "Traceback" not in done.stderr and "(1,001 folders deep)" in done.stderr, done.stderr
    shallow = tmp_path / "shallow"
    shallow.mkdir()
    chain(shallow, MAX_BACKUP_DEPTH)
    assert copy_problems(shallow) == []

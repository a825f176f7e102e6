"""Hostile paths in proposals: every class ends as an outcome of its diff, and none reaches the ledger."""

from __future__ import annotations

import pytest

from agentdescent import FileTree, evolve
from agentdescent.governance import MAX_FILE_BYTES
from tests.doubles import numbered_tasks

TREE = {"SKILL.md": "# Skill\n", "notes.md": "n\n", "hooks/pre.sh": "exit 0\n", "references/api.md": "api\n"}

HOSTILE = [
    "/etc/passwd", "../outside.md", "refs/../../x.md", "a\\b.md", "C:/x.md", "a:b.md", "nul\0.md", "line\nbreak.md",
    "tab\t.md", "esc\x1b.md", ".git/config", ".GIT/config", "GIT~1/config", ".git./config", ".git /config",
    ".gi\u200ct/config", ".gitmodules", "sub/.gitattributes", "NUL", "con.md", "COM1", "lpt1.txt",
    "x" * 300 + ".md", "cafe\u0301.md", "lone\ud800.md",
    "Hooks/pre.sh", "HOOKS/PRE.SH", "hооks/pre.sh", "hooks/prе.sh",  # case and look-alike variants of a frozen file
    "notes.md/x.md", "SKILL.md/inside.md", "skill.md",  # a file/folder clash and a case clash with existing keys
]


@pytest.mark.parametrize("path", HOSTILE, ids=range(len(HOSTILE)))
def test_a_hostile_path_becomes_an_outcome_and_never_a_file(tmp_path, path):
    proposal = f'<file path="{path}">payload\n</file>'
    result = evolve(numbered_tasks(8), lambda task, output: 0.0, run=lambda rendered, task: "", store=tmp_path / "l",
                    propose=lambda *a: proposal, strategy=FileTree(TREE, frozen=["hooks/*"]), rounds=1, n_workers=1)
    assert set(result.outcomes()) <= {"invalid", "refused_by_governance"}, result.outcome_list[0].reason
    assert result.outcome_list and all(o.reason for o in result.outcome_list)
    with result.ledger as ledger:
        assert ledger.head() == 1 and ledger.snapshot("artifact") == TREE  # only the seed was committed


def test_diffs_of_one_step_that_one_folder_cannot_hold_together_conflict(tmp_path):
    proposals = iter(['<file path="guide">a\n</file>', '<file path="guide/more.md">b\n</file>'])
    result = evolve(numbered_tasks(8), lambda task, output: float("guide" in output), run=lambda r, t: " ".join(r),
                    propose=lambda *a: next(proposals, None), strategy=FileTree(TREE), rounds=1, n_workers=2,
                    store=tmp_path / "l")
    kinds = sorted(o.kind for o in result.outcome_list)
    assert kinds == ["committed", "conflict_lost"]
    lost = next(o for o in result.outcome_list if o.kind == "conflict_lost")
    assert "cannot both be in one folder" in lost.reason


HOSTILE_TEXT = ["nul\0byte\n", "escape \x1b[31mred\n", "lone \ud800 surrogate\n", "x" * (MAX_FILE_BYTES + 1), "bell\x07\n"]


@pytest.mark.parametrize("text", HOSTILE_TEXT, ids=["nul", "ansi-escape", "lone-surrogate", "oversize", "bell"])
def test_hostile_file_content_becomes_an_outcome_and_never_a_commit(tmp_path, text):
    proposal = f'<file path="SKILL.md">{text}</file>'
    result = evolve(numbered_tasks(8), lambda task, output: 0.0, run=lambda rendered, task: "", store=tmp_path / "l",
                    propose=lambda *a: proposal, strategy=FileTree(TREE, frozen=["hooks/*"]), rounds=1, n_workers=1)
    assert set(result.outcomes()) == {"invalid"}, result.outcome_list[0].reason
    with result.ledger as ledger:
        assert ledger.head() == 1


@pytest.mark.parametrize("rule", ["a rule with \ud800 in it", "nul \0 rule", "x" * 300_000])
def test_hostile_rules_become_outcomes(tmp_path, rule):
    result = evolve(numbered_tasks(8), lambda task, output: 0.0, run=lambda rendered, task: "", store=tmp_path / "l",
                    propose=lambda *a: rule, rounds=1, n_workers=1)
    assert set(result.outcomes()) == {"invalid"}, result.outcome_list[0].reason

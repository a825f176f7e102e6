"""A folder domain whose reflector only ever edits a frozen file, so every diff it proposes is
refused as invalid: for the tests of what `show` says of such a diff. Spec files name these
functions as `python:tests.frozen_edit:...` (runs start from the repository root)."""

from __future__ import annotations

from pathlib import Path


def spec(folder: Path) -> dict:
    """A skill folder with a frozen hook, in `folder`, and a spec of a one-round run on it."""
    skill = folder / "my-skill"
    (skill / "hooks").mkdir(parents=True, exist_ok=True)
    (skill / "SKILL.md").write_text("---\nname: my-skill\ndescription: says yes\n---\nSay no.\n", encoding="utf-8")
    (skill / "hooks" / "pre.sh").write_text("exit 0\n", encoding="utf-8")
    tasks = [{"id": f"t{i}", "prompt": f"question {i}", "gold": "yes"} for i in range(6)]
    return {"target": str(skill), "tasks": tasks, "frozen": ["hooks/*"], "agent": "python:tests.frozen_edit:answer",
            "reflector": "python:tests.frozen_edit:edit_the_hook", "n_workers": 1, "rounds": 1}


def answer(prompt: str, cwd: str) -> str:
    return "no"


def edit_the_hook(prompt: str) -> str:
    return '<file path="hooks/pre.sh">\nexit 1\n</file>'

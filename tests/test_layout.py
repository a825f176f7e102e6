"""The package reads as its architecture: every module is on the module map, and no module is too big."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agentdescent"
MAP = ROOT / "docs" / "architecture.md"


def modules_on_disk() -> set[str]:
    return {p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}


def modules_on_the_map() -> set[str]:
    named: set[str] = set()
    folder = ""
    for line in MAP.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"## `(\w+)/`", line)
        if heading:
            folder = heading.group(1) + "/"
        elif line.startswith("## "):
            folder = ""
        row = re.match(r"\| `([\w/]+\.py)` \|", line)
        if row:
            named.add(folder + row.group(1))
    return named


def test_every_module_is_on_the_map_and_the_map_names_no_ghosts():
    on_disk = {m for m in modules_on_disk() if not m.endswith("/__init__.py")}
    on_map = modules_on_the_map()
    assert on_disk - on_map == set(), "add these modules to docs/architecture.md"
    assert on_map - on_disk == set(), "docs/architecture.md names modules that do not exist"


def test_no_module_holds_two_concepts_worth_of_lines():
    sizes = {m: len((PACKAGE / m).read_text(encoding="utf-8").splitlines()) for m in modules_on_disk()}
    assert {m: n for m, n in sizes.items() if n > 400} == {}

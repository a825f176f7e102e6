"""The package reads as its architecture: every module is on the module map, and no module is too big."""

from __future__ import annotations

import ast
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
        heading = re.match(r"## `([\w/]+)/`", line)
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


# Layers, lowest first: a module may import its own layer or a lower one, never a higher one.
LAYERS = [
    {"errors", "types", "atomic", "filelock", "procscan", "reading", "invisible", "lookalike", "removal", "walking", "home", "commands",
     "_exports", "events", "halts", "userimport"},  # the records and rules
    {"agents", "quoting", "governance", "artifacts", "ledger", "reflect", "dataloader", "scoring", "process",
     "refcheck", "refcheck_child", "returned", "usage", "step"},  # the parts, and the optimizer step
    {"result"},
    {"engine", "config"},  # the loop, the calls, persistence, and the one description of a run
    {"testing"},
    {"hosts"},
    {"runs", "report"},  # the service
    {"cli", "__main__"},
]


def imports() -> dict[str, set[str]]:
    """{module: the package's modules it imports}, read with `ast`: every import, at the top, in a
    function or under TYPE_CHECKING alike (a type alias in the wrong module is a circle too)."""
    names = {_dotted(p): p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts}
    found: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base] * bool(base))
                targets |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in names else base for alias in node.names}
        found[name] = {_owner(t, names) for t in targets if t.startswith("agentdescent")} - {name, ""}
    return found


def _dotted(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _owner(target: str, names: dict) -> str:
    while target and target not in names:
        target = target.rpartition(".")[0]
    return target


def _layer(module: str) -> int:
    part = module.split(".")[1]
    return next(i for i, names in enumerate(LAYERS) if part in names)


def test_no_import_runs_up_a_layer():
    graph = imports()
    up = sorted(f"{m} -> {t}" for m, ts in graph.items() if m != "agentdescent" for t in ts
                if t != "agentdescent" and _layer(t) > _layer(m))
    assert up == []


def test_no_import_circle():
    graph, circles = imports(), []
    for start in graph:  # a module that reaches itself again through its imports
        seen, todo = set(), list(graph[start])
        while todo:
            module = todo.pop()
            if module == start:
                circles.append(start)
                break
            if module not in seen:
                seen.add(module)
                todo += graph.get(module, ())
    assert circles == []


def test_no_docstring_holds_a_lone_surrogate():
    """Python 3.13 cleans docstrings as it compiles them, through UTF-8: one holding a lone
    surrogate (an example written "a\\ud800b" in a docstring that is not raw) fails the import of
    the whole package there, while 3.11 takes it. An example shows the escape instead."""
    found = []
    for path in [*PACKAGE.rglob("*.py"), *(ROOT / "mcp_server").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node, clean=False)
                if doc and re.search("[\ud800-\udfff]", doc):
                    found.append(f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}")
    assert found == []

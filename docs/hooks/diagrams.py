"""MkDocs hook: the Architecture page's figures, drawn from the code as it is when the site is built.

A line `<!-- figure: diff-path -->` in a page becomes a Mermaid flowchart of the path a diff takes,
read from the package with `ast`: the stages of `Worker.work` (engine/loop/worker.py) and what each
calls, the method of `Loop` that hands the diffs to the aggregator (engine/loop/rounds.py), the stage
functions `Aggregator.step` calls in the order it calls them (step/aggregator.py) with the module
each comes from, the ledger methods the commit stage calls, and the outcomes each module can
give a diff (the `OutcomeKind` strings written in its source). `<!-- figure: imports -->` becomes
the import graph of the package's folders. Nothing is drawn by hand: rename a stage, move it to
another module or add one, and the next build shows it (tests/test_docs.py checks the figures
name modules that exist). What it leaves out: the policies and the executors (docs/evolve.md).
"""

from __future__ import annotations

import ast
import functools
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "agentdescent"
FIGURES = {"diff-path", "imports"}
_PLACEHOLDER = re.compile(r"^<!-- figure: ([\w-]+) -->$", re.MULTILINE)


@functools.cache
def parsed(module: str) -> ast.Module:
    """The syntax tree of a module named by its path in the package: parsed("step/admit.py")."""
    return ast.parse((PACKAGE / module).read_text(encoding="utf-8"))


def module_path(dotted: str) -> str | None:
    """module_path("agentdescent.step.admit") == "step/admit.py"; a package is its __init__.py; None outside."""
    if dotted != "agentdescent" and not dotted.startswith("agentdescent."):
        return None
    parts = dotted.split(".")[1:]
    package = "/".join([*parts, "__init__.py"])
    return package if (PACKAGE / package).exists() else "/".join(parts) + ".py"


@functools.cache
def imports_of(module: str) -> dict[str, tuple[str, str]]:
    """The names `module` imports from this package: {name: (module it is imported from, its name there)}."""
    names = {}
    for node in ast.walk(parsed(module)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            source = module_path(node.module)
            for alias in node.names if source else []:
                names[alias.asname or alias.name] = (source, alias.name)
    return names


def imported(module: str) -> dict[str, str]:
    """The names `module` imports from this package, each mapped to the module that defines it
    (following a package's re-exports): imported("step/aggregator.py")["admit"] == "step/admit.py"."""
    return {name: defined_in(*where) for name, where in imports_of(module).items()}


def defined_in(module: str, name: str) -> str:
    """Where `name`, imported from `module`, is defined: a package's __init__ is followed to the module it re-exports from."""
    seen = set()
    while module.endswith("__init__.py") and name in imports_of(module) and (module, name) not in seen:
        seen.add((module, name))
        module, name = imports_of(module)[name]
    return module


def find(module: str, qualified: str) -> ast.FunctionDef | ast.ClassDef:
    """find("step/aggregator.py", "Aggregator.step"): the definition, by its dotted name."""
    scope: list[ast.stmt] = parsed(module).body
    for part in qualified.split("."):
        node = next((n for n in scope if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == part), None)
        if node is None:
            raise LookupError(f"{module} has no {qualified}")
        scope = node.body
    return node


def calls_in_order(node: ast.AST) -> Iterator[ast.Call]:
    """The calls under `node` in the order they run: statements in order, a call's arguments before it."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        yield from calls_in_order(child)
    if isinstance(node, ast.Call):
        yield node


def self_method(call: ast.Call) -> str | None:
    func = call.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        return func.attr
    return None


def expanded_calls(module: str, cls: str, method: str, seen: frozenset[str] = frozenset()) -> Iterator[ast.Call]:
    """The calls of `cls.method` in the order they run, the class's own helper methods inlined."""
    for call in calls_in_order(find(module, f"{cls}.{method}")):
        helper = self_method(call)
        if helper and helper not in seen and _has_method(module, cls, helper):
            yield from expanded_calls(module, cls, helper, seen | {method})
        else:
            yield call


def _has_method(module: str, cls: str, name: str) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in find(module, cls).body)


def field_types(module: str, cls: str) -> dict[str, str]:
    """A dataclass's fields and the module of each one's annotated class: {"evaluator": "engine/calls/evaluation.py"}."""
    names = imported(module)
    found = {}
    for node in find(module, cls).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            annotation = ast.unparse(node.annotation).split("|")[0].strip()
            if annotation in names:
                found[node.target.id] = (annotation, names[annotation])
    return found


@functools.cache
def outcome_kinds() -> tuple[str, ...]:
    assign = next(n for n in parsed("types.py").body if isinstance(n, ast.Assign)
                  and any(isinstance(t, ast.Name) and t.id == "OutcomeKind" for t in n.targets))
    return tuple(e.value for e in assign.value.slice.elts)


def outcomes_written_in(module: str, function: str | None = None) -> list[str]:
    """The outcome kinds written as strings in `module` (or in one of its functions), in OutcomeKind's order."""
    node = parsed(module) if function is None else find(module, function)
    said = {n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    return [kind for kind in outcome_kinds() if kind in said]


@dataclass(frozen=True)
class Stage:
    name: str  # what the code calls it: a function or a method
    module: str  # where it is defined, under agentdescent/
    uses: tuple[str, ...] = ()  # what it calls on the way, "Class.method (module)"
    outcomes: tuple[str, ...] = ()


@dataclass
class DiffPath:
    worker: list[Stage] = field(default_factory=list)
    hand_over: Stage | None = None
    aggregator: Stage | None = None
    step: list[Stage] = field(default_factory=list)
    ledger: Stage | None = None

    def modules(self) -> set[str]:
        stages = [*self.worker, self.hand_over, self.aggregator, *self.step, self.ledger]
        return {s.module for s in stages if s is not None}


def worker_stages() -> list[Stage]:
    """Worker.work's stages (`self.verify(self.reflect(self.roll(turn)))`), each with what it calls."""
    module, fields = "engine/loop/worker.py", field_types("engine/loop/worker.py", "Worker")
    stages = [self_method(c) for c in calls_in_order(find(module, "Worker.work")) if self_method(c)]
    found = []
    for name in stages:
        uses = []
        for call in expanded_calls(module, "Worker", name):
            func = call.func
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Attribute) and \
                    isinstance(func.value.value, ast.Name) and func.value.value.id == "self" and func.value.attr in fields:
                cls, where = fields[func.value.attr]
                uses.append(f"{cls}.{func.attr} ({where})")
        found.append(Stage(name=f"Worker.{name}", module=module, uses=tuple(dict.fromkeys(uses)),
                           outcomes=tuple(outcomes_written_in(module, "Worker._diff") if name == "reflect" else ())))
    return found


def hand_over() -> Stage:
    """The method of Loop that calls `self.aggregator.step`."""
    loop = find("engine/loop/rounds.py", "Loop")
    for method in (n for n in loop.body if isinstance(n, ast.FunctionDef)):
        for call in calls_in_order(method):
            func = call.func
            if isinstance(func, ast.Attribute) and func.attr == "step" and ast.unparse(func.value) == "self.aggregator":
                return Stage(name=f"Loop.{method.name}", module="engine/loop/rounds.py")
    raise LookupError("engine/loop/rounds.py: no Loop method calls self.aggregator.step")


def step_stages() -> list[Stage]:
    """The functions Aggregator.step calls that come from the step/ modules, in the order it calls them."""
    module = "step/aggregator.py"
    names = imported(module)
    found: dict[str, Stage] = {}
    for call in expanded_calls(module, "Aggregator", "step"):
        if isinstance(call.func, ast.Name) and call.func.id in names and call.func.id[0].islower():
            where = names[call.func.id]
            if where.startswith("step/") and call.func.id not in found:
                found[call.func.id] = Stage(name=call.func.id, module=where, outcomes=tuple(outcomes_written_in(where)))
    return list(found.values())


def ledger_stage(commit_stage: Stage) -> Stage:
    """What the commit stage calls on its `ledger` argument, and the ledger modules that method uses."""
    module = commit_stage.module
    calls = [c.func.attr for c in calls_in_order(find(module, commit_stage.name))
             if isinstance(c.func, ast.Attribute) and ast.unparse(c.func.value) == "ledger"]
    where = imported(module).get("Ledger", "ledger/ledger.py")
    helpers = sorted({m for m in imported(where).values() if m.startswith("ledger/") and m != where})
    return Stage(name=f"Ledger.{calls[0]}" if calls else "Ledger", module=where,
                 uses=tuple(f"{m}" for m in helpers))


def diff_path() -> DiffPath:
    step = step_stages()
    aggregator = Stage(name="Aggregator.step", module="step/aggregator.py",
                       outcomes=tuple(outcomes_written_in("step/aggregator.py")))
    return DiffPath(worker=worker_stages(), hand_over=hand_over(), aggregator=aggregator, step=step,
                    ledger=ledger_stage(step[-1]) if step else None)


def _label(stage: Stage, extra: tuple[str, ...] = ()) -> str:
    lines = [f"<b>{stage.name}</b>", stage.module, *extra]
    return "<br/>".join(line.replace('"', "'") for line in lines)


def _chain(name: str, title: str, direction: str, prefix: str, labels: list[str]) -> list[str]:
    """A Mermaid subgraph of nodes <prefix>0, <prefix>1, ... labelled `labels`, each to the next."""
    lines = [f'  subgraph {name}["{title}"]', f"    direction {direction}"]
    lines += [f'    {prefix}{i}["{label}"]' for i, label in enumerate(labels)]
    lines += [f"    {prefix}{i} --> {prefix}{i + 1}" for i in range(len(labels) - 1)]
    return [*lines, "  end"]


def diff_path_mermaid(path: DiffPath | None = None) -> str:
    path = path or diff_path()
    out = ["flowchart LR"]
    out += _chain("turn", "a worker's turn (one thread per worker)", "TB", "W",
                  [_label(stage, stage.uses) for stage in path.worker])
    out.append(f'  H["{_label(path.hand_over)}"]')
    out.append(f'  W{len(path.worker) - 1} -- "diffs with evidence" --> H')
    out.append(f'  A["{_label(path.aggregator)}"]')
    out.append('  H -- "a batch of diffs" --> A')
    out += _chain("opt", "the optimizer step, in the order Aggregator.step calls it", "LR", "S",
                  [_label(stage) for stage in path.step])
    out.append("  A --> S0")
    if path.ledger is not None:
        out.append(f'  G[("{_label(path.ledger, path.ledger.uses)}")]')
        out.append(f'  S{len(path.step) - 1} -- "compare-and-swap on dev" --> G')
    for i, stage in [*((f"W{i}", s) for i, s in enumerate(path.worker)), *((f"S{i}", s) for i, s in enumerate(path.step)),
                     ("A", path.aggregator)]:
        if stage.outcomes:
            out.append(f'  {i}o(["{"<br/>".join(stage.outcomes)}"])')
            out.append(f"  {i} -.-> {i}o")
    return "\n".join(out)


def package_imports() -> Counter[tuple[str, str]]:
    """Imports between the package's folders (top-level modules count as `core`): {(importer, imported): n}.
    The front door (`__init__.py`, the public names, and `__main__.py`) imports everything and is left out."""
    edges: Counter[tuple[str, str]] = Counter()
    for path in sorted(PACKAGE.rglob("*.py")):
        module = path.relative_to(PACKAGE).as_posix()
        if "__pycache__" in module or module in ("__init__.py", "__main__.py"):
            continue
        here = _group(module)
        for source in set(imported(module).values()):
            there = _group(source)
            if there != here:
                edges[(here, there)] += 1
    return edges


def _group(module: str) -> str:
    return module.split("/")[0] if "/" in module else "core"


def imports_mermaid() -> str:
    edges = package_imports()
    out = ["flowchart TB"]
    groups = sorted({g for edge in edges for g in edge})
    for group in groups:
        label = "top-level modules" if group == "core" else f"{group}/"
        out.append(f'  {group.replace("-", "_")}["{label}"]')
    for (a, b), n in sorted(edges.items()):
        out.append(f"  {a} --> {b}")
    return "\n".join(out)


def figure(name: str) -> str:
    body = {"diff-path": diff_path_mermaid, "imports": imports_mermaid}[name]()
    return f"```mermaid\n{body}\n```"


def on_page_markdown(markdown: str, page, config, files) -> str:  # noqa: ANN001 - MkDocs' hook signature
    """Replace each `<!-- figure: NAME -->` line with the figure drawn from the code now."""
    def draw(match: re.Match) -> str:
        if match.group(1) not in FIGURES:
            raise ValueError(f"{page.file.src_path}: no figure named {match.group(1)!r}; there are {', '.join(sorted(FIGURES))}")
        return figure(match.group(1))

    return _PLACEHOLDER.sub(draw, markdown)

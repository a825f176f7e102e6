"""The module a spec's `python:` reference names, imported from the folder the run was started in,
and nothing else from there.

A folder a user runs in may be a cloned repository holding `yaml.py`, `httpx.py` or a `scipy/`: on
`sys.path` it would stand in for what AgentDescent, a library or the user's own module imports
(an optional dependency a library tries, `brotli` say, included). So the folder goes on the path
only when a reference names a module Python finds nowhere else: the user's own code, whose folder
the user asked to run from (it goes last, for its siblings). A reference to an installed module
(`agentdescent.testing:route_by_skill`) leaves it off; a file there named like one is refused,
naming both, instead of being passed over in silence.

    import_named("agent", "/work/repo")   # /work/repo/agent.py, /work/repo last on sys.path
    import_named("json", "/work/repo")    # the standard library's; /work/repo stays off the path
"""

from __future__ import annotations

import importlib
import importlib.machinery
import sys
from pathlib import Path
from types import ModuleType

OWN = "Python's own modules"


def import_named(module_name: str, folder: str) -> ModuleType:
    """The module `module_name`: found where Python finds it without `folder`, else in `folder`
    (then on `sys.path`, last). An `ImportError` naming the file when `folder` holds one named like
    a module found elsewhere."""
    top = module_name.partition(".")[0]
    elsewhere = found_elsewhere(top, folder)
    local = next((p for p in (Path(folder, f"{top}.py"), Path(folder, top, "__init__.py")) if p.is_file()), None)
    if elsewhere is not None and local is not None:
        named = local.parent if local.name == "__init__.py" else local
        raise ImportError(f"rename {named}, and the reference with it: Python finds a module {top!r} first, {elsewhere}, "
                          "and would import that instead")
    if elsewhere is None and folder not in sys.path:
        sys.path.append(folder)
    return importlib.import_module(module_name)


def found_elsewhere(top: str, folder: str) -> str | None:
    """Where Python finds the top-level module `top` without `folder` (its file, or `OWN`); None
    when only `folder` could hold it."""
    loaded = sys.modules.get(top)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        return None if file and _inside(file, folder) else file or OWN
    if top in sys.builtin_module_names:
        return OWN
    elsewhere = [p for p in sys.path if p != folder]
    for finder in sys.meta_path:
        if finder is importlib.machinery.PathFinder:
            spec = finder.find_spec(top, elsewhere)
        else:
            find = getattr(finder, "find_spec", None)
            spec = find(top, None) if find is not None else None
        if spec is not None and spec.origin is not None and not _inside(spec.origin, folder):
            return OWN if spec.origin in ("built-in", "frozen") else spec.origin
    return None


def _inside(file: str, folder: str) -> bool:
    return Path(file).resolve().is_relative_to(Path(folder).resolve())

"""The module a spec's `python:` reference names, imported from the folder the run was started in
only when that folder holds it.

A folder a user runs in may be a cloned repository holding `yaml.py`, `httpx.py` or a `scipy/`: on
`sys.path` it would stand in for what AgentDescent, a library or the user's own module imports
(an optional dependency a library tries, `brotli` say, included). So the folder goes on the path
only for a reference to a module it holds, the user's own code, which the user asked to run: then
first, as `python -m` puts it, so that this folder's copy is the one imported, here and in the
worker processes that inherit the path, even where a checkout elsewhere is installed in
development mode (a worktree's). A reference to an installed module
(`agentdescent.testing:route_by_skill`) leaves the folder off the path. A module of the folder's
named like one of Python's own, an installed package's or one already imported elsewhere would
stand in for it in the whole process, and is refused, naming both.

    import_named("agent", "/work/repo")   # /work/repo/agent.py; /work/repo first on sys.path
    import_named("json", "/work/repo")    # the standard library's; /work/repo stays off the path
"""

from __future__ import annotations

import importlib
import importlib.machinery
import site
import sys
from pathlib import Path
from types import ModuleType

OWN = "Python's own modules"


def import_named(module_name: str, folder: str) -> ModuleType:
    """The module `module_name`: from `folder` when it holds the top-level module of that name (a
    file, a package, or a folder of modules no other place holds: `folder` then first on
    `sys.path`), else from where Python finds it without `folder`. An `ImportError` naming the
    file when that name is taken (`taken`)."""
    top = module_name.partition(".")[0]
    local = next((p for p in (Path(folder, f"{top}.py"), Path(folder, top, "__init__.py")) if p.is_file()), None)
    if local is None and not Path(folder, top).is_dir():  # the folder holds no module of that name
        return importlib.import_module(module_name)
    where = taken(top, folder)
    if where is not None and local is None:  # a folder of no package holds modules only where nothing else does
        return importlib.import_module(module_name)
    if where is not None and local is not None:
        named = local.parent if local.name == "__init__.py" else local
        raise ImportError(f"rename {named}, and the reference with it: it is named like the module {top!r} of {where}, "
                          "which it would stand in for in the whole run")
    if folder in sys.path:
        sys.path.remove(folder)
    sys.path.insert(0, folder)
    return importlib.import_module(module_name)


def taken(top: str, folder: str) -> str | None:
    """Where the top-level module name `top` is taken outside `folder`: one of Python's own modules
    (`OWN`), a module already imported from elsewhere, or an installed package's (its file); None
    when it is free, or only a checkout outside the installed packages holds it."""
    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        return OWN
    loaded = sys.modules.get(top)
    if loaded is not None:
        file = getattr(loaded, "__file__", None)
        return None if file is not None and _inside(file, folder) else file or OWN
    spec = importlib.machinery.PathFinder.find_spec(top, [p for p in sys.path if p and p != folder])
    origin = spec.origin if spec is not None else None
    return origin if origin is not None and any(_inside(origin, place) for place in _installed()) else None


def _installed() -> list[str]:
    """The folders installed packages live in (site-packages, the user's own)."""
    places = [*site.getsitepackages(), site.getusersitepackages()] if hasattr(site, "getsitepackages") else []
    return [place for place in places if place]


def _inside(file: str, folder: str) -> bool:
    return Path(file).resolve().is_relative_to(Path(folder).resolve())

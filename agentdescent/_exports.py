"""A package's exported names, imported when first asked for.

`import agentdescent` used to import every client, the ledger and the engine (half a second,
httpx and GitPython included) before a single name was used, and so did every process that
unpickles one of its functions: a Ray actor or a process-pool worker running `roll_out` needs
pydantic and a few of our modules, not an HTTP client. A package lists what it exports in a
table of name -> module (`by_name` writes it a module a line); the first lookup imports that
module and keeps the value as a plain attribute. The package also imports the same names under `TYPE_CHECKING`, for type checkers
and the API reference, which read the source; `tests/test_api.py` checks the two agree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, which exports each name of `where` from its module."""

    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups find it without coming here
        return value

    def __dir__() -> list[str]:
        return sorted(set(where) | set(vars(sys.modules[package])))

    return __getattr__, __dir__


def by_name(modules: Mapping[str, str]) -> dict[str, str]:
    """The name -> module table of {module: its names, space-separated}:
    by_name({"agentdescent.types": "Diff Task"}) == {"Diff": "agentdescent.types", "Task": "agentdescent.types"}"""
    return {name: module for module, names in modules.items() for name in names.split()}

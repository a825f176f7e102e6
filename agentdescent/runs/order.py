"""The order a store's runs were made in: what "the latest run" (a verb given no RUN) goes by.

The store's `create` numbers each run one past the highest number its store holds (`number`),
in a file of the run's own (`made.json`), so that neither a clock set wrong when a run was made
nor a copy of its folder that did not keep file times (`cp -r`) changes which run came last. A
run made before runs were numbered has no number: those come first, in the order of their spec's
modification time. Two runs made at the same moment may share a number; the time each was made,
then its id, orders them. Left out: the run's other files (the store).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol

from agentdescent import atomic
from agentdescent.errors import UserError

MADE = "made.json"  # {"number": N, "time": T}, written as the run is made and never again
MADE_BYTES = 4096  # far past what it holds


class RunDir(Protocol):
    """What of `store.RunDir` this uses (the store imports this module)."""

    id: str

    def file(self, name: str) -> Path: ...
    def json(self, name: str, limit: int = ...) -> object: ...


def number(run: RunDir, others: Iterable[RunDir]) -> None:
    """Write `run`'s place: one past the highest number among `others` (the store's runs)."""
    highest = max((made[0] for made in map(_made, others) if made is not None), default=0)
    atomic.write_text(run.file(MADE), json.dumps({"number": highest + 1, "time": time.time()}))


def key(run: RunDir) -> tuple[int, float, float, str]:
    """Where `run` stands among its store's runs, sorted oldest first."""
    made = _made(run)
    if made is None:  # made before runs were numbered (or its file is not what the store wrote)
        spec = run.file("spec.json")
        return 0, spec.stat().st_mtime if spec.exists() else 0.0, 0.0, run.id
    return 1, made[0], made[1], run.id


def _made(run: RunDir) -> tuple[int, float] | None:
    """The run's number and the time it was made; None without them."""
    try:
        made = run.json(MADE, MADE_BYTES)
    except (FileNotFoundError, UserError):
        return None
    if not isinstance(made, dict):
        return None
    found, when = made.get("number"), made.get("time")
    if type(found) is not int or isinstance(when, bool) or not isinstance(when, (int, float)):  # a bool is an int too
        return None
    return found, float(when)

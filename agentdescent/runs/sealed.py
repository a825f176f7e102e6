"""A stored run's own files sealed as it was made: a digest of each (`sealed.json`), checked before
a resume and an accept. A run whose spec, tasks or target changed since would be another run on
this run's ledger, its bill begun again at 0, or write its version into another target; it is
damage, named. So is a status that is not the run's own (`own`: another run's id or target), read
each time the store reads a status. Left out: what the files hold (`store`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Protocol

from agentdescent import atomic, reading
from agentdescent.errors import UserError
from agentdescent.quoting import quoted
from agentdescent.runs.spec import RunSpec
from agentdescent.runs.status import RunStatus


class RunDir(Protocol):
    """What of `store.RunDir` a seal uses (the store imports this module)."""

    id: str

    def file(self, name: str) -> Path: ...
    def json(self, name: str, limit: int = ...) -> object: ...
    def damaged(self, name: str, why: str) -> UserError: ...
    def spec(self) -> RunSpec: ...

SEALED = "sealed.json"
FILES = ("spec.json", "tasks.jsonl", "target.json", "assets.json", "executable.json")
FILE_BYTES = 256 << 20  # as the store reads a run's data files


def seal(run: RunDir) -> None:
    """Write the digests of `run`'s own files as they are now (its making)."""
    atomic.write_text(run.file(SEALED), json.dumps(digests(run)))


def digests(run: RunDir) -> dict[str, str]:
    """A digest of each of the run's own files (`FILES`) there is."""
    found = {}
    for name in FILES:
        try:
            data = reading.read_bytes(run.file(name), what=name, limit=FILE_BYTES, follow_symlinks=False)
        except UserError:
            continue  # missing, or no file of the run's: `check` names it
        found[name] = hashlib.sha256(data).hexdigest()
    return found


def check(run: RunDir) -> None:
    """`UserError` when one of `run`'s own files is missing or not as the run was made. A run made
    before the seal has nothing to check."""
    try:
        made = run.json(SEALED, 1 << 20)
    except FileNotFoundError:
        return
    now = digests(run)
    changed = [name for name in FILES if isinstance(made, dict) and made.get(name) != now.get(name)]
    if not isinstance(made, dict) or changed:
        name = changed[0] if changed else SEALED
        raise run.damaged(name, "missing" if name != SEALED and name not in now else
                          "not as the run was made (edited since it started)")


def own(run: RunDir, status: RunStatus) -> None:
    """`UserError` unless `status` is `run`'s: its id is the folder's name and its target the one
    the spec (sealed) names, so that a status copied in from another run never sends an accept to
    that run's target."""
    if status.id != run.id:
        shown = repr(status.id) if reading.looks_like_a_name(status.id) else quoted(status.id, 60)
        raise run.damaged("status.json", f"the status of another run ({shown})")
    target = run.spec().target
    if status.target != target:
        raise run.damaged("status.json", f"a status for {quoted(status.target, 200)}, not for the run's target {target}")

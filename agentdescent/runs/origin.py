"""Where a run was started from: the folder its command ran in and the spec file it was given.

    <run>/origin.json   {"cwd": "/home/me/project", "spec": "/home/me/project/specs/run.yaml"}

Written once, as the run's process is first started: a resume works where the run was started, not
where it is resumed. The runner works in `folder` (a grader command or a `python:` ref is found
there); the report never writes over `spec_file`. A run started from a spec object has no "spec",
and neither has one started before its origin named the file: nothing is known of its spec file.
Left out: what the spec says (`spec.json`, sealed with the run's other files).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentdescent import atomic
from agentdescent.errors import UserError
from agentdescent.runs.store import RunDir

FILE = "origin.json"


def write(run: RunDir, spec_file: str | os.PathLike | None) -> None:
    """Record the current folder and `spec_file` (made absolute, not resolved: a symlink is read
    as it is then) for `run`, unless its origin is there already."""
    if os.path.lexists(run.file(FILE)):
        return
    fields = {"cwd": os.getcwd()} | ({"spec": os.path.abspath(spec_file)} if spec_file is not None else {})
    atomic.write_text(run.file(FILE), json.dumps(fields))


def folder(run: RunDir) -> str:
    """The folder `run` was started from; `OSError`, `UserError` (a symlink or a FIFO in its
    place), `ValueError`, `KeyError` or `TypeError` when its origin is missing or damaged."""
    found = json.loads(run.text(FILE))["cwd"]
    if not isinstance(found, str):
        raise TypeError(f"{FILE}'s cwd is not a path")
    return found


def spec_file(run: RunDir) -> Path | None:
    """The spec file `run` was started from, as given then (absolute); None when it was started
    from a spec object, before its origin named the file, or its origin is missing or damaged."""
    try:
        found = json.loads(run.text(FILE)).get("spec")
    except (OSError, UserError, ValueError, AttributeError):
        return None
    return Path(found) if isinstance(found, str) and os.path.isabs(found) else None

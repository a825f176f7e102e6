"""Checks of command-line values, shared by the verbs.

The engine checks its own arguments too, but its messages name the Python API (`n_workers=`,
`store=`); these run first and name the flag the user typed, with a value that would work.
"""

from __future__ import annotations

from pathlib import Path

from agentdescent.errors import UserError
from agentdescent.reading import in_the_way


def positive(flag: str, value: int, example: int) -> int:
    """`value` when it is a whole number of at least 1; a `UserError` naming `flag` otherwise."""
    if value < 1:
        raise UserError(f"{flag} must be a positive whole number; got {value}. Try {flag} {example}")
    return value


def store_folder(flag: str, value: str | None) -> str | None:
    """`value` when it can hold a ledger: a new path, an empty folder or a ledger an earlier run left."""
    if value is None:
        return None
    path = Path(value)
    fix = f"give {flag} a new or empty folder, or the folder of a ledger an earlier run left"
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {value} is a file, not a ledger folder; {fix}")
    blocking = in_the_way(path)
    if blocking is not None:
        raise UserError(f"{flag} {value} runs through {blocking}, a file, not a folder; {fix}")
    from agentdescent.ledger import looks_like_ledger  # here: the verbs that take no --store need no GitPython

    if path.is_dir() and any(path.iterdir()) and not looks_like_ledger(path):
        raise UserError(f"{flag} {value} is a folder that holds other files, not a ledger; {fix}")
    return value

"""A folder an agent worked in, removed whole: the write and search bits an agent (or a tool it ran,
such as `go mod download`) took off folders inside it are put back first, as their owner may.

    remove_tree(path)  ->  True once nothing is left at `path`

A chain of folders deeper than `shutil.rmtree` can go (it calls itself once a level, and a
`RecursionError` stops it near a thousand) is first cut into pieces: each folder `PIECE_LEVELS`
down is moved up into `path` itself (a move never follows a link), and the pieces are removed.

Left out: folders of other users (their bits are not ours to change) and anything that follows a
link (`shutil.rmtree` removes a link, never what it points to).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path

PIECE_LEVELS = 100  # the folders in one another a piece of a cut chain keeps, well within rmtree's recursion


def remove_tree(path: Path | str) -> bool:
    """Remove the folder `path` with all it holds; whether it is gone."""
    def writable_then_again(function: Callable[..., object], failed: str, _: object) -> None:
        for folder in {os.path.dirname(failed), failed}:
            with contextlib.suppress(OSError, NotImplementedError):  # a link's own bits: no call for them on Linux
                os.chmod(folder, 0o700, follow_symlinks=False)
        with contextlib.suppress(OSError):
            function(failed)

    try:
        shutil.rmtree(path, onerror=writable_then_again)
    except RecursionError:
        _cut(path)
        shutil.rmtree(path, onerror=writable_then_again)
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)


def _cut(path: Path | str) -> None:
    """Move each folder `PIECE_LEVELS` below `path` (or below a piece moved before) up into `path`,
    under a name of its own, so that no chain left in it is deeper than that; listed, never followed."""
    waiting, pieces = [(os.fspath(path), 0)], 0
    while waiting:
        folder, depth = waiting.pop()
        try:
            with os.scandir(folder) as listing:
                names = [entry.name for entry in listing if entry.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for name in names:
            child = os.path.join(folder, name)
            if depth + 1 < PIECE_LEVELS:
                waiting.append((child, depth + 1))
                continue
            moved = os.path.join(path, f".piece-{pieces}")
            pieces += 1
            with contextlib.suppress(OSError):
                os.rename(child, moved)
                waiting.append((moved, 1))

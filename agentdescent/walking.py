"""A folder walked without recursion: a user's target, a rollout's workspace, a run's folder.

`os.walk` (through Python 3.11) and `Path.rglob` call themselves once a level, so a chain of
folders about a thousand deep, which any program can make in a second, stops them with a
`RecursionError`. `walk` keeps its own list of folders still to list instead, and yields what
`os.walk(root)` would, top-down, in the same order: each folder, the names of its folders (a
symlink to a folder among them, never entered) and of its other entries; the caller may prune
the folder names in place. A folder that cannot be listed is passed over, as `os.walk` does.

    [f for f, _, _ in walk("a")] == ["a", "a/b", "a/b/c"]   # a/b/c, three levels

Left out: following links, and the bottom-up order.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

__all__ = ["entries", "walk"]


def walk(root: str | os.PathLike) -> Iterator[tuple[str, list[str], list[str]]]:
    """(folder, folder names, other names) of `root` and of each folder under it, as `os.walk`."""
    waiting = [os.fspath(root)]
    while waiting:
        folder = waiting.pop()
        try:
            with os.scandir(folder) as listing:
                entries = list(listing)
        except OSError:
            continue
        folders, others, links = [], [], set()
        for entry in entries:
            if _is_folder(entry):
                folders.append(entry.name)
                if entry.is_symlink():
                    links.add(entry.name)
            else:
                others.append(entry.name)
        yield folder, folders, others
        waiting.extend(os.path.join(folder, name) for name in reversed(folders) if name not in links)


def entries(root: str | os.PathLike) -> list[Path]:
    """Every entry under `root` but its folders and the links to folders, as `walk` finds them."""
    return [Path(folder, name) for folder, _, names in walk(root) for name in names]


def _is_folder(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir()
    except OSError:
        return False

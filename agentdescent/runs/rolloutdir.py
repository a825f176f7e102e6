"""Where a stored run's rollouts work: a folder of its own in the system's temporary folder, away
from the run folder and from the user's home.

An agent works in its rollout's workspace, and a CLI agent with a shell reads what lies around
it: beside the run folder are the run's tasks with their gold answers, and Claude Code reads every
CLAUDE.md above its working directory (the user's own, under a home). A rollout folder is made by
`tempfile.mkdtemp` (a fresh name only this user can enter), named after its run, and locked
(flock, shared) for as long as the run's process works in it: what a killed process left is
unlocked, and the run's next process, or `runs --prune`, removes it.

Left out: confining an agent that looks further (any file the user can read, it can): that is its
sandbox's work (`extra_args`).
"""

from __future__ import annotations

import contextlib
import glob
import os
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from agentdescent import filelock
from agentdescent.removal import remove_tree

__all__ = ["ROLLOUTS_PREFIX", "clear", "rollout_folder"]

ROLLOUTS_PREFIX = "agentdescent-rollouts-"


@contextlib.contextmanager
def rollout_folder(run_id: str) -> Iterator[Path]:
    """A new folder for the workspaces of run `run_id`, held until the block ends and removed then;
    those its earlier processes left are removed first."""
    clear(run_id)
    path = Path(tempfile.mkdtemp(prefix=f"{ROLLOUTS_PREFIX}{run_id}-"))
    fd = filelock.hold_shared(path)
    try:
        yield path
    finally:
        remove_tree(path)
        os.close(fd)


def clear(run_id: str | None = None, *, idle_for: float = 0.0) -> tuple[int, int]:
    """Remove this user's rollout folders of run `run_id` (None: of every run) that no process
    holds and nothing was made in for `idle_for` seconds; (removed, kept) for their count."""
    pattern = f"{ROLLOUTS_PREFIX}{glob.escape(run_id)}-*" if run_id else f"{ROLLOUTS_PREFIX}*"
    removed = kept = 0
    for path in Path(tempfile.gettempdir()).glob(pattern):
        if not _mine(path) or (run_id and _run_of(path) != run_id):
            continue
        if filelock.held(path, follow_symlinks=False) is not False or time.time() - path.lstat().st_mtime < idle_for:
            kept += 1
            continue
        if remove_tree(path):
            removed += 1
        else:  # what another user made inside it, say: not ours to change
            kept += 1
    return removed, kept


def _mine(path: Path) -> bool:
    """A real folder this user owns: the temporary folder is every user's, and a name there proves nothing."""
    try:
        return not path.is_symlink() and path.is_dir() and path.lstat().st_uid == os.getuid()
    except OSError:  # gone meanwhile
        return False


def _run_of(path: Path) -> str:
    """The run a rollout folder is of: its name, less the prefix and mkdtemp's suffix (which holds no "-")."""
    return path.name.removeprefix(ROLLOUTS_PREFIX).rpartition("-")[0]

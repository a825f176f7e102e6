"""What a CLI agent's call leaves behind, kept where it belongs: nothing in the user's home, and
nothing read from the folders above a rollout's workspace that other users may write.

A CLI saves each session (its whole transcript: all the agent saw, a key an `env` printed
included) under the user's home unless told not to, by a flag only its newer versions know
(`lists`: asked of its `--help` once per version of its file, since an older one refuses a flag
it does not know). Claude Code also keeps a memory folder per working folder, reads the
`CLAUDE.md` of every folder above the one it works in, and keeps per-folder temp files. A
rollout's workspace in the system's temporary folder has folders above it that any user may write
(`/tmp`), so there Claude Code reads no `CLAUDE.md` but the workspace's own (`shared_env` turns
them all off where it has none; `own_instructions_only` leaves out every other, the user's
`~/.claude/CLAUDE.md` too, where it has one), and its temp files go inside the workspace, removed
with it.

Left out: what a CLI writes elsewhere on its own account (its logs, its update checks).
"""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from collections.abc import Sequence
from pathlib import Path

from agentdescent.process import Killed, run_process

__all__ = ["HOST_FOLDERS", "lists", "own_instructions_only", "shared_env"]

HELP_TIMEOUT_S = 30  # asking a CLI's help, once per version of its file
OWN_INSTRUCTIONS = ("CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md")  # a workspace's own, read where it has one
TEMP_IN_WORKSPACE = ".tmp"
HOME_IN_WORKSPACE = ".home"  # a plugin host's home of the rollout's own
# What a CLI keeps in a workspace on its own account (its temp files, its home): never the agent's work.
HOST_FOLDERS = (TEMP_IN_WORKSPACE, HOME_IN_WORKSPACE)


def lists(path: str, flag: str, help_args: Sequence[str]) -> bool:
    """Whether the CLI at `path` lists `flag` in its help (an older one refuses it); asked once a version."""
    try:
        stat = os.stat(path)
    except OSError:
        return False
    return bool(flag) and _help_lists(path, stat.st_mtime_ns, stat.st_size, tuple(help_args), flag)


@functools.lru_cache(maxsize=16)
def _help_lists(path: str, _mtime: int, _size: int, help_args: tuple[str, ...], flag: str) -> bool:
    """Asked once, whatever the answer: a CLI whose help never ends would cost each call its wait."""
    try:
        return flag in run_process([path, *help_args], timeout=HELP_TIMEOUT_S, env=dict(os.environ)).stdout
    except (OSError, Killed):
        return False


def shared_env(workdir: str) -> dict[str, str]:
    """Claude Code's variables for a call in `workdir` when it lies in the system's temporary
    folder (a rollout's workspace): no CLAUDE.md at all where it has none of its own, temp files
    inside it."""
    here = _shared(workdir)
    if here is None:
        return {}
    temp = here / TEMP_IN_WORKSPACE
    temp.mkdir(exist_ok=True)
    return {"TMPDIR": str(temp), **({} if _has_own(here) else {"CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1"})}


def own_instructions_only(workdir: str) -> list[str]:
    """Claude Code's flags for a call in a rollout's workspace that holds a CLAUDE.md of its own:
    every other CLAUDE.md left out (those of the folders above, which other users may write, and
    the user's own), by a pattern that matches every path outside the workspace."""
    here = _shared(workdir)
    if here is None or not _has_own(here):
        return []
    # each of a glob's own characters in the path matched by `?` (Claude Code takes no escape): the
    # pattern may match a sibling's name too, never a folder above the workspace
    outside = "!" + re.sub(r"[][\\*?(){}!+@|^$]", "?", str(here)) + "/**"
    return ["--settings", json.dumps({"claudeMdExcludes": [outside]})]


def _shared(workdir: str) -> Path | None:
    """`workdir` resolved where it lies in the system's temporary folder, else None."""
    here = Path(workdir).resolve()
    return here if here.is_relative_to(Path(tempfile.gettempdir()).resolve()) else None


def _has_own(here: Path) -> bool:
    return any((here / name).is_file() for name in OWN_INSTRUCTIONS)

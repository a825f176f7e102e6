"""What a CLI agent's call leaves behind, kept where it belongs: nothing in the user's home, and
nothing read from the folders above a rollout's workspace that other users may write.

A CLI saves each session (its whole transcript: all the agent saw, a key an `env` printed
included) under the user's home unless told not to, by a flag only its newer versions know
(`lists`: asked of its `--help` once per version of its file, since an older one refuses a flag
it does not know). Claude Code also keeps a memory folder per working folder, reads the
`CLAUDE.md` of every folder above the one it works in, and keeps per-folder temp files. A
rollout's workspace in the system's temporary folder has folders above it that any user may write
(`/tmp`), so there (`shared_env`) Claude Code reads no `CLAUDE.md` but the workspace's own, and
its temp files go inside the workspace, removed with it.

Left out: what a CLI writes elsewhere on its own account (its logs, its update checks).
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from agentdescent.process import Killed, run_process

__all__ = ["lists", "shared_env"]

HELP_TIMEOUT_S = 30  # asking a CLI's help, once per version of its file
OWN_INSTRUCTIONS = ("CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md")  # a workspace's own, read where it has one
TEMP_IN_WORKSPACE = ".tmp"


def lists(path: str, flag: str, help_args: Sequence[str]) -> bool:
    """Whether the CLI at `path` lists `flag` in its help (an older one refuses it); asked once a version."""
    try:
        stat = os.stat(path)
        return bool(flag) and _help_lists(path, stat.st_mtime_ns, stat.st_size, tuple(help_args), flag)
    except (OSError, Killed):
        return False


@functools.lru_cache(maxsize=16)
def _help_lists(path: str, _mtime: int, _size: int, help_args: tuple[str, ...], flag: str) -> bool:
    return flag in run_process([path, *help_args], timeout=HELP_TIMEOUT_S, env=dict(os.environ)).stdout


def shared_env(workdir: str) -> dict[str, str]:
    """Claude Code's variables for a call in `workdir` when it lies in the system's temporary
    folder (a rollout's workspace): no CLAUDE.md from the folders above, temp files inside it."""
    here = Path(workdir).resolve()
    if not here.is_relative_to(Path(tempfile.gettempdir()).resolve()):
        return {}
    temp = here / TEMP_IN_WORKSPACE
    temp.mkdir(exist_ok=True)
    own = any((here / name).is_file() for name in OWN_INSTRUCTIONS)
    return {"TMPDIR": str(temp), **({} if own else {"CLAUDE_CODE_DISABLE_CLAUDE_MDS": "1"})}

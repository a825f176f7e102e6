"""Where a run's target may be: a file or folder of the user's own, nowhere a run could harm.

A run reads its target at the start and `accept` writes the best version back over it, so a
target is refused (`refusal` says why and what to give instead) when it is:

- a path holding a line break or a control character (it would be printed in every line naming it);
- a symlink, or below the current folder with a symlink on the way to it (accept refuses those,
  so a run on one would spend its budget for nothing), or anything but a file or a folder;
- under `/proc`, `/sys` or `/dev` (by real path): kernel views and devices, never data;
- `/` or the home folder itself, or a folder holding the home folder;
- inside the run store (`store.home()`) or a folder holding it: writing there breaks runs;
- inside this package's own code or a folder holding it (`agentdescent`, `agentdescent_mcp`).

Paths are compared by real path, so a second name for a refused place is refused too. Left out:
whether the target's content suits its kind (`build.problems`).
"""

from __future__ import annotations

import importlib.util
import os
import stat
from pathlib import Path

import agentdescent
from agentdescent import reading
from agentdescent.quoting import UNPRINTABLE
from agentdescent.runs import store


def _escaped(text: str) -> str:
    """`text` with what `UNPRINTABLE` finds as its escape."""
    return UNPRINTABLE.sub(lambda found: repr(found.group())[1:-1], text)


def refusal(target: str | os.PathLike) -> str | None:
    """Why `target` (an existing path) cannot be a run's target, with what to give instead; None
    when it can."""
    path = Path(os.path.abspath(target))
    if UNPRINTABLE.search(str(path)):
        return (f"{_escaped(str(path))} holds a line break or a control character, which every line naming the target "
                "would carry; rename it (or the folder it is in)")
    try:
        info = os.lstat(path)
    except OSError as exc:
        return f"{path} cannot be read ({exc.strerror or exc}); check the path and its permissions"
    if stat.S_ISLNK(info.st_mode):
        return (f"{path} is a symlink (to {os.readlink(path)}); a run writes its result back to the target, and "
                f"never through a link: give the real path, {os.path.realpath(path)}")
    if not (stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode)):
        return f"{path} is neither a regular file nor a folder; give a text file or a folder of your own"
    return _linked_on_the_way(path) or _refused_place(path, Path(os.path.realpath(path)))


def _linked_on_the_way(path: Path) -> str | None:
    """A symlink between the current folder and `path`, when `path` lies below the current folder."""
    here = Path(os.getcwd())
    if here not in path.parents:
        return None
    for step in reversed(path.parents):
        if here in step.parents and step.is_symlink():
            return (f"{step} is a symlink on the way to {path}; a run writes its result back to the target, and "
                    f"never through a link: give the real path, {os.path.realpath(path)}")
    return None


def _refused_place(path: Path, real: Path) -> str | None:
    folder = reading.system_folder(real)
    if folder is not None:
        return (f"{path} is under {folder} (real path {real}), where the system keeps devices and kernel files; "
                "give a file or folder of your own")
    if real == Path(real.anchor):
        return f"{path} is the root folder; give the file or folder to evolve"
    home = Path(os.path.realpath(Path.home()))
    if real == home or real in home.parents:
        held = "" if real == home else " or holds it"
        return (f"{path} is your home folder{held}; give the skill, agents or prompt folder to evolve, "
                "e.g. ~/.claude/skills/NAME")
    runs = Path(os.path.realpath(store.home()))
    if _overlap(real, runs):
        return (f"{path} is in the run store ({runs}) or holds it, and a run must not write there; copy what you "
                "mean to evolve somewhere else and give that path (AGENTDESCENT_HOME moves the store)")
    for code in _own_code():
        if _overlap(real, code):
            return (f"{path} is in AgentDescent's own code ({code}) or holds it; copy what you mean to evolve "
                    "somewhere else and give that path")
    return None


def _overlap(path: Path, other: Path) -> bool:
    """Whether `path` is `other`, inside it, or holds it."""
    return path == other or other in path.parents or path in other.parents


def _own_code() -> list[Path]:
    """The folders of this package and of the MCP server's (when installed), by real path."""
    folders = [Path(agentdescent.__file__).parent]
    found = importlib.util.find_spec("agentdescent_mcp")  # located, not imported
    if found is not None and found.origin:
        folders.append(Path(found.origin).parent)
    return [Path(os.path.realpath(folder)) for folder in folders]

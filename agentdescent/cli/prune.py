"""`agentdescent runs --prune`: remove the temporary ledgers that runs without a store left in the
temp folder (`evolve()` with no `store=`, the demo), the rollout folders stored runs killed
mid-run left there (`runs.rolloutdir.clear`: at once, those no live run's process holds locked),
and the scratch folders a killed command left (`SCRATCH_PREFIXES`: a check of a spec's refs, a
merge; each lives seconds).

The temp folder is shared by every user of the machine, so a folder is removed only when all of
this holds: its name starts with `agentdescent-ledger-`, it is a real folder (not a symlink), the
user running the command owns it, it is laid out as a ledger (`looks_like_ledger`), no process has
it open (`in_use`), and nothing has been written in it for PRUNE_AFTER_SECONDS (a run may still be
making a newer one its ledger). Anything
else is left as it is and counted. Left out: the run store, which this never touches.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from rich.console import Console

from agentdescent import refcheck
from agentdescent.cli.views import plural
from agentdescent.cli.watch import FAILURE, say
from agentdescent.engine import TEMPORARY_LEDGER_PREFIX
from agentdescent.runs.rolloutdir import Cleared, clear
from agentdescent.step import textmerge
from agentdescent.walking import walk

PRUNE_AFTER_SECONDS = 600.0  # a temporary ledger nothing has written to for this long belongs to no live run
SCRATCH_PREFIXES = (refcheck.SCRATCH_PREFIX, textmerge.SCRATCH_PREFIX)  # folders a process removes within seconds


def prune(console: Console, now: float | None = None) -> int:
    """Remove this user's temporary ledgers nothing has written to for PRUNE_AFTER_SECONDS, and say
    what was removed and what was left; 1 when a removal failed."""
    from agentdescent.ledger import in_use, looks_like_ledger  # here: the other verbs need no GitPython

    folder, now = Path(tempfile.gettempdir()), time.time() if now is None else now
    removed, kept, others, freed = 0, 0, 0, 0
    failed: list[str] = []
    for path in sorted(folder.glob(f"{TEMPORARY_LEDGER_PREFIX}*")):
        if path.is_symlink() or not path.is_dir():
            continue
        if path.lstat().st_uid != os.getuid():
            others += 1
            continue
        size, newest = _size_and_newest(path)
        if now - newest < PRUNE_AFTER_SECONDS:
            kept += 1  # a run that just started may not have made it a ledger yet
            continue
        if not looks_like_ledger(path):
            others += 1
            continue
        if in_use(path):  # a run still has it open, however long since it last wrote (a slow agent)
            kept += 1
            continue
        if _removed(path, failed):
            removed, freed = removed + 1, freed + size
    left = (f"; left {plural(others, 'folder')} named like one that another user owns or that is not a ledger"
            if others else "")
    rollouts = clear()
    scratch = _scratch(folder, now, failed)
    say(console, f"removed {plural(removed, 'temporary ledger')} older than 10 minutes from {folder}, "
                 f"freeing {human_size(freed)}; kept {kept} newer (a run may still be writing it){left}",
        _rollouts_said(rollouts),
        *([f"removed {plural(scratch, 'scratch folder')} killed commands left there"] if scratch else []),
        *(f"could not remove {f}" for f in failed),
        "the run store was not touched; next: agentdescent runs lists its runs")
    return FAILURE if failed else 0


def _rollouts_said(cleared: Cleared) -> str:
    """What became of the rollout folders: those a live run's process holds are kept, and why."""
    said = f"removed {plural(cleared.removed, 'rollout folder')} that stopped runs left there"
    if cleared.live:
        said += f"; kept {cleared.live} that a live run's process holds (it works in it)"
    if cleared.left:
        said += f"; could not remove {cleared.left} that no run holds (what another user made is in it, say)"
    return said


def _scratch(folder: Path, now: float, failed: list[str]) -> int:
    """Remove this user's scratch folders (`SCRATCH_PREFIXES`) nothing has written to for
    PRUNE_AFTER_SECONDS; how many went (a failure is added to `failed`)."""
    removed = 0
    for path in sorted(p for prefix in SCRATCH_PREFIXES for p in folder.glob(f"{prefix}*")):
        if path.is_symlink() or not path.is_dir() or path.lstat().st_uid != os.getuid():
            continue
        if now - _size_and_newest(path)[1] >= PRUNE_AFTER_SECONDS:
            removed += _removed(path, failed)
    return removed


def _removed(path: Path, failed: list[str]) -> bool:
    """Remove the folder `path`; a failure is added to `failed`."""
    try:
        shutil.rmtree(path)
    except OSError as exc:
        failed.append(f"{path} ({exc.strerror or exc})")
        return False
    return True


def _size_and_newest(folder: Path) -> tuple[int, float]:
    """The bytes of the files under `folder` and the newest modification time in it."""
    size, newest = 0, folder.lstat().st_mtime
    for root, dirs, files in walk(folder):
        for name in dirs + files:
            try:
                info = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            newest = max(newest, info.st_mtime)
            size += info.st_size if name in files else 0
    return size, newest


def human_size(n: float) -> str:
    """human_size(512) == "512 B"; human_size(1_500_000) == "1.4 MB"."""
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"

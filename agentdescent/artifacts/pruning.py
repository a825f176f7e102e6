"""How many backups of a target are kept: every write-back and every restore copies the whole
target into a new backup, so without a bound a user flipping between versions fills the disk.

Once a write-back or a restore has ended and its own backup is settled, `prune` removes the oldest
of the target's settled backups past the newest `KEEP`, under the target's lock (the caller holds
it) and after `backups.recover`, so that no write is in progress and none a killed writer left is
still to be settled. Settled means trusted by the registry (recorded, its journal agreeing, its
copy intact) and of a write that ended (`done` or `rolled back`); only those count towards `KEEP`
and only those are removed. A folder the registry does not trust, a backup whose copy was changed
since, and the backup of a write still `copying` or `applying` are never touched. The removed
ones are forgotten in the registry (`backups.remove`), and the caller tells the user which
(`said`). A folder that cannot be deleted now (a permission) stays recorded as `removing`, passed
over by `restore`, and the next writer's `recover` deletes it; the write that ended is not undone
for it.

Left out: which backups are trusted and how one is removed (`backups`, `registry`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from agentdescent.artifacts import backups

KEEP = 10  # backups kept per target: the last few versions to flip between, not every one ever written


def prune(target: Path, keep: int = KEEP) -> tuple[int, ...]:
    """Remove the oldest settled backups of `target` past the newest `keep` (at least one is kept:
    it is what the next restore puts back); the numbers removed, oldest first. The caller holds
    the target's lock and has ended its own write."""
    settled = [b for b in backups.backups(target) if _settled(b)]
    old = settled[: max(len(settled) - max(keep, 1), 0)]
    return tuple(b.number for b in old if backups.remove(b))  # one that will not go yet goes with the next write


def said(removed: Sequence[int], keep: int = KEEP) -> str:
    """What a write-back or restore tells of the backups it removed ("" for none):
    said([3]) == "removed backup 3, the oldest past the 10 kept" """
    if not removed:
        return ""
    which = "backup" if len(removed) == 1 else "backups"
    return f"removed {which} {spans(removed)}, the oldest past the {keep} kept"


def spans(numbers: Sequence[int]) -> str:
    """Numbers for a person, runs of three or more as ranges: spans([1, 2, 3, 5]) == "1 to 3, 5" """
    parts: list[str] = []
    run: list[int] = []
    for number in [*sorted(numbers), None]:
        if run and number == run[-1] + 1:
            run.append(number)
            continue
        if run:
            parts.append(f"{run[0]} to {run[-1]}" if len(run) > 2 else ", ".join(map(str, run)))
        run = [] if number is None else [number]
    return ", ".join(parts)


def _settled(backup: backups.Backup) -> bool:
    """Whether `backup` is one a write ended with, its journal caught up and its copy as recorded."""
    record, journal = backup.record, backup.journal()
    return (record.existed and record.phase in backups.ENDED and journal is not None and journal.phase == record.phase
            and backup.intact())

"""A run's status as its target stands now, read from the disk: what `status` says of a run whose
target changed since the status was written.

A write-back or restore of the target still under way, or cut short by a kill (some files old,
some new), is said in every state but a live run's, with what settles it. A run recorded
`accepted` whose version the target no longer holds (a restore killed after it put the backup
back but before it told the runs, an edit by hand) is shown `restored`, and one recorded
`restored` whose version the target holds again is shown `accepted`, so that no status sends the
user to a restore that would undo what they asked for. Nothing is written here: the next accept
or restore records what the target holds (`restoring.follow`), and a read-only store is read.
A listing of many runs reads each target once (`Readings`), not once a run.

Left out: the states a run's own process writes (`status`), and how a backup is put back
(`restoring`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

from agentdescent.artifacts import backups, registry
from agentdescent.commands import command
from agentdescent.errors import UserError
from agentdescent.runs.status import LIVE, RunStatus

WRITTEN = ("accepted", "restored")  # the states of a run whose version was written back, or undone since
T = TypeVar("T")


class Readings:
    """What one listing of runs has read of their targets, each thing once: a target's backups
    (`half_written`) and the files its runs wrote (`on_disk`). A store of many runs on one target
    surveys its backups once, not once a run. A read that failed fails alike for every run that
    asks again. Made anew for each listing: a target changes between two."""

    def __init__(self) -> None:
        self._read: dict[tuple[str, Path], Any] = {}  # what was read, or the error reading it raised

    def half_written(self, target: Path) -> bool:
        return self._once(("half written", target), lambda: half_written(target))

    def on_disk(self, target: Path, kind: str, names: Iterable[str]) -> dict[str, str]:
        """`on_disk`, each path read once."""
        paths = {name: target if kind == "text" else target / name for name in names}
        return {name: self._once(("seen", path), functools.partial(registry.seen, path)) for name, path in paths.items()}

    def _once(self, key: tuple[str, Path], read: Callable[[], T]) -> T:
        if key not in self._read:
            try:
                self._read[key] = read()
            except (OSError, UserError) as exc:
                self._read[key] = exc
        found = self._read[key]
        if isinstance(found, (OSError, UserError)):
            raise found.with_traceback(None)
        return found


def as_on_target(run_id: str, status: RunStatus, readings: Readings | None = None) -> RunStatus:
    """`status` with what its target holds now said: a write-back cut short, a backup gone, a
    version taken away or put back since the status was written. A listing passes its `readings`."""
    if status.state in LIVE or not status.target:
        return status
    target, readings = Path(status.target), readings or Readings()
    if status.state == "accepted" and status.backup and not os.path.lexists(status.backup):
        status = status.model_copy(update={  # removed by hand: no restore can put it back
            "message": f"{status.message}; its backup {status.backup} is no longer there", "next": ""})
    if readings.half_written(target):
        return _half_written(run_id, status)
    if status.state in WRITTEN and status.wrote:
        return _followed(run_id, status, target, readings)
    return status


def half_written(target: Path) -> bool:
    """Whether a write-back or restore of `target` is under way or was cut short; not when its
    backups cannot be listed (a folder made unreadable since: no status fails for it)."""
    try:
        return backups.interrupted(target) is not None
    except OSError:
        return False


def settles(run_id: str, target: str, *, final: bool) -> str:
    """What settles a target a write-back or restore left half done: a restore rolls it back, and
    for a run with a final version, its accept rolls it back and writes that version whole."""
    back = f"{command('restore', target)} rolls it back, putting back what it held before"
    return f"{command('accept', run_id)} finishes it with this run's version; {back}" if final else back


def on_disk(target: Path, kind: str, names: Iterable[str]) -> dict[str, str]:
    """What `target` holds at each of `names` (`registry.seen`); a text target's one file goes by its own name."""
    return Readings().on_disk(target, kind, names)


def _half_written(run_id: str, status: RunStatus) -> RunStatus:
    cut = (f"{status.message}; but a write-back or restore of {status.target} is under way, or was cut short and "
           "left it half done (some files as they were, some changed)")
    if status.state in WRITTEN:
        nxt = (f"{command('restore', status.target)} settles a half-done one (and puts the backup back); "
               f"{command('accept', run_id)} after it writes this run's version again")
    else:  # a run that finished, or was rejected after it did, can still be written back whole
        final = status.state == "finished" or status.next.startswith(command("accept", run_id))
        nxt = settles(run_id, status.target, final=final)
    return status.model_copy(update={"message": cut, "next": nxt})


def _followed(run_id: str, status: RunStatus, target: Path, readings: Readings) -> RunStatus:
    """An accepted or restored run shown in the state the target's files say it is in."""
    try:
        holds = readings.on_disk(target, status.kind, status.wrote) == status.wrote
    except OSError:  # a file made unreadable since: the status as it was written
        return status
    if holds == (status.state == "accepted"):
        return status
    if holds:
        return status.model_copy(update={
            "state": "accepted", "backup": None, "message": f"{status.target} holds this run's version again (written back or put "
                                            "back since this status was recorded)",
            "next": f"{command('restore', status.target)} puts the previous content back"})
    return status.model_copy(update={
        "state": "restored", "backup": None,
        "message": f"{status.target} no longer holds this run's version (a restore, another write-back or an edit "
                   "changed it after this status was recorded)",
        "next": f"{command('accept', run_id)} writes the run's version again"})

"""`agentdescent restore PATH`: put a backup of a target back, and say so in the status of the run
whose write-back that undoes (or redoes).

A restore is an undo: it puts back the newest backup of PATH (`artifacts.undo.restore`),
after backing up what PATH held, so the next restore puts that back in turn; `number` picks an
older backup instead. The runs follow the target (`follow`): a run's accept records what it
wrote, and after a restore, or another run's accept, each run on the target is `accepted` while
the target holds its version and `restored` once it does not, its `backup` then naming the copy
just taken; a restore first brings them up to date with what the target holds, which a restore
or accept killed before it told them left behind (`status` reads the target: `ontarget`). A run
accepted before its status recorded what it wrote follows the backups instead:
the run whose `backup` is the copy put back flips. A write-back or restore removes the oldest
backups past `pruning.KEEP`; a run whose `backup` is gone stops naming it (`unbacked`), so that
its status never sends the user to a folder that is not there.

Left out: which backup qualifies and how paths are put back (`artifacts.backups`,
`artifacts.undo`); a restore with nothing to change touches no run.
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, Field

from agentdescent.artifacts import backups, pruning, registry, targetlock
from agentdescent.artifacts.undo import Restored
from agentdescent.artifacts.undo import restore as put_back
from agentdescent.artifacts.writeback import target_path
from agentdescent.commands import command
from agentdescent.errors import UserError
from agentdescent.quoting import UNPRINTABLE
from agentdescent.runs import ontarget
from agentdescent.runs.ontarget import on_disk
from agentdescent.runs.store import RunDir, RunStore


class Restoration(BaseModel):
    """What a restore did to a target, and to the runs that wrote it."""

    target: str
    source: str  # the backup copy put back
    backup: str | None  # the copy of what the target held before, which the next restore puts back
    changed: list[str] = Field(default_factory=list)
    refused: list[str] = Field(default_factory=list)  # folders beside the target that are not our backups
    numbers: list[int] = Field(default_factory=list)  # the trusted backups there are now, oldest first
    left: list[str] = Field(default_factory=list)  # files whose names a run never writes, left as they are
    removed: list[int] = Field(default_factory=list)  # the oldest backups past `pruning.KEEP`, removed after it
    runs: dict[str, str] = Field(default_factory=dict)  # run id -> its state now, for each run whose state changed
    message: str
    next: str


def restore(store: RunStore, path: str | Path, number: int | None = None, *, overwrite: bool = False) -> Restoration:
    """Put backup `number` of `path` back (default: the newest), then bring the run it undoes or
    redoes up to date; edits made since the last write-back refuse it unless `overwrite`."""
    target = target_path(path)
    with targetlock.locked(target):  # a run's status changes under the lock its write-back took
        # a restore or accept killed before it told the runs left their statuses behind the target: caught up first
        runs = {} if ontarget.half_written(target) else follow(
            store, target, "it changed after the run's status was recorded", backup=None)
        done = put_back(target, number, overwrite=overwrite)
        runs |= _follow(store, target, done) if done.changed else {}
        if done.changed:
            unbacked(store, target)
    if done.changed:
        said = [f"restored {target} from {done.source} ({len(done.changed)} paths put back)",
                f"what it held before is in {done.backup}" if done.backup else "it was not there before"]
        nxt = f"{command('restore', target)} undoes this restore" if done.backup else ""
    else:
        said = [f"{target} already matches the backup {done.source}; nothing changed"]
        nxt = f"{command('restore', target)} --backup N puts another backup back" if len(done.numbers) > 1 else ""
    left = ", ".join(repr(name) if UNPRINTABLE.search(name) else name for name in done.left[:10])
    more = f" and {len(done.left) - 10} more" if len(done.left) > 10 else ""
    said += [f"left as they are, with names a run never writes: {left}{more}"] if done.left else []
    said = [f"first rolled back the write a killed process left half done, from {', '.join(done.settled)}",
            *said] if done.settled else said
    said += [f"run {run} is now {state}" for run, state in runs.items()]
    said += [pruning.said(done.removed)] if done.removed else []
    return Restoration(target=str(target), source=str(done.source), backup=None if done.backup is None else str(done.backup),
                       changed=list(done.changed), refused=list(done.refused), numbers=list(done.numbers), runs=runs,
                       left=list(done.left), removed=list(done.removed),
                       message="; ".join(said), next=nxt)


def _follow(store: RunStore, target: Path, done: Restored) -> dict[str, str]:
    """Flip the state of each run on `target` whose version the restore put back or took away; their new states."""
    backup = None if done.backup is None else str(done.backup)
    changed = follow(store, target, f"a restore put {done.source} back", backup=backup)
    for run in _runs_on(store, target):  # runs accepted before their status said what they wrote: by backup
        status = run.recorded()
        if status.wrote or status.state not in ("accepted", "restored") or status.backup != str(done.source):
            continue
        if status.state == "accepted" and done.backup is None:  # the run's version was gone: deleted since
            update = {"state": "restored", "message": f"{target} holds again what it held before this run's write-back "
                      "(a restore put it back where it had been deleted)",
                      "next": f"{command('accept', run.id)} writes the run's version again"}
        elif status.state == "accepted":
            update = {"state": "restored", "message": f"{target} holds again what it held before this run's write-back "
                      f"(a restore undid it); the run's version is in {done.backup}",
                      "next": f"{command('restore', target)} puts the run's version back"}
        elif done.backup is None:
            continue
        else:
            update = {"state": "accepted", "message": f"written back to {target} again by a restore from {done.source}",
                      "next": f"{command('restore', target)} puts the previous content back"}
        run.write_status(status.model_copy(update={**update, "backup": backup}))
        changed[run.id] = update["state"]
    return changed


def follow(store: RunStore, target: Path, why: str, *, backup: str | None, besides: str = "") -> dict[str, str]:
    """Bring each run on `target` (but `besides`) that recorded what its write-back wrote up to
    date with what the target holds now: accepted while it holds the run's version, restored once
    it does not (`why` says what changed it; `backup` is the copy just taken of what it held).
    The caller holds the target's lock. Their new states, for the runs that changed."""
    changed = {}
    for run in _runs_on(store, target):
        status = run.recorded()
        if run.id == besides or not status.wrote or status.state not in ("accepted", "restored"):
            continue
        now = "accepted" if on_disk(target, status.kind, status.wrote) == status.wrote else "restored"
        if now == status.state:
            continue
        if now == "restored" and backup:
            update = {"message": f"{target} no longer holds this run's version ({why}); it is in {backup}",
                      "next": f"{command('restore', target)} puts the run's version back"}
        elif now == "restored":
            update = {"message": f"{target} no longer holds this run's version ({why})",
                      "next": f"{command('accept', run.id)} writes the run's version again"}
        else:
            update = {"message": f"{target} holds this run's version again ({why})",
                      "next": f"{command('restore', target)} puts the previous content back"}
        run.write_status(status.model_copy(update={**update, "state": now, "backup": backup}))
        changed[run.id] = now
    return changed


def unbacked(store: RunStore, target: Path) -> None:
    """Each run on `target` whose `backup` is no longer there (removed as one of the oldest past
    `pruning.KEEP`, by this write or by a `write_to` outside any run) stops naming it; a restored
    run is written back again by accept, which needs no backup. The caller holds the target's lock."""
    for run in _runs_on(store, target):
        status = run.recorded()
        if status.backup is None or os.path.lexists(status.backup):
            continue
        update = {"backup": None, "message": f"{status.message}; {gone_backup(status.backup)}"}
        if status.state == "restored":
            update["next"] = f"{command('accept', run.id)} writes the run's version again"
        run.write_status(status.model_copy(update=update))


def gone_backup(backup: str) -> str:
    return (f"its backup {backup} is no longer there (removed by hand, or as one of the oldest past the newest "
            f"{pruning.KEEP} a target keeps)")


def _runs_on(store: RunStore, target: Path) -> list[RunDir]:
    """The runs of the store whose target is `target` (by the path the backups' record uses)."""
    key, found = registry.key(target), []
    for run in store.all():
        try:
            status = run.recorded()
        except UserError:
            continue
        if status.target and registry.key(Path(status.target)) == key:
            found.append(run)
    return found


def listing(target: Path, numbers: list[int]) -> str:
    """The backups there are, for a person, at most the newest `pruning.KEEP` (more are there only
    until the next write-back or restore removes them): listing(Path("a/skill"), [1, 2]) == "backups 1, 2 in a/.skill.bak-*" """
    if not numbers:
        return "no backups left"
    older = len(numbers) - pruning.KEEP
    more = f" (and {older} older, removed by the next write-back or restore)" if older > 0 else ""
    return f"backups {', '.join(map(str, numbers[-pruning.KEEP:]))}{more} in {backups.pattern(target)}"

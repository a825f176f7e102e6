"""A person's verdict on a run's change: `accept` writes a finished run's best version back
(backup first; the user's own edits since the run started kept or merged) or, while the run goes,
approves its pending L1 change; `reject` records that nothing is to be written, or declines that
change. A pending change is answered only by its id (the `change` that `show` and `status` give):
another change posted since, which nobody was shown, is never approved or declined in its place.

An accept holds the run's accept lock, so two at once never interleave, and the target's lock
(`targetlock`) across the write and the status that records it, so a restore that follows sees the
run it undoes; a write killed half-way is rolled back by the next one (the write-back's own
journal), and one killed after its write ended but before the status recorded it is recorded by
the next, with that write's backup (which names the run: another run's write of the same version
is named as such, never taken for this run's). The backups past `pruning.KEEP` that the
write-back removed are named in its answer, and a run whose status named a backup now gone no
longer does (`restoring.unbacked`). Left out: what a run shows (`review`); putting a backup back
(`restoring`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path

from pydantic import BaseModel, Field

from agentdescent import reading
from agentdescent.artifacts import backups, pruning, registry, targetlock
from agentdescent.artifacts.writeback import WritePlan, target_path, write_back
from agentdescent.commands import command
from agentdescent.errors import UserError
from agentdescent.quoting import first_of, quoted
from agentdescent.result import EvolveResult
from agentdescent.runs import keys, ontarget, restoring, review, sealed
from agentdescent.runs.host import APPROVAL
from agentdescent.runs.mailbox import Mailbox, Request
from agentdescent.runs.status import LIVE
from agentdescent.runs.store import RunDir, RunStore

WRITABLE = ("finished", "rejected", "restored")  # ended with a result that is not on the target: accept writes it
# an answer's lists, each with its total
LISTS = ("written", "deleted", "merged", "kept", "conflicts", "refused", "removed", "markers_left")
ANSWER_FILE = "accepted.json"  # in the run's folder: the last write-back's answer, every list whole


class Accepted(BaseModel):
    run_id: str
    dry_run: bool
    approved: bool | None = None  # an L1 change approved (accept during a run) instead of a write-back
    target: str
    written: list[str] = Field(default_factory=list)
    deleted: list[str] = Field(default_factory=list)
    unchanged: int = 0  # files the write leaves as they are (a count: a folder may hold thousands)
    merged: list[str] = Field(default_factory=list)  # written as the merge of the run's change and the user's edit
    kept: list[str] = Field(default_factory=list)  # edited by the user since the run started, untouched by the run
    conflicts: list[str] = Field(default_factory=list)  # edited by both beyond a merge: refused unless overwrite
    backup: str | None = None
    refused: list[str] = Field(default_factory=list)  # folders beside the target that are not our backups: left alone
    removed: list[int] = Field(default_factory=list)  # the oldest backups past `pruning.KEEP`, removed after the write
    # a masked run's markers written as they are, not where the target held the key: "SKILL.md line 9: [redacted HOME]"
    markers_left: list[str] = Field(default_factory=list)
    # how many each list holds: a host's page names only the first of each (`lists_page`)
    written_total: int = 0
    deleted_total: int = 0
    merged_total: int = 0
    kept_total: int = 0
    conflicts_total: int = 0
    refused_total: int = 0
    removed_total: int = 0
    markers_left_total: int = 0
    answer_file: str | None = None  # a write-back's: this answer kept whole, every list in full
    message: str
    next: str = ""


def accept(store: RunStore, run_id: str, *, dry_run: bool = False, overwrite: bool = False,
           change: str | None = None) -> Accepted:
    """Write a finished run's best version back (backup first): a file the user edited since the
    run started is kept or merged, and edits that do not merge refuse the write unless `overwrite`;
    while the run goes, approve its pending L1 change `change` instead. A run that finished and was then
    rejected, or whose write-back a restore undid, is written back the same way."""
    run = store.get(run_id)
    status = run.status()
    if status.state in LIVE:
        return _answer_approval(run, approved=True, change=change, dry_run=dry_run)
    _no_change_pending(run, change, status.state)
    if status.state == "accepted" and backups.interrupted(target_path(status.target)) is not None:
        raise UserError(f"run {run.id} was accepted, but a write-back or restore of {status.target} is under way, "
                        f"or was cut short and left it half done: {status.next}")
    if status.state == "accepted":
        kept = status.backup or "no backup (nothing changed, or it was since removed as one of the oldest)"
        raise UserError(f"run {run.id} was already accepted: {status.target} was written back; its previous "
                        f"content is in {kept}")
    result = review.result_of(run)
    if status.state not in WRITABLE or result is None or not _final(result):
        raise UserError(_not_final(run, status.state, status.next))
    sealed.check(run)  # its sealed spec names the target (the status agrees, `store`): edited, it would name another
    if not os.path.lexists(status.target):
        raise UserError(_gone(run, status.target))
    target = target_path(status.target)
    writing = contextlib.nullcontext() if dry_run else targetlock.locked(target)
    # the status is recorded under the target's lock, so that a restore sees the run it undoes
    # a dry run writes nothing, so it goes without the accept's lock: a read-only store is read
    holding = contextlib.nullcontext() if dry_run else run.holding(
        "accept.lock", f"another accept of run {run.id} is writing right now; wait for it")
    with holding, writing:
        if run.status().state == "accepted":  # the other accept finished while we waited for the lock
            raise UserError(f"run {run.id} was already accepted just now")
        result, base, left = _to_write(run, result)
        plan = write_back(status.target, result.rendered, initial=result.initial_state, frozen=result.frozen,
                          dry_run=dry_run, overwrite=overwrite, base=base, run=run.id, left_out=result.left_out)
        done = Accepted(run_id=run.id, dry_run=dry_run, target=status.target, written=list(plan.written),
                        deleted=list(plan.deleted), unchanged=len(plan.unchanged), merged=list(plan.merged),
                        kept=list(plan.kept), conflicts=list(plan.conflicts),
                        backup=None if plan.backup is None else str(plan.backup), refused=list(plan.refused),
                        removed=list(plan.removed), markers_left=left, message="")
        left_out = _markers_said(left) + _unmeasured(result, run.id)  # what the write leaves as it is, or out
        if dry_run:
            return _counted(done.model_copy(update={"message": _dry_run_message(plan, overwrite) + left_out,
                                                    "next": _after_dry_run(run.id, status.target, plan, overwrite)}))
        # every file the run's change is in, written now or already so (an accept killed before this status)
        files = {*plan.written, *plan.deleted, *review.changed(base, result.rendered, target.name)}
        earlier = None if plan.changes else _ended_write(target, files)
        if earlier is not None and earlier.record.run == run.id:  # this run's accept, cut short before its status
            done = done.model_copy(update=_written_by(earlier))
        by = "" if earlier is None or earlier.record.run == run.id else _by(earlier)  # its version, another's write
        done = _counted(done.model_copy(update={
            "message": _wrote(done, plan, status.target, by=by, earlier=earlier is not None) + left_out,
            "next": f"{command('restore', status.target)} puts it back" if done.backup else "",
            "answer_file": str(run.file(ANSWER_FILE))}))
        run.write(ANSWER_FILE, done.model_dump_json(indent=1))  # before the status: a failed write is an accept cut short
        run.write_status(status.model_copy(update={
            "state": "accepted", "backup": done.backup, "wrote": restoring.on_disk(target, status.kind, sorted(files)),
            "wrote_total": len(files),
            "message": f"{status.target} already held this run's version, written by {by}" if by else
            f"written back to {status.target}: {len(done.written)} written, {len(done.deleted)} deleted",
            "next": f"{command('restore', status.target)} puts the backup back" if done.backup else ""}))
        restoring.follow(store, target, f"run {run.id}'s write-back replaced it", backup=done.backup, besides=run.id)
        restoring.unbacked(store, target)
    return done


def _wrote(done: Accepted, plan: WritePlan, target: str, *, by: str, earlier: bool) -> str:
    """What a write-back did, for its answer's message: each list by its count and first names."""
    backup = f"; the previous content is in {done.backup}" if done.backup else "" if by else "; nothing needed changing"
    yours = (f"; {len(done.merged)} merged with what changed on disk since the run started: {first_of(done.merged)}"
             if done.merged else "") + (f"; {len(done.kept)} kept as they changed on disk since the run started: "
                                        f"{first_of(done.kept)}" if done.kept else "")
    passed_over = f"; {first_of(done.refused, 3, sep='; ')}" if done.refused else ""
    settled = (f"first rolled back the write a killed process left half done, from {', '.join(plan.settled)}; "
               if plan.settled else "")
    removed = f"; {pruning.said(done.removed)}" if done.removed else ""
    wrote = (f"{target} already holds this run's version, written by {by}; nothing was written" if by else
             f"wrote {target}" if not earlier else f"{target} was written already, by an accept "
             f"cut short after its write-back and before it recorded it ({_files(done)})")
    return f"{settled}{wrote}{backup}{yours}{passed_over}{removed}"


def _counted(done: Accepted) -> Accepted:
    """`done` with the total of each of its lists."""
    return done.model_copy(update={f"{name}_total": len(getattr(done, name)) for name in LISTS})


def _ended_write(target: Path, files: set[str]) -> backups.Backup | None:
    """The backup of the write-back that left the target holding this run's version: the newest
    backup, taken by a write-back that ended, whose paths are all files of the run's change and
    still hold what that write left there. None when there is none. Its record's `run` says whose
    accept it was: this run's, killed before its status recorded it, or another run's that ended
    with the same version."""
    try:
        ended = [b for b in backups.backups(target) if b.record.phase in backups.ENDED]
    except OSError:
        return None
    if not ended:
        return None
    newest, record = ended[-1], ended[-1].record
    if record.made_by != "write_to" or record.phase != "done" or not record.existed or not record.after:
        return None
    mine = all((path or target.name) in files for path in record.paths)
    if not mine or not os.path.lexists(newest.copy):
        return None
    return newest if all(registry.seen(target / path) == record.after.get(path) for path in record.paths) else None


def _by(backup: backups.Backup) -> str:
    """Whose write-back a backup was taken for, for a message: _by(...) == "run my-skill-3f9a2c's accept" """
    run = backup.record.run
    if run is None:
        return "an earlier write-back that named no run"
    return f"run {run if reading.looks_like_a_name(run) else quoted(run, 60)}'s accept"


def _written_by(backup: backups.Backup) -> dict[str, object]:
    """An answer's fields for what a write-back that ended wrote, from its backup's record."""
    after, name = backup.record.after or {}, backup.target.name
    return {"written": sorted(p or name for p in backup.record.paths if after.get(p) != "absent"),
            "deleted": sorted(p or name for p in backup.record.paths if after.get(p) == "absent"),
            "backup": str(backup.copy)}


def _files(done: Accepted) -> str:
    """The files an answer says were written and deleted: _files(...) == "2 written: a.md, b.md; 1 deleted: c.md" """
    said = [f"{len(names)} {verb}: {first_of(names, 10)}" for verb, names in (("written", done.written), ("deleted", done.deleted))
            if names]
    return "; ".join(said) or "no file"


def _final(result: EvolveResult | None) -> bool:
    """Whether a run with this result got to its end: one that no cancel or failure cut short."""
    return result is not None and result.error is None


def _not_final(run: RunDir, state: str, nxt: str) -> str:
    """Why a run that did not finish has nothing to write back, and what to do instead."""
    if state == "rejected":
        return (f"run {run.id} was rejected before it finished, so it has no final version to write back; "
                "agentdescent evolve SPEC starts a new run")
    return (f"run {run.id} is {state}, not finished, so its change is not final: "
            f"{nxt or command('resume', run.id) + ', then accept it when it finishes'}")


def _gone(run: RunDir, target: str) -> str:
    """Why a target moved or deleted since the run started is not written back: made anew, it would
    hold only what the run read of it, none of the files it left out or carried."""
    return (f"{target} is not there: it was moved or deleted after run {run.id} started, and written back anew it "
            "would hold only the files the run read, none it left out; nothing was written. Put it back at that "
            f"path, then {command('accept', run.id)} again; {command('show', run.id)} gives the change as a patch "
            "for a copy elsewhere")


def _to_write(run: RunDir, result: EvolveResult) -> tuple[EvolveResult, str | dict[str, str], list[str]]:
    """The run's `result` and what the target held when the run started, with the keys a masked
    run never saw put back from the environment where the target held them (`keys`), and the
    markers left as they are."""
    base = review.initial(run)  # sealed: `check` ran first
    if run.spec().keys_in_target == "mask":
        left = keys.left(result.rendered, base, name=Path(run.spec().target).name)
        return dataclasses.replace(result, rendered=keys.unmasked(result.rendered, base)), keys.unmasked(base, base), left
    return result, base, []


def _markers_said(left: list[str]) -> str:
    """A masked run's markers written as they are, for an answer's message ("" when there are none)."""
    return f"; {keys.said(left)} ({first_of(left, sep='; ')})" if left else ""


def _after_dry_run(run_id: str, target: str, plan: WritePlan, overwrite: bool) -> str:
    """What to do after a dry run: accept, or, where edits of the user's and the run's do not
    merge, merge them by hand or overwrite them knowingly."""
    if plan.conflicts and not overwrite:
        return (f"merge {first_of(plan.conflicts)} by hand (the run's change: {command('show', run_id)}) and "
                f"accept again, or {command('accept', '--overwrite', run_id)} writes the run's version there; the "
                "backup it takes first keeps yours")
    return f"{command('accept', *(['--overwrite'] if overwrite else []), run_id)} writes it (backing {target} up first)"


def _unmeasured(result: EvolveResult, run_id: str) -> str:
    """What an accept leaves out: a version the run committed and never measured (`show` says where it is)."""
    if result.unmeasured is None:
        return ""
    return (f"; this is version {result.version}, the best measured: version {result.unmeasured} was committed but "
            f"never measured on the held-out tasks, and is not written ({command('show', run_id)} says "
            "where it is)")


def _dry_run_message(plan: WritePlan, overwrite: bool) -> str:
    settled = " once the files below that both changed are settled" if plan.conflicts and not overwrite else ""
    said = [f"{len(plan.written)} file(s) would be written", f"{len(plan.deleted)} deleted{settled}"]
    if plan.merged:
        said.append(f"{len(plan.merged)} of them merged with what changed on disk since the run started "
                    f"({first_of(plan.merged)})")
    if plan.kept:
        said.append(f"{len(plan.kept)} changed on disk since the run started kept as they are")
    if plan.conflicts:  # on disk: by the user, or by a program (an agent that wrote outside its workspace)
        said.append(f"{len(plan.conflicts)} changed on disk since the run started and by the run, beyond a merge "
                    f"({first_of(plan.conflicts)}): " + ("overwritten with the run's version" if overwrite else
                                                              "refused, so accept would write nothing; merge them by "
                                                              "hand or accept with overwrite"))
    passed_over = [first_of(plan.refused, 3, sep="; ")] if plan.refused else []
    return "dry run: " + "; ".join(said + passed_over) + "; nothing was touched"


def reject(store: RunStore, run_id: str, *, change: str | None = None) -> Accepted:
    run = store.get(run_id)
    status = run.status()
    if status.state in LIVE:
        return _answer_approval(run, approved=False, change=change)
    _no_change_pending(run, change, status.state)
    with run.holding("accept.lock", f"an accept of run {run.id} is writing right now; wait for it"):
        status = run.status()  # as an accept that held the lock left it
        if status.state not in ("finished", "cancelled", "failed", "interrupted"):
            raise UserError(f"run {run.id} is {status.state}; there is nothing to reject")
        final = _final(review.result_of(run))
        later = (f"{command('accept', run.id)} still writes it back if you change your mind"
                 if final else "agentdescent evolve SPEC starts a new run")
        cut = bool(status.target) and ontarget.half_written(target_path(status.target))
        run.write_status(status.model_copy(update={
            "state": "rejected", "message": "rejected: its version is not to be written back" if cut else
            "rejected: nothing was written", "next": later, "waiting_on": None}))
    ends = "" if final else " (it had not finished: it ends here, and cannot be resumed)"
    if cut:  # an accept killed mid-write (this run's or another's) left some files changed: say so, and the cure
        return Accepted(run_id=run.id, dry_run=False, target=status.target,
                        message=f"rejected run {run.id}{ends}; but {status.target} holds a write-back or restore that "
                                "was cut short and left it half done (some files as they were, some changed)",
                        next=ontarget.settles(run.id, status.target, final=final))
    return Accepted(run_id=run.id, dry_run=False, target=status.target,
                    message=f"rejected run {run.id}{ends}: {status.target} was not touched", next=later)


def _answer_approval(run: RunDir, *, approved: bool, change: str | None, dry_run: bool = False) -> Accepted:
    """Answer the pending L1 change named `change`, and no other: one posted since it was shown is
    refused, named, so that a second accept or reject (a retry, two clients at once) never answers it.
    A dry run answers nothing: it says which change an answer would be for."""
    verb = "accept" if approved else "reject"
    mailbox = Mailbox(run.file("mailbox"))
    pending = [request for request, _ in mailbox.open(APPROVAL)]
    status = run.status()
    asked = next((request for request in pending if request.id == change), None)
    if dry_run and (asked or (change is None and pending)):
        shown = asked or pending[0]
        return Accepted(run_id=run.id, dry_run=True, target=status.target,
                        message=f"would approve {_named(shown)}; nothing was approved (a dry run)",
                        next=_show_then(run, verb, shown))
    if asked is None and change is not None:
        gone = (f"no L1 change {_given(change)} waits in run {run.id} (an id mistyped, or one answered or withdrawn: "
                "no answer came within host_timeout, or the run started again)")
        if not pending:
            raise UserError(f"{gone}, and the run waits for no approval now; {command('show', run.id)} shows what it "
                            f"did with it, and {command('watch', run.id)} follows the run")
        raise UserError(f"{gone}; the pending one now is {_named(pending[0])}, not yet answered: "
                        f"{_show_then(run, verb, pending[0])}")
    if asked is None and pending:
        raise UserError(f"run {run.id} waits for your approval of {_named(pending[0])}; {verb} names the change it "
                        f"answers: {_show_then(run, verb, pending[0])}")
    if asked is None:
        raise UserError(f"run {run.id} is still running (round {status.round} of {status.rounds}) and waits for no "
                        f"approval; accept it when it finishes ({command('watch', run.id)}), or cancel it")
    try:
        mailbox.answer(asked.id, {"approved": approved})
    except UserError:
        raise UserError(f"L1 change {asked.id} of run {run.id} was answered or withdrawn just now; "
                        f"{command('status', run.id)} says what the run waits on now") from None
    said = "approved" if approved else "declined"
    return Accepted(run_id=run.id, dry_run=False, approved=approved, target=status.target,
                    message=f"{said} L1 change {asked.id} to {_keys(asked)}; the run goes on")


def _no_change_pending(run: RunDir, change: str | None, state: str) -> None:
    """Refuse a `change` named for a run that no longer runs: its pending change was withdrawn, and
    the verdict on the whole run is another decision, made without naming a change."""
    if change is None:
        return
    if state in ("finished", "accepted", "rejected", "restored"):
        then = f"{command('show', run.id)} shows its change, and accept or reject without a change decides on it"
    else:  # cancelled, interrupted, failed: a resume asks again about the change it had pending
        then = f"{command('resume', run.id)} goes on and asks again about the change it had pending"
    raise UserError(f"no L1 change {_given(change)} waits: run {run.id} is {state}, so nothing waits for approval; "
                    f"{then}")


def _given(change: str) -> str:
    """A change id as typed: as it is when it is one of ours in form, else quoted and bounded."""
    return change if change.isascii() and change.isalnum() and len(change) <= 32 else quoted(change, 40)


def _named(request: Request) -> str:
    return f"L1 change {request.id} (to {_keys(request)})"


def _keys(request: Request) -> str:
    keys = request.body.get("keys")
    return ", ".join(str(k) for k in keys) if isinstance(keys, list) and keys else "no file named"


def _show_then(run: RunDir, verb: str, request: Request) -> str:
    return f"{command('show', run.id)} shows it; then {command(verb, run.id, '--change', request.id)}"

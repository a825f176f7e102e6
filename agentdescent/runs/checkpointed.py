"""Whether a stored run can go on from its checkpoint, and what to do when it cannot; where a run
whose process is gone stands (`interrupted`).

A run that had begun (its status counts rounds or calls, its ledger's start log or journals hold
entries, `dev` holds a round's commit) and has lost its checkpoint, or its whole ledger, is refused
a resume: started over, it would commit its rounds again and bill its calls a second time, past
`max_calls`. A run stopped before its first checkpoint (saved before its first call) shows none of
these and starts as a new one would. Left out: a checkpoint that cannot be read (`RunFiles.load`
names it) and a ledger git cannot read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from agentdescent.commands import command
from agentdescent.engine.persist.checkpoint import RunFiles
from agentdescent.runs.status import RunStatus


class RunDir(Protocol):
    """What of `store.RunDir` this uses (the store imports this module)."""

    id: str

    @property
    def ledger(self) -> Path: ...
    def file(self, name: str) -> Path: ...


def lost(run: RunDir, status: RunStatus, *, read_ledger: bool = False) -> str | None:
    """Why `run` cannot go on from its checkpoint; None when it can, or never began. With
    `read_ledger` (the run's own process), `dev` is read too when nothing else shows it began."""
    files = RunFiles(run.ledger)
    if os.path.lexists(files.checkpoint_path):
        return None
    begun = _begun(run, status, files, read_ledger=read_ledger)
    if begun is None:
        return None
    gone = f"its checkpoint {files.checkpoint_path}" if os.path.lexists(run.ledger) else f"its ledger {run.ledger}"
    return (f"run {run.id} had begun ({begun}) but {gone} is missing: resumed, it would start over, commit its "
            "rounds again and bill its calls a second time")


def interrupted(run: RunDir, status: RunStatus) -> RunStatus:
    """`status` of a run whose process is gone, with the bill and the round read from its ledger's
    files: what it spent up to the kill (the last status written may be a second behind), and the
    round a resume takes up."""
    usage, saved = RunFiles(run.ledger).bill()
    round_ = saved.next_round if saved is not None else status.round
    why = (f"it stopped ({status.stop_reason}) but could not record its end" if status.stop_reason else
           "killed, crashed or the machine restarted")
    return status.model_copy(update={
        "state": "interrupted", "round": round_, "calls": max(status.calls, usage.calls),
        "tokens": max(status.tokens, usage.tokens), "estimated_tokens": max(status.estimated_tokens, usage.estimated_tokens),
        "cost_usd": max(status.cost_usd, usage.model.cost_usd), "unpriced": max(status.unpriced, usage.unpriced),
        "waiting_on": None,  # nothing waits: a resume asks again
        "message": f"the run's process is gone ({why}) at round {round_} of {status.rounds}",
        "next": f"{command('resume', run.id)} continues it where it stopped",
    })


def instead(run: RunDir) -> str:
    """What to do instead of resuming `run`."""
    shown = f"; {command('show', run.id)} still shows what it did" if os.path.lexists(run.file("result.json")) else ""
    return f"start a new run from its spec, {command('evolve', str(run.file('spec.json')))}{shown}"


def _begun(run: RunDir, status: RunStatus, files: RunFiles, *, read_ledger: bool) -> str | None:
    if status.round or status.calls:
        return f"its status counts {status.round} rounds done and {status.calls} calls"
    found = files.begun()
    if found or not read_ledger or not (run.ledger / "HEAD").is_file():
        return found
    # Here: only a run's own process reads its ledger; a status read elsewhere needs neither GitPython nor the resume.
    from agentdescent.engine.persist.resume import committed_rounds
    from agentdescent.ledger import Ledger

    with Ledger(run.ledger) as ledger:
        rounds = len(committed_rounds(ledger, 0))
    return f"dev holds the commits of {rounds} rounds" if rounds else None

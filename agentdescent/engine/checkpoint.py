"""What a run keeps beside its ledger, so that a killed run continues where it stopped.

    <ledger>/agentdescent/checkpoint.json   the loop's position, written atomically after every round
    <ledger>/agentdescent/rollouts.jsonl    every rollout that succeeded, appended within 0.1 s of its landing (keys redacted)
    <ledger>/agentdescent/resume-queue.json the rollouts in flight at the last checkpoint or when the run stopped

A run on a store whose checkpoint is unfinished and was made with the same settings (the same
artifact, strategy, seed and train / held-out split: the fingerprint) resumes from it: the next
round, the sampler's position and leads, the stop rules' progress, what was spent, the history
and every outcome so far, and the evaluation cache, so that no rollout that completed is paid for
twice. A round whose commit reached the ledger after the last checkpoint counts as done (its
`Round` trailer says so), and its diffs get their outcome back from the commit, so a resumed run
neither loses nor repeats a commit. Rollouts that were in flight when the run was cancelled
(or, for a killed run, at its last checkpoint) wait in the resume queue, and a resumed run runs
them first (`usage.resumed` counts them).

The optimizer step keeps no statistics across steps (each version's probe order is drawn from a
seed, again identically), so there is nothing of its own to save. `seed_artifact` is where a run
starts: the artifact put into the ledger once, whichever process gets there first.

Left out: the ledger itself, and the calls a proposal made in the killed round (counted only
when the round is run again).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from agentdescent import atomic
from agentdescent.agents.redact import redact
from agentdescent.artifacts.strategies import Strategy
from agentdescent.engine.evaluation import ResumeQueue, Usage
from agentdescent.engine.journal import Journal
from agentdescent.errors import HeadMoved
from agentdescent.ledger import Ledger
from agentdescent.result import StepRecord
from agentdescent.types import Outcome, Rollout, Spend, Task

FOLDER = "agentdescent"


class Checkpoint(BaseModel):
    """The loop's position after a round."""

    format: Literal[1] = 1
    fingerprint: str
    strategy: str  # the strategy's class name, to warn when a later run on the store uses another
    finished: bool = False
    stop_reason: str | None = None  # why the run ended, once it has (what a report of the ledger says)
    next_round: int = 0
    turns: int = 0  # worker turns dispatched so far: the sampler's position
    leads: list[str] = Field(default_factory=list)
    routes: dict[str, int] = Field(default_factory=dict)  # parallel="tp": task id -> the worker it goes to
    best: float = 0.0
    since_gain: int = 0
    initial_reward: float = 0.0
    initial_version: int = 0
    usage: dict = Field(default_factory=dict)
    rollouts_counted: int = 0  # lines of rollouts.jsonl that `usage` already counts
    history: list[StepRecord] = Field(default_factory=list)
    outcomes: list[Outcome] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


def fingerprint(*, artifact_id: str, strategy: object, seed: int, train: Sequence[Task], held_out: Sequence[Task]) -> str:
    """What makes two runs on one store the same run: resume only when this matches."""
    blob = json.dumps({"artifact": artifact_id, "strategy": type(strategy).__name__, "seed": seed,
                       "train": [t.id for t in train], "held_out": [t.id for t in held_out]})
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


class RunFiles:
    """The checkpoint, the rollout journal and the resume queue of the run on one ledger."""

    def __init__(self, ledger_path: Path) -> None:
        self.folder = Path(ledger_path) / FOLDER
        self.checkpoint_path = self.folder / "checkpoint.json"
        self.rollouts_path = self.folder / "rollouts.jsonl"
        self.queue_path = self.folder / "resume-queue.json"
        self._journal = Journal(self.rollouts_path, _journal_line)  # closed with the run: a late answer writes nothing

    def counted(self, usage: Usage) -> tuple[dict, int]:
        """The run's usage and how many of the journal's lines it counts, read at one instant (a
        rollout is counted and journalled under the usage's lock), then those lines put on disk:
        a rollout that lands meanwhile is in neither, and a resumed run counts its line again."""
        record, added = usage.read(lambda: self._journal.added)
        self.flush()
        return record, added

    def load(self) -> Checkpoint | None:
        """The saved checkpoint; None when there is none or it cannot be read (a run then starts anew)."""
        try:
            return Checkpoint.model_validate_json(self.checkpoint_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError):
            return None

    def flush(self) -> None:
        """Put the journal's queued lines on disk (before a checkpoint counts them)."""
        self._journal.flush()

    def save(self, checkpoint: Checkpoint) -> None:
        self.folder.mkdir(exist_ok=True)
        atomic.write_text(self.checkpoint_path, checkpoint.model_dump_json())

    def save_queue(self, queue: ResumeQueue) -> None:
        """Keep the rollouts in flight for a resumed run to run first (none: no queue)."""
        if queue.rollouts:
            self.folder.mkdir(exist_ok=True)
            atomic.write_text(self.queue_path, queue.model_dump_json())
        else:
            self.queue_path.unlink(missing_ok=True)

    def take_queue(self) -> ResumeQueue:
        """The resume queue, emptied: its rollouts are the resumed run's to run."""
        try:
            queue = ResumeQueue.model_validate_json(self.queue_path.read_text(encoding="utf-8"))
        except (OSError, ValueError, ValidationError):
            queue = ResumeQueue()
        self.queue_path.unlink(missing_ok=True)
        return queue

    def rollouts(self, tasks: Mapping[str, Task], *, repair: bool = False) -> list[tuple[str, Rollout]]:
        """(state hash, rollout) for every journalled rollout of a task in `tasks`, in order. A line
        a kill cut short, or one that does not parse, is skipped; with `repair` (the run itself,
        resuming: nobody else may be writing) the journal is rewritten without it, so that its
        lines and what they count stay one to one."""
        try:
            lines = self.rollouts_path.read_text(encoding="utf-8").splitlines()
        except OSError:
            return []
        found, kept = [], []
        for line in lines:
            try:
                entry = json.loads(line)
                task = tasks[entry["task"]]
                rollout = Rollout(task=task, output=entry["output"], reward=entry["reward"],
                                  spend=Spend(**entry.get("spend", {})))
            except (ValueError, KeyError, TypeError, ValidationError):
                continue
            found.append((entry["state"], rollout))
            kept.append(line)
        if repair and len(kept) != len(lines):
            atomic.write_text(self.rollouts_path, "".join(f"{line}\n" for line in kept))
        self._journal.start_at(len(kept))
        return found

    def reset(self) -> None:
        """A new run on this ledger: its journal starts empty (an earlier run's rollouts are not its own)."""
        self.rollouts_path.unlink(missing_ok=True)
        self.queue_path.unlink(missing_ok=True)
        self._journal.start_at(0)

    def record(self, state: str, rollout: Rollout) -> None:
        """Append one successful rollout to the journal (from any thread; written behind, `Journal`)."""
        if rollout.error is not None:
            return  # a failure is retried by a resumed run, not remembered
        self._journal.add((state, rollout))

    def close(self) -> None:
        """Write the journal's queued lines and close it (on a full disk they are lost: their
        rollouts are run again on resume)."""
        self._journal.close()


def _journal_line(entry: tuple[str, Rollout]) -> dict:
    state, rollout = entry
    return {"state": state, "task": rollout.task.id, "output": redact(str(rollout.output)),
            "reward": rollout.reward, "spend": rollout.spend.model_dump()}


def resumable(files: RunFiles, strategy: str, fingerprint: str) -> tuple[Checkpoint | None, list[str]]:
    """The checkpoint a run with this strategy (its class name) and fingerprint resumes from
    (None: it starts anew), and what the user should hear about it."""
    saved = files.load()
    if saved is None:
        return None, []
    notes = []
    if saved.strategy != strategy:
        notes.append(f"the artifact in this store was last evolved with strategy {saved.strategy}; this run "
                     f"uses {strategy}, which may read its keys differently")
    if saved.finished:
        return None, notes
    if saved.fingerprint != fingerprint:
        notes.append("the store holds an unfinished run with other settings (tasks, split, seed or strategy); "
                     "this run does not resume it and starts from the ledger's head")
        return None, notes
    return saved, notes


def committed_rounds(ledger: Ledger, since_round: int) -> dict[int, tuple[int, list[str]]]:
    """{round: (version, diff ids)} of the commits on `dev` made in rounds from `since_round` on,
    newest first in the log, read from their `Round` trailers (1-based)."""
    found: dict[int, tuple[int, list[str]]] = {}
    for record in ledger.log():
        number = record.trailers.get("Round", "")
        if not number.isdigit():
            if number == "seed":
                break
            continue
        round_ = int(number) - 1
        if round_ < since_round:
            break
        diffs = [d for d in record.trailers.get("Diffs", "").split(",") if d]
        found[round_] = (record.version, diffs)
    return found


def seed_artifact(ledger: Ledger, artifact_id: str, strategy: Strategy) -> int:
    """Head, once the ledger holds the artifact and `stable` has a version of it.

    The strategy's initial state is committed when the ledger lacks the artifact; a process
    seeding the same store at the same time is no error (the later one takes the other's seed).
    A `stable` left before the artifact existed (a kill between the seed and its promotion) moves
    to the first version that has it."""
    while not ledger.has_artifact(artifact_id, head := ledger.head()):
        try:
            ledger.commit(artifact_id, strategy.initial_state(), expected_version=head,
                          message=f"seed {artifact_id}", trailers={"Round": "seed"})
        except HeadMoved:
            continue  # another writer moved dev first: look again
    stable = ledger.stable()
    if not ledger.has_artifact(artifact_id, stable):
        ledger.promote(next(v for v in range(stable + 1, head + 1) if ledger.has_artifact(artifact_id, v)))
    return head

"""What a run keeps beside its ledger, so that a killed run continues where it stopped.

    <ledger>/agentdescent/checkpoint.json   the loop's position, written atomically after every round
    <ledger>/agentdescent/rollouts.jsonl    every rollout that succeeded, appended within 0.1 s of its landing (keys redacted)
    <ledger>/agentdescent/answers.jsonl     every reflection, and every fusion a model made, appended as it lands (keys redacted)
    <ledger>/agentdescent/starts            one byte for each call (a rollout, a reflection, a step's model call), before it starts
    <ledger>/agentdescent/resume-queue.json the rollouts in flight at the last checkpoint or when the run stopped
    <ledger>/agentdescent/run.lock          held by the run using these files: a second run on the store is refused

A run on a store whose checkpoint is unfinished and was made with the same settings (the same
artifact, strategy, seed and train / held-out split: the fingerprint) resumes from it: the next
round, the sampler's position and leads, the stop rules' progress, what was spent, the history
and every outcome so far, and the evaluation cache, so that no rollout that completed is paid for
twice. A round whose commit reached the ledger after the last checkpoint counts as done (its
`Round` trailer says so), and its diffs get their outcome back from the commit, so a resumed run
neither loses nor repeats a commit. Rollouts that were in flight when the run was cancelled
(or, for a killed run, at its last checkpoint) wait in the resume queue, and a resumed run runs
them first (`usage.resumed` counts them).

The bill survives a kill. A resumed run's usage is the checkpoint's, plus the rollouts and the
answers journalled after it; each call the start log holds beyond those was started by a killed
process whose answer was lost, and is counted too (`usage.abandoned`), so `max_calls` caps what
every process of the run started, and the calls reported are the calls made (`bill` reads the
same from the files alone, for a run whose process is gone). The answers journalled are served
again, once each, to the resumed run that asks the same (`replay.Answers`): a round cut short by
a kill does not pay its reflections twice.

The optimizer step keeps no statistics across steps (each version's probe order is drawn from a
seed, again identically); what it keeps is the L1 changes an approver declined, which the
checkpoint holds, so that a resumed run does not ask about them again. The checkpoint holds the
run's latest refusals too (`reflect.memory`, at most its `KEPT`, keys redacted), so that a resumed
run's reflector is told them, as the reflector of a run never stopped is.

Left out: the ledger itself, and taking a run up from these files (`resume`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, field_serializer

from agentdescent import atomic, filelock, reading
from agentdescent.agents.redact import redact
from agentdescent.artifacts.strategies import kind_of
from agentdescent.engine.calls.evaluation import ResumeQueue
from agentdescent.engine.persist.journal import Journal, StartLog
from agentdescent.engine.persist.replay import Answers, Fused
from agentdescent.errors import UserError
from agentdescent.result import StepRecord
from agentdescent.types import Outcome, Reflection, Rollout, Spend, Task, Tried
from agentdescent.usage import Usage

FOLDER = "agentdescent"
CHECKPOINT_BYTES = 256 << 20  # a checkpoint holds every outcome of the run: far less than this
JOURNAL_BYTES = 1 << 30  # a journal of every rollout of a long run, and room to spare


class Checkpoint(BaseModel):
    """The loop's position after a round."""

    format: Literal[1] = 1
    fingerprint: str
    strategy: str  # the strategy's `kind`, to warn when a later run on the store uses another
    finished: bool = False
    stop_reason: str | None = None  # why the run ended, once it has (what a report of the ledger says)
    next_round: int = Field(default=0, ge=0)
    turns: int = Field(default=0, ge=0)  # worker turns dispatched so far: the sampler's position
    leads: list[str] = Field(default_factory=list)
    routes: dict[str, int] = Field(default_factory=dict)  # parallel="tp": task id -> the worker it goes to
    best: float = 0.0
    since_gain: int = 0
    initial_reward: float | None = None  # None: the run stopped before it measured where it starts
    initial_version: int = Field(default=0, ge=0)
    usage: dict = Field(default_factory=dict)
    rollouts_counted: int = Field(default=0, ge=0)  # lines of rollouts.jsonl that `usage` already counts
    answers_counted: int = Field(default=0, ge=0)  # lines of answers.jsonl that `usage` already counts
    # Lines of rollouts.jsonl written before the next round was dealt (None: all of them). A run
    # stopped mid-round serves the later ones again, but deals that round as if they were not yet
    # measured, as the run that was not stopped did.
    dealt_after: int | None = Field(default=None, ge=0)
    history: list[StepRecord] = Field(default_factory=list)
    outcomes: list[Outcome] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    declined: dict[str, str] = Field(default_factory=dict)  # the L1 changes an approver declined (`Aggregator.declined`)
    refused: list[Tried] = Field(default_factory=list)  # the run's latest refusals (`Memory.held`), oldest first

    @field_serializer("refused")
    def _redacted(self, refused: list[Tried]) -> list[dict]:
        """A proposal is a model's text, stored as the answer journal stores it: keys redacted."""
        return [{"proposal": redact(t.proposal), "why": redact(t.why)} for t in refused]


def fingerprint(*, artifact_id: str, strategy: object, seed: int, train: Sequence[Task], held_out: Sequence[Task]) -> str:
    """What makes two runs on one store the same run: resume only when this matches."""
    blob = json.dumps({"artifact": artifact_id, "strategy": kind_of(strategy), "seed": seed,
                       "train": [t.id for t in train], "held_out": [t.id for t in held_out]})
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


class RunFiles:
    """The checkpoint, the rollout journal and the resume queue of the run on one ledger."""

    def __init__(self, ledger_path: Path) -> None:
        self.folder = Path(ledger_path) / FOLDER
        self.checkpoint_path = self.folder / "checkpoint.json"
        self.rollouts_path = self.folder / "rollouts.jsonl"
        self.queue_path = self.folder / "resume-queue.json"
        self.answers_path = self.folder / "answers.jsonl"
        self._journal = Journal(self.rollouts_path, _journal_line)  # closed with the run: a late answer writes nothing
        self._answers = Journal(self.answers_path, _answer_line)
        self.starts = StartLog(self.folder / "starts")
        self.replay = Answers()  # what a killed process of this run was answered, for the resumed run
        self._claim = contextlib.ExitStack()

    def claim(self) -> None:
        """Hold these files for one run until `close`, or a `UserError` at once when another run
        (a thread or a process) holds them: two runs on them would share one checkpoint and one
        start log, each billed for the other's calls. A process that dies lets go with it."""
        store = str(self.folder.parent).replace("{", "{{").replace("}", "}}")
        self._claim.enter_context(filelock.holding(
            self.folder / "run.lock", wait=0,
            busy=f"another run uses the store {store} now (process {{holder}}): two runs on one store would share "
                 "its checkpoint and its bill; give this run a store of its own (store=...), or wait for that run "
                 "to end, then call again to continue from it"))

    def counted(self, usage: Usage) -> tuple[dict, int, int]:
        """The run's usage and how many lines of each journal (rollouts, answers) it counts, read
        at one instant (a unit is counted and journalled under the usage's lock), then those lines
        put on disk: a unit that lands meanwhile is in neither, and a resumed run counts its line
        again."""
        record, (rollouts, answers) = usage.read(lambda: (self._journal.added, self._answers.added))
        self.flush()
        return record, rollouts, answers

    @property
    def journalled(self) -> int:
        """Lines of the rollout journal so far, written or waiting to be."""
        return self._journal.added

    def load(self, *, strict: bool = False) -> Checkpoint | None:
        """The saved checkpoint; None when there is none. One that cannot be read is None too, or,
        `strict` (a run about to resume or reset from it), a `UserError`: a run must not start
        over, erasing the journals of the bill, because its checkpoint was damaged."""
        try:
            text = reading.read_text(self.checkpoint_path, what="checkpoint", limit=CHECKPOINT_BYTES,
                                     follow_symlinks=False)
            return Checkpoint.model_validate_json(text)
        except UserError as exc:
            if not strict or not os.path.lexists(self.checkpoint_path):
                return None
            why = str(exc)
        except (ValueError, ValidationError) as exc:
            if not strict:
                return None
            why = str(exc).splitlines()[0][:200]
        raise UserError(f"the run's checkpoint {self.checkpoint_path} cannot be read ({why}); nothing was reset. Put "
                        f"it back as it was, or move the folder {self.folder} away to start a run on this ledger anew "
                        "(its bill then starts again)")

    def begun(self) -> str | None:
        """What these files hold of a run that had begun (calls started, answers journalled); None
        when they hold nothing, as before a run's first checkpoint, which is saved before its first call."""
        calls = self.starts.count()
        if calls:
            return f"its start log counts {calls} calls"
        journals = [path.name for path in (self.rollouts_path, self.answers_path) if _size(path)]
        return f"its {' and '.join(journals)} hold what its calls answered" if journals else None

    def flush(self) -> None:
        """Put the journals' queued lines on disk (before a checkpoint counts them)."""
        self._journal.flush()
        self._answers.flush()

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
            queue = ResumeQueue.model_validate_json(reading.read_bytes(
                self.queue_path, what="resume queue", limit=CHECKPOINT_BYTES, follow_symlinks=False))
        except (UserError, ValueError, ValidationError):  # missing, or no file of ours: nothing to run first
            queue = ResumeQueue()
        self.queue_path.unlink(missing_ok=True)
        return queue

    def rollouts(self, tasks: Mapping[str, Task], *, repair: bool = False) -> list[tuple[str, Rollout]]:
        """(state hash, rollout) for every journalled rollout of a task in `tasks`, in order. A line
        a kill cut short, or one that does not parse, is skipped; with `repair` (the run itself,
        resuming: nobody else may be writing) the journal is rewritten without it, so that its
        lines and what they count stay one to one."""
        found, kept, lines = [], [], _lines(self.rollouts_path)
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

    def answers(self) -> list[tuple[str, Reflection | Fused]]:
        """(what was asked, the answer) for every journalled answer, in order; a line a kill cut
        short is dropped from the file, and the journal's count set to what was read."""
        found, kept, lines = [], [], _lines(self.answers_path)
        for line in lines:
            answer = _answer(line)
            if answer is not None:
                found.append(answer)
                kept.append(line)
        if len(kept) != len(lines):
            atomic.write_text(self.answers_path, "".join(f"{line}\n" for line in kept))
        self._answers.start_at(len(kept))
        return found

    def record_answer(self, asked: str, answer: Reflection | Fused) -> None:
        """Append one answer to its journal (from any thread; written behind, `Journal`)."""
        self._answers.add((asked, answer))

    def restore(self, saved: Checkpoint, usage: Usage, tasks: Mapping[str, Task]) -> list[tuple[str, Rollout]]:
        """A resumed run's bill and memory: `usage` set to what every earlier process of the run
        spent (the checkpoint's, the units journalled after it, each call started and lost), the
        answers journalled after it ready to be served again (`replay`), and every journalled
        rollout (view key, rollout), for the evaluation cache."""
        usage.load(saved.usage)
        journal = self.rollouts(tasks, repair=True)
        for _, rollout in journal[saved.rollouts_counted:]:  # paid for after the checkpoint: still paid for
            usage.count_rollout(rollout)
        answers = self.answers()[saved.answers_counted:]
        for _, answer in answers:
            _count_answer(usage, answer)
        self.replay.fill(answers)  # the cut-short round asks them again: not paid twice
        usage.settle_abandoned(self.starts.count())
        return journal

    def bill(self) -> tuple[Usage, Checkpoint | None]:
        """What the run on this ledger has spent, from its files alone (its process may be gone),
        as `restore` counts it, and its checkpoint; nothing is repaired or kept."""
        usage, saved = Usage(), self.load()
        if saved is not None and saved.finished:
            return Usage.from_record(saved.usage), saved
        rollouts, answers = _lines(self.rollouts_path), _lines(self.answers_path)
        if saved is not None:
            usage.load(saved.usage)
            rollouts, answers = rollouts[saved.rollouts_counted:], answers[saved.answers_counted:]
        for line in rollouts:
            try:
                spend = Spend(**json.loads(line).get("spend", {}))
            except (ValueError, TypeError, AttributeError, ValidationError):
                continue
            usage.count_rollout(Rollout(task=_BILLED, output="", reward=0.0, spend=spend))
        for line in answers:
            answer = _answer(line)
            if answer is not None:
                _count_answer(usage, answer[1])
        usage.settle_abandoned(self.starts.count())
        return usage, saved

    def reset(self) -> None:
        """A new run on this ledger: its journals and start log start empty (an earlier run's
        work is not its own)."""
        for path in (self.rollouts_path, self.answers_path, self.queue_path):
            path.unlink(missing_ok=True)
        self._journal.start_at(0)
        self._answers.start_at(0)
        self.starts.reset()

    def record(self, state: str, rollout: Rollout) -> None:
        """Append one successful rollout to the journal (from any thread; written behind, `Journal`)."""
        if rollout.error is not None:
            return  # a failure is retried by a resumed run, not remembered
        self._journal.add((state, rollout))

    def close(self) -> None:
        """Write the journals' queued lines and close them (on a full disk they are lost: their
        units are run again on resume, and counted as abandoned)."""
        self._journal.close()
        self._answers.close()
        self.starts.close()
        self._claim.close()


def _journal_line(entry: tuple[str, Rollout]) -> dict:
    state, rollout = entry
    return {"state": state, "task": rollout.task.id, "output": redact(str(rollout.output)),
            "reward": rollout.reward, "spend": rollout.spend.model_dump()}


def _answer_line(entry: tuple[str, Reflection | Fused]) -> dict:
    asked, answer = entry
    if isinstance(answer, Fused):
        merged = redact(answer.merged) if isinstance(answer.merged, str) else answer.merged
        return {"asked": asked, "fusion": {"merged": merged, "spend": answer.spend.model_dump()}}
    stored = answer.model_dump()
    stored["proposal"] = None if answer.proposal is None else redact(answer.proposal)
    stored["reason"] = redact(answer.reason)
    return {"asked": asked, "reflection": stored}


def _answer(line: str) -> tuple[str, Reflection | Fused] | None:
    """One line of the answer journal read back; None for one a kill cut short."""
    try:
        entry = json.loads(line)
        answer = Reflection.model_validate(entry["reflection"]) if "reflection" in entry else \
            Fused.model_validate(entry["fusion"])
        return str(entry["asked"]), answer
    except (ValueError, KeyError, TypeError, ValidationError):
        return None


def _count_answer(usage: Usage, answer: Reflection | Fused) -> None:
    if isinstance(answer, Fused):
        usage.count_step(answer.spend)
    else:
        usage.count_reflection(answer)


_BILLED = Task(id="billed", prompt="")  # the task a rollout counted only for its spend stands on


def _size(path: Path) -> int:
    """The size of one of the run's files, 0 when it is not there (a link is not followed)."""
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _lines(path: Path) -> list[str]:
    """The lines of one of the run's own journals (none when it is missing); bytes that are not
    UTF-8 are replaced, so such a line fails to parse and is dropped as a cut-short one would be.
    One that is no regular file of the run's own (a symlink, a FIFO) or is past `JOURNAL_BYTES`
    is damage, named: read, it could hang every status of the store, or bill another file's lines."""
    if not os.path.lexists(path):
        return []
    try:
        data = reading.read_bytes(path, what="journal", limit=JOURNAL_BYTES, follow_symlinks=False)
    except UserError as exc:
        raise UserError(f"the run's journal {path} is not what the run wrote ({exc}); move this run's folder out "
                        "of the store to go on") from None
    return data.decode("utf-8", "replace").split("\n")  # U+2028 ends no line of JSON

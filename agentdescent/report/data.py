"""What a report shows, gathered from a ledger and what its run left beside it.

A report is made of one ledger folder: its commits (git itself, with their trailers), its
checkpoint (`<ledger>/agentdescent/checkpoint.json`: every round's record and every diff's
outcome) and, for a run of the run store, the run's folder around it (its status and, once it
has ended, its result). Whatever is missing (an older ledger without a checkpoint, a run that is
still going or has not committed yet) becomes a note on the page, never an error. Everything is
read, nothing written. Left out: drawing (`plots`) and the page (`html`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import git
from pydantic import BaseModel, Field

from agentdescent.artifacts.strategies import STRATEGIES
from agentdescent.engine.persist.checkpoint import FOLDER, Checkpoint, RunFiles
from agentdescent.errors import UserError
from agentdescent.ledger import CommitRecord, Ledger, looks_like_ledger
from agentdescent.ledger.repository import repository
from agentdescent.quoting import quoted
from agentdescent.result import EvolveResult, StepRecord
from agentdescent.runs.review import LANDED, REPORT_FILE
from agentdescent.runs.status import LIVE, RunStatus
from agentdescent.runs.store import RunDir, RunStore
from agentdescent.step.commit import trailer_keys
from agentdescent.types import Outcome
from agentdescent.usage import Usage

DEFAULT_ARTIFACT = "artifact"  # what evolve() and the run store call the artifact unless told otherwise
WHERE = "give a run id (agentdescent runs lists them) or the ledger folder evolve(store=...) or agentdescent demo --store wrote"


class DiffRef(BaseModel):
    diff_id: str
    author: str  # the worker that proposed it ("" when the ledger does not say)


class CommitView(BaseModel):
    """One commit on `dev`: its version, what it says, and the diffs that went into it."""

    version: int
    sha: str
    message: str
    round: str  # the `Round` trailer as written: "1", "2", ... (1-based), "seed", or "" for the root
    diffs: list[DiffRef] = Field(default_factory=list)
    keys: list[str] = Field(default_factory=list)


class KeyChange(BaseModel):
    key: str  # a file's path for a folder artifact
    change: Literal["added", "removed", "modified"]


class ReportData(BaseModel):
    """Everything the page shows; None (or empty) where the ledger or the run did not record it."""

    source: str  # "run <id>" or "ledger <path>"
    run_id: str | None = None
    ledger: str
    written_at: str
    state: str | None = None  # a store run's state (finished, running, accepted, restored, ...)
    state_message: str = ""  # what the status says of it (where the write-back went, what undid it)
    target: str  # what was evolved
    kind: str  # text, skill_dir, ... or the strategy's name
    artifact_id: str
    folder: bool  # a folder artifact (FileTree): its keys are files
    named_keys: bool = True  # False for a rule set, whose keys are hashes of its rules: shown by their text
    initial_reward: float | None = None
    final_reward: float | None = None
    stop_reason: str | None = None
    rounds_max: int | None = None
    calls: int | None = None
    tokens: int | None = None
    estimated_tokens: int = 0  # of those tokens, the ones estimated (the server or agent reported none)
    cost_usd: float | None = None
    unpriced: int = 0  # calls whose cost is not in cost_usd (`Usage.unpriced`)
    steps: list[StepRecord] = Field(default_factory=list)
    outcomes: list[Outcome] = Field(default_factory=list)
    commits: list[CommitView] = Field(default_factory=list)  # oldest first
    initial_version: int | None = None
    final_version: int | None = None
    before: dict[str, str] = Field(default_factory=dict)  # the artifact at initial_version
    after: dict[str, str] = Field(default_factory=dict)  # the artifact at final_version (stable)
    notes: list[str] = Field(default_factory=list)  # what is missing, and why

    def changes(self) -> list[KeyChange]:
        """The keys (files) the run added, removed or modified, by name."""
        keys = sorted(self.before.keys() | self.after.keys())
        return [KeyChange(key=k, change="added" if k not in self.before else "removed" if k not in self.after
                          else "modified") for k in keys if self.before.get(k) != self.after.get(k)]


@dataclass(frozen=True, kw_only=True)
class Source:
    """Where a report's data is: a ledger folder, and the run-store folder around it, if any."""

    ledger: Path
    run: RunDir | None
    default_out: Path


def locate(ref: str, store: RunStore) -> Source:
    """The ledger (and run) `ref` names: a ledger folder, a run's folder, or a run id (or its
    first letters) in `store`. `UserError` naming the fix when it is none of them."""
    path = Path(ref).expanduser()
    if path.is_dir():
        path = path.absolute()
        if looks_like_ledger(path):
            return Source(ledger=path, run=None, default_out=path / FOLDER / REPORT_FILE)
        if (path / "status.json").is_file():  # a run's own folder in the store
            run = RunDir(path)
            return Source(ledger=run.ledger, run=run, default_out=run.file(REPORT_FILE))
        raise UserError(f"{ref} is a folder but not a ledger (a bare git repository with HEAD, objects/ and refs/); {WHERE}")
    if path.exists():
        raise UserError(f"{ref} is a file, not a ledger folder; {WHERE}")
    if "/" in ref or ref.startswith("."):
        raise UserError(f"there is no folder {ref}; {WHERE}")
    try:
        run = store.get(ref)
    except UserError as exc:
        raise UserError(f"{exc}; or give the path of a ledger folder (what evolve(store=...) wrote)") from None
    return Source(ledger=run.ledger, run=run, default_out=run.file(REPORT_FILE))


def gather(source: Source) -> ReportData:
    """The report's data for `source`, with a note for each piece that is missing."""
    notes: list[str] = []
    status = _status(source.run, notes)
    result = _result(source.run, notes)
    has_ledger = looks_like_ledger(source.ledger)
    checkpoint = RunFiles(source.ledger).load() if has_ledger else None
    data = ReportData(
        source=f"run {source.run.id}" if source.run else f"ledger {source.ledger}",
        run_id=source.run.id if source.run else None, ledger=str(source.ledger),
        written_at=time.strftime("%Y-%m-%d %H:%M:%S %Z"), state=status.state if status else None,
        state_message=status.message if status else "",
        target=status.target if status else f"the artifact in {source.ledger}", kind=status.kind if status else "",
        artifact_id=DEFAULT_ARTIFACT, folder=bool(status and status.kind and status.kind != "text"), notes=notes,
    )
    _progress(data, status, result, checkpoint)
    if checkpoint is not None:
        data.named_keys = getattr(STRATEGIES.get(checkpoint.strategy), "named_keys", True)
    if has_ledger:
        if checkpoint is None and result is None:
            data.notes.append("this ledger has no checkpoint (agentdescent/checkpoint.json): an older version wrote it, or "
                         "the run stopped before its first round. Rewards, calls and outcomes are not recorded; the "
                         "commits and the change below are read from git itself")
        _from_ledger(data, source.ledger, checkpoint, result)
    else:
        data.notes.append(f"there is no ledger in {source.ledger} yet (the run has not started its first round): "
                     "no commits and no change to show")
    return data


def _status(run: RunDir | None, notes: list[str]) -> RunStatus | None:
    if run is None:
        return None
    try:
        status = run.status()
    except UserError as exc:
        notes.append(str(exc))
        return None
    if status.state in LIVE:
        notes.append(f"the run is still going (round {status.round} of {status.rounds}): this page shows it as it "
                     "was when written; write it again for a newer one")
    return status


def _result(run: RunDir | None, notes: list[str]) -> EvolveResult | None:
    if run is None or not run.file("result.json").exists():
        return None
    try:
        return EvolveResult.from_json(run.file("result.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        notes.append(f"the run's result.json cannot be read ({exc}); the checkpoint is shown instead")
        return None


def _progress(data: ReportData, status: RunStatus | None, result: EvolveResult | None, saved: Checkpoint | None) -> None:
    """Rewards, rounds, spending and outcomes: from the result when the run has ended, else its checkpoint."""
    if result is not None:
        data.steps, data.outcomes, usage = list(result.history), list(result.outcome_list), result.usage
        data.initial_reward, data.final_reward, data.stop_reason = result.initial_reward, result.final_reward, result.stop_reason
    elif saved is not None:
        data.steps, data.outcomes, usage = list(saved.history), list(saved.outcomes), Usage.from_record(saved.usage)
        data.initial_reward, data.final_reward = saved.initial_reward, saved.best
        data.stop_reason = (status.stop_reason if status and status.stop_reason else _unrecorded_stop(saved, status))
    else:
        usage = None
        if status is not None:
            data.initial_reward, data.final_reward, data.stop_reason = status.initial_reward, status.best_reward, status.stop_reason
    if status is not None:
        data.rounds_max = status.rounds or None
    if usage is not None:
        data.calls = usage.calls
        data.tokens = usage.tokens or None
        data.estimated_tokens = usage.estimated_tokens
        data.cost_usd = usage.model.cost_usd or None
        data.cost_usd, data.unpriced = usage.model.cost_usd or None, usage.unpriced


def _unrecorded_stop(saved: Checkpoint, status: RunStatus | None) -> str:
    if status is not None and status.state in LIVE:
        return "not yet: the run is still going"
    if saved.stop_reason:
        return saved.stop_reason
    if saved.finished:
        return "finished; the ledger does not keep why (evolve() returned it as result.stop_reason)"
    return "not finished: the run is still going, or it stopped before its end (a run on the same store resumes it)"


def _from_ledger(data: ReportData, path: Path, saved: Checkpoint | None, result: EvolveResult | None) -> None:
    """The commits, which diffs went into each, and the artifact at the start and at `stable`."""
    artifacts = artifact_ids(path)
    if artifacts is None:  # checked here, since opening a `Ledger` on a repository without refs would make it one
        raise UserError(f"{path} is a git repository but not an AgentDescent ledger (it has no dev branch); {WHERE}")
    if artifacts and DEFAULT_ARTIFACT not in artifacts:
        data.artifact_id = artifacts[0]
    if len(artifacts) > 1:
        data.notes.append(f"this ledger holds {len(artifacts)} artifacts ({', '.join(artifacts)}); "
                          f"the report shows {data.artifact_id!r}")
    if not data.kind:
        data.kind = saved.strategy if saved is not None else "unknown (no checkpoint says which strategy)"
        data.folder = bool(getattr(STRATEGIES.get(data.kind), "folder", False))
    with _open(path) as ledger:
        records = list(reversed(ledger.log()))
        data.commits = [commit_view(r, data.outcomes) for r in records]
        held = [r.version for r in records if ledger.has_artifact(data.artifact_id, r.version)]
        if not held:
            data.notes.append(f"the ledger does not hold the artifact {data.artifact_id!r} yet: no change to show")
            return
        start = saved.initial_version if saved is not None else result.initial_version if result is not None else held[0]
        start = start if start in held else held[0]
        data.initial_version, data.final_version = start, ledger.stable()
        data.before = ledger.snapshot(data.artifact_id, start)
        if ledger.has_artifact(data.artifact_id, data.final_version):
            data.after = ledger.snapshot(data.artifact_id, data.final_version)
        else:
            data.final_version, data.after = start, dict(data.before)


def _open(path: Path) -> Ledger:
    try:
        return Ledger(path)
    except UserError:  # its message is about store=; here the folder was given to read
        raise UserError(f"{path} is a git repository but not an AgentDescent ledger; {WHERE}") from None


def artifact_ids(path: Path) -> list[str] | None:
    """The artifacts `dev`'s head holds (folders under artifacts/), by name; None when the
    repository has no `dev` branch (it is not a ledger)."""
    try:
        repo = repository(path)
        try:
            if "dev" not in {head.name for head in repo.heads}:
                return None
            try:
                return sorted(t.name for t in (repo.heads["dev"].commit.tree / "artifacts").trees)
            except KeyError:
                return []  # no artifact committed yet
        finally:
            repo.close()
    except (git.GitError, ValueError, AssertionError, OSError) as exc:  # GitPython's own for a damaged repository
        raise UserError(f"cannot read the ledger {path}: it is damaged ({type(exc).__name__}: {quoted(str(exc), 200)}); "
                        "the run's own folder still holds its result: `agentdescent show RUN` reads it") from None


def commit_view(record: CommitRecord, outcomes: list[Outcome]) -> CommitView:
    """A commit with its diffs: those its `Diffs` and `Authors` trailers name, and any outcome that
    says it landed in this version (a diff fused into another's edit, or a ledger without them)."""
    ids = [d for d in record.trailers.get("Diffs", "").split(",") if d]
    authors = record.trailers.get("Authors", "").split(",")
    by_id = {o.diff_id: o for o in outcomes}
    refs = [DiffRef(diff_id=d, author=_author(authors, i, by_id.get(d))) for i, d in enumerate(ids)]
    refs += [DiffRef(diff_id=o.diff_id, author=o.author) for o in outcomes
             if o.version == record.version and o.kind in LANDED and o.diff_id not in ids]
    return CommitView(version=record.version, sha=record.sha, message=record.message,
                      round=record.trailers.get("Round", ""), diffs=refs,
                      keys=trailer_keys(record.trailers.get("Keys", "")))


def _author(authors: list[str], i: int, outcome: Outcome | None) -> str:
    """The i-th name of the `Authors` trailer ("-": none), else what the diff's outcome says."""
    named = authors[i] if i < len(authors) and authors[i] != "-" else ""
    return named or (outcome.author if outcome is not None else "")

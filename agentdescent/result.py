"""EvolveResult: the learned artifact, how it was reached, and an opt-in write-back (`write_to`)."""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from agentdescent.artifacts.writeback import WritePlan, write_back
from agentdescent.errors import UserError
from agentdescent.quoting import quoted
from agentdescent.types import Diff, Outcome
from agentdescent.usage import Usage

if TYPE_CHECKING:
    from collections.abc import Sequence

    from agentdescent.ledger import Ledger
    from agentdescent.step import StepReport


class StepRecord(BaseModel):
    """One round of the loop: what was proposed, what landed, and what it measured."""

    round: int
    base_version: int
    version: int | None
    diffs: list[str] = Field(default_factory=list)
    outcomes: dict[str, int] = Field(default_factory=dict)
    staleness: list[int] = Field(default_factory=list)  # per diff, in `diffs` order: versions behind head
    stale_decisions: list[str] = Field(default_factory=list)  # per diff: the staleness policy's decision
    eta: list[float] = Field(default_factory=list)  # per diff: the weight of its evidence in the test
    acceptance_head: float | None = None
    acceptance_candidate: float | None = None
    held_out: float | None = None
    promoted: bool = False
    calls: int = 0  # the run's calls so far, as tokens and cost_usd are its spend so far
    tokens: int = 0
    cost_usd: float = 0.0
    timings: dict[str, float] = Field(default_factory=dict)

    @classmethod
    def of(cls, report: StepReport, *, round_: int, outcomes: Sequence[Outcome], diffs: Sequence[Diff],
           held_out: float | None, promoted: bool, usage: Usage) -> StepRecord:
        """The record of a step: its `report`, every outcome of the round, and what validation found."""
        return cls(
            round=round_, base_version=report.base_version, version=report.version,
            diffs=[d.id for d in diffs], outcomes=dict(Counter(o.kind for o in outcomes)),
            staleness=[report.staleness[d.id] for d in diffs],
            stale_decisions=[report.decisions.get(d.id, "fresh") for d in diffs],
            eta=[report.eta.get(d.id, 1.0) for d in diffs],
            acceptance_head=report.head_reward, acceptance_candidate=report.candidate_reward,
            held_out=held_out, promoted=promoted, calls=usage.calls, tokens=usage.tokens,
            cost_usd=usage.model.cost_usd, timings=report.timings,
        )


@dataclass(kw_only=True)
class EvolveResult:
    """What a run learned and how: plain data, so that it can be pickled, stored and sent to
    another process. The ledger is a path; `ledger` opens it."""

    rendered: Any  # what `run` receives for the final artifact: text, or {path: text} for trees
    state: dict[str, str]
    final_reward: float | None  # held-out reward of the final (stable) artifact; None: never measured
    initial_reward: float | None  # held-out reward before any change; None: the run stopped before measuring it
    history: list[StepRecord]
    ledger_path: Path
    outcome_list: list[Outcome]
    usage: Usage
    stop_reason: str
    error: str | None = None  # what stopped the run early (a broken contract, Ctrl-C); None when it ended normally
    version: int  # the ledger version the final artifact is at (stable)
    initial_version: int  # the stable version the run started from
    initial_state: dict[str, str] = field(default_factory=dict)  # the artifact at `initial_version`
    initial_rendered: Any = None  # `initial_state` rendered: what write_to takes the target to have held
    frozen: tuple[str, ...] = field(default=())
    left_out: tuple[str, ...] = field(default=())  # the globs the run's tree was read without: write_to never prunes them
    warnings: list[str] = field(default_factory=list)  # what the run's Warned events said
    # how sure `final_reward` is: the half-width of its 90 % interval, from the spread of the
    # held-out rewards (each task's the mean of its draws); None: not measured
    final_margin: float | None = None
    # dev's head when no held-out measurement saw it (the run stopped first): committed, not `version`
    unmeasured: int | None = None

    @property
    def ledger(self) -> Ledger:
        """The run's git ledger, opened now: `with result.ledger as ledger: ...` closes its git
        processes when done. A `UserError` when it is gone: never a new empty one in its place."""
        from agentdescent.ledger import Ledger, looks_like_ledger  # here: reading a stored result needs no GitPython

        if not looks_like_ledger(Path(self.ledger_path)):
            raise UserError(f"the run's ledger is no longer at {self.ledger_path}: it was removed or moved since the run "
                            "(`agentdescent runs --prune` removes old temporary ledgers, and temp folders get cleaned). "
                            "result.state, result.rendered and result.write_to(...) still work without it; a ledger "
                            "moved elsewhere opens with agentdescent.ledger.Ledger(its new path); give evolve a store= "
                            "of your own to keep the next")
        return Ledger(self.ledger_path)

    def outcomes(self) -> dict[str, int]:
        """How many diffs ended each way: {"committed": 3, "rejected_by_test": 5, ...}."""
        return dict(Counter(o.kind for o in self.outcome_list))

    def to_json(self) -> str:
        """The whole result as JSON (versioned); `EvolveResult.from_json` reads it back. A rendering
        that is its state (a folder's) is kept once, not twice over; one that JSON cannot give back
        as it is (a custom strategy's object, a tuple) is a `UserError`."""
        same = [name for name, rendered, state in (("rendered", self.rendered, self.state),
                                                   ("initial_rendered", self.initial_rendered, self.initial_state))
                if isinstance(rendered, dict) and rendered == state]
        for name in {"rendered", "initial_rendered"} - set(same):
            _check_storable(name, getattr(self, name))
        return _Stored(
            same_as_state=same, rendered=None if "rendered" in same else self.rendered, state=self.state,
            final_reward=self.final_reward, initial_reward=self.initial_reward, history=self.history,
            ledger_path=str(self.ledger_path), outcome_list=self.outcome_list, usage=self.usage.as_record(),
            stop_reason=self.stop_reason, error=self.error, version=self.version,
            initial_version=self.initial_version, initial_state=self.initial_state,
            initial_rendered=None if "initial_rendered" in same else self.initial_rendered, frozen=list(self.frozen),
            left_out=list(self.left_out), warnings=self.warnings, final_margin=self.final_margin, unmeasured=self.unmeasured,
        ).model_dump_json(indent=1)

    @classmethod
    def from_json(cls, text: str | bytes) -> EvolveResult:
        """The result `to_json` stored; a `UserError` for a format this version does not read."""
        written = _Format.model_validate_json(text).format
        if type(written) is not int or written != FORMAT:
            raise UserError(f"this result is stored in format {quoted(written)}, and this version of agentdescent reads "
                            f"format {FORMAT} only: read it with the version that wrote it")
        stored = _Stored.model_validate_json(text)
        fields = stored.model_dump(exclude={"format", "same_as_state"})
        if "rendered" in stored.same_as_state:
            fields["rendered"] = dict(fields["state"])
        if "initial_rendered" in stored.same_as_state:
            fields["initial_rendered"] = dict(fields["initial_state"])
        return cls(**{**fields, "history": stored.history, "outcome_list": stored.outcome_list,
                      "ledger_path": Path(stored.ledger_path), "usage": Usage.from_record(stored.usage),
                      "frozen": tuple(stored.frozen), "left_out": tuple(stored.left_out)})

    def write_to(self, path: str | os.PathLike, *, dry_run: bool = False, prune: bool = False,
                 overwrite: bool = False, base: Any = None) -> WritePlan:
        """Write the artifact to `path` and return the plan it followed: a text artifact becomes one
        file, a tree a folder. Only changed files are written (each atomically, its mode kept);
        files the run deleted are deleted, frozen files never touched, extra files left alone unless
        `prune` (and what `load_tree` never reads, `.venv/` or `build/` say, or the run's tree was
        read without, its `FileTree(left_out=...)`, always). A file edited
        on disk since the run started (against `base`, what the target held then; default the
        initial artifact rendered) is kept when the run did not change it and merged when both did
        (a file whose line endings or byte-order mark alone are not the base's, read with
        `Path.read_text` say, takes the change in them); edits that do not merge refuse the write
        unless `overwrite`. The whole target is backed up first (`.<name>.bak-N` beside it, recorded
        in `$AGENTDESCENT_HOME/backups`; no backup when nothing changes), and a failure or a killed
        process is rolled back from it; `.bak-N` folders there is no record of are left alone and
        listed in `plan.refused`; the oldest backups past the newest 10 are removed once the write
        ends (`plan.removed`). `dry_run` returns the plan and touches nothing. See
        `agentdescent.artifacts.writeback`."""
        return write_back(path, self.rendered, initial=self.initial_state, frozen=self.frozen, dry_run=dry_run,
                          prune=prune, overwrite=overwrite, base=self.initial_rendered if base is None else base,
                          left_out=self.left_out)


def _check_storable(name: str, rendered: Any) -> None:
    """A `UserError` unless JSON gives `rendered` back as it is: text, numbers, true, false, null,
    and lists and dicts of them with text keys (a tuple comes back a list, a key 1 comes back "1")."""
    try:
        same = json.loads(json.dumps(rendered, allow_nan=False)) == rendered
    except (TypeError, ValueError, RecursionError):  # an object of the caller's; inf or nan; a list that holds itself
        same = False
    if not same:
        raise UserError(f"to_json cannot store result.{name}: the strategy's render returned a "
                        f"{type(rendered).__name__}, which JSON does not give back as it is (it keeps text, numbers, "
                        "true, false, null, and lists and dicts of them with text keys); make render return such "
                        "data, or keep result.state, which the strategy renders again")


FORMAT = 1  # what to_json writes; from_json reads no other


class _Format(BaseModel):
    """The one field every stored form keeps, read before the rest."""

    format: Any = FORMAT


class _Stored(BaseModel):
    """The stored form of an `EvolveResult`."""

    format: int = FORMAT
    same_as_state: list[str] = Field(default_factory=list)  # "rendered", "initial_rendered": kept as their state
    rendered: Any  # JSON data (`_check_storable`); None where it is its state
    state: dict[str, str]
    final_reward: float | None
    initial_reward: float | None
    history: list[StepRecord]
    ledger_path: str
    outcome_list: list[Outcome]
    usage: dict[str, Any]
    stop_reason: str
    error: str | None = None
    final_margin: float | None = None
    version: int
    initial_version: int
    initial_state: dict[str, str] = Field(default_factory=dict)
    initial_rendered: Any = None
    frozen: list[str] = Field(default_factory=list)
    left_out: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    unmeasured: int | None = None

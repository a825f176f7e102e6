"""What the stages of the optimizer step hand one another: a rebased change, components of them,
and what the L1 gate hands an approver (or an approver's reason to decline); and the type of the scorer the step is given."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from agentdescent.errors import AgentDescentError
from agentdescent.step.staleness import StaleDecision
from agentdescent.types import Diff, Task


@dataclass(frozen=True, kw_only=True)
class Change:
    """A diff rebased onto head: the new text of each key it changes (None deletes the key)."""

    diff: Diff
    staleness: int
    after: dict[str, str | None]
    note: str = ""
    decision: StaleDecision = "fresh"  # what the staleness policy said of it
    eta: float = 1.0  # the weight of its evidence in the test: η(s) when discounted


@dataclass(kw_only=True, eq=False)
class Component:
    """Changes that share keys, so they are accepted or rejected together. Compared (and hashed)
    by identity: a step's components are distinct objects holding disjoint keys, but for a key
    where each of several only inserts lines (`resolve` stacks them)."""

    changes: list[Change]
    after: dict[str, str | None]
    fused_keys: set[str] = field(default_factory=set)
    echoes: list[Change] = field(default_factory=list)  # duplicates of it: their failures are its evidence too


# Scores each (state, tasks) job, all in flight at once: one row of rewards per job.
Scorer = Callable[[Sequence[tuple[Mapping[str, str], Sequence[Task]]]], list[list[float]]]


class GatedChange(BaseModel):
    """What an approver is asked about: the gated change and why it is proposed. `id` names this
    question: the run's store shows it as the pending change's id, and an approval is recorded
    under it (the outcome's reason, the commit's `Approved` trailer)."""

    model_config = ConfigDict(frozen=True)

    id: str = Field(default_factory=lambda: secrets.token_hex(6))
    diff_ids: list[str]
    keys: list[str]  # every key the change touches, gated or not
    before: dict[str, str | None]  # the text at head (None: the file is new)
    after: dict[str, str | None]  # the proposed text (None: the file is deleted)
    rationale: str
    verdict: str  # what the normal test and the oracle found


Approve = Callable[[GatedChange], bool]


class Declined(AgentDescentError):
    """An approver's no that is not a person's: raised with why (no answer came in time, the run was
    cancelled while it waited), which the change's outcome then names. `lasting`: the run holds to
    it as to a person's no, and refuses the same change proposed again without asking (no answer
    in time); not lasting, it asks again (a cancelled run, resumed, has someone to ask)."""

    def __init__(self, message: str, *, lasting: bool = True) -> None:
        super().__init__(message)
        self.lasting = lasting

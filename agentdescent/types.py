"""The records that cross boundaries: tasks, rollouts, edits, diffs with evidence, and outcomes.

They are pydantic models so that they serialise to JSON for files, processes and MCP. The
behaviour that acts on them lives elsewhere (strategies, aggregator); these only hold data.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agentdescent.reading import writable


class Task(BaseModel):
    """One unit of work. Identity is the id: two tasks with the same id are the same task."""

    model_config = ConfigDict(frozen=True)

    id: str
    prompt: str
    gold: Optional[str] = None
    meta: dict[str, Any] = Field(default_factory=dict)

    def __hash__(self) -> int:
        return hash(self.id)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and other.id == self.id


class Spend(BaseModel):
    """What some model calls cost, as plain data, so that it can travel back with the result they
    served (from a thread, a process or another machine alike)."""

    model_config = ConfigDict(frozen=True)

    calls: int = 0
    failures: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    seconds: float = 0.0
    cost_usd: float = 0.0
    estimated_tokens: int = 0  # of the tokens, those estimated (the server or agent reported none)
    unpriced: int = 0  # calls that reported no cost and had no price


class Rollout(BaseModel):
    """One task run against one artifact state: what came out, its reward, why it failed, what
    the model calls made while it ran cost, and how long it took."""

    model_config = ConfigDict(frozen=True)

    task: Task
    output: str
    reward: float
    error: Optional[str] = None
    spend: Spend = Field(default_factory=Spend)
    seconds: float = 0.0

    @field_validator("output", "error")
    @classmethod
    def _writable(cls, text: Optional[str]) -> Optional[str]:
        """Each lone surrogate escaped (`reading.writable`): what a run or a scorer says travels to
        files, a host's pages and MCP answers, all UTF-8. The reward has read the output as it was."""
        return text if text is None else writable(text)


class Edit(BaseModel):
    """Set one key of an artifact's state. `before` is the text the proposer saw (None: the key
    did not exist); `after` is the new text (None: delete the key)."""

    model_config = ConfigDict(frozen=True)

    key: str
    before: Optional[str] = None
    after: Optional[str] = None


class EvidenceCard(BaseModel):
    """Why a diff should land: the tasks behind it and what self-verification measured."""

    model_config = ConfigDict(frozen=True)

    task_ids: list[str] = Field(default_factory=list)
    rewards: list[float] = Field(default_factory=list)
    rationale: str = ""
    verify_task_ids: list[str] = Field(default_factory=list)
    verify_before: Optional[float] = None
    verify_after: Optional[float] = None

    @property
    def verified_gain(self) -> Optional[float]:
        if self.verify_before is None or self.verify_after is None:
            return None
        return self.verify_after - self.verify_before


class Diff(BaseModel):
    """A proposed change to one artifact, on top of ledger version `base_version`."""

    model_config = ConfigDict(frozen=True)

    id: str
    artifact_id: str
    base_version: int
    edits: list[Edit]
    evidence: EvidenceCard = Field(default_factory=EvidenceCard)
    author: str = ""

    @property
    def keys(self) -> set[str]:
        return {e.key for e in self.edits}

    def verified(self, task_ids: list[str], before: float, after: float) -> Diff:
        """This diff with its self-verification on its card: the tasks, and the mean reward of the
        snapshot (`before`) and of the patched state (`after`) on them."""
        card = self.evidence.model_copy(update={"verify_task_ids": task_ids, "verify_before": before,
                                                "verify_after": after})
        return self.model_copy(update={"evidence": card})


OutcomeKind = Literal[
    "committed",  # landed in a commit as proposed (alone or beside diffs on other keys)
    "fused",  # merged with another diff's edit of the same key, and the merge landed
    "duplicate",  # changes nothing that head, or an earlier diff of the step, does not already say
    "rejected_by_test",  # the acceptance test did not find it an improvement
    "declined",  # an L1 change that passed the test, declined by the approver or left unanswered in time
    "conflict_lost",  # overlapped another diff's edit and lost under the conflict policy
    "dropped_stale",  # its base was older than the lag budget allows
    "unjudged",  # the run stopped (a budget, a cancel) before the step judged it
    "refused_by_governance",  # touched a frozen key, or more keys than allowed
    "invalid",  # malformed: unknown key, bad path, oversize, unparseable proposal
    "error",  # an exception while handling it; the reason holds the message
]

OUTCOME_MEANINGS = {  # each kind in a reader's words, in the order views list them: what landed first
    "committed": "landed in a commit as proposed",
    "fused": "merged with another diff's edit of the same key; the merge landed",
    "rejected_by_test": "the acceptance test did not find it an improvement",
    "declined": "an L1 change that passed the test, declined by the approver or left unanswered",
    "conflict_lost": "overlapped another diff's edit and lost",
    "duplicate": "said nothing the artifact, or another diff of its round, did not already say",
    "dropped_stale": "its base version was older than the lag budget allows",
    "unjudged": "the run stopped before it was judged",
    "refused_by_governance": "touched a frozen key, or more keys than a diff may",
    "invalid": "the proposal could not be read as a change",
    "error": "handling it failed; the reason holds the message",
}


class Outcome(BaseModel):
    """What became of one diff. Every diff gets exactly one."""

    model_config = ConfigDict(frozen=True)

    diff_id: str
    kind: OutcomeKind
    reason: str
    version: Optional[int] = None  # the ledger version it landed in, when it landed
    step: Optional[int] = None
    author: str = ""


class Reflection(BaseModel):
    """What one call of `propose` gave: a proposal (None for none), or why it gave none."""

    model_config = ConfigDict(frozen=True)

    proposal: str | None = None
    failed: Literal["invalid", "error"] | None = None
    reason: str = ""
    spend: Spend = Field(default_factory=Spend)


class Tried(BaseModel):
    """A proposal the run already judged and refused, and why: what a reflector is told so that it
    does not propose it again (`propose(..., tried=...)`)."""

    model_config = ConfigDict(frozen=True)

    proposal: str
    why: str

"""Typed progress events that `evolve(on_event=...)` receives, one at a time and in order: from
the engine's thread, and `Spent` from a thread of the run's own (so that the bill is current while
the engine waits inside a round).

Each is plain data (a frozen dataclass of JSON-friendly fields), so that the run store can write
them to `events.jsonl` and a watcher in another process can read them back (`to_json`, `from_json`).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

from agentdescent.types import Diff, Outcome


@dataclass(frozen=True, kw_only=True)
class RunStarted:
    rounds: int
    n_workers: int
    train: int
    held_out: int
    version: int
    ledger: str
    temporary: bool = False  # the ledger is a new temporary folder (no store= was given)
    continued_from: int | None = None  # the store already held this artifact, at this version
    resumed_round: int | None = None  # an interrupted run of the same settings continues at this round
    outcomes: dict[str, int] = field(default_factory=dict)  # a resumed run: what became of its diffs so far
    calls: int = 0  # a resumed run: what its earlier processes spent
    tokens: int = 0
    estimated_tokens: int = 0  # of those tokens, the ones estimated (the server or agent reported none)


@dataclass(frozen=True, kw_only=True)
class Warned:
    """Something the user should know about that does not stop the run."""

    message: str


@dataclass(frozen=True, kw_only=True)
class RoundStarted:
    round: int
    version: int


@dataclass(frozen=True, kw_only=True)
class DiffOutcome:
    round: int
    outcome: Outcome
    diff: Diff | None = None  # the diff itself (None for a proposal that never became one)


@dataclass(frozen=True, kw_only=True)
class Committed:
    round: int
    version: int
    diff_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Evaluated:
    """A held-out reward of `version`. The first after each RunStarted (round -1) is where the run
    starts from: a resumed run sends it again from its checkpoint (`again`), with `best_reward` its
    best so far, the start's figure rather than a new measurement (unless it stopped before taking it).
    A later one of round -1 is the start's figure changed: its rollouts that failed with an error ran
    again before a promotion was weighed against it."""

    round: int
    version: int
    held_out_reward: float  # partial: the most the held-out tasks not run could have brought it to
    promoted: bool
    best_reward: float
    partial: bool = False  # stopped after its first wave: it could no longer beat stable nor reach the target
    again: bool = False  # the start's figure, measured by an earlier process of the run and sent again


@dataclass(frozen=True, kw_only=True)
class RoundEnded:
    round: int
    calls: int


@dataclass(frozen=True, kw_only=True)
class Spent:
    """What the run has spent so far, sent about once a second while it goes on spending. `calls`
    counts each call as it starts, as the budget does. The last one a run that raises sends is its
    settled bill (sent on its way out when that differs; a run that returns has it in `result.usage`)."""

    calls: int
    tokens: int
    failures: int = 0  # calls that failed (an agent's error, a timeout), each a rollout scored 0
    cost_usd: float = 0.0  # what the calls back cost: as their clients report it, or at their price
    unpriced: int = 0  # calls back whose cost is not known (`Usage.unpriced`)
    failure: str | None = None  # the first one's reason
    estimated_tokens: int = 0  # of the tokens, the ones estimated (the server or agent reported none)


@dataclass(frozen=True, kw_only=True)
class RunEnded:
    reason: str
    final_reward: float | None  # None: never measured (the run stopped before its first measurement)


Event = RunStarted | Warned | RoundStarted | DiffOutcome | Committed | Evaluated | Spent | RoundEnded | RunEnded
EVENTS: dict[str, type] = {kind.__name__: kind for kind in Event.__args__}


def to_json(event: Event) -> dict[str, Any]:
    """{"event": "Committed", "round": 2, ...}: one line of a run's events.jsonl."""
    data = asdict(event)
    if isinstance(event, DiffOutcome):  # pydantic models, which asdict leaves as objects
        data["outcome"] = event.outcome.model_dump(mode="json")
        data["diff"] = None if event.diff is None else event.diff.model_dump(mode="json")
    return {"event": type(event).__name__, **data}


def from_json(data: dict[str, Any]) -> Event:
    """The inverse of `to_json`; a `KeyError` or `TypeError` for a line that is not an event."""
    kind = EVENTS[data["event"]]
    values = {f.name: data[f.name] for f in fields(kind) if f.name in data}
    if kind is DiffOutcome:
        values["outcome"] = Outcome.model_validate(values["outcome"])
        values["diff"] = None if values.get("diff") is None else Diff.model_validate(values["diff"])
    if kind is Committed:
        values["diff_ids"] = tuple(values["diff_ids"])
    return kind(**values)

"""Typed progress events that `evolve(on_event=...)` receives, in order, on the engine's thread."""

from __future__ import annotations

from dataclasses import dataclass

from agentdescent.types import Outcome


@dataclass(frozen=True, kw_only=True)
class RunStarted:
    rounds: int
    n_workers: int
    train: int
    held_out: int
    version: int
    ledger: str


@dataclass(frozen=True, kw_only=True)
class RoundStarted:
    round: int
    version: int


@dataclass(frozen=True, kw_only=True)
class DiffOutcome:
    round: int
    outcome: Outcome


@dataclass(frozen=True, kw_only=True)
class Committed:
    round: int
    version: int
    diff_ids: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Evaluated:
    round: int
    version: int
    held_out_reward: float
    promoted: bool
    best_reward: float


@dataclass(frozen=True, kw_only=True)
class RoundEnded:
    round: int
    calls: int


@dataclass(frozen=True, kw_only=True)
class RunEnded:
    reason: str
    final_reward: float


Event = RunStarted | RoundStarted | DiffOutcome | Committed | Evaluated | RoundEnded | RunEnded

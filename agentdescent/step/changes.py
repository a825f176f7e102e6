"""What the stages of the optimizer step hand one another: a rebased change, and components of them."""

from __future__ import annotations

from dataclasses import dataclass, field

from agentdescent.step.staleness import StaleDecision
from agentdescent.types import Diff


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
    by identity: a step's components are distinct objects holding disjoint keys."""

    changes: list[Change]
    after: dict[str, str | None]
    fused_keys: set[str] = field(default_factory=set)
    echoes: list[Change] = field(default_factory=list)  # duplicates of it: their failures are its evidence too

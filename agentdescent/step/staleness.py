"""Staleness: what becomes of a diff made on a version that head has since moved past.

A diff's staleness is `s = head − base`, the commits that landed under it since its worker read
its snapshot (asynchronous runs make them; a synchronous round's diffs are all fresh). Each is
rebased onto head in the optimizer step, its keys three-way merged where head changed them, and
its evidence (the failures it was made from) measured again there by the gate's first wave,
since the cache holds it for its base only. The staleness policy decides, per diff, against the
run's `lag_budget`:

    drop      within the budget, judged like any diff; past it, `dropped_stale`
    rebase    never dropped: past the budget too, rebased and re-verified on its own evidence
    discount  within the budget, its evidence weighted by η(s) in the gate's test; past it, dropped

and `weight` is η(s), which also breaks ties between conflicting edits (`BetterEvidence`). The
step records s, η and the decision of every diff in the history and the commit's trailers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol, get_args

from agentdescent.errors import UserError
from agentdescent.step.ranges import number

StaleDecision = Literal["fresh", "admitted", "rebased", "discounted", "dropped"]
How = Literal["drop", "rebase", "discount"]
HOW: tuple[How, ...] = get_args(How)  # each `how`, as its type names it, so that a loop over them type-checks


class StalenessPolicy(Protocol):
    def decide(self, staleness: int, lag_budget: int | None) -> StaleDecision:
        """`fresh` (s = 0), `admitted` (judged as any diff), `rebased` (past the budget, judged on
        its evidence measured again at head), `discounted` (its evidence weighted by η(s) in the
        test) or `dropped`."""

    def weight(self, staleness: int) -> float:
        """η(s): how much a diff's evidence counts after `staleness` commits landed under it."""


@dataclass(frozen=True)
class Staleness:
    """The shipped policy: `how` is `drop`, `rebase` or `discount` (see the module's docstring);
    η(s) = 1 / (1 + decay·s)."""

    how: How = "drop"
    decay: float = 0.5

    def __post_init__(self) -> None:
        if self.how not in HOW:
            raise UserError(f"Staleness(how={self.how!r}): choose one of {', '.join(HOW)}")
        number(self, "decay", self.decay, low=0, means="η(s) = 1 / (1 + decay·s) weighs the evidence of a diff s "
               "commits behind head; 0: no discount")

    def decide(self, staleness: int, lag_budget: int | None) -> StaleDecision:
        if staleness == 0:
            return "fresh"
        within = lag_budget is None or staleness <= lag_budget
        if self.how == "discount":
            return "discounted" if within else "dropped"
        if within:
            return "admitted"
        return "rebased" if self.how == "rebase" else "dropped"

    def weight(self, staleness: int) -> float:
        return 1.0 / (1.0 + self.decay * staleness)


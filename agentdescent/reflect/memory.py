"""The run's reflective memory: the proposals it judged and refused, told to the reflector.

A reflection costs a call; one that proposes again what the run already refused costs that call
and the test of a proposal known to fail. So each reflection is handed the run's latest refusals,
each with its reason (`Tried`): a `propose` that takes a `tried` keyword gets them, and the
model reflector puts them in its prompt. Where rewards are samples a refusal is one too: the
gate refuses a right rule now and then by chance, and a reflector told not to propose it again
learns fewer rules for more calls (docs/results.md measures it), so a run whose rewards are (or
may be) samples tells nothing. The run's checkpoint holds them (`held`, `restore`): a resumed run
tells its reflector what the run refused before it stopped, as a run never stopped would.

    memory = Memory()
    memory.refused("Be more careful.", "fixes none of the 1 failures it was made from")
    memory.recent(noisy=False) == [Tried(proposal="Be more careful.", why="fixes none of the 1 failures it was made from")]
    memory.recent(noisy=True) == []

Left out: what a proposal is worth (the aggregator says) and what the reflector does with it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from agentdescent.types import Diff, Outcome, Tried

KEPT = 12  # refusals handed to a reflection: the latest, a few lines of its prompt
WHY_CHARS = 160
REFUSALS = ("rejected_by_test", "declined")  # the outcomes that say a proposal was judged and refused


class Memory:
    """The run's refusals, the latest last; safe to use from any thread."""

    def __init__(self, kept: int = KEPT) -> None:
        self._kept = kept
        self._refused: OrderedDict[str, str] = OrderedDict()  # proposal -> why
        self._lock = threading.Lock()

    def refused(self, proposal: str, why: str) -> None:
        """Remember that `proposal` was refused, and why (a later refusal replaces the reason)."""
        proposal = proposal.strip()
        if not proposal:
            return
        why = " ".join(why.removeprefix("rejected: ").split())
        with self._lock:
            self._refused.pop(proposal, None)
            self._refused[proposal] = why[:WHY_CHARS]
            while len(self._refused) > self._kept:
                self._refused.popitem(last=False)

    def judged(self, outcomes: Iterable[Outcome], diffs: Mapping[str, Diff]) -> None:
        """Remember the refusals among a step's `outcomes`, each as its diff (in `diffs`, by id) proposed it."""
        for outcome in outcomes:
            if outcome.kind in REFUSALS and outcome.diff_id in diffs:
                self.refused(diffs[outcome.diff_id].evidence.rationale, outcome.reason)

    def recent(self, *, noisy: bool | None) -> list[Tried]:
        """The latest refusals, at most `kept`, oldest first; none where rewards are (or may be)
        samples."""
        return self.held() if noisy is False else []

    def held(self) -> list[Tried]:
        """Every refusal kept, oldest first, whatever the rewards: what a checkpoint saves."""
        with self._lock:
            return [Tried(proposal=p, why=w) for p, w in self._refused.items()]

    def restore(self, held: Iterable[Tried]) -> None:
        """Hold what `held` gave, and nothing else: a resumed run is told what the run had refused."""
        kept = OrderedDict((t.proposal, t.why) for t in held)
        while len(kept) > self._kept:
            kept.popitem(last=False)
        with self._lock:
            self._refused = kept

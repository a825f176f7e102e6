"""The run's budgets as caps: no rollout or proposal starts once `max_calls` or `max_tokens` is spent.

Every unit of work (a rollout that is not in the cache, a reflection) asks the allowance as it
really starts, not when it is queued: the call pools ask it through their `on_start`, so a unit
waiting its turn behind busy ones is neither counted nor let through early. A unit running is
counted as one call until it is back, then at the size its model clients report (an agent that
calls its model three times is three). So with plain functions `max_calls` is exact, and with
metered clients only the units already running when it was reached can pass it, each by the
calls it makes past its first: at most the call pools' width (`max_concurrency`) of them run at
once. A resumed run starts from what every earlier process of the run spent, the calls its
killed processes started included (`checkpoint.RunFiles.bill`), so the cap holds across kills.
Tokens are known only after a call, so `max_tokens` stops the next start.
When the allowance refuses, `BudgetSpent` is raised where the unit was to start: its future
fails with it, and the caller waiting for it hears it; the loop keeps what was committed and ends
the run with the reason.
"""

from __future__ import annotations

import threading

from agentdescent.errors import BudgetSpent
from agentdescent.usage import Usage


class Allowance:
    def __init__(self, usage: Usage, *, max_calls: int | None, max_tokens: int | None) -> None:
        self._usage = usage
        self._max_calls = max_calls
        self._max_tokens = max_tokens
        self._started: int | None = None  # units started, counted from what `usage` held at the first ask
        self._lost_before = 0  # the units earlier processes of the run started and never recorded
        self._lock = threading.Lock()
        self.spent: str | None = None  # why the allowance refused, once it has

    def take(self) -> None:
        """Let one unit of work start, or raise `BudgetSpent`."""
        with self._lock:
            refused = self.spent or self._refusal()
            if refused:
                self.spent = refused
                raise BudgetSpent(refused)
            self._started = self._count() + 1

    def may_start(self) -> bool:
        """Whether `take` would let one more unit start now, without counting it: an optional unit
        (a straggler's second run) is sent only if True, and counted as it starts."""
        with self._lock:
            return not (self.spent or self._refusal())

    def _count(self) -> int:
        """Callers hold the lock."""
        if self._started is None:  # a resumed run's usage is loaded by then
            self._lost_before = self._usage.abandoned
            self._started = self._usage.units + self._lost_before
        return self._started

    def _refusal(self) -> str:
        """Why one more unit may not start now, or "". The calls spent are those paid for, and one
        for each unit started and not yet back. Callers hold the lock."""
        running = max(0, self._count() - self._usage.units - self._lost_before)
        calls = self._usage.calls + running
        if self._max_calls is not None and calls >= self._max_calls:
            return f"the call budget is spent ({calls} of max_calls={self._max_calls})"
        if self._max_tokens is not None and self._usage.tokens >= self._max_tokens:
            return f"the token budget is spent ({self._usage.tokens} of max_tokens={self._max_tokens})"
        return ""

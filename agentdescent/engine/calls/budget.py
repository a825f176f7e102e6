"""The run's budgets as caps: no rollout or proposal starts once `max_calls` or `max_tokens` is spent.

Every unit of work (a rollout that is not in the cache, a reflection) asks the allowance before
it starts. Units count as one call each the moment they start; a unit whose model client reports
more calls (an agent that calls its model three times, say) is counted at that size once it is
back. So with plain functions `max_calls` is exact, and with metered clients only a unit already
running can pass it. A resumed run starts from what every earlier process of the run spent, the
calls its killed processes started included (`checkpoint.RunFiles.bill`), so the cap holds across
kills. Tokens are known only after a call, so `max_tokens` stops the next start.
When the allowance refuses, `BudgetSpent` is raised where the unit was asked for; the loop keeps
what was committed and ends the run with the reason.
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
        self._lock = threading.Lock()
        self.spent: str | None = None  # why the allowance refused, once it has

    def take(self) -> None:
        """Let one unit of work start, or raise `BudgetSpent`."""
        with self._lock:
            if self._started is None:  # a resumed run's usage is loaded by then
                self._started = self._usage.units + self._usage.abandoned
            calls = max(self._started, self._usage.calls)
            if self._max_calls is not None and calls >= self._max_calls:
                self.spent = f"the call budget is spent ({calls} of max_calls={self._max_calls})"
            elif self._max_tokens is not None and self._usage.tokens >= self._max_tokens:
                self.spent = f"the token budget is spent ({self._usage.tokens} of max_tokens={self._max_tokens})"
            if self.spent is not None:
                raise BudgetSpent(self.spent)
            self._started += 1

    def may_start(self) -> bool:
        """`take`, as a question: an optional unit (a straggler's second run) starts only if True."""
        try:
            self.take()
        except BudgetSpent:
            return False
        return True

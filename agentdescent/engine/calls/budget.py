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
Tokens are known only after a call, so `max_tokens` stops the next start, and the calls running
then add theirs: the figure a refusal names is the spend at that moment.

Once the run has measured where it starts, the loop `keep`s back from its rounds what measuring
its last version on the held-out set takes, so that a run whose budget runs out still measures
what it committed last (and keeps it when it wins): a rollout for each held-out task, each at what
a unit of work has cost so far, in calls and in tokens. With plain functions that is exact (a call
a rollout); with metered clients and with tokens it is an estimate, and a measurement that takes
more stops at the cap, its version reported unmeasured. The rounds are refused past the budget
less what is kept; `release` hands it to the measurement at the end. As a stop rule (`__call__`) the allowance says, between rounds, whether
the rounds may go on.
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
        self._kept = 0  # held-out tasks whose measurement at the end is kept back from the rounds
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

    def keep(self, tasks: int) -> None:
        """From now on, keep back from the rounds what measuring `tasks` held-out tasks takes."""
        with self._lock:
            self._kept = tasks

    def release(self) -> None:
        """The rounds are over: what was kept back may be spent, on the measurement at the end."""
        with self._lock:
            self._kept, self.spent = 0, None

    def __call__(self, progress: object, usage: object) -> str | None:
        """As a stop rule, asked between rounds: why no round may start now, or None."""
        with self._lock:
            return self.spent or self._refusal() or None

    def _count(self) -> int:
        """Callers hold the lock."""
        if self._started is None:  # a resumed run's usage is loaded by then
            self._lost_before = self._usage.abandoned
            self._started = self._usage.units + self._lost_before
        return self._started

    def _refusal(self) -> str:
        """Why one more unit may not start now, or "". The calls spent are those paid for, and one
        for each unit started and not yet back. Callers hold the lock (and take the usage's inside it)."""
        paid, tokens, units = self._usage.counts("calls", "tokens", "units")
        calls = paid + max(0, self._count() - units - self._lost_before)
        # what the units of the measurement at the end will cost, at what a unit has cost so far
        kept = -(-self._kept * paid // units) if units else self._kept
        if self._max_calls is not None and calls >= self._max_calls - kept:
            return (f"the call budget is spent ({calls} of max_calls={self._max_calls}"
                    + (f", the other {self._max_calls - calls} kept for measuring the last version on the held-out tasks)"
                       if calls < self._max_calls else ")"))
        if self._max_tokens is not None and tokens >= self._max_tokens - (self._kept * tokens // units if units else 0):
            return (f"the token budget is spent ({tokens} of max_tokens={self._max_tokens} "
                    + (f"when the rounds' share ran out, about {self._max_tokens - tokens} kept for measuring the last "
                       "version on the held-out tasks)" if tokens < self._max_tokens else "when the cap was hit)"))
        return ""

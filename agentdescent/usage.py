"""What a run spent: rollouts and reflections by what they were for, the calls, tokens and cost of
its model clients, the model calls made on threads of the caller's own (`agents.base`: stray
calls), and the calls a killed process of the run started and never recorded; and the money of it
as a person reads it (`money_spent`, `dollars`).

`Usage` is added to from many threads as units of work land (each brings its own spend back as
plain data), read at one instant by a checkpoint (`read`), and stored with the result. `calls`
is what `max_calls` caps. Left out: deciding whether a call may start (`engine.calls.budget`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from agentdescent.agents.base import ModelUsage, Tally
from agentdescent.types import Reflection, Rollout, Spend

T = TypeVar("T")


class RunReturned(RuntimeError):
    """A unit of work asked to start after its run returned and settled its bill."""

PURPOSES = ("train", "verify", "accept", "validate")
COUNTERS = ("rollouts", "proposals", "failures", "cache_hits", "cache_misses", *PURPOSES, "validate_failures", "reissued", "discarded",
            "resumed", "step_calls", "replayed", "abandoned", "billed", "repeated", "disagreed", "stray_calls", "unattributed")


@dataclass
class Usage(Tally):
    """What a run spent. `model` collects every call made through AgentDescent's model and agent
    clients during the run (judges and reflectors included), as the rollouts and reflections that
    made them bring it back; `calls` is what `max_calls` limits."""

    rollouts: int = 0
    proposals: int = 0
    failures: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    # the rollouts that ran, by what they were for (PURPOSES): where the bill went
    train: int = 0  # workers' minibatches and scouting
    verify: int = 0  # workers' self-verification of their diffs (pipelined runs; else the step measures them, under accept)
    accept: int = 0  # the optimizer step's test, bisection and the L1 gate
    validate: int = 0  # held-out evaluation
    validate_failures: int = 0  # ... of which failed with an error (also counted in `failures`)
    reissued: int = 0  # stragglers run a second time (`stragglers`); each is also counted as a rollout
    discarded: int = 0  # answers that came second to their straggler's other run, thrown away
    resumed: int = 0  # rollouts in flight when an earlier process of this run stopped, run first on resume
    step_calls: int = 0  # model calls the optimizer step made itself (a fusion model, say)
    replayed: int = 0  # answers an earlier process of this run paid for, read back from its journal, not asked again
    abandoned: int = 0  # units started and never recorded (a killed process's, a stopped run's in flight): paid, answer lost
    billed: int = 0  # the calls of every unit and step call recorded (see `calls`)
    repeated: int = 0  # rollouts drawn again on a task the same artifact was already measured on (neither failed with an error)
    disagreed: int = 0  # ... whose reward differed from the first: the rewards are samples, not the truth
    stray_calls: int = 0  # model calls made in this process where no meter was (a thread `run` started), each billed
    unattributed: int = 0  # ... made while another run was active in the process too: on neither bill
    errors: list[str] = field(default_factory=list)
    last_error: str | None = field(default=None, repr=False, compare=False)  # the newest, once `errors` is full
    # Of the rollouts that failed with an error (held-out ones aside), how many were of each task: a
    # stretch whose failures are all one task's is that task's fault, not the agent's (FailureWatch)
    failed_tasks: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    model: ModelUsage = field(default_factory=ModelUsage)
    settled: bool = field(default=False, repr=False, compare=False)  # the run returned: nothing more is counted

    @property
    def calls(self) -> int:
        """The calls the run paid for: each rollout and reflection is one call, or as many as its
        model clients report (an agent that asked its model three times is three); each model call
        the step made itself; and each unit a killed process started and never recorded."""
        return self.billed + self.abandoned

    def started_calls(self, started: int) -> int:
        """The calls as the budget counts them while the run goes: `calls`, and one for each of the
        `started` units (the start log's length) not back yet; once the run has settled, `calls`."""
        with self._lock:
            return self.billed + max(self.abandoned, started - self.units)

    def counts(self, *names: str) -> tuple[int, ...]:
        """The counts `names` (counters or `calls`, `tokens`, `units`) at one instant: a unit landing
        adds to several, one after the other, and a reader between would count it in some only."""
        with self._lock:
            return tuple(getattr(self, name) for name in names)

    def failures_by_task(self) -> dict[str, int]:
        """A copy of `failed_tasks`, read under the lock a rollout landing adds to it under."""
        with self._lock:
            return dict(self.failed_tasks)

    @property
    def tokens(self) -> int:
        return self.model.tokens

    @property
    def estimated_tokens(self) -> int:
        """Of `tokens`, those estimated: the server or agent reported none."""
        return self.model.estimated_tokens

    @property
    def unpriced(self) -> int:
        """The calls whose cost `model.cost_usd` leaves out: those that reported none and had no
        price, and those a killed process started and never recorded."""
        return self.model.unpriced + self.abandoned

    @property
    def units(self) -> int:
        """Rollouts, reflections and step calls recorded: what the start log holds when none is lost."""
        return self.rollouts + self.proposals + self.step_calls

    def count_rollout(self, rollout: Rollout, purpose: str = "train",
                      journal: Callable[[Rollout], None] | None = None) -> None:
        """A rollout that ran (not one served from the cache), with what its model calls cost.
        `journal` (the run's rollout journal) takes it under the same lock, so that a checkpoint
        reading the usage and the journal's length together (`read`) finds each rollout in both
        or in neither."""
        with self._lock:
            if self.settled:
                return
            self._add(rollouts=1, cache_misses=1, billed=max(1, rollout.spend.calls), **{purpose: 1})
            self.model.add_spend(rollout.spend)
            if rollout.error is not None:
                self._error(rollout.error)
                if purpose == "validate":
                    self._add(validate_failures=1)
                else:
                    self.failed_tasks[rollout.task.id] = self.failed_tasks.get(rollout.task.id, 0) + 1
            if journal is not None:
                journal(rollout)

    def count_reflection(self, reflection: Reflection, journal: Callable[[Reflection], None] | None = None) -> None:
        """A reflection that ran, with what its model calls cost; `journal` (the run's answer
        journal) takes it under the same lock, as `count_rollout` does a rollout."""
        with self._lock:
            if self.settled:
                return
            self._add(proposals=1, billed=max(1, reflection.spend.calls))
            self.model.add_spend(reflection.spend)
            if journal is not None:
                journal(reflection)

    def count_step(self, spend: Spend) -> None:
        """The model calls the optimizer step made itself, each a call of its own."""
        with self._lock:
            if self.settled:
                return
            self._add(step_calls=spend.calls, billed=spend.calls)
            self.model.add_spend(spend)

    def count_stray(self, **counts: float) -> None:
        """A model call made in the run's process where no meter was (on a thread the run's `run`,
        `propose` or `reward` started), counted as it is made: a call of its own, as a step call is.
        (The rollout it served is a call too, as one that asked no model is.)"""
        with self._lock:
            if self.settled:
                return
            self._add(stray_calls=counts.get("calls", 0), billed=counts.get("calls", 0))
            self.model.add(**counts)

    def miss_stray(self) -> None:
        """A stray call made while another run was active in this process: it may be either's, so
        it is counted on neither, only noted (`unattributed`)."""
        self.add(unattributed=1)

    def settle_abandoned(self, started: int) -> None:
        """After a resume: each unit the run's processes started (`started`, the start log's
        length) that the counts do not hold was paid for by a killed process; count it."""
        with self._lock:
            self.abandoned = max(0, started - self.units)

    def start(self, mark: Callable[[], None]) -> None:
        """A unit of work starts: `mark` puts it on the start log, under the lock `settle` reads the
        log under, so that a unit either starts before the run returns, and is on its bill, or not at
        all (`RunReturned`: a pool thread that took a call just before the pools shut down)."""
        with self._lock:
            if self.settled:
                raise RunReturned("the run has returned: no call starts after it")
            mark()

    def settle(self, started: Callable[[], int]) -> None:
        """The run has returned: each of the `started()` units (the start log's length) that the
        counts do not hold was paid for and its answer lost (a call in flight when a broken contract
        or a cancel stopped the run, one whose contract broke); count it as abandoned, and count
        nothing more, so that a call still running cannot change the result after it is returned."""
        with self._lock:
            self.abandoned = max(self.abandoned, started() - self.units)
            self.settled = True

    def _add(self, **counts: float) -> None:
        if not self.settled:
            super()._add(**counts)

    def _error(self, message: str) -> None:
        self.failures += 1
        self.last_error = message
        if len(self.errors) < 20:
            self.errors.append(message)

    def as_record(self) -> dict:
        """Plain data for a checkpoint or a stored result; `from_record` reads it back."""
        return self.read(lambda: None)[0]

    def read(self, also: Callable[[], T]) -> tuple[dict, T]:
        """`as_record()` and `also()` at one instant: no rollout is counted between them."""
        with self._lock:  # the model's lock is taken inside this one, as `count_rollout` takes it
            counts = {name: getattr(self, name) for name in COUNTERS}
            return {**counts, "errors": list(self.errors), "model": self.model.as_dict()}, also()

    @classmethod
    def from_record(cls, record: Mapping) -> Usage:
        usage = cls()
        usage.load(record)
        return usage

    def load(self, record: Mapping) -> None:
        """Replace every count with those of `record` (an `as_record`): a resumed run's spending so far."""
        model = ModelUsage()
        model.add(**record.get("model", {}))
        with self._lock:
            for name in COUNTERS:
                setattr(self, name, record.get(name, 0))
            if "billed" not in record:  # a record from before the count of calls was kept
                self.billed = max(self.rollouts + self.proposals, model.calls)
            self.errors, self.model = list(record.get("errors", [])), model


def money_spent(cost_usd: float, unpriced: int) -> str:
    """What a run's calls cost, as its status and its report say it: "" where no call had a cost;
    else the dollars, and the calls not in them.

    money_spent(1.2375, 8) == "$1.24, not counting 8 calls with no known cost (...)"
    """
    if not cost_usd:
        return ""
    if not unpriced:
        return dollars(cost_usd)
    return (f"{dollars(cost_usd)}, not counting {unpriced} call{'s' if unpriced != 1 else ''} with no known cost (one "
            "that reported none when the spec gave no price_per_call or price_per_1k_tokens, or one a killed process "
            "started)")


def dollars(usd: float) -> str:
    """Money as a person reads it: to the cent from a dollar up, else to three figures.

    dollars(66.654) == "$66.65"; dollars(0.0125) == "$0.0125"
    """
    return f"${usd:,.2f}" if usd >= 1 else f"${usd:.3g}"

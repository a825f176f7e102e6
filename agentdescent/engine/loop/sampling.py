"""Which train tasks the run looks at: each turn's minibatch, and each version's acceptance sample.

`Sampler` deals minibatches from the task sampler, the run's leads first. A lead is a train task
seen failing on an earlier snapshot and not since seen passing or dealt out again: a commit
rarely fixes what it was not made from, so leads are the likeliest failures to deal. The sampler
keeps them, since it is the only reader. A task dealt to a turn stays claimed until that turn's
diffs are judged, so that asynchronous turns on one snapshot do not all propose the same fix.
What the task sampler returns is checked where it is dealt: a turn it dealt no list would be
waited for forever, so a broken contract stops the run with a `UserError` instead.

`AcceptanceSamples` draws the acceptance sample of each head version, once. Workers verify a diff
on the sample of the version they started from; the step judges it on the sample of the head it
steps from. For a diff made on head the two are the same tasks, so its verification scores wait
in the evaluation cache, in synchronous and asynchronous runs alike.

What it leaves out: the rules that pick the tasks (`Policies.task_sampler`, `Policies.acceptance`).
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentdescent.engine.loop.decisions import TaskSampler
from agentdescent.engine.loop.sharding import Shards
from agentdescent.errors import UserError
from agentdescent.quoting import quoted
from agentdescent.step.policies import AcceptancePolicy
from agentdescent.types import Task


@dataclass(frozen=True, kw_only=True)
class Deal:
    """One turn's tasks: its minibatch, and spares to scout with when the minibatch holds no failure."""

    batch: list[Task]
    spares: list[list[Task]]


class Sampler:
    """Deals minibatches from `policy`, feeding it the snapshot's measured rewards and the leads."""

    def __init__(self, *, policy: TaskSampler, train: Sequence[Task], seed: int, scouts: int,
                 shards: Shards | None = None) -> None:
        self._policy = policy
        self._shards = shards  # a tensor-parallel run: each worker is dealt the tasks of its shard
        self._train = list(train)
        self._train_ids = frozenset(t.id for t in train)
        self._seed = seed
        self._draws = 1 + scouts  # a minibatch and its spares per turn
        self._leads: set[str] = set()
        self._claimed: set[str] = set()  # dealt to a turn whose diffs the aggregator has not yet judged
        self._lock = threading.Lock()  # asynchronous turns are dealt on the workers' threads

    @property
    def train(self) -> list[Task]:
        return self._train

    def deal(self, slots: Sequence[int], first_turn: int, measured: Mapping[str, float]) -> list[Deal]:
        """Minibatches for the turns of workers `slots`, numbered from `first_turn`, on a snapshot
        whose measured rewards (task id -> reward) are `measured`."""
        with self._lock:
            self._leads.difference_update(task_id for task_id, reward in measured.items() if reward >= 1.0)
            known = {**dict.fromkeys(self._leads, 0.0), **measured}
            # Not the tasks of turns still out: on one snapshot they would only be proposed for
            # again (a synchronous round has none out when it deals; an asynchronous run does).
            if self._shards is None:
                return self._deal(self._free(), len(slots), first_turn, known)
            deals = []
            for i, slot in enumerate(slots):  # each worker from its shard's tasks; with none, from any
                free = self._free()
                deals += self._deal(self._shards.eligible(slot, free) or free, 1, first_turn + i, known)
            return deals

    def _free(self) -> list[Task]:
        return [t for t in self._train if t.id not in self._claimed] or self._train

    def _deal(self, tasks: list[Task], count: int, first_turn: int, known: Mapping[str, float]) -> list[Deal]:
        asked = count * self._draws
        batches = self._policy(tasks, asked, first_turn, self._seed, known)
        self._check(batches, asked, count, tasks)
        first, spares = batches[:count], batches[count:]  # spares overlap the next dispatch's walk
        self._leads.difference_update(t.id for batch in first for t in batch)
        self._claimed.update(t.id for batch in batches for t in batch)
        return [Deal(batch=batch, spares=spares[i::count]) for i, batch in enumerate(first)]

    def _check(self, batches: object, asked: int, count: int, tasks: list[Task]) -> None:
        """A `UserError` when the task sampler broke its contract: a turn dealt no list is one the
        dispatcher would wait for forever, and a task not given may be one held out or claimed. An
        empty list is a turn with nothing to roll out (a sampler may leave a worker idle), and fewer
        spare lists than asked are fewer spares."""
        wrong = _wrong(batches, count, {t.id for t in tasks})
        if wrong is None:
            return
        name = getattr(self._policy, "__qualname__", None) or type(self._policy).__name__
        each = {1: "a minibatch", 2: "a minibatch and its spare"}.get(self._draws, f"a minibatch and its {self._draws - 1} spares")
        turns = "1 worker turn" if count == 1 else f"each of {count} worker turns"
        raise UserError(f"the task sampler {name} was asked for {_many(asked, 'minibatch', 'es')} ({each} for {turns}) "
                        f"from {_many(len(tasks), 'task')}, but {wrong}; a task sampler returns a list of the "
                        f"minibatches asked for, a list of Task objects from the tasks it was given each, and at least "
                        f"one for each turn (TaskSampler, agentdescent.engine.loop.decisions)")

    def release(self, tasks: Sequence[Task]) -> None:
        """A turn's tasks may be dealt again: its diffs have been judged."""
        with self._lock:
            self._claimed.difference_update(t.id for t in tasks)

    @property
    def leads(self) -> list[str]:
        with self._lock:
            return sorted(self._leads)

    def restore(self, leads: Sequence[str]) -> None:
        """Take up the leads a checkpoint kept (a resumed run)."""
        with self._lock:
            self._leads = set(leads) & self._train_ids

    def note(self, measured: Mapping[str, float]) -> None:
        """Remember the train tasks that failed on a snapshot (task id -> reward) as leads."""
        with self._lock:
            self._leads.update(t for t, reward in measured.items() if reward < 1.0 and t in self._train_ids)


def _many(n: int, noun: str, plural: str = "s") -> str:
    return f"{n} {noun}{'' if n == 1 else plural}"


def _wrong(batches: object, turns: int, given: set[str]) -> str | None:
    """What breaks the task sampler's contract in `batches`, said as what it returned; None when nothing does."""
    if not isinstance(batches, (list, tuple)):
        return "returned None" if batches is None else f"returned a {type(batches).__name__}"
    if len(batches) < turns:
        return f"returned {_many(len(batches), 'minibatch', 'es')}, fewer than the {turns} turns it deals"
    for i, batch in enumerate(batches, 1):
        if not isinstance(batch, (list, tuple)):
            return f"its minibatch {i} is a {type(batch).__name__}"
        for item in batch:
            if not isinstance(item, Task):
                return f"its minibatch {i} holds a {type(item).__name__}, {quoted(item, 40)}, not a Task"
            if item.id not in given:
                return f"its minibatch {i} holds task {quoted(item.id, 40)}, which is not among the tasks it was given"
    return None


class AcceptanceSamples:
    """The acceptance sample of each version, drawn once, when first asked for, seeded by the version
    (so a run is reproducible whichever thread asks first)."""

    def __init__(self, *, policy: AcceptancePolicy, train: Sequence[Task], seed: int) -> None:
        self._policy = policy
        self._train = list(train)
        self._seed = seed
        self._drawn: dict[int, list[Task]] = {}
        self._lock = threading.Lock()

    def of(self, version: int) -> list[Task]:
        with self._lock:
            if version not in self._drawn:
                self._drawn[version] = self._policy.sample(self._train, random.Random(f"{self._seed}:accept:{version}"))
            return self._drawn[version]

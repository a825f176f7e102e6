"""Scoring an artifact on tasks: `run` then `reward`, in parallel, cached, counted.

The cache key is (hash of what the rollout sees, task id): the rendered artifact, so two
states that render alike (a rule list in another key order, an empty entry) share their
rollouts, and within a run an identical rollout is never repeated: head is scored once however
many candidates are compared against it, a worker's minibatch on head is head's score, and a
candidate that lands is already measured as the next head. A reward is a sample, not the truth:
`again` draws more rollouts of a state on tasks it was measured on (where a decision hinges on
them), and from then on a state's reward on a task is the mean of its samples; each draw again
is counted as `repeated`, and as `disagreed` when its reward differs from the first one, which
is how a run learns that its rewards are noisy. Each rollout that runs is counted
under what it was for (`PURPOSES`); the call pool asks the run's allowance as it starts one, and
a rollout the allowance refused fails with `BudgetSpent` and is forgotten. The cache and the usage stay here,
with the driver; what goes to the call pool is `units.roll_out`, plain data in and out, and the
usage each rollout brings back is added as it arrives. A rollout whose `run` or `reward` raises is
data (reward 0, the error kept) but no measurement: its 0 says that a call failed (a rate limit,
a timeout), not what the artifact scores. Its caller gets its 0; the cache serves it to nobody later (the
next need of that state and task runs it again, a new call, counted), `known` and the draws leave
it out, and a draw again that failed is no sample (nor counted as one that differed); `errors`
tells the failures a measurement holds. A `reward` that returns something outside [0, 1] is the
caller's bug and stops the run with a `UserError`.
"""

from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel

from agentdescent.artifacts.state import state_hash
from agentdescent.artifacts.strategies import Strategy
from agentdescent.engine.calls.executors import Executor, result_of
from agentdescent.engine.calls.stragglers import Hedger
from agentdescent.engine.calls.units import roll_out
from agentdescent.errors import BudgetSpent
from agentdescent.step.stats import mean_reward
from agentdescent.types import Rollout, Task
from agentdescent.usage import Usage

T = TypeVar("T")


# The user's callables are called positionally, so their parameters are positional-only here:
# any function or lambda of this shape matches, whatever it names its parameters.
class RunFn(Protocol):
    def __call__(self, rendered: Any, task: Task, /) -> str:
        """Solve `task` with the rendered artifact; return the output to be scored."""


class RewardFn(Protocol):
    def __call__(self, task: Task, output: str, /) -> float:
        """Score `output` for `task` in [0, 1]."""


VIEWS_KEPT = 64  # enough for head and the candidates of a step of 64 workers


class ResumeQueue(BaseModel):
    """Rollouts in flight: what each saw (a state, by its view key) and its task and purpose."""

    states: dict[str, dict[str, str]] = {}
    rollouts: list[tuple[str, str, str]] = []  # (view key, task id, purpose)


def view_key(rendered: Any, state: Mapping[str, str]) -> str:
    """The cache key of the rollouts of `state`, rendered as `rendered`: a name for what they saw.
    A rendering that is neither text nor a tree of files falls back to the state's hash."""
    if isinstance(rendered, str):
        return hashlib.sha256(rendered.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if isinstance(rendered, Mapping):
        return state_hash(rendered)
    return state_hash(state)


class Evaluator:
    """Runs and scores states on tasks through a call pool, sharing one cache. Every method takes
    the `purpose` its rollouts are counted under."""

    def __init__(
        self, *, strategy: Strategy, run: RunFn, reward: RewardFn, pool: Executor, usage: Usage,
        timeout: float | None = None, journal: Callable[[str, Rollout], None] | None = None,
        hedger: Hedger | None = None,
        pools: Mapping[str, Executor] | None = None,
    ) -> None:
        self._hedger = hedger  # re-issues stragglers (None: every rollout runs once)
        self._pools = dict(pools or {})  # purpose -> a pool of its own (a pipeline's verification stage)
        self._timeout = timeout  # seconds a rollout may take before it is a failure (None: no limit)
        self._journal = journal  # hears of every rollout that ran, with its view's key (a resumable run keeps it)
        self._strategy = strategy
        self._run = run
        self._reward = reward
        self._pool = pool
        self.usage = usage
        self._cache: dict[str, dict[str, Future[Rollout]]] = {}  # view key -> task id -> rollout
        # view key -> task id -> reward of a rollout back: what `known` reads (asking each future
        # of a view takes that future's lock, thousands of times a step in a large run)
        self._rewards: dict[str, dict[str, float]] = {}
        self._extra: dict[str, dict[str, list[float]]] = {}  # view key -> task id -> rewards drawn again (`again`)
        # (view key, task id) of rollouts an earlier process ran in a round it did not finish: served
        # from the cache, but not `known` until this process asks for them, so the round is dealt as then
        self._unseen: dict[str, set[str]] = {}  # view key -> task ids
        self._pending: dict[Future[Rollout], tuple[str, Mapping[str, str], str, str]] = {}  # not yet back
        # The states viewed last, by identity (each kept, so that its id is not reused): head is
        # viewed for every row and turn of a step, and rendering a large artifact is a run's
        # largest CPU cost after the calls. A state is a value: the engine never changes one.
        self._views: OrderedDict[int, tuple[Mapping[str, str], str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def rollouts(self, state: Mapping[str, str], tasks: Sequence[Task], purpose: str = "train") -> list[Rollout]:
        return self.many([state], tasks, purpose)[0]

    def rewards(self, states: Sequence[Mapping[str, str]], tasks: Sequence[Task], purpose: str = "train") -> list[list[float]]:
        return self.score([(state, tasks) for state in states], purpose)

    def score(self, jobs: Sequence[tuple[Mapping[str, str], Sequence[Task]]], purpose: str = "accept") -> list[list[float]]:
        """Each state on its own tasks, all in flight at once; one row of rewards per job (the mean
        of a task's samples, where it was drawn again)."""
        rows = [self._submit_row(state, tasks, purpose) for state, tasks in jobs]
        return [self.read(state, tasks, row) for (state, tasks), row in zip(jobs, rows)]

    def read(self, state: Mapping[str, str], tasks: Sequence[Task], row: Sequence[Future[Rollout]]) -> list[float]:
        """The rewards of `row`, the rollouts `submit` started of `state` on `tasks`, once back (the
        mean of a task's samples, where it was drawn again)."""
        return self._means(state, tasks, [result_of(f).reward for f in row])

    def again(self, jobs: Sequence[tuple[Mapping[str, str], Sequence[Task]]], purpose: str = "accept") -> list[list[float]]:
        """Each state on its own tasks once more, past the cache, all in flight at once: one row per
        job of the new draws' rewards (not the means). A task with no rollout of its state yet is run
        first, so that each draw here is a repeat (one whose first failed with an error is not run
        first again: its draw is a sample all the same, though not one to compare)."""
        firsts = [self._submit_row(state, tasks, purpose, redo_failed=False) for state, tasks in jobs]
        drawn: list[list[Future[Rollout]]] = []
        for state, tasks in jobs:
            key, rendered = self.view(state)
            drawn.append([self._start(key, rendered, task, purpose) for task in tasks])
        out = []
        for (state, tasks), first, row in zip(jobs, firsts, drawn):
            key, _ = self.view(state)
            again, before = [result_of(f) for f in row], [result_of(f) for f in first]
            with self._lock:
                extra = self._extra.setdefault(key, {})
                for task, rollout in zip(tasks, again):
                    if rollout.error is None:
                        extra.setdefault(task.id, []).append(rollout.reward)
            pairs = [(r.reward, b.reward) for r, b in zip(again, before) if r.error is None and b.error is None]
            self.usage.add(repeated=len(pairs), disagreed=sum(r != b for r, b in pairs))
            out.append([r.reward for r in again])
        return out

    def draws(self, state: Mapping[str, str], task_id: str) -> list[float]:
        """The rewards of `state` on the task that are back, the first first (one back but not yet
        through `_returned`, as `known` reads it: a waiter may wake before the callbacks run)."""
        key, _ = self.view(state)
        with self._lock:
            first, future = self._rewards.get(key, {}).get(task_id), self._cache.get(key, {}).get(task_id)
            extra = list(self._extra.get(key, {}).get(task_id, ()))
        if first is None and future is not None:
            first = _scored(future)
        return [] if first is None else [first, *extra]

    def _means(self, state: Mapping[str, str], tasks: Sequence[Task], first: list[float]) -> list[float]:
        """`first` (each task's first reward), each averaged with its task's draws again."""
        key, _ = self.view(state)
        with self._lock:
            extra = self._extra.get(key)
            if not extra:
                return first
            more = [extra.get(t.id, ()) for t in tasks]
        return [(r + sum(m)) / (1 + len(m)) if m else r for r, m in zip(first, more)]

    def mean(self, state: Mapping[str, str], tasks: Sequence[Task], purpose: str = "validate") -> float:
        return mean_reward(self.score([(state, tasks)], purpose)[0])

    def many(self, states: Sequence[Mapping[str, str]], tasks: Sequence[Task], purpose: str = "train") -> list[list[Rollout]]:
        """Every state on every task, all in flight at once; rows follow `states`."""
        return [[result_of(f) for f in row] for row in self.submit(states, tasks, purpose)]

    def submit(self, states: Sequence[Mapping[str, str]], tasks: Sequence[Task],
               purpose: str = "train") -> list[list[Future[Rollout]]]:
        """Start every state on every task (cached ones are not re-run) without waiting."""
        return [self._submit_row(state, tasks, purpose) for state in states]

    def preload(self, rollouts: Sequence[tuple[str, Rollout]], *, unseen_from: int | None = None) -> None:
        """Put rollouts an earlier process of this run measured (view key, rollout) in the cache; a
        second one of the same view and task is a draw again. Those from index `unseen_from` on
        were run in a round that process did not finish: `known` leaves them out until asked for."""
        with self._lock:
            for at, (key, rollout) in enumerate(rollouts):
                if rollout.task.id in self._rewards.get(key, {}):
                    self._extra.setdefault(key, {}).setdefault(rollout.task.id, []).append(rollout.reward)
                    continue
                future: Future[Rollout] = Future()
                future.set_result(rollout)
                self._cache.setdefault(key, {})[rollout.task.id] = future
                self._rewards.setdefault(key, {})[rollout.task.id] = rollout.reward
                if unseen_from is not None and at >= unseen_from:
                    self._unseen.setdefault(key, set()).add(rollout.task.id)

    def known(self, state: Mapping[str, str]) -> dict[str, float]:
        """The rewards of `state` measured so far (each the mean of its samples), by task id,
        without running anything; a rollout that failed with an error is no measurement."""
        key, _ = self.view(state)
        with self._lock:
            row, rewards = dict(self._cache.get(key, {})), dict(self._rewards.get(key, {}))
            extra = dict(self._extra.get(key, {}))
            # back, but not yet through `_returned` (a waiter may wake before the callbacks run)
            landing = [(f, task_id) for f, (k, _, task_id, _) in self._pending.items() if k == key and f.done()]
            unseen = set(self._unseen.get(key, ()))
        for future, task_id in landing:
            if (reward := _scored(future)) is not None:
                rewards[task_id] = reward
        return {task_id: (rewards[task_id] + sum(extra.get(task_id, ()))) / (1 + len(extra.get(task_id, ())))
                for task_id in row if task_id in rewards and task_id not in unseen}  # in the order they started

    def errors(self, state: Mapping[str, str], tasks: Sequence[Task]) -> list[str]:
        """The errors of `state`'s first rollouts on `tasks` that are back and failed, without
        running or counting anything."""
        key, _ = self.view(state)
        with self._lock:
            row = self._cache.get(key, {})
            futures = [row[t.id] for t in tasks if t.id in row]
        rollouts = [f.result() for f in futures if f.done() and not f.cancelled() and f.exception() is None]
        return [r.error for r in rollouts if r.error is not None]

    def view(self, state: Mapping[str, str]) -> tuple[str, Any]:
        """The cache key naming what a rollout on `state` sees, and that (the rendered artifact)."""
        with self._lock:
            seen = self._views.get(id(state))
            if seen is not None and seen[0] is state:
                self._views.move_to_end(id(state))
                return seen[1], seen[2]
        rendered = self._strategy.render(state)
        key = view_key(rendered, state)
        with self._lock:
            self._views[id(state)] = (state, key, rendered)
            if len(self._views) > VIEWS_KEPT:
                self._views.popitem(last=False)
        return key, rendered

    def _submit_row(self, state: Mapping[str, str], tasks: Sequence[Task], purpose: str, *,
                    redo_failed: bool = True) -> list[Future[Rollout]]:
        key, rendered = self.view(state)
        futures, started, hits = [], [], 0
        try:
            with self._lock:
                row = self._cache.setdefault(key, {})
                for task in tasks:
                    future = row.get(task.id)
                    if future is None or (redo_failed and _failed(future)):  # an error is no measurement: run it again
                        future = self._start(key, rendered, task, purpose)
                        row[task.id] = future
                        self._pending[future] = (key, state, task.id, purpose)
                        started.append(future)
                    else:
                        hits += 1
                        self._unseen.get(key, set()).discard(task.id)
                    futures.append(future)
        finally:
            if hits:
                self.usage.add(cache_hits=hits)
            for future in started:  # outside the lock: a future already done calls back at once
                future.add_done_callback(self._returned)
        return futures

    def _start(self, key: str, rendered: Any, task: Task, purpose: str) -> Future[Rollout]:
        """One rollout started: on its purpose's own pool, or re-issued past a straggler, or plain."""
        args = (roll_out, self._run, self._reward, rendered, task, self._timeout)
        then = functools.partial(self._counted, key, purpose)
        own = self._pools.get(purpose)
        if own is not None:
            return own.submit(*args, then=then)
        if self._hedger is None:
            return self._pool.submit(*args, then=then)
        return self._hedger.submit(task.id, *args, then=then)

    def _returned(self, future: Future[Rollout]) -> None:
        """A rollout is back; one that ended in an exception (a cancelled run's) stays pending, and
        one the budget refused never started: it is neither in flight nor cached. One that failed
        with an error has no reward to know (`_failed`)."""
        refused = not future.cancelled() and isinstance(future.exception(), BudgetSpent)
        if future.cancelled() or refused or future.exception() is None:
            with self._lock:
                pending = self._pending.pop(future, None)
                if pending is None:
                    return
                key, _, task_id, _ = pending
                if refused and self._cache.get(key, {}).get(task_id) is future:
                    del self._cache[key][task_id]
                elif not future.cancelled() and future.result().error is None:
                    rollout = future.result()
                    self._rewards.setdefault(key, {})[rollout.task.id] = rollout.reward

    def in_flight(self) -> ResumeQueue:
        """The rollouts started and not back (or lost with a cancelled run), for the resume queue."""
        with self._lock:
            pending = list(self._pending.values())
        queue = ResumeQueue()
        for key, state, task_id, purpose in pending:
            queue.states.setdefault(key, dict(state))
            queue.rollouts.append((key, task_id, purpose))
        return queue

    def run_queue(self, queue: ResumeQueue, tasks: Mapping[str, Task], *, unseen: bool = False) -> int:
        """Run what a stopped process left in flight, first; how many rollouts that was. `unseen`:
        it was in flight in a round that process did not finish (see `preload`)."""
        jobs: dict[tuple[str, str], list[Task]] = {}
        for key, task_id, purpose in queue.rollouts:
            if key in queue.states and task_id in tasks:
                jobs.setdefault((key, purpose), []).append(tasks[task_id])
        before = self.usage.rollouts
        try:
            for (key, purpose), ts in jobs.items():
                with self._lock:  # run, not asked for: what was unseen stays so
                    hidden = [t.id for t in ts if t.id not in self._cache.get(key, {}) or t.id in self._unseen.get(key, ())]
                self.score([(queue.states[key], ts)], purpose)
                if unseen:
                    with self._lock:
                        self._unseen.setdefault(key, set()).update(hidden)
        finally:  # those that ran before a spent budget stopped the rest count too
            count = self.usage.rollouts - before
            self.usage.add(resumed=count)
        return count

    def _counted(self, key: str, purpose: str, rollout: Rollout) -> Rollout:
        journal = self._journal
        self.usage.count_rollout(rollout, purpose, None if journal is None else lambda r: journal(key, r))
        return rollout


def _scored(future: Future[Rollout]) -> float | None:
    """The reward `future` is back with, or None: not back, cancelled, or a rollout that failed with an error."""
    if not future.done() or future.cancelled() or future.exception() is not None or future.result().error is not None:
        return None
    return future.result().reward


def _failed(future: Future[Rollout]) -> bool:
    """Whether `future` is back with a rollout that failed with an error: its place in the cache is
    taken by the next rollout of its state and task."""
    return future.done() and not future.cancelled() and future.exception() is None and future.result().error is not None

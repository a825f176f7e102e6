"""Scoring an artifact on tasks: `run` then `reward`, in parallel, cached, counted.

The cache key is (hash of the state, task id): within a run an identical rollout is never
repeated, so head is scored once per step however many candidates are compared against it, and
held-out evaluation reuses what acceptance already paid for. A rollout whose `run` raises is
data (reward 0, the error kept); a `reward` that returns something outside [0, 1] is the
caller's bug and stops the run with a `UserError`.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Protocol

from agentdescent.agents.base import ModelUsage
from agentdescent.artifacts.state import state_hash
from agentdescent.artifacts.strategies import Strategy
from agentdescent.engine.executors import Executor
from agentdescent.errors import AgentError, UserError
from agentdescent.step.stats import mean_reward
from agentdescent.types import Rollout, Task


class RunFn(Protocol):
    def __call__(self, rendered: Any, task: Task) -> str:
        """Solve `task` with the rendered artifact; return the output to be scored."""


class RewardFn(Protocol):
    def __call__(self, task: Task, output: str) -> float:
        """Score `output` for `task` in [0, 1]."""


@dataclass
class Usage:
    """What a run spent. `model` collects every call made through AgentDescent's model and agent
    clients during the run (judges and reflectors included); `calls` is what `max_calls` limits."""

    rollouts: int = 0
    proposals: int = 0
    failures: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    errors: list[str] = field(default_factory=list)
    model: ModelUsage = field(default_factory=ModelUsage)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def calls(self) -> int:
        """Model calls when the run's callables use metered clients; else one per rollout and
        per proposal (plain functions report nothing, so each counts as one call)."""
        return max(self.rollouts + self.proposals, self.model.calls)

    @property
    def tokens(self) -> int:
        return self.model.tokens

    def add(self, **counts: int) -> None:
        with self._lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def record_error(self, message: str) -> None:
        with self._lock:
            self.failures += 1
            if len(self.errors) < 20:
                self.errors.append(message)


def check_reward(value: object, task: Task) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(
            f"reward returned {value!r} ({type(value).__name__}) for task {task.id!r}; "
            "it must return a number in [0, 1]"
        )
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise UserError(f"reward returned {value} for task {task.id!r}; it must be in [0, 1] (scale or clip it)")
    return float(value)


class Evaluator:
    """Runs and scores states on tasks through a call pool, sharing one cache."""

    def __init__(
        self, *, strategy: Strategy, run: RunFn, reward: RewardFn, pool: Executor, usage: Usage
    ) -> None:
        self._strategy = strategy
        self._run = run
        self._reward = reward
        self._pool = pool
        self.usage = usage
        self._cache: dict[str, dict[str, Future[Rollout]]] = {}  # state hash -> task id -> rollout
        self._lock = threading.Lock()

    def rollouts(self, state: Mapping[str, str], tasks: Sequence[Task]) -> list[Rollout]:
        return self.many([state], tasks)[0]

    def rewards(self, states: Sequence[Mapping[str, str]], tasks: Sequence[Task]) -> list[list[float]]:
        return self.score([(state, tasks) for state in states])

    def score(self, jobs: Sequence[tuple[Mapping[str, str], Sequence[Task]]]) -> list[list[float]]:
        """Each state on its own tasks, all in flight at once; one row of rewards per job."""
        rows = [self._submit_row(state, tasks) for state, tasks in jobs]
        return [[f.result().reward for f in row] for row in rows]

    def mean(self, state: Mapping[str, str], tasks: Sequence[Task]) -> float:
        return mean_reward(self.score([(state, tasks)])[0])

    def many(self, states: Sequence[Mapping[str, str]], tasks: Sequence[Task]) -> list[list[Rollout]]:
        """Every state on every task, all in flight at once; rows follow `states`."""
        return [[f.result() for f in row] for row in self.submit(states, tasks)]

    def submit(self, states: Sequence[Mapping[str, str]], tasks: Sequence[Task]) -> list[list[Future[Rollout]]]:
        """Start every state on every task (cached ones are not re-run) without waiting."""
        return [self._submit_row(state, tasks) for state in states]

    def known(self, state: Mapping[str, str]) -> dict[str, float]:
        """The rewards of `state` measured so far, by task id, without running anything."""
        with self._lock:
            futures = dict(self._cache.get(state_hash(state), {}))
        return {task_id: f.result().reward for task_id, f in futures.items() if f.done() and not f.exception()}

    def _submit_row(self, state: Mapping[str, str], tasks: Sequence[Task]) -> list[Future[Rollout]]:
        key, rendered = state_hash(state), None
        futures, hits = [], 0
        with self._lock:
            row = self._cache.setdefault(key, {})
            for task in tasks:
                future = row.get(task.id)
                if future is None:
                    if rendered is None:  # once per state, and only when something is to be run
                        rendered = self._strategy.render(state)
                    future = row[task.id] = self._pool.submit(self._rollout, rendered, task)
                else:
                    hits += 1
                futures.append(future)
        if hits:
            self.usage.add(cache_hits=hits)
        return futures

    def _rollout(self, rendered: Any, task: Task) -> Rollout:
        self.usage.add(rollouts=1, cache_misses=1)
        try:  # a tree is handed over as a copy, so that one rollout cannot change another's
            output = self._run(dict(rendered) if isinstance(rendered, dict) else rendered, task)
        except UserError:
            raise  # misconfiguration (a missing key, say) fails every rollout alike: stop and say so
        except Exception as exc:  # a failing rollout is data, not a crash of the run
            return self._failed(task, "", f"run failed on task {task.id!r}: {type(exc).__name__}: {exc}")
        output = output if isinstance(output, str) else str(output)
        try:
            value = self._reward(task, output)
        except AgentError as exc:  # a judge or grader that could not score is a failed rollout too
            return self._failed(task, output, f"scoring failed on task {task.id!r}: {exc}")
        return Rollout(task=task, output=output, reward=check_reward(value, task))

    def _failed(self, task: Task, output: str, message: str) -> Rollout:
        self.usage.record_error(message)
        return Rollout(task=task, output=output, reward=0.0, error=message)

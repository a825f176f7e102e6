"""The parallel methods of a run (`evolve(parallel=...)`): how the workers divide the work.

- `DataParallel` ("dp", the default): every worker may change every key, each on its own tasks;
  the aggregator resolves the diffs that overlap.
- `TensorParallel` ("tp"): the artifact's keys are dealt out, one shard per worker, so that two
  workers' diffs cannot touch the same key; each task goes to the shard that can fix it
  (`route`, or learned as the run goes: `engine.sharding`).
- `PipelineParallel` ("pp"): a worker turn's rollouts, reflections and verification run as three
  stages, each on a pool of its own, and the next turn's rollouts start as soon as the last
  one's leave the first stage, so a slow reflection never idles the rollout pool
  (`engine.pipeline`).

What it leaves out: how each method runs (those modules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from agentdescent.errors import UserError
from agentdescent.types import Task

RouteFn = Callable[[Task], "str | None"]  # the key that can fix a task, or None when it is not known


@dataclass(frozen=True)
class DataParallel:
    """Every worker may change every key, each on its own tasks."""

    name = "dp"


@dataclass(frozen=True)
class TensorParallel:
    """`route(task)` names the key that can fix a task (one of the strategy's `key_space`), or
    None; without it, routes are learned from which keys fixed which tasks."""

    route: RouteFn | None = None
    name = "tp"


@dataclass(frozen=True)
class PipelineParallel:
    """Calls in flight per stage (None: the run's `max_concurrency` for rollouts and verification,
    one per worker for reflections), and `depth`: the turns a worker may have out at once in an
    asynchronous run (2: one rolling out, one being reflected on or verified). Deeper runs further
    ahead of the aggregator: the stages stay busier, but more diffs are made on an older snapshot
    and more of them are duplicates, so the calls to the target grow (`bench/async_scaling.py`)."""

    rollouts: int | None = None
    reflections: int | None = None
    verification: int | None = None
    depth: int = 2
    name = "pp"


ParallelMethod = DataParallel | TensorParallel | PipelineParallel
METHODS: dict[str, type[ParallelMethod]] = {"dp": DataParallel, "tp": TensorParallel, "pp": PipelineParallel}


def parallel_method(value: str | ParallelMethod) -> ParallelMethod:
    """The method `value` names ("dp", "tp", "pp") or is; a `UserError` for anything else."""
    if isinstance(value, (DataParallel, TensorParallel, PipelineParallel)):
        if isinstance(value, PipelineParallel):
            for stage in ("rollouts", "reflections", "verification"):
                size = getattr(value, stage)
                if size is not None and (not isinstance(size, int) or size < 1):
                    raise UserError(f"PipelineParallel({stage}=...) must be a positive integer or None; got {size!r}")
            if isinstance(value.depth, bool) or not isinstance(value.depth, int) or value.depth < 1:
                raise UserError(f"PipelineParallel(depth=...) is the turns a worker may have out at once, a "
                                f"positive integer (2 by default); got {value.depth!r}")
        if isinstance(value, TensorParallel) and value.route is not None and not callable(value.route):
            raise UserError(f"TensorParallel(route=...) must be a callable (task -> key or None); "
                            f"got {type(value.route).__name__}")
        return value
    if isinstance(value, str) and value in METHODS:
        return METHODS[value]()
    raise UserError(f"parallel={value!r} is not available; choose one of {', '.join(METHODS)} "
                    "(or TensorParallel(route=...), PipelineParallel(...))")

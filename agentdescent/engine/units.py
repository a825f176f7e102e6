"""The units of work that may run away from the driver: one rollout, one reflection.

Each takes plain data and the user's callables, counts the model calls made while it runs on a
meter of its own, and returns a plain record with what they spent. So usage travels back with the
result, from a thread, a process or another machine alike, and nothing here holds a lock, a cache
or a future. What they leave out: caching results and adding up usage, which the driver does
where the results arrive (`Evaluator`, `Worker`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from agentdescent.agents.base import ModelUsage, metering
from agentdescent.artifacts.strategies import InvalidProposal
from agentdescent.errors import AgentError, UserError
from agentdescent.types import Rollout, Spend, Task


def roll_out(run: Callable[[Any, Task], str], reward: Callable[[Task, str], float], rendered: Any,
             task: Task) -> Rollout:
    """Run `task` on the rendered artifact and score it. A `run` that raises, or a judge that
    cannot score, is a failed rollout (reward 0, the error kept); a `UserError` (misconfiguration)
    and a reward outside [0, 1] (the caller's bug) are raised."""
    with metering(ModelUsage()) as meter:
        output, value, error = _roll_out(run, reward, rendered, task)
    return Rollout(task=task, output=output, reward=value, error=error, spend=meter.spent())


def _roll_out(run: Callable[[Any, Task], str], reward: Callable[[Task, str], float], rendered: Any,
              task: Task) -> tuple[str, float, str | None]:
    """(output, reward, why it failed)."""
    try:  # a tree is handed over as a copy, so that one rollout cannot change another's
        output = run(dict(rendered) if isinstance(rendered, dict) else rendered, task)
    except UserError:
        raise  # misconfiguration (a missing key, say) fails every rollout alike: stop and say so
    except Exception as exc:  # a failing rollout is data, not a crash of the run
        return "", 0.0, f"run failed on task {task.id!r}: {type(exc).__name__}: {exc}"
    output = output if isinstance(output, str) else str(output)
    try:
        value = reward(task, output)
    except AgentError as exc:  # a judge or grader that could not score is a failed rollout too
        return output, 0.0, f"scoring failed on task {task.id!r}: {exc}"
    return output, check_reward(value, task), None


def check_reward(value: object, task: Task) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(
            f"reward returned {value!r} ({type(value).__name__}) for task {task.id!r}; "
            "it must return a number in [0, 1]"
        )
    if math.isnan(value) or not 0.0 <= value <= 1.0:
        raise UserError(f"reward returned {value} for task {task.id!r}; it must be in [0, 1] (scale or clip it)")
    return float(value)


class Reflection(BaseModel):
    """What one call of `propose` gave: a proposal (None for none), or why it gave none."""

    model_config = ConfigDict(frozen=True)

    proposal: str | None = None
    failed: Literal["invalid", "error"] | None = None
    reason: str = ""
    spend: Spend = Field(default_factory=Spend)


def reflect(propose: Callable[..., str | None], rendered: Any, chosen: Sequence[Rollout]) -> Reflection:
    """One proposal from one failure, or from all of `chosen` when `propose` has a callable
    `batch(rendered, rollouts)`. A proposal that is not a str (or None) is the caller's bug and
    raises `UserError`, as does a `UserError` from `propose`; anything else it raises is recorded."""
    with metering(ModelUsage()) as meter:
        reflection = _reflect(propose, rendered, chosen)
    return reflection.model_copy(update={"spend": meter.spent()})


def _reflect(propose: Callable[..., str | None], rendered: Any, chosen: Sequence[Rollout]) -> Reflection:
    batch = getattr(propose, "batch", None)
    try:
        if callable(batch):
            proposal = batch(rendered, list(chosen))
        else:
            (rollout,) = chosen
            proposal = propose(rendered, rollout.task, rollout.output, rollout.reward)
    except UserError:
        raise  # misconfiguration: every proposal would fail alike
    except InvalidProposal as exc:
        return Reflection(failed="invalid", reason=f"the proposal is unusable: {exc}")
    except Exception as exc:  # one failed reflection is an outcome, not the end of the run
        return Reflection(failed="error", reason=f"propose raised {type(exc).__name__}: {exc}")
    if proposal is not None and not isinstance(proposal, str):
        raise UserError(
            f"propose returned {type(proposal).__name__} for task {chosen[0].task.id!r}; "
            "it must return a str (the proposed change) or None (no proposal)"
        )
    return Reflection(proposal=proposal)

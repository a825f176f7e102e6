"""The call pools a run can have, by name: `make_executor("thread" | "process" | "ray", ...)`.

Threads are the default; the process and Ray executors are imported only when asked for (Ray is
an optional dependency). Left out: what an executor is (`executors.Executor`) and how each works.
"""

from __future__ import annotations

from collections.abc import Callable

from agentdescent.engine.calls.executors import Executor, ThreadExecutor
from agentdescent.errors import UserError

EXECUTORS = ("thread", "process", "ray")


def make_executor(kind: str, max_workers: int, *, name: str, on_start: Callable[[], None] | None = None) -> Executor:
    """The call pool `kind` names (`EXECUTORS`), with `on_start` called as each call starts."""
    if kind == "thread":
        return ThreadExecutor(max_workers, name=name, on_start=on_start)
    if kind == "process":
        from agentdescent.engine.calls.processes import ProcessExecutor
        return ProcessExecutor(max_workers, name=name, on_start=on_start)
    if kind == "ray":
        from agentdescent.engine.calls.ray_executor import RayExecutor
        return RayExecutor(max_workers, name=name, on_start=on_start)
    raise UserError(f"executor={kind!r} is not available; choose one of {', '.join(EXECUTORS)}")

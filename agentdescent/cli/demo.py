"""`agentdescent demo`'s run: the reference domain (`agentdescent.testing`) evolved as one call.

What it leaves out: the domain itself (the router, its tasks and its reflector live in
`agentdescent.testing`) and what the command prints (`cli.main`, `cli.report`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

# The domain's names stay importable from here for one release, for code written against this
# module; new code imports them from agentdescent.testing.
from agentdescent.testing.router import (
    DEFAULT_HANDLER,
    FILLERS,
    SIGNALS,
    STRATEGIES,
    TEMPLATES,
    RouterReflector,
    RouterReflectorModel,
    demo_strategy,
    route,
    route_prompt,
    route_reward,
    router_tasks,
    routing_rules,
    rule_text,
)

if TYPE_CHECKING:
    from agentdescent.result import EvolveResult

__all__ = [
    "DEFAULT_HANDLER", "FILLERS", "SIGNALS", "STRATEGIES", "TEMPLATES", "RouterReflector", "RouterReflectorModel",
    "demo_strategy", "route", "route_prompt", "route_reward", "router_tasks", "routing_rules", "rule_text",
    "run_reference",
]


def run_reference(
    *, n_workers: int = 8, strategy: str = "append", seed: int = 0, rounds: int = 30, signals: int = 4,
    store: str | None = None, on_event: Callable[[Any], None] | None = None, **options: Any,
) -> EvolveResult:
    """The whole demo as one call: the router tasks, the agent, the reflector, evolve()."""
    from agentdescent.engine.evolve import evolve  # here: the domain's helpers alone do not need the engine

    return evolve(
        router_tasks(seed, signals), route_reward, run=route, propose=RouterReflector(strategy, seed=seed),
        strategy=demo_strategy(strategy), rounds=rounds, n_workers=n_workers, seed=seed,
        target_reward=1.0, store=store, on_event=on_event, **options,
    )

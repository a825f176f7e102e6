"""Reference domains and stand-ins that the demo, the tests, the benchmarks and the docs share.

    from agentdescent.testing import RouterReflector, route, route_reward, router_tasks

    result = evolve(router_tasks(0), route_reward, run=route, propose=RouterReflector())

`router` is the reference domain: a keyword-router skill with a scripted, sometimes misleading
reflector, deterministic for a seed, so that a whole run needs no model and no key. It is what
`agentdescent demo` evolves, what the benchmarks measure and what the docs' examples run.
`skill_router` holds the stand-ins of a folder run: the support-router skill's offline agent and
reflector, which the example spec names (`python:agentdescent.testing:route_by_skill`).

What it leaves out: running a domain (call `evolve`; the demo's own run and report are in
`agentdescent.cli.demo`), a scripted model (`agentdescent.agents.scripted`), and fixtures that
only the test suite needs (tests/doubles.py). Importing it imports neither the engine, nor a
client, nor git: a worker process or a Ray actor that unpickles `route` stays light.
"""

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
from agentdescent.testing.skill_router import (
    SKILL_NAME,
    TEAMS,
    RoutingTruth,
    SkillReflector,
    listed_words,
    route_by_skill,
    routing_truth,
    sampled,
)

__all__ = [
    "DEFAULT_HANDLER", "FILLERS", "SIGNALS", "SKILL_NAME", "STRATEGIES", "TEAMS", "TEMPLATES", "RouterReflector",
    "RouterReflectorModel", "RoutingTruth", "SkillReflector", "demo_strategy", "listed_words", "route", "route_by_skill",
    "route_prompt", "route_reward", "router_tasks", "routing_rules", "routing_truth", "rule_text", "sampled",
]

"""The oracle of bench/noisy_gate.py: the calls an ideal gate that knows which proposals are right
would still pay on the noisy reference domain (agentdescent/testing/noisy.py).

It measures head on the held-out tasks (one rollout each), then goes through the train tasks in
rounds, in a seeded random order each round, rolling each out on the current playbook (one call).
On a failure, as the grader reports it, it reflects (one call) unless the reflection would repeat
a proposal already judged: it pays one reflection per distinct proposal. A right rule is committed
at once and for free, a vague or harmful one, or another wording of a rule it holds, dropped for free. It stops once every category's
right rule is in the playbook (or after `rounds` passes over the train tasks) and measures the
result on the held-out tasks again (one rollout each).

What makes it a bound and not a system: the judging is free, and so is the repeat. To know that a
reflection would repeat, it asks the domain's reflector anyway (the draw is the domain's own, from
a fresh `NoisyDomain` of the same seed) and charges the call only when the proposal is new. No
real system can peek at a proposal without paying for it, nor judge one without rolling it out.
"""

from __future__ import annotations

import random
import time

from agentdescent import AppendRules
from agentdescent.artifacts.strategies import rule_key
from agentdescent.testing.noisy import NoisyDomain, NoisyLevels, right_category
from agentdescent.types import Task


def oracle_run(levels: NoisyLevels, seed: int, train: list[Task], held_out: list[Task], rounds: int) -> dict:
    """One oracle run; the same record `bench/noisy_gate.py` keeps for every system."""
    start = time.perf_counter()
    domain, strategy = NoisyDomain(levels, seed=seed), AppendRules()
    state: dict[str, str] = {}
    rollouts = reflections = 0
    judged: set[str] = set()
    learnt: set[int] = set()

    def measure() -> float:
        nonlocal rollouts
        rendered = strategy.render(state)
        rollouts += len(held_out)
        return sum(domain.reward(t, domain.run(rendered, t)) for t in held_out) / len(held_out)

    initial = measure()
    rng = random.Random(f"{seed}:oracle")
    for _ in range(rounds):
        if len(learnt) == levels.categories:
            break
        order = list(train)
        rng.shuffle(order)
        for task in order:
            rendered = strategy.render(state)
            output = domain.run(rendered, task)
            rollouts += 1
            reward = domain.reward(task, output)
            if reward >= 1.0:
                continue
            proposal = domain.propose(rendered, task, output, reward)  # the peek: drawn, charged only when new
            if proposal is None or proposal in judged:
                continue
            judged.add(proposal)
            reflections += 1
            category = right_category(proposal)
            if category is not None and category not in learnt:
                state[rule_key(proposal)] = proposal
                learnt.add(category)
                if len(learnt) == levels.categories:
                    break
    final = measure()
    truth = domain.truth(state)
    return {"calls": rollouts + reflections, "rollouts": rollouts, "reflections": reflections,
            "learnt": truth.learnt, "harmful": truth.harmful, "vague": truth.vague, "restated": truth.restated,
            "expected": domain.expected(state, held_out), "measured": (initial, final),
            "seconds": time.perf_counter() - start, "duplicates": None}

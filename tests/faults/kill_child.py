"""A long run on a given store, for the kill test: the reference domain, every rollout a little slow.
It prints one line, "started", at the run's first event: the ledger exists from then on.

Usage: python kill_child.py STORE SEED
"""

from __future__ import annotations

import sys
import time

from agentdescent import evolve
from agentdescent.testing import RouterReflector, demo_strategy, route, route_reward, router_tasks


def slow_route(rendered, task):
    time.sleep(0.02)
    return route(rendered, task)


def announce_start(event) -> None:
    if type(event).__name__ == "RunStarted":
        print("started", flush=True)


def main() -> None:
    store, seed = sys.argv[1], int(sys.argv[2])
    evolve(router_tasks(seed, signals=12, per_signal=8), route_reward, run=slow_route,
           propose=RouterReflector("append", seed=seed), strategy=demo_strategy("append"), rounds=200,
           n_workers=4, seed=seed, store=store, on_event=announce_start)  # no target: it runs until it is killed


if __name__ == "__main__":
    main()

"""Merge vs fork at an equal rollout budget, on the reference domain.

Merge: N workers propose into one ledger, and one aggregator merges their diffs every round.
Fork:  N independent serial runs (one worker each, a budget of 1/N each, run side by side),
       and the best held-out result is picked at the end.

Both spend the same number of calls. Printed: held-out reward, calls and wall time of each.

Run from the repository root: python -m examples.run_demo [--workers 8] [--budget 1600] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from agentdescent import Budget, evolve
from agentdescent.cli.guard import script
from agentdescent.testing import RouterReflector, demo_strategy, route, route_reward, router_tasks


def latency(ms: float):
    """A solver that takes as long as a model call would."""

    def slow_route(rendered, task):
        time.sleep(ms / 1000)
        return route(rendered, task)

    return slow_route


def merged(seed: int, workers: int, budget: int, ms: float):
    return evolve(
        router_tasks(seed), route_reward, run=latency(ms), propose=RouterReflector(seed=seed),
        strategy=demo_strategy("append"), rounds=1000, n_workers=workers, budget=Budget(max_calls=budget),
        target_reward=1.0, seed=seed,
    )


def forked(seed: int, workers: int, budget: int, ms: float):
    def one(fork: int):
        return evolve(
            router_tasks(seed), route_reward, run=latency(ms), propose=RouterReflector(seed=seed * 100 + fork),
            strategy=demo_strategy("append"), rounds=1000, n_workers=1, budget=Budget(max_calls=budget // workers),
            target_reward=1.0, seed=seed,  # the same split, so held-out rewards compare
        )

    with ThreadPoolExecutor(workers) as pool:
        forks = list(pool.map(one, range(workers)))
    return max(forks, key=lambda r: r.final_reward), sum(r.usage.calls for r in forks)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--budget", type=int, default=1600, help="calls for each side (rollouts + proposals)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--latency-ms", type=float, default=5, help="injected time per rollout")
    args = parser.parse_args()
    print(f"{'seed':>4}  {'merge: held-out':>15} {'calls':>6} {'time':>7}   {'fork: best held-out':>19} {'calls':>6} {'time':>7}")
    for seed in args.seeds:
        start = time.perf_counter()
        m = merged(seed, args.workers, args.budget, args.latency_ms)
        merge_time = time.perf_counter() - start
        start = time.perf_counter()
        best, fork_calls = forked(seed, args.workers, args.budget, args.latency_ms)
        fork_time = time.perf_counter() - start
        print(f"{seed:>4}  {m.final_reward:>15.3f} {m.usage.calls:>6} {merge_time:>6.2f}s   "
              f"{best.final_reward:>19.3f} {fork_calls:>6} {fork_time:>6.2f}s")
    print(f"(held-out starts at {m.initial_reward:.3f}; {args.workers} workers; budget {args.budget} calls a side)")


if __name__ == "__main__":
    script(main)  # an error is one line with its fix (--debug: the traceback)

"""Synchronous vs asynchronous under heavy-tailed latency, on the reference domain.

Every rollout sleeps a lognormal time whose median is 20 ms and every proposal one of median
40 ms (σ = 1: one call in ten takes 3.6× the median, one in a hundred 10×), as real model calls
do. A synchronous round waits for its slowest worker; an asynchronous run steps on whatever has
come back. Both run 8 workers to held-out 1.0. Printed for each seed: wall time, final reward,
calls, steps, and the re-issued stragglers; then the median time ratio.

Run from the repository root: python -m examples.run_async [--workers 8] [--seeds 0 1 2] [--sigma 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import threading
import time

from agentdescent import Parallelism, evolve
from agentdescent.cli.guard import script
from agentdescent.testing import RouterReflector, demo_strategy, route, route_reward, router_tasks


def lognormal(seed: int, sigma: float):
    """Seconds to sleep for a call of median `median`: one seeded stream for the whole run."""
    rng, lock = random.Random(f"{seed}:latency"), threading.Lock()

    def draw(median: float) -> float:
        with lock:
            return median * rng.lognormvariate(0.0, sigma)

    return draw


def slow_router(seed: int, sigma: float):
    """The demo's agent and reflector, each call taking a lognormal time of median 20 and 40 ms."""
    sleep = lognormal(seed, sigma)
    reflector = RouterReflector("append", seed=seed)

    def run(rendered, task):
        time.sleep(sleep(0.02))
        return route(rendered, task)

    def propose(rendered, task, output, reward):
        time.sleep(sleep(0.04))
        return reflector(rendered, task, output, reward)

    return run, propose


def timed_run(seed: int, workers: int, sigma: float, asynchronous: bool, rounds: int = 400) -> dict:
    run, propose = slow_router(seed, sigma)
    start = time.perf_counter()
    result = evolve(router_tasks(seed, 12, 8), route_reward, run=run, propose=propose,
                    strategy=demo_strategy("append"), rounds=rounds, n_workers=workers, max_concurrency=1024,
                    target_reward=1.0, seed=seed, parallelism=Parallelism(asynchronous=asynchronous))
    return {"wall": time.perf_counter() - start, "reward": result.final_reward, "calls": result.usage.calls,
            "steps": len(result.history), "reissued": result.usage.reissued}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--sigma", type=float, default=1.0)
    args = parser.parse_args()
    ratios = []
    for seed in args.seeds:
        sync = timed_run(seed, args.workers, args.sigma, asynchronous=False)
        free = timed_run(seed, args.workers, args.sigma, asynchronous=True)
        ratios.append(sync["wall"] / free["wall"])
        for name, r in (("synchronous", sync), ("asynchronous", free)):
            print(f"seed {seed} {name:>12}: {r['wall']:5.2f} s, reward {r['reward']:.2f}, {r['calls']} calls, "
                  f"{r['steps']} steps, {r['reissued']} stragglers run again")
    print(f"asynchronous is {statistics.median(ratios):.2f}x as fast (median over seeds {args.seeds})")


if __name__ == "__main__":
    script(main)  # an error is one line with its fix (--debug: the traceback)

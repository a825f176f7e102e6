"""How stale may a diff be? A sweep of lag_budget × staleness policy in asynchronous runs.

The reference domain with lognormal latency (so workers fall behind head by varying amounts),
8 workers, a fixed number of aggregator steps; for each lag budget 0..8 and each policy (drop,
rebase, discount): the final held-out reward, the diffs dropped as stale, the diffs rebased past
the budget, the mean staleness of what landed, and the wall time. Printed as a table; written as
a PNG plot when matplotlib is installed (pip install matplotlib), else the table alone.

Run from the repository root: python -m examples.rq2_staleness [--budgets 0 1 2 4 8] [--seed 0] [--steps 12] [--png staleness.png]
"""

from __future__ import annotations

import argparse
import statistics
import time

from agentdescent import Parallelism, Policies, evolve
from agentdescent.cli.guard import script
from agentdescent.step.staleness import HOW, How, Staleness
from agentdescent.testing import demo_strategy, route_reward, router_tasks
from examples.run_async import slow_router


def one(seed: int, budget: int, how: How, steps: int) -> dict:
    run, propose = slow_router(seed, 1.0)
    start = time.perf_counter()
    result = evolve(router_tasks(seed, 12, 8), route_reward, run=run, propose=propose,
                    strategy=demo_strategy("append"), rounds=steps, n_workers=8, max_concurrency=1024, seed=seed,
                    parallelism=Parallelism(asynchronous=True, lag_budget=budget),
                    policies=Policies(staleness=Staleness(how)))
    decisions = [d for h in result.history for d in h.stale_decisions]
    landed = [s for h in result.history for s, o in zip(h.staleness, h.diffs)
              if any(x.diff_id == o and x.kind in ("committed", "fused") for x in result.outcome_list)]
    return {"reward": result.final_reward, "dropped": decisions.count("dropped"), "rebased": decisions.count("rebased"),
            "staleness": statistics.mean(landed) if landed else 0.0, "wall": time.perf_counter() - start}


def plot(rows: dict, budgets: list[int], path: str) -> None:
    try:
        import matplotlib
    except ImportError:
        print("(no plot: pip install matplotlib)")
        return
    matplotlib.use("Agg")
    from matplotlib import pyplot

    figure, (left, right) = pyplot.subplots(1, 2, figsize=(10, 4))
    for how in HOW:
        left.plot(budgets, [rows[(b, how)]["reward"] for b in budgets], marker="o", label=how)
        right.plot(budgets, [rows[(b, how)]["dropped"] for b in budgets], marker="o", label=how)
    left.set(xlabel="lag budget", ylabel="final held-out reward")
    right.set(xlabel="lag budget", ylabel="diffs dropped as stale")
    left.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"plot written to {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budgets", type=int, nargs="+", default=[0, 1, 2, 3, 4, 6, 8])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=12, help="aggregator steps per run")
    parser.add_argument("--png", default="staleness.png")
    args = parser.parse_args()
    rows = {}
    print("budget policy    reward dropped rebased mean-s-landed  wall")
    for budget in args.budgets:
        for how in HOW:
            r = rows[(budget, how)] = one(args.seed, budget, how, args.steps)
            print(f"{budget:6} {how:8} {r['reward']:6.3f} {r['dropped']:7} {r['rebased']:7} {r['staleness']:13.2f} "
                  f"{r['wall']:5.1f}")
    plot(rows, args.budgets, args.png)


if __name__ == "__main__":
    script(main)  # an error is one line with its fix (--debug: the traceback)

"""Speed-up of N workers over one, on the reference domain with model-like latency.

Every rollout sleeps 20 ms and every proposal 40 ms (as a fast model call would), the artifact
is an AppendRules playbook, and each configuration runs until held-out reward reaches 1.0. The
router has 12 signal words per handler here (60 rules to learn) rather than the demo's 4: with
only 20 rules a single worker needs barely more rounds than eight workers' end game takes, so
the domain, not the engine, would set the ratio (bench/speedup_bound.py gives the ratio the
domain allows). `--signals 4 --per-signal 6` measures the demo's size. Both runs get the same
call concurrency, so only the number of workers differs. Printed: wall time, rounds and calls
of each, their ratio, the rounds ratio and the round-cost ratio whose quotient it is, and the
aggregator's own time per step (admit, rebase, resolve and commit, without the acceptance
rollouts it waits on).

`--asynchronous` adds the N workers without a barrier beside the synchronous run, `--latency
lognormal` draws each call's latency from a heavy-tailed lognormal whose median is the figure
given (σ = `--sigma`), `--executor ray` adds the N workers on that executor
beside the same run on threads, and `--parallel pp` (or `tp`) the N workers with that parallel
method beside data-parallel ones (`tp` needs a strategy with keys to deal out: `--strategy keyed`).

Run: python bench/speedup.py [--workers 8] [--seeds 0 1 2] [--rollout-ms 20] [--propose-ms 40] [--acceptance-size 32]
     python bench/speedup.py --asynchronous --latency lognormal [--sigma 1] [--executor thread] [--lag-budget 3]
     python bench/speedup.py --asynchronous --parallel pp --propose-ms 200
     python bench/speedup.py --strategy keyed --parallel tp --workers 5 --signals 4 --per-signal 6
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import events, evolve  # noqa: E402
from agentdescent.config import Parallelism, Policies  # noqa: E402
from agentdescent.engine.loop.parallel import TensorParallel  # noqa: E402
from agentdescent.step.policies import BetaAcceptance  # noqa: E402
from agentdescent.testing import RouterReflector, demo_strategy, route, route_reward, router_tasks  # noqa: E402


class Latency:
    """Seconds a call sleeps: `median` each time (`sigma` 0), or drawn from a lognormal with that
    median and shape `sigma`, the heavy tail of real model calls (σ = 1: one call in ten takes
    3.6× the median, one in a hundred 10×). One seeded stream for the whole run."""

    def __init__(self, sigma: float, seed: int) -> None:
        self.sigma, self._rng, self._lock = sigma, random.Random(f"{seed}:latency"), threading.Lock()

    def __getstate__(self) -> dict:
        return {"sigma": self.sigma}

    def __setstate__(self, state: dict) -> None:
        """A copy sent to another process draws a stream of its own (not the seeded one)."""
        self.sigma, self._rng, self._lock = state["sigma"], random.Random(), threading.Lock()

    def __call__(self, median: float) -> float:
        if not self.sigma:
            return median
        with self._lock:
            return median * self._rng.lognormvariate(0.0, self.sigma)


def run_once(n_workers: int, seed: int, tasks: list, rollout_s: float, propose_s: float, concurrency: int,
             asynchronous: bool, policies: Policies, sigma: float = 0.0, executor: str = "thread",
             lag_budget: int | None = None, parallel: object = "dp", strategy: str = "append") -> dict:
    reflector = RouterReflector(strategy, seed=seed)
    latency = Latency(sigma, seed)

    def slow_route(rendered, task):
        time.sleep(latency(rollout_s))
        return route(rendered, task)

    def slow_propose(rendered, task, output, reward):
        time.sleep(latency(propose_s))
        return reflector(rendered, task, output, reward)

    marks: list[float] = []

    def on_event(event) -> None:
        if isinstance(event, (events.RoundStarted, events.RoundEnded)):
            marks.append(time.perf_counter())

    with tempfile.TemporaryDirectory(prefix="speedup-ledger-") as store:  # a ledger per run, removed after
        start = time.perf_counter()
        result = evolve(
            tasks, route_reward, run=slow_route, propose=slow_propose, strategy=demo_strategy(strategy),
            rounds=400, n_workers=n_workers, max_concurrency=concurrency, target_reward=1.0, seed=seed,
            on_event=on_event, policies=policies, store=store,
            parallelism=Parallelism(asynchronous=asynchronous, lag_budget=lag_budget, executor=executor, method=parallel),
        )
        wall = time.perf_counter() - start
    own = [h.timings["prepare"] + h.timings["commit"] for h in result.history if h.version is not None]
    durations = [end - begin for begin, end in zip(marks[::2], marks[1::2])]
    busy = [d for d, h in zip(durations, result.history) if h.diffs]
    return {
        "wall": wall, "rounds": len(result.history), "calls": result.usage.calls,
        "reward": result.final_reward, "agg_ms": 1000 * statistics.median(own) if own else 0.0,
        "busy_ms": 1000 * statistics.median(busy) if busy else 0.0, "round_ms": 1000 * statistics.mean(durations),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--signals", type=int, default=12, help="signal words per handler: rules to learn / 5")
    parser.add_argument("--per-signal", type=int, default=8, help="requests per signal word")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rollout-ms", type=float, default=20, help="a rollout's latency (the median, when lognormal)")
    parser.add_argument("--propose-ms", type=float, default=40, help="a proposal's latency (the median, when lognormal)")
    parser.add_argument("--latency", choices=("fixed", "lognormal"), default="fixed")
    parser.add_argument("--sigma", type=float, default=1.0, help="the lognormal's shape")
    parser.add_argument("--concurrency", type=int, default=1024, help="calls in flight, the same for every run")
    parser.add_argument("--asynchronous", action="store_true",
                        help="also run the N workers without a barrier, and compare with the synchronous run")
    parser.add_argument("--executor", default="thread",
                        help="also run the N workers with this executor (ray) beside the threads")
    parser.add_argument("--parallel", choices=("dp", "tp", "pp", "tp-routed"), default="dp",
                        help="also run the N workers with this parallel method beside data-parallel ones "
                             "(tp-routed: tp told each task's category)")
    parser.add_argument("--strategy", choices=("append", "keyed"), default="append", help="the artifact, every run")
    parser.add_argument("--lag-budget", type=int, default=None, help="the asynchronous run's lag budget (default: evolve's)")
    parser.add_argument("--acceptance-size", type=int, default=BetaAcceptance().size,
                        help="tasks in each round's acceptance sample, every run")
    args = parser.parse_args()
    sigma = args.sigma if args.latency == "lognormal" else 0.0
    sides = {"one": (1, False, "thread"), "sync": (args.workers, False, "thread")}
    if args.asynchronous:
        sides["async"] = (args.workers, True, "thread")
    if args.executor != "thread":  # the same N workers on the other executor, beside the threads
        sides["exec"] = (args.workers, args.asynchronous, args.executor)
    if args.parallel != "dp":
        sides["par"] = (args.workers, args.asynchronous, "thread")
    method = TensorParallel(route=_category) if args.parallel == "tp-routed" else args.parallel
    if args.executor == "ray":  # a cluster that is up already, as on a real one: evolve joins it
        import ray
        ray.init(include_dashboard=False, log_to_driver=False)
    rows = []
    for seed in args.seeds:
        tasks = router_tasks(seed, args.signals, args.per_signal)
        latency = (args.rollout_ms / 1000, args.propose_ms / 1000, args.concurrency)
        policies = Policies(acceptance=BetaAcceptance(size=args.acceptance_size))
        row = {}
        for side, (n, asynchronous, executor) in sides.items():
            extra = {"lag_budget": args.lag_budget} if asynchronous and args.lag_budget is not None else {}
            row[side] = run_once(n, seed, tasks, *latency, asynchronous=asynchronous, policies=policies, sigma=sigma,
                                 executor=executor, parallel=method if side == "par" else "dp",
                                 strategy=args.strategy, **extra)
        rows.append(row)
        print(f"seed {seed}: " + " | ".join(
            f"{_name(side, args.workers)} {r['wall']:.2f} s, {r['rounds']} rounds ({r['round_ms']:.0f} ms each), "
            f"{r['calls']} calls, reward {r['reward']:.2f}" for side, r in row.items()))
    _ratio(rows, "sync", "one", f"speed-up to held-out 1.0, {args.workers} workers vs 1", args.seeds)
    if args.asynchronous:
        _ratio(rows, "async", "one", f"speed-up to held-out 1.0, {args.workers} asynchronous workers vs 1", args.seeds)
        _ratio(rows, "async", "sync", f"asynchronous vs synchronous, {args.workers} workers", args.seeds)
    if "exec" in sides:
        base = "async" if args.asynchronous else "sync"
        _ratio(rows, "exec", base, f"executor {args.executor} vs threads, {args.workers} workers", args.seeds)
    if "par" in sides:
        base = "async" if args.asynchronous else "sync"
        _ratio(rows, "par", base, f"parallel={args.parallel} vs dp, {args.workers} workers", args.seeds)
        if args.asynchronous:
            _ratio(rows, "par", "sync", f"asynchronous parallel={args.parallel} vs synchronous dp, {args.workers} workers",
                   args.seeds)
    rounds = [r["one"]["rounds"] / r["sync"]["rounds"] for r in rows]
    busy = [r["sync"]["busy_ms"] / r["one"]["busy_ms"] for r in rows]
    mean_round = [r["sync"]["round_ms"] / r["one"]["round_ms"] for r in rows]
    agg = [side["agg_ms"] for r in rows for side in r.values()]
    print(f"rounds to held-out 1.0, 1 worker / {args.workers} workers: median {statistics.median(rounds):.1f}x")
    print(f"a round with proposals, {args.workers} workers / 1 worker: median {statistics.median(busy):.2f}x the time")
    print(f"a round on average (rounds without a commit skip validation and are cheaper), {args.workers} workers / 1 "
          f"worker: median {statistics.median(mean_round):.2f}x the time; speed-up = rounds ratio / this")
    print(f"aggregator's own time per committed step (median over runs): {statistics.median(agg):.1f} ms")
    print(f"load average over the last 1 / 5 / 15 minutes: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores (more than the cores: the times above shared the machine)")


def _name(side: str, workers: int) -> str:
    return {"one": "1 worker", "sync": f"{workers} workers", "async": f"{workers} asynchronous",
            "exec": f"{workers} on the other executor", "par": f"{workers} with the other parallel method"}[side]


def _category(task) -> str | None:
    """tp-routed: the key that fixes a request is its handler's (KeyedRules' category)."""
    return task.gold if task.gold != "general" else None


def _ratio(rows: list[dict], fast: str, slow: str, what: str, seeds: list[int]) -> None:
    """Print the median time ratio slow/fast over the seeds, with the calls ratio beside it."""
    speed = [r[slow]["wall"] / r[fast]["wall"] for r in rows]
    calls = [r[fast]["calls"] / r[slow]["calls"] for r in rows]
    print(f"{what}: median {statistics.median(speed):.2f}x (min {min(speed):.2f}x, max {max(speed):.2f}x) over seeds "
          f"{seeds}; calls {statistics.median(calls):.2f}x")


if __name__ == "__main__":
    main()

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

Run: python bench/speedup.py [--workers 8] [--seeds 0 1 2] [--rollout-ms 20] [--propose-ms 40] [--acceptance-size 32]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import events, evolve  # noqa: E402
from agentdescent.cli.demo import RouterReflector, demo_strategy, route, route_reward, router_tasks  # noqa: E402
from agentdescent.step.policies import BetaAcceptance, Policies  # noqa: E402


def run_once(n_workers: int, seed: int, tasks: list, rollout_s: float, propose_s: float, concurrency: int,
             asynchronous: bool, policies: Policies) -> dict:
    reflector = RouterReflector("append", seed=seed)

    def slow_route(rendered, task):
        time.sleep(rollout_s)
        return route(rendered, task)

    def slow_propose(rendered, task, output, reward):
        time.sleep(propose_s)
        return reflector(rendered, task, output, reward)

    marks: list[float] = []

    def on_event(event) -> None:
        if isinstance(event, (events.RoundStarted, events.RoundEnded)):
            marks.append(time.perf_counter())

    with tempfile.TemporaryDirectory(prefix="speedup-ledger-") as store:  # a ledger per run, removed after
        start = time.perf_counter()
        result = evolve(
            tasks, route_reward, run=slow_route, propose=slow_propose, strategy=demo_strategy("append"),
            rounds=400, n_workers=n_workers, max_concurrency=concurrency, target_reward=1.0, seed=seed,
            asynchronous=asynchronous, on_event=on_event, policies=policies, store=store,
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
    parser.add_argument("--rollout-ms", type=float, default=20)
    parser.add_argument("--propose-ms", type=float, default=40)
    parser.add_argument("--concurrency", type=int, default=1024, help="calls in flight, the same for both runs")
    parser.add_argument("--asynchronous", action="store_true", help="run the N-worker side without a barrier")
    parser.add_argument("--acceptance-size", type=int, default=BetaAcceptance().size,
                        help="tasks in each round's acceptance sample, both sides")
    args = parser.parse_args()
    rows = []
    for seed in args.seeds:
        tasks = router_tasks(seed, args.signals, args.per_signal)
        latency = (args.rollout_ms / 1000, args.propose_ms / 1000, args.concurrency)
        policies = Policies(acceptance=BetaAcceptance(size=args.acceptance_size))
        one = run_once(1, seed, tasks, *latency, asynchronous=False, policies=policies)
        many = run_once(args.workers, seed, tasks, *latency, asynchronous=args.asynchronous, policies=policies)
        rows.append((seed, one, many))
        print(
            f"seed {seed}: 1 worker {one['wall']:.2f} s, {one['rounds']} rounds ({one['round_ms']:.0f} ms each),"
            f" {one['calls']} calls, reward {one['reward']:.2f}"
            f" | {args.workers} workers {many['wall']:.2f} s, {many['rounds']} rounds ({many['round_ms']:.0f} ms each),"
            f" {many['calls']} calls,"
            f" reward {many['reward']:.2f} | speed-up {one['wall'] / many['wall']:.1f}x,"
            f" calls ratio {many['calls'] / one['calls']:.2f}"
        )
    speedups = [one["wall"] / many["wall"] for _, one, many in rows]
    busy = [many["busy_ms"] / one["busy_ms"] for _, one, many in rows]
    mean_round = [many["round_ms"] / one["round_ms"] for _, one, many in rows]
    rounds = [one["rounds"] / many["rounds"] for _, one, many in rows]
    agg = [r["agg_ms"] for _, one, many in rows for r in (one, many)]
    print(f"speed-up to held-out 1.0, {args.workers} workers vs 1: median {statistics.median(speedups):.1f}x "
          f"(min {min(speedups):.1f}x, max {max(speedups):.1f}x) over seeds {args.seeds}")
    print(f"rounds to held-out 1.0, 1 worker / {args.workers} workers: median {statistics.median(rounds):.1f}x")
    print(f"a round with proposals, {args.workers} workers / 1 worker: median {statistics.median(busy):.2f}x the time")
    print(f"a round on average (rounds without a commit skip validation and are cheaper), {args.workers} workers / 1 "
          f"worker: median {statistics.median(mean_round):.2f}x the time; speed-up = rounds ratio / this")
    print(f"aggregator's own time per committed step (median over runs): {statistics.median(agg):.1f} ms")


if __name__ == "__main__":
    main()

"""Where the calls go: the bill of a run to held-out 1.0, split by what each call was for.

The reference domain of bench/speedup.py (60 rules to learn, every rollout sleeping 20 ms and
every proposal 40 ms), run until held-out reward 1.0 for each number of workers and each share
of harmful proposals (`--harm`: how often the demo reflector proposes a rule keyed on a filler
word, which fixes its own request and misroutes others; the demo's own share is 0.25). Printed
for each run: rounds, seconds (and the gate's share of them), calls split into train rollouts (minibatches and scouting),
verification, acceptance (the gate: evidence, probes, bisection), validation (held-out) and
proposals; the final held-out reward; rules committed, harmful rules that landed on the way (a
later round removed them) and harmful rules in the result; the
acceptance calls per committed rule, which is the gate's cost as the number of workers grows;
and the culprits the bisection found, with the broken probes each was charged with (traced one
at a time, a culprit is charged only with the probes it was traced on).

Run: python bench/gate_cost.py [--workers 1 8] [--harm 0.25] [--seeds 0 1 2]
     python bench/gate_cost.py --workers 1 2 4 8 16 --seeds 0 1 2   # the gate's cost against N
     python bench/gate_cost.py --workers 8 --harm 0 0.5 --seeds 0 1 2 3 4 5 6 7 8 9
     python bench/gate_cost.py --workers 8 --harm 0.3 --confidence 0.95   # a stricter gate
     python bench/gate_cost.py --workers 8 --harm 0.3 --scouts 3          # more scouting
     python bench/gate_cost.py --workers 8 --split 16                      # one-wave bisection
     python bench/gate_cost.py --workers 8 --max-harm 0.05                 # a lower harm bar
     python bench/gate_cost.py --workers 8 --trace-at-once 1               # a culprit bisected once
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import Policies, events, evolve  # noqa: E402
from agentdescent.engine.loop.decisions import WorstFirst  # noqa: E402
from agentdescent.step.policies import BetaAcceptance  # noqa: E402
from agentdescent.testing import FILLERS, RouterReflector, demo_strategy, route, route_reward, router_tasks, routing_rules  # noqa: E402

PARTS = ("train", "verify", "accept", "validate", "proposals")


def run_once(n_workers: int, seed: int, harm: float, args: argparse.Namespace) -> dict:
    tasks = router_tasks(seed, args.signals, args.per_signal)
    reflector = RouterReflector("append", seed=seed, noise=harm)
    strategy = demo_strategy("append")

    def slow_route(rendered, task):
        time.sleep(args.rollout_ms / 1000)
        return route(rendered, task)

    def slow_propose(rendered, task, output, reward):
        time.sleep(args.propose_ms / 1000)
        return reflector(rendered, task, output, reward)

    landed_harm = []  # harmful rules that landed at some point of the run, removed later or not

    def on_event(event) -> None:
        if isinstance(event, events.DiffOutcome) and event.outcome.kind in ("committed", "fused") and event.diff:
            added = " ".join(e.after or "" for e in event.diff.edits if e.before is None)
            landed_harm.extend(k for k, _ in routing_rules(added) if k in FILLERS)

    with tempfile.TemporaryDirectory(prefix="gate-cost-ledger-") as store:
        start = time.perf_counter()
        result = evolve(tasks, route_reward, run=slow_route, propose=slow_propose, strategy=strategy,
                        rounds=400, n_workers=n_workers, max_concurrency=args.concurrency, target_reward=1.0,
                        seed=seed, store=store, on_event=on_event,
                        policies=Policies(acceptance=BetaAcceptance(confidence=args.confidence, max_harm=args.max_harm, split=args.split,
                                                                    trace_at_once=args.trace_at_once,
                                                                    wave=args.wave),
                                          proposal=WorstFirst(scouts=args.scouts)))
        wall = time.perf_counter() - start
    usage = result.usage.as_record()
    rules = routing_rules(result.rendered)
    committed = sum(o.kind in ("committed", "fused") for o in result.outcome_list)
    gate = sum(h.timings.get("accept", 0.0) for h in result.history)  # the rest: worker turns, commits, validation
    charged = [n for n in (broken_probes(o.reason) for o in result.outcome_list if o.kind == "rejected_by_test") if n]
    return {"rounds": len(result.history), "wall": wall, "gate": gate, "calls": result.usage.calls, "reward": result.final_reward,
            **{part: usage[part] for part in PARTS}, "committed": committed,
            "harmful": sum(keyword in FILLERS for keyword, _ in rules), "landed_harm": len(landed_harm),
            "culprits": len(charged), "charged": sum(charged)}


def broken_probes(reason: str) -> int | None:
    """How many probes a diff the bisection found guilty broke, read off its outcome's reason
    ("rejected: breaks r001, r007 and 3 more, which head passes (...)"); None for other refusals."""
    named = re.search(r"breaks (.*?), which head passes", reason)
    if named is None:
        return None
    shown, _, more = named.group(1).partition(" and ")
    return len(shown.split(", ")) + (int(more.split()[0]) if more else 0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--harm", type=float, nargs="+", default=[0.25], help="shares of harmful proposals")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--signals", type=int, default=12, help="signal words per handler: rules to learn / 5")
    parser.add_argument("--per-signal", type=int, default=8)
    parser.add_argument("--rollout-ms", type=float, default=20)
    parser.add_argument("--propose-ms", type=float, default=40)
    parser.add_argument("--concurrency", type=int, default=1024)
    parser.add_argument("--confidence", type=float, default=BetaAcceptance().confidence,
                        help="P(harm rate < max_harm) that ends the probing (the gate's strictness)")
    parser.add_argument("--max-harm", type=float, default=BetaAcceptance().max_harm,
                        help="the harm rate (share of head's passing tasks broken) the probing must rule out")
    parser.add_argument("--wave", type=int, default=BetaAcceptance().wave, help="probes in each wave of the gate")
    parser.add_argument("--split", type=int, default=BetaAcceptance().split,
                        help="parts a bisection splits a broken probe's suspects into at each level")
    parser.add_argument("--trace-at-once", type=int, default=BetaAcceptance().trace_at_once,
                        help="broken probes bisected together (default: all; 1: one, the rest scored again without its culprits)")
    parser.add_argument("--scouts", type=int, default=WorstFirst().scouts, help="spare minibatches an idle worker scouts")
    args = parser.parse_args()
    print("N  harm seed rounds    s gate s  calls | " + " ".join(f"{p:>9}" for p in PARTS)
          + " | reward committed harmful-landed harmful-in-result accept/rule")
    for n in args.workers:
        for harm in args.harm:
            runs = []
            for seed in args.seeds:
                r = run_once(n, seed, harm, args)
                runs.append(r)
                print(f"{n:<2} {harm:4.2f} {seed:4} {r['rounds']:6} {r['wall']:5.1f} {r['gate']:6.1f} {r['calls']:6} | "
                      + " ".join(f"{r[p]:9}" for p in PARTS)
                      + f" | {r['reward']:6.3f} {r['committed']:9} {r['landed_harm']:14} {r['harmful']:17}"
                      f" {r['accept'] / max(1, r['committed']):11.1f}")
            med = {k: statistics.median(r[k] for r in runs) for k in ("calls", "wall", "gate", "rounds", *PARTS)}
            per_rule = statistics.median(r["accept"] / max(1, r["committed"]) for r in runs)
            print(f"N={n} harm={harm:.2f}: median {med['calls']:.0f} calls ({', '.join(f'{p} {med[p]:.0f}' for p in PARTS)}),"
                  f" {med['rounds']:.0f} rounds, {med['wall']:.2f} s of which the gate {med['gate']:.2f} s;"
                  f" reward 1.0 on {sum(r['reward'] >= 1.0 for r in runs)}"
                  f" of {len(runs)} seeds; harmful rules landed on the way: {sum(r['landed_harm'] for r in runs)},"
                  f" in the result: {sum(r['harmful'] for r in runs)};"
                  f" acceptance calls per committed rule {per_rule:.1f};"
                  f" {sum(r['culprits'] for r in runs)} culprits traced,"
                  f" {sum(r['charged'] for r in runs) / max(1, sum(r['culprits'] for r in runs)):.2f} broken probes each")


if __name__ == "__main__":
    main()

"""How much of the speed-up the reference domain itself allows: a model, not a measurement.

An idealized loop on the router domain of bench/speedup.py, with none of the engine's costs:
every proposal comes from a different failing train task, the reflector behaves as
`RouterReflector` does (silent 10% of the time, a harmful filler rule 25% of the time, which
the test always refuses, else the right rule), every right rule is accepted and nothing else
is, and the run ends when no rule is missing. What is left is the domain: eight workers that
reflect on eight requests of the same missing rule make one rule, not eight (a coupon
collector's end game), so eight workers cannot need an eighth of one worker's rounds.

Printed: rounds to learn every rule with 1 and with N workers, and their ratio. Divide it by
the per-round cost ratio that bench/speedup.py prints to get the best wall-time speed-up an
engine could show on this domain and this machine.

`--noise 0 0.3` gives instead the rounds N workers need at each share of harmful proposals: the
floor under the cost of harm that no gate can go below, since a harmful proposal takes a good
one's place.

Run: python bench/speedup_bound.py [--workers 8] [--proposals 2] [--signals 12] [--per-signal 8] [--runs 400]
     python bench/speedup_bound.py --noise 0 0.25 0.3 0.5
"""

from __future__ import annotations

import argparse
import random
import statistics

HANDLERS = 5  # billing, shipping, technical, returns, account
TRAIN_FRACTION = 0.7  # evolve's default held_out_frac is 0.3


def rounds_to_learn(workers: int, rules: int, tasks_per_rule: int, rng: random.Random,
                    silence: float = 0.1, noise: float = 0.25) -> int:
    """`workers` is the number of proposals a round: workers times proposals per worker."""
    missing = set(range(rules))
    rounds = 0
    while missing:
        rounds += 1
        failing = [rule for rule in missing for _ in range(tasks_per_rule)]
        learned = set()
        for rule in rng.sample(failing, min(workers, len(failing))):  # a different task to each worker
            if rng.random() >= silence + noise:
                learned.add(rule)
        missing -= learned
    return rounds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--signals", type=int, default=12, help="signal words per handler, as in bench/speedup.py")
    parser.add_argument("--per-signal", type=int, default=8, help="requests per signal word")
    parser.add_argument("--proposals", type=int, default=2, help="per worker and round (WorstFirst's max_proposals)")
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--noise", type=float, nargs="+", default=None,
                        help="instead: rounds at N workers for each share of harmful proposals (gate_cost's --harm)")
    args = parser.parse_args()
    rules = HANDLERS * args.signals
    tasks_per_rule = max(1, round(args.per_signal * TRAIN_FRACTION))
    rng = random.Random(0)
    k = args.proposals
    if args.noise:  # what harmful proposals cost in rounds when the test refuses every one for free
        for noise in args.noise:
            r = statistics.mean(rounds_to_learn(args.workers * k, rules, tasks_per_rule, rng, noise=noise)
                                for _ in range(args.runs))
            print(f"harm {noise:.2f}: {args.workers} workers learn every rule in {r:.2f} rounds")
        return
    one = statistics.mean(rounds_to_learn(k, rules, tasks_per_rule, rng) for _ in range(args.runs))
    many = statistics.mean(rounds_to_learn(args.workers * k, rules, tasks_per_rule, rng) for _ in range(args.runs))
    print(f"{rules} rules, {tasks_per_rule} train requests each, {k} proposal(s) per worker, {args.runs} runs of an idealized loop:")
    print(f"rounds to learn every rule: 1 worker {one:.1f}, {args.workers} workers {many:.1f}; ratio {one / many:.2f}x")


if __name__ == "__main__":
    main()

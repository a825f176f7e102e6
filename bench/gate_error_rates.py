"""The error rates of the default gate, computed exactly from the shipped policy.

One diff that fixes `w` of its own failures is judged against a head that passes every probe;
each probe it is scored on breaks with probability `rho`, independently (its harm rate, or for a
harmless diff, how often a passing rollout fails by chance). The gate probes in waves of
`BetaAcceptance.wave` up to `size`, stops a wave early when the harm posterior is decisive, and
judges a diff that broke something on what it fixed against what it broke (as bisection leaves
it). Printed: the probability that the diff is accepted, and the probes it costs on average, for
each rho and w. A harmful diff's row is the chance it slips through; a harmless diff's row at
rho = the flake rate is the chance it is wrongly refused (1 minus the figure).

With samples (`--noise`), measured rather than computed: one diff at a time judged by the real
step on the noisy reference domain (`agentdescent.testing.lone_diff`: head holds 4 of its 8
category rules), over a grid of solver noise (p: a task passes with its rule, q: without it) and
grader flips. Printed for each level: how often the gate commits the right rule (1 minus that is
its false-reject rate), a vague one, a harmful one that breaks the plain tasks and one that
breaks a learnt category (their false-accept rates), and the rollouts one judgement costs.

Run: python bench/gate_error_rates.py
     python bench/gate_error_rates.py --noise --seeds 50
     python bench/gate_error_rates.py --noise --p 0.85 0.95 --q 0.1 --flip 0 0.05 --seeds 100
"""

from __future__ import annotations

import argparse
import itertools
import sys
from functools import lru_cache
from math import comb
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent.step.policies import BetaAcceptance  # noqa: E402
from agentdescent.testing.lone_diff import LoneDiff, NoFailure  # noqa: E402
from agentdescent.testing.noisy import VAGUE, NoisyLevels, harmful_rule, right_rule  # noqa: E402

POLICY = BetaAcceptance()


def judged(w: int, broken: int, kept: int = 0) -> bool:
    """The paired test of a diff with `w` fixed failures, `broken` broken probes and `kept` kept ones."""
    return POLICY([1.0] * (w + kept) + [0.0] * broken, [0.0] * w + [1.0] * (kept + broken), gated=False).accepted


def accept_probability(w: int, rho: float) -> tuple[float, float]:
    """(P(accepted), expected probes) of the sequential procedure, by enumerating each wave's breaks."""

    @lru_cache(maxsize=None)
    def state(taken: int, broken: int, cleared: int) -> tuple[float, float]:
        if broken > cleared:  # a wave broke something: the diff answers for it alone
            if not judged(w, broken):
                return 0.0, 0.0
            cleared = broken
        kept = taken - broken
        if POLICY.harm(kept, 0, gated=False) is not None or taken >= POLICY.size:
            return (1.0 if judged(w, broken, kept) else 0.0), 0.0
        size = min(POLICY.wave, POLICY.size - taken)
        p_acc = probes = 0.0
        for b in range(size + 1):
            p = comb(size, b) * rho**b * (1 - rho) ** (size - b)
            if p == 0.0:
                continue
            a, more = state(taken + size, broken + b, cleared)
            p_acc += p * a
            probes += p * (size + more)
        return p_acc, probes

    return state(0, 0, 0)


KINDS = {  # what the diff adds, made from a failure of category 5 (6 for the vague rule)
    "right rule": lambda seed: (right_rule(5), 5),
    "vague rule": lambda seed: (VAGUE[seed % len(VAGUE)], 6),
    "harmful (plain)": lambda seed: (harmful_rule(5, "plain"), 5),
    "harmful (a category)": lambda seed: (harmful_rule(5, 1), 5),
}


def measured(levels: NoisyLevels, seeds: int) -> dict[str, tuple[float, float, int]]:
    """For each kind of diff: (share committed, mean rollouts a judgement cost, judgements made)."""
    out = {}
    for kind, made in KINDS.items():
        committed, calls, judged = 0, 0, 0
        for seed in range(seeds):
            rule, category = made(seed)
            with LoneDiff(levels, seed=seed) as trial:
                try:
                    trial.failure(category)
                except NoFailure:
                    continue
                before = trial.usage.calls
                committed += trial.judge(rule, category=category) == "committed"
                calls, judged = calls + trial.usage.calls - before, judged + 1
        out[kind] = (committed / max(1, judged), calls / max(1, judged), judged)
    return out


def noise_grid(args: argparse.Namespace) -> None:
    print(f"policy: {BetaAcceptance(rewards='sampled')}\n{args.seeds} seeds a cell; each a lone diff judged by the step")
    print(f"{'p':>5} {'q':>5} {'flip':>5}  " + "".join(f"{k:>24}" for k in KINDS))
    for p, q, flip in itertools.product(args.p, args.q, args.flip):
        cells = measured(NoisyLevels(p=p, q=q, flip=flip), args.seeds)
        print(f"{p:5.2f} {q:5.2f} {flip:5.2f}  " + "".join(
            f"{f'{share:.2f} ({cost:.0f} calls)':>24}" for share, cost, _ in cells.values()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--noise", action="store_true", help="measure the gate with samples over a noise grid")
    parser.add_argument("--p", type=float, nargs="+", default=[0.85, 0.95])
    parser.add_argument("--q", type=float, nargs="+", default=[0.1])
    parser.add_argument("--flip", type=float, nargs="+", default=[0.0, 0.05])
    parser.add_argument("--seeds", type=int, default=30)
    args = parser.parse_args()
    if args.noise:
        noise_grid(args)
        return
    print(f"policy: {POLICY}")
    rhos = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
    print("harm rate rho:      " + "".join(f"{r:>14}" for r in rhos))
    for w in (1, 2, 3, 5):
        cells = [accept_probability(w, r) for r in rhos]
        print(f"fixes {w}: P(accept)  " + "".join(f"{p:14.3f}" for p, _ in cells))
        print("         probes      " + "".join(f"{n:14.1f}" for _, n in cells))


if __name__ == "__main__":
    main()

"""The error rates of the default gate, computed exactly from the shipped policy.

One diff that fixes `w` of its own failures is judged against a head that passes every probe;
each probe it is scored on breaks with probability `rho`, independently (its harm rate, or for a
harmless diff, how often a passing rollout fails by chance). The gate probes in waves of
`BetaAcceptance.wave` up to `size`, stops a wave early when the harm posterior is decisive, and
judges a diff that broke something on what it fixed against what it broke (as bisection leaves
it). Printed: the probability that the diff is accepted, and the probes it costs on average, for
each rho and w. A harmful diff's row is the chance it slips through; a harmless diff's row at
rho = the flake rate is the chance it is wrongly refused (1 minus the figure).

Run: python bench/gate_error_rates.py
"""

from __future__ import annotations

import sys
from functools import lru_cache
from math import comb
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent.step.policies import BetaAcceptance  # noqa: E402

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


def main() -> None:
    print(f"policy: {POLICY}")
    rhos = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3)
    print("harm rate rho:      " + "".join(f"{r:>14}" for r in rhos))
    for w in (1, 2, 3, 5):
        cells = [accept_probability(w, r) for r in rhos]
        print(f"fixes {w}: P(accept)  " + "".join(f"{p:14.3f}" for p, _ in cells))
        print("         probes      " + "".join(f"{n:14.1f}" for _, n in cells))


if __name__ == "__main__":
    main()

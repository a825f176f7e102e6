"""Ledger speed: ms per commit (50-key artifact, 1-3 keys changed) and per cached read.

Run: python bench/ledger_commit.py [n_keys] [n_commits]
"""

from __future__ import annotations

import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent.ledger import Ledger  # noqa: E402


def _per_call_ms(fn, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) * 1000 / n


def bench(n_keys: int = 50, n_commits: int = 200) -> dict[str, float]:
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(Path(tmp) / "ledger")
        state = {f"rules/r{i:02d}.md": f"rule {i}\n" * 20 for i in range(n_keys)}
        version = ledger.commit("a", state, expected_version=0, message="init")

        def step():
            nonlocal version
            for key in rng.sample(sorted(state), rng.randint(1, 3)):
                state[key] += f"edit {version}\n"
            version = ledger.commit("a", state, expected_version=version, message=f"step {version}")

        results = {"commit": _per_call_ms(step, n_commits)}
        results["head"] = _per_call_ms(ledger.head, 1000)
        results["snapshot (cached, head)"] = _per_call_ms(lambda: ledger.snapshot("a"), 1000)
        old = max(1, version // 2)
        results["snapshot (cached, old version)"] = _per_call_ms(lambda: ledger.snapshot("a", old), 1000)
        reopen = lambda: Ledger(ledger.path).snapshot("a")  # noqa: E731
        results["open Ledger + cold snapshot"] = _per_call_ms(reopen, 20)
        return results


if __name__ == "__main__":
    n_keys = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    n_commits = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    print(f"ledger: {n_keys} keys, {n_commits} commits of 1-3 changed keys")
    for name, ms in bench(n_keys, n_commits).items():
        print(f"  {name:32s} {ms:8.3f} ms")

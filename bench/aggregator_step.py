"""The aggregator's own cost: one whole step (admit, rebase, resolve, accept, commit) on a
50-key artifact, with an instant scorer so that only the aggregator and the ledger are timed.

Each step takes 8 diffs: 6 on distinct keys, 2 editing disjoint lines of one shared key (a
three-way merge by git), all based one version behind head (so every diff is rebased).

Run: python bench/aggregator_step.py [--keys 50] [--steps 100]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent.config import Policies  # noqa: E402
from agentdescent.governance import Governance  # noqa: E402
from agentdescent.ledger import Ledger  # noqa: E402
from agentdescent.step.aggregator import Aggregator  # noqa: E402
from agentdescent.types import Diff, Edit, Task  # noqa: E402

TASKS = [Task(id=f"t{i}", prompt="") for i in range(32)]


def instant_scorer(ledger: Ledger):
    """Head scores 0 and any change to it 1, so every candidate passes, at no cost."""

    def score(jobs):
        head = ledger.snapshot("a")
        return [[0.0 if state == head else 1.0] * len(tasks) for state, tasks in jobs]

    return score


def diffs_for(ledger: Ledger, base: int, step: int, rng: random.Random) -> list[Diff]:
    state = ledger.snapshot("a", base)
    keys = rng.sample(sorted(k for k in state if k != "shared"), 6)
    out = [Diff(id=f"s{step}k{i}", artifact_id="a", base_version=base, evidence={"task_ids": ["t0"]},
                edits=[Edit(key=k, before=state[k], after=state[k] + f"rule {step}\n")]) for i, k in enumerate(keys)]
    lines = state["shared"].splitlines(keepends=True)
    for i, at in enumerate((0, len(lines) - 1)):
        edited = lines[:at] + [f"step {step} edit {i}\n"] + lines[at + 1 :]
        out.append(Diff(id=f"s{step}m{i}", artifact_id="a", base_version=base, evidence={"task_ids": ["t1"]},
                        edits=[Edit(key="shared", before=state["shared"], after="".join(edited))]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=50)
    parser.add_argument("--steps", type=int, default=100)
    args = parser.parse_args()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as tmp:
        ledger = Ledger(Path(tmp) / "ledger")
        seed = {f"rules/k{i:02d}.md": f"rule {i}\n" for i in range(args.keys - 1)}
        seed["shared"] = "".join(f"line {i}\n" for i in range(20))
        ledger.commit("a", seed, expected_version=0, message="seed")
        ledger.commit("a", {**seed, "rules/k00.md": "moved\n"}, expected_version=1, message="move head")
        agg = Aggregator(ledger=ledger, artifact_id="a", governance=Governance(), policies=Policies(),
                         train=TASKS, score=instant_scorer(ledger))
        times, landed = [], 0
        for step in range(args.steps):
            diffs = diffs_for(ledger, ledger.head() - 1, step, rng)
            start = time.perf_counter()
            report = agg.step(diffs, step, sample=TASKS)
            times.append(time.perf_counter() - start)
            landed += sum(o.kind in ("committed", "fused") for o in report.outcomes)
    print(f"aggregator step, {args.keys} keys, 8 diffs a step (1 version stale, 2 merged three-way):")
    print(f"  median {1000 * statistics.median(times):.2f} ms, p90 {1000 * sorted(times)[int(0.9 * len(times))]:.2f} ms"
          f" per committed step; {landed} of {8 * args.steps} diffs landed")


if __name__ == "__main__":
    main()

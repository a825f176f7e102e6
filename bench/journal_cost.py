"""What the bill's bookkeeping costs a run: the answer journal, the start log and the heartbeat.

The same run as bench/speedup.py (the router of 60 rules, 20 ms rollouts, 40 ms proposals, N
workers, to held-out 1.0), once as shipped and once with that bookkeeping switched off (the start
log's write, the answer journal's add and the heartbeat made no-ops), alternating which goes first
so that the machine's drift falls on both sides. Printed per seed: wall time and calls of each;
then the median time ratio. Calls must be equal: the bookkeeping changes no decision.

Run: python bench/journal_cost.py [--workers 8] [--seeds 0 1 2 3] [--repeats 2] [--signals 12] [--per-signal 8]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from speedup import run_once  # noqa: E402

from agentdescent.config import Policies  # noqa: E402
from agentdescent.engine.loop.heartbeat import Heartbeat  # noqa: E402
from agentdescent.engine.persist.checkpoint import RunFiles  # noqa: E402
from agentdescent.engine.persist.journal import StartLog  # noqa: E402
from agentdescent.testing import router_tasks  # noqa: E402


@contextlib.contextmanager
def bookkeeping_off():
    """The start log, the answer journal and the heartbeat as no-ops, for the length of the block."""
    kept = StartLog.mark, RunFiles.record_answer, Heartbeat.start
    StartLog.mark = lambda self: None
    RunFiles.record_answer = lambda self, asked, answer: None
    Heartbeat.start = lambda self: None
    try:
        yield
    finally:
        StartLog.mark, RunFiles.record_answer, Heartbeat.start = kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--repeats", type=int, default=2, help="runs of each side per seed")
    parser.add_argument("--signals", type=int, default=12, help="signal words per handler: rules to learn / 5")
    parser.add_argument("--per-signal", type=int, default=8, help="requests per signal word")
    parser.add_argument("--rollout-ms", type=float, default=20)
    parser.add_argument("--propose-ms", type=float, default=40)
    args = parser.parse_args()
    ratios = []
    for seed in args.seeds:
        tasks = router_tasks(seed, args.signals, args.per_signal)
        walls: dict[str, list[float]] = {"shipped": [], "off": []}
        calls: dict[str, set[int]] = {"shipped": set(), "off": set()}
        for repeat in range(args.repeats):
            order = ("shipped", "off") if (seed + repeat) % 2 == 0 else ("off", "shipped")
            for side in order:
                with bookkeeping_off() if side == "off" else contextlib.nullcontext():
                    row = run_once(args.workers, seed, tasks, args.rollout_ms / 1000, args.propose_ms / 1000, 1024,
                                   asynchronous=False, policies=Policies())
                walls[side].append(row["wall"])
                calls[side].add(row["calls"])
        shipped, off = statistics.median(walls["shipped"]), statistics.median(walls["off"])
        ratios.append(shipped / off)
        print(f"seed {seed}: shipped {shipped:.2f} s, {sorted(calls['shipped'])} calls | bookkeeping off {off:.2f} s, "
              f"{sorted(calls['off'])} calls | time ratio {shipped / off:.3f}")
    print(f"{args.workers} workers, shipped / bookkeeping off: median time ratio {statistics.median(ratios):.3f} "
          f"(min {min(ratios):.3f}, max {max(ratios):.3f}) over seeds {args.seeds}")
    print(f"load average over the last 1 / 5 / 15 minutes: {' / '.join(f'{x:.1f}' for x in os.getloadavg())} on "
          f"{os.cpu_count()} cores")


if __name__ == "__main__":
    main()

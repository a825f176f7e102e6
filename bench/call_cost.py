"""What a rollout costs the run's own process: CPU microseconds per rollout in the evaluator's waves.

A run of many workers is bounded by its driver before its model: every rollout goes through the
call pool, the evaluation cache, the usage counters and the run's journal (redacted, written as
a line), all in one Python process. Here the evaluator scores waves of 64 states × 16 tasks, each
rollout sleeping `--latency-ms` as a model call would, on a pool of 1024 threads; what is
printed is the process's CPU time per rollout, without the journal, with it, and with the
straggler re-issuer too, and the rollouts a second of one core allows at that cost.
`bench/async_scaling.py` at 64 workers needs about 6,000 calls a second for its ideal rate.

Run: python bench/call_cost.py [--waves 10] [--states 64] [--tasks 16] [--latency-ms 50]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent.artifacts.strategies import AppendRules  # noqa: E402
from agentdescent.engine.calls.evaluation import Evaluator  # noqa: E402
from agentdescent.engine.calls.executors import ThreadExecutor  # noqa: E402
from agentdescent.engine.calls.stragglers import Hedger  # noqa: E402
from agentdescent.engine.persist.checkpoint import RunFiles  # noqa: E402
from agentdescent.types import Task  # noqa: E402
from agentdescent.usage import Usage  # noqa: E402


def cpu_per_rollout(args: argparse.Namespace, *, journal: bool, hedge: bool) -> float:
    latency = args.latency_ms / 1000

    def run(rendered: str, task: Task) -> str:
        time.sleep(latency)
        return task.gold if f"{task.id} -> {task.gold}" in rendered else "?"

    tasks = [Task(id=f"t{i:04d}", prompt=f"request {i}", gold=f"a{i}") for i in range(args.waves * args.tasks)]
    pool = ThreadExecutor(1024)
    with tempfile.TemporaryDirectory(prefix="call-cost-") as folder:
        files = RunFiles(Path(folder))
        evaluator = Evaluator(strategy=AppendRules(), run=run, reward=lambda task, out: float(out == task.gold),
                              pool=pool, usage=Usage(), journal=files.record if journal else None,
                              hedger=Hedger(pool, factor=4, capacity=1024) if hedge else None)
        head = {f"rule-{i}": f"t{i:04d} -> a{i}" for i in range(300)}  # an artifact that has learned a while
        start, count = time.process_time(), 0
        for wave in range(args.waves):
            jobs = [({**head, f"new-{wave}-{k}": f"t{k:04d} -> a{k}"}, tasks[wave * args.tasks:(wave + 1) * args.tasks])
                    for k in range(args.states)]
            evaluator.score(jobs)
            count += args.states * args.tasks
        spent = time.process_time() - start
        files.close()
    pool.shutdown()
    return 1e6 * spent / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--waves", type=int, default=10)
    parser.add_argument("--states", type=int, default=64)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--latency-ms", type=float, default=50)
    args = parser.parse_args()
    print(f"waves of {args.states} states x {args.tasks} tasks, {args.latency_ms:g} ms a rollout, 1024 threads:")
    for name, journal, hedge in (("evaluator alone", False, False), ("with the journal", True, False),
                                 ("with the journal and re-issues", True, True)):
        us = cpu_per_rollout(args, journal=journal, hedge=hedge)
        print(f"{name}: {us:.0f} us of CPU a rollout (at most {1e6 / us:.0f} rollouts a second on one core)")


if __name__ == "__main__":
    main()

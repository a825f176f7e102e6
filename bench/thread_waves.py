"""What one wave of concurrent calls costs on this machine: N calls that each sleep 20 ms, all
submitted at once, timed until the last one is back.

An ideal wave takes 20 ms whatever N is. The gap is thread scheduling: every call wakes a pool
thread, sleeps, and wakes again to hand back its result, and on a small machine those wake-ups
queue for the cores and the GIL. Measured through a bare `ThreadPoolExecutor` and through the
engine's `Evaluator` (which adds its cache and bookkeeping), after a warm-up wave so that the
pool's threads already exist. This is the per-round cost eight workers pay that one does not:
their verification is one wave of several hundred calls where one worker's is a few dozen.

Run: python bench/thread_waves.py [--sizes 64 256 512 1024] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent.artifacts.strategies import AppendRules  # noqa: E402
from agentdescent.engine.calls.evaluation import Evaluator  # noqa: E402
from agentdescent.engine.calls.executors import ThreadExecutor  # noqa: E402
from agentdescent.types import Task  # noqa: E402
from agentdescent.usage import Usage  # noqa: E402

SLEEP_S = 0.02


def sleepy(*_args) -> str:
    time.sleep(SLEEP_S)
    return "ok"


def bare_wave(pool: ThreadPoolExecutor, n: int) -> float:
    start = time.perf_counter()
    for future in [pool.submit(sleepy) for _ in range(n)]:
        future.result()
    return time.perf_counter() - start


def evaluator_wave(evaluator: Evaluator, tasks: list[Task], version: int) -> float:
    state = {"rules": f"version {version}"}  # a new state each time, so nothing is cached
    start = time.perf_counter()
    evaluator.rewards([state], tasks)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 512, 1024])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    top = max(args.sizes)
    pool = ThreadPoolExecutor(max_workers=top)
    calls = ThreadExecutor(top)
    evaluator = Evaluator(strategy=AppendRules(), run=sleepy, reward=lambda task, output: 1.0, pool=calls, usage=Usage())
    bare_wave(pool, top)  # warm-up: create the threads
    evaluator_wave(evaluator, [Task(id=f"t{i}", prompt="") for i in range(top)], -1)
    version = 0
    print(f"one wave of N calls that each sleep {SLEEP_S * 1000:.0f} ms (median of {args.repeats}):")
    for n in args.sizes:
        tasks = [Task(id=f"t{i}", prompt="") for i in range(n)]
        bare, ours = [], []
        for _ in range(args.repeats):
            bare.append(bare_wave(pool, n))
            ours.append(evaluator_wave(evaluator, tasks, version))
            version += 1
        print(f"  N={n:5d}: ThreadPoolExecutor {1000 * statistics.median(bare):6.1f} ms,"
              f" Evaluator {1000 * statistics.median(ours):6.1f} ms")
    pool.shutdown()
    calls.shutdown()


if __name__ == "__main__":
    main()

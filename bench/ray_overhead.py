"""What a call costs on the Ray executor beside the thread executor: waves of N calls that each
sleep 20 ms, all submitted at once, timed until the last one is back.

An ideal wave takes 20 ms whatever N is; what a wave takes past that is the executor's per-call
cost (on Ray: the submission, the hop to an actor and back, the result's deserialisation),
paid on the same cores the calls' threads and Ray's own processes share. It is the bound on
`executor="ray"` against threads for a run of short calls: a round is a few such waves. First,
what an executor waits for its first answer: with a new actor (Ray starts a worker process for
it), and with the actor a clean executor of this process left warm on the cluster.

Run: python bench/ray_overhead.py [--sizes 32 128] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent.engine.calls.executors import ThreadExecutor  # noqa: E402

SLEEP_S = 0.02


def unit(index: int, payload: str) -> int:
    """A call that waits as a model call would; `payload` stands for a rendered artifact."""
    time.sleep(SLEEP_S)
    return index


def wave_ms(executor, size: int, repeats: int) -> float:
    """The median milliseconds of a wave of `size` calls, after a warm-up wave."""
    payload = "x" * 2000
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        futures = [executor.submit(unit, i, payload) for i in range(size)]
        for future in futures:
            future.result()
        times.append(1000 * (time.perf_counter() - start))
    return statistics.median(times[1:])


def first_answer_ms(size: int) -> float:
    """Milliseconds from a new RayExecutor to its first call's answer; the executor then shuts down
    cleanly, leaving its actor for the next one."""
    from agentdescent.engine.calls.ray_executor import RayExecutor

    start = time.perf_counter()
    executor = RayExecutor(size)
    executor.submit(unit, 0, "x").result()
    spent = 1000 * (time.perf_counter() - start)
    executor.shutdown()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 128])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    import ray

    from agentdescent.engine.calls.ray_executor import RayExecutor

    ray.init(include_dashboard=False, log_to_driver=False)  # up before the waves, as a cluster would be
    size = max(args.sizes)
    cold, warm = first_answer_ms(size), first_answer_ms(size)
    print(f"an executor's first answer: {cold:.0f} ms with a new actor, {warm:.0f} ms with one taken back warm")
    executors = {"threads": ThreadExecutor(max(args.sizes)), "ray": RayExecutor(max(args.sizes))}
    print(f"a wave of N calls of {1000 * SLEEP_S:.0f} ms each, median of {args.repeats}:")
    for size in args.sizes:
        ms = {name: wave_ms(executor, size, args.repeats) for name, executor in executors.items()}
        extra = {name: (t - 1000 * SLEEP_S) / size for name, t in ms.items()}
        print(f"N={size}: threads {ms['threads']:.0f} ms, ray {ms['ray']:.0f} ms; past the 20 ms, per call: threads "
              f"{extra['threads']:.2f} ms, ray {extra['ray']:.2f} ms")
    for executor in executors.values():
        executor.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()

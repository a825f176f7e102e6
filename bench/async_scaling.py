"""Does the aggregator keep up? Proposals aggregated per second by asynchronous runs of N workers.

A domain with a rule of its own for every task (so there is always something to learn and two
workers rarely propose the same thing), every call sleeping `--latency-ms` (rollouts and
proposals alike), one proposal per worker turn. A turn is two calls in sequence (the minibatch,
the proposal; the step measures the diff on its evidence), so N workers can at best hand in N / T
proposals a second, T = 2 × latency. Each run lasts `--steps` aggregator steps; measured from the first step to the
last: proposals that reached the aggregator per second, against that ideal (efficiency), the
steps, the mean diffs a step, and the aggregator's own time a step (admit, rebase, resolve and
commit, without the rollouts of the gate it waits on). Calls are counted beside seconds, and
the CPU this process spends per call in all its threads (`cpu ms/call`) and per second of the
run (`cpu busy`; near 1.0 the interpreter's lock is the bound: threads cannot use a second core).

`--parallel pp` runs the turns pipelined (a worker's next minibatch rolls out while its last
proposal is made and verified, a third call, by the worker's verification stage), against
T = 3 × latency.

Run: python bench/async_scaling.py [--workers 1 2 4 8 16 32 64] [--latency-ms 50] [--steps 20] [--parallel pp]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentdescent import Parallelism, Policies, Task, events, evolve  # noqa: E402
from agentdescent.artifacts.strategies import AppendRules  # noqa: E402
from agentdescent.engine.loop.decisions import WorstFirst  # noqa: E402


def run_once(n_workers: int, latency: float, steps: int, tasks: list[Task], parallel: str = "dp") -> dict:
    def run(rendered, task):
        time.sleep(latency)
        return task.gold if f"{task.id} -> {task.gold}" in rendered else "?"

    def propose(rendered, task, output, reward):
        time.sleep(latency)
        return f"{task.id} -> {task.gold}"

    marks: list[float] = []
    cpu: list[tuple[float, int]] = []  # at each step's end: this process's CPU (all threads), the run's calls

    def on_event(event) -> None:
        if isinstance(event, (events.RoundStarted, events.RoundEnded)):
            marks.append(time.perf_counter())
        if isinstance(event, events.RoundEnded):
            cpu.append((time.process_time(), event.calls))

    with tempfile.TemporaryDirectory(prefix="scaling-ledger-") as store:
        result = evolve(tasks, lambda task, output: float(output == task.gold), run=run, propose=propose,
                        strategy=AppendRules(), rounds=steps, n_workers=n_workers, max_concurrency=1024,
                        held_out_frac=0.02, seed=0, store=store, on_event=on_event,
                        parallelism=Parallelism(asynchronous=True, method=parallel),
                        policies=Policies(proposal=WorstFirst(max_proposals=1)))
    seconds = marks[-1] - marks[0]
    (cpu_0, calls_0), (cpu_1, calls_1) = cpu[0], cpu[-1]
    proposals = sum(len(h.diffs) for h in result.history)
    own = [h.timings["prepare"] + h.timings["commit"] for h in result.history if h.timings]
    return {"rate": proposals / seconds, "steps": len(result.history), "per_step": proposals / len(result.history),
            "own_ms": 1000 * statistics.median(own) if own else 0.0, "calls": result.usage.calls, "seconds": seconds,
            "cpu_ms_per_call": 1000 * (cpu_1 - cpu_0) / max(1, calls_1 - calls_0), "busy": (cpu_1 - cpu_0) / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8, 16, 32, 64])
    parser.add_argument("--latency-ms", type=float, default=50)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=4000)
    parser.add_argument("--parallel", choices=("dp", "pp"), default="dp")
    args = parser.parse_args()
    latency = args.latency_ms / 1000
    tasks = [Task(id=f"t{i:04d}", prompt=f"request {i}", gold=f"a{i}") for i in range(args.tasks)]
    calls = 3 if args.parallel == "pp" else 2  # a pipelined worker verifies in a stage of its own
    turn = calls * latency
    print(f"a turn is {calls} calls of {args.latency_ms:g} ms: N workers hand in at most N / {turn:.2f} s proposals a second")
    print(" N  proposals/s  ideal  efficiency  steps  diffs/step  aggregator ms/step  calls  seconds  cpu ms/call  cpu busy")
    for n in args.workers:
        r = run_once(n, latency, args.steps, tasks, args.parallel)
        ideal = n / turn
        print(f"{n:2} {r['rate']:12.1f} {ideal:6.1f} {r['rate'] / ideal:11.2f} {r['steps']:6} {r['per_step']:11.1f}"
              f" {r['own_ms']:19.1f} {r['calls']:6} {r['seconds']:8.2f} {r['cpu_ms_per_call']:12.2f} {r['busy']:9.2f}")


if __name__ == "__main__":
    main()

"""A run whose rollouts hang for good once its first change has landed (the validation of that
change hangs too): the Ctrl-C test's child.

Prints "committed" when the first step lands, then the result's stop reason when evolve returns.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading

from agentdescent import Task, events, evolve

landed = threading.Event()


def run(rendered: str, task: Task) -> str:
    if landed.is_set() and "year" in rendered:
        threading.Event().wait()  # hangs for good, and ignores everything
    return "answer" + (" 2026" if "year" in rendered else "")


def on_event(event: events.Event) -> None:
    if isinstance(event, events.Committed) and not landed.is_set():
        landed.set()
        print("committed", flush=True)


def main() -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test asks for the stacks if this hangs
    tasks = [Task(id=f"t{i}", prompt=f"item {i}") for i in range(12)]
    result = evolve(tasks, lambda task, output: 1.0 if "2026" in output else 0.0, run=run,
                    propose=lambda *a: "always state the year", rounds=50, n_workers=2, store=sys.argv[1],
                    on_event=on_event)
    print(f"stop reason: {result.stop_reason}; error: {result.error}; committed: {result.outcomes().get('committed')}",
          flush=True)


if __name__ == "__main__":
    main()

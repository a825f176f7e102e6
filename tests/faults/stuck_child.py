"""A run whose rollouts hang for good once its first change has landed (the validation of that
change hangs too): the Ctrl-C test's child.

Prints "committed" when the first step lands, then the result's stop reason when evolve returns.
With `--ctrl-c-to-a-worker` the child interrupts itself: the first rollout that hangs sends SIGINT
to its own thread, as the kernel may deliver a Ctrl-C meant for the process to any of its threads.
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading

from agentdescent import Task, events, evolve

landed = threading.Event()
to_a_worker = "--ctrl-c-to-a-worker" in sys.argv
sent = threading.Lock()


def run(rendered: str, task: Task) -> str:
    if landed.is_set() and "year" in rendered:
        if to_a_worker and sent.acquire(blocking=False):  # once, a moment after the hang begins
            threading.Timer(0.3, signal.pthread_kill, (threading.get_ident(), signal.SIGINT)).start()
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

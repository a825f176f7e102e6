"""The stand-ins the tests share: tasks, runs, rewards and proposers, written once.

Real parts everywhere else (git, HTTP servers on loopback, subprocesses); these are only the
user's callables, which a test has to invent. Fixtures that build on them are in conftest.py.
"""

from __future__ import annotations

import threading
import time

from agentdescent import Parallelism, evolve, scripted
from agentdescent.result import EvolveResult
from agentdescent.testing import RouterReflector, demo_strategy, route, route_reward, router_tasks
from agentdescent.types import Task


def numbered_tasks(n: int, *, id: str = "t{i}", prompt: str = "item {i}", gold: str | None = None) -> list[Task]:
    """numbered_tasks(2) == [Task(id="t0", prompt="item 0"), Task(id="t1", prompt="item 1")]"""
    return [Task(id=id.format(i=i), prompt=prompt.format(i=i), gold=None if gold is None else gold.format(i=i))
            for i in range(n)]


def year_program():
    """The smallest program of DESIGN.md, as written: (tasks, reward, run, propose)."""
    tasks = [Task(id=f"t{i}", prompt=f"item {i}") for i in range(12)]
    reward = lambda task, output: 1.0 if "2026" in output else 0.0  # noqa: E731
    run = lambda rendered, task: "answer" + (" 2026" if "year" in rendered else "")  # noqa: E731
    propose = lambda rendered, task, output, r: "always state the year"  # noqa: E731
    return tasks, reward, run, propose


def echo(rendered, task: Task):
    """A run that answers with the artifact itself, so a reward can look for what a rule says."""
    return rendered


def fast_and_slow(*, lag_budget: int | None = 3, **options) -> EvolveResult:
    """Three fast tasks and three slow ones (150 ms a rollout), each fixed by "fix <its id>",
    evolved asynchronously on two workers: a slow turn's diffs arrive after a fast one's landed."""
    tasks = [Task(id=f"{speed}{i}", prompt="") for speed in ("fast", "slow") for i in range(3)]

    def run(rendered, task):
        time.sleep(0.15 if task.id.startswith("slow") else 0)
        return rendered

    return evolve(tasks, lambda task, output: float(f"fix {task.id}" in output), run=run,
                  propose=lambda rendered, task, output, r: f"fix {task.id}", held_out_frac=0,
                  n_workers=2, parallelism=Parallelism(asynchronous=True, lag_budget=lag_budget), **options)


def router(**options) -> EvolveResult:
    """The demo domain (a keyword router and its scripted reflector), evolved with `options`."""
    kind = options.pop("kind", "append")
    seed = options.pop("seed", 0)
    return evolve(router_tasks(seed), route_reward, run=options.pop("run", route),
                  propose=options.pop("propose", None) or RouterReflector(kind, seed=seed), strategy=demo_strategy(kind),
                  seed=seed, **options)


class InFlight:
    """`with in_flight:` around a piece of work counts the callers inside it at once; `peak` is
    the most it has seen."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.peak = 0

    def __enter__(self) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)

    def __exit__(self, *exc_info) -> None:
        with self.lock:
            self.now -= 1


class CountingRun:
    """Answers the gold when the rendered playbook says "answer"; counts calls under a lock."""

    def __init__(self, fail_on=()) -> None:
        self.calls: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.fail_on = set(fail_on)

    def __call__(self, rendered, task: Task) -> str:
        with self.lock:
            self.calls.append((rendered, task.id))
        if task.id in self.fail_on:
            raise RuntimeError("model down")
        return (task.gold or "") if "answer" in rendered else "?"


def exact(task: Task, output: str) -> float:
    return 1.0 if output == task.gold else 0.0


def asking_run(rendered, task: Task) -> str:
    """A run that asks a (scripted) model, so that it makes one metered call; module-level, so that
    it can be sent to another process."""
    return scripted(lambda prompt: "ok" if "answer" in prompt else "?")(f"{rendered}\n{task.prompt}")


def judging_reward(task: Task, output: str) -> float:
    """A reward that asks a (scripted) judge: one more metered call per rollout."""
    return float(scripted(lambda prompt: "1" if "ok" in prompt else "0")(output))


def asking_propose(rendered, task: Task, output: str, reward: float) -> str:
    return scripted(lambda prompt: "answer the question")(f"{rendered}\n{task.prompt}\n{output}")


def settles(condition, seconds: float = 10.0) -> bool:
    """Whether `condition()` holds within `seconds`: a killed process, an abandoned call's thread or a
    request logged late takes a moment to go (or come)."""
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True

"""Scorers that break, for the tests of a run that cannot learn (python:tests.failing_scorers:NAME):
`swapped` takes its arguments in the wrong order, so it raises on every call; `picky` scores the
gold answer and raises on anything else, so it passes plan's one try and fails every rollout;
`loud` prints 2 MB a call; `spinning` spins past any timeout once plan's one try is done; `nan`,
`inf`, `minus_one`, `two` and `huge` return a number outside [0, 1]."""

from __future__ import annotations

import os


def swapped(output, task):  # noqa: ANN001 - the mistake under test: (output, task) for (task, output)
    return float(output == task.gold)


def picky(task, output: str) -> float:
    if output != task.gold:
        raise ValueError(f"cannot score {output!r}")
    return 1.0


def word(task, output: str) -> str:
    return "yes"


def loud(task, output: str) -> float:
    print("x" * (2 << 20))
    return float(output == task.gold)


def spinning(task, output: str) -> float:
    while "AGENTDESCENT_RUN" in os.environ:  # in the run's process, not in plan's
        pass
    return 1.0


def nan(task, output: str) -> float:
    return float("nan")


def inf(task, output: str) -> float:
    return float("-inf")


def minus_one(task, output: str) -> int:
    return -1


def two(task, output: str) -> float:
    return 2.0


def huge(task, output: str) -> int:
    return 10**400

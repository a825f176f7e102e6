"""Scorers that break, for the tests of a run that cannot learn (python:tests.failing_scorers:NAME):
`swapped` takes its arguments in the wrong order, so it raises on every call; `picky` scores the
gold answer and raises on anything else, so it passes plan's one try and fails every rollout."""

from __future__ import annotations


def swapped(output, task):  # noqa: ANN001 - the mistake under test: (output, task) for (task, output)
    return float(output == task.gold)


def picky(task, output: str) -> float:
    if output != task.gold:
        raise ValueError(f"cannot score {output!r}")
    return 1.0


def word(task, output: str) -> str:
    return "yes"

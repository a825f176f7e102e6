"""A shipped policy's settings checked where the policy is made, against the range the code that
reads each can act on: outside it, `OutOfRange` names the field and the range, so that `evolve`
refuses the policy before anything runs and a spec lists it as a problem at the field's own path
(`policies.proposal.scouts`).

    whole(WorstFirst, "scouts", -1, least=0, means="...")
    raises OutOfRange: WorstFirst(scouts=-1): must be a whole number >= 0 (...)

A whole number is an `int` (not a bool, not 2.0); a number is an `int` or a `float`, finite. A
spec's quoted number (`"3"`) is read as one before it gets here.

Left out: why each range is what it is (the policy that calls these says, in `means`).
"""

from __future__ import annotations

import math

from agentdescent.errors import OutOfRange


def whole(owner: object, name: str, value: object, *, least: int, most: int | None = None, means: str) -> None:
    """`value`, the `name` of `owner` (a policy, or its class), is a whole number from `least` up (to `most`)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < least or (most is not None and value > most):
        span = f">= {least}" if most is None else f"from {least} to {most}"
        raise OutOfRange(_named(owner), name, value, f"must be a whole number {span} ({means})")


def number(owner: object, name: str, value: object, *, low: float, high: float | None = None,
           low_in: bool = True, high_in: bool = True, means: str) -> None:
    """`value` is a finite number from `low` (included when `low_in`) up to `high` (included when
    `high_in`; None: no bound). number(X, "share", 7, low=0, high=1, means="...") raises
    "X(share=7): must be a number in [0, 1] (...)"."""
    fits = (not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
            and (value >= low if low_in else value > low)
            and (high is None or (value <= high if high_in else value < high)))
    if not fits:
        span = (f"{'>=' if low_in else 'above'} {low:g}, finite" if high is None else
                f"in {'[' if low_in else '('}{low:g}, {high:g}{']' if high_in else ')'}")
        raise OutOfRange(_named(owner), name, value, f"must be a number {span} ({means})")


def _named(owner: object) -> str:
    return owner.__name__ if isinstance(owner, type) else type(owner).__name__

"""The split of a run's tasks into train and held-out ones, and the sizes of a task set that the
messages advise: the fewest that can commit a change, and a good set to start from.

    split_tasks(tasks, 0.3, random.Random("0:split"))   # (train, held_out), seeded
    held_out_count(36, 0.3) == 11
    good_start(0.3) == "12-20"
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from agentdescent.errors import UserError
from agentdescent.types import Task

FEWEST_TASKS = 4  # a run's least: some to train on, some held out
FEW_HELD_OUT = 4  # held-out tasks below which the held-out reward is too coarse to mean much
GOOD_START_MOST = 20  # tasks enough to start from, with the held-out set FEW_HELD_OUT asks for (`good_start`)


def split_tasks(tasks: Sequence[Task], held_out_frac: float, rng: random.Random) -> tuple[list[Task], list[Task]]:
    """Seeded train / held-out split. With held_out_frac=0 the train set is also the held-out set."""
    if not 0.0 <= held_out_frac < 1.0:
        raise UserError(f"held_out_frac must be in [0, 1); got {held_out_frac}")
    if held_out_frac == 0:
        return list(tasks), list(tasks)
    order = list(tasks)
    rng.shuffle(order)
    n_held = held_out_count(len(order), held_out_frac)
    return order[n_held:], order[:n_held]


def held_out_count(total: int, held_out_frac: float) -> int:
    """How many of `total` tasks a split with `held_out_frac` above 0 holds out: at least 1, and
    at least 2 left to train on. held_out_count(36, 0.3) == 11"""
    return min(total - 2, max(1, round(total * held_out_frac)))


def too_few_to_train(train: int, tasks: int, held_out_frac: float, acceptance: object) -> str:
    """Why `train` tasks cannot commit any change under `acceptance`, which judges a change on
    at least its `min_tasks` train tasks; "" when they can."""
    least = getattr(acceptance, "min_tasks", 0)
    if train >= least:
        return ""
    fewest = fewest_tasks(held_out_frac, acceptance)
    return (f"{train} train tasks ({tasks} tasks, held_out_frac={held_out_frac:g}) are fewer than the {least} the "
            f"acceptance test judges a change on, so no change could ever be committed; give at least {fewest} tasks "
            f"({good_start(held_out_frac, at_least=fewest)} is a good start), or a smaller held_out_frac")


def fewest_tasks(held_out_frac: float, acceptance: object) -> int:
    """The fewest tasks a run can commit a change with: some held out (`held_out_count`), at least
    `acceptance.min_tasks` left to train on, and never under `FEWEST_TASKS`.
    fewest_tasks(0.3, BetaAcceptance()) == 6"""
    least, total = getattr(acceptance, "min_tasks", 0), FEWEST_TASKS
    while held_out_frac > 0 and total - held_out_count(total, held_out_frac) < least:
        total += 1
    return total


def tasks_holding_out(count: int, held_out_frac: float) -> int:
    """The fewest tasks of which a split with `held_out_frac` holds `count` out (`held_out_count`;
    0 measures every task on the held-out set): tasks_holding_out(4, 0.3) == 12"""
    total = count
    while held_out_frac > 0 and held_out_count(total, held_out_frac) < count:
        total += 1
    return total


def good_start(held_out_frac: float, *, at_least: int = 0) -> str:
    """The tasks to start from, as the messages advise: enough to hold out `FEW_HELD_OUT` (and
    `at_least`), and up to 20: good_start(0.3) == "12-20", good_start(0.5) == "8-20" """
    least = max(at_least, tasks_holding_out(FEW_HELD_OUT, held_out_frac))
    return f"{least}-{GOOD_START_MOST}" if least < GOOD_START_MOST else f"{least} or more"

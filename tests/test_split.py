"""The split of a run's tasks, and the task counts the messages advise for it."""

from __future__ import annotations

import random

import pytest

from agentdescent import Task, UserError, evolve
from agentdescent.engine.split import fewest_tasks, good_start, held_out_count, split_tasks
from agentdescent.step.policies import BetaAcceptance


def test_the_split_is_seeded_and_holds_out_what_held_out_count_says():
    tasks = [Task(id=f"t{i}", prompt=str(i)) for i in range(36)]
    train, held_out = split_tasks(tasks, 0.3, random.Random("0:split"))
    assert len(held_out) == held_out_count(36, 0.3) == 11 and len(train) == 25
    assert (train, held_out) == split_tasks(tasks, 0.3, random.Random("0:split"))
    assert split_tasks(tasks, 0, random.Random(0)) == (tasks, tasks)


@pytest.mark.parametrize("frac, fewest, start", [(0.3, 6, "12-20"), (0.5, 8, "8-20"), (0.8, 18, "18-20")])
def test_evolves_advice_on_too_few_tasks_follows_its_held_out_frac(frac, fewest, start):
    """The advice was a fixed "12-20", under the fewest tasks a large held_out_frac needs."""
    assert fewest_tasks(frac, BetaAcceptance()) == fewest
    with pytest.raises(UserError, match=f"give at least {fewest} tasks \\({start} is a good start\\)"):
        evolve([Task(id=f"t{i}", prompt=str(i)) for i in range(5)], lambda task, output: 1.0,
               run=lambda rendered, task: "x", propose=lambda *args: None, held_out_frac=frac)
    assert good_start(frac, at_least=fewest) == start

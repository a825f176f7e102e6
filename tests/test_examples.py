"""The examples run as written, and say what they claim."""

from __future__ import annotations

from examples.rq2_staleness import one
from examples.run_async import timed_run
from examples.run_demo import forked, merged


def test_merging_beats_forking_at_an_equal_budget():
    merge = merged(seed=0, workers=8, budget=1600, ms=0)
    best_fork, fork_calls = forked(seed=0, workers=8, budget=1600, ms=0)
    # Merge keeps to the budget; each fork's first round has no cost to go by and may pass its
    # slice, so the forks spend more, which only helps them.
    assert merge.usage.calls <= min(1600, fork_calls)
    assert merge.final_reward > best_fork.final_reward


def test_the_asynchronous_example_improves_and_counts_its_stragglers():
    few = timed_run(seed=0, workers=4, sigma=1.0, asynchronous=True, rounds=4)
    assert few["steps"] == 4 and 0.0 < few["reward"] <= 1.0 and few["calls"] > 0 and few["reissued"] >= 0


def test_the_staleness_sweep_rebases_what_a_budget_of_0_would_drop():
    rebase, drop = one(seed=0, budget=0, how="rebase", steps=4), one(seed=0, budget=0, how="drop", steps=4)
    assert rebase["dropped"] == 0 and drop["rebased"] == 0
    assert rebase["rebased"] + drop["dropped"] > 0  # eight workers on lognormal latency fall behind head

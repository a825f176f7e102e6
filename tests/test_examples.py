"""The examples run as written, and say what they claim."""

from __future__ import annotations

from examples.run_demo import forked, merged


def test_merging_beats_forking_at_an_equal_budget():
    merge = merged(seed=0, workers=8, budget=1600, ms=0)
    best_fork, fork_calls = forked(seed=0, workers=8, budget=1600, ms=0)
    # Merge keeps to the budget; each fork's first round has no cost to go by and may pass its
    # slice, so the forks spend more, which only helps them.
    assert merge.usage.calls <= min(1600, fork_calls)
    assert merge.final_reward > best_fork.final_reward

"""The optimizer step, one stage per module: admit → rebase → resolve → accept → commit.

`Aggregator` threads a batch of diffs through the stages; `policies` holds the decisions the
stages make (a run's `config.Policies` bundles them with the loop's); `stats` is the acceptance
test's arithmetic and `textmerge` the three-way merge that rebase and resolve rely on.
"""

from agentdescent.step.aggregator import Aggregator, StepReport

__all__ = ["Aggregator", "StepReport"]

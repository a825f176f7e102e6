"""The optimizer step, one stage per module: admit → rebase → resolve → accept → commit.

`Aggregator` threads a batch of diffs through the stages; `Policies` holds every decision the
stages and the loop make; `stats` is the acceptance test's arithmetic and `textmerge` the
three-way merge that rebase and resolve rely on.
"""

from agentdescent.step.aggregator import Aggregator, StepReport
from agentdescent.step.policies import Policies

__all__ = ["Aggregator", "Policies", "StepReport"]

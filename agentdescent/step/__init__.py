"""The optimizer step, one stage per module: admit → rebase → resolve → accept → commit.

`Aggregator` threads a batch of diffs through the stages; `policies` holds the decisions the
stages make (a run's `config.Policies` bundles them with the loop's); `stats` is the acceptance
test's arithmetic and `textmerge` the three-way merge that rebase and resolve rely on.

`Aggregator` is imported when first used (`agentdescent._exports`): a module that needs one stage
or a policy does not import the ledger and GitPython with it.
"""

# ruff: noqa: F401 - the imports under TYPE_CHECKING are there to be read, not used
from typing import TYPE_CHECKING

from agentdescent._exports import by_name, lazy

if TYPE_CHECKING:  # the same names, read by type checkers
    from agentdescent.step.aggregator import Aggregator, StepReport

_WHERE = by_name({
    "agentdescent.step.aggregator": "Aggregator StepReport",
})
__getattr__, __dir__ = lazy(__name__, _WHERE)

__all__ = ["Aggregator", "StepReport"]

"""AgentDescent: improve prompts, skills and agents the way gradient descent improves weights.

N workers roll out tasks against a snapshot of an artifact and propose diffs with evidence; one
aggregator merges them (conflict resolution, fusion, a statistical acceptance test) into a git
ledger. See `evolve`.

The names below are imported when first used (`agentdescent._exports`): `import agentdescent`
imports none of them, and `agentdescent.evolve` brings the engine when it is first asked for.
"""

# ruff: noqa: F401 - the imports under TYPE_CHECKING are there to be read, not used
import os
from typing import TYPE_CHECKING

# GitPython looks for git when it is first imported and raises there when git is missing; with this
# it looks when git is first used, so that a machine without git gets `doctor`'s line saying so.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")

from agentdescent._exports import by_name, lazy

if TYPE_CHECKING:  # the same names, read by type checkers and the API reference
    from agentdescent.agents.anthropic import claude
    from agentdescent.agents.cli_agents import claude_code, codex
    from agentdescent.agents.openai_compat import deepseek, openai_compatible
    from agentdescent.agents.scripted import scripted
    from agentdescent.artifacts.strategies import AppendRules, FileTree, KeyedRules, SingleSlot, Strategy
    from agentdescent.artifacts.tree import load_tree
    from agentdescent.artifacts.workspace import tree_runner
    from agentdescent.config import Budget, Parallelism, Policies, Settings
    from agentdescent.dataloader.tasks import tasks_from
    from agentdescent.engine.calls.cancel import CancelToken
    from agentdescent.engine.evolve import evolve
    from agentdescent.engine.loop.decisions import Amortized, Epochs, FailuresFirst, OnHeldOutGain, RandomMinibatches, WorstFirst
    from agentdescent.engine.loop.parallel import PipelineParallel, TensorParallel
    from agentdescent.engine.loop.stopping import Patience, StopRule, TargetReward
    from agentdescent.errors import (
        AgentDescentError,
        AgentError,
        BadReply,
        BudgetSpent,
        Cancelled,
        HeadMoved,
        InvalidProposal,
        Killed,
        LedgerError,
        OutputTooLarge,
        Stopping,
        TimedOut,
        UserError,
    )
    from agentdescent.ledger.ledger import Ledger
    from agentdescent.reflect.fusion import llm_fusion
    from agentdescent.reflect.reflector import reflector
    from agentdescent.reflect.tree_reflector import tree_reflector
    from agentdescent.result import EvolveResult
    from agentdescent.scoring import llm_judge, scorer
    from agentdescent.step.policies import BetaAcceptance, BetterEvidence, ThreeWayMerge
    from agentdescent.step.staleness import Staleness
    from agentdescent.types import Diff, Edit, EvidenceCard, Outcome, Task, Tried

_WHERE = by_name({
    "agentdescent.errors": "AgentDescentError AgentError BadReply BudgetSpent Cancelled InvalidProposal Killed OutputTooLarge "
        "TimedOut HeadMoved LedgerError Stopping UserError",
    "agentdescent.engine.loop.decisions": "Amortized Epochs FailuresFirst OnHeldOutGain RandomMinibatches WorstFirst",
    "agentdescent.artifacts.strategies": "AppendRules FileTree KeyedRules SingleSlot Strategy",
    "agentdescent.step.policies": "BetaAcceptance BetterEvidence ThreeWayMerge",
    "agentdescent.config": "Budget Parallelism Policies Settings",
    "agentdescent.engine.calls.cancel": "CancelToken",
    "agentdescent.agents.anthropic": "claude",
    "agentdescent.agents.cli_agents": "claude_code codex",
    "agentdescent.agents.openai_compat": "deepseek openai_compatible",
    "agentdescent.types": "Diff Edit EvidenceCard Outcome Task Tried",
    "agentdescent.engine.evolve": "evolve",
    "agentdescent.result": "EvolveResult",
    "agentdescent.ledger.ledger": "Ledger",
    "agentdescent.reflect.fusion": "llm_fusion",
    "agentdescent.scoring": "llm_judge scorer",
    "agentdescent.artifacts.tree": "load_tree",
    "agentdescent.engine.loop.stopping": "Patience StopRule TargetReward",
    "agentdescent.engine.loop.parallel": "PipelineParallel TensorParallel",
    "agentdescent.reflect.reflector": "reflector",
    "agentdescent.agents.scripted": "scripted",
    "agentdescent.step.staleness": "Staleness",
    "agentdescent.dataloader.tasks": "tasks_from",
    "agentdescent.reflect.tree_reflector": "tree_reflector",
    "agentdescent.artifacts.workspace": "tree_runner",
})

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy(__name__, _WHERE)

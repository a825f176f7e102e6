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

from agentdescent._exports import lazy

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

_WHERE = {
    "AgentDescentError": "agentdescent.errors",
    "AgentError": "agentdescent.errors",
    "BadReply": "agentdescent.errors",
    "BudgetSpent": "agentdescent.errors",
    "Cancelled": "agentdescent.errors",
    "InvalidProposal": "agentdescent.errors",
    "Killed": "agentdescent.errors",
    "OutputTooLarge": "agentdescent.errors",
    "TimedOut": "agentdescent.errors",
    "Amortized": "agentdescent.engine.loop.decisions",
    "AppendRules": "agentdescent.artifacts.strategies",
    "BetaAcceptance": "agentdescent.step.policies",
    "BetterEvidence": "agentdescent.step.policies",
    "Budget": "agentdescent.config",
    "CancelToken": "agentdescent.engine.calls.cancel",
    "claude": "agentdescent.agents.anthropic",
    "claude_code": "agentdescent.agents.cli_agents",
    "codex": "agentdescent.agents.cli_agents",
    "deepseek": "agentdescent.agents.openai_compat",
    "Diff": "agentdescent.types",
    "Edit": "agentdescent.types",
    "Epochs": "agentdescent.engine.loop.decisions",
    "EvidenceCard": "agentdescent.types",
    "evolve": "agentdescent.engine.evolve",
    "EvolveResult": "agentdescent.result",
    "FailuresFirst": "agentdescent.engine.loop.decisions",
    "FileTree": "agentdescent.artifacts.strategies",
    "HeadMoved": "agentdescent.errors",
    "KeyedRules": "agentdescent.artifacts.strategies",
    "Ledger": "agentdescent.ledger.ledger",
    "LedgerError": "agentdescent.errors",
    "llm_fusion": "agentdescent.reflect.fusion",
    "llm_judge": "agentdescent.scoring",
    "load_tree": "agentdescent.artifacts.tree",
    "OnHeldOutGain": "agentdescent.engine.loop.decisions",
    "openai_compatible": "agentdescent.agents.openai_compat",
    "Outcome": "agentdescent.types",
    "Parallelism": "agentdescent.config",
    "Patience": "agentdescent.engine.loop.stopping",
    "PipelineParallel": "agentdescent.engine.loop.parallel",
    "Policies": "agentdescent.config",
    "RandomMinibatches": "agentdescent.engine.loop.decisions",
    "reflector": "agentdescent.reflect.reflector",
    "scorer": "agentdescent.scoring",
    "scripted": "agentdescent.agents.scripted",
    "Settings": "agentdescent.config",
    "SingleSlot": "agentdescent.artifacts.strategies",
    "Staleness": "agentdescent.step.staleness",
    "Stopping": "agentdescent.errors",
    "StopRule": "agentdescent.engine.loop.stopping",
    "Strategy": "agentdescent.artifacts.strategies",
    "TargetReward": "agentdescent.engine.loop.stopping",
    "Task": "agentdescent.types",
    "Tried": "agentdescent.types",
    "tasks_from": "agentdescent.dataloader.tasks",
    "TensorParallel": "agentdescent.engine.loop.parallel",
    "ThreeWayMerge": "agentdescent.step.policies",
    "tree_reflector": "agentdescent.reflect.tree_reflector",
    "tree_runner": "agentdescent.artifacts.workspace",
    "UserError": "agentdescent.errors",
    "WorstFirst": "agentdescent.engine.loop.decisions",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy(__name__, _WHERE)

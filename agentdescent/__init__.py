"""AgentDescent: improve prompts, skills and agents the way gradient descent improves weights.

N workers roll out tasks against a snapshot of an artifact and propose diffs with evidence; one
aggregator merges them (conflict resolution, fusion, a statistical acceptance test) into a git
ledger. See `evolve`.

The names below are imported when first used (`agentdescent._exports`): `import agentdescent`
imports none of them, and `agentdescent.evolve` brings the engine when it is first asked for.
"""

# ruff: noqa: F401 - the imports under TYPE_CHECKING are there to be read, not used
from typing import TYPE_CHECKING

from agentdescent._exports import lazy

if TYPE_CHECKING:  # the same names, read by type checkers and the API reference
    from agentdescent.agents.anthropic import claude
    from agentdescent.agents.cli_agents import claude_code, codex
    from agentdescent.agents.openai_compat import deepseek, openai_compatible
    from agentdescent.agents.scripted import scripted
    from agentdescent.artifacts.strategies import AppendRules, FileTree, KeyedRules, SingleSlot, Strategy
    from agentdescent.artifacts.tree import load_tree
    from agentdescent.artifacts.workspace import tree_runner
    from agentdescent.dataloader.tasks import tasks_from
    from agentdescent.engine.cancel import CancelToken
    from agentdescent.engine.evolve import evolve
    from agentdescent.engine.parallel import PipelineParallel, TensorParallel
    from agentdescent.errors import AgentDescentError, AgentError, HeadMoved, LedgerError, UserError
    from agentdescent.ledger.ledger import Ledger
    from agentdescent.reflect.fusion import llm_fusion
    from agentdescent.reflect.reflector import reflector
    from agentdescent.reflect.tree_reflector import tree_reflector
    from agentdescent.result import EvolveResult
    from agentdescent.scoring import llm_judge, scorer
    from agentdescent.step.policies import Policies
    from agentdescent.types import Diff, Edit, EvidenceCard, Outcome, Task

_WHERE = {
    "AgentDescentError": "agentdescent.errors",
    "AgentError": "agentdescent.errors",
    "AppendRules": "agentdescent.artifacts.strategies",
    "CancelToken": "agentdescent.engine.cancel",
    "claude": "agentdescent.agents.anthropic",
    "claude_code": "agentdescent.agents.cli_agents",
    "codex": "agentdescent.agents.cli_agents",
    "deepseek": "agentdescent.agents.openai_compat",
    "Diff": "agentdescent.types",
    "Edit": "agentdescent.types",
    "EvidenceCard": "agentdescent.types",
    "evolve": "agentdescent.engine.evolve",
    "EvolveResult": "agentdescent.result",
    "FileTree": "agentdescent.artifacts.strategies",
    "HeadMoved": "agentdescent.errors",
    "KeyedRules": "agentdescent.artifacts.strategies",
    "Ledger": "agentdescent.ledger.ledger",
    "LedgerError": "agentdescent.errors",
    "llm_fusion": "agentdescent.reflect.fusion",
    "llm_judge": "agentdescent.scoring",
    "load_tree": "agentdescent.artifacts.tree",
    "openai_compatible": "agentdescent.agents.openai_compat",
    "Outcome": "agentdescent.types",
    "PipelineParallel": "agentdescent.engine.parallel",
    "Policies": "agentdescent.step.policies",
    "reflector": "agentdescent.reflect.reflector",
    "scorer": "agentdescent.scoring",
    "scripted": "agentdescent.agents.scripted",
    "SingleSlot": "agentdescent.artifacts.strategies",
    "Strategy": "agentdescent.artifacts.strategies",
    "Task": "agentdescent.types",
    "tasks_from": "agentdescent.dataloader.tasks",
    "TensorParallel": "agentdescent.engine.parallel",
    "tree_reflector": "agentdescent.reflect.tree_reflector",
    "tree_runner": "agentdescent.artifacts.workspace",
    "UserError": "agentdescent.errors",
}

__all__ = sorted(_WHERE)
__getattr__, __dir__ = lazy(__name__, _WHERE)

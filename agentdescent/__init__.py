"""AgentDescent: improve prompts, skills and agents the way gradient descent improves weights.

N workers roll out tasks against a snapshot of an artifact and propose diffs with evidence; one
aggregator merges them (conflict resolution, fusion, a statistical acceptance test) into a git
ledger. See `evolve`.
"""

from agentdescent.agents import claude, claude_code, codex, deepseek, openai_compatible, scripted
from agentdescent.artifacts import AppendRules, FileTree, KeyedRules, SingleSlot, Strategy, load_tree, tree_runner
from agentdescent.dataloader import tasks_from
from agentdescent.engine import evolve
from agentdescent.engine.cancel import CancelToken
from agentdescent.engine.parallel import PipelineParallel, TensorParallel
from agentdescent.errors import AgentDescentError, AgentError, HeadMoved, LedgerError, UserError
from agentdescent.ledger import Ledger
from agentdescent.reflect import llm_fusion, reflector, tree_reflector
from agentdescent.result import EvolveResult
from agentdescent.scoring import llm_judge, scorer
from agentdescent.step import Policies
from agentdescent.types import Diff, Edit, EvidenceCard, Outcome, Task

__all__ = [
    "AgentDescentError",
    "AgentError",
    "AppendRules",
    "CancelToken",
    "Diff",
    "Edit",
    "EvidenceCard",
    "EvolveResult",
    "FileTree",
    "HeadMoved",
    "KeyedRules",
    "Ledger",
    "LedgerError",
    "Outcome",
    "PipelineParallel",
    "Policies",
    "SingleSlot",
    "Strategy",
    "Task",
    "TensorParallel",
    "UserError",
    "claude",
    "claude_code",
    "codex",
    "deepseek",
    "evolve",
    "llm_fusion",
    "llm_judge",
    "load_tree",
    "openai_compatible",
    "reflector",
    "scorer",
    "scripted",
    "tasks_from",
    "tree_reflector",
    "tree_runner",
]

"""AgentDescent: improve prompts, skills and agents the way gradient descent improves weights.

N workers roll out tasks against a snapshot of an artifact and propose diffs with evidence; one
aggregator merges them (conflict resolution, fusion, a statistical acceptance test) into a git
ledger. See `evolve`.
"""

from agentdescent.engine import evolve
from agentdescent.errors import AgentDescentError, HeadMoved, LedgerError, UserError
from agentdescent.ledger import Ledger
from agentdescent.policies import Policies
from agentdescent.result import EvolveResult
from agentdescent.strategies import AppendRules, FileTree, KeyedRules, SingleSlot, Strategy
from agentdescent.types import Diff, Edit, EvidenceCard, Outcome, Task

__all__ = [
    "AgentDescentError",
    "AppendRules",
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
    "Policies",
    "SingleSlot",
    "Strategy",
    "Task",
    "UserError",
    "evolve",
]

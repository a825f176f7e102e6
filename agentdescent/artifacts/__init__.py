"""Artifacts: how a prompt, a playbook or a folder is held as a `{key: text}` state and changed.

The names are imported when first used (`agentdescent._exports`): a module that needs one part
(`backups`, `registry`) does not import every strategy, the workspace and governance with it.
"""

# ruff: noqa: F401 - the imports under TYPE_CHECKING are there to be read, not used
from typing import TYPE_CHECKING

from agentdescent._exports import by_name, lazy

if TYPE_CHECKING:  # the same names, read by type checkers
    from agentdescent.artifacts.state import State, apply
    from agentdescent.artifacts.strategies import AppendRules, FileTree, InvalidProposal, KeyedRules, SingleSlot, Strategy
    from agentdescent.artifacts.tree import load_tree
    from agentdescent.artifacts.workspace import AgentOutput, tree_runner

_WHERE = by_name({
    "agentdescent.artifacts.state": "State apply",
    "agentdescent.artifacts.strategies": "AppendRules FileTree InvalidProposal KeyedRules SingleSlot Strategy",
    "agentdescent.artifacts.tree": "load_tree",
    "agentdescent.artifacts.workspace": "AgentOutput tree_runner",
})
__getattr__, __dir__ = lazy(__name__, _WHERE)

__all__ = ["AgentOutput", "AppendRules", "FileTree", "InvalidProposal", "KeyedRules", "SingleSlot", "State", "Strategy",
           "apply", "load_tree", "tree_runner"]

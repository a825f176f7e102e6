"""Artifacts: how a prompt, a playbook or a folder is held as a `{key: text}` state and changed."""

from agentdescent.artifacts.state import State, apply
from agentdescent.artifacts.strategies import AppendRules, FileTree, InvalidProposal, KeyedRules, SingleSlot, Strategy
from agentdescent.artifacts.tree import load_tree
from agentdescent.artifacts.workspace import AgentOutput, tree_runner

__all__ = ["AgentOutput", "AppendRules", "FileTree", "InvalidProposal", "KeyedRules", "SingleSlot", "State", "Strategy",
           "apply", "load_tree", "tree_runner"]

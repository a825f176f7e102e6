"""Artifacts: how a prompt, a playbook or a folder is held as a `{key: text}` state and changed."""

from agentdescent.artifacts.state import State, apply
from agentdescent.artifacts.strategies import AppendRules, FileTree, InvalidProposal, KeyedRules, SingleSlot, Strategy

__all__ = ["AppendRules", "FileTree", "InvalidProposal", "KeyedRules", "SingleSlot", "State", "Strategy", "apply"]

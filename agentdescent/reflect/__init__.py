"""Reflection: turning failed rollouts into proposals with a model, and merging overlaps with one.

    reflector(model)                  propose(rendered, task, output, reward) -> one rule, or None
    reflector(model, batch=True)      also reflects on all of a worker's failures at once
    tree_reflector(model, strategy=)  proposes file edits for a FileTree, validated before use
    llm_fusion(model)                 a fusion policy that asks the model to merge overlapping edits

The prompts are text templates in `prompts/`, loaded by `templates`.
"""

from agentdescent.reflect.fusion import LLMFusion, llm_fusion
from agentdescent.reflect.reflector import Reflector, parse_rule, reflector, tagged, unwrap
from agentdescent.reflect.tree_reflector import TreeReflector, tree_reflector

__all__ = ["LLMFusion", "Reflector", "TreeReflector", "llm_fusion", "parse_rule", "reflector", "tagged",
           "tree_reflector", "unwrap"]

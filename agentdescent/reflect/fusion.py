"""A fusion policy that asks a model to merge two edits of one key that git cannot merge."""

from __future__ import annotations

from collections import Counter

from agentdescent.agents.base import Model
from agentdescent.reflect.reflector import tagged
from agentdescent.reflect.templates import fill, template
from agentdescent.step.policies import ThreeWayMerge


class LLMFusion:
    """A fusion policy: git's three-way merge first, the model only for edits that truly overlap."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.stats: Counter[str] = Counter()
        self._merge = ThreeWayMerge()

    def __call__(self, base: str | None, ours: str | None, theirs: str | None) -> str | None | bool:
        merged = self._merge(base, ours, theirs)
        if merged is not False or ours is None or theirs is None:
            return merged
        reply = self.model(fill(template("fusion"), base=base or "", ours=ours, theirs=theirs))
        text = tagged(reply, "merged")
        self.stats["merged" if text else "unreadable"] += 1
        if not text:
            return False
        return text + "\n" if ours.endswith("\n") and not text.endswith("\n") else text


def llm_fusion(model: Model) -> LLMFusion:
    """`Policies(fusion=llm_fusion(model))`: overlapping same-key edits are merged by `model`
    instead of going to the conflict policy; a reply without a <merged> block leaves them in conflict."""
    return LLMFusion(model)

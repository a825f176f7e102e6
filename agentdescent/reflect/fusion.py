"""A fusion policy that asks a model to merge two edits of one key that git cannot merge.

The model's reply is checked at the door before it is read (a size cap, valid Unicode, no NUL),
and the merged text read out of it meets the control-code rule admission applies to every new
text: a fused text reaches the ledger without passing admission again. A reply that fails either
check is unreadable and the edits stay in conflict; the reason is logged. So do they when the
model call fails (an `AgentError`: a wrong key, a reply cut at its output limit, a refusal): one
failed merge is the conflict policy's to settle, not the end of the run.
"""

from __future__ import annotations

import logging
from collections import Counter

from agentdescent.agents.base import Model
from agentdescent.errors import AgentError
from agentdescent.governance.text import NUL_ONLY, text_refusal
from agentdescent.reflect.reflector import tagged
from agentdescent.reflect.templates import fill, template
from agentdescent.returned import as_text, plain_callable
from agentdescent.step.policies import ThreeWayMerge

log = logging.getLogger(__name__)

MAX_REPLY_CHARS = 2_000_000  # one key's merged text (a whole file, at most) and the prose around it


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
        try:
            answer = self.model(fill(template("fusion"), base=base or "", ours=ours, theirs=theirs))
        except AgentError as exc:
            self.stats["error"] += 1
            log.warning("llm_fusion: the model call failed, so the edits stay in conflict: %s", exc)
            return False
        reply = as_text(answer, "the model given to llm_fusion()", what="the reply", strict=True)
        text = self._read(reply)
        self.stats["merged" if text else "unreadable"] += 1
        if not text:
            return False
        return text + "\n" if ours.endswith("\n") and not text.endswith("\n") else text

    def _read(self, reply: str) -> str | None:
        """The merged text in `reply`, or None when there is none or it must not be used."""
        refused = text_refusal(reply, cap=MAX_REPLY_CHARS, controls=NUL_ONLY, what="fusion reply")
        text = None if refused else tagged(reply, "merged")
        if text:
            refused = text_refusal(text, cap=MAX_REPLY_CHARS, what="merged text")
        if refused:
            log.warning("llm_fusion: %s; the edits stay in conflict", refused)
            return None
        return text


def llm_fusion(model: Model) -> LLMFusion:
    """`Policies(fusion=llm_fusion(model))`: overlapping same-key edits are merged by `model`
    instead of going to the conflict policy; a reply without a <merged> block, or a call that fails
    (counted in `stats["error"]` and logged), leaves them in conflict."""
    plain_callable(model, "llm_fusion's model")
    return LLMFusion(model)

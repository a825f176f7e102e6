"""A fusion policy that asks a model to merge two edits of one key that git cannot merge.

The model's reply is checked at the door before it is read (a size cap, valid Unicode, no NUL),
and the merged text read out of it meets the control-code rule admission applies to every new
text: a fused text reaches the ledger without passing admission again. A reply that fails either
check is unreadable and the edits stay in conflict; the reason is logged. So do they when the
model call fails (an `AgentError`: a wrong key, a reply cut at its output limit, a refusal): one
failed merge is the conflict policy's to settle, not the end of the run. The merged text is asked
for in a <merged> block, or a <merged-N> one when a text to merge holds </merged>
(`fileblocks.free_tag`), so that a text holding the tag comes back whole, never cut at it.

One step asks the same merge more than once (`step.resolve` folds the step's changes again once
the contested ones are measured, and every merge of the fold is asked again), so the model's
answers are remembered by what was asked, and the same merge asked again is answered from memory.
Left out: a memory that outlives the process (a resumed run is served what the killed one paid
for by its journal, `engine.persist.replay`, which hands each answer it serves to `remember`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import Counter, OrderedDict
from typing import Literal

from agentdescent.agents.base import Model
from agentdescent.artifacts.fileblocks import free_tag
from agentdescent.errors import AgentError
from agentdescent.governance.text import NUL_ONLY, text_refusal
from agentdescent.reflect.reflector import tagged
from agentdescent.reflect.templates import fill, template
from agentdescent.returned import as_text, plain_callable
from agentdescent.step.policies import ThreeWayMerge

log = logging.getLogger(__name__)

MAX_REPLY_CHARS = 2_000_000  # one key's merged text (a whole file, at most) and the prose around it
MEMO_ENTRIES = 64  # merges remembered: more than one step asks, so each of its repeats is answered
MEMO_CHARS = 4 * MAX_REPLY_CHARS  # merged text remembered in all; what was asked is held as a digest


class LLMFusion:
    """A fusion policy: git's three-way merge first, the model only for edits that truly overlap.

    `stats` counts the model's answers (`merged`, `unreadable`, `error`: one per call) and the
    merges answered from memory instead (`remembered`): the same three texts asked again get the
    answer the model gave them, a merged text or a conflict, without a call. The memory holds the
    newest `MEMO_ENTRIES` answers and at most `MEMO_CHARS` characters of merged text; it is safe to
    share between threads, and a copy or a pickle of the policy takes what it remembers along."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.stats: Counter[str] = Counter()
        self._merge = ThreeWayMerge()
        self._memo: OrderedDict[str, str | Literal[False]] = OrderedDict()  # digest of what was asked -> the answer
        self._lock = threading.Lock()

    def __call__(self, base: str | None, ours: str | None, theirs: str | None) -> str | None | Literal[False]:
        merged = self._merge(base, ours, theirs)
        if merged is not False or ours is None or theirs is None:
            return merged
        asked = _asked(base, ours, theirs)
        with self._lock:
            if asked in self._memo:
                self.stats["remembered"] += 1
                self._memo.move_to_end(asked)
                return self._memo[asked]
        answer, kind = self._ask(base, ours, theirs)  # outside the lock: no thread waits on another's call
        with self._lock:
            self.stats[kind] += 1
            self._remember(asked, answer)
        return answer

    def remember(self, base: str | None, ours: str | None, theirs: str | None, answer: str | None | Literal[False]) -> None:
        """Keep `answer` as the model's to this merge: one a killed run paid for, which the resumed
        run's journal serves once (`engine.persist.replay`); asked again, it comes from memory."""
        if isinstance(answer, (str, bool)) and ours is not None and theirs is not None:
            with self._lock:
                self._remember(_asked(base, ours, theirs), answer)

    def _ask(self, base: str | None, ours: str, theirs: str) -> tuple[str | Literal[False], str]:
        """The model's merge (False where it made none) and which answer it was, for `stats`."""
        tag = free_tag("merged", *(text.lower() for text in (base or "", ours, theirs)))  # tags match in any case
        try:
            answer = self.model(fill(template("fusion"), base=base or "", ours=ours, theirs=theirs, tag=tag))
        except AgentError as exc:
            # Remembered like any answer: the client has already retried what is transient, so what
            # reaches here is a wrong key, a refusal, a reply cut at its output limit (paid for, and cut
            # again when the same is asked) or an outage that outlasted the retries. Asking again within
            # the step would repeat the wait, and often the bill, most likely to fail the same way.
            log.warning("llm_fusion: the model call failed, so the edits stay in conflict: %s", exc)
            return False, "error"
        text = self._read(as_text(answer, "the model given to llm_fusion()", what="the reply", strict=True), tag)
        if not text:
            return False, "unreadable"
        return (text + "\n" if ours.endswith("\n") and not text.endswith("\n") else text), "merged"

    def _remember(self, asked: str, answer: str | Literal[False]) -> None:
        """Keep `answer`, forgetting the oldest answers past the memory's bounds (held under the lock)."""
        self._memo[asked] = answer
        self._memo.move_to_end(asked)
        while len(self._memo) > MEMO_ENTRIES or sum(len(a) for a in self._memo.values() if isinstance(a, str)) > MEMO_CHARS:
            self._memo.popitem(last=False)

    def _read(self, reply: str, tag: str) -> str | None:
        """The merged text in `reply`'s <tag> block, or None when there is none or it must not be used."""
        refused = text_refusal(reply, cap=MAX_REPLY_CHARS, controls=NUL_ONLY, what="fusion reply")
        text = None if refused else tagged(reply, tag)
        if text:
            refused = text_refusal(text, cap=MAX_REPLY_CHARS, what="merged text")
        if refused:
            log.warning("llm_fusion: %s; the edits stay in conflict", refused)
            return None
        return text

    def __getstate__(self) -> dict[str, object]:
        with self._lock:  # a lock does not pickle: each copy has its own memory, and its own lock
            state = {**self.__dict__, "_memo": OrderedDict(self._memo), "stats": Counter(self.stats)}
        del state["_lock"]
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()


def _asked(base: str | None, ours: str, theirs: str) -> str:
    """The three texts of a merge as a digest, the memory's key: it holds no copy of them."""
    return hashlib.sha256(json.dumps([base, ours, theirs]).encode("ascii")).hexdigest()


def llm_fusion(model: Model) -> LLMFusion:
    """`Policies(fusion=llm_fusion(model))`: overlapping same-key edits are merged by `model`
    instead of going to the conflict policy; a reply without its <merged> block, or a call that fails
    (counted in `stats["error"]` and logged), leaves them in conflict. The same merge asked again
    is answered from memory (counted in `stats["remembered"]`), not by another call."""
    plain_callable(model, "llm_fusion's model")
    return LLMFusion(model)

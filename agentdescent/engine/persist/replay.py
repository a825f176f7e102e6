"""Answers a killed process paid for, served again to the resumed run that asks the same.

A round cut short by a kill is run again from the checkpoint: the same turns, on the same
version, with the same rollouts (from the rollout journal), so each worker asks its reflector the
same again, and the step asks its fusion model the same again. What the killed process was
answered is in the answer journal (`checkpoint.RunFiles`); a question asked again (`asked`: the
version's view and the failures shown, or the three texts to merge) gets that answer back,
each answer once, instead of being paid for twice.

    answers = Answers();  answers.fill([(key, reflection)]);  answers.take(key) is reflection

Left out: the journal itself, and answers of rounds a checkpoint already holds (a resumed run
never runs those again, so they are never asked for).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentdescent.agents.base import ModelUsage, metering
from agentdescent.step.policies import FusionPolicy
from agentdescent.types import Rollout, Spend


def asked(view: str, group: Sequence[Rollout]) -> str:
    """What a reflection was asked, as a short digest: the version's view key and each failure shown."""
    return _digest(["reflection", view, [[r.task.id, str(r.output), r.reward] for r in group]])


def fusion_asked(base: str | None, ours: str | None, theirs: str | None) -> str:
    """What a fusion was asked, as a short digest of the three texts."""
    return _digest(["fusion", base, ours, theirs])


def _digest(shown: object) -> str:
    return hashlib.sha256(json.dumps(shown).encode("ascii")).hexdigest()[:32]


class Fused(BaseModel):
    """What a fusion that called a model answered: the merged text, None (drop the key) or False
    (no merge), and what its calls cost."""

    model_config = ConfigDict(frozen=True)

    merged: str | None | Literal[False]
    spend: Spend = Field(default_factory=Spend)


class Answers:
    """Journalled answers by what they were asked; `take` hands each out at most once."""

    def __init__(self) -> None:
        self._kept: dict[str, list[object]] = {}
        self._lock = threading.Lock()

    def fill(self, entries: Iterable[tuple[str, object]]) -> None:
        with self._lock:
            for key, answer in entries:
                self._kept.setdefault(key, []).append(answer)

    def take(self, key: str) -> object | None:
        with self._lock:
            kept = self._kept.get(key)
            return kept.pop(0) if kept else None


@dataclass(kw_only=True)
class JournaledFusion:
    """A fusion policy whose model-made answers are journalled, and served from the journal to a
    resumed run that asks the same. A fusion that called no model (git's merge) is left alone:
    it costs nothing to ask again. A policy that remembers its answers (`LLMFusion.remember`) is
    told of each one served from the journal, so that the same merge asked again later in the step
    is answered from its memory, as it would have been had the process not been killed."""

    inner: FusionPolicy
    journal: Callable[[str, Fused], None]
    answers: Answers = field(default_factory=Answers)

    def __call__(self, base: str | None, ours: str | None, theirs: str | None) -> str | None | Literal[False]:
        key = fusion_asked(base, ours, theirs)
        again = self.answers.take(key)
        if isinstance(again, Fused):
            remember = getattr(self.inner, "remember", None)
            if callable(remember):
                remember(base, ours, theirs, again.merged)
            return again.merged
        with metering(ModelUsage()) as meter:
            merged = self.inner(base, ours, theirs)
        spent = meter.spent()
        if spent.calls:
            self.journal(key, Fused(merged=merged, spend=spent))
        return merged

"""Validation: when `dev` is measured on the held-out set, and measuring it only as far as it matters.

Held-out evaluation is for promotion to `stable`, for the target and for the reward the user is
told; it need not follow every commit. `Validator.due` asks the validation policy after a commit;
the loop also validates before patience would end the run and at its end. A measurement runs in
two waves, a quarter of the held-out set first: when the first wave already shows that dev can
no longer beat `stable` (the promotion policy at the best reward the rest could give) nor reach
the target, the rest is not run. That bound is exact, so a promotion always rests on the whole
held-out set, as the starting and final rewards do.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentdescent.engine.evaluation import Evaluator
from agentdescent.step.policies import PromotionPolicy, ValidationPolicy
from agentdescent.types import Task


@dataclass(kw_only=True)
class Validator:
    evaluator: Evaluator
    held_out: Sequence[Task]
    train_ids: frozenset[str]
    schedule: ValidationPolicy
    promotion: PromotionPolicy
    target: float | None

    def due(self, dev_state: Mapping[str, str], leads: int) -> bool:
        """Whether the validation policy asks for dev's held-out reward now."""
        usage = self.evaluator.usage
        known = self.evaluator.known(dev_state)
        return self.schedule(validated=usage.validate, calls=usage.calls, held_out=len(self.held_out),
                             dev_train={k: v for k, v in known.items() if k in self.train_ids}, leads=leads,
                             target=self.target)

    def whole(self, state: Mapping[str, str]) -> float:
        """The mean reward of `state` on the whole held-out set."""
        return self.evaluator.mean(state, self.held_out, "validate")

    def measure(self, state: Mapping[str, str], best: float) -> tuple[float, bool]:
        """(the held-out reward of `state`, True); or (the most it could still reach, False) when it
        was stopped after the first wave, since it can no longer be promoted over `best` nor reach
        the target."""
        n = len(self.held_out)
        first = self.held_out[: max(1, n // 4)]
        total = sum(self.evaluator.score([(state, first)], "validate")[0])
        ceiling = (total + n - len(first)) / n  # every reward is at most 1
        if len(first) < n and not self.promotion(best, ceiling) and (self.target is None or ceiling < self.target):
            return ceiling, False
        rest = self.held_out[len(first):]
        return (total + sum(self.evaluator.score([(state, rest)], "validate")[0])) / n, True

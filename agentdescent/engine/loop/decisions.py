"""The decisions of the loop, each a small Protocol with a shipped default.

    task_sampler  which train tasks each worker rolls out this round (`Epochs`, `FailuresFirst`, `RandomMinibatches`)
    proposal      which of a worker's rollouts it reflects on (`WorstFirst`)
    validation    when `dev` is measured on the held-out set (`Amortized`)
    promotion     whether `dev` replaces `stable` after a held-out evaluation (`OnHeldOutGain`)

A run's `config.Policies` bundles these with the optimizer step's (`step.policies`). Each is a
pure function of what it is given, so that a run is reproducible and resumable. The engine
passes their arguments by position (`/` in the Protocols: any parameter names fit), validation's
by keyword; what a policy is only read for is a read-only property (a frozen dataclass's field
fits). What they leave out: carrying the decisions out (sampling, worker, validation).
"""

from __future__ import annotations

import functools
import itertools
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from agentdescent.step import stats
from agentdescent.step.ranges import number, whole
from agentdescent.types import Rollout, Task


class TaskSampler(Protocol):
    def __call__(
        self, train: Sequence[Task], n_workers: int, first_turn: int, seed: int, known: Mapping[str, float], /
    ) -> list[list[Task]]:
        """Minibatches for `n_workers` worker turns, numbered from `first_turn` in the run.

        Returns `n_workers` lists of the `train` tasks it was given (the engine asks for each
        turn's spare minibatches too; an empty list leaves its turn nothing to roll out); fewer
        lists than the turns dealt, or a task it was not given, stops the run with a `UserError`.
        `known` holds the rewards of the snapshot the turns will use, for the train tasks already
        measured on it. A pure function of its arguments, so that a run is reproducible and
        resumable; batches of one call should differ so that workers see different tasks."""


@functools.lru_cache(maxsize=64)
def _epoch_order(seed: int, epoch: int, n: int) -> tuple[int, ...]:
    order = list(range(n))
    random.Random(f"{seed}:epoch:{epoch}").shuffle(order)
    return tuple(order)


def _check_size(sampler: Epochs | FailuresFirst | RandomMinibatches) -> None:
    whole(sampler, "size", sampler.size, least=1, means="the tasks of each worker's minibatch; with none a turn would "
          "roll out nothing and the run learn nothing")


@dataclass(frozen=True)
class Epochs:
    """Walk the train set in a fresh shuffled order each epoch: every task is seen once before
    any is seen twice, so a rare failure is reached within an epoch rather than by luck."""

    size: int = 4

    def __post_init__(self) -> None:
        _check_size(self)

    def __call__(
        self, train: Sequence[Task], n_workers: int, first_turn: int, seed: int, known: Mapping[str, float]
    ) -> list[list[Task]]:
        start = first_turn * self.size
        picks = [
            train[_epoch_order(seed, epoch, len(train))[index]]
            for epoch, index in (divmod(p, len(train)) for p in range(start, start + n_workers * self.size))
        ]
        return [picks[i * self.size : (i + 1) * self.size] for i in range(n_workers)]


@dataclass(frozen=True)
class FailuresFirst:
    """Deal tasks known to fail first, one to each worker in turn (at most half the slots, so that
    the minibatches keep exploring), then fill each minibatch from the epoch walk: unmeasured
    tasks first, then the rest. A worker whose minibatch holds no failure has nothing to learn
    from. `known` holds the snapshot's measured rewards and the engine's leads (tasks seen
    failing on an earlier snapshot)."""

    size: int = 4

    def __post_init__(self) -> None:
        _check_size(self)

    def __call__(
        self, train: Sequence[Task], n_workers: int, first_turn: int, seed: int, known: Mapping[str, float]
    ) -> list[list[Task]]:
        need = n_workers * self.size
        failing = [t for t in train if known.get(t.id, 1.0) < 1.0]
        random.Random(f"{seed}:failing:{first_turn}").shuffle(failing)
        failing = failing[: max(1, need // 2)]
        batches: list[list[Task]] = [failing[i::n_workers] for i in range(n_workers)]  # failures spread out
        walk = [t for batch in Epochs(1)(train, len(train), first_turn * self.size, seed, known) for t in batch]
        dealt = {t.id for t in failing}
        rest = [t for t in walk if t.id not in known] + [t for t in walk if t.id in known and t.id not in dealt]
        fill = itertools.cycle(rest or failing)  # in walk order, so consecutive calls continue the walk
        for batch in batches:
            while len(batch) < self.size:
                batch.append(next(fill))
        return batches


@dataclass(frozen=True)
class RandomMinibatches:
    """Shuffle the whole train set for every call and deal it out; wrap only when it runs short."""

    size: int = 4

    def __post_init__(self) -> None:
        _check_size(self)

    def __call__(
        self, train: Sequence[Task], n_workers: int, first_turn: int, seed: int, known: Mapping[str, float]
    ) -> list[list[Task]]:
        order = list(train)
        random.Random(f"{seed}:batch:{first_turn}").shuffle(order)
        need = n_workers * self.size
        deck = (order * (need // len(order) + 1))[:need]
        return [deck[i * self.size : (i + 1) * self.size] for i in range(n_workers)]


class ProposalPolicy(Protocol):
    @property
    def scouts(self) -> int:
        """Spare minibatches a worker rolls out when its own holds nothing to reflect on."""

    def __call__(self, rollouts: Sequence[Rollout], /) -> list[Rollout]:
        """The rollouts to reflect on, most useful first; each becomes at most one diff."""


@dataclass(frozen=True)
class WorstFirst:
    """Reflect on the lowest-reward rollouts below `below`, at most `max_proposals` of them.

    A worker whose minibatch holds nothing to reflect on rolls out its `scouts` spare
    minibatches in one wave and reflects on what fails there, rather than waiting idle at the
    barrier."""

    max_proposals: int = 2
    below: float = 1.0
    scouts: int = 1  # one spare minibatch: more find failures a little sooner, for more calls

    def __post_init__(self) -> None:
        whole(self, "max_proposals", self.max_proposals, least=1,
              means="the failures a worker reflects on in a turn; with none it would pay for rollouts and never reflect")
        number(self, "below", self.below, low=0, low_in=False, high=1, means="a rollout whose reward is below it is "
               "reflected on; rewards are in [0, 1], so at 0 none would be, and above 1 a passing one would")
        check_scouts(self, self.scouts)

    def __call__(self, rollouts: Sequence[Rollout]) -> list[Rollout]:
        # once per task: a small train set can deal one task twice into a minibatch
        failed = {r.task.id: r for r in rollouts if r.reward < self.below}.values()
        return sorted(failed, key=lambda r: r.reward)[: self.max_proposals]


def check_scouts(policy: object, scouts: object) -> None:
    """A proposal policy's `scouts` (a shipped one's or the caller's own), which the sampler deals
    a turn beside its minibatch."""
    whole(policy, "scouts", scouts, least=0,
          means="the spare minibatches a worker rolls out when its own holds no failure; 0: none")


class ValidationPolicy(Protocol):
    def __call__(self, *, validated: int, calls: int, held_out: int, dev_train: Mapping[str, float], leads: int,
                 target: float | None) -> bool:
        """Measure `dev` on the held-out set now, after a commit? `validated` of the run's `calls`
        went to held-out evaluation so far; `dev_train` holds dev's train rewards measured so far;
        `leads` counts train tasks seen failing on an earlier version and not seen passing since."""


@dataclass(frozen=True)
class Amortized:
    """Validate after a commit while held-out evaluation, this one counted, is at most `share` of
    the run's calls; and whenever the target may be at hand: no train task is known to fail (no
    leads) and dev's measured train rewards (at least `min_known` of them) reach the target on
    average. The run also validates before patience ends it and at its end, and `stable` moves
    only on a whole held-out pass."""

    share: float = 0.2
    min_known: int = 8

    def __post_init__(self) -> None:
        number(self, "share", self.share, low=0, high=1, means="the most of the run's calls held-out evaluation "
               "takes; 0: only when the target may be at hand, before patience ends the run and at its end; 1: after "
               "every commit")
        whole(self, "min_known", self.min_known, least=1,
              means="dev's measured train rewards whose mean may call a validation at the target")

    def __call__(self, *, validated: int, calls: int, held_out: int, dev_train: Mapping[str, float], leads: int,
                 target: float | None) -> bool:
        if (target is not None and not leads and len(dev_train) >= self.min_known
                and stats.mean_reward(list(dev_train.values())) >= target):
            return True
        return validated + held_out <= self.share * (calls + held_out)


class PromotionPolicy(Protocol):
    def __call__(self, stable_reward: float, dev_reward: float, /) -> bool: ...


@dataclass(frozen=True)
class OnHeldOutGain:
    """Promote `dev` to `stable` when its held-out reward beats stable's by more than `min_gain`."""

    min_gain: float = 0.0

    def __post_init__(self) -> None:
        number(self, "min_gain", self.min_gain, low=0, high=1, high_in=False, means="how far dev's held-out reward "
               "must beat stable's; rewards are in [0, 1], so below 0 a worse dev would replace stable, and from 1 "
               "none could")

    def __call__(self, stable_reward: float, dev_reward: float) -> bool:
        return dev_reward > stable_reward + self.min_gain

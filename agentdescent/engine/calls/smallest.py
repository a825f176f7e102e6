"""The smallest run: the fewest calls a run that can commit a change takes. A `max_calls` under it
is refused, by `evolve` and by `plan` alike (`refusal`), since such a run stops before it can
learn anything.

A run measures its held-out set at the start (drawing up to `calibration` of those tasks a second
time while it does not know whether its rewards are samples) and measures its last version on it
at the end. Between them, one round at the least: each worker rolls out its minibatch on head and
reflects once, and the step tests the change that makes, head and change on up to the acceptance
test's `size` train tasks (head's minibatch rollouts count among head's, from the cache). A later
round at the least is a reflection a worker and the test of one change (head's rollouts are then
mostly the last change's, cached).

What it leaves out: the high end of a run, and money (`runs.quote`); rounds that find nothing to
reflect on, which cost less.

    smallest_run(Sizes(train=17, held_out=7, workers=2)) == 57   # 7 + 7 drawn again + (17 + 17 + 2) + 7
"""

from __future__ import annotations

import math
from dataclasses import dataclass

MINIBATCH, PROBES, CALIBRATION = 4, 32, 24  # the shipped policies' task_sampler.size, acceptance.size and .calibration


@dataclass(frozen=True, kw_only=True)
class Sizes:
    """What a run's least calls depend on: its split, its workers, and the policies' sizes."""

    train: int
    held_out: int
    workers: int
    minibatch: int = MINIBATCH  # tasks a worker rolls out a turn (the task sampler's `size`)
    probes: int = PROBES  # train tasks the acceptance test scores head and a change on, at most (its `size`)
    calibration: int = CALIBRATION  # held-out tasks drawn twice at the start (0: the rewards' kind is declared)

    @classmethod
    def of(cls, policies: object, *, train: int, held_out: int, workers: int) -> Sizes:
        """The sizes of a run with these `policies` (a `config.Policies`; a policy of the caller's
        without a size counts as the shipped one's)."""
        acceptance = getattr(policies, "acceptance", None)
        detects = getattr(acceptance, "rewards", "exact") == "detect"
        return cls(train=train, held_out=held_out, workers=workers,
                   minibatch=getattr(getattr(policies, "task_sampler", None), "size", MINIBATCH),
                   probes=getattr(acceptance, "size", PROBES),
                   calibration=getattr(acceptance, "calibration", CALIBRATION) if detects else 0)

    def with_split(self, *, train: int, held_out: int) -> Sizes:
        return Sizes(train=train, held_out=held_out, workers=self.workers, minibatch=self.minibatch,
                     probes=self.probes, calibration=self.calibration)

    def with_workers(self, workers: int) -> Sizes:
        return Sizes(train=self.train, held_out=self.held_out, workers=workers, minibatch=self.minibatch,
                     probes=self.probes, calibration=self.calibration)

    @property
    def tested(self) -> int:
        """The train tasks one acceptance test scores a change on, at most."""
        return min(self.probes, self.train)

    @property
    def start(self) -> int:
        """The held-out measurement at the start, and its draws again."""
        return self.held_out + min(self.calibration, self.held_out)

    @property
    def first_round(self) -> int:
        """A round at the least, on a head not measured yet: the minibatches, a reflection a worker,
        and one test (head on the tasks the minibatches did not already give, and the change)."""
        head = max(min(self.workers * self.minibatch, self.train), self.tested)
        return head + self.tested + self.workers

    @property
    def later_round(self) -> int:
        """A further round at the least: a reflection a worker and one change's test."""
        return self.tested + self.workers


def smallest_run(sizes: Sizes) -> int:
    """The held-out set measured at the start and at the end, and one round at the least."""
    return sizes.start + sizes.first_round + sizes.held_out


def refusal(sizes: Sizes, *, max_calls: int | None, tasks: int) -> str | None:
    """Why `max_calls` cannot pay for the smallest run, with the budget that can and the other ways
    out (fewer workers, fewer of the `tasks` held out); None when it can, or when there is no cap."""
    least = smallest_run(sizes)
    if max_calls is None or max_calls >= least:
        return None
    ways = [f"Give max_calls of at least {least:,}"]
    fewer_workers = next((w for w in range(sizes.workers - 1, 0, -1) if smallest_run(sizes.with_workers(w)) <= max_calls),
                         0)
    if fewer_workers:
        ways.append(f"run at most {fewer_workers} worker{'s' if fewer_workers > 1 else ''}")
    if sizes.held_out < tasks:  # held_out_frac=0 measures every task on the held-out set: none to hold out fewer of
        fewer_held = next((h for h in range(sizes.held_out - 1, 0, -1)
                           if smallest_run(sizes.with_split(train=tasks - h, held_out=h)) <= max_calls), 0)
        if fewer_held:
            ways.append(f"hold out at most {fewer_held:,} of the {tasks:,} tasks "
                        f"(held_out_frac={fraction_within(fewer_held, tasks):g})")
    drawn = min(sizes.calibration, sizes.held_out)
    again = f" (and {drawn:,} of them drawn again, to learn whether the rewards are samples)" if drawn else ""
    return (f"max_calls={max_calls:,} is below the smallest run, {least:,} calls: the {sizes.held_out:,} held-out tasks "
            f"measured at the start{again} and at the end ({sizes.start + sizes.held_out:,}), and one round of "
            f"{sizes.workers} worker{'s' if sizes.workers > 1 else ''} ({sizes.first_round:,}: the minibatches, a "
            f"reflection each, and the acceptance test of the change on up to {sizes.tested:,} train tasks, head's "
            "rollouts and the change's); such a run stops before it can learn anything. " + ", or ".join(ways))


def fraction_within(count: int, total: int) -> float:
    """The largest held_out_frac of two significant digits that holds at most `count` of `total` tasks
    out (the split rounds `total * frac`): fraction_within(15, 84) == 0.17"""
    exact = count / total
    scale = 10 ** (1 - math.floor(math.log10(exact)))
    return math.floor(exact * scale) / scale

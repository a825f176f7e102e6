"""Statistics for the acceptance test: paired comparisons and Beta posteriors.

Rewards are in [0, 1]. A paired comparison of candidate and head on the same tasks counts the
reward gained on each task as a (fractional) win and the reward lost as a loss; ties carry no
evidence. The posterior of "the candidate beats head on a task where they differ" is
Beta(prior + wins, prior + losses), and the test is its mass above one half.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import ModuleType


@functools.cache
def _special() -> ModuleType:
    """scipy.special (the incomplete beta function), imported when a run first needs it: most
    processes that import the package (the CLI's verbs, the MCP server) never do, and scipy is a
    third of the package's import time. scipy.stats would double it again.

    A Ctrl-C is held until the import is done: numpy, which it imports, cannot be imported again
    in a process where an interrupt cut its first import short, and every later run there would
    fail. `evolve` asks for it before its run starts, on the caller's thread."""
    with _interrupts_held():
        from scipy import special

    return special


def load() -> None:
    """Import what the statistics need now (see `_special`)."""
    _special()


@contextlib.contextmanager
def _interrupts_held() -> Iterator[None]:
    """Within the block, a SIGINT is noted, not raised; it is raised again once the block ends.
    Only the main thread receives one as KeyboardInterrupt: elsewhere the block holds nothing."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGINT) is None:
        yield
        return
    noted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: noted.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if noted:
        signal.raise_signal(signal.SIGINT)


@dataclass(frozen=True, kw_only=True)
class PairedComparison:
    wins: float
    losses: float
    n: int
    mean_delta: float

    @property
    def decisive(self) -> float:
        return self.wins + self.losses


def mean_reward(rewards: Sequence[float]) -> float:
    """The mean reward, 0 when there is none. mean_reward([1, 0, 0.5]) == 0.5"""
    return sum(rewards) / len(rewards) if rewards else 0.0


def paired(candidate: Sequence[float], head: Sequence[float], weights: Sequence[float] | None = None) -> PairedComparison:
    """Compare rewards task by task, each change weighted by `weights` (default 1).
    paired([1, 0, 1], [0, 0, 1]) -> wins=1, losses=0, n=3; with weights [0.5, 1, 1], wins=0.5."""
    if len(candidate) != len(head) or (weights is not None and len(weights) != len(head)):
        raise ValueError("paired comparison needs rewards on the same tasks")
    deltas = [(c - h) * w for c, h, w in zip(candidate, head, weights if weights is not None else [1.0] * len(head))]
    wins = sum(d for d in deltas if d > 0)
    losses = -sum(d for d in deltas if d < 0)
    mean = sum(deltas) / len(deltas) if deltas else 0.0
    return PairedComparison(wins=wins, losses=losses, n=len(deltas), mean_delta=mean)


def prob_improvement(wins: float, losses: float, prior: float = 1.0) -> float:
    """P(candidate wins more often than it loses) under Beta(prior+wins, prior+losses).

    prob_improvement(0, 0) == 0.5; prob_improvement(2, 0) == 0.875.
    """
    return float(1.0 - _special().betainc(prior + wins, prior + losses, 0.5))  # the Beta's mass above 1/2


def prob_harm_below(kept: float, broken: float, max_harm: float, prior: float = 1.0) -> float:
    """P(the candidate breaks fewer than `max_harm` of the tasks head passes), under the posterior
    Beta(prior + broken, prior + kept) of its harm rate, after it kept `kept` of them and broke
    `broken`. prob_harm_below(15, 0, 0.1) ≈ 0.81: fifteen kept and none broken make a harm rate
    under one in ten likely at 0.8, not certain."""
    return float(_special().betainc(prior + broken, prior + kept, max_harm))

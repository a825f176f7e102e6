"""What a user writes against the package's hints, type-checked by tests/test_typing.py, never run.

Where the engine passes a callable's arguments by position, a function or lambda fits whatever it
names them; a shipped policy or strategy is its own Protocol, and so is a frozen dataclass of the
user's; a path may be any `os.PathLike`; `tasks_from`'s callables take the rows as they are typed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from agentdescent import (
    AppendRules,
    BetaAcceptance,
    BetterEvidence,
    CancelToken,
    KeyedRules,
    OnHeldOutGain,
    Policies,
    SingleSlot,
    Staleness,
    Task,
    ThreeWayMerge,
    WorstFirst,
    evolve,
    scripted,
    tasks_from,
)
from agentdescent.artifacts.strategies import Strategy
from agentdescent.engine.calls.evaluation import RewardFn, RunFn
from agentdescent.engine.loop.decisions import PromotionPolicy, ProposalPolicy, TaskSampler
from agentdescent.engine.loop.stopping import Progress, StopRule
from agentdescent.engine.loop.worker import ProposeFn
from agentdescent.step.policies import AcceptancePolicy, ConflictPolicy, FusionPolicy
from agentdescent.step.staleness import HOW, StalenessPolicy
from agentdescent.types import Diff, Rollout
from agentdescent.usage import Usage


def score(t: Task, out: str) -> float:
    return float(out == t.gold)


def solve(view: str, t: Task) -> str:
    return f"{view}\n{t.prompt}"


def suggest(view: str, t: Task, out: str, got: float) -> str | None:
    return None if got else "answer with the number only"


def enough(now: Progress, spent: Usage) -> str | None:
    return "0.9 is enough" if now.best >= 0.9 else None


def answer(row: dict[str, str]) -> str:
    return row["answer"]


def deal(pool: Sequence[Task], workers: int, turn: int, seed: int, seen: Mapping[str, float]) -> list[list[Task]]:
    return [list(pool)[:4] for _ in range(workers)]


def keep_first(rivals: Sequence[Diff], behind: Sequence[int], eta: StalenessPolicy) -> int:
    return 0


def never_merge(old: str | None, mine: str | None, yours: str | None) -> str | None | Literal[False]:
    return False


def any_gain(stable: float, dev: float) -> bool:
    return dev > stable


@dataclass(frozen=True)
class FirstFailure:
    """A proposal policy of one's own, frozen as the shipped ones are."""

    scouts: int = 0

    def __call__(self, rollouts: Sequence[Rollout]) -> list[Rollout]:
        return [r for r in rollouts if r.reward < 1.0][:1]


def callables_by_shape() -> None:
    reward: RewardFn = score
    run: RunFn = solve
    propose: ProposeFn = suggest
    stop: StopRule = enough
    quick: list[RewardFn] = [lambda task, output: 1.0, lambda t, o: 0.0]
    rules: list[StopRule] = [CancelToken(), lambda p, u: None]
    decisions: tuple[TaskSampler, ConflictPolicy, FusionPolicy, PromotionPolicy] = (deal, keep_first, never_merge, any_gain)
    assert reward and run and propose and stop and quick and rules and decisions


def shipped_objects_are_their_protocols() -> None:
    strategies: list[Strategy] = [AppendRules(), SingleSlot("Answer briefly."), KeyedRules(["billing"])]
    acceptance: AcceptancePolicy = BetaAcceptance()
    proposals: list[ProposalPolicy] = [WorstFirst(), FirstFailure()]
    policies = Policies(proposal=FirstFailure(), acceptance=acceptance, conflict=BetterEvidence(), fusion=ThreeWayMerge(),
                        promotion=OnHeldOutGain(), staleness=Staleness("rebase"))
    every_staleness = [Staleness(how) for how in HOW]
    assert strategies and proposals and policies and every_staleness


def a_run(folder: os.PathLike[str], rows: list[dict[str, str]], lookup: Mapping[str, str], pending: Future[str]) -> None:
    tasks = tasks_from(rows, prompt="question", gold=answer, id=lambda row: row["id"])
    token = CancelToken()
    token.on_cancel(pending.cancel)  # what a callback returns is not read
    agent = scripted(lambda prompt, cwd: lookup.get(prompt, "?"))
    result = evolve(tasks, score, run=solve, propose=suggest, strategy=SingleSlot(), stop=[enough, token],
                    store=folder, on_event=lambda event: token.cancelled or print(event))
    assert result.final_reward is None or result.final_reward >= 0.0
    assert agent and Path(folder)

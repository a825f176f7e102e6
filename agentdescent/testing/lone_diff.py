"""One diff judged by the real optimizer step on the noisy reference domain (`testing.noisy`): the
gate's verdict on a known-good, vague or harmful rule, and what that verdict cost, for the tests
and `bench/gate_error_rates.py`.

Head holds the right rules of the categories `learnt`; the diff adds one rule, made from a task of
its category that head failed when rolled out (found as a worker finds one). The step runs on a
real ledger in a temporary folder, its rollouts through the run's own `Evaluator`:

    with LoneDiff(NoisyLevels(p=0.85, q=0.1), seed=3) as trial:
        trial.judge(harmful_rule(5, "plain"), category=5)     # "rejected_by_test", most seeds
        trial.usage.calls                                      # the rollouts it cost

Not imported by `agentdescent.testing` itself: it needs git, which a unit of work does not.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Mapping, Sequence

from agentdescent.artifacts.strategies import AppendRules, rule_key
from agentdescent.config import Policies
from agentdescent.engine.calls.evaluation import Evaluator
from agentdescent.engine.calls.executors import ThreadExecutor
from agentdescent.governance import Governance
from agentdescent.ledger import Ledger
from agentdescent.step.aggregator import Aggregator
from agentdescent.step.policies import AcceptancePolicy, BetaAcceptance
from agentdescent.testing.noisy import NoisyDomain, NoisyLevels, right_rule
from agentdescent.types import Diff, Edit, EvidenceCard, Task
from agentdescent.usage import Usage


class NoFailure(Exception):
    """Head passed every task of the category on its first draw: there is no failure to judge from."""


class LoneDiff:
    """A step's worth of the gate on the noisy domain (see the module docstring); close it, or use
    it as a context manager."""

    def __init__(self, levels: NoisyLevels, *, seed: int, learnt: Sequence[int] = (0, 1, 2, 3),
                 acceptance: AcceptancePolicy = BetaAcceptance(rewards="sampled")) -> None:
        self.domain, self.seed, self.acceptance = NoisyDomain(levels, seed=seed), seed, acceptance
        self.strategy, self.usage, self.tasks = AppendRules(), Usage(), self.domain.tasks()
        self.head: Mapping[str, str] = {rule_key(r): r for r in (right_rule(c) for c in learnt)}
        self._folder = tempfile.mkdtemp(prefix="agentdescent-lone-diff-")
        self.pool = ThreadExecutor(16, name="agentdescent-lone-diff")
        self.evaluator = Evaluator(strategy=self.strategy, run=self.domain.run, reward=self.domain.reward,
                                   pool=self.pool, usage=self.usage)
        self.ledger = Ledger(self._folder)
        self.ledger.commit("a", dict(self.head), expected_version=0, message="head")
        evaluator = self.evaluator
        self.aggregator = Aggregator(
            ledger=self.ledger, artifact_id="a", governance=Governance(), policies=Policies(acceptance=acceptance),
            train=self.tasks, score=evaluator.score, known=evaluator.known, again=evaluator.again,
            drawn=lambda: (self.usage.repeated, self.usage.disagreed), draws=evaluator.draws)

    def failure(self, category: int) -> Task:
        """A task of `category` head fails on its first draw; `NoFailure` when there is none."""
        for task in (t for t in self.tasks if t.meta["category"] == category):
            if self.evaluator.rewards([self.head], [task])[0][0] < 1.0:
                return task
        raise NoFailure(f"head passed every task of c{category} on its first draw")

    def judge(self, rule: str, *, category: int) -> str:
        """The step's verdict (an outcome kind) on a diff adding `rule`, made from a failure of `category`."""
        evidence = self.failure(category)
        diff = Diff(id="d1", artifact_id="a", base_version=1, author="w0",
                    evidence=EvidenceCard(task_ids=[evidence.id], rewards=[0.0], rationale=rule),
                    edits=[Edit(key=rule_key(rule), before=None, after=rule)])
        sample = self.acceptance.sample(self.tasks, random.Random(self.seed))
        return self.aggregator.step([diff], 0, sample=sample).outcomes[0].kind

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.ledger.close()
        shutil.rmtree(self._folder, ignore_errors=True)

    def __enter__(self) -> LoneDiff:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""Stale diffs: each policy's decision, η in the test, and s, η and the decision on the record."""

from __future__ import annotations

import pytest

from agentdescent import Policies, Task
from agentdescent.governance import Governance
from agentdescent.ledger import Ledger
from agentdescent.step.aggregator import Aggregator
from agentdescent.step.policies import BetaAcceptance
from agentdescent.step.staleness import Staleness
from agentdescent.types import Diff, Edit, EvidenceCard
from tests.doubles import fast_and_slow

TASKS = [Task(id=f"t{i}", prompt=str(i)) for i in range(8)]


def reward_of(state, task):
    """Task t0 passes once a key says "fix0"; the others pass at head already."""
    return 1.0 if task.id != "t0" or "fix0" in " ".join(state.values()) else 0.0


def stale_step(tmp_path, staleness, lag_budget):
    """One diff made on version 1, judged at version 2 (s = 1), that fixes the one failure it came from."""
    ledger = Ledger(tmp_path / "ledger")
    ledger.commit("a", {"base": "one"}, expected_version=0, message="seed")
    ledger.commit("a", {"base": "one", "other": "two"}, expected_version=1, message="another writer")
    agg = Aggregator(ledger=ledger, artifact_id="a", governance=Governance(), train=TASKS, lag_budget=lag_budget,
                     score=lambda jobs: [[reward_of(state, t) for t in ts] for state, ts in jobs],
                     policies=Policies(staleness=staleness, acceptance=BetaAcceptance(min_tasks=1)))
    diff = Diff(id="d1", artifact_id="a", base_version=1, author="w0",
                evidence=EvidenceCard(task_ids=["t0"], rewards=[0.0]),
                edits=[Edit(key="fix", before=None, after="fix0")])
    return agg.step([diff], step=0, sample=TASKS), ledger


@pytest.mark.parametrize("how, budget, kind, decision, eta", [
    ("drop", 3, "committed", "admitted", 1.0),
    ("drop", 0, "dropped_stale", "dropped", 1.0),
    ("rebase", 0, "committed", "rebased", 1.0),
    ("discount", 3, "rejected_by_test", "discounted", 1 / 1.5),  # one win weighs 2/3: P(improve) 0.69 < 0.7
])
def test_each_policy_decides_and_the_decision_is_recorded(tmp_path, how, budget, kind, decision, eta):
    report, ledger = stale_step(tmp_path, Staleness(how), budget)
    assert [o.kind for o in report.outcomes] == [kind]
    assert report.staleness == {"d1": 1} and report.decisions == {"d1": decision}
    assert report.eta["d1"] == pytest.approx(eta)
    if kind == "committed":
        trailers = ledger.log()[0].trailers
        assert trailers["Staleness"] == "1" and trailers["Staleness-Decisions"] == decision and trailers["Eta"] == "1"


def test_a_discounted_diff_lands_when_its_evidence_outweighs_its_age(tmp_path):
    report, _ = stale_step(tmp_path, Staleness("discount", decay=0.1), 3)  # η(1) = 0.91: P(improve) 0.73
    assert [o.kind for o in report.outcomes] == ["committed"]


def test_an_asynchronous_run_records_staleness_decisions_and_eta_in_its_history():
    """One worker is slow, so its diffs arrive after the fast one's landed (s >= 1)."""
    result = fast_and_slow(rounds=4, lag_budget=0, policies=Policies(staleness=Staleness("rebase")))
    records = [(s, d, e) for h in result.history for s, d, e in zip(h.staleness, h.stale_decisions, h.eta)]
    assert records and all(len(h.staleness) == len(h.stale_decisions) == len(h.eta) == len(h.diffs)
                           for h in result.history)
    assert all((s == 0) == (d == "fresh") and e == 1.0 for s, d, e in records)
    assert any(d == "rebased" for _, d, _ in records)  # past a budget of 0, yet not dropped
    assert "dropped_stale" not in result.outcomes()

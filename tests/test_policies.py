import dataclasses
import random
from collections import Counter

import pytest

from agentdescent.config import Policies
from agentdescent.engine.loop.decisions import Epochs, FailuresFirst, OnHeldOutGain, RandomMinibatches, WorstFirst
from agentdescent.errors import UserError
from agentdescent.step.policies import BetaAcceptance, BetterEvidence, ThreeWayMerge
from agentdescent.step.staleness import Staleness
from agentdescent.types import Diff, Edit, EvidenceCard, Rollout, Task


def tasks(n, prefix="t"):
    return [Task(id=f"{prefix}{i}", prompt=f"item {i}") for i in range(n)]


def rollout(i, reward):
    return Rollout(task=Task(id=f"t{i}", prompt="p"), output="o", reward=reward)


def diff(i, *, n_tasks=1, before=None, after=None):
    card = EvidenceCard(task_ids=[f"t{j}" for j in range(n_tasks)], verify_before=before, verify_after=after)
    return Diff(id=f"d{i}", artifact_id="a", base_version=0, edits=[Edit(key="k", after="x")], evidence=card)


# --- task samplers ---------------------------------------------------------------------------


@pytest.mark.parametrize("sampler", [Epochs, RandomMinibatches, FailuresFirst])
def test_minibatches_shape_and_disjoint_when_enough_tasks(sampler):
    batches = sampler(size=3)(tasks(20), 4, 0, 0, {})
    assert len(batches) == 4 and all(len(b) == 3 for b in batches)
    ids = [t.id for b in batches for t in b]
    assert len(set(ids)) == len(ids) == 12


@pytest.mark.parametrize("sampler", [Epochs, RandomMinibatches, FailuresFirst])
def test_minibatches_exactly_enough_tasks_uses_each_once(sampler):
    train = tasks(8)
    batches = sampler(size=4)(train, 2, 0, 1, {})
    assert sorted(t.id for b in batches for t in b) == sorted(t.id for t in train)


@pytest.mark.parametrize("sampler", [Epochs, RandomMinibatches, FailuresFirst])
def test_minibatches_wrap_when_short(sampler):
    train = tasks(5)
    batches = sampler(size=4)(train, 3, 0, 0, {})
    assert len(batches) == 3 and all(len(b) == 4 for b in batches)
    counts = Counter(t.id for b in batches for t in b)
    assert set(counts) == {t.id for t in train}  # every task dealt before any repeats twice
    assert max(counts.values()) - min(counts.values()) <= 1


@pytest.mark.parametrize("sampler", [Epochs, RandomMinibatches, FailuresFirst])
def test_minibatches_deterministic_for_a_seed_and_leave_input_alone(sampler):
    train = tasks(10)
    snapshot = list(train)
    a = sampler(size=2)(train, 3, 5, 42, {})
    b = sampler(size=2)(train, 3, 5, 42, {})
    assert [[t.id for t in x] for x in a] == [[t.id for t in x] for x in b]
    assert a != sampler(size=2)(train, 3, 5, 43, {})
    assert train == snapshot and [t.id for t in train] == [t.id for t in snapshot]


def test_epochs_visit_every_task_once_per_epoch_across_calls():
    train = tasks(12)
    sampler = Epochs(size=2)
    seen = [t.id for turn in range(6) for t in sampler(train, 1, turn, 7, {})[0]]
    assert sorted(seen) == sorted(t.id for t in train)
    consecutive = [t.id for b in sampler(train, 3, 0, 7, {}) + sampler(train, 3, 3, 7, {}) for t in b]
    assert consecutive == seen  # one call for six turns or two calls for three each: the same walk


def test_failures_first_deals_known_failures_then_unmeasured_tasks():
    train = tasks(20)
    known = {t.id: 1.0 for t in train[:12]} | {"t3": 0.0, "t7": 0.5}
    batches = FailuresFirst(size=3)(train, 2, 0, 0, known)
    assert {batches[0][0].id, batches[1][0].id} == {"t3", "t7"}  # one failure to each worker, first
    rest = [t.id for b in batches for t in b[1:]]
    assert all(known.get(i) is None for i in rest)  # then tasks not yet measured on the snapshot
    assert len({t.id for b in batches for t in b}) == 6


def test_failures_first_keeps_half_the_slots_for_exploring():
    train = tasks(20)
    known = {t.id: 0.5 for t in train}  # fractional rewards: everything "fails"
    dealt = [t.id for b in FailuresFirst(size=4)(train, 2, 0, 0, known) for t in b]
    assert len(dealt) == 8 and len(set(dealt)) == 8


def test_failures_first_falls_back_to_passing_tasks_when_nothing_else_is_left():
    train = tasks(4)
    batches = FailuresFirst(size=2)(train, 2, 0, 0, {t.id: 1.0 for t in train})
    assert sorted(t.id for b in batches for t in b) == sorted(t.id for t in train)


# --- WorstFirst -------------------------------------------------------------------------------


def test_worst_first_picks_lowest_below_threshold():
    rs = [rollout(0, 0.8), rollout(1, 0.1), rollout(2, 1.0), rollout(3, 0.4)]
    assert [r.task.id for r in WorstFirst(max_proposals=2)(rs)] == ["t1", "t3"]
    assert [r.task.id for r in WorstFirst(max_proposals=1)(rs)] == ["t1"]
    assert [r.task.id for r in WorstFirst(max_proposals=10, below=0.5)(rs)] == ["t1", "t3"]


def test_worst_first_reflects_on_a_task_once_though_dealt_twice():
    rs = [rollout(0, 0.0), rollout(1, 1.0), rollout(0, 0.0), rollout(1, 1.0)]  # two tasks, a batch of four
    assert [r.task.id for r in WorstFirst(max_proposals=2)(rs)] == ["t0"]


def test_worst_first_empty_when_all_succeed():
    assert WorstFirst(max_proposals=3)([rollout(0, 1.0), rollout(1, 1.0)]) == []
    assert WorstFirst(below=0.5)([rollout(0, 0.5), rollout(1, 0.9)]) == []
    assert WorstFirst()([]) == []


# --- Staleness --------------------------------------------------------------------------------


@pytest.mark.parametrize("how, within, past", [("drop", "admitted", "dropped"), ("rebase", "admitted", "rebased"),
                                               ("discount", "discounted", "dropped")])
def test_staleness_decides_within_and_past_the_lag_budget(how, within, past):
    p = Staleness(how)
    assert p.decide(0, 3) == "fresh"
    assert p.decide(3, 3) == within and p.decide(4, 3) == past
    assert p.decide(100, None) == within  # no budget: nothing is past it


def test_staleness_weight_decays():
    p = Staleness(decay=0.5)
    ws = [p.weight(s) for s in range(6)]
    assert ws[0] == 1.0
    assert all(a > b > 0 for a, b in zip(ws, ws[1:]))
    assert p.weight(2) == pytest.approx(1 / (1 + 0.5 * 2))  # the documented 1 / (1 + decay * s)
    assert Staleness(decay=0.0).weight(50) == 1.0


def test_staleness_refuses_an_unknown_policy_and_a_negative_decay():
    with pytest.raises(UserError, match="choose one of drop, rebase, discount"):
        Staleness("forget")
    with pytest.raises(UserError, match=r"decay=-1\): must be a number >= 0"):
        Staleness(decay=-1)


# --- BetterEvidence ---------------------------------------------------------------------------


def test_better_evidence_prefers_higher_verified_gain():
    diffs = [diff(0, n_tasks=5, before=0.5, after=0.6), diff(1, n_tasks=1, before=0.2, after=0.9)]
    assert BetterEvidence()(diffs, [0, 0], Staleness()) == 1


def test_better_evidence_then_more_tasks():
    diffs = [diff(0, n_tasks=1, before=0.0, after=0.5), diff(1, n_tasks=3, before=0.0, after=0.5)]
    assert BetterEvidence()(diffs, [0, 0], Staleness()) == 1
    assert BetterEvidence()([diff(0, n_tasks=1), diff(1, n_tasks=2)], [0, 0], Staleness()) == 1


def test_better_evidence_tie_goes_to_first():
    diffs = [diff(0, n_tasks=2, before=0.1, after=0.4), diff(1, n_tasks=2, before=0.1, after=0.4)]
    assert BetterEvidence()(diffs, [0, 0], Staleness()) == 0
    assert BetterEvidence()([diff(0), diff(1), diff(2)], [0, 0, 0], Staleness()) == 0


def test_better_evidence_discounts_stale_diffs():
    diffs = [diff(0, before=0.0, after=0.5), diff(1, before=0.0, after=0.5)]
    assert BetterEvidence()(diffs, [4, 0], Staleness()) == 1


# --- ThreeWayMerge ----------------------------------------------------------------------------


def test_merge_equal_sides():
    m = ThreeWayMerge()
    assert m("a\n", "b\n", "b\n") == "b\n"
    assert m("a\n", None, None) is None


def test_merge_one_side_untouched():
    m = ThreeWayMerge()
    assert m("a\n", "a\n", "b\n") == "b\n"
    assert m("a\n", "c\n", "a\n") == "c\n"
    assert m("a\n", None, "a\n") is None
    assert m(None, None, "new\n") == "new\n"


def test_merge_deletion_against_edit_conflicts():
    m = ThreeWayMerge()
    assert m("a\n", None, "b\n") is False
    assert m("a\n", "b\n", None) is False


def test_merge_disjoint_line_edits():
    base = "one\ntwo\nthree\nfour\n"
    assert ThreeWayMerge()(base, "ONE\ntwo\nthree\nfour\n", "one\ntwo\nthree\nFOUR\n") == "ONE\ntwo\nthree\nFOUR\n"


def test_merge_overlapping_edits_conflict():
    base = "one\ntwo\nthree\n"
    assert ThreeWayMerge()(base, "one\nTWO\nthree\n", "one\n2\nthree\n") is False
    assert ThreeWayMerge()(None, "mine\n", "yours\n") is False


# --- BetaAcceptance ---------------------------------------------------------------------------


def test_the_probe_order_is_every_train_task_once_seeded():
    train = tasks(50)
    order = BetaAcceptance().sample(train, random.Random(0))
    assert sorted(t.id for t in order) == sorted(t.id for t in train)
    assert BetaAcceptance().sample(train, random.Random(0)) == order
    assert BetaAcceptance().sample(train, random.Random(1)) != order


def test_the_harm_decision_stops_when_decisive_either_way_and_not_before():
    policy = BetaAcceptance(max_harm=0.1, confidence=0.8, gated_confidence=0.95)
    assert policy.harm(15, 0, gated=False) is True  # P(harm < 0.1) = 1 - 0.9**16 = 0.81
    assert policy.harm(14, 0, gated=False) is None  # 0.79: undecided, probe on
    assert policy.harm(40, 1, gated=False) is False  # a broken task is decisive: find who broke it
    assert policy.harm(15, 0, gated=True) is None and policy.harm(28, 0, gated=True) is True


def test_verdict_clear_win_accepted():
    v = BetaAcceptance()([1] * 8, [0] * 8, gated=False)
    assert v.accepted and v.p_improve > 0.95
    assert v.comparison.wins == 8


def test_verdict_mixed_rejected():
    v = BetaAcceptance()([1, 0, 1, 1], [0, 1, 1, 1], gated=False)
    assert not v.accepted
    assert v.p_improve == pytest.approx(0.5)


def test_verdict_too_few_tasks_rejected_with_reason():
    v = BetaAcceptance(min_tasks=4)([1, 1, 1], [0, 0, 0], gated=False)
    assert not v.accepted
    assert "only 3" in v.reason and "tasks" in v.reason


def test_verdict_no_change_rejected():
    v = BetaAcceptance()([0.5, 1, 0, 1], [0.5, 1, 0, 1], gated=False)
    assert not v.accepted
    assert "no measurable change" in v.reason


def test_verdict_gated_uses_stricter_bar():
    cand, head = [1, 1, 0, 0], [0, 0, 0, 0]  # two clean wins: P(improve) = 0.875
    policy = BetaAcceptance(threshold=0.7, gated_threshold=0.95)
    free, gated = policy(cand, head, gated=False), policy(cand, head, gated=True)
    assert free.p_improve == gated.p_improve
    assert free.accepted and not gated.accepted


# --- OnHeldOutGain and the bundle -------------------------------------------------------------


def test_promotion_on_held_out_gain():
    assert OnHeldOutGain()(0.5, 0.6)
    assert not OnHeldOutGain()(0.5, 0.5)
    assert not OnHeldOutGain()(0.6, 0.5)
    assert not OnHeldOutGain(min_gain=0.1)(0.5, 0.55)
    assert OnHeldOutGain(min_gain=0.1)(0.5, 0.65)


def test_policies_defaults_and_replace():
    p = Policies()
    assert isinstance(p.task_sampler, FailuresFirst)
    assert isinstance(p.proposal, WorstFirst)
    assert isinstance(p.staleness, Staleness)
    assert isinstance(p.conflict, BetterEvidence)
    assert isinstance(p.fusion, ThreeWayMerge)
    assert isinstance(p.acceptance, BetaAcceptance)
    assert isinstance(p.promotion, OnHeldOutGain)
    q = dataclasses.replace(p, acceptance=BetaAcceptance(threshold=0.9))
    assert q.acceptance.threshold == 0.9 and p.acceptance.threshold != 0.9
    assert q.proposal == p.proposal
    assert Policies(proposal=WorstFirst(max_proposals=3)).proposal.max_proposals == 3
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.fusion = None

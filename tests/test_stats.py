import pytest

from agentdescent.step.stats import paired, prob_improvement

# --- paired -----------------------------------------------------------------------------------


def test_paired_counts_wins_and_losses():
    cmp = paired([1, 0, 1, 0], [0, 0, 1, 1])
    assert cmp.wins == 1 and cmp.losses == 1
    assert cmp.n == 4
    assert cmp.mean_delta == 0
    assert cmp.decisive == 2


def test_paired_docstring_example():
    cmp = paired([1, 0, 1], [0, 0, 1])
    assert (cmp.wins, cmp.losses, cmp.n) == (1, 0, 3)
    assert cmp.mean_delta == pytest.approx(1 / 3)


def test_paired_fractional_rewards():
    cmp = paired([0.5, 1.0, 0.2], [0.25, 0.0, 0.7])
    assert cmp.wins == pytest.approx(1.25)
    assert cmp.losses == pytest.approx(0.5)
    assert cmp.n == 3
    assert cmp.mean_delta == pytest.approx((0.25 + 1.0 - 0.5) / 3)
    assert cmp.decisive == pytest.approx(1.75)


def test_paired_ties_carry_no_evidence():
    cmp = paired([0.3, 0.3], [0.3, 0.3])
    assert cmp.wins == 0 and cmp.losses == 0 and cmp.decisive == 0
    assert cmp.n == 2 and cmp.mean_delta == 0


def test_paired_empty():
    cmp = paired([], [])
    assert cmp.n == 0 and cmp.mean_delta == 0 and cmp.decisive == 0


@pytest.mark.parametrize("cand, head", [([1, 0], [1]), ([], [0.5]), ([1, 1, 1], [0, 0])])
def test_paired_mismatched_lengths_raise(cand, head):
    with pytest.raises(ValueError):
        paired(cand, head)


# --- prob_improvement -------------------------------------------------------------------------


def test_no_evidence_is_a_coin_flip():
    assert prob_improvement(0, 0) == pytest.approx(0.5)
    assert prob_improvement(3, 3) == pytest.approx(0.5)


def test_two_clean_wins_match_the_beta_posterior():
    # Beta(3, 1): P(p > 1/2) = 1 - (1/2)^3
    assert prob_improvement(2, 0) == pytest.approx(1 - 0.5**3)


@pytest.mark.parametrize("w, l", [(1, 0), (2.5, 1), (0.3, 4), (7, 2)])
def test_prob_improvement_is_symmetric(w, l):
    assert prob_improvement(w, l) + prob_improvement(l, w) == pytest.approx(1.0)


def test_prob_improvement_is_monotone_in_wins():
    ps = [prob_improvement(w, 2) for w in (0, 0.5, 1, 2, 4, 8)]
    assert all(a < b for a, b in zip(ps, ps[1:]))
    assert all(0.0 <= p <= 1.0 for p in ps)


def test_prob_improvement_is_antitone_in_losses():
    ps = [prob_improvement(3, l) for l in (0, 1, 2, 4)]
    assert all(a > b for a, b in zip(ps, ps[1:]))


def test_a_stronger_prior_shrinks_towards_one_half():
    weak = prob_improvement(3, 0, prior=1.0)
    strong = prob_improvement(3, 0, prior=10.0)
    assert 0.5 < strong < weak

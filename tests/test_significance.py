"""Paired bootstrap / permutation / sign tests against hand cases and scipy."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ict.core.significance import paired_bootstrap, paired_permutation_test, sign_test


def test_bootstrap_of_a_constant_difference_is_a_point():
    a = np.full((3, 20), 0.7)
    result = paired_bootstrap(a, a - 0.25, resamples=500)
    assert result.difference == pytest.approx(0.25)
    assert result.low == pytest.approx(0.25) and result.high == pytest.approx(0.25)


def test_bootstrap_interval_matches_a_hand_written_resampler():
    rng = np.random.default_rng(3)
    a, b = rng.random((3, 15)), rng.random((3, 15))
    result = paired_bootstrap(a, b, resamples=400, seed=11)
    draw = np.random.default_rng(11)
    values = []
    for _ in range(400):
        rows = draw.integers(0, 3, 3)
        columns = draw.integers(0, 15, 15)
        values.append(sum(a[r, c] - b[r, c] for r in rows for c in columns) / 45)
    assert result.low == pytest.approx(np.percentile(values, 2.5), abs=1e-12)
    assert result.high == pytest.approx(np.percentile(values, 97.5), abs=1e-12)
    assert result.low <= result.difference <= result.high


def test_bootstrap_covers_the_normal_interval_for_many_problems():
    rng = np.random.default_rng(0)
    d = rng.normal(0.1, 1.0, (1, 2000))
    result = paired_bootstrap(d, np.zeros_like(d), resamples=2000)
    half = 1.96 * d.std(ddof=1) / math.sqrt(d.size)
    assert result.low == pytest.approx(d.mean() - half, abs=0.01)
    assert result.high == pytest.approx(d.mean() + half, abs=0.01)


def test_exact_permutation_p_value_by_enumeration():
    d = np.array([0.5, 0.25, -0.125, 1.0, 0.0, 0.75])
    observed = abs(d.mean())
    count = sum(abs(np.mean(np.array(signs) * d)) >= observed - 1e-12
                for signs in itertools.product([-1, 1], repeat=d.size))
    assert paired_permutation_test(d[None], np.zeros((1, 6))) == pytest.approx(count / 64)
    # all-positive differences of 6 problems: only the identity and its mirror are as extreme
    assert paired_permutation_test(np.ones((2, 6)), np.zeros((2, 6))) == pytest.approx(2 / 64)


def test_monte_carlo_permutation_against_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    a, b = rng.random((2, 40)) + 0.1, rng.random((2, 40))
    d = (a - b).mean(axis=0)
    reference = scipy_stats.permutation_test(
        (d,), np.mean, permutation_type="samples", n_resamples=20000, alternative="two-sided",
        random_state=0).pvalue
    assert paired_permutation_test(a, b, resamples=20000) == pytest.approx(reference, abs=0.01)


def test_sign_test_hand_cases():
    # 5 positive, 1 negative: p = 2 * (C(6,0) + C(6,1)) / 64 = 14/64
    a = np.array([[1, 1, 1, 1, 1, 0, 0.5]])
    b = np.array([[0, 0, 0, 0, 0, 1, 0.5]])
    assert sign_test(a, b) == pytest.approx(14 / 64)
    assert sign_test(np.zeros((1, 3)), np.zeros((1, 3))) == 1.0


def test_sign_test_counts_a_float_residue_as_a_tie():
    """pass@2 of 6 samples over 3 seeds: problem 5's exact seed-mean difference is 0, its float
    mean -7.4e-17, which was counted as a negative sign (p = 14/64 instead of 2/32)."""
    scipy_stats = pytest.importorskip("scipy.stats")
    from ict.core.metrics import pass_at_k

    correct_a = np.array([[6, 6, 6, 6, 6, 6], [6, 6, 6, 6, 6, 6], [6, 6, 6, 6, 6, 1]])
    correct_b = np.array([[0, 0, 0, 0, 0, 3], [0, 0, 0, 0, 0, 4], [0, 0, 0, 0, 0, 2]])
    a, b = (pass_at_k(np.full(18, 6), c.ravel(), 2).reshape(3, 6) for c in (correct_a, correct_b))
    assert (a - b).mean(axis=0)[5] != 0  # residue: a 1, 1, 5/15 and b 12/15, 14/15, 9/15
    assert sign_test(a, b) == pytest.approx(scipy_stats.binomtest(5, 5, 0.5).pvalue)  # 2/32


def test_shape_mismatch_is_a_clear_error():
    with pytest.raises(ValueError, match="paired"):
        paired_bootstrap(np.zeros((2, 3)), np.zeros((2, 4)))


@pytest.mark.parametrize("test", [paired_bootstrap, paired_permutation_test, sign_test])
@pytest.mark.parametrize("problems", [4, 20])  # the exact and the Monte Carlo permutation test
def test_a_score_that_is_not_finite_is_a_clear_error(test, problems):
    """A NaN score made the permutation p-value 0 (exact) or 1 / (1 + R): no sign pattern
    compares >= NaN; the sign test read it as a tie and the bootstrap returned NaN."""
    a, b = np.zeros((1, problems)), np.zeros((1, problems))
    a[0, :3] = (0.25, math.nan, 0.5)
    with pytest.raises(ValueError, match="finite"):
        test(a, b)


def test_permutation_test_switches_from_exact_to_monte_carlo_after_16_problems() -> None:
    """Differences all equal and positive: only the all-plus and all-minus sign patterns are as
    extreme as the observed mean. With 16 problems the test enumerates: p = 2 / 2^16 exactly. With
    20, R random patterns (each all-plus or all-minus with probability 2^-19, so none among 500
    here) give the Monte Carlo value (1 + 0) / (1 + R), never 0."""
    assert paired_permutation_test(np.ones((1, 16)), np.zeros((1, 16))) == 2 / 2**16
    assert paired_permutation_test(np.ones((1, 20)), np.zeros((1, 20)), resamples=500) == 1 / 501


def test_sign_test_counts_a_positive_float_residue_as_a_tie() -> None:
    """|d_p| <= TOLERANCE (1e-12) is a tie on the positive side too: differences 1e-13, 1, 1 are
    2 positives and a tie, p = 2 * 1/4 = 0.5 (3 positives would give 0.25)."""
    a = np.array([[1e-13, 1.0, 1.0]])
    assert sign_test(a, np.zeros((1, 3))) == 0.5
    assert sign_test(np.zeros((1, 3)), a) == 0.5


@pytest.mark.parametrize("call", [
    lambda a, b: paired_bootstrap(a, b, resamples=0),
    lambda a, b: paired_permutation_test(a, b, resamples=0),
    lambda a, b: paired_bootstrap(a, b, resamples=50, confidence=0.0),
    lambda a, b: paired_bootstrap(a, b, resamples=50, confidence=95),
])
def test_no_resample_or_a_confidence_outside_0_1_is_a_clear_error(call) -> None:
    """With 0 resamples the Monte Carlo permutation p-value of 20 all-positive differences was
    (1 + 0) / (1 + 0) = 1.0 and the bootstrap an IndexError; confidence 0 gave a point interval
    (both ends the median) away from the difference, and 95 numpy's percentile error."""
    with pytest.raises(ValueError, match="resamples|confidence"):
        call(np.ones((1, 20)), np.zeros((1, 20)))


@pytest.mark.parametrize("test", [paired_bootstrap, paired_permutation_test, sign_test])
def test_no_problem_or_a_nan_on_the_baseline_side_is_a_clear_error(test) -> None:
    """Mutation tests: the shapes' emptiness and the second side's finiteness are checked too
    (an empty [1, 0] pair gave a NaN observed mean and the exact p-value 0)."""
    with pytest.raises(ValueError, match="non-empty"):
        test(np.zeros((1, 0)), np.zeros((1, 0)))
    b = np.zeros((1, 4))
    b[0, 2] = math.nan
    with pytest.raises(ValueError, match="finite"):
        test(np.zeros((1, 4)), b)


def test_monte_carlo_patterns_as_extreme_as_the_observed_count_both_signs() -> None:
    """One nonzero difference among 20: every sign pattern's |mean| is 1/20, the observed value,
    so every pattern counts and p = (1 + R) / (1 + R) = 1. Kills the mutants that drop the
    absolute value (p about 1/2), draw signs from {0, 1} (about 1/2) or compare with
    ``observed + TOLERANCE`` (1 / (1 + R))."""
    a = np.zeros((2, 20))
    a[:, 0] = 1.0
    assert paired_permutation_test(a, np.zeros((2, 20)), resamples=200) == 1.0


def test_exact_permutation_p_value_is_two_sided_for_a_negative_mean() -> None:
    """The same differences with the sides swapped give the same p-value (15/64: by enumeration,
    as in test_exact_permutation_p_value_by_enumeration); an observed mean without its absolute
    value gave 1.0 for the negative one."""
    d = np.array([[0.5, 0.25, -0.125, 1.0, 0.0, 0.75]])
    observed = abs(d.mean())
    count = sum(abs(np.mean(np.array(signs) * d)) >= observed - 1e-12
                for signs in itertools.product([-1, 1], repeat=6))
    assert paired_permutation_test(np.zeros((1, 6)), d) == paired_permutation_test(d, np.zeros((1, 6))) == count / 64
    assert count / 64 < 1


def test_sign_test_with_as_many_positives_as_negatives_is_one() -> None:
    """n+ = n- = 1: 2 * (C(2,0) + C(2,1)) / 4 = 1.5 is capped at 1 (scipy's binomtest(1, 2))."""
    assert sign_test(np.array([[1.0, 0.0]]), np.array([[0.0, 1.0]])) == 1.0


# pass@k-like scores: a few seeds x problems, values on a grid of exact fractions (ties and zeros occur)
_GRID = [Fraction(0), Fraction(1, 4), Fraction(1, 2), Fraction(3, 4), Fraction(1), Fraction(1, 3), Fraction(2, 3)]
_grid_indices = st.tuples(st.integers(1, 3), st.integers(1, 8)).flatmap(
    lambda shape: st.tuples(*[st.lists(st.lists(st.integers(0, len(_GRID) - 1), min_size=shape[1], max_size=shape[1]),
                                       min_size=shape[0], max_size=shape[0])] * 2))


def _scores(indices: list[list[int]]) -> np.ndarray:
    return np.array([[float(_GRID[i]) for i in row] for row in indices])


@given(indices=_grid_indices)
def test_swapping_the_two_methods_mirrors_every_result(indices):
    """Property: B vs A is A vs B mirrored: the difference and its interval negated (low and high
    swapped; the same resampling draw), the same permutation and sign-test p-values, each in (0, 1]."""
    a, b = map(_scores, indices)
    forward, backward = paired_bootstrap(a, b, resamples=64), paired_bootstrap(b, a, resamples=64)
    assert (backward.difference, backward.low, backward.high) == pytest.approx(
        (-forward.difference, -forward.high, -forward.low), abs=1e-12)
    assert forward.low <= forward.high
    assert paired_permutation_test(a, b) == paired_permutation_test(b, a)
    assert sign_test(a, b) == sign_test(b, a)
    assert 0 < paired_permutation_test(a, b) <= 1 and 0 < sign_test(a, b) <= 1


@given(indices=_grid_indices)
def test_the_exact_permutation_p_value_counts_sign_patterns_by_brute_force(indices):
    """Property: with P <= 16 problems, p = #{sign patterns s: |sum s_p d_p| >= |sum d_p|} / 2^P, with
    d_p a problem's differences of the exact scores summed over seeds (fractions; S times the seed
    mean, the same patterns count; the float residue of 2/3 - 1/2 is the module's TOLERANCE to
    absorb: a tie counts), the patterns enumerated with itertools.product."""
    a, b = indices
    d = [sum(_GRID[x] - _GRID[y] for x, y in zip(row_a, row_b, strict=True))
         for row_a, row_b in zip(zip(*a, strict=True), zip(*b, strict=True), strict=True)]
    observed = abs(sum(d))
    count = sum(abs(sum(s * v for s, v in zip(signs, d, strict=True))) >= observed
                for signs in itertools.product((1, -1), repeat=len(d)))
    assert paired_permutation_test(_scores(a), _scores(b)) == pytest.approx(count / 2 ** len(d), abs=1e-12)

"""pass@k against the exact combinatorial formula."""

from __future__ import annotations

from fractions import Fraction
from math import comb

import numpy as np
import pytest

from ict.core.metrics import average_at_n, pass_at_k, pass_at_k_table


def exact_pass_at_k(n: int, c: int, k: int) -> Fraction:
    return 1 - Fraction(comb(n - c, k), comb(n, k))


def test_pass_at_k_equals_exact_formula_for_all_n_up_to_32():
    for n in range(1, 33):
        for k in range(1, n + 1):
            counts = np.arange(n + 1)
            vectorised = pass_at_k(np.full(n + 1, n), counts, k)
            for c in range(n + 1):
                expected = float(exact_pass_at_k(n, c, k))
                assert vectorised[c] == pytest.approx(expected, abs=1e-12)
                assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_mixed_sample_counts_and_table():
    n = np.array([4, 8, 8, 16])
    c = np.array([1, 0, 8, 3])
    expected = [float(exact_pass_at_k(a, b, 4)) for a, b in zip(n, c)]
    assert pass_at_k(n, c, 4).tolist() == pytest.approx(expected)
    table = pass_at_k_table(n, c, [1, 4])
    assert table[1] == pytest.approx(np.mean(c / n))
    assert table[4] == pytest.approx(np.mean(expected))
    assert average_at_n(n, c) == pytest.approx(np.mean(c / n))


def test_pass_at_k_rejects_impossible_inputs():
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 0)
    with pytest.raises(ValueError, match="k must be an integer"):
        pass_at_k(10, 3, 2.5)  # was pass@3 (0.708)
    for n, c in ((2.7, 1), (4, 1.5), ([4, 3.5], [1, 1]), (float("nan"), 0)):
        with pytest.raises(ValueError, match="whole numbers"):
            pass_at_k(n, c, 1)  # 2.7 samples was read as 2 (pass@1 0.5)
    assert pass_at_k(4.0, 1.0, 2) == pass_at_k(4, 1, 2)  # whole floats are counts
    for n, c in (([2], [5]), ([2], [-1]), ([0], [0])):
        with pytest.raises(ValueError, match="num_correct must be in"):
            average_at_n(n, c)  # [2], [5] was 2.5


def test_pass_at_k_of_a_two_dimensional_array_keeps_each_cell():
    """[seeds, problems] counts: the k factors were laid along the problems axis ((n - c)[:, None]
    - steps, product over axis 1), so n = 3, c = 1, k = 3 gave 1/3, 1/2, 1 by column instead of 1
    everywhere, and a k other than the number of columns (or 1) raised a broadcast error."""
    n = np.full((2, 3), 3)
    assert pass_at_k(n, np.ones((2, 3), dtype=int), 3).tolist() == [[1.0] * 3] * 2
    counts = np.array([[0, 1, 2, 3], [4, 0, 0, 1]])
    expected = [[float(exact_pass_at_k(4, c, 2)) for c in row] for row in counts]
    assert pass_at_k(np.full((2, 4), 4), counts, 2) == pytest.approx(np.array(expected), abs=1e-12)


def test_pass_at_k_bounds_and_count_types():
    """Mutation tests: a negative count of correct samples (pass@1 of n=4, c=-1 was -0.25), a
    boolean k (True is no k), boolean correct flags (counts of 0/1, accepted) and avg@n of no
    problem (NaN, not 0)."""
    with pytest.raises(ValueError, match="num_correct must be in"):
        pass_at_k(4, -1, 1)
    with pytest.raises(ValueError, match="k must be an integer"):
        pass_at_k(4, 1, True)
    assert pass_at_k(1, np.array([True, False]), 1).tolist() == [1.0, 0.0]
    assert np.isnan(average_at_n([], []))


def test_majority_vote_takes_the_most_frequent_answer_after_whitespace():
    """Two answers equal but for spaces outvote the first answer (a lone wrong '1'): the vote is
    the most frequent answer's verdict, not the first's, and spaces do not split a vote."""
    from ict.core.metrics import majority_vote_correct

    assert majority_vote_correct(["1", "\\frac {1}{2}", "\\frac{1}{2}"], [False, True, True]) is True
    assert majority_vote_correct(["1", "2", "2"], [False, True, True]) is True

"""Paired significance tests for method comparisons (pure numpy).

Scores come as arrays ``[S, P]``: one value per (seed, problem), e.g. each problem's unbiased
pass@k from the final model of seed s. Two methods are *paired*: row s of method A and row s of
method B share the training seed (same prompts, same rollout seeds), column p is the same
evaluation problem.

* `paired_bootstrap`: the difference of means ``mean(A) - mean(B)`` and a percentile interval from
  resampling seeds AND problems with replacement (a two-way bootstrap: draw S seed indices and P
  problem indices, use the same indices for A and B, average over the S x P sub-grid).
* `paired_permutation_test`: two-sided sign-flip test on the per-problem differences averaged over
  seeds, ``d_p = mean_s (A[s, p] - B[s, p])``: under H0 (no difference) each ``d_p`` is symmetric
  about 0; with P <= 16 problems p = #{signs: |mean(sign * d)| >= |mean(d)|} / 2^P over every
  sign pattern (exact), else p = (1 + #{...}) / (1 + R) over R random patterns.
* `sign_test`: exact two-sided binomial sign test on the nonzero ``d_p`` (``|d_p| > TOLERANCE``:
  a seed mean of float pass@k values leaves residue such as -7e-17 where the exact mean is 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

TOLERANCE = 1e-12  # float residue of a mean of scores in [0, 1]: below it, a difference is 0
RESAMPLING_UNIT = ("problems and seeds (two-way paired bootstrap: seed indices and problem "
                   "indices drawn with replacement, the same draw for both methods)")


@dataclass
class BootstrapResult:
    """Difference of means and its percentile interval (same units as the scores)."""

    difference: float
    low: float
    high: float
    confidence: float
    resamples: int


def _paired(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` as float64 ``[seeds, problems]``; ValueError unless their shapes are equal
    and non-empty and every score is finite (a NaN compares false with everything: the
    permutation test would count no sign pattern as extreme and return p = 0)."""
    a = np.atleast_2d(np.asarray(a, dtype=np.float64))
    b = np.atleast_2d(np.asarray(b, dtype=np.float64))
    if a.shape != b.shape or a.size == 0:
        raise ValueError(f"paired scores need equal non-empty [seeds, problems] shapes, got "
                         f"{a.shape} and {b.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise ValueError("paired scores must be finite (a NaN pass@k: a problem with fewer samples than k?)")
    return a, b


def _check_resamples(resamples: int, confidence: float = 0.95) -> None:
    """ValueError unless ``resamples >= 1`` and ``0 < confidence < 1`` (no resample left the
    permutation p-value at (1 + 0) / (1 + 0) = 1 and the bootstrap without a percentile)."""
    if isinstance(resamples, bool) or int(resamples) != resamples or resamples < 1:
        raise ValueError(f"resamples must be an integer >= 1, got {resamples!r}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")


def paired_bootstrap(a: np.ndarray, b: np.ndarray, resamples: int = 10_000,
                     confidence: float = 0.95, seed: int = 0) -> BootstrapResult:
    """Two-way paired bootstrap of ``mean(a) - mean(b)`` over seeds (rows) and problems (columns).

    Each resample draws S row indices and P column indices with replacement
    (`numpy.random.default_rng(seed)`: rows first, then columns) and takes the mean of
    ``(a - b)[rows][:, columns]``; the interval is the (1-confidence)/2 and (1+confidence)/2
    percentiles (numpy's default linear interpolation). ValueError unless ``resamples >= 1`` and
    ``0 < confidence < 1``."""
    a, b = _paired(a, b)
    _check_resamples(resamples, confidence)
    diff = a - b
    seeds, problems = diff.shape
    rng = np.random.default_rng(seed)
    stats = np.empty(resamples)
    for index in range(resamples):
        rows = rng.integers(0, seeds, seeds)
        columns = rng.integers(0, problems, problems)
        stats[index] = diff[rows][:, columns].mean()
    tail = (1.0 - confidence) / 2.0
    low, high = np.percentile(stats, [100 * tail, 100 * (1 - tail)])
    return BootstrapResult(float(diff.mean()), float(low), float(high), confidence, resamples)


def paired_permutation_test(a: np.ndarray, b: np.ndarray, resamples: int = 10_000,
                            seed: int = 0) -> float:
    """Two-sided sign-flip permutation p-value for the per-problem differences (averaged over
    seeds). With P <= 16 problems all 2^P sign patterns are enumerated (exact p-value), else
    ``resamples`` (>= 1) random patterns."""
    a, b = _paired(a, b)
    _check_resamples(resamples)
    d = (a - b).mean(axis=0)
    observed = abs(d.mean())
    if d.size <= 16:
        signs = 1 - 2 * ((np.arange(2 ** d.size)[:, None] >> np.arange(d.size)) & 1)
        means = np.abs((signs * d).mean(axis=1))
        return float(np.mean(means >= observed - TOLERANCE))
    rng = np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(resamples, d.size))
    means = np.abs((signs * d).mean(axis=1))
    return float((1 + np.sum(means >= observed - TOLERANCE)) / (1 + resamples))


def sign_test(a: np.ndarray, b: np.ndarray) -> float:
    """Exact two-sided binomial sign test on the nonzero per-problem differences (seed mean):
    ``p = min(1, 2 * sum_{i <= min(n+, n-)} C(n, i) / 2^n)``, ``n = n+ + n-``, where ``|d_p| <=
    TOLERANCE`` is a tie (left out)."""
    a, b = _paired(a, b)
    d = (a - b).mean(axis=0)
    positive, negative = int(np.sum(d > TOLERANCE)), int(np.sum(d < -TOLERANCE))
    n = positive + negative
    if n == 0:
        return 1.0
    tail = sum(math.comb(n, i) for i in range(min(positive, negative) + 1)) / 2 ** n
    return float(min(1.0, 2 * tail))

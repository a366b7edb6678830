"""Evaluation metrics on counts of correct samples: pure numpy, no models.

Unbiased pass@k (Chen et al. 2021): with ``n`` samples of which ``c`` are correct,
``pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i=0}^{k-1} (n - c - i) / (n - i)``,
which is 1 when ``n - c < k``. avg@n = mean of ``c / n`` (pass@1 from n samples).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np


def pass_at_k(num_samples: int | Sequence[int] | np.ndarray, num_correct: int | Sequence[int] | np.ndarray, k: int):
    """Unbiased pass@k per problem; scalars give a float, arrays a float64 array.

    Raises ``ValueError`` when ``k`` is not in ``[1, n]`` or ``c`` is not in ``[0, n]``.
    """
    scalar = np.ndim(num_samples) == 0 and np.ndim(num_correct) == 0
    n = np.atleast_1d(np.asarray(num_samples, dtype=np.int64))
    c = np.atleast_1d(np.asarray(num_correct, dtype=np.int64))
    n, c = np.broadcast_arrays(n, c)
    if k < 1 or (n.size and k > int(n.min())):
        raise ValueError(f"k must be in [1, n]; got k={k} with n={int(n.min()) if n.size else 'none'}")
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("num_correct must be in [0, num_samples]")
    steps = np.arange(k)
    numerators = (n - c)[:, None] - steps
    denominators = n[:, None] - steps
    factors = np.where(numerators > 0, numerators / denominators, 0.0)
    result = 1.0 - np.prod(factors, axis=1)
    return float(result[0]) if scalar else result


def pass_at_k_table(
    num_samples: Sequence[int] | np.ndarray, num_correct: Sequence[int] | np.ndarray, ks: Iterable[int]
) -> dict[int, float]:
    """Mean pass@k over problems for each ``k`` (``k`` larger than some problem's n is an error)."""
    return {int(k): float(np.mean(pass_at_k(num_samples, num_correct, int(k)))) for k in ks}


def average_at_n(num_samples: Sequence[int] | np.ndarray, num_correct: Sequence[int] | np.ndarray) -> float:
    """avg@n: mean over problems of the fraction of correct samples."""
    n = np.asarray(num_samples, dtype=np.float64)
    c = np.asarray(num_correct, dtype=np.float64)
    return float(np.mean(c / n)) if n.size else float("nan")

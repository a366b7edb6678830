"""Evaluation metrics on counts of correct samples: pure numpy, no models.

Unbiased pass@k (Chen et al. 2021): with ``n`` samples of which ``c`` are correct,
``pass@k = 1 - C(n - c, k) / C(n, k) = 1 - prod_{i=0}^{k-1} (n - c - i) / (n - i)``,
which is 1 when ``n - c < k``. avg@n = mean of ``c / n`` (pass@1 from n samples). maj@n: the most
frequent extracted answer is correct (`majority_vote_correct`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np


def pass_at_k(num_samples: int | Sequence[int] | np.ndarray, num_correct: int | Sequence[int] | np.ndarray, k: int):
    """Unbiased pass@k per problem; scalars give a float, arrays a float64 array of their
    broadcast shape (the product runs over a new last axis of ``k`` factors).

    Raises ``ValueError`` when ``k`` is not an integer in ``[1, n]``, ``n`` or ``c`` is not a
    whole number (2.7 samples is not 2), or ``c`` is not in ``[0, n]``.
    """
    if isinstance(k, bool) or int(k) != k:
        raise ValueError(f"k must be an integer, got {k!r}")
    k = int(k)
    scalar = np.ndim(num_samples) == 0 and np.ndim(num_correct) == 0
    n = np.atleast_1d(_whole_counts(num_samples, "num_samples"))
    c = np.atleast_1d(_whole_counts(num_correct, "num_correct"))
    n, c = np.broadcast_arrays(n, c)
    if k < 1 or (n.size and k > int(n.min())):
        raise ValueError(f"k must be in [1, n]; got k={k} with n={int(n.min()) if n.size else 'none'}")
    if np.any(c < 0) or np.any(c > n):
        raise ValueError("num_correct must be in [0, num_samples]")
    steps = np.arange(k)
    numerators = (n - c)[..., None] - steps
    denominators = n[..., None] - steps
    factors = np.where(numerators > 0, numerators / denominators, 0.0)
    result = 1.0 - np.prod(factors, axis=-1)
    return float(result[0]) if scalar else result


def _whole_counts(values, name: str) -> np.ndarray:
    """`values` as int64, refusing what is not a whole number (a cast would truncate 2.7 to 2)."""
    array = np.asarray(values)
    if array.dtype.kind in "iub":
        return array.astype(np.int64)
    if array.dtype.kind == "f" and np.all(np.isfinite(array)) and np.all(array == np.round(array)):
        return array.astype(np.int64)
    raise ValueError(f"{name} must be whole numbers, got {values!r}")


def pass_at_k_table(
    num_samples: Sequence[int] | np.ndarray, num_correct: Sequence[int] | np.ndarray, ks: Iterable[int]
) -> dict[int, float]:
    """Mean pass@k over problems for each ``k`` (``k`` larger than some problem's n is an error)."""
    return {int(k): float(np.mean(pass_at_k(num_samples, num_correct, int(k)))) for k in ks}


def average_at_n(num_samples: Sequence[int] | np.ndarray, num_correct: Sequence[int] | np.ndarray) -> float:
    """avg@n: mean over problems of the fraction of correct samples (``ValueError`` unless
    ``0 <= c <= n`` and ``n >= 1``, as :func:`pass_at_k`)."""
    n = np.asarray(num_samples, dtype=np.float64)
    c = np.asarray(num_correct, dtype=np.float64)
    if np.any(n < 1) or np.any(c < 0) or np.any(c > n):
        raise ValueError("num_correct must be in [0, num_samples], and num_samples >= 1")
    return float(np.mean(c / n)) if n.size else float("nan")


def answer_key(answer: str | None) -> str | None:
    """The string an answer votes with in maj@n: whitespace removed (``None``: no answer)."""
    return None if answer is None else "".join(str(answer).split())


def majority_vote_correct(extracted: Sequence[str | None], correct: Sequence[bool]) -> bool:
    """maj@n for one problem: the most frequent non-empty extracted answer (identical strings after
    stripping whitespace vote together; ties go to the answer that appears first) is correct?
    False when no sample has an answer. ``extracted``: each sample's answer, or the key it votes
    with (`ict.answers.grading.vote_key`)."""
    keys = [answer_key(answer) for answer in extracted]
    counts = Counter(key for key in keys if key)
    if not counts:
        return False
    best = max(counts.values())
    for key, is_correct in zip(keys, correct, strict=True):
        if key and counts[key] == best:
            return bool(is_correct)
    return False  # pragma: no cover


def benchmark_metrics(
    correct: np.ndarray,
    ks: Sequence[int],
    majority: Sequence[bool] | None = None,
    greedy: Sequence[bool] | None = None,
) -> dict[str, float]:
    """Metrics from a [problems, n] boolean matrix of sampled verdicts.

    pass@k: mean over problems of the unbiased estimator (`ict.core.metrics.pass_at_k`);
    avg@n: mean of c/n; maj@n: mean of ``majority``; greedy: mean of ``greedy``."""
    correct = np.asarray(correct, dtype=bool)
    num_problems, n = correct.shape
    counts = correct.sum(axis=1)
    totals = np.full(num_problems, n)
    metrics: dict[str, float] = {}
    for k in ks:
        metrics[f"pass@{k}"] = float(np.mean(pass_at_k(totals, counts, int(k))))
    metrics[f"avg@{n}"] = float(np.mean(counts / n))
    if majority is not None:
        metrics[f"maj@{n}"] = float(np.mean(np.asarray(majority, dtype=float)))
    if greedy is not None:
        metrics["greedy"] = float(np.mean(np.asarray(greedy, dtype=float)))
    return metrics

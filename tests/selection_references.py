"""Python-list references for the token selections: the exact count ``ceil(ratio n)`` and each
population ranked alone (``tests/test_selectors.py``, ``test_ranking.py``)."""

from __future__ import annotations

import math
from fractions import Fraction

import torch


def exact_count(ratio: float, n: int) -> int:
    return math.ceil(Fraction(str(ratio)) * n)


def reference_populations(batch, scope, group_ids):
    """The rows of each population, in order (label order for ``group``), with Python lists."""
    if scope == "batch":
        return [list(range(batch))]
    if scope == "sequence":
        return [[row] for row in range(batch)]
    labels = group_ids.tolist()
    return [[row for row in range(batch) if labels[row] == label] for label in sorted(set(labels))]

def reference_rank(values, ratio, generator, tolerance=1e-6):
    """One population's ``(kept, drawn)`` entries of ``values`` with Python lists: the k-th largest
    (NaN as +inf), the values above it by more than the tolerance, and the remaining slots drawn
    among the values within the tolerance by ``randperm`` on the generator (a new one seeded with
    0 when None)."""
    values = [math.inf if math.isnan(value) else value for value in values]
    count = exact_count(ratio, len(values))
    if not count:
        return [], []
    threshold = sorted(values, reverse=True)[count - 1]
    sure = [i for i, value in enumerate(values) if value > threshold + tolerance]
    tied = [i for i, value in enumerate(values) if value == threshold or abs(value - threshold) <= tolerance]
    slots = count - len(sure)
    if len(tied) <= slots:
        return sure + tied, []
    draw = torch.randperm(len(tied), generator=generator or torch.Generator().manual_seed(0))
    drawn = [tied[i] for i in draw[:slots].tolist()]
    return sure + drawn, drawn

def reference_top_fraction(scores, mask, ratio, scope, group_ids, generator, tolerance=1e-6):
    """Every population ranked alone (:func:`reference_rank`), populations in order, positions
    row-major."""
    batch, length = mask.shape
    selected = torch.zeros(batch, length, dtype=torch.bool)
    decided = torch.zeros(batch, length, dtype=torch.bool)
    for rows in reference_populations(batch, scope, group_ids):
        positions = [(row, t) for row in rows for t in range(length) if mask[row, t]]
        kept, drawn = reference_rank([float(scores[row, t]) for row, t in positions], ratio, generator, tolerance)
        for i in kept:
            selected[positions[i]] = True
        for i in drawn:
            decided[positions[i]] = True
    return selected, decided

def reference_top_unique(scores, token_ids, mask, ratio, scope, group_ids, generator, tolerance=1e-6):
    """Each population alone with Python lists: its response tokens' ids, ascending; each id's mean
    score (float64, summed row-major) ranked by :func:`reference_rank`; an id's positions follow
    it (tie-decided with it)."""
    batch, length = mask.shape
    selected = torch.zeros(batch, length, dtype=torch.bool)
    decided = torch.zeros(batch, length, dtype=torch.bool)
    for rows in reference_populations(batch, scope, group_ids):
        positions = [(row, t) for row in rows for t in range(length) if mask[row, t]]
        sums: dict[int, float] = {}
        numbers: dict[int, int] = {}
        for row, t in positions:
            token = int(token_ids[row, t])
            sums[token] = sums.get(token, 0.0) + float(scores[row, t])
            numbers[token] = numbers.get(token, 0) + 1
        ids = sorted(sums)
        kept, drawn = reference_rank([sums[token] / numbers[token] for token in ids], ratio, generator, tolerance)
        kept_ids, drawn_ids = {ids[i] for i in kept}, {ids[i] for i in drawn}
        for row, t in positions:
            selected[row, t] = int(token_ids[row, t]) in kept_ids
            decided[row, t] = int(token_ids[row, t]) in drawn_ids
    return selected, decided

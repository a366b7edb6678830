"""Python-list references for the token selections: the exact count ``ceil(ratio n)`` and each
population ranked alone (``tests/test_selectors.py``, ``test_ranking.py``); and
:func:`make_inputs`, the random selector inputs those tests share."""

from __future__ import annotations

import math
from fractions import Fraction

import torch

from ict.core.selectors import SelectionInputs
from ict.core.stats import JS_REFERENCES, TokenStatistics


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

def reference_rank(values, ratio, keys, tolerance=1e-6):
    """One population's ``(kept, drawn)`` entries of ``values`` with Python lists: the k-th largest
    (NaN as +inf), the values above it by more than the tolerance, and the remaining slots drawn
    among the values within the tolerance: those of the smallest ``keys`` (one per value)."""
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
    drawn = sorted(tied, key=lambda i: keys[i])[:slots]
    return sure + drawn, drawn

def reference_keys(rows, columns, generator):
    """The tie keys: ``rows x columns`` uniform float64 numbers from the generator (a new one
    seeded with 0 when None), as nested lists."""
    generator = generator or torch.Generator().manual_seed(0)
    return torch.rand((rows, columns), generator=generator, dtype=torch.float64).tolist()

def reference_top_fraction(scores, mask, ratio, scope, group_ids, generator, tolerance=1e-6):
    """Every population ranked alone (:func:`reference_rank`), populations in order, positions
    row-major; one key per token (``[B, T]``, drawn once)."""
    batch, length = mask.shape
    selected = torch.zeros(batch, length, dtype=torch.bool)
    decided = torch.zeros(batch, length, dtype=torch.bool)
    keys = reference_keys(batch, length, generator) if batch else []
    for rows in reference_populations(batch, scope, group_ids):
        positions = [(row, t) for row in rows for t in range(length) if mask[row, t]]
        kept, drawn = reference_rank([float(scores[row, t]) for row, t in positions], ratio,
                                     [keys[row][t] for row, t in positions], tolerance)
        for i in kept:
            selected[positions[i]] = True
        for i in drawn:
            decided[positions[i]] = True
    return selected, decided

def reference_top_unique(scores, token_ids, mask, ratio, scope, group_ids, generator, tolerance=1e-6):
    """Each population alone with Python lists: its response tokens' ids, ascending; each id's mean
    score (float64, summed row-major) ranked by :func:`reference_rank`, with one key per
    (population, id) (``[P, max U]``, drawn once); an id's positions follow it (tie-decided with
    it)."""
    batch, length = mask.shape
    selected = torch.zeros(batch, length, dtype=torch.bool)
    decided = torch.zeros(batch, length, dtype=torch.bool)
    populations = []
    for rows in reference_populations(batch, scope, group_ids):
        positions = [(row, t) for row in rows for t in range(length) if mask[row, t]]
        sums: dict[int, float] = {}
        numbers: dict[int, int] = {}
        for row, t in positions:
            token = int(token_ids[row, t])
            sums[token] = sums.get(token, 0.0) + float(scores[row, t])
            numbers[token] = numbers.get(token, 0) + 1
        populations.append((positions, sums, numbers))
    width = max((len(sums) for _, sums, _ in populations), default=0)
    keys = reference_keys(len(populations), width, generator) if width else []
    for population, (positions, sums, numbers) in enumerate(populations):
        ids = sorted(sums)
        kept, drawn = reference_rank([sums[token] / numbers[token] for token in ids], ratio,
                                     keys[population] if ids else [], tolerance)
        kept_ids, drawn_ids = {ids[i] for i in kept}, {ids[i] for i in drawn}
        for row, t in positions:
            selected[row, t] = int(token_ids[row, t]) in kept_ids
            decided[row, t] = int(token_ids[row, t]) in drawn_ids
    return selected, decided


def make_inputs(seed: int = 0, batch: int = 4, length: int = 16, vocab: int = 11, mask_rate: float = 0.3):
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, length, generator=generator) > mask_rate
    stats = TokenStatistics(
        log_probs=-torch.rand(batch, length, generator=generator) * 8,
        entropy=torch.rand(batch, length, generator=generator) * 3,
        renyi2=torch.rand(batch, length, generator=generator),
        js_scores={
            name: torch.rand(batch, length, generator=generator) * math.log(2) for name in JS_REFERENCES
        },
    )
    return SelectionInputs(
        stats=stats,
        response_mask=mask,
        advantages=torch.randn(batch, generator=generator),
        token_ids=torch.randint(0, vocab, (batch, length), generator=generator),
        generator=torch.Generator().manual_seed(seed + 1),
        group_ids=torch.arange(batch) // 2,
    )

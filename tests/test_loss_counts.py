"""The one rule of what a micro-batch's loss counts (``ict.core.loss``: ``loss_counts``, its
``[4]`` int64 counts, and ``counted_weight``, the weight they give), against counts made by hand
in Python on random selections: each aggregation x denominator, the sum of two micro-batches'
counts, the host reads of ``aggregation_weight``, and TRL's ``ours_weights`` (its float32
denominators, built here with NumPy's float32 from the hand counts). verl's micro-batch scales:
``test_integration_verl_batches.py``."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from ict.core.loss import (
    AGGREGATIONS,
    LOSS_COUNTS,
    PolicyLossConfig,
    aggregation_weight,
    counted_weight,
    loss_counts,
)
from ict.integrations.trl_loss import ours_weights

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
try:
    from sync_census import SyncCensus
finally:
    sys.path.pop(0)


def _random_selection(seed: int, rows: int = 7, length: int = 9) -> tuple[torch.Tensor, torch.Tensor]:
    """A ``[rows, length]`` response mask (row 0 empty, the others of random lengths) and a random
    selection reaching past it; row 1 has response tokens and none selected."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, length + 1, (rows,), generator=generator)
    lengths[0] = 0
    mask = torch.arange(length)[None, :] < lengths[:, None]
    selected = torch.rand(rows, length, generator=generator) < 0.4
    selected[1] = ~mask[1]  # selected only outside its response
    return selected, mask


def _hand_counts(selected: torch.Tensor, mask: torch.Tensor) -> dict[str, int]:
    """The counts by position, in plain Python."""
    picked = [[s and m for s, m in zip(srow, mrow)] for srow, mrow in zip(selected.tolist(), mask.tolist())]
    return {"selected": sum(sum(row) for row in picked), "response": sum(sum(row) for row in mask.tolist()),
            "rows_selected": sum(any(row) for row in picked), "rows": len(picked),
            "per_row": [sum(row) for row in mask.tolist()], "per_row_selected": [sum(row) for row in picked]}


# (aggregation, denominator) -> the hand count that weighs a micro-batch's loss
WEIGHT_OF = {("token_mean", "selected"): "selected", ("token_mean", "all"): "response",
             ("seq_mean_token_mean", "selected"): "rows_selected", ("seq_mean_token_mean", "all"): "rows",
             ("seq_mean_token_sum_norm", "selected"): "rows", ("seq_mean_token_sum_norm", "all"): "rows"}


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("denominator", ["selected", "all"])
@pytest.mark.parametrize("aggregation", AGGREGATIONS)
def test_the_one_rule_is_the_hand_count_of_each_aggregation_and_denominator(aggregation, denominator, seed):
    """``loss_counts`` is int64 ``[4]`` in ``LOSS_COUNTS``' order; ``counted_weight`` of its
    read-back values, ``aggregation_weight`` and ``counted_weight`` of two halves' summed counts are
    the hand count; ``aggregation_weight`` reads one value back, none when the weight is the rows."""
    selected, mask = _random_selection(seed)
    hand = _hand_counts(selected, mask)
    config = PolicyLossConfig(aggregation=aggregation, denominator=denominator)
    expected = float(hand[WEIGHT_OF[aggregation, denominator]])
    counts = loss_counts(selected, mask)
    assert counts.dtype == torch.int64 and counts.shape == (4,)
    assert counts.tolist() == [hand[name] for name in LOSS_COUNTS]
    assert counted_weight(counts.tolist(), config) == expected
    halves = loss_counts(selected[:3], mask[:3]) + loss_counts(selected[3:], mask[3:])
    assert counted_weight(halves.tolist(), config) == expected
    census = SyncCensus()
    with census:
        weight = aggregation_weight(selected, mask, config)
    assert weight == expected and isinstance(weight, float)
    assert census.total() == (0 if WEIGHT_OF[aggregation, denominator] == "rows" else 1), census.counts
    assert expected > 0  # the random selection reaches every count


def _float32_weight(loss_type: str, hand: dict, total: dict, row: int) -> np.float32:
    """TRL's float32 weight of a selected token of ``row`` (ours_weights' formula), from hand counts:
    ``n_b / n_sel_b * (B / S)`` or ``N / N_sel`` (``total``: the processes' sums)."""
    f32 = np.float32
    if loss_type in ("dr_grpo", "luspo"):
        return f32(1.0)
    if loss_type in ("grpo", "sapo"):
        per_row = f32(hand["per_row"][row]) / f32(max(hand["per_row_selected"][row], 1))
        return per_row * (f32(total["rows"]) / f32(max(total["rows_selected"], 1)))
    return f32(total["response"]) / f32(max(total["selected"], 1))


@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("loss_type", ["grpo", "sapo", "bnpo", "dapo", "cispo", "dr_grpo", "luspo"])
def test_trls_ours_weights_are_the_float32_hand_formula(loss_type, processes):
    """``ours_weights`` of a random selection, with its own counts or summed with another
    process's (as the trainer's gather does; bnpo keeps its own): NumPy's float32 formula on the
    hand counts bit for bit (the float32 numbers of the float32 counts before), and within float32
    rounding of the exact fraction."""
    selected, mask = _random_selection(3)
    hand = _hand_counts(selected, mask)
    total, counts = dict(hand), None
    if processes == 2:
        other_selected, other_mask = _random_selection(4, rows=5)
        other = _hand_counts(other_selected, other_mask)
        total = {name: hand[name] + other[name] for name in LOSS_COUNTS}
        counts = loss_counts(selected, mask) + loss_counts(other_selected, other_mask)
    if loss_type == "bnpo":
        total = hand
    weights = ours_weights(selected, mask, loss_type, counts)
    reference = np.zeros(tuple(mask.shape), dtype=np.float32)
    for row, (srow, mrow) in enumerate(zip(selected.tolist(), mask.tolist())):
        for position, chosen in enumerate(s and m for s, m in zip(srow, mrow)):
            if chosen:
                reference[row, position] = _float32_weight(loss_type, hand, total, row)
    assert weights.dtype == torch.float32
    assert torch.equal(weights, torch.from_numpy(reference)), (weights, reference)
    if loss_type in ("dapo", "cispo", "bnpo"):
        exact = Fraction(total["response"], total["selected"])
        assert float(weights.max()) == pytest.approx(float(exact), rel=1e-7)


class _FromHost(TorchFunctionMode):
    """Records each ``torch.tensor`` / ``torch.as_tensor`` of Python data given a device: on CUDA a
    copy from host memory without ``non_blocking``, which PyTorch follows with
    ``cudaStreamSynchronize`` (a drain that the operator-level census cannot see on CPU)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.tensor, torch.as_tensor) and kwargs.get("device") is not None:
            self.calls.append(f"{func.__name__}({args[0]!r})")
        return func(*args, **kwargs)


def test_the_counts_copy_nothing_from_the_host():
    """``loss_counts`` (and so TRL's ``ours_weights``, once a micro-batch, and verl's scales) fills
    its rows ``B`` on the device: it built ``torch.tensor(B, device=...)``, a host-to-device copy
    that waits for the GPU's queue."""
    selected, mask = _random_selection(5)
    for call in (lambda: loss_counts(selected, mask), lambda: ours_weights(selected, mask, "dapo")):
        with _FromHost() as mode:
            call()
        assert mode.calls == []
    assert loss_counts(selected, mask)[3].item() == 7

"""ICT's step on a GPU waits for the host at each device synchronisation (a value read back: ``.item()``,
``.tolist()``, ``nonzero``, ``unique``, boolean indexing). Their number must not grow with the batch,
the number of tiles or the number of ranking populations: counted here on CPU tensors, at the
operator level, for the statistics from hidden states, the selection, the loss and its backward."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from operator_log import OperatorLog

from ict.core.loss import PolicyLossConfig, masked_sums, policy_loss
from ict.core.selectors import (
    SelectionInputs,
    method_train_options,
    required_js_references,
    resolve_options,
    select,
)
from ict.core.stats import TokenStatistics, token_statistics_from_hidden

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
try:  # the one definition of which operators synchronise (values read back, copies)
    from sync_census import SyncCensus
finally:
    sys.path.pop(0)


def ict_step_syncs(rows: int, tile: tuple[int, int], backend: str, scope: str,
                   unit: str = "position") -> int:
    generator = torch.Generator().manual_seed(rows)
    length, width, vocab = 8, 16, 100
    hidden = torch.randn(rows, length, width, generator=generator).requires_grad_()
    weight = (torch.randn(vocab, width, generator=generator) * 0.2).requires_grad_()
    token_ids = torch.randint(0, vocab, (rows, length), generator=generator)
    mask = torch.ones(rows, length, dtype=torch.bool)
    mask[::3, length // 2:] = False  # finished rows: the absorbing reference's point masses
    advantages = torch.randn(rows, generator=generator)
    group_ids = torch.arange(rows) // 4
    options = resolve_options("ict", {"scope": scope, "unit": unit})
    config = PolicyLossConfig(aggregation=method_train_options("ict")["aggregation"])
    census = SyncCensus()
    with census:
        stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0,
                                             js_references=required_js_references("ict", options),
                                             group_ids=group_ids, tile_size=tile, backend=backend)
        inputs = SelectionInputs(stats=stats, response_mask=mask, advantages=advantages, token_ids=token_ids,
                                 group_ids=group_ids)
        selection = select("ict", inputs, **options)
        loss, _ = policy_loss(stats, stats.log_probs.detach(), advantages, mask, selection.mask, config)
        loss.backward()
    assert hidden.grad is not None and selection.mask.any()
    return census.total()


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("scope", ["sequence", "group"])
def test_ict_step_syncs_do_not_grow_with_rows_tiles_or_populations(backend, scope):
    small = ict_step_syncs(8, (8, 64), backend, scope)  # 2 groups, 8 token x 2 vocab tiles
    large = ict_step_syncs(32, (8, 32), backend, scope)  # 8 groups, 24 token x 4 vocab tiles
    assert small == large
    # the group layout's 2 (its sizes, counted on the dense mask and read together; its tiles'
    # block sizes and point masses; it took 6 before), the group scope's population table 1 more
    # (its groups and their largest, read together; it took 2); the tie rule none (its keys are
    # drawn on the device); the backward one (its rows with a gradient, rows_with_gradient)
    assert small == (3 if scope == "sequence" else 4)


@pytest.mark.parametrize("scope", ["sequence", "group"])
def test_the_token_id_unit_syncs_do_not_grow_with_populations(scope):
    """ICT's ``unit=token_id`` ablation ranks every population's unique ids at once too."""
    small = ict_step_syncs(8, (8, 64), "torch", scope, "token_id")
    large = ict_step_syncs(32, (8, 32), "torch", scope, "token_id")
    assert small == large
    assert small == (6 if scope == "sequence" else 7)  # 10 and 12 before the group layout's 2 reads


@pytest.mark.parametrize("kind", ["ict", "entropy", "random"])
def test_a_sequence_scoped_selection_with_ties_and_its_loss_never_wait_for_the_device(kind):
    """Between the statistics' forward and the backward nothing is read back: the top-fraction
    ranking, its tie draw (every score tied here, so every row draws) and the loss with its
    backward run on the device alone (the GPU's queue never drains there)."""
    generator = torch.Generator().manual_seed(0)
    log_probs = torch.randn(6, 10, generator=generator).requires_grad_()
    tied = torch.full((6, 10), 0.5)
    stats = TokenStatistics(log_probs, tied.clone(), tied.clone(),
                            {"group_mean": tied.clone(), "group_mean_absorbing": tied.clone()})
    mask = torch.rand(6, 10, generator=generator) > 0.2
    inputs = SelectionInputs(stats=stats, response_mask=mask, advantages=torch.randn(6, generator=generator),
                             token_ids=torch.randint(0, 50, (6, 10), generator=generator),
                             group_ids=torch.arange(6) // 3, old_log_probs=log_probs.detach() - 0.1,
                             generator=torch.Generator().manual_seed(1))
    options = {**resolve_options(kind, {}), "scope": "sequence"} if kind == "ict" else resolve_options(kind, {})
    census = SyncCensus()
    with census:
        selection = select(kind, inputs, **options)
        loss, _ = policy_loss(stats, log_probs.detach() - 0.1, inputs.advantages, mask, selection.mask)
        loss.backward()
    assert census.total() == 0, census.counts
    assert (kind == "random" or selection.tie_decided.any()) and log_probs.grad is not None  # random: no ties


def test_the_loss_reads_its_metrics_back_only_when_one_is_read():
    """`policy_loss` and its backward synchronise nothing: its metrics are computed on the device
    and read back, once for all of them, when the first is read (`LossMetrics`)."""
    generator = torch.Generator().manual_seed(0)
    log_probs = torch.randn(4, 6, generator=generator).requires_grad_()
    stats = TokenStatistics(log_probs, torch.rand(4, 6, generator=generator), torch.rand(4, 6, generator=generator),
                            {"group_mean": torch.rand(4, 6, generator=generator)})
    mask = torch.rand(4, 6, generator=generator) > 0.2
    selected = mask & (torch.rand(4, 6, generator=generator) > 0.5)
    census = SyncCensus()
    with census:
        loss, metrics = policy_loss(stats, log_probs.detach() - 0.1, torch.randn(4, generator=generator), mask,
                                    selected)
        loss.backward()
    assert census.total() == 0, census.counts
    with census:
        fraction, entropy = metrics["selected_fraction"], metrics["entropy"]
        assert set(metrics) >= {"clip_fraction", "js_group_mean_selected", "policy_loss"}
    ((kind, where),) = census.counts  # one read, of LossMetrics' numbers
    assert census.total() == 1 and kind == "read" and where.startswith("ict/core/loss.py:") and "(_read)" in where
    assert fraction == pytest.approx(float(selected.sum() / mask.sum()))
    assert entropy == pytest.approx(float(stats.entropy[mask].double().mean()))


def test_the_loss_metrics_launch_one_operator_more_a_metric():
    """`masked_sums` (a loss's metrics) stacks pairs of one shape and sums them together: one cast
    more a pair, where a sum each took five operators a pair (each a kernel launch on a GPU, a
    host round trip while the device's queue is empty). Counted by `SyncCensus(launches=True)`,
    which leaves views out."""
    generator = torch.Generator().manual_seed(0)

    def launches(num_pairs: int) -> int:
        pairs = [(torch.randn(4, 6, generator=generator), torch.rand(4, 6, generator=generator) > 0.5)
                 for _ in range(num_pairs)]
        census = SyncCensus(launches=True)
        with census:
            masked_sums(pairs, (torch.tensor(1.0),))
        assert census.total() == 0  # and no synchronisation
        return census.total(("launch",))

    assert launches(9) - launches(2) == 7  # was 35 (5 a pair: 12 and 47)
    assert launches(2) <= 10


def test_the_backward_reads_its_rows_with_a_gradient_once_and_indexes_them_without_another_read():
    """`rows_with_gradient` reads one number back, the rows' count, as its last operator when every
    row has a gradient (nothing is queued between that sync and the first tile's product; CUDA's
    `nonzero` syncs midway and launches its index kernels after). When some rows have none, their
    indices are built from the known count (`nonzero_static`), without a second read."""
    from ict.core.stats.tiles import rows_with_gradient

    for grad, want in ((torch.tensor([0.5, -1.0, 2.0]), None), (torch.tensor([0.0, -1.0, 0.0, 3.0]), [1, 3])):
        census, operators = SyncCensus(), OperatorLog()
        with census, operators:
            rows = rows_with_gradient(grad, None)
        assert census.total() == 1 and "nonzero" not in operators.entries, (census.counts, operators.entries)
        assert (rows if rows is None else rows.tolist()) == want
        if want is None:
            assert operators.entries[-1] == "_local_scalar_dense", operators.entries


@pytest.mark.parametrize("references", [("prev",), ("prev", "group_mean_absorbing")])
def test_the_previous_position_reference_reads_nothing_back_beyond_the_row_layout(references):
    """``prev`` finds each row's previous position on the device (``RowOrder.previous_rows``; it
    read 3 values back before): the statistics read back the row layout's sizes alone, 1 read in
    sequence order and 2 in group order, at 8 and 32 rows."""
    from ict.core.stats import token_statistics

    counts = []
    for rows in (8, 32):
        generator = torch.Generator().manual_seed(rows)
        logits = torch.randn(rows, 8, 50, generator=generator)
        token_ids = torch.randint(0, 50, (rows, 8), generator=generator)
        mask = torch.ones(rows, 8, dtype=torch.bool)
        mask[::3, 4:] = False
        census = SyncCensus()
        with census:
            token_statistics(logits, token_ids, mask, 1.0, references, group_ids=torch.arange(rows) // 4,
                             tile_size=(8, 32), backend="torch")
        counts.append(census.total())
    assert counts == [len(references)] * 2, counts

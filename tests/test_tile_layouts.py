"""Inputs laid out unusually, on both backends against float64: logits whose rows alias (an
expanded batch, overlapping windows, ``row_index`` rows read by several positions), logits read
where they lie (a model's ``logits[:, :-1]``, no gathered copy in the Triton kernels), narrow
integer token ids, and a NaN logit in a group (which spoils its group's scores, on both)."""

from __future__ import annotations

import math

import pytest
import torch
from operator_log import OperatorLog
from stats_references import variant_batch
from test_tiles import BACKENDS, DEVICE, HAS_TRITON, run

from ict.core.stats import token_statistics


def float64_log_prob_grad(source: torch.Tensor, view, token_ids, weights, temperature=1.0):
    """d/d source of ``sum weights * log softmax(view(source) / T)[token]``, in float64 autograd."""
    leaf = source.detach().double().requires_grad_()
    log_probs = torch.log_softmax(view(leaf) / temperature, -1).gather(-1, token_ids[..., None])[..., 0]
    (grad,) = torch.autograd.grad((log_probs * weights.double()).sum(), leaf)
    return log_probs.detach(), grad


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["expanded", "overlapping windows", "repeated row_index rows"])
def test_the_gradient_of_logits_whose_rows_alias_is_the_sum_over_the_positions_that_read_them(backend, layout):
    """Several positions reading one row of logits each add their share to that row's gradient.
    Before, the row view accepted an expanded batch (stride 0) and overlapping windows as rows of
    their own, and each tile's gradient was written over the last: off by up to 3.4 here; with a
    ``row_index`` that repeats a row, one position's share was kept."""
    generator = torch.Generator().manual_seed(3)
    batch, length, vocab = 3, 4, 11
    token_ids = torch.randint(0, vocab, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[2, 3] = False
    weights = torch.randn(batch, length, generator=generator) * mask
    kwargs = {}
    if layout == "expanded":
        source = torch.randn(1, length, vocab, generator=generator)

        def view(values):
            return values.expand(batch, length, vocab)
    elif layout == "overlapping windows":
        source = torch.randn(length + batch - 1, vocab, generator=generator)

        def view(values):  # row b: positions b .. b + T - 1 of one sequence, strides (V, V, 1)
            return values.unfold(0, length, 1).transpose(1, 2)
    else:
        source = torch.randn(5, vocab, generator=generator)
        row_index = torch.tensor([[0, 1, 2, 3], [0, 1, 4, 4], [2, 2, 2, 0]])
        kwargs["row_index"] = row_index

        def view(values):
            return values[row_index]
    leaf = source.clone().requires_grad_()
    logits = leaf if layout == "repeated row_index rows" else view(leaf)
    stats = run(token_statistics, backend, logits, token_ids, mask, 1.0, tile_size=(2, 4), **kwargs)
    (grad,) = torch.autograd.grad((stats.log_probs * weights).sum(), leaf)
    expected_log_probs, expected_grad = float64_log_prob_grad(source, view, token_ids, weights)
    torch.testing.assert_close(stats.log_probs.double(), expected_log_probs * mask, atol=1e-6, rtol=0)
    torch.testing.assert_close(grad.double(), expected_grad, atol=1e-6, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8])
def test_narrow_integer_token_ids_give_the_scores_of_long_ones(backend, dtype):
    """int32 and uint8 ids passed the checks, then raised a dtype RuntimeError in the group layout
    (its end tokens are long)."""
    logits, token_ids, mask, group_ids, _ = variant_batch(4)
    keys = ("group_mean_absorbing", "group_mean_loo_absorbing", "seq_mean")
    wide = run(token_statistics, backend, logits, token_ids, mask, 1.0, keys, group_ids=group_ids)
    narrow = run(token_statistics, backend, logits, token_ids.to(dtype), mask, 1.0, keys, group_ids=group_ids)
    torch.testing.assert_close(narrow.log_probs, wide.log_probs, atol=0, rtol=0)
    for key in keys:
        torch.testing.assert_close(narrow.js_scores[key], wide.js_scores[key], atol=0, rtol=0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nan_logit_spoils_every_group_score_of_its_block_on_both_backends(backend):
    """The package's rule: a row with a NaN logit is NaN, and so is every reference that averages
    its distribution, for every metric. The Triton group kernel's ``max(q, tiny)`` and
    leave-one-out ``max(S - p, 0)`` dropped the NaN: the other row scored a finite KL of 86 and a
    total variation of 0.5, near the top of any ranking."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 2, 6, generator=generator)
    logits[0, 0, 1] = math.nan
    token_ids = torch.zeros(3, 2, dtype=torch.long)
    mask = torch.ones(3, 2, dtype=torch.bool)
    group_ids = torch.tensor([0, 0, 1])
    keys = [f"{reference}{metric}" for reference in ("group_mean", "group_mean_loo")
            for metric in ("", ":kl", ":wasserstein")]
    stats = run(token_statistics, backend, logits, token_ids, mask, 1.0, keys, group_ids=group_ids)
    for key in keys:
        scores = stats.js_scores[key]
        assert torch.isnan(scores[:2, 0]).all(), key  # the block of the NaN row, at its position
        assert torch.isfinite(scores[:2, 1]).all() and torch.isfinite(scores[2]).all(), key


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("layout", ["sliced", "one_row", "vocabulary_strided"])
def test_logits_are_read_where_they_lie(backend, layout):
    """A model's ``logits[:, :-1]`` (not viewable as ``[B*T, V]``) is read in place, not copied whole;
    values and the gradient (in the logits' shape) equal those of a contiguous copy. A layout that
    cannot be read as rows (a vocabulary that is not contiguous) is copied, and still right."""
    from ict.core.stats.heads import LogitsHead

    generator = torch.Generator().manual_seed(5)
    batch = 1 if layout == "one_row" else 4
    if layout == "vocabulary_strided":
        logits = torch.randn(23, batch, 8, generator=generator).permute(1, 2, 0).requires_grad_()
    else:
        logits = (torch.randn(batch, 9, 23, generator=generator) * 2).requires_grad_()[:, :-1]
    token_ids = torch.randint(0, 23, (batch, 8), generator=generator)
    mask = torch.ones(batch, 8, dtype=torch.bool)
    mask[0, 5:] = False
    groups = torch.arange(batch) // 2
    flat = LogitsHead(logits).flat
    assert (flat.untyped_storage().data_ptr() == logits.untyped_storage().data_ptr()) == (layout != "vocabulary_strided")
    results = []
    for given in (logits, logits.detach().contiguous().requires_grad_()):
        stats = run(token_statistics, backend, given, token_ids, mask, 0.8, ("group_mean_absorbing", "prev"),
                    tile_size=(3, 7), group_ids=groups)
        (grad,) = torch.autograd.grad((stats.log_probs * torch.linspace(-1, 1, 8)).sum(), given)
        results.append((stats, grad))
    (first, first_grad), (second, second_grad) = results
    assert first_grad.shape == logits.shape
    torch.testing.assert_close(first.log_probs, second.log_probs, atol=0, rtol=0)
    for key in first.js_scores:
        torch.testing.assert_close(first.js_scores[key], second.js_scores[key], atol=0, rtol=0)
    torch.testing.assert_close(first_grad, second_grad, atol=0, rtol=0)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_the_triton_kernels_read_given_logits_where_they_lie():
    """From logits, the Triton kernels read (statistics, group scores) and write (the gradient) each
    row of a tile in the logits and their gradient: no gathered copy of a tile, forward or backward,
    and the same values as the torch folds' gathered tiles."""
    logits, token_ids, mask, groups, _ = variant_batch(31)
    logits = logits.to(DEVICE).requires_grad_()

    def tile_copies(name, args, result):  # a gathered or scattered tile (7 + 7 + 5 ids), or the logits
        return name if name in ("index_select", "index", "index_put_", "index_put") and result.dim() == 2 and \
            result.shape[-1] in (7, 5, 19) else None

    references = ("group_mean_absorbing", "group_mean_loo")
    with OperatorLog(tile_copies) as log:
        stats = token_statistics(logits, token_ids.to(DEVICE), mask.to(DEVICE), 1.0, references, tile_size=(3, 7),
                                 backend="triton", group_ids=groups.to(DEVICE))
        (grad,) = torch.autograd.grad(stats.log_probs.sum(), logits)
    assert log.entries == []
    expected = run(token_statistics, "torch", logits.detach().cpu().requires_grad_(), token_ids, mask, 1.0,
                   references, tile_size=(3, 7), group_ids=groups)
    torch.testing.assert_close(stats.js_scores["group_mean_loo"].cpu(), expected.js_scores["group_mean_loo"],
                               atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(stats.log_probs.cpu(), expected.log_probs, atol=1e-6, rtol=1e-5)

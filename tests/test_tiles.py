"""The tile statistics' two backends against independent float64 computations.

The Triton kernels run here under Triton's interpreter (``TRITON_INTERPRET=1``, set by
conftest.py when no GPU is present), on CPU tensors; the torch folds run natively. Each backend
is checked at tiles that cut the vocabulary unevenly (the test vocabularies are no multiple of
the vocabulary tile) and at one tile that holds everything: log-probs, Shannon and Renyi-2
entropy, every JS reference with every metric, the gradients to logits, hidden states, head
weight and bias, and ICT's masks (equal except where a tie decides).
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from operator_log import OperatorLog
from stats_references import (
    VARIANTS,
    hidden_batch,
    loop_reference_scores,
    reference_statistics,
    variant_batch,
)

from ict.core import selectors
from ict.core.errors import UsageError
from ict.core.stats import (
    TokenStatistics,
    default_tile_size,
    parse_tile_size,
    resolve_backend,
    scores_from_hidden_given_normalisers,
    token_statistics,
    token_statistics_from_hidden,
)

HAS_TRITON = importlib.util.find_spec("triton") is not None
BACKENDS = [
    "torch",
    pytest.param("triton", marks=pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")),
]
TILES = [(3, 5), (4, 7), (64, 4096)]  # (tokens, vocab): uneven cuts of V = 19 / 29, and one tile for all
METRICS = ("js", "kl", "wasserstein")

DEVICE = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def run(function, backend: str, *args, **kwargs):
    """``function(*args, backend=backend, **kwargs)`` with its tensors on the backend's device (the
    Triton kernels on the GPU where there is one, else under the interpreter on the CPU) and its
    results back on the CPU (differentiably)."""
    device = DEVICE if backend == "triton" else torch.device("cpu")

    def move(value):
        return value.to(device) if isinstance(value, torch.Tensor) else value

    def back(value):
        if isinstance(value, torch.Tensor):
            return value.cpu()
        if isinstance(value, TokenStatistics):
            return TokenStatistics(back(value.log_probs), back(value.entropy), back(value.renyi2),
                                   {key: back(scores) for key, scores in value.js_scores.items()})
        if isinstance(value, dict):
            return {key: back(item) for key, item in value.items()}
        if isinstance(value, tuple):
            return tuple(back(item) for item in value)
        return value

    return back(function(*map(move, args), backend=backend, **{key: move(value) for key, value in kwargs.items()}))


def keys_of(references) -> list[str]:
    return [reference if metric == "js" else f"{reference}:{metric}" for reference in references
            for metric in METRICS]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tile", TILES)
def test_logits_path_matches_float64(backend, tile):
    """Every reference and metric in one call (finished and truncated rows, a group of one,
    ``-inf`` logits), temperature 0.8, against plain float64 loops over the full softmax."""
    logits, token_ids, mask, group_ids, _ = variant_batch(2)
    reference_logits = torch.randn_like(logits) * 2
    keys = keys_of((*VARIANTS, "seq_mean", "prev", "ref"))
    stats = run(token_statistics, backend, logits, token_ids, mask, 0.8, keys, reference_logits,
                tile_size=tile, group_ids=group_ids)
    expected = reference_statistics(logits, token_ids, mask, 0.8)
    # -inf logits (masked ids) outside the response: 0, not the reference's -inf * 0
    expected["log_probs"] = torch.where(mask, expected["log_probs"], 0.0)
    for name in ("log_probs", "entropy", "renyi2"):
        torch.testing.assert_close(getattr(stats, name).double(), expected[name], atol=1e-5, rtol=1e-6,
                                   msg=lambda text, name=name: f"{name}: {text}")
    for key in keys:
        reference, _, metric = key.partition(":")
        want = loop_reference_scores(logits, token_ids, mask, group_ids, 0.8, reference, metric or "js",
                                     reference_logits=reference_logits)
        torch.testing.assert_close(stats.js_scores[key].double(), want, atol=2e-5, rtol=1e-6,
                                   msg=lambda text, key=key: f"{key}: {text}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tile", TILES[:2])
def test_logit_gradients_match_float64_autograd(backend, tile):
    logits, token_ids, mask, group_ids, _ = variant_batch(0)
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(3))
    ours = logits.clone().requires_grad_()
    stats = run(token_statistics, backend, ours, token_ids, mask, 0.7, ("group_mean_absorbing",),
                differentiable_entropy=True, tile_size=tile, group_ids=group_ids)
    ((stats.log_probs * weights).sum() + 0.3 * stats.entropy.sum()).backward()
    exact = logits.double().requires_grad_()
    log_p = torch.log_softmax(exact / 0.7, dim=-1)
    entropy = -(log_p.exp() * torch.where(log_p.isfinite(), log_p, 0.0)).sum(-1)
    token_log_p = log_p.gather(-1, token_ids[..., None])[..., 0]
    (((token_log_p * weights + 0.3 * entropy) * mask).sum()).backward()
    torch.testing.assert_close(ours.grad.double(), exact.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tile", TILES)
def test_hidden_path_values_and_gradients_match_float64(backend, tile):
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(5, batch=6)
    groups = torch.tensor([3, 1, 3, 1, 3, 3])
    mask[1, 4:] = False  # a finished row: its end token is absorbed at later positions
    keys = keys_of((*VARIANTS, "seq_mean", "prev"))
    ours = [tensor.clone().requires_grad_() for tensor in (hidden, weight, lm_bias)]
    stats = run(token_statistics_from_hidden, backend, ours[0], ours[1], token_ids, mask, 0.9, keys, groups,
                ours[2], differentiable_entropy=True, tile_size=tile)
    assert_hidden_path_matches_float64(stats, ours, (hidden, weight, lm_bias), token_ids, mask, 0.9, keys, groups)


def assert_hidden_path_matches_float64(stats, leaves, inputs, token_ids, mask, temperature, keys=(), groups=None):
    """``stats`` (from hidden states, head and bias: the ``leaves``, copies of ``inputs``) equal
    float64 ones: values, every score of ``keys``, and the gradients of ``sum(log p * w) + 0.2 sum(H)``
    to the three inputs."""
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(4))
    ((stats.log_probs * weights).sum() + 0.2 * stats.entropy.sum()).backward()
    exact = [tensor.double().requires_grad_() for tensor in inputs]
    logits = exact[0] @ exact[1].T + exact[2]
    expected = reference_statistics(logits.detach(), token_ids, mask, temperature)
    for name in ("log_probs", "entropy", "renyi2"):
        torch.testing.assert_close(getattr(stats, name).double(), expected[name], atol=1e-5, rtol=1e-6)
    for key in keys:
        reference, _, metric = key.partition(":")
        want = loop_reference_scores(logits.detach(), token_ids, mask, groups, temperature, reference,
                                     metric or "js")
        torch.testing.assert_close(stats.js_scores[key].double(), want, atol=2e-5, rtol=1e-6,
                                   msg=lambda text, key=key: f"{key}: {text}")
    log_p = torch.log_softmax(logits / temperature, dim=-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    token_log_p = log_p.gather(-1, token_ids[..., None])[..., 0]
    (((token_log_p * weights + 0.2 * entropy) * mask).sum()).backward()
    for name, mine, theirs in zip(("hidden", "weight", "bias"), leaves, exact):
        torch.testing.assert_close(mine.grad.double(), theirs.grad, atol=2e-5, rtol=1e-5,
                                   msg=lambda text, name=name: f"grad {name}: {text}")


class TileRows:
    """Counts the rows of every logits tile a head computes or reads (both heads, both backends)."""

    def __init__(self, monkeypatch) -> None:
        from ict.core.stats.heads import LinearHead, LogitsHead

        self.rows: list[int] = []
        for cls in (LinearHead, LogitsHead):
            original = cls.tile

            def counted(head, rows, *args, original=original, **kwargs):
                self.rows.append(rows.shape[0])
                return original(head, rows, *args, **kwargs)

            monkeypatch.setattr(cls, "tile", counted)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("source", ["hidden", "logits"])
@pytest.mark.parametrize("reached", ["some", "none"])
def test_the_backward_computes_only_the_tiles_of_rows_with_a_gradient(backend, source, reached, monkeypatch):
    """A loss that reaches only some rows (ICT's selected tokens; here every third response row
    from the fourth, or none) recomputes in the backward only those rows' tiles (from hidden states
    in one token tile of narrower vocabulary tiles, `backward_tile`), and its gradients to hidden states, head and bias (or logits) equal
    float64 autograd's; the rows it does not reach get exactly zero."""
    tile = (4, 7)
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(13, batch=6)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    positions = mask.nonzero()
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(5))
    reach = torch.zeros(mask.shape, dtype=torch.bool)
    if reached == "some":
        reach[positions[3::3, 0], positions[3::3, 1]] = True
    weights = torch.where(reach, weights, 0.0)
    inputs = (hidden, weight, lm_bias) if source == "hidden" else (hidden @ weight.T + lm_bias,)
    leaves = [tensor.clone().requires_grad_() for tensor in inputs]
    function = token_statistics_from_hidden if source == "hidden" else token_statistics
    arguments = (*leaves[:2], token_ids, mask, 0.9, ("group_mean_absorbing",), groups) if source == "hidden" else (
        leaves[0], token_ids, mask, 0.9, ("group_mean_absorbing",))
    extra = {"lm_head_bias": leaves[2]} if source == "hidden" else {"group_ids": groups}
    stats = run(function, backend, *arguments, tile_size=tile, **extra)
    counter = TileRows(monkeypatch)
    (stats.log_probs * weights).sum().backward()
    reached_rows, vocab = int(reach.sum()), weight.shape[0]
    if source == "hidden" and reached == "some":  # 5 rows: one token tile, each 7-id slice cut in two
        assert reached_rows == 5 and counter.rows == [5] * sum(-(-len(range(start, min(start + 7, vocab))) // 4)
                                                             for start in range(0, vocab, 7))
    else:  # the forward's tiles
        assert sum(counter.rows) == -(-vocab // tile[1]) * reached_rows
        assert all(rows <= tile[0] for rows in counter.rows)
    exact = [tensor.double().requires_grad_() for tensor in inputs]
    logits = exact[0] @ exact[1].T + exact[2] if source == "hidden" else exact[0]
    token_log_p = torch.log_softmax(logits / 0.9, dim=-1).gather(-1, token_ids[..., None])[..., 0]
    (token_log_p * weights * mask).sum().backward()
    for mine, theirs in zip(leaves, exact):
        torch.testing.assert_close(mine.grad.double(), theirs.grad, atol=2e-5, rtol=1e-5)
    rows_grad = leaves[0].grad
    assert not rows_grad[~reach].any()


def test_the_backward_takes_up_to_tokens_plus_vocab_rows_in_one_narrower_token_tile():
    """GRPO's 16,384 rows at the GPU's 4096 x 32768 tiles: one token tile of 8,192 ids (as many
    elements); up to tokens + vocab rows likewise, beyond that and within one token tile the
    forward's tiles (a head that computes its logits; given logits keep the forward's)."""
    from ict.core.stats.heads import LinearHead, LogitsHead

    backward_tile = LinearHead.backward_tile
    assert backward_tile(16384, 4096, 32768) == (16384, 8192)
    assert backward_tile(36864, 4096, 32768) == (36864, 3641)  # 9 times narrower, ceil(32768 / 9)
    assert backward_tile(36865, 4096, 32768) == (4096, 32768)
    assert backward_tile(4096, 4096, 32768) == backward_tile(1638, 4096, 32768) == (4096, 32768)
    assert backward_tile(2048, 256, 8192) == (2048, 1024)  # the CPU's tiles, the offline default's rows
    assert backward_tile(5, 4, 7) == (5, 4)
    assert LogitsHead.backward_tile(16384, 4096, 32768) == (4096, 32768)  # given logits: the forward's


def test_rows_with_gradient_keeps_every_row_either_term_reaches_and_nan():
    """A row is skipped only when both its terms are zero (-0.0 included); NaN is kept (it must
    spread as it would); None when every row has a gradient, or no term is given."""
    from ict.core.stats.tiles import rows_with_gradient

    log_probs = torch.tensor([0.0, 1.0, -0.0, float("nan"), 0.0, 2.0])
    entropy = torch.tensor([0.0, 0.0, 0.0, 0.0, -3.0, 0.0])
    assert rows_with_gradient(log_probs, None).tolist() == [1, 3, 5]
    assert rows_with_gradient(None, entropy).tolist() == [4]
    assert rows_with_gradient(log_probs, entropy).tolist() == [1, 3, 4, 5]
    assert rows_with_gradient(log_probs + 1.0, None) is None
    assert rows_with_gradient(None, None) is None
    assert rows_with_gradient(torch.zeros(3), None).numel() == 0


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("autocast", [False, True])
@pytest.mark.parametrize("dense", [False, True])
def test_bfloat16_hidden_states_match_float64_of_the_rounded_logits(backend, autocast, dense):
    """bf16 hidden states and head, or float32 ones under bf16 autocast (mixed precision): each
    tile's logits are a bf16 matrix product, read as float32, and the folds stay in float32 under
    autocast; the statistics equal float64 ones of those bf16 logits. ``dense``: every position a
    response and no group reference, so the rows are read as a view of the hidden states (cast too)."""
    hidden, weight, _, token_ids, mask = hidden_batch(7, batch=6, bias=False)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    references = () if dense else ("group_mean_absorbing",)
    mask = torch.ones_like(mask) if dense else mask
    if not autocast:
        hidden, weight = hidden.bfloat16(), weight.bfloat16()
    device_type = DEVICE.type if backend == "triton" else "cpu"
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast):
        stats = run(token_statistics_from_hidden, backend, hidden, weight, token_ids, mask, 1.0,
                    references, groups, tile_size=(64, 4096), differentiable_entropy=True)
    hidden, weight = hidden.bfloat16(), weight.bfloat16()
    device = DEVICE if backend == "triton" else torch.device("cpu")  # the tiles' bf16 product
    logits = (hidden.to(device) @ weight.to(device).T).double().cpu()
    expected = reference_statistics(logits, token_ids, mask, 1.0)
    torch.testing.assert_close(stats.log_probs.double(), expected["log_probs"], atol=1e-5, rtol=1e-6)
    torch.testing.assert_close(stats.entropy.double(), expected["entropy"], atol=1e-5, rtol=1e-6)
    for reference in references:
        want = loop_reference_scores(logits, token_ids, mask, groups, 1.0, reference, "js")
        torch.testing.assert_close(stats.js_scores[reference].double(), want, atol=2e-5, rtol=1e-6)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tokens", [64, 4])
@pytest.mark.parametrize("precision", ["bfloat16", "autocast"])
def test_a_half_precision_heads_gradients_match_float64_of_the_rounded_logits(backend, tokens, precision,
                                                                              monkeypatch):
    """bf16 hidden states, head and bias, or float32 ones under bf16 autocast: their gradients,
    written once a vocabulary slice in their own dtype (one token tile holds every row: no zero
    fill, no float32 copy of a bf16 head's gradient) or summed over several token tiles in float32
    and cast once, equal float64's from the same bf16 logits, within the rounding of the logit
    gradients (and of the result to bf16) (relative norm 1e-2)."""
    from ict.core.stats import heads

    hidden, weight, lm_bias, token_ids, mask = hidden_batch(9, batch=6)
    rows = int(mask.sum())
    assert 4 + 7 < rows <= 64  # tokens=64: one token tile; tokens=4: the forward's tiles (backward_tile)
    dtype = torch.bfloat16 if precision == "bfloat16" else torch.float32
    leaves = [tensor.to(dtype).requires_grad_() for tensor in (hidden, weight, lm_bias)]
    scale = torch.randn(mask.shape, generator=torch.Generator().manual_seed(3)) * mask
    writes, product = [], heads._product

    def counted(out, left, right, add):  # the head's slices written (the rows' gradient is added into)
        if not add:
            writes.append(out.dtype)
        product(out, left, right, add)

    monkeypatch.setattr(heads, "_product", counted)
    device_type = DEVICE.type if backend == "triton" else "cpu"
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=precision == "autocast"):
        stats = run(token_statistics_from_hidden, backend, leaves[0], leaves[1], token_ids, mask, 1.0,
                    lm_head_bias=leaves[2], tile_size=(tokens, 7))
    (stats.log_probs * scale).sum().backward()
    assert writes == ([dtype] * -(-weight.shape[0] // 7) if tokens == 64 else [])  # the head's slices
    bf16 = [leaf.detach().bfloat16() for leaf in leaves]  # the tiles' operands
    hidden64, weight64, bias64 = (tensor.double() for tensor in bf16)
    logits = (bf16[0] @ bf16[1].T + bf16[2]).double()  # the tiles' bf16 logits
    grad_logits = (torch.nn.functional.one_hot(token_ids, weight.shape[0]).double()
                   - torch.softmax(logits, dim=-1)) * scale.double()[..., None]
    expected = (grad_logits @ weight64, grad_logits.flatten(0, 1).T @ hidden64.flatten(0, 1),
                grad_logits.sum(dim=(0, 1)))
    for leaf, want in zip(leaves, expected):
        assert leaf.grad is not None and leaf.grad.dtype == dtype
        error = (leaf.grad.double() - want).norm() / want.norm()
        assert error < 1e-2, (leaf.shape, float(error))  # 0.005-0.006 here


@pytest.mark.skipif(not torch.cuda.is_available(), reason="mm's float32 output of bf16 operands runs on CUDA only")
def test_on_a_gpu_a_float32_heads_gradient_slice_is_written_by_one_gemm_of_the_bf16_operands():
    """Under autocast a float32 head's gradient slice ``g.T @ h`` is one GEMM of the bf16 operands
    into the float32 slice (``mm``'s ``out_dtype``), without float32 copies of them (the fallback
    for a torch without it), accumulated in float32 (against float64 of the same operands)."""
    from ict.core.stats.heads import _product

    generator = torch.Generator(device="cuda").manual_seed(5)
    left = torch.randn(37, 300, device="cuda", generator=generator).bfloat16()
    right = torch.randn(300, 24, device="cuda", generator=generator).bfloat16()
    out = torch.empty(37, 24, device="cuda")
    with OperatorLog() as log:
        _product(out, left, right, add=False)
    assert log.entries == ["mm"], log.entries
    torch.testing.assert_close(out.double(), left.double() @ right.double(), atol=1e-3, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
def test_ict_masks_equal_the_float64_masks_except_at_ties(backend):
    """ICT's default selection (top 10% per completion by JS to the absorbing group mean) from the
    tile statistics and from float64 scores: equal wherever no tie at the threshold decides."""
    generator = torch.Generator().manual_seed(11)
    batch, length, vocab = 8, 24, 53
    logits = torch.randn(batch, length, vocab, generator=generator) * 2.5
    token_ids = torch.randint(0, vocab, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[2, 15:] = False
    mask[5, 9:] = False
    groups = torch.arange(batch) // 4
    reference = selectors.ICT_DEFAULT_REFERENCE
    stats = run(token_statistics, backend, logits, token_ids, mask, 1.0, (reference,), tile_size=(16, 16),
                group_ids=groups)
    exact = loop_reference_scores(logits, token_ids, mask, groups, 1.0, reference, "js")
    assert (stats.js_scores[reference].double() - exact).abs().max() < 1e-5
    options = selectors.resolve_options("ict")
    ours = selectors.select("ict", selectors.SelectionInputs(stats, mask, group_ids=groups), **options)
    exact_stats = type(stats)(stats.log_probs, stats.entropy, stats.renyi2, {reference: exact.float()})
    theirs = selectors.select("ict", selectors.SelectionInputs(exact_stats, mask, group_ids=groups), **options)
    differ = ours.mask != theirs.mask
    assert not (differ & ~ours.tie_decided & ~theirs.tie_decided).any()
    assert ours.mask.sum() == theirs.mask.sum()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tile", TILES)
@pytest.mark.parametrize("layout", ["contiguous", "permuted"])
def test_every_position_a_response_reads_the_hidden_rows_as_views_and_matches_float64(backend, tile, layout):
    """Sequence order over every position (no padding, no group reference: GRPO's path) reads each
    token tile's hidden states as a view of the flat rows and writes the hidden states' gradient
    as the rows' accumulator, without a scatter (``RowOrder.dense``); a non-contiguous tensor
    (``permuted``) takes the gather. Values and gradients against float64 either way."""
    from ict.core.stats.rows import sequence_order

    hidden, weight, lm_bias, token_ids, _ = hidden_batch(9, batch=5)
    mask = torch.ones(token_ids.shape, dtype=torch.bool)
    assert sequence_order(mask, tile[0]).dense and not sequence_order(mask.clone().fill_(True).tril(), 4).dense
    leaves = [tensor.clone().requires_grad_() for tensor in (hidden, weight, lm_bias)]
    states = leaves[0] if layout == "contiguous" else leaves[0].transpose(0, 1).contiguous().transpose(0, 1)
    assert states.is_contiguous() == (layout == "contiguous")
    stats = run(token_statistics_from_hidden, backend, states, leaves[1], token_ids, mask, 0.9, (), None,
                leaves[2], differentiable_entropy=True, tile_size=tile)
    assert_hidden_path_matches_float64(stats, leaves, (hidden, weight, lm_bias), token_ids, mask, 0.9)
    assert torch.equal(hidden, leaves[0].detach())  # the views were only read


def test_tile_sizes_and_backends():
    assert parse_tile_size("auto") is None and parse_tile_size(None) is None
    assert parse_tile_size("256x32768") == (256, 32768)
    for bad in ("256", "0x5", "ax5", "4x5x6", "-1x5"):
        with pytest.raises(ValueError, match="TOKENSxVOCAB"):
            parse_tile_size(bad)
    assert default_tile_size(torch.device("cpu"), 151936, "torch") == (256, 8192)
    assert default_tile_size(torch.device("cpu"), 1000, "torch") == (256, 1000)
    assert default_tile_size(torch.device("cpu"), 49152, "torch", from_hidden=False) == (42, 49152)
    assert default_tile_size(torch.device("cuda"), 151936, "triton") == (4096, 32768)
    assert resolve_backend(None, torch.device("cpu")) == "torch"
    with pytest.raises(ValueError, match="unknown statistics backend"):
        resolve_backend("cuda", torch.device("cpu"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "0")
        with pytest.raises(ValueError, match="needs CUDA tensors"):
            resolve_backend("triton", torch.device("cpu"))
    logits, token_ids, mask, _, _ = variant_batch(0)
    with pytest.raises(ValueError, match="positive integers"):
        token_statistics(logits, token_ids, mask, 1.0, tile_size=(0, 5))


def test_a_bad_tile_size_in_a_training_config_is_one_line():
    from ict.training.config_loading import build_config

    with pytest.raises(UsageError, match="stats_tile_size"):
        build_config(options={"stats_tile_size": "big"})
    assert build_config(options={"stats_tile_size": "128x4096"}).stats_tile_size == "128x4096"


@pytest.mark.parametrize("backend", BACKENDS)
def test_packed_logits_with_a_row_index_equal_the_padded_ones(backend):
    """verl's ``[R, V]`` packed logits scored in place (``row_index``) give the statistics of the
    same logits laid out ``[B, T, V]``; the log-prob gradient lands on the packed rows."""
    logits, token_ids, mask, group_ids, _ = variant_batch(1)
    batch, length, vocab = logits.shape
    permutation = torch.randperm(batch * length, generator=torch.Generator().manual_seed(2))
    packed = torch.empty(batch * length, vocab)
    packed[permutation] = logits.reshape(-1, vocab)
    row_index = permutation.view(batch, length)
    keys = keys_of(("group_mean_absorbing", "prev"))
    padded = run(token_statistics, backend, logits, token_ids, mask, 0.9, keys, tile_size=(4, 7),
                 group_ids=group_ids)
    packed = packed.requires_grad_()
    ours = run(token_statistics, backend, packed, token_ids, mask, 0.9, keys, tile_size=(4, 7),
               group_ids=group_ids, row_index=row_index)
    for name in ("log_probs", "entropy", "renyi2"):
        torch.testing.assert_close(getattr(ours, name), getattr(padded, name), atol=1e-6, rtol=0)
    for key in keys:
        torch.testing.assert_close(ours.js_scores[key], padded.js_scores[key], atol=1e-6, rtol=0)
    ours.log_probs.sum().backward()
    untouched = torch.ones(batch * length, dtype=torch.bool)
    untouched[row_index[mask]] = False
    assert (packed.grad[untouched] == 0).all() and packed.grad[~untouched].abs().sum() > 0
    with pytest.raises(ValueError, match="row_index"):
        run(token_statistics, backend, packed, token_ids, mask, 0.9, row_index=row_index[:, :2])


@pytest.mark.parametrize("backend", BACKENDS)
def test_scores_given_normalisers_equal_the_full_pass_and_flag_other_normalisers(backend):
    """The score pass alone, given log Z and H (as TRL's fused head computes them), gives the full
    pass's scores, with a probability mass of 1 per row; a log Z off by 0.01 is flagged."""
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(9, batch=6)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    mask[4, 5:] = False
    keys = ["group_mean_absorbing", "group_mean:kl", "group_mean_loo:wasserstein"]
    full = run(token_statistics_from_hidden, backend, hidden, weight, token_ids, mask, 0.9, keys, groups,
               lm_bias, tile_size=(4, 7))
    logits = (hidden.double() @ weight.double().T + lm_bias.double()) / 0.9
    log_z = torch.logsumexp(logits, dim=-1).float()
    scores, renyi2, deviation = run(
        scores_from_hidden_given_normalisers, backend, hidden, weight, token_ids, mask, 0.9, keys, log_z,
        full.entropy, groups, lm_bias, tile_size=(4, 7))
    assert deviation < 1e-5
    torch.testing.assert_close(renyi2, full.renyi2, atol=1e-5, rtol=0)
    for key in keys:
        torch.testing.assert_close(scores[key], full.js_scores[key], atol=2e-6, rtol=0)
    _, _, off = run(
        scores_from_hidden_given_normalisers, backend, hidden, weight, token_ids, mask, 0.9, keys, log_z + 0.01,
        full.entropy, groups, lm_bias)
    assert off > 5e-3
    with pytest.raises(ValueError, match="hidden must be"):  # the hidden-state path's checks, shared
        scores_from_hidden_given_normalisers(hidden, weight[:, :-1], token_ids, mask, 0.9, keys, log_z,
                                             full.entropy, groups)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
def test_group_kernel_split_over_the_vocabulary_matches_float64(monkeypatch):
    """The group kernel's programs each take a span of a tile's vocabulary (4,096 ids on a GPU);
    spans of 3 ids split these tiles into many parts, whose sums are added up in a fixed order."""
    from ict.core.stats import triton_tiles

    monkeypatch.setattr(triton_tiles, "_GROUP_SPAN", 3)
    logits, token_ids, mask, group_ids, _ = variant_batch(3)
    keys = keys_of(VARIANTS)
    stats = run(token_statistics, "triton", logits, token_ids, mask, 1.1, keys, tile_size=(16, 11),
                group_ids=group_ids)
    for key in keys:
        reference, _, metric = key.partition(":")
        want = loop_reference_scores(logits, token_ids, mask, group_ids, 1.1, reference, metric or "js")
        torch.testing.assert_close(stats.js_scores[key].double(), want, atol=2e-5, rtol=1e-6,
                                   msg=lambda text, key=key: f"{key}: {text}")


def end_token_batch() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """One group of 5 rows: rows 0 and 1 end on token 2 and row 2 on token 3 at position 1, row 4 on
    token 8 at position 2, row 3 runs to the last column (truncated). Logits ``[5, 6, 13]``."""
    token_ids = torch.tensor([[5, 2, 0, 0, 0, 0], [7, 2, 0, 0, 0, 0], [1, 3, 0, 0, 0, 0],
                              [4, 6, 4, 11, 4, 4], [9, 1, 8, 0, 0, 0]])
    mask = torch.arange(6)[None, :] < torch.tensor([2, 2, 2, 6, 3])[:, None]
    logits = torch.randn(5, 6, 13, generator=torch.Generator().manual_seed(8)) * 2
    return logits, token_ids, mask, torch.zeros(5, dtype=torch.long)


def test_finished_rows_with_one_end_token_are_one_point_mass():
    """The absorbing references' point masses: one per end token, weighted by how many finished
    rows end on it (the group kernel loops over them at every vocabulary step)."""
    from ict.core.stats.rows import group_order

    _, token_ids, mask, group_ids = end_token_batch()
    (tile,) = group_order(mask, token_ids, group_ids, None, tokens=64).tiles
    blocks = tile.blocks
    assert blocks.absorbed_token.shape[1] == 3  # 4 finished rows, 3 end tokens
    masses = {int(t): [(int(token), float(count)) for token, count in zip(tokens, counts) if count]
              for t, tokens, counts in zip(range(6), blocks.absorbed_token, blocks.absorbed_count)}
    assert masses == {0: [], 1: [], 2: [(3, 1.0), (2, 2.0)], 3: [(8, 1.0), (3, 1.0), (2, 2.0)],
                      4: [(8, 1.0), (3, 1.0), (2, 2.0)], 5: [(8, 1.0), (3, 1.0), (2, 2.0)]}
    assert blocks.count(True).tolist() == [5.0, 5.0, 5.0, 5.0, 5.0, 5.0]  # rows + point masses
    assert (blocks.absorbed_token[blocks.absorbed_count == 0] == -1).all()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("tile", TILES[:2])
def test_merged_point_masses_match_float64(backend, tile):
    logits, token_ids, mask, group_ids = end_token_batch()
    keys = keys_of(VARIANTS)
    stats = run(token_statistics, backend, logits, token_ids, mask, 0.9, keys, tile_size=tile, group_ids=group_ids)
    for key in keys:
        reference, _, metric = key.partition(":")
        want = loop_reference_scores(logits, token_ids, mask, group_ids, 0.9, reference, metric or "js")
        torch.testing.assert_close(stats.js_scores[key].double(), want, atol=2e-5, rtol=1e-6,
                                   msg=lambda text, key=key: f"{key}: {text}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_large_logits_at_a_temperature_that_is_no_power_of_two(backend):
    """The Triton kernels scale z = x * (1/T) and the torch folds did x / T: at T = 0.7 the two
    round z differently by an ulp, 1e-3 at |z| = 1e4, and the scores the torch side computes from
    a kernel's normalisers (seq_mean, prev, a leave-one-out reference with kl) were off by up to
    1e-3 against float64. One scaling now, on both backends."""
    logits, token_ids, mask, group_ids, _ = variant_batch(3)
    logits = torch.where(torch.isinf(logits), logits, logits / logits[torch.isfinite(logits)].abs().max() * 1e4)
    references = ("seq_mean", "prev", "group_mean_loo")
    stats = run(token_statistics, backend, logits, token_ids, mask, 0.7, js_references=keys_of(references),
                group_ids=group_ids, tile_size=(3, 5))
    for reference in references:
        for metric in METRICS:
            key = reference if metric == "js" else f"{reference}:{metric}"
            expected = loop_reference_scores(logits.double(), token_ids, mask, group_ids, 0.7, reference, metric)
            torch.testing.assert_close(stats.js_scores[key].double(), expected, rtol=1e-6, atol=2e-5, msg=key)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_vocabulary_tile_masked_with_the_lowest_float_is_no_nan(backend, dtype):
    """Ids masked with ``finfo(dtype).min`` (not -inf) over a whole first vocabulary tile: the next
    tile's fold rescaled the old sums by ``0 * (total * delta)``, ``total * delta`` = -inf (the jump
    from -3.4e38), and entropy and every JS score were NaN (float64: entropy 1.0-1.5, finite JS)."""
    logits, token_ids, mask, group_ids, _ = variant_batch(1)
    logits = torch.where(torch.isinf(logits), 0.0, logits)
    logits[..., :10] = torch.finfo(dtype).min
    token_ids = token_ids.clamp(min=10)
    references = ("group_mean_absorbing", "prev")
    stats = run(token_statistics, backend, logits.to(dtype), token_ids, mask, 1.2, js_references=references,
                group_ids=group_ids, tile_size=(3, 10))
    logits = logits.to(dtype).double()
    expected = reference_statistics(logits, token_ids, mask, 1.2)
    for name in ("log_probs", "entropy", "renyi2"):
        torch.testing.assert_close(getattr(stats, name).double(), expected[name], atol=1e-5, rtol=1e-6, msg=name)
    for reference in references:
        want = loop_reference_scores(logits, token_ids, mask, group_ids, 1.2, reference, "js")
        torch.testing.assert_close(stats.js_scores[reference].double(), want, atol=2e-5, rtol=1e-6, msg=reference)


def test_numpy_scalars_are_numbers_as_python_ones_are():
    """np.float32(0.7) as the temperature and np.int64 tile sizes were refused ("must be a finite
    number > 0, got np.float32(0.7)"), while np.float64, a float subclass, passed."""
    import numpy as np

    logits, token_ids, mask, group_ids, _ = variant_batch(4)
    given = token_statistics(logits, token_ids, mask, np.float32(0.7), tile_size=(np.int64(3), np.int64(5)),
                             js_references=("group_mean_absorbing",), group_ids=group_ids)
    plain = token_statistics(logits, token_ids, mask, float(np.float32(0.7)), tile_size=(3, 5),
                             js_references=("group_mean_absorbing",), group_ids=group_ids)
    torch.testing.assert_close(given.log_probs, plain.log_probs, rtol=0, atol=0)
    torch.testing.assert_close(given.js_scores, plain.js_scores, rtol=0, atol=0)
    for bad in (np.bool_(True), np.float32("nan"), torch.tensor(0.7)):
        with pytest.raises(ValueError, match="temperature must be a finite number"):
            token_statistics(logits, token_ids, mask, bad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_hidden_states_of_width_zero_give_the_softmax_of_the_bias(backend):
    """``d = 0`` (logits = the bias): reading the contiguous rows as ``view(-1, 0)`` raised
    "cannot reshape tensor of 0 elements" (a traceback). Now the statistics of ``softmax(bias / T)``
    and the bias's gradient, against float64."""
    bias = torch.tensor([0.0, 1.0, 2.0, -1.0, float("-inf")])
    token_ids, mask = torch.tensor([[0, 1, 2], [3, 0, 1]]), torch.ones(2, 3)  # every position: the rows as a view
    leaves = [torch.zeros(2, 3, 0, requires_grad=True), torch.zeros(5, 0, requires_grad=True),
              bias.clone().requires_grad_()]
    stats = run(token_statistics_from_hidden, backend, *leaves[:2], token_ids, mask, 0.8, ("prev",), None,
                leaves[2], differentiable_entropy=True)
    (stats.log_probs.sum() + stats.entropy.sum()).backward()
    log_p = torch.log_softmax(bias.double().clamp(min=-1e300) / 0.8, dim=-1)
    p = log_p.exp()
    entropy = -(p * log_p.clamp(min=-1e300)).sum()
    torch.testing.assert_close(stats.log_probs.double(), log_p[token_ids] * mask.double(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(stats.entropy.double(), entropy * mask.double(), rtol=1e-6, atol=1e-6)
    # d/db of sum_rows log p(y) + H(p) = sum_rows (onehot(y) - p - p (log p + H)) / T
    onehots = torch.nn.functional.one_hot(token_ids[mask.bool()], 5).double().sum(dim=0)
    expected = (onehots - 6 * (p + p * (log_p.clamp(min=-1e300) + entropy))) / 0.8
    torch.testing.assert_close(leaves[2].grad.double(), expected, rtol=1e-5, atol=1e-6)
    assert leaves[0].grad.shape == (2, 3, 0) and leaves[1].grad.shape == (5, 0)
    assert stats.js_scores["prev"].abs().max() < 1e-6  # every position the same distribution

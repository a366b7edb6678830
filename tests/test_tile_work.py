"""What each pass of the tile algorithm casts and computes, and in which order: on the CPU,
the order of the operators stands for the order in which a GPU's queue receives them (the host's
time between a sync and the next large kernel is the device's idle time)."""

from __future__ import annotations

import os

import pytest
import torch
from operator_log import READS, OperatorLog, casts_of, reads_storage
from stats_references import hidden_batch, reference_statistics

from ict.core.stats import token_statistics, token_statistics_from_hidden

VIEWS = frozenset({"slice", "view", "select", "unsqueeze", "expand", "alias", "t", "as_strided", "unbind"})
"""Operators that only view a tensor (no device work)."""


def _row_casts(weight: torch.Tensor):
    """A label: the shape of each cast of float32 ``[n, d]`` rows (hidden states, gathered or
    not; the head's left out)."""
    def label(name, args, result):
        source = args[0] if args else None
        if (name == "_to_copy" and isinstance(source, torch.Tensor) and source.dtype == torch.float32
                and source.dim() == 2 and source.shape[1] == weight.shape[1] and not reads_storage(source, weight)):
            return tuple(source.shape)
        return None
    return label


@pytest.mark.parametrize("references", [(), ("group_mean_absorbing",)])
def test_each_pass_casts_each_head_slice_once(references):
    """Under bf16 autocast every pass over a float32 head (statistics, score, backward) casts each
    vocabulary slice of the weight once for all its token tiles: 3 vocabulary tiles x (2 or 3
    passes), over several token tiles."""
    hidden, weight, _, token_ids, mask = hidden_batch(11, batch=16, bias=False)
    hidden, weight = hidden.requires_grad_(), weight.requires_grad_()
    counter = OperatorLog(casts_of(weight))
    casts = counter.entries
    vocab = weight.shape[0]
    tile = (-(-int(mask.sum()) // 4), -(-vocab // 3))
    with counter, torch.autocast("cpu", dtype=torch.bfloat16):
        stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, references,
                                             torch.arange(16) // 4, tile_size=tile, backend="torch")
        (stats.log_probs.sum() + sum(score.sum() for score in stats.js_scores.values())).backward()
    assert len(casts) == 3 * (3 if references else 2)
    assert sorted(set(casts)) == sorted({(min(start + tile[1], vocab) - start, weight.shape[1])
                                         for start in range(0, vocab, tile[1])})


@pytest.mark.parametrize("gradient_rows", ["all", "some"])
@pytest.mark.parametrize("references", [(), ("seq_mean",)])
def test_each_pass_casts_each_token_tiles_hidden_states_once(gradient_rows, references):
    """Under bf16 autocast the forward casts each token tile's float32 hidden states once, for all
    its vocabulary tiles and passes (``seq_mean``'s pass of its own included), and the backward
    once, for all its vocabulary tiles (it cast them again per vocabulary tile), over the rows with
    a gradient only."""
    hidden, weight, _, token_ids, mask = hidden_batch(14, batch=16, bias=False)
    hidden, weight = hidden.requires_grad_(), weight.requires_grad_()
    rows, vocab = int(mask.sum()), weight.shape[0]
    tile = (-(-rows // 4), -(-vocab // 3))  # 4 token tiles x 3 vocabulary tiles

    with torch.autocast("cpu", dtype=torch.bfloat16):
        forward = OperatorLog(_row_casts(weight))
        with forward:
            stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, js_references=references,
                                                 tile_size=tile, backend="torch")
        scale = torch.ones(mask.shape) if gradient_rows == "all" else (torch.arange(mask.shape[0]) < 4).float()[:, None]
        backward = OperatorLog(_row_casts(weight))
        with backward:
            (stats.log_probs * scale).sum().backward()
    assert sum(shape[0] for shape in forward.entries) == rows and len(forward.entries) == 4
    reached = int((mask & (scale != 0)).sum())
    assert sum(shape[0] for shape in backward.entries) == reached, backward.entries
    assert len(backward.entries) == -(-reached // tile[0])
    assert hidden.grad is not None and bool(hidden.grad[4:].eq(0).all()) == (gradient_rows == "some")


@pytest.mark.parametrize("gradient_rows", ["all", "some", "none"])
def test_the_backward_casts_its_first_head_slice_before_its_sync(gradient_rows, monkeypatch):
    """The forward queues the first vocabulary slice's cast before the row layout reads its rows
    back, and the backward before `rows_with_gradient` reads their count (on a GPU the cast runs
    while the host waits, and the first product follows the sync sooner); the backward casts each
    slice once whether every row, some or none have a gradient."""
    hidden, weight, _, token_ids, mask = hidden_batch(13, batch=8, bias=False)
    hidden, weight = hidden.requires_grad_(), weight.requires_grad_()
    weight_casts = casts_of(weight)

    def label(name, args, result):  # the head's casts and the reads
        return "read" if name in READS else weight_casts(name, args, result)

    log = OperatorLog(label)
    tolist = torch.Tensor.tolist

    def read_back(tensor):  # a CPU tensor answers .tolist() without the dispatcher
        log.entries.append("read")
        return tolist(tensor)

    monkeypatch.setattr(torch.Tensor, "tolist", read_back)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        with log:
            stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, tile_size=(5, 7),
                                                 backend="torch")
        assert log.entries[:2] == [(7, weight.shape[1]), "read"], log.entries  # the forward's too (the row layout's)
        scale = {"all": torch.ones(mask.shape), "some": (torch.arange(mask.shape[1]) % 2).float().expand(mask.shape),
                 "none": torch.zeros(mask.shape)}[gradient_rows]
        log = OperatorLog(label)
        with log:
            (stats.log_probs * scale).sum().backward()
    vocab, events = weight.shape[0], log.entries
    assert events[:2] == [(7, weight.shape[1]), "read"], events
    casts = [event for event in events if event != "read"]  # each slice once: the first not again
    assert len(casts) == (1 if gradient_rows == "none" else -(-vocab // 7)) and events.count("read") == 1, events
    assert (weight.grad is not None and (weight.grad.abs().sum() > 0) == (gradient_rows != "none"))


def test_a_whole_vocabulary_tile_casts_the_head_in_default_widths_for_the_backward(monkeypatch):
    """A tile that holds the vocabulary keeps its logits for the score pass (one cast of the whole
    head forward); the backward, which keeps nothing, casts at most the default tile's width at a
    time (its peak holds the float32 weight gradient), and its gradients equal those of a run at
    that width throughout."""
    from ict.core.stats import tiles

    monkeypatch.setattr(tiles, "_CPU_TILE", (256, 10))
    hidden, weight, _, token_ids, mask = hidden_batch(12, batch=8, bias=False)
    groups = torch.arange(8) // 4
    results = {}
    for name, tile in (("whole", (64, 4096)), ("narrow", (64, 10))):
        inputs = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        counter = OperatorLog(casts_of(inputs[1]))
        with torch.autocast("cpu", dtype=torch.bfloat16):
            stats = token_statistics_from_hidden(*inputs, token_ids, mask, 1.0, ("group_mean_absorbing",), groups,
                                                 tile_size=tile, backend="torch")
            with counter:
                (stats.log_probs * torch.linspace(-1, 1, mask.shape[1])).sum().backward()
        results[name] = inputs, counter.entries
    (whole, whole_casts), (narrow, narrow_casts) = results["whole"], results["narrow"]
    assert whole_casts == narrow_casts == [(10, 6), (10, 6), (9, 6)]
    for mine, theirs in zip(whole, narrow):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-6, rtol=1e-5)


def _operators(weight: torch.Tensor, token_ids: torch.Tensor):
    """A label: ``"read"`` for a value or size read back (a sync on a GPU), ``"rows"`` for a cast
    of hidden rows (:func:`_row_casts`), ``"targets"`` for a gather of ``token_ids``, else the
    operator's name."""
    row_casts = _row_casts(weight)

    def label(name, args, result):
        if name in READS:
            return "read"
        if row_casts(name, args, result) is not None:
            return "rows"
        if name == "index" and reads_storage(args[0], token_ids):
            return "targets"
        return name
    return label


def _after_last_read_before_first_product(names: list[str]) -> list[str]:
    """The operators between the first product's last preceding read and that product."""
    first = next(index for index, name in enumerate(names) if name in ("mm", "addmm"))
    last_read = max(index for index, name in enumerate(names[:first]) if name == "read")
    return names[last_read + 1:first]


@pytest.mark.parametrize("references", [(), ("group_mean_absorbing",)])
def test_the_first_product_follows_the_row_syncs_before_any_other_tiles_work(references, monkeypatch):
    """The forward queues its first tile's product right after the row layout's last read: before
    the accumulators' allocations, the targets' gather and the group layout's tile blocks (the host
    does them while the device computes), and after the first token tile's cast alone; the other
    tiles' casts come later. The backward's first product follows its rows' count, its accumulator
    and its token tiles' casts (all up front: at their first use a CPU step was slower). Values
    unchanged (the tile tests compare them with float64)."""
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(13, batch=8)
    hidden, weight = hidden.requires_grad_(), weight.requires_grad_()
    groups = torch.arange(8) // 4
    rows = int(mask.sum())
    tile = (-(-rows // 4), 7)  # 4 token tiles (group order may cut them a little differently)
    recorders: list[OperatorLog] = []
    tolist = torch.Tensor.tolist

    def read_back(tensor):  # a CPU tensor answers .tolist() without the dispatcher
        for recorder in recorders:
            recorder.entries.append("read")
        return tolist(tensor)

    monkeypatch.setattr(torch.Tensor, "tolist", read_back)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        forward = OperatorLog(_operators(weight, token_ids))
        recorders[:] = [forward]
        with forward:
            stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, js_references=references,
                                                 group_ids=groups, lm_head_bias=lm_bias, tile_size=tile,
                                                 backend="torch")
        backward = OperatorLog(_operators(weight, token_ids))
        recorders[:] = [backward]
        with backward:
            stats.log_probs.sum().backward()
    tiles = -(-rows // tile[0])  # the backward's token tiles (more rows than tile[0] + 7: the forward's size)
    assert forward.entries.count("rows") >= 4 and backward.entries.count("rows") == tiles == 4
    for operators, casts in ((forward, 1), (backward, tiles)):
        between = _after_last_read_before_first_product(operators.entries)
        assert between.count("rows") == casts, between
        assert not {"full", "targets", "zeros_like", "index_put_", "cumsum", "clone"} & set(between), between
    later = forward.entries[forward.entries.index("addmm"):]
    assert "full" in later and "targets" in later  # the statistics' state and targets, queued after it


def test_the_tiles_of_given_logits_reuse_one_buffer_and_grpos_backward_works_in_it():
    """Given logits, every token tile is gathered into the head's one buffer, forward and backward,
    and a backward without an entropy term turns each tile into its gradient in place: no fresh
    ``[n, V]`` tensor a tile there (on a CPU such tensors cost page faults; docs/benchmarks.md).
    Each tile-shaped result is kept alive, so a freed tile's memory cannot be handed out again and
    pass for reuse."""
    torch.manual_seed(0)
    logits = torch.randn(4, 12, 50).requires_grad_()
    token_ids = torch.randint(0, 50, (4, 12))
    mask = torch.ones(4, 12, dtype=torch.bool)
    tile = (8, 50)  # 48 rows: 6 token tiles of 8, one vocabulary tile
    kept: list[torch.Tensor] = []

    def tile_results(name, args, result):
        if isinstance(result, torch.Tensor) and tuple(result.shape) == tile:
            kept.append(result)
            return name, result.untyped_storage().data_ptr()
        return None

    forward, backward = OperatorLog(tile_results), OperatorLog(tile_results)
    with forward:
        stats = token_statistics(logits, token_ids, mask, 1.0, tile_size=tile, backend="torch")
    with backward:
        (stats.log_probs * torch.randn(4, 1)).sum().backward()
    for log in (forward, backward):
        gathers = [storage for name, storage in log.entries if name == "index_select"]
        assert len(gathers) == 6 and len(set(gathers)) == 1, log.entries
    assert {storage for _, storage in backward.entries} == set(gathers), backward.entries
    reference = torch.log_softmax(logits.detach().double(), -1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(stats.log_probs.double(), reference, atol=1e-5)


@pytest.mark.parametrize("references", [("group_mean",), ("group_mean_loo", "group_mean_loo:wasserstein"),
                                        ("prev", "seq_mean:kl"), ("group_mean_loo_absorbing:kl",),
                                        ("group_mean", "prev")])
def test_the_torch_folds_reuse_their_temporaries_from_tile_to_tile(references):
    """On a CPU the fold's exponentials, the rows' group references and the scores' temporaries
    are written into the run's scratch: each operator's ``[n, V]`` results, over every token tile,
    lie on one storage, or two where it grew once (the temporaries serve the ``[blocks, V]`` group
    means first), and ``index_select``'s on the head's tile buffer and the references' scratch
    (the group's, or ``seq_mean``'s); ``prev`` shifts its rows into scratch too (in group order:
    gathers its partner rows into a buffer of the scratch), and the
    leave-one-out reference with ``kl`` sums the other rows there. All are kept
    alive, so that freed memory cannot pass for reuse."""
    torch.manual_seed(1)
    logits = torch.randn(8, 12, 50)
    token_ids = torch.randint(0, 50, (8, 12))
    mask = torch.ones(8, 12, dtype=torch.bool)
    kept: list[torch.Tensor] = []

    def wide_results(name, args, result):
        if name in ("index_select", "exp", "clamp_min", "sub", "empty_like", "index", "zeros_like", "where", "zeros") \
                and isinstance(result, torch.Tensor) \
                and result.dim() == 2 and result.shape[1] == 50:
            kept.append(result)
            return name, result.untyped_storage().data_ptr()
        return None

    log = OperatorLog(wide_results)
    with log:
        stats = token_statistics(logits, token_ids, mask, 1.0, references, group_ids=torch.arange(8) // 4,
                                 tile_size=(16, 50), backend="torch")
    storages = {name: {storage for entry, storage in log.entries if entry == name} for name, _ in log.entries}
    assert sum(name == "exp" for name, _ in log.entries) >= 6  # every token tile folded
    assert len(storages["exp"]) == 1 and len(storages["clamp_min"] | storages.get("sub", set())) <= 2, storages
    # the head's tile buffer, the rows' references, and in group order prev's partner rows
    in_group_order = "prev" in references and any(key.startswith("group_mean") for key in references)
    assert len(storages["index_select"]) == 2 + in_group_order, storages
    # no fresh tile of prev, seq_mean or the leave-one-out sums of the others (kl); the blocks' sums
    # are zeroed in place (the one "zeros" a call: seq_mean's [B, V] sums)
    assert not {"empty_like", "index", "zeros_like", "where"} & set(storages), storages
    assert len(storages.get("zeros", ())) <= 1, storages
    assert all(torch.isfinite(score).all() for score in stats.js_scores.values())


def test_a_tile_buffer_reuses_its_storage_until_a_tile_needs_more_or_another_dtype_or_device():
    """``TileBuffer.take`` hands out views of one storage while the tiles fit it; a larger tile, a
    tile of another dtype or one on another device gets a new storage (on that device)."""
    from ict.core.stats.buffers import TileBuffer

    buffer, cpu = TileBuffer(), torch.device("cpu")
    first = buffer.take(4, 6, torch.float32, cpu)
    smaller = buffer.take(3, 5, torch.float32, cpu)
    assert smaller.shape == (3, 5) and smaller.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
    larger = buffer.take(5, 6, torch.float32, cpu)
    assert larger.untyped_storage().data_ptr() != first.untyped_storage().data_ptr()
    assert buffer.take(2, 2, torch.float64, cpu).dtype == torch.float64
    on_meta = buffer.take(2, 2, torch.float64, torch.device("meta"))
    assert on_meta.device.type == "meta" and buffer.take(2, 2, torch.float64, cpu).device == cpu


def _tile_products(tiles: set[tuple[int, int]]):
    """A label: each elementwise product (``mul``/``mul_``) with a ``[n, vt]`` tile-shaped result."""
    def label(name, args, result):
        if name in ("mul", "mul_") and isinstance(result, torch.Tensor) and tuple(result.shape) in tiles:
            return name
        return None
    return label


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_a_half_precision_tile_is_cast_and_scaled_in_one_product_at_most(temperature):
    """GRPO's statistics from hidden states under bf16 autocast, 2 token tiles x 3 vocabulary
    tiles: the forward's fold multiplies each tile by ``1/T`` (none at ``T = 1``: ``x * 1 == x``)
    and forms ``(z - m) e^(z - m)`` and ``e^(2(z - m))`` (entropy and Renyi-2): 2 + (T != 1)
    products a tile; the backward of ``log p(y)`` alone (the forward's tiles: 32 rows are more
    than 16 + 10) scales by ``1/T``, multiplies ``p`` by the row's gradient and the gradient by
    ``1/T``, 1 + 2 (T != 1) per tile. At ``T = 1`` the cast tile was multiplied by 1 besides, a
    pass over it in the forward and one in the backward."""
    hidden, weight, _, token_ids, _ = hidden_batch(3, batch=4, length=8, width=6, vocab=30, bias=False)
    mask = torch.ones(4, 8, dtype=torch.bool)
    hidden, weight = hidden.requires_grad_(), weight.requires_grad_()
    tiles = {(16, 10)}
    with torch.autocast("cpu", dtype=torch.bfloat16):
        forward = OperatorLog(_tile_products(tiles))
        with forward:
            stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, temperature, tile_size=(16, 10),
                                                 backend="torch")
    backward = OperatorLog(_tile_products(tiles))
    with backward:
        stats.log_probs.sum().backward()
    scaling = temperature != 1.0
    assert len(forward.entries) == 6 * (2 + scaling), forward.entries
    assert len(backward.entries) == 6 * (1 + 2 * scaling), backward.entries
    # the numbers: float64 log-softmax of the bf16 product, read as float32
    logits = (hidden.detach().bfloat16() @ weight.detach().bfloat16().T).double() * (1.0 / temperature)
    reference = torch.log_softmax(logits, -1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(stats.log_probs.double(), reference, atol=1e-5)


def test_scaling_a_tile_by_one_over_the_temperature_matches_float32_arithmetic():
    """``scaled``: a bf16 tile read as float32 exactly at ``T = 1`` (a new tensor, the input
    untouched), times float32's ``1/T`` otherwise; a float32 tile overwritten only when asked."""
    from ict.core.stats.torch_tiles import scaled

    tile = torch.tensor([[1.5, -3.0, 1e4, float("-inf")]], dtype=torch.bfloat16)
    exact = torch.tensor([[1.5, -3.0, 9984.0, float("-inf")]], dtype=torch.float64)  # 1e4 in bf16: 9984
    assert torch.equal(scaled(tile, 1.0).double(), exact) and scaled(tile, 1.0).dtype == torch.float32
    inverse = float(torch.tensor(1 / 0.7, dtype=torch.float32))
    assert torch.equal(scaled(tile, 0.7, overwrite=True), (exact * inverse).float())
    assert tile.dtype == torch.bfloat16 and float(tile[0, 0]) == 1.5
    single = torch.tensor([[2.0, -1.0]])
    assert scaled(single, 1.0, overwrite=True) is single and scaled(single, 1.0) is not single
    assert torch.equal(scaled(single, 0.5), torch.tensor([[4.0, -2.0]])) and float(single[0, 0]) == 2.0


def test_the_torch_fold_rescales_its_row_sums_where_they_lie():
    """``fold_statistics`` over two vocabulary tiles: each row's sums ``s``, ``a``, ``q`` are
    rescaled and added to in place (one copy a tile for the target logit and one for the maximum,
    none for the sums; ``z_old_max - m_new`` is formed once, and the tile's column ids once) and
    equal float64's log-sum-exp state of the whole row: ``m = max z``, ``s = sum e^(z-m)``,
    ``a = sum e^(z-m) (z-m)``, ``q = sum e^(2(z-m))``, ``z[y]``."""
    from ict.core.stats.torch_tiles import RowState, fold_statistics

    logits = torch.randn(5, 12, generator=torch.Generator().manual_seed(4)) * 3
    logits[0, 7:] = float("-inf")  # a row whose second tile is masked out
    targets = torch.tensor([0, 5, 6, 11, 3])
    state = RowState.empty(5, torch.device("cpu"))
    tiles = [logits[:, start:start + 6].clone() for start in (0, 6)]
    log = OperatorLog()
    with log:
        for start, tile in zip((0, 6), tiles):
            fold_statistics(state, tile, targets, start, 1.0, overwrite=True)
    assert log.entries.count("copy_") == 2 * 2 and log.entries.count("sub") == 2 * 2, log.entries
    assert "clone" not in log.entries  # the picked logits are scaled where they were gathered (T = 1: not at all)
    z = logits.double()
    m = z.amax(-1)
    shifted = z - m[:, None]
    e = shifted.exp()
    assert torch.equal(state.maximum.double(), m)
    assert torch.allclose(state.total.double(), e.sum(-1), rtol=1e-6)
    assert torch.allclose(state.shifted.double(), (e * shifted.clamp_min(-1e30)).sum(-1), rtol=1e-5, atol=1e-6)
    assert torch.allclose(state.square.double(), (e * e).sum(-1), rtol=1e-6)
    assert torch.equal(state.target.double(), z.gather(1, targets[:, None]).squeeze(1))


def _skip_unless_triton_runs(backend: str) -> None:
    """Skip the Triton case where its kernels cannot run: without triton, or on a CPU without
    ``TRITON_INTERPRET=1``."""
    if backend == "triton":
        pytest.importorskip("triton")
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("the Triton kernels run on a CPU only under TRITON_INTERPRET=1")


def _assert_float64_statistics(stats, hidden, weight, lm_bias, token_ids, mask, temperature) -> None:
    """``stats``' log-probs, entropy and Renyi-2 are float64's (`reference_statistics` of the
    head's logits) within 2e-5 at the response positions, and 0 elsewhere."""
    logits = hidden.double() @ weight.double().T + lm_bias.double()
    expected = reference_statistics(logits, token_ids, mask, temperature)
    for name in ("log_probs", "entropy", "renyi2"):
        value = getattr(stats, name).double()
        assert torch.allclose(value[mask], expected[name][mask], atol=2e-5), name
        assert torch.equal(value[~mask], torch.zeros_like(value[~mask])), name


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_the_statistics_take_the_log_of_each_rows_total_once(backend):
    """The rows' log-normaliser, entropy, Renyi-2 and log-probs share one ``log s`` (the call's
    ``log`` operators on ``[N]``: that one and Renyi-2's ``log q``; it took ``log s`` three
    times), over 3 vocabulary tiles; the values are float64's."""
    _skip_unless_triton_runs(backend)
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(8, batch=3, length=5, width=4, vocab=21)
    rows = int(mask.sum())
    log = OperatorLog(lambda name, args, result: name if name in ("log", "log_") and isinstance(result, torch.Tensor)
                      and tuple(result.shape) == (rows,) else None)
    with log:
        stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 0.8, lm_head_bias=lm_bias,
                                             tile_size=(rows, 8), backend=backend)
    assert log.entries == ["log", "log"], log.entries
    _assert_float64_statistics(stats, hidden, weight, lm_bias, token_ids, mask, 0.8)


def test_statistics_over_every_position_are_returned_without_a_scatter():
    """When the response is every position (sequence order, row-major: the rows are the
    ``[B, T]`` layout), the statistics are views of the rows' values: no ``[B, T]`` zeros filled
    and scattered into (3 each: log-probs, entropy, Renyi-2) and no gather in the backward; the
    values and the hidden states' gradient are float64's. With padding they are scattered (0
    outside the response)."""
    hidden, weight, _, token_ids, padded = hidden_batch(5, batch=3, length=6, width=4, vocab=17, bias=False)
    for mask in (torch.ones_like(padded), padded):
        dense = bool(mask.all())
        leaf = hidden.clone().requires_grad_()
        shapes = (tuple(mask.shape), (int(mask.sum()),))

        def label(name, args, result, shapes=shapes):
            return (name if name in ("zeros", "index_put", "index") and isinstance(result, torch.Tensor)
                    and tuple(result.shape) in shapes else None)
        forward, backward = OperatorLog(label), OperatorLog(label)
        with forward:
            stats = token_statistics_from_hidden(leaf, weight, token_ids, mask, 1.0, tile_size=(7, 8),
                                                 backend="torch")
        with backward:
            stats.log_probs.sum().backward()
        scattered = [name for name in forward.entries if name in ("zeros", "index_put")]
        assert (scattered, backward.entries) == (([], []) if dense else (["zeros", "index_put"] * 3, ["index"])), (
            forward.entries, backward.entries)
        reference_hidden = hidden.double().requires_grad_()
        log_p = torch.log_softmax(reference_hidden @ weight.double().T, -1)
        reference = log_p.gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
        (reference * mask).sum().backward()
        assert torch.allclose(stats.log_probs.double(), reference * mask, atol=1e-5)
        assert torch.equal(stats.log_probs[~mask], torch.zeros(int((~mask).sum())))
        assert torch.allclose(leaf.grad.double(), reference_hidden.grad, atol=1e-5)


def test_the_row_layout_reads_three_counts_from_one_sum(monkeypatch):
    """Before the row layout's one read, the forward queues one reduction over three ``[B, T]``
    flags: the response positions, those holding an id outside ``[0, V)``, and those the gradient
    mask marks (6 operators; each count was a sum of its own, with 12 operators before the read).
    The layout holds the mask's rows, and the backward's gradient reaches the marked rows alone:
    float64's gradient there, zero elsewhere."""
    hidden, weight, _, token_ids, mask = hidden_batch(15, batch=5, length=6, width=4, vocab=13, bias=False)
    hidden = hidden.requires_grad_()
    marked = mask & (torch.arange(6) % 3 != 1)
    tolist = torch.Tensor.tolist
    log = OperatorLog(lambda name, args, result: None if name in VIEWS else name)

    def read_back(tensor):  # a CPU tensor answers .tolist() without the dispatcher
        log.entries.append("read")
        return tolist(tensor)

    monkeypatch.setattr(torch.Tensor, "tolist", read_back)
    with log:
        stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, tile_size=(4, 5),
                                             backend="torch", gradient_mask=marked)
    monkeypatch.undo()
    assert log.entries[:log.entries.index("read")] == ["clamp", "ne", "bitwise_and", "bitwise_and", "stack", "sum"]
    assert log.entries.count("read") == 1
    (stats.log_probs * marked).sum().backward()
    reference = hidden.detach().double().requires_grad_()
    log_p = torch.log_softmax(reference @ weight.double().T, -1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)
    (log_p * marked).sum().backward()
    assert torch.allclose(hidden.grad.double(), reference.grad, atol=1e-5)
    assert torch.equal(hidden.grad[~marked], torch.zeros(int((~marked).sum()), 4))
    assert torch.allclose(stats.log_probs.double()[mask], log_p[mask], atol=1e-5)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_the_statistics_are_finished_where_they_are_returned(backend):
    """The rows' log-normaliser, entropy, Renyi-2 and log-prob are each computed into the tensor
    the call returns: of the finish's ``[N]`` copies only the maxima's is left (there were 5), and
    the 5 accumulators are rows of one buffer, filled twice (5 fills); the values are float64's,
    over 3 vocabulary tiles and 2 token tiles."""
    _skip_unless_triton_runs(backend)
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(16, batch=3, length=5, width=4, vocab=21)
    rows = int(mask.sum())

    def label(name, args, result):
        if name == "copy_" and tuple(args[0].shape) == (rows,):
            return "copy"
        if name in ("full", "fill_", "zero_") and isinstance(result, torch.Tensor) and result.numel() >= rows:
            return "fill"
        return None
    log = OperatorLog(label)
    with log:
        stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 0.8, lm_head_bias=lm_bias,
                                             tile_size=(-(-rows // 2), 8), backend=backend)
    assert log.entries == ["fill", "fill", "copy"], log.entries
    _assert_float64_statistics(stats, hidden, weight, lm_bias, token_ids, mask, 0.8)

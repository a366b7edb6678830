"""What each pass of the tile algorithm casts and computes, and in which order: on the CPU,
the order of the operators stands for the order in which a GPU's queue receives them (the host's
time between a sync and the next large kernel is the device's idle time)."""

from __future__ import annotations

import pytest
import torch
from stats_references import hidden_batch
from torch.utils._python_dispatch import TorchDispatchMode

from ict.core.stats import token_statistics_from_hidden


class CastCounter(TorchDispatchMode):
    """Records the shape of every cast (``_to_copy``) that reads ``tensor``'s storage
    (:meth:`counts`)."""

    def __init__(self, tensor: torch.Tensor) -> None:
        super().__init__()
        self.storage = tensor.untyped_storage().data_ptr()
        self.casts: list[tuple[int, ...]] = []

    def counts(self, source: torch.Tensor) -> bool:
        return source.untyped_storage().data_ptr() == self.storage

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.__name__.startswith("_to_copy") and self.counts(args[0]):
            self.casts.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("references", [(), ("group_mean_absorbing",)])
def test_each_pass_casts_each_head_slice_once(references):
    """Under bf16 autocast every pass over a float32 head (statistics, score, backward) casts each
    vocabulary slice of the weight once for all its token tiles: 3 vocabulary tiles x (2 or 3
    passes), over several token tiles."""
    hidden, weight, _, token_ids, mask = hidden_batch(11, batch=16, bias=False)
    hidden, weight = hidden.requires_grad_(), weight.requires_grad_()
    counter = CastCounter(weight)
    casts = counter.casts
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

    class RowCasts(CastCounter):  # casts of float32 [n, d] rows (gathered or not), the head's left out
        def counts(self, source: torch.Tensor) -> bool:
            return (source.dtype == torch.float32 and source.dim() == 2 and source.shape[1] == hidden.shape[-1]
                    and not super().counts(source))

    with torch.autocast("cpu", dtype=torch.bfloat16):
        forward = RowCasts(weight)
        with forward:
            stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, js_references=references,
                                                 tile_size=tile, backend="torch")
        scale = torch.ones(mask.shape) if gradient_rows == "all" else (torch.arange(mask.shape[0]) < 4).float()[:, None]
        backward = RowCasts(weight)
        with backward:
            (stats.log_probs * scale).sum().backward()
    assert sum(shape[0] for shape in forward.casts) == rows and len(forward.casts) == 4
    reached = int((mask & (scale != 0)).sum())
    assert sum(shape[0] for shape in backward.casts) == reached, backward.casts
    assert len(backward.casts) == -(-reached // tile[0])
    assert hidden.grad is not None and bool(hidden.grad[4:].eq(0).all()) == (gradient_rows == "some")


@pytest.mark.parametrize("gradient_rows", ["all", "some", "none"])
def test_the_backward_casts_its_first_head_slice_before_its_sync(gradient_rows):
    """The forward queues the first vocabulary slice's cast before the row layout reads its rows
    back, and the backward before `rows_with_gradient` reads their count (on a GPU the cast runs
    while the host waits, and the first product follows the sync sooner); the backward casts each
    slice once whether every row, some or none have a gradient."""
    hidden, weight, _, token_ids, mask = hidden_batch(13, batch=8, bias=False)
    hidden, weight = hidden.requires_grad_(), weight.requires_grad_()
    storage = weight.untyped_storage().data_ptr()
    events: list[object] = []

    class Events(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            name = func.__name__.split(".")[0]
            if name == "_to_copy" and args[0].untyped_storage().data_ptr() == storage:
                events.append(tuple(args[0].shape))
            elif name in ("_local_scalar_dense", "nonzero"):  # a value or a size read back
                events.append("read")
            return func(*args, **(kwargs or {}))

    with torch.autocast("cpu", dtype=torch.bfloat16):
        with Events():
            stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, tile_size=(5, 7),
                                                 backend="torch")
        assert events[:2] == [(7, weight.shape[1]), "read"], events  # the forward's too (the row layout's)
        events.clear()
        scale = {"all": torch.ones(mask.shape), "some": (torch.arange(mask.shape[1]) % 2).float().expand(mask.shape),
                 "none": torch.zeros(mask.shape)}[gradient_rows]
        with Events():
            (stats.log_probs * scale).sum().backward()
    vocab = weight.shape[0]
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
        counter = CastCounter(inputs[1])
        with torch.autocast("cpu", dtype=torch.bfloat16):
            stats = token_statistics_from_hidden(*inputs, token_ids, mask, 1.0, ("group_mean_absorbing",), groups,
                                                 tile_size=tile, backend="torch")
            with counter:
                (stats.log_probs * torch.linspace(-1, 1, mask.shape[1])).sum().backward()
        results[name] = inputs, counter.casts
    (whole, whole_casts), (narrow, narrow_casts) = results["whole"], results["narrow"]
    assert whole_casts == narrow_casts == [(10, 6), (10, 6), (9, 6)]
    for mine, theirs in zip(whole, narrow):
        torch.testing.assert_close(mine.grad, theirs.grad, atol=1e-6, rtol=1e-5)


class _Operators(TorchDispatchMode):
    """Each operator run under it: ``"read"`` for a value or size read back (a sync on a GPU),
    ``"rows"`` for a cast of hidden rows (``[n, d]`` float32, gathered or not; not the head's),
    ``"targets"`` for a gather of ``token_ids``, else the operator's name."""

    def __init__(self, weight: torch.Tensor, token_ids: torch.Tensor) -> None:
        super().__init__()
        self.weight, self.token_ids = weight.untyped_storage().data_ptr(), token_ids.untyped_storage().data_ptr()
        self.width = weight.shape[-1]
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.__name__.split(".")[0]
        source = args[0] if args and isinstance(args[0], torch.Tensor) else None
        if name in ("_local_scalar_dense", "nonzero", "_unique2", "unique_consecutive"):
            name = "read"
        elif (name == "_to_copy" and source is not None and source.dtype == torch.float32 and source.dim() == 2
              and source.shape[-1] == self.width and source.untyped_storage().data_ptr() != self.weight):
            name = "rows"
        elif name == "index" and source is not None and source.untyped_storage().data_ptr() == self.token_ids:
            name = "targets"
        self.names.append(name)
        return func(*args, **(kwargs or {}))

    def after_last_read_before_first_product(self) -> list[str]:
        """The operators between the product's last preceding read and the first product."""
        first = next(index for index, name in enumerate(self.names) if name in ("mm", "addmm"))
        last_read = max(index for index, name in enumerate(self.names[:first]) if name == "read")
        return self.names[last_read + 1:first]


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
    recorders: list[_Operators] = []
    tolist = torch.Tensor.tolist

    def read_back(tensor):  # a CPU tensor answers .tolist() without the dispatcher
        for recorder in recorders:
            recorder.names.append("read")
        return tolist(tensor)

    monkeypatch.setattr(torch.Tensor, "tolist", read_back)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        forward = _Operators(weight, token_ids)
        recorders[:] = [forward]
        with forward:
            stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, js_references=references,
                                                 group_ids=groups, lm_head_bias=lm_bias, tile_size=tile,
                                                 backend="torch")
        backward = _Operators(weight, token_ids)
        recorders[:] = [backward]
        with backward:
            stats.log_probs.sum().backward()
    tiles = -(-rows // tile[0])  # the backward's token tiles (more rows than tile[0] + 7: the forward's size)
    assert forward.names.count("rows") >= 4 and backward.names.count("rows") == tiles == 4
    for operators, casts in ((forward, 1), (backward, tiles)):
        between = operators.after_last_read_before_first_product()
        assert between.count("rows") == casts, between
        assert not {"full", "targets", "zeros_like", "index_put_", "cumsum", "clone"} & set(between), between
    later = forward.names[forward.names.index("addmm"):]
    assert "full" in later and "targets" in later  # the statistics' state and targets, queued after it

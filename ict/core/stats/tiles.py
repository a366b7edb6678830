"""The tile algorithm: token statistics over token x vocabulary tiles, forward and backward.

The response rows are cut into token tiles (``tokens`` rows; whole (position, group) blocks when a
group reference is scored) and the vocabulary into tiles of ``vocab`` ids. Each pass visits every
token tile once per vocabulary tile, vocabulary tiles outermost, so a head's slice is cast to the
compute dtype once a pass (:meth:`~ict.core.stats.heads.LinearHead.weight_slice`), not once per
token tile, and each token tile's hidden states once a call's forward (at its first use, kept for
the vocabulary tiles and passes after) and once its backward (up front). The forward's first tile's
product is queued right after the row layout's syncs, before anything else of the call, so that
the device computes while the host sets up the rest:

1. **statistics pass** - each logits tile (a matrix product of the rows' hidden states with the
   head's slice, or a slice of given logits) is folded into its rows' online log-sum-exp state
   (``fold_statistics``): log-normaliser, sampled token's log-prob, Shannon and Renyi-2 entropy;
2. **score pass** (only when a JS reference is asked) - the tiles again: each reference's sums
   (:class:`Partials`) are accumulated tile by tile, the group references by ``group_partials``
   (every group variant of the call from the same tile), ``prev``, ``ref`` and ``seq_mean`` in
   torch; ``seq_mean``'s mean is known only after every tile, so it is scored in a third pass.
   When one vocabulary tile holds V, each token tile is scored right after its statistics, from
   the kept tile (the torch folds keep its probabilities).

The backward recomputes each tile of the ``M`` rows that have a gradient (a row whose loss
gradient is zero, e.g. one ICT did not select, is skipped: :func:`rows_with_gradient`, one device
sync; or, when the caller gave a gradient mask, its rows, counted with the forward's layout) and turns
it into the gradient wrt its logits (``logit_grads``), then into ``grad_hidden += g @ W_v`` (a
float32 ``[M, d]`` accumulator), ``grad_W_v += g.T @ h`` (float32) or the rows of ``grad_logits``.
From hidden states, up to ``tokens + vocab`` rows take one token tile of narrower vocabulary
tiles (:meth:`~ict.core.stats.heads.LinearHead.backward_tile`), so each slice of the head's gradient is
written once.

Backends: ``"triton"`` (the kernels of :mod:`ict.core.stats.triton_tiles`, tensors on a GPU, or
anywhere under ``TRITON_INTERPRET=1``; they read and write the rows of given logits where they
lie, an :class:`IndexedTile`) and ``"torch"`` (:mod:`ict.core.stats.torch_tiles`, any device, on
gathered tiles); ``None`` picks Triton for CUDA tensors when it imports, torch otherwise. A head
writes the tiles it gathers or computes into one reused buffer, and on a CPU the torch folds write
their ``[n, vt]`` temporaries into reused scratch (:mod:`ict.core.stats.buffers`)."""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Sequence
from types import ModuleType

import torch
from torch import Tensor

from ict.core.errors import is_integer
from ict.core.stats import torch_tiles
from ict.core.stats.buffers import Scratch, TileBuffer, scratch_like
from ict.core.stats.heads import Head, LinearHead, LogitsHead
from ict.core.stats.rows import (
    IndexedTile,
    RowOrder,
    chunks,
    group_order,
    nonzero_given_count,
    sequence_order,
)
from ict.core.stats.scores import (
    GROUP_MEAN_VARIANTS,
    Partials,
    TokenStatistics,
    score_key,
    scores_from_partials,
    split_score_key,
)
from ict.core.stats.torch_tiles import RowState

TileSize = tuple[int, int]
"""``(tokens, vocab)``: response rows x vocabulary ids per tile."""
BACKENDS = ("torch", "triton")
_TRITON_TILE = (4096, 32768)  # the Triton kernels read the tile in its dtype: no float32 copies
_CPU_TILE = (256, 8192)  # 8 MiB float32 (default_tile_size)
_CPU_TILE_ELEMENTS = 1 << 21


def parse_tile_size(text: str | None) -> TileSize | None:
    """``"auto"`` / empty / None -> None (:func:`default_tile_size`); ``"TOKENSxVOCAB"`` (e.g.
    ``"256x32768"``) -> ``(tokens, vocab)``; ValueError (one line) otherwise."""
    if text is None or str(text).strip().lower() in ("", "auto", "none"):
        return None
    parts = str(text).lower().replace(" ", "").split("x")
    if len(parts) != 2 or not all(part.isdigit() and int(part) > 0 for part in parts):
        raise ValueError(f"tile size must be 'auto' or TOKENSxVOCAB with positive integers (e.g. 256x32768), "
                         f"got {text!r}")
    return int(parts[0]), int(parts[1])


def resolve_backend(backend: str | None, device: torch.device) -> str:
    """The backend to run on ``device``: ``backend`` if given (ValueError if unknown or Triton is
    missing), else ``"triton"`` for a CUDA device with Triton installed, else ``"torch"``."""
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"unknown statistics backend {backend!r}; choose from {', '.join(BACKENDS)}")
    if backend == "torch" or (backend is None and device.type != "cuda"):
        return "torch"
    if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
        raise ValueError(f"the triton statistics backend needs CUDA tensors (got {device.type}; on a CPU "
                         "only under TRITON_INTERPRET=1, set before triton is imported)")
    try:
        importlib.import_module("triton")
    except ImportError as error:
        if backend == "triton":
            raise ValueError(f"the triton statistics backend needs the triton package ({error})") from None
        return "torch"
    return "triton"


def default_tile_size(device: torch.device, vocab_size: int, backend: str, from_hidden: bool = True) -> TileSize:
    """Tiles that follow the device: TRL's ``4096 x 32768`` for the Triton kernels; for the torch
    folds on a CPU an 8 MiB float32 tile, which stays in cache and in the allocator's reused
    memory (measured faster than larger tiles at V = 49,152, and no slower at 151,936): from hidden
    states ``256 x 8192`` (256 rows keep the matrix products efficient), from logits
    ``2^21 / V`` rows by the whole vocabulary (no product to feed; the score pass then reuses the
    statistics pass's probabilities); elsewhere ``1024 x 32768``. Never wider than the vocabulary."""
    if backend == "triton":
        tokens, vocab = _TRITON_TILE
    elif device.type == "cpu":
        tokens, vocab = _CPU_TILE if from_hidden else (max(1, _CPU_TILE_ELEMENTS // vocab_size), vocab_size)
    else:
        tokens, vocab = 1024, 32768
    return tokens, min(vocab, vocab_size)


def _folds(backend: str) -> ModuleType:
    if backend == "triton":
        return importlib.import_module("ict.core.stats.triton_tiles")
    return torch_tiles


def _probabilities(logits: Tensor | IndexedTile, maximum: Tensor, log_total: Tensor, temperature: float,
                   overwrite: bool) -> Tensor:
    """:func:`~ict.core.stats.torch_tiles.probabilities` of a tile; an :class:`IndexedTile` is gathered
    first (a copy of its own, so always overwritten)."""
    if isinstance(logits, IndexedTile):
        return torch_tiles.probabilities(logits.gathered(), maximum, log_total, temperature, overwrite=True)
    return torch_tiles.probabilities(logits, maximum, log_total, temperature, overwrite=overwrite)


class _ResponseLogProbs(torch.autograd.Function):
    """``log p(token)`` and ``H(p)`` (``[N]``, processing order) from the no-grad passes, with a
    tiled backward that recomputes each tile through the head."""

    @staticmethod
    def forward(ctx, head: Head, order: RowOrder, targets: Tensor, maximum: Tensor,  # type: ignore[override]
                log_total: Tensor, entropy: Tensor, token_log_probs: Tensor, temperature: float, tile: TileSize,
                backend: str, *inputs: Tensor) -> tuple[Tensor, Tensor]:
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(targets, maximum, log_total, entropy)
        ctx.head, ctx.order, ctx.temperature, ctx.tile, ctx.backend = head, order, temperature, tile, backend
        return token_log_probs.clone(), entropy.clone()

    @staticmethod
    def backward(ctx, grad_log_probs: Tensor | None, grad_entropy: Tensor | None):  # type: ignore[override]
        head: Head = ctx.head
        needed = ctx.needs_input_grad[10:]
        order: RowOrder = ctx.order
        if grad_log_probs is None and grad_entropy is None:
            grads, row_grads = head.new_grads(needed), None
        else:
            with torch.autocast(ctx.saved_tensors[0].device.type, enabled=False):  # float32 folds (see statistics)
                grads, row_grads, order = _backward_tiles(ctx, needed, grad_log_probs, grad_entropy)
        return (None,) * 10 + head.finish(grads, order.batch_index, order.time_index, row_grads, order.dense)


def rows_with_gradient(grad_log_probs: Tensor | None, grad_entropy: Tensor | None) -> Tensor | None:
    """The rows (indices ``[M]``, processing order) whose ``g_lp`` or ``g_H`` ``[N]`` is not zero, when
    some rows' are both zero; None when every row has a gradient. A row whose gradient is zero adds
    nothing to any input's gradient, so the backward skips its tiles: ICT's loss reaches only the
    selected tokens (~10%), GRPO's none of a group whose advantages are all zero. One device sync
    (the rows' count). NaN is not zero: such a row is kept, and spreads its NaN as it would."""
    active = None
    for grad in (grad_log_probs, grad_entropy):
        if grad is not None:
            active = grad != 0 if active is None else active | (grad != 0)
    if active is None:
        return None
    count = int(active.sum().item())  # the one sync: every row -> no index kernel after it
    if count == active.numel():
        return None
    return nonzero_given_count(active, count).squeeze(-1)  # the count is known: no second sync


class _TileRows:
    """Each token tile's head rows (hidden states in the compute dtype, or rows of given logits),
    ``rows[i]`` for ``order.tiles[i]``: taken at the tile's first use and kept for the later
    vocabulary tiles and passes that read it (so each once; the first tile's product waits for no
    other tile's cast)."""

    def __init__(self, head: Head, order: RowOrder) -> None:
        self.head, self.order = head, order
        self._rows: list[Tensor | None] = [None] * len(order.tiles)

    def __getitem__(self, index: int) -> Tensor:
        rows = self._rows[index]
        if rows is None:
            rows = self._rows[index] = self.head.rows(*self.order.positions(self.order.tiles[index].part))
        return rows

    def __iter__(self) -> Iterator[tuple[slice, Tensor]]:
        """``(part, rows)`` of each token tile in order."""
        return ((tile.part, self[index]) for index, tile in enumerate(self.order.tiles))


def _backward_tiles(ctx, needed: Sequence[bool], grad_log_probs: Tensor | None, grad_entropy: Tensor | None
                    ) -> tuple[list[Tensor | None], Tensor | None, RowOrder]:
    """The input gradients, accumulated vocabulary tile by vocabulary tile, each over every token
    tile (the head's slice and each token tile's rows are cast once; this module's docstring), over
    the rows with a gradient only (:func:`rows_with_gradient`, or the rows of the caller's gradient
    mask, :attr:`RowOrder.gradient_rows`: the others' tiles are skipped), in
    the tiles of :meth:`Head.backward_tile`. Returns the head's gradients (:meth:`Head.new_grads`), the
    rows' accumulator (``[M, d]``, in the returned order; None for a head without one) and the
    order of its rows."""
    targets, maximum, log_total, entropy = ctx.saved_tensors
    head: Head = ctx.head
    order: RowOrder = ctx.order
    tokens, vocab = ctx.tile  # vocab: the width of the head's slices (cast once each)
    folds = _folds(ctx.backend)
    grad_log_probs = None if grad_log_probs is None else grad_log_probs.float().contiguous()
    grad_entropy = None if grad_entropy is None else grad_entropy.float().contiguous()
    if order.num_rows and head.vocab_size:  # queued before rows_with_gradient's sync, not after it
        head.prepare_tile(0, min(vocab, head.vocab_size))
    # the caller's gradient mask, its rows found with the forward's layout: no sync here
    active = order.gradient_rows if order.gradient_rows_given else rows_with_gradient(grad_log_probs, grad_entropy)
    num_rows = order.num_rows if active is None else active.numel()
    tokens, width = head.backward_tile(num_rows, tokens, vocab)
    order = order.retiled(tokens, active)
    if active is not None:
        targets, maximum, log_total, entropy = (values[active] for values in (targets, maximum, log_total, entropy))
        grad_log_probs = None if grad_log_probs is None else grad_log_probs[active]
        grad_entropy = None if grad_entropy is None else grad_entropy[active]
    grads = head.new_grads(needed, written=len(order.tiles) == 1)  # one share a vocabulary slice
    row_grads = head.new_row_grads(order.num_rows, needed)
    # every token tile's rows up front ([M, d] in all): taken at their first use instead, GRPO's
    # step at the offline default was 4% slower on a CPU (results/cpu-2026-11-27c/)
    tile_rows = list(_TileRows(head, order))
    for slice_start, slice_end in chunks(head.vocab_size if tile_rows else 0, vocab):
        head.prepare_tile(slice_start, slice_end)  # cast once, read by its narrower tiles as views
        for start, end in chunks(slice_end - slice_start, width):
            start, end = slice_start + start, slice_start + end
            for part, rows in tile_rows:
                # an indexed tile's gradient goes straight into the same rows of the logits' gradient
                # (rows that repeat are gathered instead, and their gradients added)
                tile = head.tile(rows, start, end, indexed=folds.READS_INDEXED_TILES and head.distinct_rows)
                indexed = isinstance(tile, IndexedTile) and grads[0] is not None
                grad = folds.logit_grads(
                    tile, targets[part], start, maximum[part], log_total[part], entropy[part],
                    None if grad_log_probs is None else grad_log_probs[part],
                    None if grad_entropy is None else grad_entropy[part], ctx.temperature,
                    **({"out": grads[0][:, start:end]} if indexed else {}))
                if not indexed:
                    head.accumulate(grads, rows, start, end, grad, None if row_grads is None else row_grads[part])
    head.release()
    return grads, row_grads, order


class _Run:
    """One call's row order, tiles and per-row accumulators (processing order, ``[N]`` each)."""

    def __init__(self, head: Head, shape: tuple[int, int, int], token_ids: Tensor, response_mask: Tensor,
                 js_references: tuple[str, ...], with_reference: bool, tile_size: TileSize | None,
                 backend: str | None, group_ids: Tensor | None, finished: Tensor | None,
                 gradient_mask: Tensor | None = None) -> None:
        """Built without gradient. ``head``'s kind picks the default tiles (hidden states or logits);
        its first tile's work that does not depend on the rows (:meth:`LinearHead.prepare_tile`) is
        queued before the row layout's syncs, so the device does it while the host waits for them,
        and the first tile (its product) right after them, before the accumulators and the group
        layout's tile blocks (built at their first use, :class:`~ict.core.stats.rows.Tile`): the
        device computes it while the host builds them (on a GPU the host's time after a sync is
        the device's idle time); given normalisers, :meth:`passes` starts with the score pass, which
        then runs even when no score is asked (it sums Renyi-2's ``sum_v p_v^2``). ``gradient_mask``: the
        caller's (:func:`statistics`), its rows read with the layout's sizes."""
        self.head = head
        self.batch_size, self.length, self.vocab_size = shape
        device = self.device = token_ids.device
        self.backend = resolve_backend(backend, device)
        if tile_size is not None and (isinstance(tile_size, str) or len(tile_size) != 2 or not all(
                is_integer(size) and size > 0 for size in tile_size)):
            raise ValueError(f"tile_size must be two positive integers (tokens, vocab), got {tile_size!r}")
        self.tokens, self.vocab = tile_size or default_tile_size(device, self.vocab_size, self.backend,
                                                                 isinstance(head, LinearHead))
        self.folds = _folds(self.backend)
        self.metrics_of: dict[str, tuple[str, ...]] = {}
        for name in js_references:
            reference, metric = split_score_key(name)
            self.metrics_of[reference] = (*self.metrics_of.get(reference, ()), metric)
        self.group_variants = [name for name in self.metrics_of if name in GROUP_MEAN_VARIANTS]
        if self.vocab_size:
            head.prepare_tile(0, min(self.vocab, self.vocab_size))
        if self.group_variants:
            assert group_ids is not None
            self.order = group_order(response_mask, token_ids, group_ids, finished, self.tokens, self.vocab_size,
                                     gradient_mask)
        else:
            self.order = sequence_order(response_mask, self.tokens, token_ids, self.vocab_size, gradient_mask)
        self.tile_rows = _TileRows(head, self.order)
        self.first_logits: Tensor | IndexedTile | None = None  # token tile 0 x vocabulary tile 0 (_logits)
        if self.order.tiles and self.vocab_size:
            self.first_logits = head.tile(self.tile_rows[0], 0, min(self.vocab, self.vocab_size),
                                          indexed=self.folds.READS_INDEXED_TILES)
        num_rows = self.order.num_rows
        self.targets = token_ids[self.order.batch_index, self.order.time_index].to(device, torch.long).contiguous()
        self.state = RowState.empty(num_rows, device)
        self.reference_state = RowState.empty(num_rows, device) if with_reference else None
        self.partials = {reference: Partials.zeros(num_rows, device) for reference in self.metrics_of}
        self.alone = {variant: torch.zeros(num_rows, dtype=torch.bool, device=device)
                      for variant in self.group_variants}
        self.previous = self.order.previous_rows(self.length) if "prev" in self.metrics_of else None
        self.last_p: Tensor | None = None  # prev in sequence order: the last row's p of the previous tile
        # the torch folds' [n, vt] temporaries, reused tile by tile on a CPU (a GPU's allocator caches)
        self.scratch = Scratch() if device.type == "cpu" else None
        self.sequence_sum = (torch.zeros(self.batch_size, self.vocab_size, dtype=torch.float32, device=device)
                             if "seq_mean" in self.metrics_of else None)
        # sum_v p_v and sum_v p_v^2 of each row in the score pass (given normalisers)
        self.mass: tuple[Tensor, Tensor] | None = None
        self.maximum, self.log_total, self.entropy, self.renyi2, self.token_log_probs = (
            torch.empty(num_rows, dtype=torch.float32, device=device) for _ in range(5))

    def passes(self, reference_head: LogitsHead | None, temperature: float,
               given: tuple[Tensor, Tensor] | None = None) -> None:
        """The statistics pass (skipped when ``given`` = the log-normaliser and entropy ``[B, T]``)
        and the score pass (module docstring). With several vocabulary tiles each pass runs them
        outermost, over every token tile, so each slice of the head is cast once a pass; when one
        tile holds the vocabulary, the score pass reuses each token tile of the statistics pass."""
        order, vocab_size = self.order, self.vocab_size
        if given is not None:
            self.maximum.copy_(given[0][order.batch_index, order.time_index])
            self.log_total.zero_()
            self.entropy.copy_(given[1][order.batch_index, order.time_index])
            self.mass = (torch.zeros_like(self.entropy), torch.zeros_like(self.entropy))
        reference_rows = None if reference_head is None else _TileRows(reference_head, order)
        for tile in order.tiles:
            for variant in self.group_variants:
                assert tile.blocks is not None
                count = tile.blocks.count(GROUP_MEAN_VARIANTS[variant][0])[tile.blocks.local]
                self.alone[variant][tile.part] = count <= 1
        if given is None and self.vocab >= vocab_size and self.metrics_of:
            # the torch folds keep the tile's probabilities (computed once), the Triton kernels its logits
            keep_p = self.folds is torch_tiles
            for index, tile in enumerate(order.tiles):
                kept = self._fold_tile(index, reference_head, reference_rows, 0, vocab_size, temperature,
                                       overwrite=keep_p, keep_exponentials=keep_p)
                self._finish_statistics(tile.part)
                p = None
                if keep_p:  # e^(z - m) / s
                    assert isinstance(kept, Tensor)
                    p = kept.div_(self.state.view(tile.part).total.unsqueeze(-1))
                self._score_tile(index, None if keep_p else kept, 0, vocab_size, reference_head, reference_rows,
                                 temperature, p)
            return
        if given is None:
            for start, end in chunks(vocab_size, self.vocab):
                for index in range(len(order.tiles)):
                    self._fold_tile(index, reference_head, reference_rows, start, end, temperature, overwrite=True)
            self._finish_statistics(slice(None))
        if self.metrics_of or self.mass is not None:  # given normalisers: the pass sums each row's mass
            for start, end in chunks(vocab_size, self.vocab):
                for index in range(len(order.tiles)):
                    self._score_tile(index, self._logits(index, start, end), start, end, reference_head,
                                     reference_rows, temperature)

    def _logits(self, index: int, start: int, end: int) -> Tensor | IndexedTile:
        """Token tile ``index``'s logits over ``start:end`` (:meth:`Head.tile`); the first tile's
        first, queued by ``__init__``, is handed out once."""
        if index == 0 and start == 0 and self.first_logits is not None:
            logits, self.first_logits = self.first_logits, None
            return logits
        return self.head.tile(self.tile_rows[index], start, end, indexed=self.folds.READS_INDEXED_TILES)

    def _fold_tile(self, index: int, reference_head: LogitsHead | None,
                   reference_rows: _TileRows | None, start: int, end: int, temperature: float, overwrite: bool,
                   keep_exponentials: bool = False) -> Tensor | IndexedTile:
        """Fold token tile ``index``'s logits over ``start:end`` into its rows' statistics (and the
        reference's); returns the logits tile, or its exponentials when ``keep_exponentials``
        (torch folds)."""
        part, indexed = self.order.tiles[index].part, self.folds.READS_INDEXED_TILES
        logits = self._logits(index, start, end)
        exponentials = self.folds.fold_statistics(self.state.view(part), logits, self.targets[part], start,
                                                  temperature, overwrite=overwrite,
                                                  keep_exponentials=keep_exponentials, scratch=self.scratch)
        if reference_head is not None and self.reference_state is not None:
            assert reference_rows is not None
            # its own tile (the reference head's buffer), overwritten; no scratch: the policy's kept
            # exponentials are there
            self.folds.fold_statistics(self.reference_state.view(part),
                                       reference_head.tile(reference_rows[index], start, end, indexed=indexed),
                                       self.targets[part], start, temperature, overwrite=True)
        return logits if exponentials is None else exponentials

    def _finish_statistics(self, part: slice) -> None:
        """The rows' statistics from their folded state, once every vocabulary tile is folded."""
        view = self.state.view(part)
        log_total = view.log_total(out=self.log_total[part])  # once, for the entropies and the log-probs
        self.maximum[part] = view.maximum
        view.entropy(log_total, out=self.entropy[part])  # each written where it is returned: no copies
        view.renyi2(log_total, out=self.renyi2[part])
        torch.sub(view.target, view.maximum, out=self.token_log_probs[part]).sub_(log_total)

    def scores(self, temperature: float) -> dict[str, Tensor]:
        """Every score asked for, ``[N]`` each, keyed by score key (``seq_mean`` takes a pass of its own)."""
        scores: dict[str, Tensor] = {}
        previous, entropy = self.previous, self.entropy
        for reference, metrics in self.metrics_of.items():
            if reference == "seq_mean":
                continue
            reference_entropy = None
            if reference == "prev":
                assert previous is not None
                reference_entropy = torch.where(previous >= 0, entropy[previous.clamp_min(0)], entropy)
            elif reference == "ref":
                assert self.reference_state is not None
                reference_entropy = self.reference_state.entropy()
            for metric, value in scores_from_partials(self.partials[reference], entropy, metrics,
                                                      reference_entropy).items():
                if reference in self.alone:
                    value.masked_fill_(self.alone[reference], 0.0)
                if previous is not None and reference == "prev":
                    value.masked_fill_(previous < 0, 0.0)
                scores[score_key(reference, metric)] = value
        if self.sequence_sum is not None:
            for metric, value in self._seq_mean_scores(temperature).items():
                scores[score_key("seq_mean", metric)] = value
        return scores

    def _score_tile(self, index: int, logits: Tensor | IndexedTile | None, start: int, end: int,
                    reference_head: LogitsHead | None, reference_rows: _TileRows | None, temperature: float,
                    p: Tensor | None = None) -> None:
        """Accumulate token tile ``index``'s sums over ``start:end`` for every reference asked (and,
        given normalisers, each row's probability mass) from its ``logits``; ``p``: the tile's
        probabilities when kept from the statistics pass (then ``logits`` is None)."""
        order, head = self.order, self.head
        tile = order.tiles[index]
        part = tile.part
        maximum, log_total = self.maximum[part], self.log_total[part]
        mass = None if self.mass is None else (self.mass[0][part], self.mass[1][part])
        for variant in self.group_variants:
            metrics = self.metrics_of[variant]
            absorbing, leave_one_out = GROUP_MEAN_VARIANTS[variant]
            if self.folds is not torch_tiles and self.folds.supports_group(leave_one_out, metrics):
                assert logits is not None
                self.folds.group_partials(self.partials[variant].view(part), logits, maximum, log_total,
                                          temperature, tile.blocks, start, absorbing, leave_one_out, metrics, mass)
            else:
                if p is None:
                    assert logits is not None
                    # in place unless a later variant's Triton kernel still reads the logits
                    p = _probabilities(logits, maximum, log_total, temperature, overwrite=self.folds is torch_tiles)
                torch_tiles.group_partials(self.partials[variant].view(part), None, maximum, log_total, temperature,
                                           tile.blocks, start, absorbing, leave_one_out, metrics, mass, p, self.scratch)
            mass = None  # counted once
        if mass is None and not ({"prev", "ref", "seq_mean"} & set(self.metrics_of)):
            return
        if p is None:
            assert logits is not None
            p = _probabilities(logits, maximum, log_total, temperature, overwrite=True)
        if mass is not None:
            torch_tiles.accumulate_mass(mass, p, self.scratch)
        if self.previous is not None:
            if not self.group_variants:  # sequence order: row i's previous position is row i - 1
                q = scratch_like(self.scratch, "previous", p)
                q[1:] = p[:-1]
                if self.last_p is None:  # the previous token tile's last row, whole vocabulary
                    self.last_p = torch.zeros(self.vocab_size, dtype=torch.float32, device=p.device)
                q[0] = self.last_p[start:end]
                self.last_p[start:end] = p[-1]
            else:  # group order: the previous positions' logits, a second product (a GPU's: a fresh tile)
                partners = self.previous[part].clamp_min(0)
                partner_rows = head.rows(order.batch_index[partners], order.time_index[partners])
                buffer = TileBuffer() if self.scratch is None else self.scratch.buffer("partners")
                q = torch_tiles.probabilities(head.tile(partner_rows, start, end, buffer),
                                              self.maximum[partners], self.log_total[partners], temperature,
                                              overwrite=True)
            torch_tiles.accumulate_partials(self.partials["prev"].view(part), p, q, self.metrics_of["prev"], False,
                                            self.scratch)
        if reference_head is not None:
            assert self.reference_state is not None and reference_rows is not None
            reference = self.reference_state.view(part)
            q = torch_tiles.probabilities(reference_head.tile(reference_rows[index], start, end), reference.maximum,
                                          reference.log_total(), temperature, overwrite=True)
            torch_tiles.accumulate_partials(self.partials["ref"].view(part), p, q, self.metrics_of["ref"], False,
                                            self.scratch)
        if self.sequence_sum is not None:
            self.sequence_sum[:, start:end].index_add_(0, order.batch_index[part], p)

    def _seq_mean_scores(self, temperature: float) -> dict[str, Tensor]:
        """The metrics of each row to the mean distribution of its sequence (a pass of its own)."""
        assert self.sequence_sum is not None
        order, metrics = self.order, self.metrics_of["seq_mean"]
        counts = torch.bincount(order.batch_index, minlength=self.batch_size).clamp_(min=1)
        mean = self.sequence_sum.div_(counts.unsqueeze(-1).float())
        mean_entropy = torch_tiles.entropy_terms(mean, self.scratch)
        partials = Partials.zeros(order.num_rows, self.device)
        for start, end in chunks(self.vocab_size, self.vocab):
            for part, rows in self.tile_rows:  # the other passes' rows, kept
                p = torch_tiles.probabilities(self.head.tile(rows, start, end), self.maximum[part], self.log_total[part],
                                              temperature, overwrite=True)
                rows_mean = torch_tiles.rows_of(mean[:, start:end], order.batch_index[part], self.scratch, "reference")
                torch_tiles.accumulate_partials(partials.view(part), p, rows_mean, metrics, False, self.scratch)
        return scores_from_partials(partials, self.entropy, metrics, mean_entropy[order.batch_index])

    def scatter(self, values: Tensor) -> Tensor:
        """``[N]`` values in processing order -> ``[B, T]``, 0 outside the response; a view of them
        when the rows are every position in row-major order (:attr:`RowOrder.dense`: no zeros to
        fill and no scatter, and no gather in the backward)."""
        if self.order.dense:
            return values.reshape(self.batch_size, self.length)
        full = torch.zeros(self.batch_size, self.length, dtype=torch.float32, device=self.device)
        return full.index_put((self.order.batch_index, self.order.time_index), values)


def statistics(head: Head, shape: tuple[int, int, int], token_ids: Tensor, response_mask: Tensor,
               temperature: float, js_references: tuple[str, ...], reference_head: LogitsHead | None,
               differentiable_entropy: bool, tile_size: TileSize | None, backend: str | None,
               group_ids: Tensor | None, finished: Tensor | None, gradient_mask: Tensor | None = None
               ) -> TokenStatistics:
    """The statistics of :mod:`ict.core.stats` from a head (one implementation for the logits and
    the hidden-state paths; see this module's docstring for the passes). ``gradient_mask``
    (``[B, T]``, or None): the positions whose statistics may receive a gradient; the backward
    takes them as the rows with a gradient, without reading the gradient back (no device sync),
    and drops a gradient elsewhere."""
    # the folds compute in float32 whatever the caller's autocast (their batched dot products would
    # otherwise run in its lower precision); the head's tiles keep the dtype chosen at its creation
    with torch.no_grad(), torch.autocast(token_ids.device.type, enabled=False):
        run = _Run(head, shape, token_ids, response_mask, js_references, reference_head is not None, tile_size,
                   backend, group_ids, finished, gradient_mask=gradient_mask)
        run.passes(reference_head, temperature)
        scores = run.scores(temperature)
        head.release()
        if reference_head is not None:
            reference_head.release()
    log_probs, entropy = _ResponseLogProbs.apply(
        head, run.order, run.targets, run.maximum, run.log_total, run.entropy, run.token_log_probs, temperature,
        (run.tokens, head.backward_vocab(run.vocab, default_tile_size(token_ids.device, run.vocab_size,
                                                                      run.backend)[1])),
        run.backend, *head.inputs)
    if not differentiable_entropy:
        entropy = entropy.detach()
    return TokenStatistics(log_probs=run.scatter(log_probs), entropy=run.scatter(entropy),
                           renyi2=run.scatter(run.renyi2),
                           js_scores={name: run.scatter(scores[name]) for name in js_references})


def scores_given_normalisers(head: Head, shape: tuple[int, int, int], token_ids: Tensor, response_mask: Tensor,
                             temperature: float, js_references: tuple[str, ...], log_normaliser: Tensor,
                             entropy: Tensor, tile_size: TileSize | None, backend: str | None,
                             group_ids: Tensor | None, finished: Tensor | None
                             ) -> tuple[dict[str, Tensor], Tensor, float]:
    """The score pass alone, given each position's ``log Z`` and ``H(p)`` ``[B, T]`` (e.g. from
    TRL's fused head): the scores ``[B, T]`` by key, Renyi-2 ``[B, T]`` and
    ``max |sum_v p_v - 1|`` over the rows, which tells whether the given normalisers are those of
    this head's logits (no gradient)."""
    with torch.no_grad(), torch.autocast(token_ids.device.type, enabled=False):  # float32 folds
        run = _Run(head, shape, token_ids, response_mask, js_references, False, tile_size, backend, group_ids,
                   finished)
        run.passes(None, temperature, given=(log_normaliser.float(), entropy.float()))
        scores = run.scores(temperature)
        head.release()
    assert run.mass is not None
    total, square = run.mass
    deviation = float((total - 1.0).abs().max()) if total.numel() else 0.0
    renyi2 = run.scatter(square.log().neg_().clamp_(min=0.0))
    return {name: run.scatter(scores[name]) for name in js_references}, renyi2, deviation



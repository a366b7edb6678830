"""The heads whose logits the tile algorithm (:mod:`ict.core.stats.tiles`) reads one tile at a
time, and where each writes its gradient: :class:`LogitsHead` (given logits, read where they
lie) and :class:`LinearHead` (``hidden @ weight.T (+ bias)``, computed tile by tile)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ict.core.stats.buffers import TileBuffer
from ict.core.stats.rows import IndexedTile


def _row_view(logits: Tensor) -> tuple[Tensor, int]:
    """``[B, T, V]`` logits as a ``[rows, V]`` view of their own storage, where position ``(b, t)``
    is row ``b * step + t``, and ``step``. No copy when the vocabulary is contiguous and the batch
    stride is a multiple of the position stride (e.g. ``logits[:, :-1]`` of a model's output);
    otherwise (rows that overlap included: an expanded batch, overlapping windows, whose gradients
    would be written over one another) a contiguous copy (``step = T``)."""
    batch, length, vocab = logits.shape
    stride_b, stride_t, stride_v = logits.stride()
    if logits.numel() and stride_v == 1 and length > 1 and stride_t >= vocab and (
            batch == 1 or (stride_b % stride_t == 0 and stride_b // stride_t >= length)):
        step = stride_b // stride_t if batch > 1 else length
        return logits.as_strided(((batch - 1) * step + length, vocab), (stride_t, 1)), step
    if logits.numel() and stride_v == 1 and length == 1 and stride_b >= vocab:
        return logits.as_strided((batch, vocab), (stride_b, 1)), 1
    return logits.contiguous().view(-1, vocab), length


class LogitsHead:
    """Tiles of given logits ``[B, T, V]`` (or ``[R, V]`` with ``row_index [B, T]``), read where
    they lie (no copy of the logits, :func:`_row_view`): a tile is a gathered copy of its rows'
    vocabulary slice, written into the head's one tile buffer unless asked for a tile of its own.
    The gradient wrt the logits is built in the same row layout; with ``row_index`` several
    positions may read one row (:attr:`distinct_rows` False), and their gradients are added."""

    def __init__(self, logits: Tensor, row_index: Tensor | None = None) -> None:
        self.logits = logits
        self._buffer = TileBuffer()
        self.inputs: tuple[Tensor, ...] = (logits,)
        self.row_index = row_index
        self.distinct_rows = row_index is None  # each position its own row: a tile's gradient is written
        if row_index is not None:
            self.flat, self.step = (logits if logits.stride(-1) == 1 else logits.contiguous()), 0
        else:
            self.flat, self.step = _row_view(logits)
        self.vocab_size = self.flat.shape[-1]

    def rows(self, rows_b: Tensor, rows_t: Tensor, span: slice | None = None) -> Tensor:
        if self.row_index is not None:
            return self.row_index[rows_b, rows_t].to(self.flat.device)
        return rows_b * self.step + rows_t

    def tile(self, rows: Tensor, start: int, end: int, buffer: TileBuffer | None = None,
             indexed: bool = False) -> Tensor | IndexedTile:
        """The rows' ``[n, end - start]`` slice: gathered into ``buffer`` (by default the head's
        own, which :meth:`release` frees), overwriting its previous tile, or (``indexed``, for the
        Triton kernels) read where it lies."""
        if indexed:
            return IndexedTile(self.flat[:, start:end], rows)
        out = (buffer or self._buffer).take(rows.shape[0], end - start, self.flat.dtype, self.flat.device)
        return torch.index_select(self.flat[:, start:end], 0, rows, out=out)

    def prepare_tile(self, start: int, end: int) -> None:
        """Nothing to queue ahead: a tile of given logits is read where it lies."""

    def backward_vocab(self, vocab: int, default: int) -> int:
        return vocab

    @staticmethod
    def backward_tile(num_rows: int, tokens: int, vocab: int) -> tuple[int, int]:
        """The forward's tile ``(tokens, vocab)``: the gradient's rows are written tile by tile
        whatever the tiles, so fewer token tiles save nothing."""
        return tokens, vocab

    def release(self) -> None:
        self._buffer = TileBuffer()

    def new_grads(self, needed: Sequence[bool], written: bool = False) -> list[Tensor | None]:
        """The gradient's rows ``[rows, V]``, zero, in the layout of :attr:`flat` (see :meth:`finish`;
        each tile's rows are written, whatever ``written``)."""
        return [torch.zeros(self.flat.shape, dtype=self.logits.dtype, device=self.logits.device) if needed[0]
                else None]

    def accumulate(self, grads: list[Tensor | None], rows: Tensor, start: int, end: int, grad: Tensor,
                   row_grads: Tensor | None) -> None:
        if grads[0] is not None:
            if self.distinct_rows:
                grads[0][rows, start:end] = grad.to(grads[0].dtype)
            else:  # rows may repeat (row_index): each position's gradient adds to its row's
                grads[0][:, start:end].index_add_(0, rows, grad.to(grads[0].dtype))

    def new_row_grads(self, num_rows: int, needed: Sequence[bool]) -> Tensor | None:
        return None

    def finish(self, grads: list[Tensor | None], rows_b: Tensor, rows_t: Tensor,
               row_grads: Tensor | None, dense: bool = False) -> tuple[Tensor | None, ...]:
        """The gradient wrt the logits, in their shape: ``[R, V]`` as is, ``[B, T, V]`` a view of
        the rows (``(b, t)`` at row ``b * step + t``); no row accumulator here."""
        grad = grads[0]
        if grad is None or self.row_index is not None:
            return (grad,)
        batch, length, vocab = self.logits.shape
        return (grad.as_strided((batch, length, vocab), (self.step * vocab, vocab, 1)),)


class LinearHead:
    """Tiles of ``logits = hidden @ weight.T (+ bias)``, computed in ``compute_dtype`` (the autocast
    dtype when autocast is on at the forward, else the hidden states' dtype) one tile at a time.

    The backward accumulates ``grad_hidden`` (the response rows, ``[N, d]``) in float32, and
    ``grad_weight`` and ``grad_bias`` in float32 over several token tiles, or writes each of their
    vocabulary slices once, in their own dtype, when one token tile holds every row and the head
    is in the compute dtype or in float32 (:meth:`new_grads`); each only when its input needs a
    gradient (a frozen head costs no ``[V, d]`` buffer); they are cast to their inputs' dtypes at
    the end."""

    def __init__(self, hidden: Tensor, weight: Tensor, bias: Tensor | None) -> None:
        self.hidden, self.weight, self.bias = hidden, weight, bias
        self.vocab_size = weight.shape[0]
        self.inputs = (hidden, weight) if bias is None else (hidden, weight, bias)
        self.distinct_rows = True  # each response position is a row of its own
        device_type = hidden.device.type
        self.compute_dtype = (torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type)
                              else hidden.dtype)
        self._buffer = TileBuffer()
        self._weight_slice: tuple[tuple[int, int], Tensor] | None = None
        self._writes = False  # the backward writes each slice of the head's gradients once (new_grads)

    def rows(self, rows_b: Tensor, rows_t: Tensor, span: slice | None = None) -> Tensor:
        """The hidden states of the rows ``(rows_b, rows_t)`` ``[n, d]`` in the compute dtype;
        ``span``: their flat positions ``b * T + t`` when contiguous, read as a view (no gather)."""
        if span is not None and self.hidden.is_contiguous():
            return self.hidden.flatten(0, 1)[span].to(self.compute_dtype)
        return self.hidden[rows_b, rows_t].to(self.compute_dtype)

    def weight_slice(self, start: int, end: int) -> Tensor:
        """``weight[start:end]`` in the compute dtype, cast once for consecutive uses of the same
        slice (every token tile of a pass, which runs vocabulary tile outermost, and a backward
        tile's three products) or of slices inside it (a view; the backward's narrower tiles); the
        previous slice is dropped first."""
        if self._weight_slice is not None:
            (first, last), cast = self._weight_slice
            if first <= start and end <= last:
                return cast[start - first:end - first]
        self._weight_slice = None
        self._weight_slice = ((start, end), self.weight[start:end].to(self.compute_dtype))
        return self._weight_slice[1]

    def prepare_tile(self, start: int, end: int) -> None:
        """Queue the work of the tiles ``start:end`` that does not depend on their rows, the cast of
        the head's slice: the forward and the backward queue their first before their row syncs, so
        the device casts while the host waits, and the first product follows the sync sooner."""
        self.weight_slice(start, end)

    def tile(self, rows: Tensor, start: int, end: int, buffer: TileBuffer | None = None,
             indexed: bool = False) -> Tensor:
        """The ``[n, end - start]`` logits tile, written into ``buffer`` (by default the head's own,
        which :meth:`release` frees), overwriting its previous tile. (``indexed`` has no use for a
        product: its tile is the head's own.)"""
        weight = self.weight_slice(start, end)
        out = (buffer or self._buffer).take(rows.shape[0], end - start, self.compute_dtype, rows.device)
        with torch.autocast(rows.device.type, enabled=False):
            if self.bias is None:
                return torch.mm(rows, weight.T, out=out)
            return torch.addmm(self.bias[start:end].to(self.compute_dtype), rows, weight.T, out=out)

    def backward_vocab(self, vocab: int, default: int) -> int:
        """The backward's vocabulary tile: ``vocab``, but at most ``default`` (the device's default
        width) when the head is cast to the compute dtype: a wider slice would put a cast copy of
        most of the head beside its float32 gradient, at the backward's peak. (Wide forward tiles
        pay off by keeping their logits for the score pass, which the backward does not have.)"""
        return vocab if self.weight.dtype == self.compute_dtype else min(vocab, default)

    @staticmethod
    def backward_tile(num_rows: int, tokens: int, vocab: int) -> tuple[int, int]:
        """The backward's tile over ``num_rows`` rows with a gradient, from the forward's
        ``(tokens, vocab)``: when ``tokens < num_rows <= tokens + vocab``, every row in one token
        tile, ``k`` times narrower (``ceil(vocab / k)`` ids, ``k = ceil(num_rows / tokens)``: no
        more elements than the forward's tile, and each of the head's ``vocab`` slices, cast once,
        cut into ``k``); else the forward's tile.

        Why: each token tile adds its share ``g.T @ h`` into the head's ``[V, d]`` gradient (a
        read and a write of it), each vocabulary tile its share ``g @ W_v`` into the rows' float32
        ``[M, d]`` one. In units of ``8 V d M`` bytes that is ``1/tokens + 1/vocab`` for the
        forward's tiles and ``k/vocab`` for one token tile (less when ``num_rows <= tokens +
        vocab``), which moreover writes each slice of the head's gradient once (:meth:`new_grads`)."""
        if not tokens < num_rows <= tokens + vocab:
            return tokens, vocab
        return num_rows, -(-vocab // -(-num_rows // tokens))

    def release(self) -> None:
        self._buffer, self._weight_slice = TileBuffer(), None

    def new_grads(self, needed: Sequence[bool], written: bool = False) -> list[Tensor | None]:
        """The head's gradients (``None`` for the hidden states': :meth:`new_row_grads`): float32
        zeros that each token tile adds its share into; ``written`` (one token tile: each vocabulary
        slice gets one share; a head in the compute dtype or in float32), in the inputs' dtypes,
        left uninitialised for :meth:`accumulate` to write each slice once (no zero fill and no
        read of the ``[V, d]`` gradient before its write; no float32 copy and final cast of a head
        in half precision)."""
        self._writes = written and self.weight.dtype in (self.compute_dtype, torch.float32)
        return [None if not need or not index else
                torch.empty(tensor.shape, dtype=tensor.dtype, device=tensor.device) if self._writes else
                torch.zeros(tensor.shape, dtype=torch.float32, device=tensor.device)
                for index, (tensor, need) in enumerate(zip(self.inputs, needed))]

    def new_row_grads(self, num_rows: int, needed: Sequence[bool]) -> Tensor | None:
        """The float32 ``grad_hidden`` accumulator of the response rows (processing order, ``[N, d]``)."""
        if not needed[0]:
            return None
        return torch.zeros(num_rows, self.hidden.shape[-1], dtype=torch.float32, device=self.hidden.device)

    def accumulate(self, grads: list[Tensor | None], rows: Tensor, start: int, end: int, grad: Tensor,
                   row_grads: Tensor | None) -> None:
        """Add the tile's logit gradient ``grad`` ``[n, end - start]`` into ``row_grads += grad @ W_v``
        and the head's ``grads[1][start:end] += grad.T @ rows`` (and the bias's), or write the
        head's when :meth:`new_grads` made them to be written once."""
        grad = grad.to(self.compute_dtype)
        with torch.autocast(rows.device.type, enabled=False):
            if row_grads is not None:
                _product(row_grads, grad, self.weight_slice(start, end), add=True)
            if grads[1] is not None:
                _product(grads[1][start:end], grad.T, rows, add=not self._writes)
        if len(grads) > 2 and grads[2] is not None:
            total = grad.sum(dim=0, dtype=torch.float32)
            if self._writes:
                grads[2][start:end].copy_(total)
            else:
                grads[2][start:end].add_(total)

    def finish(self, grads: list[Tensor | None], rows_b: Tensor, rows_t: Tensor,
               row_grads: Tensor | None, dense: bool = False) -> tuple[Tensor | None, ...]:
        """The inputs' gradients in their dtypes, the hidden states' from the rows' accumulator
        (``row_grads`` ``[N, d]`` of the rows ``(rows_b, rows_t)``), once every tile is done (after
        :meth:`release`: the tiles' memory is free by then). ``dense``: the rows are every position
        in row-major order, so the accumulator is the gradient's layout (no zeros, no scatter)."""
        if row_grads is not None and dense:
            grads[0] = row_grads.view(self.hidden.shape)  # cast with the others below
        elif row_grads is not None:
            grads[0] = torch.zeros_like(self.hidden)
            grads[0][rows_b, rows_t] = row_grads.to(self.hidden.dtype)
        return tuple(None if grad is None else grad.to(tensor.dtype) for grad, tensor in zip(grads, self.inputs))


Head = LogitsHead | LinearHead


def _product(out: Tensor, left: Tensor, right: Tensor, add: bool) -> None:
    """``out = left @ right``, or (``add``) ``out += left @ right``, accumulated in float32 and
    rounded once to ``out``'s dtype: a half-precision product is not rounded to its operands' dtype
    first (rounding every vocabulary tile's share of a gradient to bf16 before summing them biases
    it). On CUDA the GEMM reads the operands in their dtype and writes ``out`` itself (float32
    output of half-precision operands: ``out_dtype``); elsewhere, and for other pairs of dtypes,
    it reads float32 copies of them."""
    half = left.dtype in (torch.bfloat16, torch.float16)
    cuda = out.device.type == "cuda"
    if cuda and half and out.dtype == torch.float32:
        try:
            if add:
                torch.addmm(out, left, right, out_dtype=torch.float32, out=out)
            else:
                torch.mm(left, right, out_dtype=torch.float32, out=out)
            return
        except (TypeError, RuntimeError):  # torch without out_dtype
            pass
    if half and not (cuda and out.dtype == left.dtype):
        left, right = left.float(), right.float()
    if out.dtype != left.dtype:  # a half-precision out, off CUDA
        (out.add_ if add else out.copy_)(left @ right)
    elif add:
        out.addmm_(left, right)
    else:
        torch.mm(left, right, out=out)

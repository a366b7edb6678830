"""Which response rows a token tile holds, in which order, and (for the group references) the
(position, group) blocks of each tile with their absorbed point masses."""

from __future__ import annotations

import bisect
import functools
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import Tensor

from ict.core.ranking import group_ranks, label_places, run_starts

_NONZERO_STATIC_ON_CUDA = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 7)


def nonzero_given_count(mask: Tensor, count: int) -> Tensor:
    """The indices of ``mask``'s true entries (``[count, mask.dim()]``, row-major), their number
    known: no device sync (``nonzero`` reads it back) where ``nonzero_static`` runs without one."""
    if mask.device.type != "cuda" or _NONZERO_STATIC_ON_CUDA:
        return torch.nonzero_static(mask, size=count)
    return mask.nonzero()


def response_ends(response_mask: Tensor, finished: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``(last, finished)``: each row's last response position (long ``[B]``, ``-1`` for a row
    without response token) and whether the row is *finished* (bool ``[B]``; given, or inferred
    as "ends before the last column", see :mod:`ict.core.stats`). The end token of a finished
    row ``i`` is ``token_ids[i, last[i]]``. No device sync."""
    mask = response_mask.bool()
    batch_size, length = mask.shape
    if length:
        last = torch.where(mask, torch.arange(length, device=mask.device), -1).amax(dim=1)
    else:
        last = torch.full((batch_size,), -1, dtype=torch.long, device=mask.device)
    done = last < length - 1 if finished is None else finished.to(mask.device).bool()
    return last, done & (last >= 0)


@dataclass
class TileBlocks:
    """The (position, group) blocks of one token tile, whose rows are contiguous in the tile:
    ``start`` ``[k]`` (first row, tile-local), ``size`` ``[k]`` (rows), ``local`` ``[n]`` (each row's
    block) and, for the absorbing variants, the point masses of the group's finished rows whose last
    position is before the block's, one per end token: ``absorbed_token`` ``[k, A]`` (``-1``: none)
    and ``absorbed_count`` ``[k, A]`` float32 (how many of those rows end on it; 0: none)."""

    start: Tensor
    size: Tensor
    local: Tensor
    absorbed_token: Tensor
    absorbed_count: Tensor
    max_size: int = 1  # the largest block's rows (known on the host: no device sync per tile)
    _counts: dict[bool, Tensor] = field(default_factory=dict, repr=False, compare=False)

    def count(self, absorbing: bool) -> Tensor:
        """Contributors to each block's mean ``[k]`` float32: its rows (+ its absorbed point masses);
        computed once (every vocabulary tile of the token tile asks)."""
        if absorbing not in self._counts:
            count = self.size.float()
            self._counts[absorbing] = count + self.absorbed_count.sum(dim=-1) if absorbing else count
        return self._counts[absorbing]


class Tile:
    """One token tile: ``part`` (a slice of the processing order) and its blocks (group order
    only), given or built by a function at their first use (so a call's first product is queued
    before any tile's blocks: on a GPU the host builds them while the device computes)."""

    def __init__(self, part: slice, blocks: TileBlocks | Callable[[], TileBlocks] | None) -> None:
        self.part = part
        self._blocks = blocks

    @property
    def blocks(self) -> TileBlocks | None:
        if callable(self._blocks):
            self._blocks = self._blocks()
        return self._blocks


@dataclass
class IndexedTile:
    """The tile ``source[rows]`` ``[n, vt]`` without its gathered copy, for the Triton kernels,
    which read (and write) each row where it lies: ``source`` a ``[R, vt]`` view with contiguous
    columns (a vocabulary slice of given logits), ``rows`` long ``[n]``."""

    source: Tensor
    rows: Tensor

    @property
    def shape(self) -> tuple[int, int]:
        return self.rows.shape[0], self.source.shape[1]

    def gathered(self) -> Tensor:
        """The tile as a tensor of its own (a copy)."""
        return self.source.index_select(0, self.rows)


@dataclass
class RowOrder:
    """The response rows in processing order (``batch_index``, ``time_index`` ``[N]``) and its
    token tiles. Group order ((position, group)-major) when a group reference is scored, each tile
    holding whole blocks (at least one; so at most ``max(tokens, G)`` rows); sequence order
    (row-major) otherwise."""

    batch_index: Tensor
    time_index: Tensor
    tiles: list[Tile]
    dense: bool = False  # sequence order over every position of the batch: row i is flat position i
    # the caller's gradient mask, read with the layout's sizes (:meth:`RowOrder.with_gradient_rows`):
    # the rows that may have a gradient (indices [M], ascending; None: every row); no mask: not given
    gradient_rows: Tensor | None = None
    gradient_rows_given: bool = False

    @property
    def num_rows(self) -> int:
        return self.batch_index.numel()

    def with_gradient_rows(self, gradient_mask: Tensor | None, count: int) -> RowOrder:
        """This order with the rows of ``gradient_mask`` (``[B, T]``, any dtype, nonzero = may
        have a gradient) as its :attr:`gradient_rows`, ``count`` = the number of response rows
        it holds (read with the layout's sizes: no device sync here); unchanged without a mask."""
        if gradient_mask is None:
            return self
        rows = None
        if count != self.num_rows:
            marked = gradient_mask.to(self.batch_index.device).bool()[self.batch_index, self.time_index]
            rows = nonzero_given_count(marked, count).squeeze(-1)
        return RowOrder(self.batch_index, self.time_index, self.tiles, self.dense, rows, True)

    def positions(self, part: slice) -> tuple[Tensor, Tensor, slice | None]:
        """Where the rows ``part`` lie: their ``(batch_index, time_index)``, and their flat positions
        ``b * T + t`` as a slice when contiguous (:attr:`dense`: read as a view, without a gather),
        else None; the arguments of a head's ``rows``."""
        return self.batch_index[part], self.time_index[part], part if self.dense else None

    def retiled(self, tokens: int, rows: Tensor | None = None) -> RowOrder:
        """The rows ``rows`` (indices ``[M]`` into this order, ascending; None: every row, and
        :attr:`dense` kept) in this order, cut into token tiles of ``tokens`` rows, without blocks
        (the backward reads none)."""
        if rows is None:
            return RowOrder(self.batch_index, self.time_index, _tiles(self.num_rows, tokens), self.dense)
        return RowOrder(self.batch_index[rows], self.time_index[rows], _tiles(rows.numel(), tokens))

    def previous_rows(self, length: int) -> Tensor:
        """For each row, the index (in processing order) of the previous response position of the
        same sequence, ``-1`` for a sequence's first one ``[N]``; ``length``: the positions of a
        sequence (``T``). No device sync."""
        num_rows, device = self.num_rows, self.batch_index.device
        sequence = torch.argsort(self.batch_index * length + self.time_index)  # row-major rank -> processing index
        previous = torch.full((num_rows,), -1, dtype=torch.long, device=device)
        if num_rows > 1:
            same = self.batch_index[sequence[1:]] == self.batch_index[sequence[:-1]]
            previous[sequence[1:]] = torch.where(same, sequence[:-1], -1)  # a permutation: no two writes collide
        return previous


def _tiles(num_rows: int, tokens: int) -> list[Tile]:
    """Consecutive token tiles of ``tokens`` rows (the last may be shorter) over ``num_rows`` rows."""
    return [Tile(slice(start, end), None) for start, end in chunks(num_rows, tokens)]


def _layout_counts(mask: Tensor, token_ids: Tensor | None, vocab_size: int | None,
                   gradient_mask: Tensor | None) -> Tensor:
    """``[rows, outside, marked]``, long ``[3]`` and no sync: how many positions of ``mask`` (bool
    ``[B, T]``) are response positions, how many of those hold a token id outside ``[0, V)`` (0
    without ids; refused by :func:`_refuse_outside`), and how many ``gradient_mask`` marks (0
    without one; :meth:`RowOrder.with_gradient_rows`). One sum over the three flags, read back
    with the layout's sizes."""
    outside = marked = None
    if token_ids is not None and vocab_size is not None:
        token_ids = token_ids.to(mask.device)
        outside = token_ids.clamp(0, vocab_size - 1).ne(token_ids) & mask
    if gradient_mask is not None:
        marked = gradient_mask.to(mask.device).bool() & mask
    flags = [torch.zeros_like(mask) if flag is None else flag for flag in (outside, marked)]
    return torch.stack([mask, *flags]).flatten(1).sum(dim=1)


def _refuse_outside(count: int, vocab_size: int | None) -> None:
    if count:
        raise ValueError(f"token_ids must be in [0, {vocab_size}) at response positions: {count} position(s) "
                         "hold an id outside it (e.g. -100, an ignore index: leave those out of response_mask)")


def sequence_order(response_mask: Tensor, tokens: int, token_ids: Tensor | None = None,
                   vocab_size: int | None = None, gradient_mask: Tensor | None = None) -> RowOrder:
    """Row-major response rows in tiles of ``tokens`` rows, with the rows of ``gradient_mask``
    (:meth:`RowOrder.with_gradient_rows`). With ``token_ids`` and ``vocab_size``, a response
    position whose id is outside ``[0, V)`` is a ValueError. One device sync (the rows' count, that
    check and the gradient mask's count, read together)."""
    mask = response_mask.bool()
    num_rows, outside, marked = _layout_counts(mask, token_ids, vocab_size, gradient_mask).tolist()
    _refuse_outside(outside, vocab_size)
    batch_index, time_index = nonzero_given_count(mask, num_rows).unbind(-1)
    order = RowOrder(batch_index, time_index, _tiles(batch_index.numel(), tokens),
                     dense=batch_index.numel() == response_mask.numel())
    return order.with_gradient_rows(gradient_mask, marked)


def _merged_masses(tokens: Tensor) -> tuple[Tensor, Tensor]:
    """Each row's distinct ids and how often each occurs: ``tokens`` long ``[K, M]`` (``-1``:
    none) -> ``(ids, counts)``, ``[K, M]`` each, packed to the left (id ``-1`` and count 0 after
    them; counts float32)."""
    tokens = tokens.sort(dim=-1, descending=True).values  # ids first, -1 last
    present = tokens >= 0
    first = present.clone()
    first[:, 1:] &= tokens[:, 1:] != tokens[:, :-1]  # the first of each run of one id
    width = tokens.shape[1]
    column = torch.where(present, first.long().cumsum(dim=-1) - 1, width)  # absent -> a spare column
    ids = torch.full((tokens.shape[0], width + 1), -1, dtype=tokens.dtype, device=tokens.device)
    ids.scatter_(-1, column, torch.where(present, tokens, -1))  # a run writes its one id
    counts = torch.zeros(ids.shape, dtype=torch.float32, device=tokens.device)
    counts.scatter_add_(-1, column, present.float())
    return ids[:, :width], counts[:, :width]


def group_order(response_mask: Tensor, token_ids: Tensor, group_ids: Tensor, finished: Tensor | None,
                tokens: int, vocab_size: int | None = None, gradient_mask: Tensor | None = None) -> RowOrder:
    """Response rows in (position, group) order, tiled on block boundaries (see :class:`RowOrder`).

    A row is *finished* when it ended by itself (``finished``, or inferred as "its last response
    position is before the last column"); its point mass on its end token joins its group's mean
    at every later position (the absorbing variants); with ``vocab_size``, a response position
    whose id is outside ``[0, V)`` is a ValueError; with the rows of ``gradient_mask``
    (:meth:`RowOrder.with_gradient_rows`). Two device syncs: the sizes of the layout (rows,
    blocks, finished rows, the most in one group, the gradient mask's rows), counted on the dense
    mask and read back together, then the tiles' block sizes and point masses."""
    mask = response_mask.bool()
    batch_size, length = mask.shape
    device = mask.device
    if not mask.numel():
        empty = torch.zeros(0, dtype=torch.long, device=device)
        return RowOrder(empty, empty, []).with_gradient_rows(gradient_mask, 0)
    rank = group_ranks(group_ids.to(device))  # a block's key: position * B + group rank
    block_rows = torch.zeros(length * batch_size, dtype=torch.long, device=device)
    block_rows.index_add_(0, (torch.arange(length, device=device) * batch_size + rank.unsqueeze(-1)).flatten(),
                          mask.flatten().long())
    last, done = response_ends(mask, finished)
    done_per_group = torch.zeros(batch_size, dtype=torch.long, device=device).index_add_(0, rank, done.long())
    num_rows, outside, marked, num_blocks, num_done, width = torch.cat(
        [_layout_counts(mask, token_ids, vocab_size, gradient_mask),
         torch.stack([(block_rows > 0).sum(), done.sum(), done_per_group.max()])]).tolist()
    _refuse_outside(outside, vocab_size)
    batch_index, time_index = nonzero_given_count(mask, num_rows).unbind(-1)
    key = time_index * batch_size + rank[batch_index]
    order = torch.argsort(key, stable=True)
    batch_index, time_index, key = batch_index[order], time_index[order], key[order]
    if not num_rows:
        return RowOrder(batch_index, time_index, []).with_gradient_rows(gradient_mask, 0)
    starts = run_starts(key)  # of the blocks, rows sorted by key
    block_of_row = starts.long().cumsum(0) - 1
    block_keys = key[nonzero_given_count(starts, num_blocks).squeeze(-1)]
    block_sizes = block_rows[block_keys]
    block_time, block_group = block_keys // batch_size, block_keys % batch_size
    # Each group's finished rows as a [B, width] table of (last position, end token), by group rank.
    done_rows = nonzero_given_count(done, num_done).squeeze(-1)
    done_rows = done_rows[torch.argsort(rank[done_rows], stable=True)]
    done_rank = rank[done_rows]
    _, slot = label_places(done_rank, sizes=done_per_group)
    end_time = torch.full((batch_size, width), length, dtype=torch.long, device=device)
    end_token = torch.full((batch_size, width), -1, dtype=torch.long, device=device)
    end_time[done_rank, slot] = last[done_rows]
    end_token[done_rank, slot] = token_ids[done_rows, last[done_rows]].to(device=device, dtype=torch.long)
    # Each block's point masses, one per end token (finished rows mostly end on the same one): [K, M]
    # tokens (-1: none) and multiplicities, packed to the left, and how many (on the host, with the
    # block sizes: one device sync for every tile's layout).
    absorbed_tokens, absorbed_counts = _merged_masses(
        torch.where(end_time[block_group] < block_time.unsqueeze(-1), end_token[block_group], -1))
    sizes_on_host, absorbed_on_host = torch.stack([block_sizes, (absorbed_counts > 0).sum(dim=-1)]).tolist()
    block_ends = list(itertools.accumulate(sizes_on_host))
    tiles: list[Tile] = []
    start, first_block = 0, 0
    while start < order.numel():
        last_block = max(bisect.bisect_right(block_ends, start + tokens, lo=first_block), first_block + 1)
        end = block_ends[last_block - 1]
        blocks = slice(first_block, last_block)
        used = max(absorbed_on_host[blocks])  # drop the columns no block of the tile uses
        tiles.append(Tile(slice(start, end), functools.partial(  # views here, kernels at first use
            _tile_blocks, block_sizes[blocks], block_of_row[start:end], first_block, absorbed_tokens[blocks, :used],
            absorbed_counts[blocks, :used], max(sizes_on_host[blocks]))))
        start, first_block = end, last_block
    return RowOrder(batch_index, time_index, tiles).with_gradient_rows(gradient_mask, marked)


def _tile_blocks(sizes: Tensor, block_of_row: Tensor, first_block: int, absorbed_token: Tensor,
                 absorbed_count: Tensor, max_size: int) -> TileBlocks:
    """A tile's :class:`TileBlocks` from views of the group layout: its blocks' ``sizes``, its
    rows' blocks ``block_of_row`` (numbered from ``first_block``) and its blocks' point masses."""
    return TileBlocks(start=sizes.cumsum(0) - sizes, size=sizes, local=block_of_row - first_block,
                      absorbed_token=absorbed_token.contiguous(), absorbed_count=absorbed_count.contiguous(),
                      max_size=max_size)


def chunks(total: int, size: int) -> Iterator[tuple[int, int]]:
    """``(start, end)`` of consecutive ranges of at most ``size`` covering ``range(total)``."""
    for start in range(0, total, size):
        yield start, min(start + size, total)

"""The tile folds as Triton kernels: the same functions, arguments and formulas as
:mod:`ict.core.stats.torch_tiles` (see its docstring), for tiles on a GPU.

Each kernel reads the ``[n, vt]`` logits tile in its own dtype and computes in float32 registers,
so no float32 copy of a tile is made. A tile is a tensor of its own (a product's output) or an
:class:`~ict.core.stats.rows.IndexedTile` (rows of given logits, addressed through their indices:
no gathered copy; ``INDEXED``):

- ``_statistics_kernel``: one program per row folds the row's vocabulary slice, ``BLOCK_V`` ids
  at a time, into the online log-sum-exp state;
- ``_group_kernel``: one program per (position, group) block and span of vocabulary ids loads
  its ``G`` rows ``BLOCK_V`` ids at a time, forms their mean (plus absorbed point masses) in
  registers and accumulates each row's sums against it elementwise, reduced once at the end (the
  spans' sums are added on the host, in a fixed order: the result does not depend on
  scheduling). It is bound by its instructions, not by memory: its logarithms are
  ``lg2.approx.f32`` on an NVIDIA GPU (libdevice's ``fast_log2f``: 2^-22 absolute in [0.5, 2],
  2 ulp elsewhere, so an entropy moves by at most 2^-22 of its bits), with the entropy-like
  sums kept in bits and scaled to nats once (``benchmarks/kernel_sass.py`` counts them);
- ``_logit_grad_kernel``: one program per (row, ``BLOCK_V`` ids) overwrites the tile with the
  gradient wrt its logits (in the tile's dtype), or writes it into the same rows of ``out`` (an
  indexed tile's: the logits' gradient).

Under ``TRITON_INTERPRET=1`` (set before this module is imported) the kernels run on CPU
tensors, which is how the tests check them without a GPU (with the exact ``tl.log2``: the
interpreter has no libdevice). The leave-one-out ``kl`` score (whose reference is summed
directly over the other rows) has no kernel: :func:`supports_group` says which group scores do;
the caller folds the rest in torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch
import triton
import triton.language as tl
from torch import Tensor
from triton.language.extra import libdevice

from ict.core.stats.buffers import Scratch
from ict.core.stats.rows import IndexedTile, TileBlocks
from ict.core.stats.scores import TINY, Partials
from ict.core.stats.torch_tiles import RowState

# the kernels read an IndexedTile's rows where they lie in the given logits (no gathered copy)
READS_INDEXED_TILES = True
_STATISTICS_BLOCK = 2048
_GROUP_ELEMENTS = 4096  # BLOCK_G x BLOCK_V registers of one group program
_GROUP_SPAN = 4096  # vocabulary ids of one group program (a tile's blocks x its parts fill the GPU)
_GRAD_BLOCK = 1024
# lg2.approx where the kernels compile for an NVIDIA GPU (see _log2); the interpreter and ROCm
# builds take tl.log2
_FAST_LOG = tl.constexpr(os.environ.get("TRITON_INTERPRET") != "1" and torch.version.hip is None)


def supports_group(leave_one_out: bool, metrics: Sequence[str]) -> bool:
    """Whether ``_group_kernel`` computes these scores (every one but the leave-one-out ``kl``)."""
    return not (leave_one_out and "kl" in metrics)


@triton.jit
def _exp(x):
    # e^x as exp2: one special-function instruction (tl.exp adds a fix-up for denormal results,
    # which flush to 0 here; they are below 1.2e-38)
    return tl.exp2(x * 1.4426950408889634)


@triton.jit
def _statistics_kernel(tile_ptr, stride, rows_ptr, targets_ptr, max_ptr, total_ptr, shifted_ptr, square_ptr,
                       target_ptr, vocab_start, n_cols, inv_t, INDEXED: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    if INDEXED:  # the tile's row `row` is row rows[row] of the source
        row_ptr = tile_ptr + tl.load(rows_ptr + row).to(tl.int64) * stride
    else:
        row_ptr = tile_ptr + row * stride
    m = tl.load(max_ptr + row)
    s = tl.load(total_ptr + row)
    a = tl.load(shifted_ptr + row)
    q = tl.load(square_ptr + row)
    for start in range(0, n_cols, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        inside = cols < n_cols
        z = tl.load(row_ptr + cols, mask=inside, other=float("-inf")).to(tl.float32) * inv_t
        new_m = tl.maximum(m, tl.max(z, axis=0))
        safe = tl.where(new_m == float("-inf"), 0.0, new_m)
        rescale = _exp(m - safe)
        delta = tl.where(rescale > 0, m - safe, 0.0)  # 0 * (s * delta = -inf) would be NaN (torch's fold)
        e = _exp(z - safe)
        d = tl.where(e > 0, z - safe, 0.0)
        a = rescale * (a + s * delta) + tl.sum(e * d, axis=0)
        q = q * rescale * rescale + tl.sum(e * e, axis=0)
        s = s * rescale + tl.sum(e, axis=0)
        m = new_m
    tl.store(max_ptr + row, m)
    tl.store(total_ptr + row, s)
    tl.store(shifted_ptr + row, a)
    tl.store(square_ptr + row, q)
    local = tl.load(targets_ptr + row) - vocab_start
    if (local >= 0) & (local < n_cols):
        tl.store(target_ptr + row, tl.load(row_ptr + local).to(tl.float32) * inv_t)


@triton.jit
def _log2(x):
    # lg2.approx.f32 (one special-function instruction, error ~2^-22) where the kernel compiles;
    # libdevice's logf, inlined, costs ~25 instructions an element. The interpreter has no libdevice.
    if _FAST_LOG:
        y = libdevice.fast_log2f(x)
    else:
        y = tl.log2(x)
    return y


@triton.jit
def _x_log2_x(x):
    return x * _log2(tl.maximum(x, 1.1754943508222875e-38))  # 0 at x = 0


@triton.jit
def _group_kernel(tile_ptr, stride, rows_ptr, max_ptr, log_total_ptr, start_ptr, size_ptr, count_ptr,
                  absorbed_token_ptr, absorbed_count_ptr, absorbed_width, out_ptr, num_rows, vocab_start, n_cols, span,
                  inv_t, tiny, INDEXED: tl.constexpr, LEAVE_ONE_OUT: tl.constexpr, WANT_JS: tl.constexpr,
                  WANT_KL: tl.constexpr, WANT_TV: tl.constexpr, WANT_MASS: tl.constexpr, BLOCK_G: tl.constexpr,
                  BLOCK_V: tl.constexpr):
    # program (block, part): the block's rows over the vocabulary ids [part * span, (part + 1) * span);
    # its sums go to out[quantity, part, row] (summed over the parts on the host: deterministic).
    # Each sum is accumulated elementwise ([BLOCK_G, BLOCK_V]) and reduced once, after the loop; the
    # entropy-like sums are in bits (x log2 x) until then.
    block = tl.program_id(0).to(tl.int64)
    part = tl.program_id(1)  # columns are int32 (a tile is narrower than 2^31), rows int64
    first = tl.load(start_ptr + block).to(tl.int64)
    size = tl.load(size_ptr + block)
    count = tl.load(count_ptr + block)
    slots = tl.arange(0, BLOCK_G)
    alive = slots < size
    rows = first + slots
    if INDEXED:
        source_rows = tl.load(rows_ptr + rows, mask=alive, other=0).to(tl.int64)
    else:
        source_rows = rows
    shift = tl.load(max_ptr + rows, mask=alive, other=0.0)
    log_total = tl.load(log_total_ptr + rows, mask=alive, other=0.0)
    if LEAVE_ONE_OUT:
        share = 1.0 / tl.maximum(count - 1.0, 1.0)  # q_i = (S - p_i) / (n - 1)
        reference = tl.zeros((BLOCK_G, BLOCK_V), tl.float32)
    else:
        share = 1.0 / count  # q = S / n
        reference = tl.zeros((1, BLOCK_V), tl.float32)
    mixture = tl.zeros((BLOCK_G, BLOCK_V), tl.float32)
    cross = tl.zeros((BLOCK_G, BLOCK_V), tl.float32)
    variation = tl.zeros((BLOCK_G, BLOCK_V), tl.float32)
    mass = tl.zeros((BLOCK_G, BLOCK_V), tl.float32)
    square = tl.zeros((BLOCK_G, BLOCK_V), tl.float32)
    end = tl.minimum((part + 1) * span, n_cols)
    for start in range(part * span, end, BLOCK_V):
        cols = start + tl.arange(0, BLOCK_V)
        inside = alive[:, None] & (cols < end)[None, :]
        z = tl.load(tile_ptr + source_rows[:, None] * stride + cols[None, :], mask=inside,
                    other=float("-inf")).to(tl.float32)
        p = _exp((z * inv_t - shift[:, None]) - log_total[:, None])  # 0 outside
        total = tl.sum(p, axis=0)
        if WANT_MASS:
            mass += p
            square += p * p
        for slot in range(0, absorbed_width):
            column = (tl.load(absorbed_token_ptr + block * absorbed_width + slot) - vocab_start).to(tl.int32)
            weight = tl.load(absorbed_count_ptr + block * absorbed_width + slot)
            total += tl.where(cols == column, tl.where(column < end, weight, 0.0), 0.0)
        if LEAVE_ONE_OUT:
            # NaN stays NaN, as in torch (a NaN logit's row spoils its group's reference)
            q = tl.maximum(total[None, :] - p, 0.0, propagate_nan=tl.PropagateNan.ALL) * share
            if WANT_JS:
                reference += _x_log2_x(q)
        else:
            mean = total * share
            q = tl.broadcast_to(mean[None, :], (BLOCK_G, BLOCK_V))
            if WANT_JS:
                reference += _x_log2_x(mean)[None, :]
        if WANT_JS:
            mixture += _x_log2_x(0.5 * (p + q))
        if WANT_KL:
            cross += p * _log2(tl.maximum(q, tiny, propagate_nan=tl.PropagateNan.ALL))  # NaN stays NaN (torch's)
        if WANT_TV:
            variation += tl.abs(p - q)
    ln2 = 0.6931471805599453
    parts = tl.num_programs(1).to(tl.int64)
    out = out_ptr + part.to(tl.int64) * num_rows + rows  # quantity k at out_ptr + (k * parts + part) * num_rows + row
    if WANT_JS:
        tl.store(out, -ln2 * tl.sum(mixture, axis=1), mask=alive)
        tl.store(out + parts * num_rows, -ln2 * tl.sum(reference, axis=1) + tl.zeros((BLOCK_G,), tl.float32),
                 mask=alive)
    if WANT_KL:
        tl.store(out + 2 * parts * num_rows, ln2 * tl.sum(cross, axis=1), mask=alive)
    if WANT_TV:
        tl.store(out + 3 * parts * num_rows, tl.sum(variation, axis=1), mask=alive)
    if WANT_MASS:
        tl.store(out + 4 * parts * num_rows, tl.sum(mass, axis=1), mask=alive)
        tl.store(out + 5 * parts * num_rows, tl.sum(square, axis=1), mask=alive)


@triton.jit
def _logit_grad_kernel(tile_ptr, stride, rows_ptr, out_ptr, out_stride, targets_ptr, max_ptr, log_total_ptr,
                       entropy_ptr, grad_log_probs_ptr, grad_entropy_ptr, vocab_start, n_cols, inv_t,
                       INDEXED: tl.constexpr, HAS_LOG_PROB_GRAD: tl.constexpr, HAS_ENTROPY_GRAD: tl.constexpr,
                       BLOCK_V: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    if INDEXED:
        source_row = tl.load(rows_ptr + row).to(tl.int64)
    else:
        source_row = row
    cols = tl.program_id(1) * BLOCK_V + tl.arange(0, BLOCK_V)
    inside = cols < n_cols
    z = tl.load(tile_ptr + source_row * stride + cols, mask=inside, other=0.0).to(tl.float32) * inv_t
    log_p = (z - tl.load(max_ptr + row)) - tl.load(log_total_ptr + row)
    p = _exp(log_p)
    grad = tl.zeros((BLOCK_V,), tl.float32)
    if HAS_LOG_PROB_GRAD:
        is_target = (cols + vocab_start) == tl.load(targets_ptr + row)
        grad += tl.load(grad_log_probs_ptr + row) * (is_target.to(tl.float32) - p)
    if HAS_ENTROPY_GRAD:
        grad -= tl.load(grad_entropy_ptr + row) * p * (tl.where(p > 0, log_p, 0.0) + tl.load(entropy_ptr + row))
    tl.store(out_ptr + source_row * out_stride + cols, (grad * inv_t).to(out_ptr.dtype.element_ty), mask=inside)


def _addressed(tile: Tensor | IndexedTile) -> tuple[Tensor, Tensor, bool]:
    """``(source, rows, indexed)`` of a tile: an :class:`IndexedTile`'s rows are read where they lie
    (``rows`` is only a placeholder pointer for a tile of its own)."""
    if isinstance(tile, IndexedTile):
        return tile.source, tile.rows, True
    return tile, tile, False


def fold_statistics(state: RowState, tile: Tensor | IndexedTile, targets: Tensor, vocab_start: int,
                    temperature: float, overwrite: bool = False, keep_exponentials: bool = False,
                    scratch: Scratch | None = None) -> None:
    """:func:`ict.core.stats.torch_tiles.fold_statistics` as one Triton program per row (it never
    writes the tile, keeps no exponentials, the group kernel reads the tile, and writes no
    temporaries: ``scratch`` is unused)."""
    if not tile.shape[0]:
        return
    source, rows, indexed = _addressed(tile)
    _statistics_kernel[(tile.shape[0],)](
        source, source.stride(0), rows, targets, state.maximum, state.total, state.shifted, state.square,
        state.target, vocab_start, tile.shape[1], 1.0 / temperature, INDEXED=indexed, BLOCK_V=_STATISTICS_BLOCK)


def group_partials(partials: Partials, tile: Tensor | IndexedTile, maximum: Tensor, log_total: Tensor,
                   temperature: float, blocks: TileBlocks, vocab_start: int, absorbing: bool,
                   leave_one_out: bool, metrics: Sequence[str], mass: tuple[Tensor, Tensor] | None = None) -> None:
    """:func:`ict.core.stats.torch_tiles.group_partials` as one Triton program per (block,
    ``_GROUP_SPAN`` vocabulary ids), every score but the leave-one-out ``kl``
    (:func:`supports_group`); the programs' sums are added up over the vocabulary parts here."""
    assert supports_group(leave_one_out, metrics)
    num_blocks, num_rows, width = blocks.size.numel(), tile.shape[0], tile.shape[1]
    if not num_blocks:
        return
    block_g = triton.next_power_of_2(blocks.max_size)
    absorbed = blocks.absorbed_token.shape[1] if absorbing else 0
    tokens = blocks.absorbed_token.contiguous() if absorbed else blocks.size
    counts = blocks.absorbed_count.contiguous() if absorbed else log_total
    parts = triton.cdiv(width, _GROUP_SPAN)
    source, rows, indexed = _addressed(tile)
    out = torch.zeros(6, parts, num_rows, dtype=torch.float32, device=source.device)
    _group_kernel[(num_blocks, parts)](
        source, source.stride(0), rows, maximum, log_total, blocks.start, blocks.size, blocks.count(absorbing),
        tokens, counts, absorbed, out, num_rows, vocab_start, width, _GROUP_SPAN, 1.0 / temperature, TINY,
        INDEXED=indexed, LEAVE_ONE_OUT=leave_one_out, WANT_JS="js" in metrics, WANT_KL="kl" in metrics,
        WANT_TV="wasserstein" in metrics, WANT_MASS=mass is not None or "kl" in metrics, BLOCK_G=block_g,
        BLOCK_V=max(16, _GROUP_ELEMENTS // block_g))
    sums = out.sum(dim=1, dtype=torch.float64)  # [6, n]
    if "js" in metrics:
        partials.mixture.add_(sums[0])
        partials.reference_entropy.add_(sums[1])
    if "kl" in metrics:
        partials.cross.add_(sums[2])
        partials.mass.add_(sums[4])
    if "wasserstein" in metrics:
        partials.variation.add_(sums[3])
    if mass is not None:
        mass[0].add_(sums[4])
        mass[1].add_(sums[5])


def logit_grads(tile: Tensor | IndexedTile, targets: Tensor, vocab_start: int, maximum: Tensor, log_total: Tensor,
                entropy: Tensor, grad_log_probs: Tensor | None, grad_entropy: Tensor | None, temperature: float,
                out: Tensor | None = None) -> Tensor:
    """:func:`ict.core.stats.torch_tiles.logit_grads`, written over ``tile`` (returned, its dtype),
    or, for an :class:`IndexedTile`, into the same rows of ``out`` (``[R, vt]``, like its source;
    returned)."""
    source, rows, indexed = _addressed(tile)
    if out is None:
        assert not indexed, "an indexed tile's gradient needs out="
        out = source
    if tile.shape[0]:
        _logit_grad_kernel[(tile.shape[0], triton.cdiv(tile.shape[1], _GRAD_BLOCK))](
            source, source.stride(0), rows, out, out.stride(0), targets, maximum, log_total, entropy,
            entropy if grad_log_probs is None else grad_log_probs,
            entropy if grad_entropy is None else grad_entropy, vocab_start, tile.shape[1], 1.0 / temperature,
            INDEXED=indexed, HAS_LOG_PROB_GRAD=grad_log_probs is not None, HAS_ENTROPY_GRAD=grad_entropy is not None,
            BLOCK_V=_GRAD_BLOCK)
    return out

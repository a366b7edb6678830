"""The tile folds in torch: the twin of :mod:`ict.core.stats.triton_tiles`, for any device.

Each function folds one ``[n, vt]`` logits tile (token rows x a vocabulary slice starting at
``vocab_start``; any float dtype, read as float32) into per-row float32 accumulators ``[n]``.
With ``z = logits / T`` (T the temperature):

- :func:`fold_statistics`: the online log-sum-exp state ``(maximum m, total s = sum e^(z-m),
  shifted a = sum e^(z-m) (z-m), square q = sum e^(2(z-m)), target = z[token])``; at the end
  ``log Z = m + log s`` (kept in two parts), ``H = log s - a / s`` (Shannon, nats) and ``H2 = 2 log s - log q``
  (Renyi-2, nats);
- :func:`group_partials`: with ``p = exp(z - log Z)``, a group reference's :class:`Partials`
  against its block's mean (a (position, group) block of contiguous rows, plus absorbed point
  masses);
- :func:`logit_grads`: the gradient of ``sum_rows g_lp log p(y) + g_H H(p)`` wrt the tile's logits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ict.core.stats.buffers import Scratch, scratch_like
from ict.core.stats.rows import TileBlocks
from ict.core.stats.scores import TINY, Partials

_LOWEST = torch.finfo(torch.float32).min
# the folds take gathered tiles only (an IndexedTile's rows are gathered by the head)
READS_INDEXED_TILES = False


@dataclass
class RowState:
    """Online log-sum-exp accumulators of each row (module docstring), ``[n]`` float32 each."""

    maximum: Tensor
    total: Tensor
    shifted: Tensor
    square: Tensor
    target: Tensor

    @staticmethod
    def empty(num_rows: int, device: torch.device) -> RowState:
        """Maxima and target logits at -inf, sums at 0: rows of one ``[5, n]`` buffer, two fills."""
        rows = torch.full((5, num_rows), float("-inf"), dtype=torch.float32, device=device)
        rows[1:4].zero_()
        return RowState(*rows.unbind())

    def view(self, part: slice) -> RowState:
        return RowState(self.maximum[part], self.total[part], self.shifted[part], self.square[part],
                        self.target[part])

    def log_total(self, out: Tensor | None = None) -> Tensor:
        """``log s`` ``[n]``, into ``out`` when given (no copy)."""
        return torch.log(self.total, out=out)

    def entropy(self, log_total: Tensor | None = None, out: Tensor | None = None) -> Tensor:
        """``H = log s - a / s`` ``[n]``; ``log_total``: :meth:`log_total` when already computed;
        into ``out`` when given (no copy)."""
        log_total = self.log_total() if log_total is None else log_total
        out = torch.empty_like(self.total) if out is None else out
        return torch.sub(log_total, torch.div(self.shifted, self.total, out=out), out=out).clamp_(min=0.0)

    def renyi2(self, log_total: Tensor | None = None, out: Tensor | None = None) -> Tensor:
        """``H2 = 2 log s - log q`` ``[n]``; ``log_total``: :meth:`log_total` when already computed;
        into ``out`` when given (no copy)."""
        log_total = self.log_total() if log_total is None else log_total
        out = torch.empty_like(self.total) if out is None else out
        return torch.mul(log_total, 2.0, out=out).sub_(self.square.log()).clamp_(min=0.0)


def scaled(tile: Tensor, temperature: float, overwrite: bool = False) -> Tensor:
    """Float32 ``z = tile * (1 / T)``, the reciprocal rounded to float32 once, exactly as the Triton
    kernels scale (``tile / T`` rounds otherwise, by an ulp of z: 1e-3 at ``|z| = 1e4``, and the
    scores computed here from a kernel's normalisers saw it). A new tensor, unless ``overwrite``
    (the tile is not needed afterwards) and the tile is float32, which is then scaled in place. At
    ``T = 1`` nothing is multiplied (``x * 1.0 == x``): a half-precision tile costs one pass, its cast."""
    if tile.dtype != torch.float32:  # the cast is a copy of its own, scaled in place
        return tile.float().mul_(1.0 / temperature) if temperature != 1.0 else tile.float()
    if overwrite:
        return tile.mul_(1.0 / temperature) if temperature != 1.0 else tile
    return tile * (1.0 / temperature) if temperature != 1.0 else tile.clone()


def probabilities(tile: Tensor, maximum: Tensor, log_total: Tensor, temperature: float,
                  overwrite: bool = False) -> Tensor:
    """``p = exp((tile / T - m) - log s)`` ``[n, vt]`` float32; ``log Z = m + log s`` is kept in two
    parts, whose sum would round away ``log s`` next to a large ``m``. A new tensor, unless
    ``overwrite`` (the tile is not needed afterwards) and the tile is float32: then it is ``p``."""
    return scaled(tile, temperature, overwrite).sub_(maximum.unsqueeze(-1)).sub_(log_total.unsqueeze(-1)).exp_()


def tile_columns(ids: Tensor, vocab_start: int, width: int) -> tuple[Tensor, Tensor]:
    """Each vocabulary id's column in a tile of ``width`` ids starting at ``vocab_start``, clamped
    into the tile, and whether it lies inside (so a gather or scatter needs no device sync)."""
    local = ids - vocab_start
    return local.clamp(0, width - 1), (local >= 0) & (local < width)


def entropy_terms(values: Tensor, scratch: Scratch | None = None) -> Tensor:
    """``sum_v -x_v log max(x_v, TINY)`` of each row ``[n]`` (0 log 0 = 0); the logarithms are
    written into ``scratch``'s ``"temporary"`` when given."""
    logarithms = torch.clamp_min(values, TINY, out=scratch_like(scratch, "temporary", values))
    return logarithms.log_().mul_(values).sum(dim=-1).neg_()


def squares(values: Tensor, out: Tensor | None = None) -> Tensor:
    """``sum_v x_v^2`` of each row ``[n]``: a dot product of the row with itself (within ~5e-7 of
    float64 in Renyi-2 at V = 151,936; ``vector_norm(x) ** 2``, a square root squared, is biased
    by ~2e-6 and off by up to 5.5e-6 there). ``out``: a tensor of ``values``' shape that the
    products are written into (the same float32 products and sum as the dot product on a CPU,
    without its fresh ``[n, vt]`` temporary)."""
    if out is None:
        return torch.linalg.vecdot(values, values)
    return torch.mul(values, values, out=out).sum(dim=-1)


def fold_statistics(state: RowState, tile: Tensor, targets: Tensor, vocab_start: int, temperature: float,
                    overwrite: bool = False, keep_exponentials: bool = False,
                    scratch: Scratch | None = None) -> Tensor | None:
    """Fold one tile into ``state`` (module docstring); ``targets`` ``[n]`` are vocabulary ids;
    ``overwrite``: the tile is not needed afterwards, so a float32 tile is worked on in place (no
    copy). ``keep_exponentials``: return ``e^(z - m)`` ``[n, vt]`` (``m`` the running maximum after
    this tile), which for a tile holding the whole vocabulary divided by ``s`` is ``p``; written
    into ``scratch``'s ``"exponentials"`` when given (then valid until that name is taken again)."""
    if tile.shape[1]:  # rows whose token lies outside the tile keep their value
        column, inside = tile_columns(targets, vocab_start, tile.shape[1])
        picked = scaled(tile.gather(1, column.unsqueeze(-1)).squeeze(-1), temperature, overwrite=True)
        state.target.copy_(torch.where(inside, picked, state.target))
    z = scaled(tile, temperature, overwrite)
    new_max = torch.maximum(state.maximum, z.amax(dim=-1))
    safe = torch.where(new_max == float("-inf"), 0.0, new_max)
    z.sub_(safe.unsqueeze(-1))
    exps = torch.exp(z, out=scratch_like(scratch, "exponentials", z))
    z.clamp_(min=_LOWEST)  # -inf logits: exp(z) = 0 and 0 * z must be 0, not nan
    shift = state.maximum - safe
    rescale = torch.exp(shift)
    # 0 where the old terms vanish (rescale = 0): total * delta overflows to -inf when the old maximum
    # is near float32's lowest (a vocabulary masked with finfo.min), and 0 * -inf is NaN
    delta = torch.where(rescale > 0, shift, 0.0)
    # in place, in the order of rescale * (a + s delta) + sum, q r r + sum and s r + sum: no copies
    state.shifted.add_(state.total * delta).mul_(rescale).add_(z.mul_(exps).sum(dim=-1))
    # z is spent: sum_v e^(2(z-m)) is squared into it
    state.square.mul_(rescale).mul_(rescale).add_(squares(exps, out=z))
    state.total.mul_(rescale).add_(exps.sum(dim=-1))
    state.maximum.copy_(new_max)
    return exps if keep_exponentials else None


_BLOCK = 256  # float32 partial sums this wide, added up in float64 (row_sums_float64)


def row_sums_float64(values: Tensor) -> Tensor:
    """``sum_v values_v`` of each row of ``values`` ``[n, vt]`` float32, as ``[n]`` float64: the
    sums of ``_BLOCK`` consecutive entries in float32, added up in float64, so float32 rounds
    only within a block (a float64 reduction of the whole row casts every entry: 1.3 ms against
    0.07-0.16 ms for this at 256 x 8192 on a 2-core CPU)."""
    whole = values.shape[1] // _BLOCK * _BLOCK
    sums = values[:, :whole].unflatten(1, (-1, _BLOCK)).sum(dim=-1).sum(dim=-1, dtype=torch.float64)
    return sums.add_(values[:, whole:].sum(dim=-1, dtype=torch.float64)) if whole < values.shape[1] else sums


def accumulate_mass(mass: tuple[Tensor, Tensor], p: Tensor, scratch: Scratch | None = None) -> None:
    """Add ``sum_v p_v`` and ``sum_v p_v^2`` of each row of ``p`` ``[n, vt]`` to ``mass`` (the
    squares in ``scratch``'s ``"temporary"`` when given)."""
    mass[0].add_(p.sum(dim=-1))
    mass[1].add_(squares(p, out=None if scratch is None else scratch.take("temporary", p)))


def accumulate_partials(partials: Partials, p: Tensor, q: Tensor, metrics: Sequence[str],
                        reference_entropy: bool, scratch: Scratch | None = None) -> None:
    """Add the sums over this vocabulary slice of ``p`` ``[n, vt]`` against ``q`` ``[n, vt]``
    (modified) to ``partials`` (``reference_entropy``: also ``sum -q log q``); temporaries in
    ``scratch``'s ``"temporary"`` when given."""
    if "kl" in metrics:  # summed in float64 (Partials)
        logarithms = torch.clamp_min(q, TINY, out=scratch_like(scratch, "temporary", q))
        partials.cross.add_(row_sums_float64(logarithms.log_().mul_(p)))
        partials.mass.add_(row_sums_float64(p))
    if "wasserstein" in metrics:
        partials.variation.add_(torch.sub(p, q, out=scratch_like(scratch, "temporary", q)).abs_().sum(dim=-1))
    if "js" in metrics:
        if reference_entropy:
            partials.reference_entropy.add_(entropy_terms(q, scratch))
        partials.mixture.add_(entropy_terms(q.add_(p).mul_(0.5), scratch))


def _sum_of_others(p: Tensor, blocks: TileBlocks, scratch: Scratch | None = None) -> Tensor:
    """``sum_{j != i} p_j`` over the other rows of each row's block ``[n, vt]``, summed directly
    (``G - 1`` gathered adds): exactly 0 where every other row's entry is, and small entries keep
    their relative precision (``S - p_i`` loses both to rounding). In ``scratch``'s
    ``"reference"`` when given (the partners' rows in its ``"temporary"``)."""
    sizes = blocks.size[blocks.local]
    start = blocks.start[blocks.local]
    slot = torch.arange(blocks.local.numel(), device=p.device) - start
    others = scratch_like(scratch, "reference", p).zero_()
    for shift in range(1, blocks.max_size):  # + 0 for a block of at most `shift` rows: no device sync
        partners = start + (slot + shift) % sizes
        others.add_(rows_of(p, partners, scratch, "temporary").masked_fill_((sizes <= shift).unsqueeze(-1), 0.0))
    return others


def group_partials(partials: Partials, tile: Tensor | None, maximum: Tensor, log_total: Tensor, temperature: float,
                   blocks: TileBlocks, vocab_start: int, absorbing: bool, leave_one_out: bool,
                   metrics: Sequence[str], mass: tuple[Tensor, Tensor] | None = None,
                   p: Tensor | None = None, scratch: Scratch | None = None) -> None:
    """Add one tile's sums of each row against its group reference to ``partials`` (and
    ``sum_v p_v``, ``sum_v p_v^2`` of each row to ``mass`` when given); ``p``: the tile's
    probabilities when already known (then ``tile`` is not read); ``scratch``: where the blocks'
    sums (``"block sums"``), the rows' references (``"reference"``) and other ``[n, vt]``
    temporaries go.

    The block's sum ``S`` over its rows (plus, ``absorbing``, its point masses) and ``n``
    contributors give the mean ``q = S / n`` (row included) or ``q_i = (S - p_i) / (n - 1)``
    (``leave_one_out``; with ``kl`` asked, ``S - p_i`` is summed directly)."""
    if p is None:
        p = probabilities(tile, maximum, log_total, temperature)
    if mass is not None:
        accumulate_mass(mass, p, scratch)
    width = p.shape[1]
    block_sum = (torch.zeros(blocks.size.numel(), width, dtype=torch.float32, device=p.device) if scratch is None
                 else scratch.buffer("block sums").take(blocks.size.numel(), width, torch.float32, p.device).zero_())
    direct = leave_one_out and "kl" in metrics
    if not direct:
        block_sum.index_add_(0, blocks.local, p)
    if absorbing and blocks.absorbed_token.numel() and width:
        # (-1, no point mass, lies outside every tile); + 0 where outside
        column, inside = tile_columns(blocks.absorbed_token, vocab_start, width)
        block_index = torch.arange(column.shape[0], device=p.device).unsqueeze(-1).expand_as(column)
        block_sum.index_put_((block_index, column), torch.where(inside, blocks.absorbed_count, 0.0),
                             accumulate=True)
    count = blocks.count(absorbing)
    if not leave_one_out:
        block_sum.div_(count.unsqueeze(-1))
        if "js" in metrics:
            partials.reference_entropy.add_(entropy_terms(block_sum, scratch)[blocks.local])
        accumulate_partials(partials, p, rows_of(block_sum, blocks.local, scratch, "reference"), metrics,
                            reference_entropy=False,
                            scratch=scratch)
        return
    if direct:
        q = _sum_of_others(p, blocks, scratch)
        if absorbing:  # + the absorbed point masses (block_sum holds nothing else)
            q.add_(rows_of(block_sum, blocks.local, scratch, "temporary"))
    else:
        q = rows_of(block_sum, blocks.local, scratch, "reference").sub_(p).clamp_min_(0.0)
    q.div_((count[blocks.local] - 1).clamp_min(1.0).unsqueeze(-1))
    accumulate_partials(partials, p, q, metrics, reference_entropy=True, scratch=scratch)


def rows_of(table: Tensor, index: Tensor, scratch: Scratch | None, name: str) -> Tensor:
    """``table[index]`` ``[n, vt]`` (the rows of ``table`` ``[m, vt]`` at ``index`` ``[n]``), written
    into ``scratch``'s ``name`` when given."""
    out = None if scratch is None else scratch.buffer(name).take(index.numel(), table.shape[1], table.dtype,
                                                                  table.device)
    return torch.index_select(table, 0, index, out=out)


def logit_grads(tile: Tensor, targets: Tensor, vocab_start: int, maximum: Tensor, log_total: Tensor, entropy: Tensor,
                grad_log_probs: Tensor | None, grad_entropy: Tensor | None, temperature: float) -> Tensor:
    """``[n, vt]`` float32 gradient wrt the tile's logits of ``sum g_lp log p(y) + g_H H(p)``:
    ``d log p(y) / d logits = (onehot(y) - p) / T`` and ``d H / d logits = -p (log p + H) / T``;
    ``grad_*`` are ``[n]`` float32 (None: no such term). The tile is not needed afterwards (the
    caller's own copy): a float32 one is overwritten."""
    log_p = scaled(tile, temperature, overwrite=True)
    log_p.sub_(maximum.unsqueeze(-1)).sub_(log_total.unsqueeze(-1))
    if grad_entropy is not None:
        p = log_p.exp()
        log_p.masked_fill_(p == 0, 0.0)  # 0 log 0 = 0 for -inf logits
        grad = log_p.add_(entropy.unsqueeze(-1)).mul_(p).mul_(grad_entropy.neg().unsqueeze(-1))
        if grad_log_probs is not None:
            grad.addcmul_(p, grad_log_probs.unsqueeze(-1), value=-1.0)
    else:  # p in place of log p: no second [n, vt] tensor
        assert grad_log_probs is not None
        grad = log_p.exp_().mul_(grad_log_probs.neg().unsqueeze(-1))
    if grad_log_probs is not None and tile.shape[1]:
        column, inside = tile_columns(targets, vocab_start, tile.shape[1])
        grad.scatter_add_(1, column.unsqueeze(-1), torch.where(inside, grad_log_probs, 0.0).unsqueeze(-1))  # + 0 outside
    if temperature != 1.0:
        grad.mul_(1.0 / temperature)
    return grad

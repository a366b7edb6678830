"""Top-``ratio`` ranking within populations, shared by every top-fraction selector
(:mod:`ict.core.selectors` states the counting and tie rules).

:func:`top_fraction_selection` ranks every population of a scope at once, as one padded
``[P, M]`` table (``P`` populations, ``M`` the largest population's positions), without a host
synchronisation (the ``group`` scope's table costs two, its number of groups and their largest
size): the populations' counts ``k`` (:func:`selection_counts`) and the tie rule
(:func:`top_counts`, its one implementation; :func:`top_count` is its one-row case) stay on the
device. Ties are broken by uniform keys drawn for every ranking (:func:`tie_keys`), so whether a
population draws never needs reading back. :func:`top_unique_token_selection` ranks the unique
ids of every population the same way, as one table of (population, id) pairs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from ict.core.devices import to_device_unblocking

SCOPES = ("sequence", "group", "batch")

TIE_TOLERANCE = 1e-6
"""Scores within this distance (absolute, in the score's unit) of the selection threshold are
tied (float32 JS scores and entropies carry rounding errors of about 1e-7 to 1e-6 nats)."""


@dataclass
class Selection:
    """A selector's result: ``mask`` (bool ``[B, T]``, the tokens in the policy-gradient loss), an
    optional ``kl_penalty`` (float ``[B, T]``, a per-token coefficient of
    ``|log p - log p_old|`` added to the loss; KL-Cov) and, for the top-fraction selectors,
    ``tie_decided`` (bool ``[B, T]``, the selected tokens decided by a tie at the threshold; see
    :mod:`ict.core.selectors`; :func:`ict.core.selectors.select` fills it with False for a selector
    that reports none: one that ranks nothing, such as ``all``, ``random`` or STAPO's rule, decides
    nothing by a tie)."""

    mask: Tensor
    kl_penalty: Tensor | None = None
    tie_decided: Tensor | None = None


def check_ratio(ratio: float) -> float:
    """``ratio`` as a float; ValueError unless it lies in (0, 1]."""
    ratio = float(ratio)
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    return ratio


COUNT_NOISE = 5e-10
"""A product ``ratio * n`` within this distance of an integer counts as that integer (float noise:
``0.07 * 100`` is ``7.000000000000001``); a large product within :data:`COUNT_NOISE_RELATIVE` of
its size too (``0.07 * 10^8`` is ``7000000.000000001``, an ulp above, 9.3e-10)."""

COUNT_NOISE_RELATIVE = 2.0**-51
"""The float64 product's rounding error relative to its size: at most ``2^-52`` (the ratio's
decimal rounded to float64, then the product), doubled."""


def selection_counts(ratio: float, num_tokens: Tensor) -> Tensor:
    """``ceil(ratio * n)`` for each ``n`` of ``num_tokens`` (integers ``[P]``; long ``[P]`` on its
    device, no host synchronisation), the float64 product taken as the nearest integer when within
    its rounding error of it, ``max(COUNT_NOISE, COUNT_NOISE_RELATIVE * product)`` (but at least 1
    for ``n > 0``: a product within the noise of 0 is still positive)."""
    product = check_ratio(ratio) * num_tokens.double()
    nearest = product.round()
    noise = (product * COUNT_NOISE_RELATIVE).clamp_min(COUNT_NOISE)
    counts = torch.where((product - nearest).abs() < noise, nearest, product.ceil()).long()
    return torch.maximum(counts, (num_tokens > 0).long())  # ceil of a positive product: >= 1, however small


def selection_count(ratio: float, num_tokens: int) -> int:
    """:func:`selection_counts` of one population of ``num_tokens`` tokens."""
    return int(selection_counts(ratio, torch.tensor([num_tokens]))[0])


def population_rows(scope: str, num_rows: int, group_ids: Tensor | None = None) -> list[Tensor]:
    """Row indices of each population of ``scope``: all rows (``batch``), each row
    (``sequence``), or the rows of each label of ``group_ids [B]`` (``group``), in ascending label
    order, each population's rows ascending (the rows of :func:`population_table`)."""
    return [rows[rows >= 0] for rows in population_table(scope, num_rows, group_ids)]


def label_places(labels: Tensor, num_labels: int = 0, sizes: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """For items sorted by ``labels`` (long ``[n]``, values in ``[0, L)``): each label's number of
    items ``[max(L, num_labels)]``, and each item's place among its label's items ``[n]`` (its column
    in a padded ``[labels, most items]`` table). ``sizes``: those numbers when already counted (no
    ``bincount``, whose CUDA version reads its input back)."""
    if sizes is None:
        sizes = torch.bincount(labels, minlength=num_labels)
    return sizes, torch.arange(labels.numel(), device=labels.device) - (sizes.cumsum(0) - sizes)[labels]


def run_starts(values: Tensor) -> Tensor:
    """Where each run of equal values starts (bool ``[n]`` of ``values`` ``[n]``, sorted or grouped):
    ``cumsum - 1`` of it numbers the runs, as ``torch.unique_consecutive``'s inverse, without its
    device sync."""
    starts = torch.ones(values.shape, dtype=torch.bool, device=values.device)
    starts[1:] = values[1:] != values[:-1]
    return starts


def group_ranks(group_ids: Tensor) -> Tensor:
    """Each row's group as a rank among the distinct ids (long ``[B]``, in ``[0, B)``), without
    the device sync of ``torch.unique`` (whose output size is read back)."""
    ids, by_id = group_ids.sort()
    return torch.empty_like(by_id).index_put_((by_id,), run_starts(ids).long().cumsum(0) - 1)


def population_table(scope: str, num_rows: int, group_ids: Tensor | None = None,
                     device: torch.device | None = None) -> Tensor:
    """The rows of each population of ``scope`` (:func:`population_rows`) as one long ``[P, R]``
    table on ``device`` (default: ``group_ids``' device, else the CPU; ``R`` the largest
    population's rows; ``-1`` pads the smaller ones), built on the device."""
    if scope == "batch":
        return torch.arange(num_rows, device=device).unsqueeze(0)
    if scope == "sequence":
        return torch.arange(num_rows, device=device).unsqueeze(-1)
    if scope != "group":
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    if group_ids is None:
        raise ValueError("scope='group' needs group_ids [B] in SelectionInputs")
    device = group_ids.device if device is None else device
    if not num_rows:
        return torch.full((0, 0), -1, dtype=torch.long, device=device)
    rank = group_ranks(group_ids.to(device))
    sizes = torch.zeros(num_rows, dtype=torch.long, device=device).index_add_(0, rank, torch.ones_like(rank))
    num_groups, most = torch.stack([(sizes > 0).sum(), sizes.max()]).tolist()  # the one read
    order = torch.argsort(rank, stable=True)  # rows by label, each label's rows ascending
    ranked = rank[order]
    _, slot = label_places(ranked, sizes=sizes)
    table = torch.full((num_groups, most), -1, dtype=torch.long, device=device)
    table[ranked, slot] = order
    return table


def tie_keys(shape: tuple[int, ...], device: torch.device, generator: torch.Generator | None = None) -> Tensor:
    """One uniform float64 key per entry of ``shape`` on ``device``, drawn from ``generator`` (None:
    a new one on ``device`` seeded with 0): the tie-break of :func:`top_counts`. A CPU generator's
    keys reach a CUDA device without the host waiting for it (:func:`ict.core.devices.to_device_unblocking`)."""
    device = torch.device(device)
    if generator is None:
        generator = torch.Generator(device=device).manual_seed(0)
    return to_device_unblocking(torch.rand(shape, generator=generator, device=generator.device,
                                           dtype=torch.float64), device)


def top_counts(values: Tensor, valid: Tensor, counts: Tensor, generator: torch.Generator | None = None,
               tolerance: float = TIE_TOLERANCE, keys: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """The ``counts[p]`` largest valid ``values`` of each row ``p`` of ``[P, M]`` (``valid``: bool
    ``[P, M]``; ``counts``: long ``[P]``, ``counts[p]`` at most its valid entries) with
    position-neutral ties: bool ``[P, M]`` masks of the kept entries and of those a tie decided
    (see :mod:`ict.core.selectors`).

    Every value above ``s_k + tolerance`` (``s_k`` the row's ``k``-th largest) is kept; the
    remaining slots go to the values within ``tolerance`` of ``s_k`` with the smallest ``keys``
    (``[P, M]`` float64; None: :func:`tie_keys` of ``values.shape`` from ``generator``): a uniform
    draw among them. A row whose tied values fit its slots keeps them all and decides nothing by
    a tie. NaN counts as ``+inf`` (a non-finite step still selects ``k`` tokens, so its loss is
    non-finite). Everything stays on the device: no host synchronisation, whatever ``P`` and
    whether a row draws or not (the keys are drawn either way)."""
    if not values.shape[-1]:
        nothing = torch.zeros(values.shape, dtype=torch.bool, device=values.device)
        return nothing, nothing.clone()
    values = values.double()
    values = torch.where(values.isnan(), math.inf, values)  # NaN ranks first, as in torch.sort
    count = counts.to(values.device)
    ranked = torch.where(valid, values, -math.inf).sort(dim=-1, descending=True).values
    threshold = ranked.gather(-1, (count - 1).clamp_min(0).unsqueeze(-1))  # the k-th largest [P, 1]
    active = valid & (count > 0).unsqueeze(-1)
    sure = active & (values > threshold + tolerance)
    tied = active & ((values == threshold) | ((values - threshold).abs() <= tolerance))
    slots = (count - sure.sum(dim=-1)).unsqueeze(-1)  # [P, 1]
    draws = tied.sum(dim=-1, keepdim=True) > slots  # more tied entries than free slots: a draw
    if keys is None:
        keys = tie_keys(values.shape, values.device, generator)
    order = torch.where(tied, keys.to(values.device), math.inf).argsort(dim=-1, stable=True)  # tied first, by key
    place = torch.empty_like(order).scatter_(-1, order, torch.arange(order.shape[-1], device=order.device)
                                             .expand_as(order))
    won = tied & (place < slots)  # each row's tied entries of the smallest keys, as many as its slots
    return sure | torch.where(draws, won, tied), won & draws


def top_count(
    values: Tensor, count: int, generator: torch.Generator | None = None, tolerance: float = TIE_TOLERANCE
) -> tuple[Tensor, Tensor]:
    """Indices (ascending) of the ``count`` largest of ``values`` ``[n]`` with position-neutral
    ties, and a bool ``[n]`` of the kept indices that a tie decided: :func:`top_counts` of one row."""
    valid = torch.ones((1, values.numel()), dtype=torch.bool, device=values.device)
    keep, decided = top_counts(values.reshape(1, -1), valid, torch.tensor([max(0, min(count, values.numel()))]),
                               generator, tolerance)
    return keep[0].nonzero(as_tuple=True)[0], decided[0]


def top_fraction_selection(
    scores: Tensor,
    response_mask: Tensor,
    ratio: float,
    scope: str = "batch",
    group_ids: Tensor | None = None,
    generator: torch.Generator | None = None,
    tolerance: float = TIE_TOLERANCE,
) -> Selection:
    """The ``ceil(ratio * N)`` highest ``scores`` among the ``N`` response tokens of each population
    of ``scope`` (see :func:`population_rows`), ties (within ``tolerance``) broken at random by one
    key per token, ``tie_keys([B, T])`` from ``generator`` (:func:`top_counts`), with the
    tie-decided tokens. All populations are ranked at once, as the rows of one padded table
    (module docstring); ``scores`` and ``response_mask`` are ``[B, T]``."""
    check_ratio(ratio)
    mask = response_mask.bool()
    batch_size, length = mask.shape
    table = population_table(scope, batch_size, group_ids, mask.device)  # [P, R]
    num_populations = table.shape[0]
    if not table.numel() or not length:
        return Selection(mask=torch.zeros_like(mask), tie_decided=torch.zeros_like(mask))
    rows = table.clamp_min(0)
    valid = (mask[rows] & (table >= 0).unsqueeze(-1)).reshape(num_populations, -1)  # [P, R * T]
    values = scores.detach().to(mask.device)[rows].reshape(num_populations, -1)
    keys = tie_keys((batch_size, length), mask.device, generator)[rows].reshape(num_populations, -1)  # per token
    keep, decided = top_counts(values, valid, selection_counts(ratio, valid.sum(dim=-1)), generator, tolerance,
                               keys)
    # back to [B, T]: each row sits in one population; the padding adds zeros to row 0
    flags = (torch.stack([keep, decided]).view(2, -1, length) & (table >= 0).view(1, -1, 1)).to(torch.int32)
    placed = torch.zeros(2, batch_size, length, dtype=torch.int32, device=mask.device)
    placed.index_add_(1, rows.reshape(-1), flags)
    return Selection(mask=placed[0] > 0, tie_decided=placed[1] > 0)


def top_fraction_mask(
    scores: Tensor,
    response_mask: Tensor,
    ratio: float,
    scope: str = "batch",
    group_ids: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Tensor:
    """The mask of :func:`top_fraction_selection`."""
    return top_fraction_selection(scores, response_mask, ratio, scope, group_ids, generator).mask


def top_unique_token_selection(
    scores: Tensor,
    token_ids: Tensor,
    response_mask: Tensor,
    ratio: float,
    scope: str = "batch",
    group_ids: Tensor | None = None,
    generator: torch.Generator | None = None,
) -> Selection:
    """Select the top ``ceil(ratio * U)`` of the ``U`` unique token ids of each population of
    ``scope`` by their mean score (float64) over the population's response tokens; mask their
    positions. Ties between ids are broken at random by one key per (population, id) pair,
    ``tie_keys([P, max U])`` from ``generator`` (:func:`top_counts`; populations in order, ids
    ascending); the positions of an id a tie decided are tie-decided.
    Every population at once, as a padded ``[P, max U]`` table of (population, id) pairs.
    """
    check_ratio(ratio)
    mask = response_mask.bool()
    batch_size, length = mask.shape
    selected, decided = torch.zeros_like(mask), torch.zeros_like(mask)
    table = population_table(scope, batch_size, group_ids, mask.device)  # [P, R]
    num_populations = table.shape[0]
    # each row's population; the padding (-1) writes to a spare last slot
    population_of = torch.zeros(batch_size + 1, dtype=torch.long, device=mask.device)
    population_of[torch.where(table >= 0, table, batch_size)] = torch.arange(
        num_populations, device=mask.device).unsqueeze(-1).expand_as(table)
    rows, positions = mask.nonzero(as_tuple=True)  # the response tokens, row-major
    if not rows.numel():
        return Selection(mask=selected, tie_decided=decided)
    # one sortable key per (population, id) pair: ids (any int in [-2^32, 2^32)) in the low 33 bits
    ids = token_ids.to(mask.device)[rows, positions].long()
    outside = ((ids < -(1 << 32)) | (ids >= 1 << 32)).sum()  # read with the table's width: no sync of its own
    keys = population_of[rows] * (1 << 33) + (ids + (1 << 32))
    unique_keys, inverse = torch.unique(keys, return_inverse=True)  # by population, then id
    population = unique_keys >> 33  # each pair's
    sums = torch.zeros(unique_keys.numel(), dtype=torch.float64, device=mask.device)
    sums.index_add_(0, inverse, scores.detach().to(mask.device)[rows, positions].double())
    means = sums / torch.bincount(inverse, minlength=unique_keys.numel()).double()
    sizes, slot = label_places(population, num_populations)
    width, outside = torch.stack([sizes.max(), outside]).tolist()  # host sync: the table's width
    if outside:
        raise ValueError(f"token_ids must lie in [-2^32, 2^32) to be ranked by id: {outside} response position(s) "
                         "hold one outside it")
    values = torch.zeros(num_populations, width, dtype=torch.float64, device=mask.device)
    valid = torch.zeros(num_populations, width, dtype=torch.bool, device=mask.device)
    values[population, slot] = means
    valid[population, slot] = True
    keep, tie = top_counts(values, valid, selection_counts(ratio, sizes), generator)
    selected[rows, positions] = keep[population, slot][inverse]
    decided[rows, positions] = tie[population, slot][inverse]
    return Selection(mask=selected, tie_decided=decided)

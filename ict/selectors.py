"""Token selectors: which response tokens the policy-gradient loss updates.

A selector is a named function ``fn(inputs: SelectionInputs, **options) -> mask`` returning a
boolean ``[B, T]`` mask that is a subset of the response mask. Selectors live in a registry;
register your own with :func:`register_selector`.

Built in (defaults in brackets):

- ``all``: every response token (GRPO).
- ``entropy`` [ratio=0.2]: the ``k = ceil(ratio * N)`` highest-entropy response tokens, ranked
  over the whole batch (20-Entropy, arXiv 2506.01939, ``get_global_entropy_top_mask``).
- ``stapo`` [tau_p=0.002, quantile=0.75]: every response token except the silenced ones, those
  with advantage > 0, sampled probability < tau_p and entropy strictly below the ``quantile``
  of the entropies of exactly those positive-advantage low-probability tokens (STAPO,
  arXiv 2602.15620; linear-interpolation quantile as ``torch.quantile``).
- ``ict`` [ratio=0.1, reference="seq_mean", unit="position", scope="batch"]: the top ``ratio``
  by Jensen-Shannon score (ICT, arXiv 2606.19771). ``unit="position"`` ranks positions;
  ``unit="token_id"`` ranks the unique sampled token ids by their mean score, keeps the top
  ``ceil(ratio * U)`` of the ``U`` unique ids and selects every response position holding one
  of them. ``scope="batch"`` ranks all response tokens together; ``"sequence"`` ranks each
  sequence separately.
- ``random`` [ratio=0.1, seed=None, scope="batch"]: a uniformly random ``ceil(ratio * N)``
  response tokens (the control at ICT's fraction). Uses ``inputs.generator`` if given, else a
  generator seeded with ``seed``, else torch's global generator.

Counting rules shared by every top-``ratio`` selector: ``N`` response tokens give
``k = ceil(ratio * N)`` (the product is rounded to 9 decimals first, so ``0.1 * 30`` is 3,
not 4); so at least one token is selected whenever ``N > 0``, none when ``N = 0``, all when
``ratio = 1``. Ties are broken by position: the earlier (row-major) position wins. A ratio
outside (0, 1] is an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ict.stats import TokenStatistics


@dataclass
class SelectionInputs:
    """Everything a selector may look at. ``advantages`` is ``[B]`` or ``[B, T]``."""

    stats: TokenStatistics
    response_mask: Tensor
    advantages: Tensor | None = None
    token_ids: Tensor | None = None
    generator: torch.Generator | None = None


SelectorFunction = Callable[..., Tensor]


@dataclass(frozen=True)
class Selector:
    """A registered selector: its function, default options and the JS references it needs."""

    name: str
    function: SelectorFunction
    defaults: dict[str, Any]
    js_references: Callable[[dict[str, Any]], tuple[str, ...]]


SELECTORS: dict[str, Selector] = {}


def register_selector(
    name: str,
    defaults: dict[str, Any] | None = None,
    js_references: Callable[[dict[str, Any]], tuple[str, ...]] | None = None,
) -> Callable[[SelectorFunction], SelectorFunction]:
    """Decorator registering ``fn(inputs, **options) -> bool mask [B, T]`` under ``name``.

    ``defaults`` lists every option the selector accepts; ``js_references(options)`` says which
    JS references (see :mod:`ict.stats`) must be computed for it.
    """

    def decorator(function: SelectorFunction) -> SelectorFunction:
        SELECTORS[name] = Selector(
            name=name,
            function=function,
            defaults=dict(defaults or {}),
            js_references=js_references or (lambda options: ()),
        )
        return function

    return decorator


def _get_selector(name: str) -> Selector:
    if name not in SELECTORS:
        raise ValueError(f"unknown selector {name!r}; registered: {', '.join(sorted(SELECTORS))}")
    return SELECTORS[name]


def resolve_options(name: str, options: dict[str, Any] | None = None) -> dict[str, Any]:
    """The selector's defaults updated by ``options`` (``None`` values keep the default)."""
    selector = _get_selector(name)
    resolved = dict(selector.defaults)
    for key, value in (options or {}).items():
        if key not in selector.defaults:
            accepted = ", ".join(selector.defaults) or "none"
            raise ValueError(f"selector {name!r} has no option {key!r} (accepted: {accepted})")
        if value is not None:
            resolved[key] = value
    return resolved


def required_js_references(name: str, options: dict[str, Any] | None = None) -> tuple[str, ...]:
    """JS references that :func:`ict.stats.token_statistics` must compute for this selector."""
    return tuple(_get_selector(name).js_references(resolve_options(name, options)))


def select_tokens(name: str, inputs: SelectionInputs, **options: Any) -> Tensor:
    """Run the selector ``name``; returns a bool ``[B, T]`` subset of the response mask."""
    selector = _get_selector(name)
    mask = selector.function(inputs, **resolve_options(name, options))
    response_mask = inputs.response_mask.bool()
    if mask.dtype != torch.bool or mask.shape != response_mask.shape:
        raise ValueError(f"selector {name!r} must return a bool mask of shape {tuple(response_mask.shape)}")
    if (mask & ~response_mask).any():
        raise ValueError(f"selector {name!r} selected tokens outside the response mask")
    return mask


def _check_ratio(ratio: float) -> float:
    ratio = float(ratio)
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"ratio must be in (0, 1], got {ratio}")
    return ratio


def selection_count(ratio: float, num_tokens: int) -> int:
    """``ceil(ratio * num_tokens)``, with the product rounded to 9 decimals against float noise."""
    return math.ceil(round(_check_ratio(ratio) * num_tokens, 9))


def top_fraction_mask(scores: Tensor, response_mask: Tensor, ratio: float, scope: str = "batch") -> Tensor:
    """Mask of the ``ceil(ratio * N)`` highest ``scores`` among response tokens.

    ``scope="batch"`` ranks all response tokens of ``[B, T]`` together; ``"sequence"`` ranks
    each row with its own ``N_b``. Ties go to the earlier position.
    """
    _check_ratio(ratio)
    if scope not in ("batch", "sequence"):
        raise ValueError(f"scope must be 'batch' or 'sequence', got {scope!r}")
    mask = response_mask.bool()
    selected = torch.zeros_like(mask)
    if scope == "batch":
        batch_index, time_index = mask.nonzero(as_tuple=True)
        count = selection_count(ratio, batch_index.numel())
        if count:
            order = torch.sort(scores[batch_index, time_index], descending=True, stable=True).indices
            keep = order[:count]
            selected[batch_index[keep], time_index[keep]] = True
        return selected
    for row in range(mask.shape[0]):
        selected[row] = top_fraction_mask(scores[row : row + 1], mask[row : row + 1], ratio, "batch")[0]
    return selected


@register_selector("all")
def select_all(inputs: SelectionInputs) -> Tensor:
    """GRPO: every response token."""
    return inputs.response_mask.bool().clone()


@register_selector("entropy", defaults={"ratio": 0.2})
def select_top_entropy(inputs: SelectionInputs, ratio: float) -> Tensor:
    """20-Entropy: the ``ceil(ratio * N)`` highest-entropy response tokens of the batch."""
    return top_fraction_mask(inputs.stats.entropy, inputs.response_mask, ratio, "batch")


def _token_advantages(inputs: SelectionInputs) -> Tensor:
    if inputs.advantages is None:
        raise ValueError("this selector needs advantages in SelectionInputs")
    advantages = inputs.advantages
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    return advantages.expand_as(inputs.response_mask)


def stapo_silenced_mask(
    log_probs: Tensor, entropy: Tensor, advantages: Tensor, response_mask: Tensor, tau_p: float, quantile: float
) -> Tensor:
    """STAPO's spurious tokens: A > 0, p(token) < tau_p, entropy < quantile of those tokens' entropies."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")
    candidates = response_mask.bool() & (advantages > 0) & (log_probs.detach().exp() < tau_p)
    if not candidates.any():
        return candidates
    threshold = torch.quantile(entropy[candidates].double(), quantile)
    return candidates & (entropy.double() < threshold)


@register_selector("stapo", defaults={"tau_p": 0.002, "quantile": 0.75})
def select_stapo(inputs: SelectionInputs, tau_p: float, quantile: float) -> Tensor:
    """STAPO (S2T): every response token except the silenced spurious ones."""
    silenced = stapo_silenced_mask(
        inputs.stats.log_probs, inputs.stats.entropy, _token_advantages(inputs), inputs.response_mask, tau_p, quantile
    )
    return inputs.response_mask.bool() & ~silenced


def _js_score(inputs: SelectionInputs, reference: str) -> Tensor:
    scores = inputs.stats.js_scores.get(reference)
    if scores is None:
        raise ValueError(
            f"JS scores for reference {reference!r} were not computed; "
            f"pass js_references=({reference!r},) to token_statistics"
        )
    return scores


def top_unique_token_mask(
    scores: Tensor, token_ids: Tensor, response_mask: Tensor, ratio: float, scope: str = "batch"
) -> Tensor:
    """Select the top ``ceil(ratio * U)`` unique token ids by mean score; mask their positions.

    Ties between ids go to the smaller token id.
    """
    _check_ratio(ratio)
    mask = response_mask.bool()
    if scope == "sequence":
        rows = [
            top_unique_token_mask(scores[row : row + 1], token_ids[row : row + 1], mask[row : row + 1], ratio)
            for row in range(mask.shape[0])
        ]
        return torch.cat(rows) if rows else mask.clone()
    if scope != "batch":
        raise ValueError(f"scope must be 'batch' or 'sequence', got {scope!r}")
    ids = token_ids[mask]
    if ids.numel() == 0:
        return torch.zeros_like(mask)
    unique_ids, inverse = torch.unique(ids, return_inverse=True)
    sums = torch.zeros(unique_ids.numel(), dtype=torch.float64, device=scores.device)
    sums.index_add_(0, inverse, scores[mask].double())
    means = sums / torch.bincount(inverse, minlength=unique_ids.numel()).double()
    count = selection_count(ratio, unique_ids.numel())
    chosen = unique_ids[torch.sort(means, descending=True, stable=True).indices[:count]]
    return mask & torch.isin(token_ids, chosen)


@register_selector(
    "ict",
    defaults={"ratio": 0.1, "reference": "seq_mean", "unit": "position", "scope": "batch"},
    js_references=lambda options: (options["reference"],),
)
def select_top_js(inputs: SelectionInputs, ratio: float, reference: str, unit: str, scope: str) -> Tensor:
    """ICT: the top ``ratio`` of response tokens by Jensen-Shannon score."""
    scores = _js_score(inputs, reference)
    if unit == "position":
        return top_fraction_mask(scores, inputs.response_mask, ratio, scope)
    if unit == "token_id":
        if inputs.token_ids is None:
            raise ValueError("unit='token_id' needs token_ids in SelectionInputs")
        return top_unique_token_mask(scores, inputs.token_ids, inputs.response_mask, ratio, scope)
    raise ValueError(f"unit must be 'position' or 'token_id', got {unit!r}")


@register_selector("random", defaults={"ratio": 0.1, "seed": None, "scope": "batch"})
def select_random(inputs: SelectionInputs, ratio: float, seed: int | None, scope: str) -> Tensor:
    """Control: a uniformly random ``ceil(ratio * N)`` of the response tokens."""
    generator = inputs.generator
    if generator is None and seed is not None:
        generator = torch.Generator(device=inputs.response_mask.device).manual_seed(int(seed))
    scores = torch.rand(
        inputs.response_mask.shape, generator=generator, device=inputs.response_mask.device
    )
    return top_fraction_mask(scores, inputs.response_mask, ratio, scope)

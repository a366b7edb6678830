"""Group advantages and the clipped policy-gradient loss on selected tokens (GRPO / DAPO).

Per token, with ``rho = exp(log_prob - old_log_prob)`` and advantage ``A``:
``loss_t = -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A)``, aggregated over the
*selected* tokens only (unselected tokens get exactly zero gradient):

- ``token_mean``: ``sum_t loss_t / (number of selected tokens)`` (the 20-Entropy reference's
  choice and the default; TRL's ``top_entropy_quantile`` instead keeps the normaliser over all
  response tokens);
- ``seq_mean_token_mean``: mean over sequences of each sequence's mean over its selected tokens
  (sequences with no selected token are left out);
- ``seq_mean_token_sum_norm`` (Dr. GRPO): ``sum_b sum_t loss_bt / (B * L)`` with the constant
  ``L = max_response_length`` (default: the padded length T).

``denominator="all"`` divides by the response tokens instead of the selected ones (per sequence
for ``seq_mean_token_mean``, whose mean is then over every sequence of the batch, one with a
selected token or not, one with no response token too): TRL's ``top_entropy_quantile``
convention, whose loss is about ``ratio`` times ours at the same mask; exactly TRL's bnpo
(``token_mean``) and grpo (``seq_mean_token_mean``: the mean over its B rows), and verl's
``seq-mean-token-mean`` (over its mini-batch's sequences).

Dual-clip (``clip_ratio_c``, verl's formula; off by default): for ``A < 0`` the per-token loss
is ``min(-A * clip_ratio_c, max(-rho * A, -clip(rho) * A))``, bounding the loss of a token whose
ratio has grown far above 1.

Optional terms: ``kl_coef * k3`` with ``k3 = exp(ref - lp) - (ref - lp) - 1`` (needs reference
log-probs), and ``- entropy_coef * H`` (an entropy bonus; needs ``differentiable_entropy=True``
statistics), each aggregated over the selected tokens or, with ``regularizer_tokens="all"``, over
all response tokens (as verl and TRL do); and KL-Cov's per-token penalty
``kl_penalty_t * |lp - old_lp|`` (``kl_penalty`` from :class:`ict.core.selectors.Selection`), part of
the per-token policy loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ict.core.errors import is_integer
from ict.core.stats import TokenStatistics, check_token_shapes

AGGREGATIONS = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")
TOKEN_SETS = ("selected", "all")
_MAX_LOG_RATIO = 20.0


@dataclass
class PolicyLossConfig:
    """Options of :func:`policy_loss`.

    Attributes:
        clip_low: lower clip range, ``rho >= 1 - clip_low`` (DAPO: 0.2).
        clip_high: upper clip range, ``rho <= 1 + clip_high`` (DAPO clip-higher: 0.28).
        aggregation: one of ``token_mean``, ``seq_mean_token_mean``, ``seq_mean_token_sum_norm``.
        max_response_length: the constant ``L`` of ``seq_mean_token_sum_norm``, in tokens
            (``None``: the padded response length T).
        kl_coef: weight of the k3 KL to the reference policy (0: no KL term).
        entropy_coef: weight of the entropy bonus (0: none; > 0 reproduces entropy explosion).
        clip_ratio_c: dual-clip bound for negative advantages (verl; ``None``: off; > 1).
        regularizer_tokens: tokens the KL and entropy terms cover: ``selected`` or ``all``
            response tokens (verl's and TRL's choice). A caller that splits a mini-batch into
            micro-batches weights each loss by `aggregation_weight` (the policy loss's tokens);
            with ``all`` the regularizer's own denominator is the response tokens (and, for
            ``seq_mean_token_mean``, every sequence), so the combined regularizer equals the
            mini-batch's only with one micro-batch.
        denominator: normaliser of ``token_mean`` / ``seq_mean_token_mean``: ``selected`` tokens
            (ours, the 20-Entropy reference) or ``all`` response tokens (TRL's
            ``top_entropy_quantile``).
    """

    clip_low: float = 0.2
    clip_high: float = 0.28
    aggregation: str = "token_mean"
    max_response_length: int | None = None
    kl_coef: float = 0.0
    entropy_coef: float = 0.0
    clip_ratio_c: float | None = None
    regularizer_tokens: str = "selected"
    denominator: str = "selected"

    def __post_init__(self) -> None:
        if self.clip_ratio_c is not None and not self.clip_ratio_c > 1.0:
            raise ValueError(f"clip_ratio_c must be > 1 (or None), got {self.clip_ratio_c}")
        for name in ("regularizer_tokens", "denominator"):
            if getattr(self, name) not in TOKEN_SETS:
                raise ValueError(f"{name} must be one of {', '.join(TOKEN_SETS)}, got {getattr(self, name)!r}")
        if self.aggregation not in AGGREGATIONS:
            raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {self.aggregation!r}")
        if not 0.0 <= self.clip_low < 1.0 or self.clip_high < 0.0:
            raise ValueError(f"need 0 <= clip_low < 1 and clip_high >= 0, got {self.clip_low}, {self.clip_high}")
        if self.kl_coef < 0 or self.entropy_coef < 0:
            raise ValueError("kl_coef and entropy_coef must be >= 0")
        for name in ("clip_low", "clip_high", "kl_coef", "entropy_coef", "clip_ratio_c"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"{name} must be finite, got {value}")
        if self.max_response_length is not None and self.max_response_length < 1:
            raise ValueError(f"max_response_length must be >= 1 (or None), got {self.max_response_length}")


def group_advantages(
    rewards: Tensor, group_size: int, normalize_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """GRPO advantages ``A_i = (r_i - mean(r)) / (std(r) + eps)`` within groups of ``group_size``.

    ``rewards`` is ``[N]`` with the ``group_size`` completions of one prompt adjacent;
    ``std`` is the unbiased sample standard deviation (as TRL and verl). Groups whose rewards
    are all equal get zero advantage. Returns ``[N]`` float32.
    """
    if not is_integer(group_size) or group_size < 2:
        raise ValueError(f"group_size must be an integer >= 2 for group advantages, got {group_size!r}")
    if rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    grouped = rewards.detach().float().view(-1, group_size)
    # a group of equal rewards gets exactly 0: its float mean may differ from the value by an ulp,
    # which the division by std + eps (std 0) would blow up to ~0.03 for every row, one sign
    equal = (grouped == grouped[:, :1]).all(dim=1, keepdim=True)
    centred = torch.where(equal, 0.0, grouped - grouped.mean(dim=1, keepdim=True))
    if normalize_std:
        centred = centred / (grouped.std(dim=1, keepdim=True) + eps)
    return centred.reshape(-1)


def aggregate(
    values: Tensor,
    weights: Tensor,
    aggregation: str,
    max_response_length: int | None = None,
    normaliser_weights: Tensor | None = None,
    every_row: bool = False,
) -> Tensor:
    """Aggregate ``[B, T]`` per-token ``values`` over tokens with ``weights`` (0/1) > 0.

    ``normaliser_weights`` (default: ``weights``) are the tokens counted in the denominators of
    ``token_mean`` and ``seq_mean_token_mean``, whose mean is over the sequences with a token of
    ``weights``, or over all B with ``every_row`` (TRL's grpo and verl: the response
    tokens' normalisation).
    """
    weights = weights.to(values.dtype)
    counted = weights if normaliser_weights is None else normaliser_weights.to(values.dtype)
    masked = torch.where(weights > 0, values, 0.0)  # not values * weights: NaN elsewhere stays out
    if aggregation == "token_mean":
        return masked.sum() / counted.sum().clamp(min=1.0)
    if aggregation == "seq_mean_token_mean":
        per_sequence = masked.sum(dim=-1) / counted.sum(dim=-1).clamp(min=1.0)
        if every_row:
            return per_sequence.sum() / max(1, values.shape[0])
        has_tokens = weights.sum(dim=-1) > 0
        return (per_sequence * has_tokens).sum() / has_tokens.sum().clamp(min=1)
    if aggregation == "seq_mean_token_sum_norm":
        length = values.shape[-1] if max_response_length is None else max_response_length
        return masked.sum() / max(1, values.shape[0] * length)
    raise ValueError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got {aggregation!r}")


LOSS_COUNTS = ("selected", "response", "rows_selected", "rows")
"""The order of :func:`loss_counts`: selected response tokens, response tokens, rows with a
selected response token, rows."""


def loss_counts(selected: Tensor, response_mask: Tensor) -> Tensor:
    """int64 ``[4]`` on the tensors' device (nothing read back): a ``[B, T]`` selection's counts in
    the order of :data:`LOSS_COUNTS`; the selected tokens outside ``response_mask`` are not counted.
    Summed over micro-batches or processes, they are the counts of the whole; :func:`counted_weight`
    reads a micro-batch's weight from them."""
    selected = selected.bool() & response_mask.bool()
    # filled on the device: torch.tensor(B, device=cuda) copies host memory without non_blocking, a
    # cudaStreamSynchronize (TRL's ours_weights once a micro-batch, verl's scales once a micro-batch more)
    rows = torch.full((), selected.shape[0], dtype=torch.int64, device=selected.device)
    return torch.stack([selected.sum(), response_mask.bool().sum(), selected.any(-1).sum(), rows])


def _weight_index(config: PolicyLossConfig) -> int:
    """Which of :data:`LOSS_COUNTS` is a micro-batch's aggregation weight under ``config``."""
    if config.aggregation == "token_mean":
        return LOSS_COUNTS.index("response" if config.denominator == "all" else "selected")
    if config.aggregation == "seq_mean_token_mean" and config.denominator != "all":
        return LOSS_COUNTS.index("rows_selected")
    return LOSS_COUNTS.index("rows")


def counted_weight(counts: Sequence[float], config: PolicyLossConfig) -> float:
    """The weight of one micro-batch's aggregated loss in its mini-batch's, so that
    ``sum_m w_m * loss_m / sum_m w_m`` is the loss of the whole mini-batch, from its
    :func:`loss_counts` read back: its counted tokens (``token_mean``: selected, or response tokens
    with ``denominator="all"``, selected or not), its sequences with a selected token
    (``seq_mean_token_mean``; all its sequences with ``denominator="all"``), its sequences
    (``seq_mean_token_sum_norm``)."""
    return float(counts[_weight_index(config)])


def aggregation_weight(selected: Tensor, response_mask: Tensor, config: PolicyLossConfig) -> float:
    """:func:`counted_weight` of a ``[B, T]`` selection's :func:`loss_counts`: one value read back,
    none when the weight is the rows ``B`` (a shape)."""
    index = _weight_index(config)
    if LOSS_COUNTS[index] == "rows":
        return float(selected.shape[0])
    return float(loss_counts(selected, response_mask)[index])


def mask_truncated_completions(response_mask: Tensor, finished: Tensor) -> Tensor:
    """TRL's ``mask_truncated_completions`` (DAPO): the ``[B, T]`` response mask with the rows of
    completions that did not end with EOS (``finished[b]`` False, i.e. cut off at the length cap)
    set to False, so those completions get no loss, are never selected and count in no
    denominator. ``finished``: ``[B]`` bool."""
    return response_mask & finished.to(device=response_mask.device, dtype=torch.bool).unsqueeze(-1)


def k3_kl(log_probs: Tensor, reference_log_probs: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(pi || ref): ``exp(ref - lp) - (ref - lp) - 1`` (>= 0)."""
    delta = (reference_log_probs - log_probs).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return delta.exp() - delta - 1.0


def kl_penalty_term(log_probs: Tensor, old_log_probs: Tensor, kl_penalty: Tensor) -> Tensor:
    """KL-Cov's per-token penalty ``kl_penalty_t * |log p_t - old log p_t|`` (``[B, T]``; the
    log-ratio clamped to +-20 as in the surrogate; ``old_log_probs`` detached). Part of the
    per-token policy loss of :func:`policy_loss`; the TRL integration adds the same term."""
    log_ratio = (log_probs - old_log_probs.detach()).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    return kl_penalty.to(log_probs.dtype) * log_ratio.abs()


def masked_sums(pairs: list[tuple[Tensor, Tensor]], scalars: tuple[Tensor, ...] = ()) -> Tensor:
    """On the device, float64 ``[2 P + S]``: the sum of each ``values`` over its bool ``mask``,
    then each mask's count, then each 0-d tensor of ``scalars`` (``P`` pairs, ``S`` scalars; at
    least one of either). :func:`means_of` turns its read-back into means. Pairs of one shape
    (a loss's metrics) are stacked to ``[P, n]`` and summed together: ``P`` casts and a few
    kernels in all, where one sum each took five launches a pair."""
    device = (pairs[0][0] if pairs else scalars[0]).device
    extra = [scalar.detach().double().to(device).reshape(1) for scalar in scalars]
    if not pairs:
        return torch.cat(extra)
    shape = pairs[0][1].shape
    if all(values.shape == mask.shape == shape for values, mask in pairs):
        masks = torch.stack([mask.bool() for _, mask in pairs]).flatten(1)  # [P, n]
        values = torch.stack([values.detach().double() for values, _ in pairs]).flatten(1)
        return torch.cat([torch.where(masks, values, 0.0).sum(1), masks.sum(1).double(), *extra])
    sums = [torch.where(mask, values.detach().double(), 0.0).sum().reshape(1) for values, mask in pairs]
    counts = [mask.sum().double().reshape(1) for _, mask in pairs]
    return torch.cat([*sums, *counts, *extra])


def means_of(numbers: list[float], num_pairs: int) -> list[float]:
    """:func:`masked_sums`'s values read back -> each pair's mean (NaN for an empty mask), then
    the scalars."""
    sums, counts = numbers[:num_pairs], numbers[num_pairs:2 * num_pairs]
    return [total / count if count else math.nan for total, count in zip(sums, counts)] + numbers[2 * num_pairs:]


def masked_means(pairs: list[tuple[Tensor, Tensor]], scalars: tuple[Tensor, ...] = ()) -> list[float]:
    """The float64 mean of each ``values`` over its bool ``mask`` (NaN for an empty mask), then the
    value of each 0-d tensor of ``scalars``, with one host synchronisation for all of them (one
    ``.item()`` each would stall a GPU's queue once per metric)."""
    if not pairs and not scalars:
        return []
    return means_of(masked_sums(pairs, scalars).tolist(), len(pairs))


class LossMetrics(Mapping[str, float]):
    """:func:`policy_loss`'s metrics, a read-only mapping of floats. Their values are computed on
    the device with the loss, and read back (one host synchronisation for all) when one is first
    read: a loss backpropagated before its metrics are read keeps a GPU's queue running from the
    forward into the backward."""

    def __init__(self, numbers: Tensor, assemble: Callable[[list[float]], dict[str, float]]) -> None:
        self._numbers: Tensor | None = numbers
        self._assemble = assemble
        self._values: dict[str, float] | None = None

    def _read(self) -> dict[str, float]:
        if self._values is None:
            assert self._numbers is not None
            self._values = self._assemble(self._numbers.tolist())  # the host synchronisation
            self._numbers = None
        return self._values

    def __getitem__(self, name: str) -> float:
        return self._read()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._read())

    def __len__(self) -> int:
        return len(self._read())

    def __repr__(self) -> str:
        return f"LossMetrics({self._read()!r})"


def loss_gradient_mask(response_mask: Tensor, advantages: Tensor, config: PolicyLossConfig,
                       selected_mask: Tensor | None = None, kl_penalty: Tensor | None = None) -> Tensor | None:
    """The positions whose log-prob :func:`policy_loss` can give a nonzero gradient, known before
    the statistics (bool ``[B, T]``; their ``gradient_mask``, so their backward reads nothing back):
    the response positions of ``selected_mask`` (None: every one, GRPO's selection) whose advantage
    (``[B]`` or ``[B, T]``) is not zero or whose ``kl_penalty`` is (elsewhere the surrogate's
    per-token loss is ``ratio * 0`` and the penalty ``0 * |log-ratio|``). None, every position,
    when ``config`` has a KL or entropy term: they reach a regularized token whatever its advantage.
    A NaN advantage counts as nonzero (its NaN reaches the gradient, as without the mask)."""
    if config.kl_coef > 0 or config.entropy_coef > 0:
        return None
    response = response_mask.bool()
    check_token_shapes(response.shape, {"selected_mask": selected_mask, "kl_penalty": kl_penalty},
                       advantages=advantages)
    moving = (advantages if advantages.dim() == 2 else advantages.unsqueeze(-1)) != 0
    if kl_penalty is not None:
        moving = moving | (kl_penalty != 0)
    mask = response & moving
    return mask if selected_mask is None else mask & selected_mask.bool()


def policy_loss(
    stats: TokenStatistics,
    old_log_probs: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    selected_mask: Tensor,
    config: PolicyLossConfig | None = None,
    reference_log_probs: Tensor | None = None,
    kl_penalty: Tensor | None = None,
) -> tuple[Tensor, LossMetrics]:
    """Clipped surrogate on the selected tokens; returns ``(loss, metrics)``.

    ``stats.log_probs``/``old_log_probs`` are ``[B, T]``; ``advantages`` is ``[B]`` (one per
    completion) or ``[B, T]``. Metrics (floats; NaN when undefined): ``selected_fraction``,
    ``clip_fraction`` (selected tokens whose clipped term is the active one), ``entropy``,
    ``entropy_selected``, ``renyi2``, ``renyi2_selected``, ``js_score``/``js_score_selected``
    (of the first computed reference) and ``js_<reference>``/``js_<reference>_selected`` for each,
    ``kl`` (k3 to the reference, NaN without one), ``kl_old`` (k3 to the old policy),
    ``policy_loss``; read back from the device when first read (:class:`LossMetrics`).
    """
    config = config or PolicyLossConfig()
    # at least float32 (the gradient flows through the cast): bf16 log-probs (verl's, from bf16
    # logits without flash-attn's cross-entropy) would round the advantages to bf16 otherwise
    log_probs = stats.log_probs.to(torch.promote_types(stats.log_probs.dtype, torch.float32))
    _check_shapes(log_probs, old_log_probs, advantages, response_mask, selected_mask, reference_log_probs,
                  kl_penalty)
    response = response_mask.bool()
    selected = selected_mask.bool() & response
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    # the tokens the surrogate leaves out read a ratio of 1 and no advantage, whatever their inputs
    # hold (NaN at padding would otherwise reach the loss and the gradient through 0 * NaN)
    advantages = torch.where(selected, advantages.to(log_probs.dtype), 0.0)
    old_log_probs = torch.where(response, old_log_probs.detach(), log_probs.detach())
    kept_old = torch.where(selected, old_log_probs, log_probs.detach())

    log_ratio = (log_probs - kept_old).clamp(-_MAX_LOG_RATIO, _MAX_LOG_RATIO)
    ratio = log_ratio.exp()
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - config.clip_low, 1.0 + config.clip_high) * advantages
    per_token = -torch.minimum(unclipped, clipped)
    if config.clip_ratio_c is not None:
        per_token = torch.where(advantages < 0, torch.minimum(per_token, -advantages * config.clip_ratio_c), per_token)
    if kl_penalty is not None:
        per_token = per_token + kl_penalty_term(log_probs, kept_old, torch.where(selected, kl_penalty, 0.0))
    counted = response if config.denominator == "all" else selected
    surrogate = aggregate(per_token, selected, config.aggregation, config.max_response_length, counted,
                          every_row=config.denominator == "all")
    loss = surrogate
    regularized = response if config.regularizer_tokens == "all" else selected

    def regularizer(values: Tensor) -> Tensor:
        return aggregate(values, regularized, config.aggregation, config.max_response_length,
                         response if config.regularizer_tokens == "all" else counted,
                         every_row="all" in (config.regularizer_tokens, config.denominator))

    kl = None
    if reference_log_probs is not None:
        # like the old log-probs: outside the response (the metric) and outside the regularized
        # tokens (the loss) the reference reads the policy's own log-prob, so NaN there stays out
        # of both, and of the gradient (0 * NaN)
        reference_log_probs = reference_log_probs.detach()
        kl = k3_kl(log_probs.detach(), torch.where(response, reference_log_probs, log_probs.detach()))
        if config.kl_coef > 0:
            loss = loss + config.kl_coef * regularizer(
                k3_kl(log_probs, torch.where(regularized, reference_log_probs, log_probs.detach())))
    elif config.kl_coef > 0:
        raise ValueError("kl_coef > 0 needs reference_log_probs")
    if config.entropy_coef > 0:
        if not stats.entropy.requires_grad:
            raise ValueError("entropy_coef > 0 needs token_statistics(..., differentiable_entropy=True)")
        loss = loss - config.entropy_coef * regularizer(stats.entropy)

    metrics = _loss_metrics(stats, response, selected, clipped < unclipped, kl, old_log_probs, surrogate)
    return loss, metrics


def _check_shapes(log_probs: Tensor, old_log_probs: Tensor, advantages: Tensor, response_mask: Tensor,
                  selected_mask: Tensor, reference_log_probs: Tensor | None, kl_penalty: Tensor | None) -> None:
    """One-line ValueError unless every ``[B, T]`` input has the shape of the log-probs and the
    advantages are ``[B]`` or ``[B, T]`` (nothing broadcast)."""
    if log_probs.dim() != 2:
        raise ValueError(f"log_probs must be [B, T], got {tuple(log_probs.shape)}")
    check_token_shapes(log_probs.shape, {
        "old_log_probs": old_log_probs, "response_mask": response_mask, "selected_mask": selected_mask,
        "reference_log_probs": reference_log_probs, "kl_penalty": kl_penalty}, advantages=advantages)


@torch.no_grad()
def _loss_metrics(stats: TokenStatistics, response: Tensor, selected: Tensor, clipped: Tensor,
                  kl: Tensor | None, old_log_probs: Tensor, surrogate: Tensor) -> LossMetrics:
    """`policy_loss`'s metrics: token means over the response or the selected tokens, summed on
    the device now and read back when first read (:class:`LossMetrics`)."""
    pairs: dict[str, tuple[Tensor, Tensor]] = {
        "selected_fraction": (selected.double(), response),
        "clip_fraction": (clipped, selected),
        "entropy": (stats.entropy, response),
        "entropy_selected": (stats.entropy, selected),
        "renyi2": (stats.renyi2, response),
        "renyi2_selected": (stats.renyi2, selected),
        "kl_old": (k3_kl(stats.log_probs, old_log_probs), response),
    }
    if kl is not None:
        pairs["kl"] = (kl, response)
    for name, scores in stats.js_scores.items():
        pairs[f"js_{name}"] = (scores, response)
        pairs[f"js_{name}_selected"] = (scores, selected)
    js_names = tuple(stats.js_scores)
    return LossMetrics(masked_sums(list(pairs.values()), (surrogate,)),
                       lambda numbers: _assemble_metrics(means_of(numbers, len(pairs)), tuple(pairs), js_names))


def _assemble_metrics(values: list[float], names: tuple[str, ...], js_names: tuple[str, ...]) -> dict[str, float]:
    """`_loss_metrics`' means (one per name of ``names``, then the surrogate) -> the metrics."""
    *means, surrogate_value = values
    found = dict(zip(names, means))
    first = js_names[0] if js_names else None
    metrics: dict[str, float] = {
        name: found[name] for name in ("selected_fraction", "clip_fraction", "entropy", "entropy_selected",
                                       "renyi2", "renyi2_selected")}
    metrics["js_score"] = math.nan if first is None else found[f"js_{first}"]
    metrics["js_score_selected"] = math.nan if first is None else found[f"js_{first}_selected"]
    metrics["kl"] = found.get("kl", math.nan)
    metrics["kl_old"] = found["kl_old"]
    metrics["policy_loss"] = surrogate_value
    for name in js_names:
        metrics[f"js_{name}"] = found[f"js_{name}"]
        metrics[f"js_{name}_selected"] = found[f"js_{name}_selected"]
    return metrics

"""Token selectors: which response tokens the policy-gradient loss updates.

A selector is a named function ``fn(inputs: SelectionInputs, **options)`` returning a boolean
``[B, T]`` mask, a subset of the response mask, of the tokens the policy-gradient loss updates (or
a :class:`Selection` that also carries a per-token KL penalty). Selectors live in a registry
(:mod:`ict.core.selector_registry`, whose names this module re-exports), the one place that
declares each selector's options, defaults, presets and ranking population; register your own with
:func:`register_selector` (e.g. in a module loaded by :func:`load_plugin`).

Built in (defaults in brackets):

- ``all``: every response token (GRPO).
- ``entropy`` [ratio=0.2]: the ``k = ceil(ratio * N)`` highest-entropy response tokens, ranked
  over the whole batch (20-Entropy, arXiv 2506.01939, ``get_global_entropy_top_mask``).
- ``stapo`` [tau_p=0.002, quantile=0.75]: every response token except the silenced ones, those
  with advantage > 0, sampled probability < tau_p and entropy strictly below the ``quantile``
  of the entropies of exactly those positive-advantage low-probability tokens (STAPO,
  arXiv 2602.15620; linear-interpolation quantile as ``torch.quantile``, at any number of
  tokens). A NaN-entropy token is never silenced and does not enter the quantile.
- ``ict`` [ratio=0.1, reference=ICT_DEFAULT_REFERENCE, unit="position", scope="sequence"]: the top
  ``ratio`` by Jensen-Shannon score (ICT, arXiv 2606.19771). The group references
  (``group_mean_absorbing``, ``group_mean_loo``, ``group_mean_loo_absorbing`` and the alive-only
  ``group_mean`` of the first comparison; see :mod:`ict.core.stats`) are readings of the paper's
  score, JS to the mean distribution of the prompt's G completions at the same position
  (``METHOD.md`` section 2); ``seq_mean``, ``prev`` and ``ref`` are ablations.
  ``unit="position"`` ranks positions; ``unit="token_id"`` (our variant, not the
  paper's) ranks the unique sampled token ids by their mean score, keeps the top
  ``ceil(ratio * U)`` of the ``U`` unique ids and selects every response position holding one
  of them. Preset ``paper``: per-sequence percentile and the ``seq_mean_token_mean`` loss.
  Option ``metric`` [``"js"``] (an ablation; :data:`ict.core.stats.SCORE_METRICS`): the score
  that ranks, ``"js"`` (Jensen-Shannon, in [0, ln 2] nats), ``"kl"`` (``KL(p || q)`` in nats,
  ``log q`` clamped at float32's smallest normal: in [0, 87.3]) or ``"wasserstein"`` (the
  1-Wasserstein distance under the 0-1 ground metric on the vocabulary, which is the total
  variation ``1/2 sum_v |p_v - q_v|``, in [0, 1]); it reads ``js_scores[score_key(reference,
  metric)]``. Option ``complement`` [False] (the paper's "90%-frequent" ablation): select
  exactly the response tokens that the top-``ratio`` selection leaves out (the other ~90% at
  ratio 0.1); it reports no tie-decided tokens (which tied tokens it holds follows the top
  selection's draw).
- ``random`` [ratio=0.1, seed=None, scope="batch"]: a uniformly random ``ceil(ratio * N)``
  response tokens (the control at ICT's fraction). Uses ``inputs.generator`` if given, else a
  generator seeded with ``seed``, else torch's global generator. The trainers (``ict train``,
  TRL's, verl's) give one, seeded from (``seed`` if set, else the run's seed; the step; the call). Preset ``paper``: ICT's recipe
  with this random score (``scope="sequence"``, ``seq_mean_token_mean``, 10 warm-up steps).
  It reports no tie-decided tokens (random scores within the tolerance are drawn as the rest).
- ``clip_cov`` [ratio=2e-4, cov_low=1.0, cov_high=5.0] (Clip-Cov, arXiv 2505.22617): every
  response token except ``max(1, int(ratio * N))`` drawn at random among those whose centred
  covariance ``Cov_t = (log p_t - mean log p) (A_t - mean A)`` lies strictly between
  ``cov_low`` and ``cov_high`` (and that the ratio clip does not already clip): their gradient
  is cut.
- ``kl_cov`` [ratio=2e-3, kl_coef=1.0] (KL-Cov, arXiv 2505.22617): every response token; the
  ``max(1, int(ratio * N))`` tokens with the largest ``Cov_t`` (ties drawn as the top-``ratio``
  selectors' below, favouring no position) also get
  ``kl_coef * |log p - log p_old|`` added to their loss (``Selection.kl_penalty``). The
  paper's 7B setting (its 32B setting uses ratio 2e-4). verl's ``kl_cov`` loss has no ratio clip;
  ours keeps the loss's clip (identical when each batch is used for one update).
  For both, a token whose log-prob or advantage is not finite has no ``Cov_t`` (NaN): it stays
  out of the means, is never cut or penalised (it reaches the loss, as with STAPO) and still
  counts in ``N``, so the other tokens' covariances are those computed without it.

Scopes (ranking populations): ``"batch"`` ranks all response tokens of the inputs together (the
whole rollout batch of the step, or the mini-batch when a batch is split into several optimizer
steps: the trainer hands a selector its whole population), ``"group"`` ranks the G completions of
each prompt together (``inputs.group_ids``), ``"sequence"`` ranks each sequence alone.
:func:`ranking_population` says which rows a selector must see at once.

Counting rules shared by every top-``ratio`` selector: ``N`` response tokens give
``k = ceil(ratio * N)`` (the product is rounded to 9 decimals first, so ``0.07 * 100`` is 7,
not 8; one above 10^6 to float64's precision, ``2^-51`` of it); so at least one token is
selected whenever ``N > 0``, none when ``N = 0``, all when ``ratio = 1``. A ratio outside
(0, 1] is an error. Ties favour no position: with ``s_k`` the ``k``-th largest score, every
token scoring above ``s_k + tol`` is selected and the remaining slots go to tokens drawn
uniformly at random among those within ``tol`` of ``s_k`` (``tol`` =
:data:`TIE_TOLERANCE`, absolute, in the score's unit): those of the smallest keys, one uniform
float64 key per token (per id for ``unit=token_id``) drawn from ``inputs.generator`` (without
one, a generator seeded with 0) for every ranking, whether it has a tie or not, so that the
selection never reads back from the device whether it draws. When more tokens than slots lie
within ``tol``, the tokens drawn are *decided by a tie* (``Selection.tie_decided``); a score that
saturates shows up there. The draw is the same on every process given the same generator state.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ict.core.errors import is_integer
from ict.core.ranking import (  # noqa: F401 (the ranking's names are also this module's API)
    SCOPES,
    TIE_TOLERANCE,
    Selection,
    check_ratio,
    population_rows,
    selection_count,
    top_count,
    top_counts,
    top_fraction_mask,
    top_fraction_selection,
    top_unique_token_selection,
)
from ict.core.selector_registry import (  # noqa: F401 (the registry's names are also this module's API)
    METHOD_ALIASES,
    POPULATIONS,
    SELECTORS,
    TRAIN_OPTION_DEFAULTS,
    Preset,
    SelectionInputs,
    Selector,
    SelectorFunction,
    check_options,
    get_preset,
    load_plugin,
    method_train_options,
    parse_selector_options,
    ranking_population,
    register_selector,
    required_js_references,
    resolve_options,
    select,
    select_tokens,
)
from ict.core.stats import score_key


@register_selector("all")
def select_all(inputs: SelectionInputs) -> Tensor:
    """GRPO: every response token."""
    return inputs.response_mask.bool().clone()


@register_selector("entropy", defaults={"ratio": 0.2}, population="batch")
def select_top_entropy(inputs: SelectionInputs, ratio: float) -> Selection:
    """20-Entropy: the ``ceil(ratio * N)`` highest-entropy response tokens of the batch."""
    return top_fraction_selection(inputs.stats.entropy, inputs.response_mask, ratio, "batch",
                                  generator=inputs.generator)


def _token_advantages(inputs: SelectionInputs) -> Tensor:
    if inputs.advantages is None:
        raise ValueError("this selector needs advantages in SelectionInputs")
    advantages = inputs.advantages
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(-1)
    return advantages.expand_as(inputs.response_mask)


def linear_quantile(values: Tensor, q: float) -> Tensor:
    """The ``q`` quantile (``q`` in [0, 1]) of the ``n >= 1`` values of ``values`` (1-D, no NaN), a
    0-d tensor in its dtype: ``torch.quantile``'s linear interpolation, ``lerp(v_(i), v_(j), r - i)``
    of the ascending values at ``i = floor(r)``, ``j = ceil(r)`` with ``r = q (n - 1)``, from one
    sort as ``torch.quantile``'s own (CUDA's ``kthvalue`` is slower than a sort), at any ``n``
    (``torch.quantile`` refuses more than 2^24 values)."""
    rank = q * (values.numel() - 1)
    ordered = values.sort().values
    below = int(rank)  # rank >= 0: int is floor
    return torch.lerp(ordered[below], ordered[math.ceil(rank)], rank - below)


def stapo_silenced_mask(
    log_probs: Tensor, entropy: Tensor, advantages: Tensor, response_mask: Tensor, tau_p: float, quantile: float
) -> Tensor:
    """STAPO's spurious tokens: A > 0, p(token) < tau_p, entropy < quantile of those tokens' entropies.

    A token whose entropy (or log-prob) is NaN is never a candidate: it is kept (so a non-finite
    statistic reaches the loss, as with the ranking selectors) and does not enter the quantile,
    so the other tokens get exactly the silencing they would get without it."""
    if not 0.0 <= quantile <= 1.0:
        raise ValueError(f"quantile must be in [0, 1], got {quantile}")
    # p in float64: a bf16 / fp16 probability would be rounded, and tau_p with it, to its 8 (11) bits
    candidates = (response_mask.bool() & (advantages > 0) & (log_probs.detach().double().exp() < tau_p)
                  & ~entropy.detach().isnan())
    if not candidates.any():
        return candidates
    threshold = linear_quantile(entropy.detach()[candidates].double(), quantile)
    return candidates & (entropy.double() < threshold)


@register_selector("stapo", defaults={"tau_p": 0.002, "quantile": 0.75}, population="batch",
                   ranges={"tau_p": (0.0, 1.0), "quantile": (0.0, 1.0)})
def select_stapo(inputs: SelectionInputs, tau_p: float, quantile: float) -> Tensor:
    """STAPO (S2T): every response token except the silenced spurious ones."""
    silenced = stapo_silenced_mask(
        inputs.stats.log_probs, inputs.stats.entropy, _token_advantages(inputs), inputs.response_mask, tau_p, quantile
    )
    return inputs.response_mask.bool() & ~silenced


def _js_score(inputs: SelectionInputs, key: str) -> Tensor:
    """The ``[B, T]`` scores ``inputs.stats.js_scores[key]`` (``key``: a score key,
    :func:`ict.core.stats.score_key`, e.g. ``"group_mean_absorbing"`` or ``"prev:kl"``)."""
    scores = inputs.stats.js_scores.get(key)
    if scores is None:
        from ict.core.stats import split_score_key

        split_score_key(key)  # an unknown reference or metric: its own one-line error, not "pass it"
        raise ValueError(
            f"JS scores for reference {key!r} were not computed; "
            f"pass js_references=({key!r},) to token_statistics"
        )
    return scores


ICT_DEFAULT_REFERENCE = "group_mean_absorbing"
"""ICT's default JS reference (``docs/method.md`` gives the measurement behind the choice)."""

# The paper's recipe (arXiv 2606.19771 as three public readings of its full text describe it):
# the mask is the top 10% of each response's own positions, the loss is Sparse-GRPO (its Eq. 11:
# the mean over responses of each response's mean over its selected tokens), and the first Theta
# steps update every token. Theta = 10, 20 and 40 converge alike there; the default is not
# stated, so 10 is our choice (the shortest the paper reports).
ICT_PAPER_SELECTOR_OPTIONS = {"ratio": 0.1, "reference": ICT_DEFAULT_REFERENCE, "unit": "position",
                              "scope": "sequence"}
ICT_PAPER_TRAIN_OPTIONS = {"aggregation": "seq_mean_token_mean", "full_token_warmup_steps": 10}

ICT_PRESETS = {
    "paper": Preset(
        selector_options=ICT_PAPER_SELECTOR_OPTIONS, train_options=ICT_PAPER_TRAIN_OPTIONS,
        note="the paper's recipe, ict's default: top 10% of each response by JS to the group "
        "mean, Sparse-GRPO aggregation (seq_mean_token_mean), a 10-step full-token warm-up"),
    "batch": Preset(
        selector_options={"scope": "batch"},
        train_options={"aggregation": "token_mean", "full_token_warmup_steps": 0},
        note="ict's default before the paper's recipe (the second comparison, results/cpu-v2): "
        "top 10% of the whole batch, token_mean loss, no warm-up"),
}


@register_selector(
    "ict",
    defaults={**ICT_PAPER_SELECTOR_OPTIONS, "metric": "js", "complement": False},
    js_references=lambda options: (score_key(options["reference"], options["metric"]),),
    population=lambda options: options["scope"],
    presets=ICT_PRESETS,
    train_defaults=ICT_PAPER_TRAIN_OPTIONS,
)
def select_ict(inputs: SelectionInputs, ratio: float, reference: str, unit: str, scope: str,
               metric: str = "js", complement: bool = False) -> Selection:
    """ICT: the top ``ratio`` of response tokens by Jensen-Shannon score (default: to the group mean).

    ``metric`` picks the score (``js``, ``kl`` or ``wasserstein`` = total variation; see the
    module docstring); ``complement`` selects the response tokens the top ``ratio`` leaves out
    (no tie-decided tokens reported)."""
    scores = _js_score(inputs, score_key(reference, metric))
    if unit == "position":
        selection = top_fraction_selection(scores, inputs.response_mask, ratio, scope, inputs.group_ids,
                                           inputs.generator)
    elif unit == "token_id":
        if inputs.token_ids is None:
            raise ValueError("unit='token_id' needs token_ids in SelectionInputs")
        selection = top_unique_token_selection(scores, inputs.token_ids, inputs.response_mask, ratio, scope,
                                               inputs.group_ids, inputs.generator)
    else:
        raise ValueError(f"unit must be 'position' or 'token_id', got {unit!r}")
    if complement:
        rest = inputs.response_mask.bool() & ~selection.mask
        return Selection(mask=rest, tie_decided=torch.zeros_like(rest))
    return selection


# The random scores are drawn over the whole [B, T] at once, so the draw (and the mask) depends on
# which rows are present: the population is the batch whatever the ranking scope.
RANDOM_PRESETS = {
    "paper": Preset(
        selector_options={"scope": "sequence"}, train_options=ICT_PAPER_TRAIN_OPTIONS,
        note="ICT's recipe with a uniform random score: the top 10% of each response, the "
        "Sparse-GRPO aggregation, the 10-step full-token warm-up; differs from ict only in the "
        "score (the control of the regime probe and the third comparison)"),
}


@register_selector("random", defaults={"ratio": 0.1, "seed": None, "scope": "batch"}, population="batch",
                   presets=RANDOM_PRESETS)
def select_random(inputs: SelectionInputs, ratio: float, seed: int | None, scope: str) -> Selection:
    """Control: a uniformly random ``ceil(ratio * N)`` of the response tokens."""
    if seed is not None and (not is_integer(seed) or not -(2**63) <= seed < 2**64):  # torch.Generator's range
        raise ValueError(f"random's seed must be an integer in [-2^63, 2^64) or none, got {seed!r}")
    generator = inputs.generator
    if generator is None and seed is not None:
        generator = torch.Generator(device=inputs.response_mask.device).manual_seed(int(seed))
    scores = torch.rand(
        inputs.response_mask.shape, generator=generator, device=inputs.response_mask.device
    )
    mask = top_fraction_selection(scores, inputs.response_mask, ratio, scope, inputs.group_ids, generator).mask
    # random scores within the tie tolerance are a random draw like the rest: no tie decides anything
    return Selection(mask=mask, tie_decided=torch.zeros_like(mask))


def token_covariance(log_probs: Tensor, advantages: Tensor, response_mask: Tensor) -> Tensor:
    """``Cov_t = (log p_t - mean log p) * (A_t - mean A)`` with means over the response tokens
    (arXiv 2505.22617, eq. for the centred cross-product); ``[B, T]`` float64, 0 outside.

    A response token whose log-prob or advantage is not finite is NaN and stays out of both
    means, so one such token cannot turn every other token's covariance into NaN."""
    mask = response_mask.bool()
    log_p = log_probs.detach().double()
    adv = advantages.double()
    valid = mask & log_p.isfinite() & adv.isfinite()
    count = valid.sum().clamp(min=1)
    centred_log_p = log_p - log_p[valid].sum() / count
    centred_adv = adv - adv[valid].sum() / count
    outside = torch.where(mask, torch.full_like(log_p, math.nan), torch.zeros_like(log_p))
    return torch.where(valid, centred_log_p * centred_adv, outside)


def _cov_count(ratio: float, num_tokens: int) -> int:
    """``max(1, int(ratio * N))`` tokens (verl's and the paper's count), 0 when ``N = 0``."""
    return max(1, int(check_ratio(ratio) * num_tokens)) if num_tokens else 0


@register_selector("clip_cov", defaults={"ratio": 2e-4, "cov_low": 1.0, "cov_high": 5.0}, population="batch")
def select_clip_cov(inputs: SelectionInputs, ratio: float, cov_low: float, cov_high: float) -> Tensor:
    """Clip-Cov: cut the gradient of a random few tokens with covariance in (cov_low, cov_high)."""
    if not cov_low < cov_high:  # an empty band would silently cut nothing
        raise ValueError(f"clip_cov needs cov_low < cov_high, got cov_low={cov_low}, cov_high={cov_high}")
    response = inputs.response_mask.bool()
    advantages = _token_advantages(inputs)
    covariance = token_covariance(inputs.stats.log_probs, advantages, response)
    candidates = response & (covariance > cov_low) & (covariance < cov_high)
    if inputs.old_log_probs is not None and inputs.clip_range is not None:
        # the loss's ratio, at least float32 (bf16 log-probs would round r and 1 + clip_high together)
        dtype = torch.promote_types(inputs.stats.log_probs.dtype, torch.float32)
        ratio_now = (inputs.stats.log_probs.detach().to(dtype) - inputs.old_log_probs.detach().to(dtype)).exp()
        low, high = inputs.clip_range
        unclipped = -advantages * ratio_now
        clipped = -advantages * ratio_now.clamp(1.0 - low, 1.0 + high)
        candidates &= ~(clipped > unclipped)  # tokens the ratio clip already clips keep it
    batch_index, time_index = candidates.nonzero(as_tuple=True)
    count = min(_cov_count(ratio, int(response.sum())), batch_index.numel())
    keep = response.clone()
    if count:
        order = torch.randperm(batch_index.numel(), generator=inputs.generator, device=batch_index.device)
        chosen = order[:count]
        keep[batch_index[chosen], time_index[chosen]] = False
    return keep


@register_selector("kl_cov", defaults={"ratio": 2e-3, "kl_coef": 1.0}, population="batch",
                   ranges={"kl_coef": (0.0, math.inf)})
def select_kl_cov(inputs: SelectionInputs, ratio: float, kl_coef: float) -> Selection:
    """KL-Cov: every token; a |log-ratio| penalty on the tokens of largest covariance."""
    response = inputs.response_mask.bool()
    covariance = token_covariance(inputs.stats.log_probs, _token_advantages(inputs), response)
    ranked = (response & ~covariance.isnan()).reshape(1, -1)
    count = torch.clamp_max(ranked.sum(dim=-1), _cov_count(ratio, int(response.sum())))  # [1], on the device
    largest, _ = top_counts(covariance.reshape(1, -1), ranked, count, inputs.generator)  # ties drawn, as a ranking's
    penalty = torch.where(largest.view_as(response), float(kl_coef), 0.0).float()
    return Selection(mask=response.clone(), kl_penalty=penalty)

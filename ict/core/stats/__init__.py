"""Token statistics of a policy's next-token distributions: pure tensor math, no models.

For every response position t with temperature-scaled distribution
``p_t = softmax(logits_t / temperature)`` over the vocabulary V:

- ``log_probs[t]  = log p_t(token_t)``                  (differentiable; the loss uses it)
- ``entropy[t]    = H(p_t)  = -sum_v p_tv log p_tv``     (Shannon, nats)
- ``renyi2[t]     = H2(p_t) = -log sum_v p_tv^2``        (second-order Renyi, nats; H2 <= H)
- ``js_scores[r][t] = JS(p_t || q_t) = H(m) - H(p_t)/2 - H(q_t)/2``, ``m = (p_t + q_t)/2``,
  in [0, ln 2], for the references ``r``:

  - ``group_mean`` and its variants (ICT's reference, arXiv 2606.19771): ``q_{i,t}`` = a mean
    of the distributions of the rows ``j`` of the same group (equal ``group_ids``: the G
    completions of one prompt) at the same position ``t`` (index along T). Which rows count:

    - ``group_mean`` (alive-only, this project's first reading; kept so that earlier runs
      reproduce): the rows that have a response token at ``t``, row ``i`` included. Its JS is
      capped by the number ``n`` of rows alive (``h((n+1)/2n) - h(1/n)/2``, 0 for ``n = 1``);
    - ``group_mean_absorbing``: the rows alive at ``t`` plus, for every *finished* row of the
      group whose last response position is before ``t``, a point mass on its *end token*, row
      ``i`` included: the mean is over all G rows when none is truncated (the paper's
      ``1/G sum_j``);
    - ``group_mean_loo``: the rows alive at ``t`` other than ``i`` (leave-one-out);
    - ``group_mean_loo_absorbing``: the alive rows and the absorbed point masses other than
      row ``i``'s own.

    A row is *finished* when its completion ended by itself (e.g. on EOS) rather than at the
    length cap; its *end token* is the token at its last response position (``token_ids[i, e]``
    with ``e = max{t : response_mask[i, t]}``, e.g. EOS); a truncated row is not finished and,
    like a row with no response token, contributes nothing after its last position. By default
    (``finished=None``) a row is finished when its last response position is before the last
    column ``T - 1``: exact when responses are right-padded to the longest one of the batch and
    truncated rows reach the cap (our trainer); pass ``finished [B]`` otherwise (the TRL and verl
    integrations do: a tool result masked at the end; TRL's ``pad_to_multiple_of``). A
    row with no other contributor at ``t`` (a group of one, the last row alive) scores 0;
  - ``seq_mean``: ``q_t`` = mean of ``p`` over the response positions of the same sequence;
  - ``prev``: ``q_t = p_{t'}`` with ``t'`` the previous response position of the same sequence;
    the first response position of a sequence has no predecessor and scores 0 (it is compared
    with itself);
  - ``ref``: ``q_t`` = the reference model's distribution at the same position (its logits given).

Score metrics (ablations of the JS score, for the same references; :data:`SCORE_METRICS`). A
score is asked for by its key (:func:`score_key`): the bare reference name for JS (so
``js_scores["group_mean_absorbing"]`` is JS, as it always was), ``"<reference>:<metric>"``
otherwise (``js_scores["group_mean_absorbing:kl"]``). Every metric scores 0 where JS is set to 0
(no other contributor, the first ``prev`` position):

- ``js``: the Jensen-Shannon divergence above, in [0, ln 2] nats;
- ``kl``: ``KL(p_t || q_t) = sum_v p_tv log p_tv - sum_v p_tv log max(q_tv, tiny)`` in nats,
  ``tiny`` = float32's smallest normal number (1.2e-38), so the score is finite, in
  [0, -log tiny = 87.3]. Only where ``q_tv = 0 < p_tv`` does the clamp matter (KL would be
  ``+inf``): never for ``group_mean``, ``group_mean_absorbing`` and ``seq_mean``, whose ``q``
  contains ``p`` itself; possible for the leave-one-out variants, ``prev`` and ``ref`` (e.g.
  masked vocabulary entries, or others that are only absorbed point masses). For the
  leave-one-out variants the mean of the others is then summed directly (not as the group sum
  minus the row, whose rounding would hide ``q_tv = 0`` and spoil ``log q`` where ``q << p``);
- ``wasserstein``: the 1-Wasserstein (earth mover's) distance between ``p_t`` and ``q_t`` with
  the 0-1 ground metric on the vocabulary (moving mass between two distinct tokens costs 1),
  which is exactly the total variation distance ``TV = 1/2 sum_v |p_tv - q_tv|``, in [0, 1].

Shapes: ``logits [B, T, V]`` (float32 or bfloat16) where ``logits[:, t]`` is the distribution
that produced ``token_ids[:, t]`` (the caller shifts), ``token_ids [B, T]``,
``response_mask [B, T]``. Every output is ``[B, T]`` float32 and 0 outside the response mask.

Tiles (:mod:`ict.core.stats.tiles`): everything is computed in float32 over token x
vocabulary tiles (``tile_size = (tokens, vocab)``, default :func:`default_tile_size`: follows the
device), so no ``[B, T, V]`` softmax copy is ever built, forward or backward, and from hidden
states no ``[B, T, V]`` logits either. One vocabulary pass folds each tile into online
log-sum-exp statistics (log-probs, Shannon and Renyi-2 entropy); one more scores every JS
reference asked for (every group variant from the same tiles; ``seq_mean``'s mean is known only
after it, so it takes a third); the backward recomputes each tile of the rows that have a
gradient (a row whose loss gradient is zero, e.g. one ICT did not select, is skipped). Two
backends run the same algorithm: Triton kernels on GPUs, torch elsewhere (``backend``;
:func:`resolve_backend`).
Each row must have at least one logit that stays finite once divided by the temperature; ``-inf``
or ``finfo.min`` entries (masked vocabulary) are fine, but at ``temperature < 1`` a row whose every
logit is ``finfo.min`` overflows to ``-inf`` everywhere and its statistics are NaN.
Nothing checks for NaN or ``+inf`` logits (that would cost a device sync): such a row's statistics
are NaN, and so is every reference that averages its distribution (its group's mean at that
position, its sequence's ``seq_mean``, the next position's ``prev``); the selectors rank NaN
scores first.
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from ict.core.errors import is_finite_number
from ict.core.stats.heads import LinearHead, LogitsHead
from ict.core.stats.rows import response_ends
from ict.core.stats.scores import (
    GROUP_MEAN_VARIANTS,
    JS_REFERENCES,
    LN2,
    SCORE_METRICS,
    TokenStatistics,
    check_token_shapes,
    needs_groups,
    needs_reference_logits,
    score_key,
    split_score_key,
)
from ict.core.stats.tiles import (
    BACKENDS,
    TileSize,
    default_tile_size,
    parse_tile_size,
    resolve_backend,
    scores_given_normalisers,
    statistics,
)

# Below it logits / temperature overflow float32 for logits of order 1e3 and every statistic is NaN
# (sampling that cold is greedy decoding in all but name).
MIN_TEMPERATURE = 1e-6

__all__ = [
    "BACKENDS", "GROUP_MEAN_VARIANTS", "JS_REFERENCES", "LN2", "MIN_TEMPERATURE", "SCORE_METRICS", "TileSize", "TokenStatistics",
    "check_token_shapes", "default_tile_size", "needs_groups", "needs_reference_logits", "parse_tile_size", "resolve_backend",
    "response_ends", "score_key", "scores_from_hidden_given_normalisers", "split_score_key", "token_statistics",
    "token_statistics_from_hidden",
]


def _distinct_references(js_references: Sequence[str]) -> tuple[str, ...]:
    """The score keys asked for, each once, in order; a bare string is a one-line ValueError (it
    would be read letter by letter)."""
    if isinstance(js_references, str):
        raise ValueError(f"js_references must be a sequence of score keys, e.g. ({js_references!r},), "
                         f"not the string {js_references!r}")
    keys = tuple(js_references) if isinstance(js_references, Iterable) else None
    if keys is None or not all(isinstance(key, str) for key in keys):
        raise ValueError(f"js_references must be a sequence of score keys (strings), got {js_references!r}")
    return tuple(dict.fromkeys(keys))


def _check_floating(**tensors: Tensor | None) -> None:
    """One-line ValueError for a tensor that is not floating-point (integer hidden states would make
    the compute dtype an integer; bool logits read as 0/1 by some kernels and not others)."""
    for name, tensor in tensors.items():
        if tensor is not None and not tensor.dtype.is_floating_point:
            raise ValueError(f"{name} must be a floating-point tensor, got {tensor.dtype}")


def _check_common(
    shape: tuple[int, int, int],
    token_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
    js_references: Sequence[str],
    group_ids: Tensor | None,
    finished: Tensor | None,
    gradient_mask: Tensor | None = None,
) -> None:
    if token_ids.shape != shape[:2] or response_mask.shape != shape[:2]:
        raise ValueError(
            f"token_ids {tuple(token_ids.shape)} and response_mask {tuple(response_mask.shape)} "
            f"must both be [B, T] = {tuple(shape[:2])}"
        )
    if shape[2] < 1:
        raise ValueError(f"the vocabulary must have at least one id, got V = {shape[2]}")
    if token_ids.dtype.is_floating_point or token_ids.dtype == torch.bool:
        raise ValueError(f"token_ids must be an integer tensor, got {token_ids.dtype}")
    if not is_finite_number(temperature) or not temperature >= MIN_TEMPERATURE:
        raise ValueError(f"temperature must be a finite number >= {MIN_TEMPERATURE:g}, got {temperature!r}")
    references = [split_score_key(name)[0] for name in js_references]  # raises for an unknown one
    grouped = [name for name in references if name in GROUP_MEAN_VARIANTS]
    if grouped and group_ids is None:
        raise ValueError(f"the {grouped[0]!r} JS reference needs group_ids [B] (equal ids = completions of one prompt)")
    check_token_shapes(shape[:2], {"gradient_mask": gradient_mask}, {"group_ids": group_ids, "finished": finished})


def token_statistics(
    logits: Tensor,
    token_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
    js_references: Sequence[str] = (),
    reference_logits: Tensor | None = None,
    differentiable_entropy: bool = False,
    tile_size: TileSize | None = None,
    backend: str | None = None,
    group_ids: Tensor | None = None,
    finished: Tensor | None = None,
    row_index: Tensor | None = None,
    gradient_mask: Tensor | None = None,
) -> TokenStatistics:
    """Compute :class:`TokenStatistics` for the response positions (see the module docstring).

    ``logits`` is ``[B, T, V]``, or ``[R, V]`` with ``row_index`` (long ``[B, T]``: the row of
    ``logits`` that holds position ``(b, t)``; only response positions are read, and one device
    sync checks that they lie in ``[0, R)``), e.g. verl's packed logits, scored where they lie
    without a ``[B, T, V]`` copy.

    ``log_probs`` carries gradients to ``logits``; ``entropy`` does too when
    ``differentiable_entropy`` (needed only for an entropy bonus). Everything else is computed
    without building a graph. ``tile_size`` = ``(tokens, vocab)`` (default:
    :func:`default_tile_size`); ``backend``: ``"triton"``, ``"torch"`` or None (:func:`resolve_backend`).
    ``group_ids`` (LongTensor ``[B]``, any values, rows of a group need not be contiguous) says
    which rows are the completions of one prompt; required for the ``group_mean`` references.
    ``finished`` (bool ``[B]``, optional): which rows ended by themselves, for the absorbing
    variants (default: inferred, see the module docstring). ``js_references`` are score keys
    (:func:`score_key`): a reference name for its JS score, ``"<reference>:kl"`` or
    ``"<reference>:wasserstein"`` for another metric; ``js_scores`` is keyed by them.

    ``gradient_mask`` (``[B, T]``, nonzero = may receive a gradient; optional): the positions
    whose ``log_probs`` (and differentiable ``entropy``) the loss can give a nonzero gradient, when
    the caller knows them before the loss, e.g. GRPO's response positions of nonzero advantage
    (:func:`ict.core.loss.loss_gradient_mask`). The backward then recomputes only their tiles and
    reads nothing back from the device; without it, it finds the rows whose gradient is not zero
    (one device sync). A gradient at a position outside the mask is dropped, so the mask must
    cover every position the loss differentiates.
    """
    js_references = _distinct_references(js_references)
    if row_index is not None:
        if logits.dim() != 2 or row_index.shape != token_ids.shape:
            raise ValueError(f"with row_index [B, T], logits must be [R, V]; got logits {tuple(logits.shape)}, "
                             f"row_index {tuple(row_index.shape)} and token_ids {tuple(token_ids.shape)}")
        if needs_reference_logits(js_references):
            raise ValueError("the 'ref' JS reference needs [B, T, V] logits, not row_index")
        if row_index.dtype not in (torch.int32, torch.int64):
            raise ValueError(f"row_index must be an int32 or int64 tensor, got {row_index.dtype}")
        _check_floating(logits=logits)
        shape = (*token_ids.shape, logits.shape[-1])
        _check_common(shape, token_ids, response_mask, temperature, js_references, group_ids, finished,
                      gradient_mask)
        rows = logits.shape[0]
        outside = ((row_index < 0) | (row_index >= rows)) & response_mask.bool().to(row_index.device)
        if bool(outside.any()):  # a device sync, on this path only: the kernels would read outside logits
            raise ValueError(f"row_index must be in [0, {rows}) (the rows of logits) at response positions; "
                             f"{int(outside.sum())} position(s) are not")
        return statistics(LogitsHead(logits, row_index), shape, token_ids, response_mask, temperature,
                          js_references, None, differentiable_entropy, tile_size, backend, group_ids, finished,
                          gradient_mask)
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, T, V], got shape {tuple(logits.shape)}")
    _check_floating(logits=logits)
    _check_common(tuple(logits.shape), token_ids, response_mask, temperature, js_references, group_ids, finished,
                  gradient_mask)
    reference_head = None
    if needs_reference_logits(js_references):
        if reference_logits is None:
            raise ValueError("the 'ref' JS reference needs reference_logits [B, T, V]")
        if reference_logits.shape != logits.shape:
            raise ValueError(
                f"reference_logits {tuple(reference_logits.shape)} must match logits {tuple(logits.shape)}"
            )
        _check_floating(reference_logits=reference_logits)
        reference_head = LogitsHead(reference_logits)
    return statistics(
        LogitsHead(logits), tuple(logits.shape), token_ids, response_mask, temperature, js_references,
        reference_head, differentiable_entropy, tile_size, backend, group_ids, finished, gradient_mask,
    )


def token_statistics_from_hidden(
    hidden: Tensor,
    lm_head_weight: Tensor,
    token_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
    js_references: Sequence[str] = (),
    group_ids: Tensor | None = None,
    lm_head_bias: Tensor | None = None,
    differentiable_entropy: bool = False,
    tile_size: TileSize | None = None,
    backend: str | None = None,
    finished: Tensor | None = None,
    gradient_mask: Tensor | None = None,
) -> TokenStatistics:
    """:func:`token_statistics` of ``logits = hidden @ lm_head_weight.T (+ lm_head_bias)`` without
    ever building the ``[B, T, V]`` logits, forward or backward.

    ``hidden [B, T, d]`` is the final hidden state whose logits at ``t`` produced
    ``token_ids[:, t]``; ``lm_head_weight [V, d]``; ``lm_head_bias [V]`` or None. The logits
    are computed one tile at a time (in the autocast dtype when autocast is on, else the dtype of
    ``hidden``; read as float32) by the same tile code as the logits path; the backward recomputes
    each tile of the rows with a gradient and accumulates ``grad_hidden``, ``grad_weight`` (and
    ``grad_bias``) in float32, so the extra memory is one tile (plus the torch folds' float32
    copies of it) and one ``[V, d]`` float32 weight gradient (when one token tile holds the rows
    with a gradient, the weight's gradient instead: each slice is written once, in its dtype).
    Every reference but ``ref`` is supported (``ref`` needs a second model's hidden states), with
    every metric. ``gradient_mask``: as :func:`token_statistics`'s. Do not modify the weight in
    place between the forward and the backward.
    """
    js_references = _distinct_references(js_references)
    head, shape = _checked_linear_head(hidden, lm_head_weight, lm_head_bias, token_ids, response_mask, temperature,
                                       js_references, group_ids, finished, gradient_mask)
    return statistics(head, shape, token_ids, response_mask, temperature, js_references, None,
                      differentiable_entropy, tile_size, backend, group_ids, finished, gradient_mask)


def _checked_linear_head(hidden: Tensor, lm_head_weight: Tensor, lm_head_bias: Tensor | None, token_ids: Tensor,
                         response_mask: Tensor, temperature: float, js_references: Sequence[str],
                         group_ids: Tensor | None, finished: Tensor | None, gradient_mask: Tensor | None = None,
                         ) -> tuple[LinearHead, tuple[int, int, int]]:
    """The head of the hidden-state functions and ``(B, T, V)``, after their checks (one line each)."""
    if hidden.dim() != 3 or lm_head_weight.dim() != 2 or hidden.shape[-1] != lm_head_weight.shape[-1]:
        raise ValueError(
            f"hidden must be [B, T, d] and lm_head_weight [V, d], got {tuple(hidden.shape)} and "
            f"{tuple(lm_head_weight.shape)}"
        )
    _check_floating(hidden=hidden, lm_head_weight=lm_head_weight, lm_head_bias=lm_head_bias)
    if lm_head_bias is not None and tuple(lm_head_bias.shape) != (lm_head_weight.shape[0],):
        raise ValueError(f"lm_head_bias must be [V] = [{lm_head_weight.shape[0]}], got {tuple(lm_head_bias.shape)}")
    shape = (hidden.shape[0], hidden.shape[1], lm_head_weight.shape[0])
    _check_common(shape, token_ids, response_mask, temperature, js_references, group_ids, finished, gradient_mask)
    if needs_reference_logits(js_references):
        raise ValueError("the 'ref' JS reference is not supported from hidden states; use token_statistics")
    return LinearHead(hidden, lm_head_weight, lm_head_bias), shape


def scores_from_hidden_given_normalisers(
    hidden: Tensor,
    lm_head_weight: Tensor,
    token_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
    js_references: Sequence[str],
    log_normaliser: Tensor,
    entropy: Tensor,
    group_ids: Tensor | None = None,
    lm_head_bias: Tensor | None = None,
    tile_size: TileSize | None = None,
    backend: str | None = None,
    finished: Tensor | None = None,
) -> tuple[dict[str, Tensor], Tensor, float]:
    """The ``js_scores`` and ``renyi2`` of :func:`token_statistics_from_hidden` when each position's
    log-normaliser ``log Z = logsumexp(logits / T)`` and entropy ``H(p)`` (``[B, T]`` each) are
    already known, e.g. from TRL's fused LM head: the score pass alone, one vocabulary pass instead
    of two (no gradient).

    Returns the scores (``[B, T]`` float32 each, keyed as ``js_scores``), Renyi-2 ``[B, T]`` and
    ``max_rows |sum_v p_v - 1|`` with ``p = exp(logits / T - log Z)`` from this head's own tiles:
    near float32 rounding (< 1e-5) when the given normalisers are those of these logits; a larger
    value means they were computed from other logits (e.g. another rounding of a bf16 matrix
    product), and the scores should be recomputed with :func:`token_statistics_from_hidden`.
    """
    js_references = _distinct_references(js_references)
    head, shape = _checked_linear_head(hidden, lm_head_weight, lm_head_bias, token_ids, response_mask, temperature,
                                       js_references, group_ids, finished)
    for name, tensor in (("log_normaliser", log_normaliser), ("entropy", entropy)):
        if tensor.shape != token_ids.shape:
            raise ValueError(f"{name} must be [B, T] = {tuple(token_ids.shape)}, got {tuple(tensor.shape)}")
    return scores_given_normalisers(head, shape, token_ids, response_mask, temperature, js_references,
                                    log_normaliser, entropy, tile_size, backend, group_ids, finished)

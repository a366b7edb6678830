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
    truncated rows reach the cap (our trainer, TRL, verl); pass ``finished [B]`` otherwise. A
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

Memory: everything is computed in float32, in chunks of response positions, so the extra
memory beyond the logits is a few ``[chunk, V]`` temporaries; no ``[B, T, V]`` softmax copy is
ever built, in the forward or the backward pass. Every metric of one reference is computed in
the same pass as its JS. Passes over the vocabulary: one for
log-sum-exp, entropy, Renyi-2, ``prev``, ``ref`` and ``group_mean`` scores and the running
sequence mean; one more for ``seq_mean`` scores (its reference is only known after the first
pass). ``group_mean`` is scored position by position: rows are visited in (position, group)
order and each chunk holds whole (position, group) blocks (with ``prev`` also asked for, whose
first pass must visit rows in sequence order, it takes a pass of its own), so its extra memory
is the chunk's ``[c, V]`` probabilities, a ``[k, V]`` group-sum buffer (k <= c blocks), the gathered
``[c, V]`` means and one ``[c, V]`` entropy temporary, with ``c = max(chunk, G)`` (a ``kl``
score of a leave-one-out variant adds one ``[c, V]`` sum and costs ``G - 1`` gathered adds per
chunk: the direct sum over the others).
Each row must have at least one finite logit; ``-inf`` entries (masked vocabulary) are fine.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

GROUP_MEAN_VARIANTS: dict[str, tuple[bool, bool]] = {  # name -> (absorbing, leave_one_out)
    "group_mean": (False, False),
    "group_mean_absorbing": (True, False),
    "group_mean_loo": (False, True),
    "group_mean_loo_absorbing": (True, True),
}
"""The references that compare a row with its group at the same position (they need
``group_ids`` and whole groups in one call)."""
JS_REFERENCES = (*GROUP_MEAN_VARIANTS, "seq_mean", "prev", "ref")
SCORE_METRICS = ("js", "kl", "wasserstein")
"""How a row's distribution is compared with its reference (module docstring): Jensen-Shannon,
KL(p || q), and 1-Wasserstein under the 0-1 ground metric (= total variation)."""


def score_key(reference: str, metric: str = "js") -> str:
    """The ``js_scores`` key of ``metric`` (one of :data:`SCORE_METRICS`) to ``reference``: the bare
    reference name for ``"js"``, else ``"<reference>:<metric>"`` (e.g. ``"group_mean_absorbing:kl"``)."""
    if metric not in SCORE_METRICS:
        raise ValueError(f"unknown score metric {metric!r}; choose from {', '.join(SCORE_METRICS)}")
    return reference if metric == "js" else f"{reference}:{metric}"


def split_score_key(name: str) -> tuple[str, str]:
    """``(reference, metric)`` of a score key (:func:`score_key`'s inverse); ValueError (one line)
    for an unknown reference or metric, and for ``"<reference>:js"`` (JS is the bare name)."""
    reference, colon, metric = name.partition(":")
    if reference not in JS_REFERENCES:
        raise ValueError(f"unknown JS reference {reference!r}; choose from {', '.join(JS_REFERENCES)}")
    if not colon:
        return reference, "js"
    if metric == "js":
        raise ValueError(f"score {name!r}: a JS score is keyed by the bare reference name {reference!r}")
    if metric not in SCORE_METRICS:
        raise ValueError(f"unknown score metric {metric!r} in {name!r}; choose from {', '.join(SCORE_METRICS)}")
    return reference, metric


def needs_groups(js_references: Sequence[str]) -> bool:
    """Whether any of ``js_references`` (score keys) is a group reference (needs ``group_ids`` and
    whole groups)."""
    return any(name.partition(":")[0] in GROUP_MEAN_VARIANTS for name in js_references)


def needs_reference_logits(js_references: Sequence[str]) -> bool:
    """Whether any of ``js_references`` (score keys) compares with the reference model (``ref``,
    any metric): its logits must then be given."""
    return any(name.partition(":")[0] == "ref" for name in js_references)


LN2 = math.log(2.0)
_CHUNK_ELEMENTS = 1 << 21  # elements of one [chunk, V] float32 temporary (8 MiB)
_TINY = torch.finfo(torch.float32).tiny
_LOWEST = torch.finfo(torch.float32).min


@dataclass
class TokenStatistics:
    """Per-position statistics, each ``[B, T]`` float32, zero outside the response mask."""

    log_probs: Tensor
    entropy: Tensor
    renyi2: Tensor
    js_scores: dict[str, Tensor] = field(default_factory=dict)

    def detached(self) -> TokenStatistics:
        """The same statistics without gradients."""
        return TokenStatistics(self.log_probs.detach(), self.entropy.detach(), self.renyi2.detach(),
                               {name: scores.detach() for name, scores in self.js_scores.items()})

    def rows(self, index: Tensor | slice) -> TokenStatistics:
        """The statistics of the rows ``index`` of the batch."""
        return TokenStatistics(self.log_probs[index], self.entropy[index], self.renyi2[index],
                               {name: scores[index] for name, scores in self.js_scores.items()})

    @staticmethod
    def concat(parts: Sequence[TokenStatistics]) -> TokenStatistics:
        """Row-wise concatenation of statistics with equal ``T`` and the same JS references."""
        return TokenStatistics(
            torch.cat([part.log_probs for part in parts]), torch.cat([part.entropy for part in parts]),
            torch.cat([part.renyi2 for part in parts]),
            {name: torch.cat([part.js_scores[name] for part in parts]) for name in parts[0].js_scores})


def default_chunk_size(vocab_size: int) -> int:
    """Rows per chunk so that one ``[chunk, V]`` float32 temporary holds about 8 MiB."""
    return max(1, _CHUNK_ELEMENTS // max(vocab_size, 1))


def _chunks(total: int, size: int) -> Iterator[slice]:
    for start in range(0, total, size):
        yield slice(start, min(start + size, total))


def _shifted_scaled(rows: Tensor, temperature: float) -> tuple[Tensor, Tensor]:
    """float32 ``z = rows / temperature - max`` and the max ``[c, 1]``.

    ``rows`` must be a fresh ``[c, V]`` tensor (an advanced-indexing copy): float32 rows are
    modified in place.
    """
    scaled = rows.float()
    if temperature != 1.0:
        scaled.div_(temperature)
    row_max = scaled.amax(dim=-1, keepdim=True)
    scaled.sub_(row_max)
    return scaled, row_max


def _entropy_of(probabilities: Tensor) -> Tensor:
    """Shannon entropy in nats of each row of ``[c, V]`` probabilities (0 log 0 = 0).

    ``-<p, log max(p, tiny)>``: one log and one dot product per row (``torch.special.entr`` is
    about 1.6x slower on CPU).
    """
    terms = probabilities.clamp_min(_TINY).log_().mul_(probabilities)
    return terms.sum(dim=-1).neg_()


def _softmax_with_entropy(rows: Tensor, temperature: float) -> tuple[Tensor, Tensor, Tensor]:
    """Softmax ``p`` of ``rows / temperature`` (``[c, V]`` float32), its log-normaliser and its
    Shannon entropy (``[c]`` each).

    With ``z = rows / temperature - max`` and ``Z = sum exp(z)``:
    ``H(p) = log Z - <exp(z), z> / Z``, which needs no logarithm per vocabulary entry.
    """
    shifted, row_max = _shifted_scaled(rows, temperature)
    probabilities = shifted.exp()
    total = probabilities.sum(dim=-1, keepdim=True)
    shifted.clamp_min_(_LOWEST)  # -inf logits: exp(z) = 0 and 0 * z must be 0, not nan
    log_total = total.log().squeeze(-1)
    entropy = log_total - shifted.mul_(probabilities).sum(dim=-1) / total.squeeze(-1)
    probabilities.div_(total)
    return probabilities, row_max.squeeze(-1) + log_total, entropy.clamp_(min=0.0)


def _log_softmax_rows(rows: Tensor, log_normaliser: Tensor, temperature: float) -> Tensor:
    """float32 ``log p = rows / temperature - log Z`` of fresh ``[c, V]`` rows (modified in place
    when float32) given their log-normalisers ``[c]``."""
    scaled = rows.float()
    if temperature != 1.0:
        scaled.div_(temperature)
    return scaled.sub_(log_normaliser.unsqueeze(-1))


def _js_from_mixture_entropy(mixture_entropy: Tensor, entropy_p: Tensor, entropy_q: Tensor) -> Tensor:
    return (mixture_entropy - 0.5 * entropy_p - 0.5 * entropy_q).clamp_(0.0, LN2)


_KL_MAX = -math.log(_TINY)  # 87.34 nats: KL with log max(q, tiny) never exceeds it


def _divergences(probabilities: Tensor, entropy_p: Tensor, reference: Tensor, entropy_q: Tensor | None,
                 metrics: Sequence[str]) -> dict[str, Tensor]:
    """Each of ``metrics`` (:data:`SCORE_METRICS`) of every row ``p`` of ``probabilities`` ``[c, V]``
    to the same row ``q`` of ``reference`` ``[c, V]`` (overwritten when ``"js"`` is asked), ``[c]``
    float32 each, in nats for ``js`` and ``kl``:

    - ``js  = H((p + q) / 2) - H(p) / 2 - H(q) / 2`` in [0, ln 2];
    - ``kl  = -H(p) - <p, log max(q, tiny)>`` in [0, 87.3];
    - ``wasserstein = TV(p, q) = 1/2 sum_v |p_v - q_v|`` in [0, 1] (1-Wasserstein under the 0-1
      ground metric).

    ``entropy_p`` ``[c]`` = ``H(p)``; ``entropy_q`` ``[c]`` = ``H(q)`` (None: computed here). Each
    metric costs one ``[c, V]`` temporary.
    """
    scores: dict[str, Tensor] = {}
    if "kl" in metrics:
        cross = reference.clamp_min(_TINY).log_().mul_(probabilities).sum(dim=-1)
        scores["kl"] = cross.add_(entropy_p).neg_().clamp_(0.0, _KL_MAX)
    if "wasserstein" in metrics:
        scores["wasserstein"] = torch.sub(probabilities, reference).abs_().sum(dim=-1).mul_(0.5).clamp_(0.0, 1.0)
    if "js" in metrics:
        if entropy_q is None:
            entropy_q = _entropy_of(reference)
        mixture_entropy = _entropy_of(reference.add_(probabilities).mul_(0.5))
        scores["js"] = _js_from_mixture_entropy(mixture_entropy, entropy_p, entropy_q)
    return scores


class _LogitsHead:
    """Rows provider over given logits ``[B, T, V]``: the rows are gathered copies."""

    def __init__(self, logits: Tensor) -> None:
        self.logits = logits
        self.inputs: tuple[Tensor, ...] = (logits,)

    def rows(self, rows_b: Tensor, rows_t: Tensor) -> Tensor:
        return self.logits[rows_b, rows_t]

    def new_grads(self, needed: Sequence[bool]) -> list[Tensor | None]:
        return [torch.zeros_like(self.logits) if needed[0] else None]

    def accumulate(self, grads: list[Tensor | None], rows_b: Tensor, rows_t: Tensor, grad_rows: Tensor) -> None:
        if grads[0] is not None:
            grads[0][rows_b, rows_t] = grad_rows.to(grads[0].dtype)


class _LinearHead:
    """Rows provider ``logits = hidden @ weight.T (+ bias)`` computed for one chunk of rows at a time.

    The backward accumulates ``grad_hidden = g @ W``, ``grad_W += g.T @ h`` and
    ``grad_bias += sum g`` from each chunk's ``[c, V]`` logit gradient ``g``, each only when its
    input needs a gradient (a frozen or tied-and-frozen head costs no ``[V, d]`` buffer).
    """

    def __init__(self, hidden: Tensor, weight: Tensor, bias: Tensor | None) -> None:
        self.hidden, self.weight, self.bias = hidden, weight, bias
        self.inputs = (hidden, weight) if bias is None else (hidden, weight, bias)

    def rows(self, rows_b: Tensor, rows_t: Tensor) -> Tensor:
        out = self.hidden[rows_b, rows_t] @ self.weight.T
        return out if self.bias is None else out.add_(self.bias)

    def new_grads(self, needed: Sequence[bool]) -> list[Tensor | None]:
        return [torch.zeros_like(tensor) if need else None for tensor, need in zip(self.inputs, needed)]

    def accumulate(self, grads: list[Tensor | None], rows_b: Tensor, rows_t: Tensor, grad_rows: Tensor) -> None:
        grad_rows = grad_rows.to(self.weight.dtype)
        if grads[0] is not None:
            grads[0][rows_b, rows_t] = (grad_rows @ self.weight).to(grads[0].dtype)
        if grads[1] is not None:
            grads[1].addmm_(grad_rows.T, self.hidden[rows_b, rows_t].to(grads[1].dtype))
        if len(grads) > 2 and grads[2] is not None:
            grads[2].add_(grad_rows.sum(dim=0).to(grads[2].dtype))


_Head = _LogitsHead | _LinearHead


def _logit_row_grads(
    log_p: Tensor,
    tokens: Tensor,
    entropy: Tensor,
    log_prob_weight: Tensor | None,
    entropy_weight: Tensor | None,
    temperature: float,
) -> Tensor:
    """Gradient wrt one chunk's logits ``[c, V]`` of ``sum w_lp log p(y) + w_H H(p)``, from
    ``log p`` (overwritten): ``d log p(y) / d logits = (onehot(y) - p) / T`` and
    ``d H / d logits = -p (log p + H) / T``."""
    probabilities = log_p.exp()
    # Each [chunk, V] buffer is updated in place: fresh ones cost page faults on CPU.
    if entropy_weight is not None:
        log_p.masked_fill_(probabilities == 0, 0.0)  # 0 log 0 = 0 for -inf logits
        grad_rows = log_p.add_(entropy.unsqueeze(-1)).mul_(probabilities)
        grad_rows.mul_(entropy_weight.neg())
        if log_prob_weight is not None:
            grad_rows.addcmul_(probabilities, log_prob_weight, value=-1.0)
    else:
        assert log_prob_weight is not None
        grad_rows = probabilities.mul_(log_prob_weight.neg())
    if log_prob_weight is not None:
        grad_rows.scatter_add_(1, tokens.unsqueeze(-1), log_prob_weight)
    if temperature != 1.0:
        grad_rows.div_(temperature)
    return grad_rows


class _ResponseLogProbs(torch.autograd.Function):
    """``log p(token)`` and ``H(p)`` from values of the no-grad pass, with a chunked backward that
    recomputes each chunk's logits through the head (see :func:`_logit_row_grads`)."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx,
        head: _Head,
        token_ids: Tensor,
        batch_index: Tensor,
        time_index: Tensor,
        log_normaliser: Tensor,
        entropy: Tensor,
        token_log_probs: Tensor,
        temperature: float,
        chunk_size: int,
        *inputs: Tensor,
    ) -> tuple[Tensor, Tensor]:
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(token_ids, batch_index, time_index, log_normaliser, entropy)
        ctx.head, ctx.temperature, ctx.chunk_size = head, temperature, chunk_size
        log_probs = torch.zeros(token_ids.shape, dtype=torch.float32, device=token_ids.device)
        log_probs[batch_index, time_index] = token_log_probs
        entropy_out = torch.zeros_like(log_probs)
        entropy_out[batch_index, time_index] = entropy
        return log_probs, entropy_out

    @staticmethod
    def backward(ctx, grad_log_probs: Tensor | None, grad_entropy: Tensor | None):  # type: ignore[override]
        token_ids, batch_index, time_index, log_normaliser, entropy = ctx.saved_tensors
        head, temperature = ctx.head, ctx.temperature
        grads = head.new_grads(ctx.needs_input_grad[9:])
        if grad_log_probs is not None or grad_entropy is not None:
            for part in _chunks(batch_index.numel(), ctx.chunk_size):
                rows_b, rows_t = batch_index[part], time_index[part]
                log_p = _log_softmax_rows(head.rows(rows_b, rows_t), log_normaliser[part], temperature)
                grad_rows = _logit_row_grads(
                    log_p,
                    token_ids[rows_b, rows_t],
                    entropy[part],
                    None if grad_log_probs is None else grad_log_probs[rows_b, rows_t].float().unsqueeze(-1),
                    None if grad_entropy is None else grad_entropy[rows_b, rows_t].float().unsqueeze(-1),
                    temperature,
                )
                head.accumulate(grads, rows_b, rows_t, grad_rows)
        return (None,) * 9 + tuple(grads)


def _check_common(
    shape: tuple[int, int, int],
    token_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
    js_references: Sequence[str],
    group_ids: Tensor | None,
    finished: Tensor | None,
) -> None:
    if token_ids.shape != shape[:2] or response_mask.shape != shape[:2]:
        raise ValueError(
            f"token_ids {tuple(token_ids.shape)} and response_mask {tuple(response_mask.shape)} "
            f"must both be [B, T] = {tuple(shape[:2])}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    references = [split_score_key(name)[0] for name in js_references]  # raises for an unknown one
    grouped = [name for name in references if name in GROUP_MEAN_VARIANTS]
    if grouped and group_ids is None:
        raise ValueError(f"the {grouped[0]!r} JS reference needs group_ids [B] (equal ids = completions of one prompt)")
    if group_ids is not None and tuple(group_ids.shape) != (shape[0],):
        raise ValueError(f"group_ids must be [B] = [{shape[0]}], got shape {tuple(group_ids.shape)}")
    if finished is not None and tuple(finished.shape) != (shape[0],):
        raise ValueError(f"finished must be [B] = [{shape[0]}], got shape {tuple(finished.shape)}")


def token_statistics(
    logits: Tensor,
    token_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
    js_references: Sequence[str] = (),
    reference_logits: Tensor | None = None,
    differentiable_entropy: bool = False,
    chunk_size: int | None = None,
    group_ids: Tensor | None = None,
    finished: Tensor | None = None,
) -> TokenStatistics:
    """Compute :class:`TokenStatistics` for the response positions (see the module docstring).

    ``log_probs`` carries gradients to ``logits``; ``entropy`` does too when
    ``differentiable_entropy`` (needed only for an entropy bonus). Everything else is computed
    without building a graph. ``chunk_size`` is in positions (default: 8 MiB temporaries).
    ``group_ids`` (LongTensor ``[B]``, any values, rows of a group need not be contiguous) says
    which rows are the completions of one prompt; required for the ``group_mean`` references.
    ``finished`` (bool ``[B]``, optional): which rows ended by themselves, for the absorbing
    variants (default: inferred, see the module docstring). ``js_references`` are score keys
    (:func:`score_key`): a reference name for its JS score, ``"<reference>:kl"`` or
    ``"<reference>:wasserstein"`` for another metric; ``js_scores`` is keyed by them.
    """
    js_references = tuple(dict.fromkeys(js_references))
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, T, V], got shape {tuple(logits.shape)}")
    _check_common(tuple(logits.shape), token_ids, response_mask, temperature, js_references, group_ids, finished)
    reference_head = None
    if needs_reference_logits(js_references):
        if reference_logits is None:
            raise ValueError("the 'ref' JS reference needs reference_logits [B, T, V]")
        if reference_logits.shape != logits.shape:
            raise ValueError(
                f"reference_logits {tuple(reference_logits.shape)} must match logits {tuple(logits.shape)}"
            )
        reference_head = _LogitsHead(reference_logits)
    return _statistics(
        _LogitsHead(logits), tuple(logits.shape), token_ids, response_mask, temperature, js_references,
        reference_head, differentiable_entropy, chunk_size, group_ids, finished,
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
    chunk_size: int | None = None,
    finished: Tensor | None = None,
) -> TokenStatistics:
    """:func:`token_statistics` of ``logits = hidden @ lm_head_weight.T (+ lm_head_bias)`` without
    ever building the ``[B, T, V]`` logits, forward or backward.

    ``hidden [B, T, d]`` is the final hidden state whose logits at ``t`` produced
    ``token_ids[:, t]``; ``lm_head_weight [V, d]``; ``lm_head_bias [V]`` or None. The logits
    are computed one chunk of response rows at a time (in the dtype of ``hidden``, then float32)
    by the same per-chunk code as the logits path; the backward recomputes each chunk's logits
    and accumulates ``grad_hidden``, ``grad_weight`` (and ``grad_bias``) chunk by chunk, so the
    extra memory is a few ``[chunk, V]`` float32 blocks plus one ``[V, d]`` weight gradient.
    Every reference but ``ref`` is supported (``ref`` needs a second model's hidden states), with
    every metric. Do not modify the weight in place between the forward and the backward.
    """
    js_references = tuple(dict.fromkeys(js_references))
    if hidden.dim() != 3 or lm_head_weight.dim() != 2 or hidden.shape[-1] != lm_head_weight.shape[-1]:
        raise ValueError(
            f"hidden must be [B, T, d] and lm_head_weight [V, d], got {tuple(hidden.shape)} and "
            f"{tuple(lm_head_weight.shape)}"
        )
    if lm_head_bias is not None and tuple(lm_head_bias.shape) != (lm_head_weight.shape[0],):
        raise ValueError(f"lm_head_bias must be [V] = [{lm_head_weight.shape[0]}], got {tuple(lm_head_bias.shape)}")
    shape = (hidden.shape[0], hidden.shape[1], lm_head_weight.shape[0])
    _check_common(shape, token_ids, response_mask, temperature, js_references, group_ids, finished)
    if needs_reference_logits(js_references):
        raise ValueError("the 'ref' JS reference is not supported from hidden states; use token_statistics")
    return _statistics(
        _LinearHead(hidden, lm_head_weight, lm_head_bias), shape, token_ids, response_mask, temperature,
        js_references, None, differentiable_entropy, chunk_size, group_ids, finished,
    )


@dataclass
class _Rows:
    """The response rows of a batch, row-major (sequence by sequence): ``batch_index`` and
    ``time_index`` ``[N]``."""

    batch_index: Tensor
    time_index: Tensor

    def chunks(self, size: int) -> Iterator[tuple[Tensor | slice, _Blocks | None]]:
        return ((part, None) for part in _chunks(self.batch_index.numel(), size))


class _FirstPass:
    """Accumulators of the first vocabulary pass: log-normaliser, entropy, Renyi-2 and sampled
    log-prob of every response row, plus the ``prev``, ``ref`` and (when its blocks are given)
    one group reference's scores of the metrics asked for each, and the per-sequence sums of
    ``seq_mean``. ``scores`` is keyed by score key (:func:`score_key`), ``[N]`` each."""

    def __init__(self, rows: _Rows, batch_size: int, vocab_size: int, prev_metrics: tuple[str, ...],
                 ref_metrics: tuple[str, ...], want_mean: bool, group_variant: str | None,
                 group_metrics: tuple[str, ...]) -> None:
        num_rows, device = rows.batch_index.numel(), rows.batch_index.device
        self.log_normaliser = torch.empty(num_rows, dtype=torch.float32, device=device)
        self.entropy = torch.empty_like(self.log_normaliser)
        self.renyi2 = torch.empty_like(self.log_normaliser)
        self.token_log_probs = torch.empty_like(self.log_normaliser)
        self.prev_metrics, self.ref_metrics = prev_metrics, ref_metrics
        self.group_variant = group_variant
        self.group_metrics = group_metrics if group_variant is not None else ()
        self.scores: dict[str, Tensor] = {}
        for reference, metrics in (("prev", prev_metrics), ("ref", ref_metrics),
                                   (group_variant, self.group_metrics)):
            for metric in metrics:
                assert reference is not None
                self.scores[score_key(reference, metric)] = torch.zeros_like(self.log_normaliser)
        self.sequence_sum = (
            torch.zeros(batch_size, vocab_size, dtype=torch.float32, device=device) if want_mean else None
        )
        self.previous_row: Tensor | None = None
        self.previous_entropy: Tensor | None = None

    def _store(self, reference: str, part: Tensor | slice, scores: dict[str, Tensor]) -> None:
        for metric, values in scores.items():
            self.scores[score_key(reference, metric)][part] = values

    def update(self, part: Tensor | slice, blocks: _Blocks | None, head: _Head, reference_head: _Head | None,
               rows_b: Tensor, rows_t: Tensor, token_ids: Tensor, temperature: float) -> None:
        """Process one chunk of rows (``part``: their indices into the response rows)."""
        rows = head.rows(rows_b, rows_t)
        token_logits = rows.gather(1, token_ids[rows_b, rows_t].unsqueeze(-1)).squeeze(-1).float()
        probabilities, normaliser, row_entropy = _softmax_with_entropy(rows, temperature)
        del rows
        self.log_normaliser[part] = normaliser
        self.token_log_probs[part] = token_logits.div_(temperature).sub_(normaliser)
        self.entropy[part] = row_entropy
        self.renyi2[part] = -2.0 * torch.linalg.vector_norm(probabilities, ord=2, dim=-1).log()
        if self.sequence_sum is not None:
            self.sequence_sum.index_add_(0, rows_b, probabilities)
        if self.prev_metrics:
            # Rows in sequence order: q of each row is the row before it (across chunks); the
            # first row of a sequence is zeroed in `finish`.
            previous = torch.empty_like(probabilities)
            previous[1:] = probabilities[:-1]
            previous[0] = self.previous_row if self.previous_row is not None else probabilities[0]
            first_entropy = self.previous_entropy if self.previous_entropy is not None else row_entropy[:1]
            previous_entropy = torch.cat([first_entropy, row_entropy[:-1]])
            self.previous_row, self.previous_entropy = probabilities[-1].clone(), row_entropy[-1:].clone()
            self._store("prev", part, _divergences(probabilities, row_entropy, previous, previous_entropy,
                                                   self.prev_metrics))
        if self.ref_metrics:
            assert reference_head is not None
            reference, _, reference_entropy = _softmax_with_entropy(reference_head.rows(rows_b, rows_t), temperature)
            self._store("ref", part, _divergences(probabilities, row_entropy, reference, reference_entropy,
                                                  self.ref_metrics))
        if self.group_metrics:
            assert blocks is not None and self.group_variant is not None
            leave_one_out = GROUP_MEAN_VARIANTS[self.group_variant][1]
            self._store(self.group_variant, part, _group_scores_of_chunk(probabilities, row_entropy, blocks,
                                                                         leave_one_out, self.group_metrics))

    def finish(self, rows: _Rows) -> None:
        """Zero the ``prev`` scores of the first row of each sequence (compared with itself)."""
        if not self.prev_metrics:
            return
        first_of_sequence = torch.ones_like(rows.batch_index, dtype=torch.bool)
        first_of_sequence[1:] = rows.batch_index[1:] != rows.batch_index[:-1]
        for metric in self.prev_metrics:
            self.scores[score_key("prev", metric)].masked_fill_(first_of_sequence, 0.0)


def _statistics(
    head: _Head,
    shape: tuple[int, int, int],
    token_ids: Tensor,
    response_mask: Tensor,
    temperature: float,
    js_references: tuple[str, ...],
    reference_head: _LogitsHead | None,
    differentiable_entropy: bool,
    chunk_size: int | None,
    group_ids: Tensor | None,
    finished: Tensor | None,
) -> TokenStatistics:
    """The statistics of the module docstring from a rows provider (one implementation for both
    the logits and the hidden-state paths)."""
    batch_size, length, vocab_size = shape
    chunk_size = chunk_size or default_chunk_size(vocab_size)
    batch_index, time_index = response_mask.bool().nonzero(as_tuple=True)  # row-major
    rows = _Rows(batch_index, time_index)
    metrics_of: dict[str, tuple[str, ...]] = {}  # reference -> its metrics asked for
    for name in js_references:
        reference, metric = split_score_key(name)
        metrics_of[reference] = (*metrics_of.get(reference, ()), metric)
    want_prev = "prev" in metrics_of
    group_variants = [name for name in metrics_of if name in GROUP_MEAN_VARIANTS]
    layout = None
    if group_variants:
        assert group_ids is not None
        layout = _group_layout(rows, token_ids, group_ids, finished, length)
    # The first group variant is scored in the first pass when no `prev` (which needs rows in
    # sequence order) is asked for; every other one takes a vocabulary pass of its own.
    in_first = group_variants[0] if group_variants and not want_prev else None
    first = _FirstPass(rows, batch_size, vocab_size, metrics_of.get("prev", ()),
                       metrics_of.get("ref", ()) if reference_head is not None else (),
                       "seq_mean" in metrics_of, in_first, metrics_of.get(in_first or "", ()))
    parts: Iterator[tuple[Tensor | slice, _Blocks | None]] = rows.chunks(chunk_size)
    if in_first is not None:
        parts = _group_block_chunks(rows, layout, chunk_size, GROUP_MEAN_VARIANTS[in_first][0])

    with torch.no_grad():
        for part, blocks in parts:
            first.update(part, blocks, head, reference_head, batch_index[part], time_index[part], token_ids,
                         temperature)
        first.finish(rows)
        scores = first.scores
        if first.sequence_sum is not None:
            for metric, values in _seq_mean_scores(head, rows, first.log_normaliser, first.entropy,
                                                   first.sequence_sum, temperature, chunk_size,
                                                   metrics_of["seq_mean"]).items():
                scores[score_key("seq_mean", metric)] = values
        for variant in group_variants:
            if variant == in_first:
                continue
            assert layout is not None
            for metric, values in _group_mean_scores(head, rows, layout, first.log_normaliser, first.entropy,
                                                     variant, temperature, chunk_size,
                                                     metrics_of[variant]).items():
                scores[score_key(variant, metric)] = values

    log_probs, entropy_full = _ResponseLogProbs.apply(
        head, token_ids, batch_index, time_index, first.log_normaliser, first.entropy, first.token_log_probs,
        temperature, chunk_size, *head.inputs,
    )
    if not differentiable_entropy:
        entropy_full = entropy_full.detach()

    def scatter(values: Tensor) -> Tensor:
        full = torch.zeros(batch_size, length, dtype=torch.float32, device=token_ids.device)
        full[batch_index, time_index] = values
        return full

    return TokenStatistics(log_probs=log_probs, entropy=entropy_full, renyi2=scatter(first.renyi2),
                           js_scores={name: scatter(scores[name]) for name in js_references})


def _seq_mean_scores(
    head: _Head,
    rows: _Rows,
    log_normaliser: Tensor,
    entropy: Tensor,
    sequence_sum: Tensor,
    temperature: float,
    chunk_size: int,
    metrics: Sequence[str],
) -> dict[str, Tensor]:
    """``metrics`` of each response row to the mean distribution of its sequence (second
    vocabulary pass), ``[N]`` each."""
    batch_index, time_index = rows.batch_index, rows.time_index
    counts = torch.bincount(batch_index, minlength=sequence_sum.shape[0]).clamp_(min=1)
    sequence_mean = sequence_sum.div_(counts.unsqueeze(-1).float())
    sequence_entropy = _entropy_of(sequence_mean) if "js" in metrics else None
    scores = {metric: torch.empty_like(entropy) for metric in metrics}
    for part in _chunks(batch_index.numel(), chunk_size):
        rows_b, rows_t = batch_index[part], time_index[part]
        probabilities = _log_softmax_rows(head.rows(rows_b, rows_t), log_normaliser[part], temperature).exp_()
        chunk_scores = _divergences(probabilities, entropy[part], sequence_mean[rows_b],
                                    None if sequence_entropy is None else sequence_entropy[rows_b], metrics)
        for metric, values in chunk_scores.items():
            scores[metric][part] = values
    return scores


# ---------------------------------------------------------------------------------------------
# Group references: JS of each row to a mean over its group at the same position


def _ends(rows: _Rows, batch_size: int, length: int, finished: Tensor | None) -> tuple[Tensor, Tensor]:
    """Each row's last response position (``-1``: none) and whether it is finished (``[B]`` each)."""
    device = rows.batch_index.device
    last = torch.full((batch_size,), -1, dtype=torch.long, device=device)
    last.scatter_reduce_(0, rows.batch_index, rows.time_index, reduce="amax")
    done = last < length - 1 if finished is None else finished.to(device).bool()
    return last, done & (last >= 0)


def response_ends(response_mask: Tensor, finished: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """``(last, finished)``: each row's last response position (long ``[B]``, ``-1`` for a row
    without response token) and whether the row is *finished* (bool ``[B]``; given, or inferred
    as "ends before the last column", see the module docstring). The end token of a finished
    row ``i`` is ``token_ids[i, last[i]]``."""
    batch_index, time_index = response_mask.bool().nonzero(as_tuple=True)
    return _ends(_Rows(batch_index, time_index), response_mask.shape[0], response_mask.shape[1], finished)


@dataclass
class _GroupLayout:
    """The groups of a batch: ``rank`` ``[B]`` (0..num_groups-1) and, for the absorbing
    variants, the finished rows of each group as a ``[num_groups, M]`` table of their last
    response position (``end_time``; padding: ``T``, never before a position) and end token
    (``end_token``)."""

    rank: Tensor
    num_groups: int
    end_time: Tensor
    end_token: Tensor


def _group_layout(rows: _Rows, token_ids: Tensor, group_ids: Tensor, finished: Tensor | None,
                  length: int) -> _GroupLayout:
    """Group ranks and the finished rows' (last position, end token) per group (see the module
    docstring for *finished* and *end token*)."""
    device = rows.batch_index.device
    batch_size = token_ids.shape[0]
    _, rank = torch.unique(group_ids.to(device), return_inverse=True)
    num_groups = int(rank.max().item()) + 1 if batch_size else 0
    last, done = _ends(rows, batch_size, length, finished)
    done_rows = done.nonzero(as_tuple=True)[0]
    done_rows = done_rows[torch.argsort(rank[done_rows], stable=True)]
    per_group = torch.bincount(rank[done_rows], minlength=num_groups)
    width = int(per_group.max().item()) if done_rows.numel() else 0
    slot = torch.arange(done_rows.numel(), device=device) - (per_group.cumsum(0) - per_group)[rank[done_rows]]
    end_time = torch.full((num_groups, width), length, dtype=torch.long, device=device)
    end_token = torch.zeros((num_groups, width), dtype=torch.long, device=device)
    end_time[rank[done_rows], slot] = last[done_rows]
    end_token[rank[done_rows], slot] = token_ids[done_rows, last[done_rows]].to(device)
    return _GroupLayout(rank, num_groups, end_time, end_token)


@dataclass
class _Blocks:
    """The (position, group) blocks of one chunk of rows: ``local`` ``[c]`` is each row's block
    (0..k-1), ``sizes`` ``[k]`` the rows per block, ``counts`` ``[k]`` the contributors to the
    block's mean (its rows plus its absorbed point masses) and ``absorbed`` the
    ``(block, token)`` index pairs of the point masses (one pair per finished row)."""

    local: Tensor
    sizes: Tensor
    counts: Tensor
    absorbed: tuple[Tensor, Tensor]


def _group_block_chunks(rows: _Rows, layout: _GroupLayout | None, chunk_size: int,
                        absorbing: bool) -> Iterator[tuple[Tensor, _Blocks]]:
    """Chunks of response rows (indices into the rows) in (position, group) order.

    A chunk ends on a block boundary and holds at least one whole block, so each block's mean
    is complete within its chunk (a chunk has ``max(chunk_size, G)`` rows at most).
    """
    assert layout is not None
    batch_index, time_index = rows.batch_index, rows.time_index
    num_rows = batch_index.numel()
    if num_rows == 0:
        return
    key = time_index * layout.num_groups + layout.rank[batch_index]
    order = torch.argsort(key, stable=True)
    block_keys, block_of_row, block_sizes = torch.unique_consecutive(
        key[order], return_inverse=True, return_counts=True)
    block_time, block_group = block_keys // layout.num_groups, block_keys % layout.num_groups
    block_ends = block_sizes.cumsum(0).tolist()
    start, first_block = 0, 0
    while start < num_rows:
        last_block = bisect.bisect_right(block_ends, start + chunk_size, lo=first_block)
        last_block = max(last_block, first_block + 1)
        end = block_ends[last_block - 1]
        blocks = slice(first_block, last_block)
        sizes = block_sizes[blocks]
        # Finished rows of the block's group whose last position is before the block's.
        absorbed = layout.end_time[block_group[blocks]] < block_time[blocks].unsqueeze(-1)
        absorbed &= absorbing
        pairs = absorbed.nonzero(as_tuple=True)
        tokens = layout.end_token[block_group[blocks]][pairs]
        yield order[start:end], _Blocks(block_of_row[start:end] - first_block, sizes,
                                        sizes + absorbed.sum(dim=-1), (pairs[0], tokens))
        start, first_block = end, last_block


def _sum_of_others(probabilities: Tensor, blocks: _Blocks) -> Tensor:
    """``sum_{j != i} p_j`` over the other rows ``j`` of each row ``i``'s block, ``[c, V]``, summed
    directly (``G - 1`` gathered adds), so that an entry is exactly 0 where every other row's is
    and small entries keep their relative precision (``S - p_i`` loses both to rounding). The rows
    of a block are contiguous in the chunk (:func:`_group_block_chunks`)."""
    sizes = blocks.sizes[blocks.local]
    start = (blocks.sizes.cumsum(0) - blocks.sizes)[blocks.local]
    slot = torch.arange(blocks.local.numel(), device=probabilities.device) - start
    others = torch.zeros_like(probabilities)
    for shift in range(1, int(blocks.sizes.max().item()) if blocks.sizes.numel() else 1):
        targets = (sizes > shift).nonzero(as_tuple=True)[0]
        partners = start[targets] + (slot[targets] + shift) % sizes[targets]
        others.index_add_(0, targets, probabilities.index_select(0, partners))
    return others


def _group_scores_of_chunk(probabilities: Tensor, entropy: Tensor, blocks: _Blocks, leave_one_out: bool,
                           metrics: Sequence[str]) -> dict[str, Tensor]:
    """``metrics`` (:func:`_divergences`), ``[c]`` each, of each row of ``probabilities`` ``[c, V]``
    to its block's mean.

    With ``S`` the sum of the block's distributions and absorbed point masses over its ``n``
    contributors: the mean ``m = S / n`` (row included) or ``m_i = (S - p_i) / (n - 1)``
    (``leave_one_out``; with ``kl`` asked, ``S - p_i`` is summed directly by
    :func:`_sum_of_others`, and the other metrics of the call use that sum too: equal within
    float32 rounding); ``entropy`` ``[c]`` = ``H(p)``. A row with no other contributor scores
    exactly 0.
    """
    block_sum = torch.zeros(blocks.sizes.numel(), probabilities.shape[1], dtype=torch.float32,
                            device=probabilities.device)
    direct = leave_one_out and "kl" in metrics
    if not direct:
        block_sum.index_add_(0, blocks.local, probabilities)
    if blocks.absorbed[0].numel():
        ones = torch.ones(blocks.absorbed[0].numel(), dtype=torch.float32, device=probabilities.device)
        block_sum.index_put_(blocks.absorbed, ones, accumulate=True)
    counts = blocks.counts[blocks.local].float()
    mean_entropy = None
    if not leave_one_out:
        block_sum.div_(blocks.counts.unsqueeze(-1).float())
        if "js" in metrics:
            mean_entropy = _entropy_of(block_sum)[blocks.local]
        mean = block_sum[blocks.local]
        alone = counts == 1
    else:
        if direct:
            mean = _sum_of_others(probabilities, blocks)
            if blocks.absorbed[0].numel():
                mean.add_(block_sum[blocks.local])  # the absorbed point masses (exact integers)
        else:
            mean = block_sum[blocks.local].sub_(probabilities).clamp_min_(0.0)
        mean.div_((counts - 1).clamp_min(1.0).unsqueeze(-1))
        alone = counts <= 1
    del block_sum
    scores = _divergences(probabilities, entropy, mean, mean_entropy, metrics)
    return {metric: values.masked_fill_(alone, 0.0) for metric, values in scores.items()}


def _group_mean_scores(
    head: _Head,
    rows: _Rows,
    layout: _GroupLayout,
    log_normaliser: Tensor,
    entropy: Tensor,
    variant: str,
    temperature: float,
    chunk_size: int,
    metrics: Sequence[str],
) -> dict[str, Tensor]:
    """``metrics`` of each response row to its group reference at the same position, ``[N]`` each,
    in a vocabulary pass of its own (a second group variant, or when the first pass visits rows
    in sequence order for ``prev``)."""
    absorbing, leave_one_out = GROUP_MEAN_VARIANTS[variant]
    scores = {metric: torch.zeros_like(entropy) for metric in metrics}
    for part, blocks in _group_block_chunks(rows, layout, chunk_size, absorbing):
        probabilities = _log_softmax_rows(
            head.rows(rows.batch_index[part], rows.time_index[part]), log_normaliser[part], temperature
        ).exp_()
        chunk_scores = _group_scores_of_chunk(probabilities, entropy[part], blocks, leave_one_out, metrics)
        for metric, values in chunk_scores.items():
            scores[metric][part] = values
    return scores

"""Token statistics of a policy's next-token distributions: pure tensor math, no models.

For every response position t with temperature-scaled distribution
``p_t = softmax(logits_t / temperature)`` over the vocabulary V:

- ``log_probs[t]  = log p_t(token_t)``                  (differentiable; the loss uses it)
- ``entropy[t]    = H(p_t)  = -sum_v p_tv log p_tv``     (Shannon, nats)
- ``renyi2[t]     = H2(p_t) = -log sum_v p_tv^2``        (second-order Renyi, nats; H2 <= H)
- ``js_scores[r][t] = JS(p_t || q_t) = H(m) - H(p_t)/2 - H(q_t)/2``, ``m = (p_t + q_t)/2``,
  in [0, ln 2], for the references ``r``:

  - ``group_mean`` (ICT's reference, arXiv 2606.19771): ``q_{i,t}`` = mean of ``p_{j,t}`` over
    the rows ``j`` of the same group (equal ``group_ids``: the G completions of one prompt) that
    have a response token at the same position ``t`` (index along T), row ``i`` included. A
    position where only one row of the group still has a token is compared with itself and
    scores 0;
  - ``seq_mean``: ``q_t`` = mean of ``p`` over the response positions of the same sequence;
  - ``prev``: ``q_t = p_{t'}`` with ``t'`` the previous response position of the same sequence;
    the first response position of a sequence has no predecessor and scores 0 (it is compared
    with itself);
  - ``ref``: ``q_t`` = the reference model's distribution at the same position (its logits given).

Shapes: ``logits [B, T, V]`` (float32 or bfloat16) where ``logits[:, t]`` is the distribution
that produced ``token_ids[:, t]`` (the caller shifts), ``token_ids [B, T]``,
``response_mask [B, T]``. Every output is ``[B, T]`` float32 and 0 outside the response mask.

Memory: everything is computed in float32, in chunks of response positions, so the extra
memory beyond the logits is a few ``[chunk, V]`` temporaries; no ``[B, T, V]`` softmax copy is
ever built, in the forward or the backward pass. Passes over the vocabulary: one for
log-sum-exp, entropy, Renyi-2, ``prev``, ``ref`` and ``group_mean`` scores and the running
sequence mean; one more for ``seq_mean`` scores (its reference is only known after the first
pass). ``group_mean`` is scored position by position: rows are visited in (position, group)
order and each chunk holds whole (position, group) blocks (with ``prev`` also asked for, whose
first pass must visit rows in sequence order, it takes a pass of its own), so its extra memory
is the chunk's ``[c, V]`` probabilities, a ``[k, V]`` group-sum buffer (k <= c blocks), the gathered
``[c, V]`` means and one ``[c, V]`` entropy temporary, with ``c = max(chunk, G)``.
Each row must have at least one finite logit; ``-inf`` entries (masked vocabulary) are fine.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

JS_REFERENCES = ("group_mean", "seq_mean", "prev", "ref")
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
) -> None:
    if token_ids.shape != shape[:2] or response_mask.shape != shape[:2]:
        raise ValueError(
            f"token_ids {tuple(token_ids.shape)} and response_mask {tuple(response_mask.shape)} "
            f"must both be [B, T] = {tuple(shape[:2])}"
        )
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    unknown = [name for name in js_references if name not in JS_REFERENCES]
    if unknown:
        raise ValueError(f"unknown JS reference {unknown[0]!r}; choose from {', '.join(JS_REFERENCES)}")
    if "group_mean" in js_references and group_ids is None:
        raise ValueError("the 'group_mean' JS reference needs group_ids [B] (equal ids = completions of one prompt)")
    if group_ids is not None and tuple(group_ids.shape) != (shape[0],):
        raise ValueError(f"group_ids must be [B] = [{shape[0]}], got shape {tuple(group_ids.shape)}")


def token_statistics(
    logits: Tensor,
    token_ids: Tensor,
    response_mask: Tensor,
    temperature: float = 1.0,
    js_references: Sequence[str] = (),
    reference_logits: Tensor | None = None,
    differentiable_entropy: bool = False,
    chunk_size: int | None = None,
    group_ids: Tensor | None = None,
) -> TokenStatistics:
    """Compute :class:`TokenStatistics` for the response positions (see the module docstring).

    ``log_probs`` carries gradients to ``logits``; ``entropy`` does too when
    ``differentiable_entropy`` (needed only for an entropy bonus). Everything else is computed
    without building a graph. ``chunk_size`` is in positions (default: 8 MiB temporaries).
    ``group_ids`` (LongTensor ``[B]``, any values, rows of a group need not be contiguous) says
    which rows are the completions of one prompt; required for the ``group_mean`` reference.
    """
    js_references = tuple(dict.fromkeys(js_references))
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, T, V], got shape {tuple(logits.shape)}")
    _check_common(tuple(logits.shape), token_ids, response_mask, temperature, js_references, group_ids)
    reference_head = None
    if "ref" in js_references:
        if reference_logits is None:
            raise ValueError("the 'ref' JS reference needs reference_logits [B, T, V]")
        if reference_logits.shape != logits.shape:
            raise ValueError(
                f"reference_logits {tuple(reference_logits.shape)} must match logits {tuple(logits.shape)}"
            )
        reference_head = _LogitsHead(reference_logits)
    return _statistics(
        _LogitsHead(logits), tuple(logits.shape), token_ids, response_mask, temperature, js_references,
        reference_head, differentiable_entropy, chunk_size, group_ids,
    )


def token_statistics_from_hidden(
    hidden: Tensor,
    lm_head_weight: Tensor,
    token_ids: Tensor,
    response_mask: Tensor,
    temperature: float = 1.0,
    js_references: Sequence[str] = (),
    group_ids: Tensor | None = None,
    lm_head_bias: Tensor | None = None,
    differentiable_entropy: bool = False,
    chunk_size: int | None = None,
) -> TokenStatistics:
    """:func:`token_statistics` of ``logits = hidden @ lm_head_weight.T (+ lm_head_bias)`` without
    ever building the ``[B, T, V]`` logits, forward or backward.

    ``hidden [B, T, d]`` is the final hidden state whose logits at ``t`` produced
    ``token_ids[:, t]``; ``lm_head_weight [V, d]``; ``lm_head_bias [V]`` or None. The logits
    are computed one chunk of response rows at a time (in the dtype of ``hidden``, then float32)
    by the same per-chunk code as the logits path; the backward recomputes each chunk's logits
    and accumulates ``grad_hidden``, ``grad_weight`` (and ``grad_bias``) chunk by chunk, so the
    extra memory is a few ``[chunk, V]`` float32 blocks plus one ``[V, d]`` weight gradient.
    Every reference but ``ref`` is supported (``ref`` needs a second model's hidden states).
    Do not modify the weight in place between the forward and the backward.
    """
    js_references = tuple(dict.fromkeys(js_references))
    if hidden.dim() != 3 or lm_head_weight.dim() != 2 or hidden.shape[-1] != lm_head_weight.shape[-1]:
        raise ValueError(
            f"hidden must be [B, T, d] and lm_head_weight [V, d], got {tuple(hidden.shape)} and "
            f"{tuple(lm_head_weight.shape)}"
        )
    if lm_head_bias is not None and tuple(lm_head_bias.shape) != (lm_head_weight.shape[0],):
        raise ValueError(f"lm_head_bias must be [V] = [{lm_head_weight.shape[0]}], got {tuple(lm_head_bias.shape)}")
    if "ref" in js_references:
        raise ValueError("the 'ref' JS reference is not supported from hidden states; use token_statistics")
    shape = (hidden.shape[0], hidden.shape[1], lm_head_weight.shape[0])
    _check_common(shape, token_ids, response_mask, temperature, js_references, group_ids)
    return _statistics(
        _LinearHead(hidden, lm_head_weight, lm_head_bias), shape, token_ids, response_mask, temperature,
        js_references, None, differentiable_entropy, chunk_size, group_ids,
    )


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
) -> TokenStatistics:
    """The statistics of the module docstring from a rows provider (one implementation for both
    the logits and the hidden-state paths)."""
    batch_size, length, vocab_size = shape
    chunk_size = chunk_size or default_chunk_size(vocab_size)
    device = token_ids.device
    mask = response_mask.bool()
    batch_index, time_index = mask.nonzero(as_tuple=True)  # row-major: sequence by sequence
    num_rows = batch_index.numel()

    log_normaliser = torch.empty(num_rows, dtype=torch.float32, device=device)
    entropy = torch.empty_like(log_normaliser)
    renyi2 = torch.empty_like(log_normaliser)
    token_log_probs = torch.empty_like(log_normaliser)
    want_prev, want_mean = ("prev" in js_references), ("seq_mean" in js_references)
    # The predecessor of a response row is the row before it when both are in one sequence.
    first_of_sequence = torch.ones(num_rows, dtype=torch.bool, device=device)
    first_of_sequence[1:] = batch_index[1:] != batch_index[:-1]
    prev_mixture_entropy = torch.zeros_like(log_normaliser) if want_prev else None
    ref_js = torch.zeros_like(log_normaliser) if reference_head is not None else None
    sequence_sum = (
        torch.zeros(batch_size, vocab_size, dtype=torch.float32, device=device) if want_mean else None
    )

    # group_mean without prev (which needs rows in sequence order): score it in this pass, with
    # the rows visited in (position, group) blocks; otherwise in a pass of its own afterwards.
    group_js: Tensor | None = None
    parts: Iterator[tuple[Tensor | slice, _Blocks | None]]
    if "group_mean" in js_references and not want_prev:
        assert group_ids is not None
        group_js = torch.zeros_like(log_normaliser)
        parts = _group_block_chunks(batch_index, time_index, group_ids, chunk_size)
    else:
        parts = ((part, None) for part in _chunks(num_rows, chunk_size))

    with torch.no_grad():
        previous_row: Tensor | None = None
        for part, blocks in parts:
            rows_b, rows_t = batch_index[part], time_index[part]
            rows = head.rows(rows_b, rows_t)
            token_logits = rows.gather(1, token_ids[rows_b, rows_t].unsqueeze(-1)).squeeze(-1).float()
            probabilities, normaliser, row_entropy = _softmax_with_entropy(rows, temperature)
            del rows
            log_normaliser[part] = normaliser
            token_log_probs[part] = token_logits.div_(temperature).sub_(normaliser)
            entropy[part] = row_entropy
            renyi2[part] = -2.0 * torch.linalg.vector_norm(probabilities, ord=2, dim=-1).log()
            if sequence_sum is not None:
                sequence_sum.index_add_(0, rows_b, probabilities)
            if prev_mixture_entropy is not None:
                mixture = probabilities.clone()
                mixture[1:].add_(probabilities[:-1])
                if previous_row is not None:
                    mixture[0].add_(previous_row)
                else:
                    mixture[0].add_(probabilities[0])
                prev_mixture_entropy[part] = _entropy_of(mixture.mul_(0.5))
                previous_row = probabilities[-1].clone()
            if ref_js is not None:
                assert reference_head is not None
                reference, _, reference_entropy = _softmax_with_entropy(
                    reference_head.rows(rows_b, rows_t), temperature
                )
                mixture_entropy = _entropy_of(reference.add_(probabilities).mul_(0.5))
                ref_js[part] = _js_from_mixture_entropy(mixture_entropy, entropy[part], reference_entropy)
            if group_js is not None:
                assert blocks is not None
                group_js[part] = _group_js_of_chunk(probabilities, row_entropy, blocks)  # last: in place
            del probabilities

        js_rows: dict[str, Tensor] = {}
        if prev_mixture_entropy is not None:
            previous_entropy = torch.cat([entropy[:1], entropy[:-1]])
            js = _js_from_mixture_entropy(prev_mixture_entropy, entropy, previous_entropy)
            js_rows["prev"] = js.masked_fill_(first_of_sequence, 0.0)
        if ref_js is not None:
            js_rows["ref"] = ref_js
        if sequence_sum is not None:
            js_rows["seq_mean"] = _seq_mean_js(
                head, batch_index, time_index, log_normaliser, entropy, sequence_sum, temperature, chunk_size
            )
        if group_js is not None:
            js_rows["group_mean"] = group_js
        elif "group_mean" in js_references:
            assert group_ids is not None
            js_rows["group_mean"] = _group_mean_js(
                head, batch_index, time_index, log_normaliser, entropy, group_ids, temperature, chunk_size
            )

    log_probs, entropy_full = _ResponseLogProbs.apply(
        head, token_ids, batch_index, time_index, log_normaliser, entropy, token_log_probs, temperature,
        chunk_size, *head.inputs,
    )
    if not differentiable_entropy:
        entropy_full = entropy_full.detach()

    def scatter(values: Tensor) -> Tensor:
        full = torch.zeros(batch_size, length, dtype=torch.float32, device=device)
        full[batch_index, time_index] = values
        return full

    return TokenStatistics(
        log_probs=log_probs,
        entropy=entropy_full,
        renyi2=scatter(renyi2),
        js_scores={name: scatter(js_rows[name]) for name in js_references},
    )


def _seq_mean_js(
    head: _Head,
    batch_index: Tensor,
    time_index: Tensor,
    log_normaliser: Tensor,
    entropy: Tensor,
    sequence_sum: Tensor,
    temperature: float,
    chunk_size: int,
) -> Tensor:
    """JS of each response row to the mean distribution of its sequence (second vocabulary pass)."""
    counts = torch.bincount(batch_index, minlength=sequence_sum.shape[0]).clamp_(min=1)
    sequence_mean = sequence_sum.div_(counts.unsqueeze(-1).float())
    sequence_entropy = _entropy_of(sequence_mean)
    js = torch.empty_like(entropy)
    for part in _chunks(batch_index.numel(), chunk_size):
        rows_b, rows_t = batch_index[part], time_index[part]
        mixture = _log_softmax_rows(head.rows(rows_b, rows_t), log_normaliser[part], temperature).exp_()
        # Rows are sorted by sequence: add each sequence's mean to its contiguous run of rows.
        sequences, run_lengths = torch.unique_consecutive(rows_b, return_counts=True)
        start = 0
        for sequence, run in zip(sequences.tolist(), run_lengths.tolist()):
            mixture[start : start + run].add_(sequence_mean[sequence])
            start += run
        mixture_entropy = _entropy_of(mixture.mul_(0.5))
        js[part] = _js_from_mixture_entropy(mixture_entropy, entropy[part], sequence_entropy[rows_b])
    return js


@dataclass
class _Blocks:
    """The (position, group) blocks of one chunk of rows: ``local`` ``[c]`` is each row's block
    (0..k-1) and ``sizes`` ``[k]`` the rows per block."""

    local: Tensor
    sizes: Tensor


def _group_block_chunks(
    batch_index: Tensor, time_index: Tensor, group_ids: Tensor, chunk_size: int
) -> Iterator[tuple[Tensor, _Blocks]]:
    """Chunks of response rows (indices into ``batch_index``) in (position, group) order.

    A chunk ends on a block boundary and holds at least one whole block, so each block's mean
    is complete within its chunk (a chunk has ``max(chunk_size, G)`` rows at most).
    """
    num_rows = batch_index.numel()
    if num_rows == 0:
        return
    _, group_rank = torch.unique(group_ids.to(batch_index.device), return_inverse=True)
    num_groups = int(group_rank.max().item()) + 1
    key = time_index * num_groups + group_rank[batch_index]
    order = torch.argsort(key, stable=True)
    _, block_of_row, block_sizes = torch.unique_consecutive(key[order], return_inverse=True, return_counts=True)
    block_ends = block_sizes.cumsum(0).tolist()
    start, first_block = 0, 0
    while start < num_rows:
        last_block = bisect.bisect_right(block_ends, start + chunk_size, lo=first_block)
        last_block = max(last_block, first_block + 1)
        end = block_ends[last_block - 1]
        yield order[start:end], _Blocks(block_of_row[start:end] - first_block,
                                        block_sizes[first_block:last_block])
        start, first_block = end, last_block


def _group_js_of_chunk(probabilities: Tensor, entropy: Tensor, blocks: _Blocks) -> Tensor:
    """JS ``[c]`` of each row of ``probabilities`` ``[c, V]`` (overwritten) to its block's mean.

    ``JS = H((p + m) / 2) - H(p) / 2 - H(m) / 2`` with ``m`` the mean of the block's rows and
    ``entropy`` ``[c]`` = ``H(p)``; a block of one row is its own mean: exactly 0.
    """
    block_mean = torch.zeros(blocks.sizes.numel(), probabilities.shape[1], dtype=torch.float32,
                             device=probabilities.device)
    block_mean.index_add_(0, blocks.local, probabilities)
    block_mean.div_(blocks.sizes.unsqueeze(-1).float())
    mean_entropy = _entropy_of(block_mean)
    mixture_entropy = _entropy_of(probabilities.add_(block_mean[blocks.local]).mul_(0.5))
    js = _js_from_mixture_entropy(mixture_entropy, entropy, mean_entropy[blocks.local])
    return js.masked_fill_(blocks.sizes[blocks.local] == 1, 0.0)


def _group_mean_js(
    head: _Head,
    batch_index: Tensor,
    time_index: Tensor,
    log_normaliser: Tensor,
    entropy: Tensor,
    group_ids: Tensor,
    temperature: float,
    chunk_size: int,
) -> Tensor:
    """JS of each response row to the mean distribution of its group at the same position, in
    a vocabulary pass of its own (when the first pass must visit rows in sequence order)."""
    js = torch.zeros_like(entropy)
    for rows, blocks in _group_block_chunks(batch_index, time_index, group_ids, chunk_size):
        probabilities = _log_softmax_rows(
            head.rows(batch_index[rows], time_index[rows]), log_normaliser[rows], temperature
        ).exp_()
        js[rows] = _group_js_of_chunk(probabilities, entropy[rows], blocks)
    return js

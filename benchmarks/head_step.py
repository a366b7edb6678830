"""The LM head's part of a training step, as the speed benchmarks time it, on one batch of random
inputs: ``benchmarks/ict_cost.py`` (a), ``stats_profile.py`` and ``stats_speed.py --step`` call
these, so the three time the same step.

- :func:`ours`: GRPO's part (log-probs, loss ``sum(log_probs * advantage)``, the statistics given
  the positions it differentiates, ``ict.core.loss.loss_gradient_mask``, as our trainer's GRPO
  step gives them) or ICT's (plus the JS
  reference ICT needs, groups of G, the registry's selection at ratio 0.1 and ICT's loss,
  ``ict.core.loss.policy_loss`` with ICT's aggregation), statistics from the hidden states
  (``token_statistics_from_hidden``) or from the logits (``token_statistics`` on
  ``hidden @ W.T``, the matmul included);
- :func:`trl_head`: TRL 1.16's fused head (``trl.kernels.chunked_logprob.ChunkedLogProbFunction``
  with the arguments its ``GRPOTrainer`` passes: vocabulary chunks of 32,768, log-probs and
  entropy), loss ``sum(log_probs * advantage)``.

Each returns the loss; the caller runs its backward (and, on a GPU, the autocast around the
call). ``phase(name)``, a context manager per part (``statistics``, ``selection``, ``loss``),
lets ``stats_profile.py`` mark them for the profiler. Only the API that older checkouts of ict
also have is called (the gradient mask where the checkout has one), so ``stats_speed.py
--baseline`` can time one with this file.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # torch is imported where it is used: ict_cost.py's parent process runs without it
    from torch import Tensor

TRL_VOCAB_CHUNK = 32768  # trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE in TRL 1.16, what GRPOTrainer passes
ICT_OPTIONS = {"ratio": 0.1}  # the selector's options: ICT's defaults but the ratio, spelled out
Phase = Callable[[str], contextlib.AbstractContextManager[Any]]


def no_phase(name: str) -> contextlib.AbstractContextManager[Any]:
    """No mark (the default ``phase``)."""
    return contextlib.nullcontext()


@dataclass
class HeadBatch:
    """One batch of the head's inputs: ``hidden`` ``[R, T, d]`` and ``weight`` ``[V, d]`` (leaves
    that require grad), ``token_ids`` long ``[R, T]``, ``response_mask`` bool ``[R, T]`` (all
    true), ``advantages`` ``[R]`` and ``group_ids`` long ``[R]`` (groups of G consecutive rows)."""

    hidden: Tensor
    weight: Tensor
    token_ids: Tensor
    response_mask: Tensor
    advantages: Tensor
    group_ids: Tensor

    def clear_grads(self) -> None:
        """Drop the gradients a backward left on ``hidden`` and ``weight``."""
        self.hidden.grad = self.weight.grad = None


def head_batch(rows: int, length: int, width: int, vocab: int, device: str = "cpu", group_size: int = 8,
               seed: int = 0) -> HeadBatch:
    """Random inputs (seeded): hidden states N(0, 1), head weights N(0, 0.02^2) (Qwen2.5's
    ``initializer_range``), uniform ids, random advantages, ``rows`` rows in groups of
    ``group_size``."""
    import torch

    torch.manual_seed(seed)
    return HeadBatch(
        hidden=torch.randn(rows, length, width, device=device).requires_grad_(),
        weight=(torch.randn(vocab, width, device=device) * 0.02).requires_grad_(),
        token_ids=torch.randint(0, vocab, (rows, length), device=device),
        response_mask=torch.ones(rows, length, dtype=torch.bool, device=device),
        advantages=torch.randn(rows, device=device),
        group_ids=torch.arange(rows, device=device) // group_size)


def ours(batch: HeadBatch, method: str, source: str = "hidden", phase: Phase = no_phase,
         logits: Tensor | None = None, gradient_mask: bool = True, **tiles: Any) -> Tensor:
    """GRPO's (``method="grpo"``) or ICT's (``"ict"``) loss from the head, statistics from
    ``source`` ``"hidden"`` or ``"logits"`` (``hidden @ W.T``, or ``logits`` ``[R, T, V]`` when
    given: then the loss's backward stops at them); ``tiles`` go to the statistics (e.g.
    ``tile_size``). ``gradient_mask``: GRPO's statistics are given the positions its loss
    differentiates (where the library has ``loss_gradient_mask``; False: not, and the backward
    finds them with a device sync)."""
    from ict.core import loss as losses
    from ict.core.loss import PolicyLossConfig, policy_loss
    from ict.core.selectors import (
        SelectionInputs,
        method_train_options,
        required_js_references,
        resolve_options,
        select,
    )
    from ict.core.stats import token_statistics, token_statistics_from_hidden

    ict = method == "ict"
    options = resolve_options("ict", dict(ICT_OPTIONS)) if ict else {}
    references = required_js_references("ict", options) if ict else ()
    group_ids = batch.group_ids if ict else None
    ids, mask, advantages = batch.token_ids, batch.response_mask, batch.advantages
    if not ict and gradient_mask and hasattr(losses, "loss_gradient_mask"):
        tiles["gradient_mask"] = losses.loss_gradient_mask(mask, advantages, PolicyLossConfig())
    with phase("statistics"):
        if source == "hidden":
            stats = token_statistics_from_hidden(batch.hidden, batch.weight, ids, mask, 1.0, references,
                                                 group_ids=group_ids, **tiles)
        else:
            stats = token_statistics(batch.hidden @ batch.weight.T if logits is None else logits, ids, mask, 1.0,
                                     references, group_ids=group_ids, **tiles)
    if not ict:
        with phase("loss"):
            return (stats.log_probs * advantages[:, None]).sum()
    with phase("selection"):
        selection = select("ict", SelectionInputs(stats, mask, advantages=advantages, token_ids=ids,
                                                  group_ids=group_ids), **options)
    with phase("loss"):
        config = PolicyLossConfig(aggregation=method_train_options("ict")["aggregation"])
        return policy_loss(stats, stats.log_probs.detach(), advantages, mask, selection.mask, config)[0]


def trl_head(batch: HeadBatch, phase: Phase = no_phase) -> Tensor:
    """TRL 1.16's fused head (see the module doc) and its GRPO loss."""
    from trl.kernels.chunked_logprob import ChunkedLogProbFunction

    _, length, width = batch.hidden.shape
    with phase("statistics"):
        log_probs, *_ = ChunkedLogProbFunction.apply(
            batch.hidden.reshape(-1, width), batch.weight, None, batch.token_ids.reshape(-1), 1.0, TRL_VOCAB_CHUNK,
            None, 1.0, ("log_probs", "entropy"))
    with phase("loss"):
        return (log_probs * batch.advantages.repeat_interleave(length)).sum()

"""TRL 1.16's loss aggregations and the per-token weights that turn them into ict's
(:mod:`ict.integrations.trl`'s ``selection_denominator="ours"``): pure tensor functions; and the
factors TRL's loss multiplies its per-token loss by (:func:`trl_loss_factor`)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ict.core.loss import loss_counts

TRL_LOSS_TYPES = ("grpo", "sapo", "bnpo", "dr_grpo", "luspo", "dapo", "cispo", "vespo")
# loss_type -> ict aggregation whose "selected" denominator selection_denominator="ours" reproduces
# (dr_grpo: L = max_completion_length; luspo: L = 1, a mean over sequences of sequence sums).
OURS_AGGREGATION = {
    "grpo": "seq_mean_token_mean", "sapo": "seq_mean_token_mean", "bnpo": "token_mean",
    "dapo": "token_mean", "cispo": "token_mean", "dr_grpo": "seq_mean_token_sum_norm",
    "luspo": "seq_mean_token_sum_norm",
}


# the loss types whose per-token loss is PPO's clipped surrogate (TRL clips the ratio to
# [1 - epsilon_low, 1 + epsilon_high] and cuts the gradient outside it); cispo (a detached clamped
# weight), sapo (a soft gate) and vespo (gamma weights) cut no token's gradient by a ratio clip
TRL_CLIPPED_LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo", "luspo")

TRL_LOSS_TYPE_OF = {"seq_mean_token_mean": "grpo", "token_mean": "dapo", "seq_mean_token_sum_norm": "dr_grpo"}
"""ict aggregation -> the TRL loss_type that gives it under selection_denominator='ours' (token_mean:
TRL's default dapo)."""


def trl_aggregate(
    per_token: Tensor,
    mask: Tensor,
    loss_type: str,
    *,
    max_completion_length: int,
    num_items_in_batch: Tensor | float | None = None,
    num_processes: int = 1,
    accumulation_steps: int = 1,
    steps_per_generation: int = 1,
) -> Tensor:
    """A ``[B, T]`` per-token loss aggregated over ``mask`` as TRL 1.16's ``GRPOTrainer`` does
    for ``loss_type`` and divided by its gradient-accumulation normaliser: grpo/sapo: mean over
    sequences of per-sequence token means; bnpo: token mean of the micro-batch; dr_grpo:
    ``sum / (B * max_completion_length)``; luspo: mean over sequences of per-sequence sums (each
    then ``/ accumulation_steps``); dapo/cispo/vespo: ``sum / (num_items_in_batch / num_processes
    * accumulation_steps / steps_per_generation)``. In evaluation TRL neither accumulates nor
    splits: pass ``accumulation_steps = steps_per_generation = 1``."""
    mask = mask.to(per_token.dtype)
    masked = per_token * mask
    if loss_type in ("grpo", "sapo"):
        loss = (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif loss_type == "bnpo":
        loss = masked.sum() / mask.sum().clamp(min=1.0)
    elif loss_type == "dr_grpo":
        loss = masked.sum() / (per_token.size(0) * max_completion_length)
    elif loss_type == "luspo":
        loss = masked.sum(-1).mean()
    elif loss_type in ("dapo", "cispo", "vespo"):
        if num_items_in_batch is None:
            raise ValueError(f"loss_type {loss_type!r} needs num_items_in_batch")
        items = torch.as_tensor(num_items_in_batch, dtype=per_token.dtype, device=per_token.device)
        normaliser = items.clamp(min=1.0) / num_processes * accumulation_steps / steps_per_generation
        return masked.sum() / normaliser
    else:
        raise ValueError(f"unknown TRL loss_type {loss_type!r}; known: {', '.join(TRL_LOSS_TYPES)}")
    return loss / accumulation_steps


def ours_weights(selected: Tensor, response_mask: Tensor, loss_type: str, counts: Tensor | None = None) -> Tensor:
    """The ``[B, T]`` weight that turns TRL's ``loss_type`` aggregation of its per-token loss
    into ict's aggregation (:data:`OURS_AGGREGATION`, ``denominator="selected"``) on the
    ``selected`` tokens: ``selected * c`` with ``c = n_b / n_sel_b * B / S`` for grpo/sapo,
    ``N / N_sel`` for bnpo/dapo/cispo, 1 for dr_grpo/luspo. ``counts``: :func:`ict.core.loss.loss_counts`
    summed over the processes (grpo/sapo/dapo/cispo: DDP averages the processes' gradients, so
    with the global ``B / S`` the processes' mean is ``(1/S) sum`` over all rows, as in one
    process); None: this micro-batch's. bnpo always takes this micro-batch's ``N / N_sel``
    (TRL's bnpo normalises by the process's tokens)."""
    selected = selected.bool() & response_mask.bool()
    weights = selected.float()
    if loss_type in ("dr_grpo", "luspo"):
        return weights
    if loss_type not in ("grpo", "sapo", "bnpo", "dapo", "cispo"):
        raise ValueError(f"selection_denominator='ours' is not defined for TRL loss_type {loss_type!r} "
                         f"(defined for: {', '.join(OURS_AGGREGATION)}); use selection_denominator='trl'")
    if counts is None or loss_type == "bnpo":
        counts = loss_counts(selected, response_mask)
    # float32 as TRL's loss: exact below 2^24 tokens (above, the int64 sum's nearest float32)
    chosen, tokens, rows_with, rows = counts.float().unbind()
    if loss_type in ("grpo", "sapo"):
        per_row = selected.sum(-1, keepdim=True)
        return weights * (response_mask.sum(-1, keepdim=True) / per_row.clamp(min=1) * (rows / rows_with.clamp(min=1)))
    return weights * (tokens / chosen.clamp(min=1))


def trl_loss_factor(trainer: Any, log_probs: Tensor, old_log_probs: Tensor, mask: Tensor,
                    inputs: dict[str, Any]) -> Tensor | None:
    """What TRL 1.16's ``_compute_loss`` multiplies its per-token loss by after the policy term,
    so that KL-Cov's penalty, a term of that per-token loss, gets it too: the off-policy sequence
    mask ``[B, 1]`` (``off_policy_mask_threshold``; TRL's own ``get_off_policy_mask`` on the
    sampler's log-probs, else the old ones) and vLLM's importance-sampling ratio ``[B, T]``
    (``use_vllm`` with ``vllm_importance_sampling_correction``, not vespo). None when neither."""
    from trl import GRPOTrainer

    factor = None
    threshold = getattr(trainer, "off_policy_mask_threshold", None)
    if threshold is not None:
        advantages = inputs["advantages"]
        factor = GRPOTrainer.get_off_policy_mask(
            advantages=advantages.unsqueeze(1) if advantages.dim() == 1 else advantages,
            per_token_logps=log_probs, sampling_per_token_logps=inputs.get("sampling_per_token_logps", old_log_probs),
            mask=mask, off_policy_threshold=threshold)
    if (getattr(trainer, "use_vllm", False) and getattr(trainer, "vllm_importance_sampling_correction", False)
            and trainer.loss_type != "vespo"):
        ratio = inputs["importance_sampling_ratio"]
        factor = ratio if factor is None else factor * ratio
    return factor

"""TRL 1.16's loss aggregations and the per-token weights that turn them into ict's
(:mod:`ict.integrations.trl`'s ``selection_denominator="ours"``): pure tensor functions."""

from __future__ import annotations

import torch
from torch import Tensor

TRL_LOSS_TYPES = ("grpo", "sapo", "bnpo", "dr_grpo", "luspo", "dapo", "cispo", "vespo")
# loss_type -> ict aggregation whose "selected" denominator selection_denominator="ours" reproduces
# (dr_grpo: L = max_completion_length; luspo: L = 1, a mean over sequences of sequence sums).
OURS_AGGREGATION = {
    "grpo": "seq_mean_token_mean", "sapo": "seq_mean_token_mean", "bnpo": "token_mean",
    "dapo": "token_mean", "cispo": "token_mean", "dr_grpo": "seq_mean_token_sum_norm",
    "luspo": "seq_mean_token_sum_norm",
}


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


def ours_weights(selected: Tensor, response_mask: Tensor, loss_type: str,
                 global_counts: tuple[Tensor, Tensor] | None = None) -> Tensor:
    """The ``[B, T]`` weight that turns TRL's ``loss_type`` aggregation of its per-token loss
    into ict's aggregation (:data:`OURS_AGGREGATION`, ``denominator="selected"``) on the
    ``selected`` tokens of this micro-batch (see the module doc). ``global_counts`` =
    (response tokens, selected tokens) of the gathered micro-batch, for dapo/cispo."""
    selected = selected.bool() & response_mask.bool()
    weights = selected.float()
    if loss_type in ("grpo", "sapo"):
        per_row = selected.sum(-1, keepdim=True)
        rows_with = (per_row > 0).sum().clamp(min=1)
        scale = response_mask.sum(-1, keepdim=True) / per_row.clamp(min=1) * (selected.shape[0] / rows_with)
        return weights * scale
    if loss_type == "bnpo":
        return weights * (response_mask.sum() / selected.sum().clamp(min=1))
    if loss_type in ("dapo", "cispo"):
        tokens, chosen = global_counts if global_counts is not None else (response_mask.sum(), selected.sum())
        return weights * (tokens / chosen.clamp(min=1))
    if loss_type in ("dr_grpo", "luspo"):
        return weights
    raise ValueError(f"selection_denominator='ours' is not defined for TRL loss_type {loss_type!r} "
                     f"(defined for: {', '.join(OURS_AGGREGATION)}); use selection_denominator='trl'")

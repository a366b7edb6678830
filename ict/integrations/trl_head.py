"""What TRL 1.16's fused LM head already computed, read back for ict's statistics
(:mod:`ict.integrations.trl`): its log-normalisers, so that ict's scores need one vocabulary
pass instead of two."""

from __future__ import annotations

from typing import Any

from torch import Tensor

HEAD_MASS_TOLERANCE = 1e-5
"""Largest ``|sum_v p_v - 1|`` of a row with which the scores keep TRL's fused head's log Z."""


def fused_head_normalisers(output: Any) -> Tensor | None:
    """The log-normalisers ``log Z = logsumexp(logits / T)`` ``[B, L]`` (0 outside the labels;
    detached) that TRL 1.16's fused LM head computed for ``output`` (its ``FusedCausalLMOutput``),
    read from its autograd node ``ChunkedLogProbFunctionBackward`` (saved for its backward); None
    where there is none (no gradient, or another TRL)."""
    log_probs, mask = getattr(output, "log_probs", None), getattr(output, "label_mask", None)
    if log_probs is None or mask is None or log_probs.grad_fn is None:
        return None
    frontier, seen = [log_probs.grad_fn], set()
    for _ in range(8):  # the head's node is a few view / scatter nodes below the output
        following = []
        for node in frontier:
            if node is None or id(node) in seen:
                continue
            seen.add(id(node))
            if type(node).__name__ == "ChunkedLogProbFunctionBackward":
                saved = node.saved_tensors
                if len(saved) < 5:
                    return None
                log_z = saved[4].detach().float()
                if log_z.numel() == mask.numel():
                    return log_z.view(mask.shape).masked_fill(~mask, 0.0)
                if log_z.numel() == int(mask.sum()):
                    return log_z.new_zeros(mask.shape).masked_scatter(mask, log_z)
                return None
            following.extend(child for child, _ in node.next_functions)
        frontier = following
    return None

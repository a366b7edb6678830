"""The policy's forward pass over a rollout batch: the logits (or the final hidden states) that
produced each response token.

`response_logits(model, batch)` returns ``[B, T, V]`` where ``logits[:, t]`` is the distribution
that produced ``batch.response_ids[:, t]``; `response_hidden(model, batch)` returns ``[B, T, d]``,
the final hidden states those logits are computed from (``logits = hidden @ W.T + b`` with the
head of `ict.models.loading.linear_lm_head`, which it checks), by running the model's decoder
(``model.get_decoder()``, also through a peft wrapper) without its LM head: with
`ict.core.stats.token_statistics_from_hidden` no ``[B, T, V]`` tensor is ever built. Both run the
same code (`plain_response_outputs`, `shared_prompt_response_outputs`; ``hidden`` picks the
module and its output), in two ways, equal within float32 rounding (tested):

- plain: one forward of every row's ``prompt + response`` (``shared_prompt=False``);
- shared prompt (default): the G completions of a prompt share it, so each distinct prompt (a run
  of adjacent rows with identical prompt tokens) is run once, with ``use_cache``; its key/value
  cache is expanded to the run's rows by an index (which back-propagates: the prompt's gradient
  is the sum over its completions), and only the response tokens are run per row, attending to
  that cache. The prompt's cost is paid once per group, forward and backward. The outputs of the
  prompt's last position (they produce response token 0) come from the prompt pass.

The shared path needs a model whose forward accepts a cache (``past_key_values``, renamed
``cache`` in newer transformers: `cache_argument`; every Hugging Face decoder, peft wrappers
included) and is skipped (plain path) under gradient checkpointing,
which does not combine with a cache carrying gradients, and for a hybrid model whose cache holds
a linear-attention, Mamba or convolution state (`ict.models.rollout.prompt_cache_shareable`).
"""

from __future__ import annotations

from typing import Any

import torch

from ict.models.loading import linear_lm_head
from ict.models.rollout import (
    RolloutBatch,
    cache_argument,
    left_padded_position_ids,
    output_cache,
    prompt_cache_shareable,
)


def prompt_runs(batch: RolloutBatch) -> torch.Tensor:
    """``[B]`` index of each row's distinct prompt: adjacent rows with identical prompt tokens
    and mask share one (a group of G completions, or the part of one in a micro-batch)."""
    prompts = batch.input_ids[:, : batch.prompt_length]
    masks = batch.attention_mask[:, : batch.prompt_length]
    new_run = torch.ones(prompts.shape[0], dtype=torch.bool, device=prompts.device)
    if prompts.shape[0] > 1:
        same = (prompts[1:] == prompts[:-1]).all(dim=1) & (masks[1:] == masks[:-1]).all(dim=1)
        new_run[1:] = ~same
    return new_run.long().cumsum(0) - 1


def _forward(model: Any, hidden: bool, keep: int, **inputs: Any) -> tuple[torch.Tensor, Any]:
    """One forward of `model` (``hidden``: of its decoder, no LM head): the outputs of the last
    `keep` positions, ``[B, keep, V]`` logits or ``[B, keep, d]`` final hidden states, and the
    key/value cache."""
    if hidden:
        out = model.get_decoder()(**inputs)
        return out.last_hidden_state[:, -keep:], output_cache(out)
    out = model(**inputs, logits_to_keep=keep)
    return out.logits, output_cache(out)


def plain_response_outputs(model: Any, batch: RolloutBatch, hidden: bool = False) -> torch.Tensor:
    """One forward of every row's prompt + response; keeps only the response positions."""
    length = batch.response_ids.shape[1]
    # Keeping T+1 positions keeps P-1 .. P+T-1; drop the last (it predicts past the end).
    outputs, _ = _forward(model, hidden, length + 1, input_ids=batch.input_ids,
                          attention_mask=batch.attention_mask,
                          position_ids=left_padded_position_ids(batch.attention_mask), use_cache=False)
    outputs = outputs[:, :-1]
    assert outputs.shape[1] == length
    return outputs


def shared_prompt_response_outputs(model: Any, batch: RolloutBatch, hidden: bool = False) -> torch.Tensor:
    """The same outputs with each distinct prompt run once (see the module docstring)."""
    run_of_row = prompt_runs(batch)
    first_rows = torch.nonzero(torch.diff(run_of_row, prepend=run_of_row.new_tensor([-1]))).squeeze(-1)
    prompt_length = batch.prompt_length
    prompt_mask = batch.attention_mask[first_rows, :prompt_length]
    prompt_outputs, cache = _forward(model, hidden, 1, input_ids=batch.input_ids[first_rows, :prompt_length],
                                     attention_mask=prompt_mask, position_ids=left_padded_position_ids(prompt_mask),
                                     use_cache=True)
    cache.batch_select_indices(run_of_row)  # [U, ...] -> [B, ...]; differentiable indexing
    positions = left_padded_position_ids(batch.attention_mask)[:, prompt_length:]
    length = batch.response_ids.shape[1]
    response_outputs, _ = _forward(model, hidden, length, input_ids=batch.response_ids,
                                   attention_mask=batch.attention_mask, position_ids=positions,
                                   use_cache=True, **{cache_argument(model): cache},
                                   cache_position=torch.arange(prompt_length, batch.input_ids.shape[1],
                                                               device=batch.input_ids.device))
    first = prompt_outputs[run_of_row]  # produces response token 0
    return torch.cat([first, response_outputs[:, :-1]], dim=1)


def response_outputs(model: Any, batch: RolloutBatch, shared_prompt: bool = True,
                     hidden: bool = False) -> torch.Tensor:
    """`response_logits` (``hidden=False``) or `response_hidden` (``hidden=True``)."""
    checkpointing = any(getattr(module, "gradient_checkpointing", False) for module in model.modules())
    shares = (shared_prompt and not checkpointing and batch.input_ids.shape[0] > 1
              and prompt_cache_shareable(model))
    if shares and int(prompt_runs(batch)[-1]) + 1 < batch.input_ids.shape[0]:
        return shared_prompt_response_outputs(model, batch, hidden)
    return plain_response_outputs(model, batch, hidden)


def response_logits(model: Any, batch: RolloutBatch, shared_prompt: bool = True) -> torch.Tensor:
    """Logits ``[B, T, V]`` of the distributions that produced the response tokens.

    ``shared_prompt``: run each distinct prompt once (exact; faster when rows share prompts)."""
    return response_outputs(model, batch, shared_prompt, hidden=False)


def response_hidden(model: Any, batch: RolloutBatch, shared_prompt: bool = True) -> torch.Tensor:
    """Final hidden states ``[B, T, d]`` whose LM-head logits produced the response tokens:
    ``response_hidden(...) @ W.T + b == response_logits(...)`` with ``W, b =
    ict.models.loading.linear_lm_head(model)`` (checked here: a model whose head is not plain linear is
    refused with a UsageError). ``shared_prompt`` as in `response_logits`."""
    linear_lm_head(model)
    return response_outputs(model, batch, shared_prompt, hidden=True)

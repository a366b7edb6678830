"""Every ict token selector inside TRL's ``GRPOTrainer`` (TRL 1.15 - 1.16).

Usage::

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer
    args = ICTGRPOConfig(output_dir="out", token_selector="ict:reference=group_mean,ratio=0.1")
    trainer = ICTGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=...)

How it plugs in (least invasive: two overridden methods, no copied TRL code):

- TRL's ``_compute_loss`` runs the policy forward once with its fused LM head (no ``[N, V]``
  logits). A forward hook on the model's backbone keeps the detached final hidden states of that
  same forward (and one on the model its per-token log-probs, used by KL-Cov's penalty); no
  second forward of the policy runs.
- TRL's mask hook ``get_high_entropy_mask`` (the ``top_entropy_quantile`` path) is replaced by our
  selection; the trainer sets ``top_entropy_quantile`` below 1 internally so TRL calls it.
- Selection population: the hidden states, completion ids, masks and advantages of the current
  micro-batch of *every* process are gathered; each process computes the statistics of the whole
  gathered micro-batch with :func:`ict.core.stats.token_statistics_from_hidden` (no gradient; the
  loss keeps TRL's own log-probs), runs the selector on it and keeps its own rows. So a ``batch``
  ranking covers the tokens of all processes (like TRL's ``top_entropy_quantile``) and every
  process gets exactly the mask our selector returns on the gathered tensor.
- ``group_mean`` needs whole groups: rows with identical prompt token ids form a group. TRL's
  ``RepeatSampler`` keeps a group inside one *global* generation batch but spreads it over
  processes and, with ``steps_per_generation > 1``, over shuffled micro-batches; so a
  ``group_mean`` reference requires ``steps_per_generation == 1`` (checked at start-up) and the
  gather above makes groups whole across processes. The group's distributions are then exact.
- Loss denominator: ``selection_denominator="ours"`` (default) normalises the policy loss by the
  number of *selected* tokens (ict's ``denominator="selected"``): the mask passed to TRL is
  ``selected * N / N_sel`` with ``N`` and ``N_sel`` counted over the population the chosen TRL
  ``loss_type`` normalises over (per sequence for grpo/sapo, the local micro-batch for bnpo, the
  gathered micro-batch for dapo/cispo/vespo/dr_grpo). ``"trl"`` passes the 0/1 mask, so the
  denominators stay TRL's completion-token counts (TRL's ``top_entropy_quantile`` convention).
- Per-token KL penalty (KL-Cov, ``Selection.kl_penalty``): TRL has no hook on its per-token
  loss, so ``_compute_loss`` adds, after TRL's loss, ``kl_penalty_t * |log p_t - old log p_t|``
  (:func:`ict.core.loss.kl_penalty_term`) times the mask weight above, aggregated over TRL's mask with
  TRL's normaliser for the ``loss_type`` and divided by its gradient-accumulation normaliser
  exactly as TRL's own loss (:func:`trl_aggregate`): the sum equals TRL's loss with the penalty in
  its per-token loss, as in :func:`ict.core.loss.policy_loss`. ``log p`` is the log-prob TRL's own
  surrogate uses (the fused head's output of the same forward, with its gradient), ``old log p``
  TRL's ``old_per_token_logps`` (absent when TRL skips it, i.e. one update per generation: then
  the detached ``log p``, a zero term with zero gradient). Like TRL's ``beta`` KL term, the
  penalty is not multiplied by TRL's off-policy sequence mask nor its vLLM importance-sampling
  ratio. KL-Cov selects every response token, so both ``selection_denominator`` give weight 1.
- Metrics added to TRL's logger: ``ict/selected_fraction``, ``ict/entropy_selected``,
  ``ict/entropy_unselected`` (means over the gathered micro-batch); with a KL penalty also
  ``ict/kl_penalty`` (its contribution to the step's loss, mean over processes).

Not supported: models whose LM head is not a plain linear layer (logit scale, soft-capping,
LoRA on ``lm_head``: refused at start-up by :func:`ict.training.models.linear_lm_head`),
FSDP / DeepSpeed ZeRO-3 sharded LM heads (the full ``[V, d]`` weight must be readable on each
process), vision-language inputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from trl import GRPOConfig, GRPOTrainer

from ict.core.errors import UsageError
from ict.core.loss import kl_penalty_term
from ict.core.selectors import SelectionInputs, required_js_references, select
from ict.core.stats import token_statistics_from_hidden
from ict.integrations import parse_token_selector
from ict.training.models import linear_lm_head

SELECTION_DENOMINATORS = ("ours", "trl")


@dataclass
class ICTGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus ict's token selection (every other field is TRL's)."""

    token_selector: str = field(
        default="ict:reference=group_mean,ratio=0.1",
        metadata={"help": "Registered ict selector and options, 'name:key=value,...' "
                  "(e.g. 'ict:reference=group_mean,ratio=0.1', 'entropy:ratio=0.2', 'all')."},
    )
    selection_denominator: str = field(
        default="ours",
        metadata={"help": "'ours': the loss is normalised by the selected tokens; 'trl': by TRL's "
                  "completion-token counts (TRL's top_entropy_quantile convention)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.selection_denominator not in SELECTION_DENOMINATORS:
            raise ValueError(
                f"selection_denominator must be 'ours' or 'trl', got {self.selection_denominator!r}")
        parse_token_selector(self.token_selector)


TRL_LOSS_TYPES = ("grpo", "sapo", "bnpo", "dr_grpo", "luspo", "dapo", "cispo", "vespo")


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


def group_ids_from_prompts(prompt_ids: Tensor, prompt_mask: Tensor) -> Tensor:
    """``[B]`` ids, equal for rows whose (unpadded) prompt tokens are equal."""
    keys = [tuple(row[mask.bool()].tolist()) for row, mask in zip(prompt_ids, prompt_mask)]
    index: dict[tuple, int] = {}
    return torch.tensor([index.setdefault(key, len(index)) for key in keys], dtype=torch.long)


class ICTGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose loss updates only the tokens an ict selector picks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = self.args
        spec = getattr(config, "token_selector", ICTGRPOConfig.token_selector)
        self.selection_denominator = getattr(config, "selection_denominator", "ours")
        self.selector_name, self.selector_options = parse_token_selector(spec)
        self.js_references = required_js_references(self.selector_name, self.selector_options)
        if self.top_entropy_quantile < 1.0:
            raise ValueError("top_entropy_quantile and token_selector both pick tokens; leave "
                             "top_entropy_quantile at 1.0")
        if "group_mean" in self.js_references and config.steps_per_generation != 1:
            raise ValueError("a group_mean reference needs whole groups in each micro-batch: set "
                             "steps_per_generation=1 (and gradient_accumulation_steps=1)")
        if "ref" in self.js_references:
            raise ValueError("the 'ref' JS reference is not supported inside TRL; use group_mean, "
                             "seq_mean or prev")
        try:
            linear_lm_head(self.accelerator.unwrap_model(self.model), "ict.integrations.trl", "")
        except UsageError as error:  # TRL's configuration errors are ValueErrors
            raise ValueError(str(error)) from None
        # TRL calls get_high_entropy_mask (overridden below) only when this is below 1.
        self.top_entropy_quantile = 0.0
        self._capture: list[Tensor] | None = None
        self._log_probs: list[Tensor] | None = None
        self._loss_inputs: dict[str, Tensor] | None = None
        self._kl_penalty: tuple[Tensor, Tensor, Tensor] | None = None
        unwrapped = self.accelerator.unwrap_model(self.model)
        unwrapped.base_model.register_forward_hook(self._keep_hidden)
        unwrapped.register_forward_hook(self._keep_log_probs)

    def _keep_hidden(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._capture is not None:
            self._capture.append(output.last_hidden_state.detach())

    def _keep_log_probs(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        """The fused head's per-token log-probs (with gradient): TRL's ``per_token_logps``."""
        if self._log_probs is not None and getattr(output, "log_probs", None) is not None:
            self._log_probs.append(output.log_probs)

    def _compute_loss(self, model, inputs):  # type: ignore[override]
        self._capture, self._log_probs, self._loss_inputs, self._kl_penalty = [], [], inputs, None
        try:
            loss = super()._compute_loss(model, inputs)
            if self._kl_penalty is not None:
                if not self._log_probs:
                    raise RuntimeError("ICTGRPOTrainer: TRL's per-token log-probs were not captured "
                                       "(the fused LM head's output has no log_probs)")
                length = inputs["completion_ids"].shape[1]
                # TRL's per_token_logps: outputs.log_probs[:, -logits_to_keep:] of each chunk
                log_probs = torch.cat(self._log_probs, dim=0)[:, -length:]
                old = inputs.get("old_per_token_logps")
                loss = loss + self.kl_penalty_loss(
                    log_probs, log_probs.detach() if old is None else old, inputs)
            return loss
        finally:
            self._capture, self._log_probs, self._loss_inputs, self._kl_penalty = None, None, None, None

    def kl_penalty_loss(self, log_probs: Tensor, old_log_probs: Tensor, inputs: dict[str, Any]) -> Tensor:
        """The selection's per-token KL penalty as a term of TRL's loss (see the module doc)."""
        if self._kl_penalty is None:
            raise RuntimeError("ICTGRPOTrainer: no KL penalty selected for this micro-batch")
        penalty, weights, mask = self._kl_penalty
        training = self.model.training
        accumulation = self.current_gradient_accumulation_steps if training else 1
        term = trl_aggregate(
            kl_penalty_term(log_probs, old_log_probs, penalty) * weights, mask, self.loss_type,
            max_completion_length=self.max_completion_length,
            num_items_in_batch=inputs.get("num_items_in_batch"),
            num_processes=self.accelerator.num_processes, accumulation_steps=accumulation,
            steps_per_generation=self.args.steps_per_generation if training else 1,
        )
        contribution = self.accelerator.gather(term.detach().reshape(1) * accumulation).mean()
        self._metrics["train" if training else "eval"]["ict/kl_penalty"].append(float(contribution))
        return term

    def _gather_rows(self, tensor: Tensor, pad: float | int = 0) -> Tensor:
        """Concatenate the ``[B, ...]`` tensors of all processes along rows (dim 1 padded)."""
        if tensor.dim() > 1:
            tensor = self.accelerator.pad_across_processes(tensor, dim=1, pad_index=pad)
        return self.accelerator.gather(tensor.contiguous())

    def get_high_entropy_mask(self, entropies: Tensor, mask: Tensor, threshold: float) -> Tensor:
        """Our selection for this micro-batch; a float weight ``[B, T]`` (see the module doc)."""
        if self._loss_inputs is None or not self._capture:
            raise RuntimeError("ICTGRPOTrainer: selection requested outside _compute_loss")
        inputs = self._loss_inputs
        completion_ids = inputs["completion_ids"]
        local_rows, length = completion_ids.shape
        hidden = torch.cat(self._capture, dim=0)[:, -length - 1 : -1]
        weight, bias = linear_lm_head(self.accelerator.unwrap_model(self.model), "ict.integrations.trl", "")
        rows = self.accelerator.gather(torch.tensor([local_rows], device=mask.device))
        if (rows != local_rows).any():
            raise RuntimeError("ICTGRPOTrainer needs the same micro-batch size on every process")
        start = self.accelerator.process_index * local_rows
        advantages = inputs["advantages"]
        gathered = {
            "hidden": self._gather_rows(hidden),
            "ids": self._gather_rows(completion_ids),
            "mask": self._gather_rows(mask.to(torch.long)),
            "advantages": self._gather_rows(advantages.float()),
        }
        group_ids = None
        if "group_mean" in self.js_references:
            prompt_ids = self._gather_rows(inputs["prompt_ids"])
            prompt_mask = self._gather_rows(inputs["prompt_mask"].to(torch.long))
            group_ids = group_ids_from_prompts(prompt_ids, prompt_mask).to(mask.device)
            gathered["group_ids"] = group_ids
        response_mask = gathered["mask"].bool()
        with torch.no_grad():
            stats = token_statistics_from_hidden(
                gathered["hidden"], weight.detach(), gathered["ids"], response_mask,
                temperature=self.temperature, js_references=self.js_references,
                group_ids=group_ids, lm_head_bias=None if bias is None else bias.detach(),
            )
        selection = select(
            self.selector_name,
            SelectionInputs(stats=stats, response_mask=response_mask,
                            advantages=gathered["advantages"], token_ids=gathered["ids"]),
            **self.selector_options,
        )
        selected = selection.mask
        self._log_selection(stats.entropy, response_mask, selected)
        self.on_selection({**gathered, "stats": stats, "selected": selected,
                           "kl_penalty": selection.kl_penalty, "start": start})
        own = slice(start, start + local_rows)
        weights = self._denominator_weights(selected, response_mask, own)
        weights = weights[own, : mask.shape[1]].to(entropies.dtype)
        if selection.kl_penalty is not None:
            self._kl_penalty = (selection.kl_penalty[own, : mask.shape[1]], weights, mask)
        return weights

    def _denominator_weights(self, selected: Tensor, response_mask: Tensor, own: slice) -> Tensor:
        """0/1 mask (``"trl"``) or ``selected * N / N_sel`` over TRL's normalising population."""
        weights = selected.float()
        if self.selection_denominator == "trl":
            return weights
        if self.loss_type in ("grpo", "sapo", "luspo"):
            scale = response_mask.sum(-1, keepdim=True) / selected.sum(-1, keepdim=True).clamp(min=1)
            return weights * scale
        if self.loss_type == "bnpo":
            scale = response_mask[own].sum() / selected[own].sum().clamp(min=1)
            return weights * scale
        return weights * (response_mask.sum() / selected.sum().clamp(min=1))

    def _log_selection(self, entropy: Tensor, response_mask: Tensor, selected: Tensor) -> None:
        mode = "train" if self.model.training else "eval"
        unselected = response_mask & ~selected
        total = int(response_mask.sum())
        metrics = self._metrics[mode]
        metrics["ict/selected_fraction"].append(float(selected.sum()) / total if total else math.nan)
        metrics["ict/entropy_selected"].append(_masked_mean(entropy, selected))
        metrics["ict/entropy_unselected"].append(_masked_mean(entropy, unselected))

    def on_selection(self, record: dict[str, Any]) -> None:
        """Called once per micro-batch with the gathered tensors, ``stats``, ``selected`` and
        ``kl_penalty`` (``None`` for mask-only selectors; identical on every process); ``start``
        is this process's first row. No-op; override to inspect the selection."""


def _masked_mean(values: Tensor, mask: Tensor) -> float:
    count = int(mask.sum())
    return float((values * mask).sum()) / count if count else math.nan

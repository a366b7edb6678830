"""Every ict token selector inside verl 0.9 (FSDP engine), as the policy loss ``"ict"``.

Usage (verl's own launcher and its default v1 trainer; the overrides load this module in every
Ray process, verl's trainer included)::

    python -m verl.trainer.main_ppo ... \\
        actor_rollout_ref.actor.policy_loss._target_=ict.integrations.verl.ICTPolicyLossConfig \\
        actor_rollout_ref.actor.policy_loss.loss_mode=ict \\
        +actor_rollout_ref.actor.policy_loss.ict_selector="'ict:ratio=0.1'" \\
        +ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=ict.integrations.verl

How it plugs in (no verl file is changed or copied):

- Loading: hydra instantiates ``actor.policy_loss`` from its ``_target_``; pointing it at
  :class:`ICTPolicyLossConfig` (verl's ``PolicyLossConfig`` plus the ``ict_*`` fields below)
  imports this module in every process that builds the actor config, the FSDP workers included.
  Importing it (1) registers the policy loss ``"ict"`` with verl's ``register_policy_loss`` and
  (2) wraps two methods of ``FSDPEngineWithLMHead``: ``prepare_model_outputs`` (which turns the
  actor's logits into log-probs / entropy) and ``forward_backward_batch``. Each wrapper runs
  verl's method unchanged and does extra work only for a training pass whose loss is
  ``ppo_loss`` with ``loss_mode="ict"``.
- Score: in that wrapper the logits of the micro-batch exist (``[1, nnz, V]`` packed with
  ``use_remove_padding``, else ``[B, S, V]``). A ``[B, T]`` map of each response token's logits
  row follows verl's own slicing rule (``no_padding_2_padding``'s, for all rows at once, so position
  ``t`` of every completion is column ``t``: group positions survive remove-padding), and
  :func:`ict.core.stats.token_statistics` reads those rows in place (``row_index``) to compute
  log-probs, entropy, Renyi-2 and the selector's JS scores without gradient, at the rollout
  temperature in float32 (:mod:`ict.integrations.verl_selection`); the selectors read verl's
  log-probs instead of ict's, those of its loss and ``old_log_probs`` (verl scales bf16 logits by
  the temperature in bf16), so the ratio and probabilities they see are the loss's. ``group_mean``
  groups are the rows with equal verl ``uid`` (the ``rollout.n`` completions of one prompt). A
  row is finished (the absorbing references' end rows) when its whole response, tool results
  included, ends before the response cap: verl's ``response_mask`` is 0 on multi-turn tool
  results, so it alone would read a row cut by the cap inside a tool result as finished
  (:func:`ict.integrations.verl_selection.response_rows`).
- Whole groups under verl's v1 trainer: v1 balances single sequences across the data-parallel
  ranks (``PPOTrainer._balance_batch``), which splits a prompt's completions. The
  ``VERL_USE_EXTERNAL_MODULES`` override imports this module in verl's trainer process, where it
  wraps that method: for a selector that needs groups (:func:`needs_whole_groups`) it balances
  whole prompts with verl's own ``get_seqlen_balanced_partitions`` (:func:`group_balanced_order`),
  so every rank's share, mini-batch and micro-batch (sizes multiples of ``rollout.n``, no shuffle)
  holds whole groups and the scores below are exact; otherwise verl's balancing is unchanged.
  Under ``trainer.use_v1=False`` ``trainer.balance_batch=False`` keeps the groups together.
- Population: a selector ranks the whole mini-batch, as in ``ict train``. When a rank's
  mini-batch share is one micro-batch, the ``[B, T]`` statistics, masks, advantages, old
  log-probs, token ids and uids of every data-parallel rank are all-gathered right there (scores
  only, never distributions; padded first to the widest response of all ranks, since v1 pads each
  micro-batch to its own longest); each rank runs :func:`ict.core.selectors.select` on the gathered
  mini-batch and keeps its rows. When it is several micro-batches (``ppo_micro_batch_size_per_gpu``
  smaller, or ``use_dynamic_bsz``), a wrapper of the engine's ``forward_backward_batch`` first
  runs verl's own forward-only pass over the same micro-batches with a scoring loss (one extra
  no-grad forward per mini-batch, like ``ict train``'s scoring pass), selects once on the gathered
  mini-batch, then runs the training pass, whose micro-batches take their rows of that selection.
  Randomised selectors get one generator seeded identically on every rank and after a resume
  (:func:`selection_seed` of the training step, read from the actor's LR scheduler), and draw on
  the mini-batch's rows in its own order (``use_dynamic_bsz`` reorders them into micro-batches).
- Loss: verl's unchanged ``ppo_loss`` calls ``get_policy_loss_fn("ict")``, i.e.
  :func:`compute_policy_loss_ict`, with verl's differentiable ``log_prob``; it takes the
  selection of this micro-batch and returns :func:`ict.core.loss.policy_loss` (one implementation of
  the clipped surrogate, aggregation and KL-Cov penalty) times ``dp * w_micro / W``, where ``w``
  is :func:`ict.core.loss.aggregation_weight` (selected tokens for ``token_mean``) and ``W`` its sum
  over the mini-batch on all ranks: verl sums micro-batch gradients and FSDP averages ranks, so
  the update is that of our trainer's loss on the whole mini-batch. With one rank and one
  micro-batch the returned loss *is* ``policy_loss``. Its metrics (verl's ``actor/*``):
  ``actor/ict_selected_fraction``, the clip fraction and entropy of the selected tokens, their JS
  to ICT's default reference (``actor/ict_js_score_selected``, as ``ict train``'s
  ``js_score_selected``) and the selector's other scores (:func:`selected_score_metrics`), and
  ict's paper diagnostics of the selection (:func:`selection_diagnostics`). verl averages each
  key's values over the micro-batches and the ranks unweighted (``Metric.aggregate_dp``), so each
  micro-batch reports its share of the mini-batch's figure (:func:`reported_metrics`): the loss's
  token means times ``K n_micro / N`` (0 for a micro-batch without such tokens), the diagnostics
  computed once on the gathered mini-batch; verl's figure is then the mini-batch's token mean, as
  ``ict train``'s, however verl cuts it. A figure undefined on the whole mini-batch (e.g. no
  selected token) is left out on every micro-batch and rank (aggregate_dp needs equal counts on all
  ranks), so a step's figure is the mean over its mini-batches that define it.
- Options map from verl's actor config: ``clip_ratio_low`` / ``clip_ratio_high`` -> clip range,
  ``loss_agg_mode`` ``token-mean`` / ``seq-mean-token-mean`` / ``seq-mean-token-sum-norm`` ->
  our aggregations (``loss_scale_factor`` -> ``max_response_length``; unset: the mini-batch's
  widest response over all ranks, the response cap in v0 as in verl, where v1's vanilla loss takes
  each micro-batch's own longest and so depends on the split); verl's dual clip
  (``clip_ratio_c``) only with ``ict_dual_clip=True`` (ours is off by default). verl's
  ``entropy_coeff`` and ``use_kl_loss`` terms are added by verl over all response tokens (our
  ``regularizer_tokens="all"``), aggregated by verl's ``loss_agg_mode`` whatever ``ict_aggregation``.

Requirements (each refused with a one-line error naming the setting): ``group_mean`` needs the
``rollout.n`` rows of each uid in one micro-batch (v1: this module loaded in the trainer, no
padding rows, ``ppo_mini_batch_size`` a multiple of the GPU count; v0: ``trainer.balance_batch=False``;
both: ``actor.shuffle=False``, ``use_dynamic_bsz=False``, ``ppo_micro_batch_size_per_gpu`` a
multiple of ``rollout.n``); materialised logits (``use_fused_kernels=False``); no Ulysses sequence
parallelism; one temperature; no rollout importance weights; with
``ict_aggregation=loss_agg_mode``, ``loss_agg_mode`` not ``token-sum`` / ``seq-mean-token-sum``
(otherwise ict's loss does not read it, and any of verl's is accepted); the fields only verl's own
losses read (``kl_cov_ratio``, ``ppo_kl_coef``, ``clip_cov_*``, ``dro_beta``) at verl's defaults
(:func:`ict.integrations.verl_selection.unread_verl_field`). Fused kernels, Ulysses
and actor loss settings ict's loss cannot take (this ``loss_agg_mode``, clip ratios outside ict's
ranges) are refused already by verl's launch validation (``validate_config``, before Ray starts:
:func:`actor_refusal`), rollout importance weights when verl's trainer is constructed
(:func:`rollout_weights_refusal`); the hook and the loss refuse them again when they meet them.

Not supported: Megatron (vocabulary-parallel logits would need an all-reduce of the per-shard
sums; the loss refuses to run without this module's FSDP hook), the ``ref`` JS reference.
``pad_to_length`` (a bucket-padded packed sequence) is supported: the padding rows are stripped
before scoring, as verl's own output path does.
Memory: no copy of the response logits (the statistics' tiles gather their rows from verl's).
"""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch
import verl
from torch import Tensor
from verl.trainer.ppo.core_algos import register_policy_loss
from verl.utils import tensordict_utils as tu
from verl.utils.seqlen_balancing import (
    calculate_workload,
    get_seqlen_balanced_partitions,
    log_seqlen_unbalance,
)
from verl.workers.config import FSDPActorConfig
from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

from ict.core.errors import UsageError, is_integer
from ict.core.loss import TOKEN_SETS, policy_loss
from ict.core.selectors import ICT_DEFAULT_REFERENCE, required_js_references
from ict.core.stats import (
    TokenStatistics,
    needs_groups,
    needs_reference_logits,
    parse_tile_size,
)
from ict.integrations import ranks_within_groups
from ict.integrations.verl_selection import (  # noqa: F401 (also this module's API, as before the split)
    AGGREGATIONS,
    DEFAULT_SELECTOR,
    ICT_SCORE_KEYS,
    ROW_KEY,
    V1_OVERRIDE,
    MicroBatchScores,
    MicroBatchSelection,
    _next_selection_seed,
    _selections,
    _world,
    loss_config_of,
    method_options,
    parsed_selector,
    response_row_index,
    score_micro_batch,
    select_mini_batch,
    selection_diagnostics,
    selection_seed,
    training_step,
    unread_verl_field,
)

try:  # verl's default (v1) trainer; it imports transfer_queue (the verl-core extra)
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer as V1Trainer
except ImportError:  # then v1 cannot run in this environment either
    V1Trainer = None
try:  # the older (v0) trainer, trainer.use_v1=False
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer as V0Trainer
except ImportError:  # then v0 cannot run in this environment either
    V0Trainer = None

if not str(getattr(verl, "__version__", "")).startswith("0.9."):
    warnings.warn(f"ict.integrations.verl is written for verl 0.9 (found {getattr(verl, '__version__', '?')}): "
                  "its engine hook may not match", stacklevel=2)

LOSS_NAME = "ict"
FUSED_KERNELS_REFUSAL = "loss_mode=ict needs the actor's logits: set actor_rollout_ref.model.use_fused_kernels=False"
ULYSSES_REFUSAL = ("loss_mode=ict does not support Ulysses sequence parallelism: set "
                   "ulysses_sequence_parallel_size=1")
ROLLOUT_WEIGHTS_REFUSAL = ("loss_mode=ict does not apply rollout importance weights: disable "
                           "algorithm.rollout_correction")


def actor_refusal(actor: Any, model_config: Any) -> str | None:
    """The one-line refusal of verl actor settings ict's engine hook cannot run with, or None:
    fused kernels (``model_config.use_fused_kernels``, what verl's ``TrainingWorker`` hands the
    engine) and Ulysses sequence parallelism (``actor.engine.ulysses_sequence_parallel_size > 1``,
    what verl's FSDP engine reads; the actor's own field is copied there). The hook refuses both
    again at the first micro-batch (:func:`_prepare_model_outputs`). Also the actor's loss
    settings ict's loss cannot take (:func:`loss_config_of`: clip ratios, ``clip_ratio_c`` under
    ``ict_dual_clip``, ``ict_dual_clip`` beside ``clip_cov``, ``loss_scale_factor``,
    ``loss_agg_mode`` under ``ict_aggregation=loss_agg_mode``), which the loss would meet only at
    the first training step."""
    if model_config is not None and model_config.get("use_fused_kernels", False):
        return FUSED_KERNELS_REFUSAL
    if int(getattr(getattr(actor, "engine", None), "ulysses_sequence_parallel_size", 1) or 1) > 1:
        return ULYSSES_REFUSAL
    try:
        loss_config_of(actor, actor.loss_agg_mode)
    except UsageError as error:
        return str(error)
    except ValueError as error:  # ict.core.loss's names: clip_low/high <- clip_ratio_low/high
        return (f"loss_mode=ict cannot use the actor's clip_ratio(_low/_high), clip_ratio_c or "
                f"loss_scale_factor: {error}")
    return None


def rollout_weights_refusal(config: Any) -> str | None:
    """The refusal of rollout importance weights for ``loss_mode=ict`` in verl's whole trainer
    config, or None: verl's trainers (v0 and v1) compute them when ``algorithm.rollout_correction``
    sets ``rollout_is``, outside ``bypass_mode``, with the rollout's log-probs in the batch
    (``rollout.calculate_log_probs``); ict's loss refuses them again when they arrive."""
    policy = config.actor_rollout_ref.actor.get("policy_loss", {}) or {}
    correction = config.get("algorithm", {}).get("rollout_correction", None)
    if (policy.get("loss_mode", "vanilla") != LOSS_NAME or correction is None
            or correction.get("rollout_is", None) is None or correction.get("bypass_mode", False)
            or not config.actor_rollout_ref.rollout.get("calculate_log_probs", False)):
        return None
    return ROLLOUT_WEIGHTS_REFUSAL


_VERL_DEFAULTS = {field.name: field.default for field in dataclasses.fields(VerlPolicyLossConfig)}


@dataclass
class ICTPolicyLossConfig(VerlPolicyLossConfig):
    """verl's ``PolicyLossConfig`` plus ict's token selection (set ``loss_mode="ict"``).

    Attributes:
        ict_selector: registered ict selector and options, ``"name:key=value,..."``; unset
            options take the registry's defaults (``"ict"``: the paper's recipe, top 10% of each
            response by JS to the group mean; ``"ict:preset=batch"``, ``"entropy:ratio=0.2"``,
            ``"stapo"``, ``"random:ratio=0.1"``, ``"kl_cov"``, ``"all"``).
        ict_aggregation: the loss aggregation; ``None``: the method's (registry:
            ``seq_mean_token_mean`` for ict, the paper's Sparse-GRPO; ``token_mean`` otherwise);
            ``"loss_agg_mode"``: verl's ``actor.loss_agg_mode``; or ``token_mean``,
            ``seq_mean_token_mean``, ``seq_mean_token_sum_norm``.
        ict_full_token_warmup_steps: the first N training steps (the actor's LR-scheduler step,
            :func:`training_step`) update every response token; ``None``: the method's (registry:
            10 for ict, the paper's warm-up; 0 otherwise).
        ict_denominator: ``"selected"`` (ours: normalise by the selected tokens) or ``"all"``
            (response tokens, TRL's ``top_entropy_quantile`` convention).
        ict_dual_clip: apply verl's ``actor.clip_ratio_c`` dual clip (ict's default: off; refused
            beside ``clip_cov``, :func:`loss_config_of`).
        ict_stats_tile_size: token x vocabulary tile of ict's token statistics: ``"auto"``
            (follows the device: 4096x32768 for the Triton kernels on a GPU, 8 MiB tiles in torch
            on a CPU) or ``"TOKENSxVOCAB"``, e.g. ``"1024x32768"``.
        ict_seed: seed of the selection generator (``random``, ``clip_cov``): the n-th selection
            of training step s uses :func:`selection_seed` ``(ict_seed, s, n)`` on every rank and
            after a resume; a selector's own ``seed`` option, when set, takes its place.
    """

    ict_selector: str = DEFAULT_SELECTOR
    ict_aggregation: str | None = None
    ict_full_token_warmup_steps: int | None = None
    ict_denominator: str = "selected"
    ict_dual_clip: bool = False
    ict_seed: int = 0
    ict_stats_tile_size: str = "auto"

    def __post_init__(self) -> None:
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:
            parent()
        if not isinstance(self.ict_selector, str):  # hydra: ict_selector=null or a list (unhashable: parsed_selector's cache)
            raise UsageError(f"ict_selector must be a string 'name:key=value,...' (e.g. 'ict:ratio=0.1'), "
                             f"got {self.ict_selector!r}")
        name, options, _ = parsed_selector(self.ict_selector)
        if self.ict_aggregation not in (None, "loss_agg_mode", *AGGREGATIONS.values()):
            raise UsageError(f"ict_aggregation must be none, loss_agg_mode or one of "
                             f"{', '.join(AGGREGATIONS.values())}; got {self.ict_aggregation!r}")
        # hydra hands override values through as typed (ict_seed=1.5 a float, ict_dual_clip=no a
        # string, which is true): each is refused in one line here, not at the first selection
        warmup = self.ict_full_token_warmup_steps
        if warmup is not None and (not is_integer(warmup) or warmup < 0):
            raise UsageError(f"ict_full_token_warmup_steps must be null or an integer >= 0, got {warmup!r}")
        if not is_integer(self.ict_seed):
            raise UsageError(f"ict_seed must be an integer, got {self.ict_seed!r}")
        if not isinstance(self.ict_dual_clip, bool):
            raise UsageError(f"ict_dual_clip must be true or false, got {self.ict_dual_clip!r}")
        if needs_reference_logits(required_js_references(name, options)):
            raise UsageError("the 'ref' JS reference is not supported inside verl; use group_mean, "
                             "seq_mean or prev")
        try:
            parse_tile_size(self.ict_stats_tile_size)
        except ValueError as error:
            raise UsageError(f"ict_stats_tile_size: {error}") from None
        if self.ict_denominator not in TOKEN_SETS:
            raise UsageError(f"ict_denominator must be 'selected' or 'all', got {self.ict_denominator!r}")
        unread = self.loss_mode == LOSS_NAME and unread_verl_field(self, _VERL_DEFAULTS)
        if unread:  # e.g. kl_cov_ratio, which METHOD=kl_cov (ict's selector, its own ratio) ignored
            raise UsageError(unread)


_pending: list[MicroBatchSelection] = []  # the current micro-batch's, for compute_policy_loss_ict
_queue: list[MicroBatchSelection] = []  # the mini-batch's, made by the scoring pass
_scored: list[MicroBatchScores] = []  # filled by the scoring pass


def _score_only(config: Any, model_output: Any, data: Any, dp_group: Any = None) -> tuple[Tensor, dict]:
    """The loss function of the scoring pass: the hook records the scores; no loss."""
    return torch.zeros(()), {}


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
    """verl's ``prepare_model_outputs``, then ict's scores / selection for an ``ict`` loss."""
    model_output = _original_prepare_model_outputs(self, output, output_args, micro_batch, logits_processor_func)
    actor_config = _ict_actor_config(logits_processor_func)
    if actor_config is None:
        return model_output
    scoring = logits_processor_func.func is _score_only
    _pending.clear()
    if not scoring and _queue:  # selected beforehand on the whole mini-batch
        record = _queue.pop(0)
        if record.selection.mask.shape[0] != len(micro_batch):
            raise RuntimeError("ict: the training micro-batches differ from the scoring pass's")
        _pending.append(record)
        return model_output
    logits = getattr(output, "logits", None)
    if tu.get_non_tensor_data(data=micro_batch, key="use_fused_kernels", default=False) or logits is None:
        raise UsageError(FUSED_KERNELS_REFUSAL)
    if getattr(self, "use_ulysses_sp", False):
        raise UsageError(ULYSSES_REFUSAL)
    if hasattr(logits, "full_tensor"):  # tensor-parallel DTensor, sharded over the vocabulary
        logits = logits.full_tensor()
    if tu.get_non_tensor_data(data=micro_batch, key="use_remove_padding", default=True):
        # pad_to_length appends output_args["pad_size"] tokens to the packed sequence: strip them
        # as verl's own _gather_and_unpad_packed does (Ulysses is refused above)
        pad_size = int(output_args.get("pad_size", 0) or 0) if isinstance(output_args, dict) else 0
        rows, packed_to_row = logits.squeeze(0), None
        rows = rows[: rows.shape[0] - pad_size]
    else:
        rows, packed_to_row = _packed_rows(logits, micro_batch)
    log_probs = model_output.get("log_probs")  # verl's, which its loss reads: [nnz] or nested
    if log_probs is not None and log_probs.is_nested:
        log_probs = log_probs.values()
    scores = score_micro_batch(rows, micro_batch, actor_config, packed_to_row, log_probs)
    if scoring:
        _scored.append(scores)
    else:  # the micro-batch is the whole mini-batch share of this rank
        _pending.extend(select_mini_batch([scores], actor_config, self.get_data_parallel_group(),
                                          training_step(self)))
    return model_output


def _micro_batches_per_mini_batch(data: Any) -> int | None:
    """Micro-batches verl will cut ``data`` into (``None``: dynamic, unknown beforehand)."""
    if tu.get_non_tensor_data(data=data, key="use_dynamic_bsz", default=True):
        return None
    size = tu.get_non_tensor_data(data=data, key="micro_batch_size_per_gpu", default=None)
    group = tu.get_non_tensor_data(data=data, key="force_group_size", default=1)
    return None if size is None else len(data) // (int(size) * int(group))


def _forward_backward_batch(self: Any, data: Any, loss_function: Any, forward_only: bool = False) -> Any:
    """verl's ``forward_backward_batch``; for an ``ict`` loss over several micro-batches, first a
    no-grad scoring pass over them and one selection on the whole mini-batch."""
    actor_config = None if forward_only else _ict_actor_config(loss_function)
    if actor_config is None or _micro_batches_per_mini_batch(data) == 1:
        return _original_forward_backward_batch(self, data, loss_function, forward_only)
    _scored.clear()
    _queue.clear()
    tu.assign_non_tensor_stack(data, ROW_KEY, list(range(len(data))))  # dynamic bsz reorders rows
    try:
        _original_forward_backward_batch(self, data, partial(_score_only, config=actor_config), True)
        tu.pop(data, ROW_KEY)
        _queue.extend(select_mini_batch(_scored, actor_config, self.get_data_parallel_group(),
                                        training_step(self)))
        _scored.clear()
        output = _original_forward_backward_batch(self, data, loss_function, forward_only)
        if _queue:
            raise RuntimeError(f"ict: {len(_queue)} selected micro-batches were not trained on")
        return output
    finally:
        tu.pop(data, ROW_KEY)
        _scored.clear()
        _queue.clear()


def needs_whole_groups(name: str, options: dict[str, Any]) -> bool:
    """Whether selector ``name`` needs each prompt's completions together: a group JS reference
    (``group_mean`` and its variants, scored per micro-batch) or a ``scope=group`` ranking
    (:func:`ict.integrations.ranks_within_groups`, ranked on the gathered mini-batch)."""
    return needs_groups(required_js_references(name, options)) or ranks_within_groups(name, options)


def group_balanced_order(uids: list[Any], seq_lens: list[int], dp_size: int, group_size: int) -> list[int]:
    """Row order for verl's v1 dispatch (rank ``r`` takes the ``r``-th of ``dp_size`` equal
    contiguous shares) in which every uid's rows are contiguous and on one rank, the ranks balanced
    by verl's own ``get_seqlen_balanced_partitions`` over whole groups (workload: verl's
    ``calculate_workload`` of each row's sequence length, summed per group)."""
    groups: dict[Any, list[int]] = {}
    for row, uid in enumerate(uids):
        groups.setdefault(uid, []).append(row)
    sizes = sorted({len(rows) for rows in groups.values()})
    if sizes != [group_size] or len(groups) % dp_size:
        raise UsageError(
            f"ict's group selectors under verl's v1 trainer need rollout.n={group_size} rows per prompt and a "
            f"prompt count divisible by the {dp_size} data-parallel ranks; got {len(groups)} prompts with "
            f"{sizes} rows (padded or filtered batches are not supported)")
    members = list(groups.values())
    workload = calculate_workload(torch.tensor(seq_lens, dtype=torch.int64))
    group_workloads = [int(workload[rows].sum()) for rows in members]
    partitions = get_seqlen_balanced_partitions(group_workloads, k_partitions=dp_size, equal_size=True)
    return [row for partition in partitions for group in partition for row in members[group]]


def _balance_batch_v1(self: Any, batch: Any, metrics: dict, logging_prefix: str = "global_seqlen",
                      keep_minibatch: bool = False) -> Any:
    """verl v1's ``PPOTrainer._balance_batch``; for an ``ict`` loss whose selector needs whole
    groups, balance whole groups instead of single sequences (:func:`group_balanced_order`)."""
    actor = self.config.actor_rollout_ref.actor
    policy = actor.get("policy_loss", {}) or {}
    if policy.get("loss_mode", "vanilla") != LOSS_NAME or not needs_whole_groups(
            *parsed_selector(policy.get("ict_selector", ICTPolicyLossConfig.ict_selector))[:2]):
        return _original_balance_batch(self, batch, metrics, logging_prefix, keep_minibatch)
    worker_group = self.actor_rollout_wg
    if "actor" not in worker_group._dispatch_info:
        worker_group._dispatch_info["actor"] = worker_group._query_dispatch_info("actor")
    dp_size = max(worker_group._dispatch_info["actor"]) + 1
    multiple = self._get_required_batch_multiple(dp_size)
    if len(batch) % multiple or int(actor.ppo_mini_batch_size) % dp_size:
        raise UsageError(
            f"ict's group selectors under verl's v1 trainer need whole prompts on every GPU: a batch of "
            f"{len(batch)} rows must be a multiple of {multiple} (no padding rows) and ppo_mini_batch_size "
            f"({actor.ppo_mini_batch_size}) a multiple of the {dp_size} data-parallel ranks")
    uids = [str(key).rsplit("_", 2)[0] for key in batch.keys]  # v1's keys: {uid}_{session}_{index}
    seq_lens = [int(tag["seq_len"]) for tag in batch.tags]
    order = group_balanced_order(uids, seq_lens, dp_size, int(self.config.actor_rollout_ref.rollout.n))
    batch.reorder(order)
    share = len(order) // dp_size
    metrics.update(log_seqlen_unbalance(
        seqlen_list=[seq_lens[row] for row in order],
        partitions=[list(range(rank * share, (rank + 1) * share)) for rank in range(dp_size)], prefix=logging_prefix))
    return batch


def _validate_actor(self: Any, n_gpus: int, train_batch_size: int, model_config: Any = None) -> None:
    """verl's ``FSDPActorConfig.validate`` (its ``validate_config`` calls it at launch, before Ray
    starts or a model loads), then for ``loss_mode=ict`` :func:`actor_refusal`."""
    _original_validate_actor(self, n_gpus, train_batch_size, model_config)
    if self.policy_loss.get("loss_mode", "vanilla") == LOSS_NAME:
        refusal = actor_refusal(self, model_config)
        if refusal:
            raise UsageError(refusal)


def _refuse_at_trainer_init(cls: type) -> None:
    """Wrap verl trainer ``cls``'s ``__init__`` (``config`` first) to refuse, in one line,
    :func:`rollout_weights_refusal` before any worker or model is built."""
    def init(self: Any, config: Any, *args: Any, **kwargs: Any) -> None:
        refusal = rollout_weights_refusal(config)
        if refusal:
            raise UsageError(refusal)
        original(self, config, *args, **kwargs)
    original = _wrap(cls, "__init__", init)


def _wrap(cls: type, name: str, wrapper: Any) -> Any:
    """Replace ``cls.name`` by ``wrapper`` once (re-imports keep the first original)."""
    current = cls.__dict__.get(name, getattr(cls, name))
    original = getattr(current, "_ict_original", current)
    wrapper._ict_original = original
    setattr(cls, name, wrapper)
    return original


_original_prepare_model_outputs = _wrap(FSDPEngineWithLMHead, "prepare_model_outputs", _prepare_model_outputs)
_original_forward_backward_batch = _wrap(FSDPEngineWithLMHead, "forward_backward_batch", _forward_backward_batch)
_original_balance_batch = None if V1Trainer is None else _wrap(V1Trainer, "_balance_batch", _balance_batch_v1)
_original_validate_actor = _wrap(FSDPActorConfig, "validate", _validate_actor)
for _trainer in (V0Trainer, V1Trainer):
    if _trainer is not None:
        _refuse_at_trainer_init(_trainer)


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
    """verl policy loss ``"ict"``: :func:`ict.core.loss.policy_loss` on this micro-batch's selection,
    scaled by ``dp * w_micro / W`` (see the module docstring). Shapes ``[B, T]``."""
    if rollout_is_weights is not None:
        raise UsageError(ROLLOUT_WEIGHTS_REFUSAL)
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
                                loss_config_of(config, loss_agg_mode, record.width),
                                kl_penalty=record.selection.kl_penalty)
    return loss * record.scale, reported_metrics(metrics, record)


def reported_metrics(metrics: dict[str, float], record: MicroBatchSelection) -> dict[str, float]:
    """The ``actor/ict_*`` metrics of one micro-batch, for verl's unweighted mean over the
    micro-batches and ranks of the mini-batch (``Metric.aggregate_dp``) to be the mini-batch's
    token means, as ``ict train``'s: :func:`ict.core.loss.policy_loss`'s means of the micro-batch
    times its token share (``record.shares``: ``K n_micro / N``; 0 for a micro-batch without such
    tokens, whose mean is NaN), and the mini-batch's diagnostics (``record.diagnostics``). The
    selected tokens' means are left out on every micro-batch and rank when the mini-batch selects
    no token (verl's aggregate_dp refuses ranks holding different numbers of values for a key)."""
    selected_share, response_share = record.shares
    reported = {"actor/ict_selected_fraction": _shared(metrics["selected_fraction"], response_share)}
    if selected_share is not None:
        means = {f"actor/ict_{key}": metrics[key] for key in ("clip_fraction", "entropy_selected")}
        means.update(selected_score_metrics(metrics, record.stats.js_scores))
        reported.update({key: _shared(value, selected_share) for key, value in means.items()})
    reported.update({f"actor/ict_{key}": value for key, value in record.diagnostics.items()})
    return reported


def _shared(mean: float, share: float) -> float:
    """A micro-batch's ``mean`` over its tokens times its ``share`` of the mini-batch's (0 when it
    holds none: then ``mean`` is NaN)."""
    return mean * share if share else 0.0


def selected_score_metrics(metrics: dict[str, float], js_scores: dict[str, Tensor]) -> dict[str, float]:
    """The selected tokens' mean scores among :func:`ict.core.loss.policy_loss`'s ``metrics``, as
    ``ict train`` names them: ``actor/ict_js_score_selected`` is the JS to ICT's default reference
    (``ICT_DEFAULT_REFERENCE``; absent when the selector does not compute it), each other score
    the selector computes is ``actor/ict_js_<key>_selected`` (``<key>``: the score key, e.g.
    ``seq_mean`` or ``group_mean:kl``). policy_loss's ``js_score_selected`` is its first score's,
    which here is the selector's own (a KL, in nats up to 87, under ``metric=kl``)."""
    reported = {f"actor/ict_js_{key}_selected": metrics[f"js_{key}_selected"]
                for key in js_scores if key != ICT_DEFAULT_REFERENCE}
    if ICT_DEFAULT_REFERENCE in js_scores:
        reported["actor/ict_js_score_selected"] = metrics[f"js_{ICT_DEFAULT_REFERENCE}_selected"]
    return reported

"""The scoring and the selection of ict's policy loss ``"ict"`` in verl 0.9
(:mod:`ict.integrations.verl` says how they plug in): verl's actor config read as ict's options,
one micro-batch's statistics from the actor's logits (:func:`score_micro_batch`), and one
selection on the whole mini-batch, gathered over the data-parallel ranks
(:func:`select_mini_batch`), with its seed (:func:`selection_seed`), its diagnostics
(:func:`selection_diagnostics`) and each micro-batch's share of its token means."""

from __future__ import annotations

import collections
import functools
import math
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor
from verl.utils import tensordict_utils as tu

from ict.core.diagnostics import paper_figures, token_diagnostics
from ict.core.errors import UsageError
from ict.core.loss import PolicyLossConfig, counted_weight, loss_counts
from ict.core.seeding import selection_base_seed, step_seed
from ict.core.selectors import (
    ICT_DEFAULT_REFERENCE,
    Selection,
    SelectionInputs,
    method_train_options,
    required_js_references,
    select,
)
from ict.core.stats import TokenStatistics, needs_groups, parse_tile_size, token_statistics
from ict.integrations import parse_token_selector, ranks_within_groups

# the hydra override that imports this module in every Ray process, verl's trainer included
V1_OVERRIDE = "+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES=ict.integrations.verl"
DEFAULT_SELECTOR = "ict"  # ICTPolicyLossConfig.ict_selector's default: the paper's recipe
# the scoring pass's tag of each row with its position in the rank's mini-batch share: verl's
# use_dynamic_bsz reorders the rows into micro-batches, and the selection takes them back in order
ROW_KEY = "ict_row"
# verl's loss_agg_mode -> ict.core.loss aggregation
AGGREGATIONS = {
    "token-mean": "token_mean",
    "seq-mean-token-mean": "seq_mean_token_mean",
    "seq-mean-token-sum-norm": "seq_mean_token_sum_norm",
}


# verl's PolicyLossConfig fields that only its own losses read -> (that loss, the ict selector
# option that takes their place; None: none)
VERL_LOSS_FIELDS = {
    "clip_cov_ratio": ("clip_cov", "clip_cov:ratio"), "clip_cov_lb": ("clip_cov", "clip_cov:cov_low"),
    "clip_cov_ub": ("clip_cov", "clip_cov:cov_high"), "kl_cov_ratio": ("kl_cov", "kl_cov:ratio"),
    "ppo_kl_coef": ("kl_cov", "kl_cov:kl_coef"), "dro_beta": ("dro", None),
}


def unread_verl_field(policy: Any, defaults: dict[str, Any]) -> str | None:
    """The one-line refusal of a field of verl's own losses (:data:`VERL_LOSS_FIELDS`) that
    ``policy`` (the ``loss_mode=ict`` policy-loss config) sets to other than its verl default
    (``defaults``), which ict's loss would leave unread, or None."""
    for name, (loss, option) in VERL_LOSS_FIELDS.items():
        value = getattr(policy, name, None)
        if name not in defaults or value == defaults[name]:
            continue
        instead = (f"set the selector's option instead, ict_selector='{option}={value}'" if option
                   else f"ict's loss has no {loss} term; leave it null")
        return f"loss_mode=ict does not read policy_loss.{name} ({value}; verl's own {loss} loss): {instead}"
    return None


@functools.cache
def parsed_selector(spec: str) -> tuple[str, dict[str, Any], str | None]:
    """``(name, resolved options, preset)`` of an ``ict_selector`` spec, parsed once per process
    (:func:`ict.integrations.parse_token_selector`). Do not modify the returned options."""
    return parse_token_selector(spec, with_preset=True)


def method_options(policy: Any) -> dict[str, Any]:
    """The method's training options (``aggregation``, ``full_token_warmup_steps``) with the
    policy loss config's ``ict_aggregation`` / ``ict_full_token_warmup_steps`` where set."""
    name, _, preset = parsed_selector(policy.get("ict_selector", DEFAULT_SELECTOR))
    resolved = dict(method_train_options(name, preset))
    for key in resolved:
        value = policy.get(f"ict_{key}", None)
        if value is not None and value != "loss_agg_mode":
            resolved[key] = value
    return resolved


def loss_config_of(actor_config: Any, loss_agg_mode: str, width: int | None = None) -> PolicyLossConfig:
    """ict's :class:`PolicyLossConfig` from verl's actor config (see the module docstring).

    ``width``: the mini-batch's response width over all ranks, ``seq_mean_token_sum_norm``'s
    ``L`` when ``actor.loss_scale_factor`` is unset (``None``: the loss's own padded width). verl's
    vanilla loss divides by each micro-batch's own width, the response cap in v0 but the micro-batch's
    longest response in v1, so its loss would depend on how the mini-batch is split."""
    policy = actor_config.policy_loss
    if policy.get("ict_aggregation", None) == "loss_agg_mode":
        if loss_agg_mode not in AGGREGATIONS:
            raise UsageError(f"loss_mode=ict supports loss_agg_mode {', '.join(AGGREGATIONS)}; got "
                             f"{loss_agg_mode!r}")
        aggregation = AGGREGATIONS[loss_agg_mode]
    else:
        aggregation = method_options(policy)["aggregation"]
    dual_clip = getattr(policy, "ict_dual_clip", False)
    if dual_clip and parsed_selector(policy.get("ict_selector", DEFAULT_SELECTOR))[0] == "clip_cov":
        # as TRL's delta (ict.integrations.trl_config.selection_refusal)
        bound = actor_config.clip_ratio_c
        raise UsageError(f"ict_selector 'clip_cov' spares the tokens PPO's ratio clip cuts, but ict_dual_clip "
                         f"(clip_ratio_c={bound}) also cuts those of ratio > {bound} with a negative advantage; "
                         "leave ict_dual_clip false")
    clip = actor_config.clip_ratio
    low = actor_config.clip_ratio_low if actor_config.clip_ratio_low is not None else clip
    high = actor_config.clip_ratio_high if actor_config.clip_ratio_high is not None else clip
    return PolicyLossConfig(
        clip_low=low, clip_high=high, aggregation=aggregation,
        max_response_length=actor_config.loss_scale_factor if actor_config.loss_scale_factor is not None else width,
        clip_ratio_c=actor_config.clip_ratio_c if dual_clip else None,
        denominator=getattr(policy, "ict_denominator", "selected"))


@dataclass
class MicroBatchScores:
    """One micro-batch's detached statistics and selection inputs on this rank, ``[B, T]``."""

    stats: TokenStatistics
    response_mask: Tensor
    advantages: Tensor
    old_log_probs: Tensor
    token_ids: Tensor
    uids: list[Any]
    global_batch_size: int | None  # rows of the whole mini-batch over all ranks (verl's)
    positions: list[int] | None = None  # the rows' places in the rank's share (ROW_KEY); None: as is


@dataclass
class MicroBatchSelection:
    """The selection of one training micro-batch, handed from the engine hook to the loss."""

    selection: Selection  # this rank's rows, [B, T]
    stats: TokenStatistics  # this rank's rows, detached
    scale: float  # dp * w_micro / W (see the module docstring)
    width: int | None = None  # the mini-batch's response width over all ranks (loss_config_of)
    # (selected, response) token shares K * n_micro / N of the mini-batch (K: its micro-batches on
    # all ranks), so that verl's unweighted mean of value * share is the mini-batch's token mean;
    # selected None: the mini-batch selects no token (see select_mini_batch)
    shares: tuple[float | None, float] = (1.0, 1.0)
    diagnostics: dict[str, float] = field(default_factory=dict)  # the mini-batch's (select_mini_batch)


# the training step of the last selection and how many selections it has made (see selection_seed)
_selections = {"step": -1, "index": 0}


def selection_seed(seed: int, step: int, index: int) -> int:
    """Seed of the generator of the ``index``-th selection (one per mini-batch and PPO epoch,
    counted from 0) of training step ``step``: equal on every rank, and after a resume (``step``
    is the actor's learning-rate scheduler step count, which verl's checkpoint restores). The
    formula of ``ict train``'s ``index``-th update of a step."""
    return step_seed(int(seed), int(step), 2) + 1000 * int(index)


def training_step(engine: Any) -> int:
    """Completed training steps of verl's engine: its LR scheduler's ``last_epoch`` (one
    scheduler step per ``update_actor`` call; 0 without a scheduler)."""
    scheduler = getattr(engine, "lr_scheduler", None)
    return int(getattr(scheduler, "last_epoch", 0) or 0) if scheduler is not None else 0


def _next_selection_seed(seed: int, step: int) -> int:
    if _selections["step"] != step:
        _selections.update(step=step, index=0)
    index = _selections["index"]
    _selections["index"] = index + 1
    return selection_seed(seed, step, index)


def _padded(tensor: Tensor, length: int) -> Tensor:
    tensor = tensor.to_padded_tensor(0) if tensor.is_nested else tensor
    if tensor.shape[1] < length:
        tensor = torch.nn.functional.pad(tensor, (0, length - tensor.shape[1]))
    return tensor[:, :length]


def response_row_index(micro_batch: Any, num_packed: int, device: torch.device) -> Tensor:
    """``[B, T]`` row numbers of the packed (``[nnz, ...]``) model output that hold the
    distribution of each response token, by verl's own ``no_padding_2_padding`` rule (0 at
    padding)."""
    return response_rows(micro_batch, num_packed, device)[0]


def response_rows(micro_batch: Any, num_packed: int, device: torch.device) -> tuple[Tensor, Tensor]:
    """``(index, finished)``: :func:`response_row_index`'s ``[B, T]`` and which rows are
    *finished* for the absorbing group references (bool ``[B]``): the row's whole response, tool
    results included, ends before the last column ``T - 1``. The response is what verl's
    ``no_padding_2_padding`` slices (the attention mask over the response columns, or the nested
    responses' lengths), not ``response_mask``: in multi-turn rollouts verl's ``response_mask`` is
    0 on tool results (its loss mask), so a row cut by the length cap inside a tool result would
    end, by that mask, on its last model token before ``T - 1``. ``T`` is the response cap or
    (v1's nested batches) the longest response of the micro-batch; a row that reaches it has no
    later position in the micro-batch, finished or not, so either is the cap test.

    verl's rule without its loop over the rows (three values read back a row): response position
    ``t < r_b`` of row ``b`` is packed row ``e_b - r_b - 1 + t``, with ``r_b`` its response length
    and ``e_b`` the end of its sequence in the packing (the running sum of prompt + response
    lengths); ``T`` is read back only for a nested batch without ``max_response_len``, as verl's
    own. ``num_packed``: the packed rows (``e`` of the last row, which verl's loss asserts)."""
    prompts, responses = micro_batch["prompts"], micro_batch["responses"]
    if prompts.is_nested:
        prompt_lengths, lengths = prompts.offsets().diff(), responses.offsets().diff()
        width = tu.get_non_tensor_data(data=micro_batch, key="max_response_len", default=-1)
        width = int(lengths.max()) if width < 0 else int(width)
    else:
        attention = micro_batch["attention_mask"]
        prompt_lengths, lengths = attention[:, : prompts.shape[1]].sum(1), attention[:, prompts.shape[1]:].sum(1)
        width = responses.shape[1]
    prompt_lengths, lengths = prompt_lengths.to(device), lengths.to(device)
    ends = (prompt_lengths + lengths).cumsum(0)
    columns = torch.arange(width, device=device)
    index = (ends - lengths - 1)[:, None] + columns
    return torch.where(columns < lengths[:, None], index, 0), lengths < width


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


def _selector(actor_config: Any) -> tuple[str, dict[str, Any]]:
    name, options, _ = parsed_selector(actor_config.policy_loss.ict_selector)
    return name, options


def score_micro_batch(
    logits: Tensor, micro_batch: Any, actor_config: Any, packed_to_row: Tensor | None = None,
    log_probs: Tensor | None = None,
) -> MicroBatchScores:
    """ict's statistics of one micro-batch's responses (no gradient).

    ``logits`` ``[R, V]``: the actor's logits, one row per packed token (``packed_to_row [nnz]``
    maps packed token ``k`` to its row; ``None``: row ``k``). ``log_probs`` ``[nnz]``: verl's
    packed log-probs of the sampled tokens, which its loss reads (and its ``old_log_probs`` come
    from): they replace ict's own in the statistics, so that a selector reads the loss's ratio and
    probabilities (verl scales bf16 logits by the temperature in bf16, ict in float32: 0.1 nats
    apart at logits of standard deviation 3); ``None``: ict's own. ``micro_batch`` is verl's
    TensorDict (``responses``, ``response_mask``, ``advantages``, ``old_log_probs``, ``uid``,
    ``temperature``, ``prompts`` / ``attention_mask`` or nested ``input_ids``). The absorbing
    references' finished rows are those of :func:`response_rows` (tool results count as response).
    """
    name, options = _selector(actor_config)
    references = required_js_references(name, options)
    device = logits.device
    num_packed = packed_to_row.numel() if packed_to_row is not None else logits.shape[0]
    packed, finished = response_rows(micro_batch, num_packed, device)
    index = packed if packed_to_row is None else packed_to_row[packed]
    rows, length = index.shape
    response_mask = _padded(micro_batch["response_mask"], length).bool().to(device)
    token_ids = _padded(micro_batch["responses"], length).to(device)
    uids = _uids(micro_batch, rows)
    group_ids = None
    if needs_groups(references):
        group_ids = _group_ids(uids, device)
        expected = getattr(actor_config, "rollout_n", None)
        if isinstance(expected, int) and bool((torch.bincount(group_ids) != expected).any()):
            raise UsageError(_partial_groups("the group references (group_mean*)", expected, "micro-batch"))
    with torch.no_grad():  # scored where verl's [R, V] logits lie: no [B, T, V] copy
        stats = token_statistics(logits.detach(), token_ids, response_mask, temperature=_temperature(micro_batch),
                                 js_references=references, group_ids=group_ids, finished=finished,
                                 row_index=torch.where(response_mask, index, torch.zeros_like(index)),
                                 tile_size=parse_tile_size(actor_config.policy_loss.get("ict_stats_tile_size",
                                                                                        "auto")))
    if log_probs is not None:  # the loss's log-probs, at verl's response positions
        stats = TokenStatistics(log_probs.detach().float()[packed].masked_fill(~response_mask, 0),
                                stats.entropy, stats.renyi2, stats.js_scores)
    total = tu.get_non_tensor_data(data=micro_batch, key="global_batch_size", default=None)
    return MicroBatchScores(
        stats=stats, response_mask=response_mask, token_ids=token_ids, uids=uids,
        advantages=_padded(micro_batch["advantages"], length).to(device=device, dtype=torch.float32),
        old_log_probs=_padded(micro_batch["old_log_probs"], length).to(device=device, dtype=torch.float32),
        global_batch_size=None if total is None else int(total),
        positions=tu.get(micro_batch, ROW_KEY))


def _partial_groups(what: str, expected: int, where: str) -> str:
    """The one-line refusal of a ``where`` (micro-batch, mini-batch) holding part of a prompt's
    ``expected`` completions, for ``what`` needs them all."""
    return (f"{what} need whole groups ({expected} rows per uid) in each {where}: set actor.shuffle=False, "
            "actor.use_dynamic_bsz=False, ppo_micro_batch_size_per_gpu a multiple of rollout.n, and load ict "
            f"in verl's trainer ({V1_OVERRIDE}; with trainer.use_v1=False: trainer.balance_batch=False)")


def share_order(positions: list[int]) -> list[int]:
    """The concatenated micro-batch rows in the order of the rank's mini-batch share:
    ``positions[i]`` is the share position of row ``i``; returns ``order`` with
    ``positions[order[k]] == k``."""
    if sorted(positions) != list(range(len(positions))):
        raise RuntimeError(f"ict: the micro-batches hold rows {sorted(positions)}, not each once")
    return sorted(range(len(positions)), key=positions.__getitem__)


def select_mini_batch(parts: list[MicroBatchScores], actor_config: Any,
                      dp_group: Any = None, step: int = 0) -> list[MicroBatchSelection]:
    """Select once on the whole mini-batch: this rank's micro-batches ``parts`` and those of every
    rank of ``dp_group`` (all-gathered ``[B, T]`` scores, padded to the widest response of all
    ranks: verl pads each micro-batch to its own longest); returns each part's rows of the mask
    and its loss scale ``dp * w_part / W``. ``step``: the training step (:func:`selection_seed`)."""
    name, options = _selector(actor_config)
    references = required_js_references(name, options)
    length = max(part.response_mask.shape[1] for part in parts)
    device = parts[0].response_mask.device
    world = _world(dp_group)
    if world > 1:
        width = torch.tensor([length], device=device)
        torch.distributed.all_reduce(width, op=torch.distributed.ReduceOp.MAX, group=dp_group)
        length = int(width)

    def cat(field: str) -> Tensor:
        return torch.cat([_padded(getattr(part, field), length) for part in parts])

    stats = TokenStatistics.concat([TokenStatistics(*(_padded(t, length) for t in (
        part.stats.log_probs, part.stats.entropy, part.stats.renyi2)),
        {ref: _padded(part.stats.js_scores[ref], length) for ref in references}) for part in parts])
    response_mask, token_ids = cat("response_mask"), cat("token_ids")
    uids = [uid for part in parts for uid in part.uids]
    rows = len(uids)
    positions = None if any(part.positions is None for part in parts) else \
        [position for part in parts for position in part.positions]
    order = None if positions is None or positions == list(range(rows)) else share_order(positions)
    if order is not None:  # the share's row order, whatever order the micro-batches hold it in
        uids = [uids[row] for row in order]
    rank = torch.distributed.get_rank(dp_group) if world > 1 else 0
    if world > 1:
        counts = _all_gather(torch.tensor([rows], device=device), dp_group, world)
        if bool((counts != rows).any()):
            raise RuntimeError(f"ict: mini-batch rows differ between ranks: {counts.tolist()}")
        gathered_uids: list[list[Any]] = [[] for _ in range(world)]
        torch.distributed.all_gather_object(gathered_uids, uids, group=dp_group)
        uids = [uid for part in gathered_uids for uid in part]
    expected = parts[0].global_batch_size
    if expected is not None and len(uids) != expected:
        raise RuntimeError(f"ict: the selection sees {len(uids)} rows of a {expected}-row mini-batch")
    group_size = getattr(actor_config, "rollout_n", None)
    if (ranks_within_groups(name, options) and isinstance(group_size, int)
            and any(count != group_size for count in collections.Counter(uids).values())):
        # ranked within the fragments of a prompt's completions otherwise (the group references'
        # own check, in score_micro_batch, covers the selectors that score against the group)
        raise UsageError(_partial_groups(f"{name}'s scope=group ranking", group_size, "mini-batch"))
    columns = [stats.log_probs, stats.entropy, stats.renyi2, *(stats.js_scores[ref] for ref in references),
               response_mask.float(), cat("advantages"), cat("old_log_probs")]
    columns = torch.stack(columns, dim=1)
    if order is not None:
        index = torch.tensor(order, device=device)
        columns, token_ids = columns[index], token_ids[index]
    log_probs, entropy, renyi2, *js, all_mask, advantages, old_log_probs = \
        _all_gather(columns, dp_group, world).unbind(dim=1)
    all_mask = all_mask.bool()

    generator = torch.Generator(device=device).manual_seed(
        _next_selection_seed(selection_base_seed(options, getattr(actor_config.policy_loss, "ict_seed", 0)), step))
    loss_config = loss_config_of(actor_config, actor_config.loss_agg_mode)
    inputs = SelectionInputs(
        stats=TokenStatistics(log_probs, entropy, renyi2, dict(zip(references, js))),
        response_mask=all_mask, advantages=advantages, token_ids=_all_gather(token_ids, dp_group, world),
        generator=generator, group_ids=_group_ids(uids, device), old_log_probs=old_log_probs,
        clip_range=(loss_config.clip_low, loss_config.clip_high))
    if step < method_options(actor_config.policy_loss)["full_token_warmup_steps"]:
        selection = select("all", inputs)  # the full-token warm-up: every response token
    else:
        selection = select(name, inputs, **options)
    diagnostics = selection_diagnostics(inputs.stats, all_mask, selection.mask, advantages)
    results, counts, start = [], [], rank * rows
    for part in parts:
        own = slice(start, start + len(part.uids))
        start = own.stop
        if order is not None:  # the part's rows, in the share's order
            own = torch.tensor(part.positions, device=device) + rank * rows
        part_length = part.response_mask.shape[1]
        mask = selection.mask[own, :part_length]
        penalty = None if selection.kl_penalty is None else selection.kl_penalty[own, :part_length]
        counts.append(loss_counts(mask, part.response_mask))
        results.append(MicroBatchSelection(Selection(mask, penalty), part.stats, 0.0, length, diagnostics=diagnostics))
    counts.append(loss_counts(selection.mask, all_mask))
    *own_counts, whole = torch.stack(counts).tolist()  # one sync a mini-batch
    total = counted_weight(whole, loss_config)
    values = world * len(parts)  # verl's count of values per metric in the mini-batch: its micro-batches
    for result, part_counts in zip(results, own_counts):
        selected, response = part_counts[:2]
        result.scale = world * counted_weight(part_counts, loss_config) / total if total > 0 else 0.0
        result.shares = (values * selected / whole[0] if whole[0] else None,
                         values * response / whole[1] if whole[1] else 0.0)
    return results


def selection_diagnostics(stats: TokenStatistics, response_mask: Tensor, selected: Tensor,
                          advantages: Tensor) -> dict[str, float]:
    """ict's per-step diagnostics of a selection (:func:`ict.core.diagnostics.token_diagnostics`
    and :func:`ict.core.diagnostics.paper_figures`: the regime, entropy split, Jaccard overlaps,
    token probabilities), from the whole mini-batch's ``[B, T]`` statistics and token advantages
    (one value per completion: the mean over its response tokens), as ``ict train``'s of a step.
    Undefined (NaN) values are left out, as are those that need ICT's default score
    (``ICT_SCORE_KEYS``) when the selector does not compute it (``ict train`` always computes
    that score). :func:`select_mini_batch` computes them once on the gathered mini-batch, equal on
    every rank, and each micro-batch reports them: verl's mean over micro-batches and ranks is
    then the mini-batch's value, and over the mini-batches of a step the mean of those that
    define it."""
    with torch.no_grad():
        mask = response_mask.bool()
        per_row = advantages.detach().float().masked_fill(~mask, 0).sum(1) / mask.sum(1).clamp(min=1)
        detached = TokenStatistics(stats.log_probs.detach(), stats.entropy, stats.renyi2, stats.js_scores)
        values = {**token_diagnostics(detached, mask, selected, per_row),
                  **paper_figures(detached, mask, selected)}
    left_out = () if ICT_DEFAULT_REFERENCE in stats.js_scores else ICT_SCORE_KEYS
    return {key: float(value) for key, value in values.items()
            if isinstance(value, (int, float)) and key not in left_out and not math.isnan(value)}


ICT_SCORE_KEYS = ("jaccard_ict10", "score_knee_fraction", "score_knee_share")
"""the diagnostics of ICT's default score (``ICT_DEFAULT_REFERENCE``)"""

"""The algorithm's step: statistics -> selection -> loss -> backward on each micro-batch, the
gradient accumulated over the micro-batches of a mini-batch, and the optimizer updates over the
mini-batches of one rollout batch. The run around it (rollouts, rewards, checkpoints, signals,
logging, evaluation) is `ict.training.trainer`.

Per mini-batch (`accumulate_gradients`): when the selector's ranking population spans several
micro-batches, a no-grad scoring pass computes the statistics of the whole mini-batch and the
selection is made once (`select_population`); then, per micro-batch, `micro_batch_step`:
forward -> token statistics -> selection -> clipped loss -> backward. The accumulated gradient is
normalised to the mini-batch's aggregate; `update_on_batch` skips a non-finite one, else clips it
and applies it with the optimizer.

Which tokens are selected never depends on `micro_batch_size` (a memory setting): a selector
always ranks its whole population (`ict.core.selectors.ranking_population`): the sequence, the
group, or the whole mini-batch.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ict.core.errors import UsageError
from ict.core.loss import PolicyLossConfig, aggregation_weight, loss_gradient_mask, policy_loss
from ict.core.profiling import StepProfiler
from ict.core.seeding import selection_base_seed, step_seed
from ict.core.selectors import (
    ICT_DEFAULT_REFERENCE,
    Selection,
    SelectionInputs,
    ranking_population,
    required_js_references,
    select,
)
from ict.core.stats import (
    TileSize,
    TokenStatistics,
    needs_reference_logits,
    token_statistics,
    token_statistics_from_hidden,
)
from ict.models.forward import response_hidden, response_logits
from ict.models.loading import compute_context, linear_lm_head
from ict.models.rollout import RolloutBatch
from ict.training.config import TrainConfig

# Every method computes the paper's score too: `js_score` and the diagnostics' ICT overlap use it.
MONITOR_JS_REFERENCE = ICT_DEFAULT_REFERENCE


# ---------------------------------------------------------------------------------------------
# Forward pass

class ReferencePolicy:
    """The initial policy (for `kl_coef > 0` and the `ref` JS reference): a frozen copy of the
    model, or the LoRA model with its adapter disabled."""

    def __init__(self, model: Any, shared_prompt: bool = True) -> None:
        self.shared_prompt = shared_prompt
        self.uses_adapter = hasattr(model, "disable_adapter")
        self.model = model if self.uses_adapter else copy.deepcopy(model).eval()
        if not self.uses_adapter:
            for parameter in self.model.parameters():
                parameter.requires_grad_(False)

    @torch.no_grad()
    def outputs(self, batch: RolloutBatch, hidden: bool = False) -> torch.Tensor:
        """The reference's response logits ``[B, T, V]`` (or, ``hidden``, final hidden states)."""
        forward = response_hidden if hidden else response_logits
        if self.uses_adapter:
            with self.model.disable_adapter():
                return forward(self.model, batch, self.shared_prompt).detach()
        return forward(self.model, batch, self.shared_prompt).detach()

    def logits(self, batch: RolloutBatch) -> torch.Tensor:
        return self.outputs(batch)


# ---------------------------------------------------------------------------------------------
# The method: which selector, and what its statistics must contain

@dataclass(frozen=True)
class Method:
    """A selector with its resolved options, the rows it ranks together (`population`) and the
    JS references the statistics must include (the selector's and the monitor's)."""

    selector: str
    options: dict[str, Any]
    population: str
    js_references: tuple[str, ...]

    @classmethod
    def of(cls, selector: str, options: dict[str, Any]) -> Method:
        references = (MONITOR_JS_REFERENCE, *required_js_references(selector, options))
        return cls(selector, dict(options), ranking_population(selector, options),
                   tuple(dict.fromkeys(references)))


ALL_TOKENS = Method.of("all", {})


@dataclass
class StepContext:
    """What every micro-batch of a step shares."""

    loss_config: PolicyLossConfig
    temperature: float  # the rollout's sampling temperature (TrainConfig.temperature)
    tile_size: TileSize | None = None  # (tokens, vocab) of the statistics' tiles (None: the device's)
    reference: ReferencePolicy | None = None
    shared_prompt: bool = True
    profiler: StepProfiler = field(default_factory=StepProfiler)
    statistics_from: str = "logits"  # or "hidden" (statistics_source of TrainConfig.statistics_from)
    compute_dtype: torch.dtype | None = None  # autocast dtype of the forward passes (None: off)


def statistics_source(choice: str, model: Any, device: torch.device, references: tuple[str, ...]) -> str:
    """What the token statistics are computed from (``TrainConfig.statistics_from``): ``logits``
    or ``hidden`` as given; ``auto`` resolves to ``hidden`` when ``device`` (the model's) is CUDA,
    its LM head is a plain linear layer (`linear_lm_head`) and no ``ref`` score in ``references``
    compares two models' logits, else to ``logits``. On a GPU at large vocabularies the ``[B, T, V]``
    logits and their gradient take several GB (5.2 GB each in bf16 at V = 151,936 and 64 x 266
    positions); on a CPU the logits are the faster of the two at the offline default."""
    if choice != "auto":
        return choice
    if device.type != "cuda" or needs_reference_logits(references):
        return "logits"
    try:
        linear_lm_head(model)
    except UsageError:
        return "logits"
    return "hidden"


def statistics_of(model: Any, micro: RolloutBatch, group_ids: torch.Tensor, references: tuple[str, ...],
                  context: StepContext, differentiable_entropy: bool = False,
                  gradient_mask: torch.Tensor | None = None,
                  ) -> tuple[TokenStatistics, torch.Tensor | None]:
    """Token statistics of `micro` under `model` (log-probs carry gradients when grad is on), and
    the reference policy's log-probs when the loss or a `ref` score needs them. `gradient_mask`:
    the positions the loss can differentiate, when known before it (`loss_gradient_mask`; the
    statistics' backward then reads nothing back).

    ``context.statistics_from``: ``"logits"`` computes them from the model's ``[B, T, V]``
    logits (`token_statistics`); ``"hidden"`` from its final hidden states and LM-head weight
    (`token_statistics_from_hidden`: no ``[B, T, V]`` tensor, forward or backward; equal within
    rounding), and the reference policy's log-probs (KL) likewise. The ``ref`` JS reference
    compares two models' full distributions and is refused with ``"hidden"``."""
    profile = context.profiler.phase
    from_hidden = context.statistics_from == "hidden"
    if from_hidden and needs_reference_logits(references):
        raise UsageError("the 'ref' JS reference needs the policy's and the reference policy's "
                         "logits; use statistics_from=logits")
    with profile("forward"):
        outputs = (response_hidden if from_hidden else response_logits)(model, micro, context.shared_prompt)
    reference_outputs = None
    # a reference is kept only for the KL term or the ref score: its forward runs whenever there is
    # one (the kl metric too, e.g. in the full-token warm-up of a ref-scored method, whose own
    # references are dropped then)
    if context.reference is not None:
        with profile("reference forward"):
            reference_outputs = context.reference.outputs(micro, hidden=from_hidden)
    with profile("statistics"):
        if from_hidden:
            weight, bias = linear_lm_head(model)
            stats = token_statistics_from_hidden(
                outputs, weight, micro.response_ids, micro.response_mask,
                temperature=context.temperature, js_references=references, group_ids=group_ids,
                lm_head_bias=bias, differentiable_entropy=differentiable_entropy,
                tile_size=context.tile_size, gradient_mask=gradient_mask)
        else:
            stats = token_statistics(
                outputs, micro.response_ids, micro.response_mask, temperature=context.temperature,
                js_references=tuple(name for name in references
                                    if name != "ref" or reference_outputs is not None),
                reference_logits=reference_outputs, differentiable_entropy=differentiable_entropy,
                tile_size=context.tile_size, group_ids=group_ids, gradient_mask=gradient_mask)
    reference_log_probs = None
    if reference_outputs is not None:
        with torch.no_grad():
            if from_hidden:
                assert context.reference is not None
                weight, bias = linear_lm_head(context.reference.model)
                reference_stats = token_statistics_from_hidden(
                    reference_outputs, weight.detach(), micro.response_ids, micro.response_mask,
                    temperature=context.temperature, tile_size=context.tile_size,
                    lm_head_bias=None if bias is None else bias.detach())
            else:
                reference_stats = token_statistics(
                    reference_outputs, micro.response_ids, micro.response_mask,
                    temperature=context.temperature, tile_size=context.tile_size)
        reference_log_probs = reference_stats.log_probs.detach()
    return stats, reference_log_probs


def micro_batches(rows: int, micro_batch_size: int, group_size: int, whole_groups: bool) -> list[slice]:
    """Row slices of at most `micro_batch_size` rows; with `whole_groups`, of whole groups
    (a multiple of `group_size` rows, at least one group)."""
    size = max(group_size, micro_batch_size // group_size * group_size) if whole_groups else micro_batch_size
    return [slice(start, min(start + size, rows)) for start in range(0, rows, size)]


@torch.no_grad()
def score_batch(model: Any, batch: RolloutBatch, group_ids: torch.Tensor, references: tuple[str, ...],
                context: StepContext, micro_batch_size: int, group_size: int) -> TokenStatistics:
    """Detached statistics [N, T] of the whole batch, in micro-batches of whole groups (the
    scoring pass: the population's scores before the first gradient micro-batch)."""
    with context.profiler.phase("scoring pass"), compute_context(batch.input_ids.device,
                                                                 context.compute_dtype):
        parts = [statistics_of(model, batch.select(part), group_ids[part], references, context)[0]
                 for part in micro_batches(batch.input_ids.shape[0], micro_batch_size, group_size, True)]
        return TokenStatistics.concat([part.detached() for part in parts])


# ---------------------------------------------------------------------------------------------
# One optimizer step's gradient over a mini-batch

def select_population(method: Method, stats: TokenStatistics, batch: RolloutBatch,
                      advantages: torch.Tensor, group_ids: torch.Tensor,
                      old_log_probs: torch.Tensor | None, context: StepContext,
                      generator: torch.Generator) -> Selection:
    """Run the method's selector on the statistics of `batch` (its whole ranking population)."""
    inputs = SelectionInputs(
        stats=stats, response_mask=batch.response_mask, advantages=advantages,
        token_ids=batch.response_ids, generator=generator, group_ids=group_ids,
        old_log_probs=old_log_probs,
        clip_range=(context.loss_config.clip_low, context.loss_config.clip_high))
    with context.profiler.phase("selection"):
        return select(method.selector, inputs, **method.options)


@dataclass
class MicroBatchResult:
    loss: float
    weight: float
    metrics: Mapping[str, float]  # read back when first read (LossMetrics)
    selection: Selection
    stats: TokenStatistics  # detached


def micro_batch_step(model: Any, micro: RolloutBatch, advantages: torch.Tensor,
                     group_ids: torch.Tensor, old_log_probs: torch.Tensor | None, method: Method,
                     context: StepContext, selection: Selection | None,
                     generator: torch.Generator, js_scores: dict[str, torch.Tensor] | None = None,
                     ) -> MicroBatchResult:
    """The algorithm on one micro-batch: statistics -> selection -> loss -> backward.

    `selection` (and the JS scores it was made on) are given when the selection was made on the
    whole population beforehand; otherwise this micro-batch holds its population and selects
    here. The loss is backpropagated scaled by its aggregation weight (the caller divides by the
    mini-batch's total weight)."""
    references = method.js_references if js_scores is None else ()
    # the positions the loss can differentiate, when the selection is known before the statistics
    # (made on the population, or GRPO's every token): the statistics' backward needs no sync
    gradient_mask = None
    if selection is not None:
        gradient_mask = loss_gradient_mask(micro.response_mask, advantages, context.loss_config, selection.mask,
                                           selection.kl_penalty)
    elif method.selector == ALL_TOKENS.selector:
        gradient_mask = loss_gradient_mask(micro.response_mask, advantages, context.loss_config)
    with compute_context(micro.input_ids.device, context.compute_dtype):
        stats, reference_log_probs = statistics_of(
            model, micro, group_ids, references, context,
            differentiable_entropy=context.loss_config.entropy_coef > 0, gradient_mask=gradient_mask)
    if js_scores is not None:
        stats.js_scores = dict(js_scores)
    old = old_log_probs if old_log_probs is not None else stats.log_probs.detach()
    if selection is None:
        selection = select_population(method, stats, micro, advantages, group_ids, old, context, generator)
    loss, metrics = policy_loss(stats, old, advantages, micro.response_mask, selection.mask,
                                context.loss_config, reference_log_probs=reference_log_probs,
                                kl_penalty=selection.kl_penalty)
    weight = aggregation_weight(selection.mask, micro.response_mask, context.loss_config)
    config = context.loss_config
    # no selected token and no regularizer over the rest: a zero loss, whose backward is skipped
    # (its weight, with denominator="all", still counts)
    reached = (config.regularizer_tokens == "all" and (config.kl_coef > 0 or config.entropy_coef > 0)) or bool(
        (selection.mask & micro.response_mask.bool()).any())  # the settings first: no read when they decide
    if weight > 0 and reached and loss.requires_grad:
        with context.profiler.phase("backward"):
            (loss * weight).backward()
    return MicroBatchResult(float(loss.detach()), weight, metrics, selection, stats.detached())


# metric name -> which tokens it averages over (used to combine micro-batches exactly)
_METRIC_COUNTS = {"entropy": "response", "renyi2": "response", "js_score": "response",
                  "kl": "response", "kl_old": "response", "entropy_selected": "selected",
                  "renyi2_selected": "selected", "js_score_selected": "selected",
                  "clip_fraction": "selected"}


class MetricTotals:
    """Token-weighted sums of the loss metrics over micro-batches, so that each step metric is
    the mean over all its tokens (response or selected, per `_METRIC_COUNTS`): NaN when a
    micro-batch's is (its tokens are the batch's), whatever the micro-batch size."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def add_count(self, name: str, count: float) -> None:
        self.counts[name] = self.counts.get(name, 0.0) + count

    def add(self, metrics: Mapping[str, float], num_response: float, num_selected: float) -> None:
        self.add_count("response", num_response)
        self.add_count("selected", num_selected)
        for name, over in _METRIC_COUNTS.items():
            value = metrics.get(name, math.nan)
            count = num_response if over == "response" else num_selected
            if value is None or count == 0:  # a NaN (a NaN token) spreads, as over the whole batch
                continue
            self.sums[name] = self.sums.get(name, 0.0) + value * count
            self.add_count(name, count)

    def merge(self, other: MetricTotals) -> None:
        for name, value in other.sums.items():
            self.sums[name] = self.sums.get(name, 0.0) + value
        for name, value in other.counts.items():
            self.add_count(name, value)

    def mean(self, name: str) -> float:
        return self.sums[name] / self.counts[name] if self.counts.get(name) else math.nan


@dataclass
class UpdateResult:
    """A mini-batch's accumulated gradient: its selection, statistics and summed metrics."""

    selected_mask: torch.Tensor
    stats: TokenStatistics
    loss: float
    tie_decided: torch.Tensor
    """bool ``[B, T]``: the selected tokens decided by a tie at the threshold (all False for a
    selector that ranks nothing; :func:`ict.core.selectors.select`)"""
    totals: MetricTotals = field(default_factory=MetricTotals)


def accumulate_gradients(
    model: Any,
    batch: RolloutBatch,
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor | None,
    method: Method,
    context: StepContext,
    *,
    micro_batch_size: int,
    group_size: int,
    selection_seed: int = 0,
    population_stats: TokenStatistics | None = None,
) -> UpdateResult:
    """Backward the selective policy loss of `batch` into `.grad` (not zeroed here).

    batch: N sequences, prompt-major in groups of `group_size`; advantages [N]; old_log_probs
    [N, T] or None (then the current log-probs, detached: ratio 1). Selection covers the
    selector's whole ranking population, never one micro-batch of a larger one: when every
    micro-batch holds whole populations it runs inside the gradient pass, otherwise on
    statistics of the whole batch (`population_stats`, or a no-grad scoring pass). The gradient
    left in `.grad` is that of the batch's loss aggregated over all its selected tokens."""
    rows = batch.input_ids.shape[0]
    if rows % group_size:
        raise UsageError(f"a batch of {rows} rows does not hold whole groups of {group_size}")
    group_ids = torch.arange(rows, device=batch.input_ids.device) // group_size
    generator = torch.Generator(device=batch.input_ids.device).manual_seed(selection_seed)
    whole_groups = micro_batch_size >= rows or (micro_batch_size % group_size == 0)
    parts = micro_batches(rows, micro_batch_size, group_size, whole_groups=False)
    in_one_pass = whole_groups and (method.population in ("token", "sequence", "group") or len(parts) == 1)
    selection: Selection | None = None
    if not in_one_pass:
        if population_stats is None:
            population_stats = score_batch(model, batch, group_ids, method.js_references, context,
                                           micro_batch_size, group_size)
        old_for_selection = old_log_probs if old_log_probs is not None else population_stats.log_probs
        selection = select_population(method, population_stats, batch, advantages, group_ids,
                                      old_for_selection, context, generator)
    results = []
    for part in parts:
        results.append(micro_batch_step(
            model, batch.select(part), advantages[part], group_ids[part],
            old_log_probs[part] if old_log_probs is not None else None, method, context,
            None if selection is None else Selection(
                selection.mask[part], None if selection.kl_penalty is None else selection.kl_penalty[part],
                selection.tie_decided[part]),
            generator, None if population_stats is None else population_stats.rows(part).js_scores))
    total_weight = sum(result.weight for result in results)
    if total_weight > 0:
        for parameter in model.parameters():
            if parameter.grad is not None:
                parameter.grad.div_(total_weight)
    totals = MetricTotals()
    for part, result in zip(parts, results):
        response = batch.response_mask[part]
        totals.add(result.metrics, float(response.sum()), float((result.selection.mask & response).sum()))
    stats = population_stats if population_stats is not None else TokenStatistics.concat(
        [result.stats for result in results])
    ties = [result.selection.tie_decided for result in results]
    return UpdateResult(
        selected_mask=torch.cat([result.selection.mask for result in results]).cpu(),
        stats=stats,
        loss=(sum(result.weight * result.loss for result in results) / total_weight
              if total_weight > 0 else 0.0),
        totals=totals,
        tie_decided=torch.cat(ties).cpu())




def group_order(num_groups: int, group_size: int, generator: torch.Generator) -> torch.Tensor:
    """A random order of the rows that keeps each group's rows together and in order."""
    groups = torch.randperm(num_groups, generator=generator)
    return (groups.unsqueeze(1) * group_size + torch.arange(group_size)).reshape(-1)




# ---------------------------------------------------------------------------------------------
# The optimizer updates of one rollout batch

@dataclass
class BatchUpdates:
    """What the updates of one rollout batch leave: summed metrics, the loss and gradient norm
    of each applied update (a skipped one, non-finite loss or gradient, adds to neither), the
    count of skipped updates, and each row's first-pass result (`first_pass`: (row indices,
    result) of the first pass over the batch, each row once)."""

    totals: MetricTotals = field(default_factory=MetricTotals)
    losses: list[float] = field(default_factory=list)
    grad_norms: list[float] = field(default_factory=list)
    skipped: int = 0
    first_pass: list[tuple[torch.Tensor, UpdateResult]] = field(default_factory=list)


def initial_scores(model: Any, batch: RolloutBatch, method: Method, context: StepContext,
                   config: TrainConfig) -> TokenStatistics | None:
    """When the batch feeds more than one optimizer step, its statistics before the first update
    (the rollout policy's log-probs: the `old` ones of every update after the first, whose own
    detached log-probs, from the same weights, stand in; see `update_on_batch`); else None."""
    rows = batch.input_ids.shape[0]
    mini_batch_size = config.mini_batch_size or rows
    if config.updates_per_batch <= 1 and mini_batch_size >= rows:
        return None
    group_ids = torch.arange(rows, device=batch.input_ids.device) // config.num_generations
    return score_batch(model, batch, group_ids, method.js_references, context,
                       config.micro_batch_size or mini_batch_size, config.num_generations)


def apply_update(model: Any, optimizer: torch.optim.Optimizer, loss: float, max_grad_norm: float,
                 profiler: StepProfiler) -> tuple[float, bool]:
    """Clip the accumulated gradient to `max_grad_norm` (<= 0: no clipping) and step the
    optimizer unless the loss or the norm is non-finite (then weights and optimizer state stay).
    Returns (gradient norm before clipping, whether the update was applied)."""
    trainable = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
    max_norm = max_grad_norm if max_grad_norm > 0 else float("inf")
    with profiler.phase("optimizer"):
        norm = float(torch.nn.utils.clip_grad_norm_(trainable, max_norm)) if trainable else 0.0
        finite = math.isfinite(loss) and math.isfinite(norm)
        if finite and trainable:
            optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return norm, finite


def update_on_batch(model: Any, optimizer: torch.optim.Optimizer, batch: RolloutBatch,
                    advantages: torch.Tensor, method: Method, context: StepContext,
                    config: TrainConfig, step: int, state: dict[str, Any]) -> BatchUpdates:
    """`config.updates_per_batch` passes over `batch` in mini-batches of whole groups (a seeded
    group order per pass when a mini-batch is smaller than the batch), one optimizer update per
    mini-batch. `state["consecutive_skips"]` counts non-finite updates in a row (reset by a good
    one). The first update's old log-probs are its own detached ones, as with one update a batch:
    the weights are still the scoring pass's, whose separate forward differs by float noise (1e-7),
    and KL-Cov's ``|log p - old|`` turned that noise into a +-kl_coef gradient whose sign moved with
    micro_batch_size."""
    rows, group_size = batch.input_ids.shape[0], config.num_generations
    mini_batch_size = config.mini_batch_size or rows
    initial = initial_scores(model, batch, method, context, config)
    old_log_probs = initial.log_probs if initial is not None else None
    order_generator = torch.Generator().manual_seed(step_seed(config.seed, step, 1))
    updates = BatchUpdates()
    first_pass_updates = math.ceil(rows / mini_batch_size)
    for update_index, index in enumerate(_mini_batch_indices(
            rows, group_size, mini_batch_size, config.updates_per_batch, order_generator)):
        index = index.to(batch.input_ids.device)
        optimizer.zero_grad(set_to_none=True)
        result = accumulate_gradients(
            model, batch.select(index), advantages[index],
            old_log_probs[index] if old_log_probs is not None and update_index > 0 else None, method, context,
            micro_batch_size=config.micro_batch_size or mini_batch_size, group_size=group_size,
            selection_seed=step_seed(selection_base_seed(method.options, config.seed), step, 2) + 1000 * update_index,
            population_stats=initial.rows(index) if update_index == 0 and initial is not None else None)
        norm, applied = apply_update(model, optimizer, result.loss, config.max_grad_norm,
                                     context.profiler)
        if applied:
            updates.losses.append(result.loss)
            updates.grad_norms.append(norm)
            state["consecutive_skips"] = 0
        else:
            updates.skipped += 1
            state["consecutive_skips"] = state.get("consecutive_skips", 0) + 1
        updates.totals.merge(result.totals)
        if update_index < first_pass_updates:
            updates.first_pass.append((index, result))
    return updates


def _mini_batch_indices(rows: int, group_size: int, mini_batch_size: int, passes: int,
                        generator: torch.Generator) -> list[torch.Tensor]:
    """Row indices of each mini-batch, pass after pass (each pass a new group order when a
    mini-batch is smaller than the batch)."""
    indices = []
    for _ in range(passes):
        order = (group_order(rows // group_size, group_size, generator)
                 if mini_batch_size < rows else torch.arange(rows))
        indices.extend(order[start: start + mini_batch_size] for start in range(0, rows, mini_batch_size))
    return indices

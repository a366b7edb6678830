"""The training loop: the one place that wires every part together.

Each step (read top to bottom; `train_step`):

1. take `prompts_per_step` problems (a seeded, resumable stream);
2. sample `num_generations` (G) completions per prompt (`ict.training.rollout`); rows are prompt-major, so
   the G completions of a prompt (a group) are adjacent and `group_ids = row // G`;
3. score them (`ict.answers.rewards`) and turn the rewards into group advantages
   (`ict.core.loss.group_advantages`);
4. for each mini-batch (whole groups), `update_mini_batch`: when the selector's ranking
   population spans several micro-batches, a no-grad scoring pass computes the statistics of the
   whole mini-batch and the selection is made once (`select_population`); then, per micro-batch,
   `micro_batch_step`: forward -> token statistics -> selection -> clipped loss -> backward; the
   accumulated gradient is normalised to the mini-batch's aggregate, a non-finite one is skipped,
   else clipped and applied with AdamW;
5. the diagnostics of the step's selection (`ict.core.diagnostics`) and one JSON line of metrics
   (`ict.training.reporting`); warnings on entropy collapse or explosion; checkpoints.

Which tokens are selected never depends on `micro_batch_size` (a memory setting): a selector
always ranks its whole population (`ict.core.selectors.ranking_population`): the sequence, the group,
or the whole mini-batch.

Ctrl-C (or SIGTERM) lets the current step finish, checkpoints it and stops with
`KeyboardInterrupt`, so `--resume` loses nothing; a second Ctrl-C aborts at once.

Randomness is drawn from generators seeded by (seed, step), so a run resumed from a checkpoint
repeats exactly what the uninterrupted run would have done (CPU, fixed seed).
"""

from __future__ import annotations

import contextlib
import copy
import math
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import torch

from ict.answers.rewards import Reward, build_reward
from ict.core.diagnostics import DIAGNOSTIC_KEYS, token_diagnostics
from ict.core.errors import TrainingDiverged, UsageError
from ict.core.loss import PolicyLossConfig, aggregation_weight, group_advantages, policy_loss
from ict.core.profiling import StepProfiler
from ict.core.selectors import (
    ICT_DEFAULT_REFERENCE,
    Selection,
    SelectionInputs,
    ranking_population,
    required_js_references,
    select,
)
from ict.core.stats import TokenStatistics, token_statistics, token_statistics_from_hidden
from ict.data.training_data import Problem, PromptSampler, load_training_data
from ict.training.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from ict.training.config import TrainConfig, save_config
from ict.training.forward import response_hidden, response_logits
from ict.training.models import (
    LoraOptions,
    compute_context,
    linear_lm_head,
    load_model_and_tokenizer,
    require_chat_template,
    resolve_autocast,
)
from ict.training.reporting import MetricsLogger, print_summary, progress_bar, step_line, write_eval
from ict.training.rollout import RolloutBatch, generate_completions, pack_rollout

# Fields every metrics line carries (tests check them); values are floats or null (NaN).
# `kl`: k3 KL to the reference (initial) policy, null without one; `kl_old`: to the rollout policy.
METRIC_FIELDS = (
    "step", "reward_mean", "reward_std", "accuracy", "entropy", "entropy_selected", "renyi2",
    "renyi2_selected", "selected_fraction", "js_score", "js_score_selected", "clip_fraction", "kl",
    "kl_old", "loss", "grad_norm", "learning_rate", "response_length_mean", "finished_fraction",
    "zero_advantage_fraction", "skipped_updates", "tokens_per_second", "generation_seconds",
    "training_seconds", "step_seconds", *DIAGNOSTIC_KEYS,
)
# Every method computes the paper's score too: `js_score` and the diagnostics' ICT overlap use it.
MONITOR_JS_REFERENCE = ICT_DEFAULT_REFERENCE


def step_seed(seed: int, step: int, stream: int) -> int:
    """Seed of random stream `stream` (0: sampling, 1: mini-batch order, 2: selection) at `step`."""
    return (seed * 1_000_003 + step * 9_973 + stream * 7_919) % (2**63 - 1)


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
    temperature: float = 1.0
    chunk_size: int | None = None
    reference: ReferencePolicy | None = None
    shared_prompt: bool = True
    profiler: StepProfiler = field(default_factory=StepProfiler)
    statistics_from: str = "logits"  # or "hidden" (TrainConfig.statistics_from)
    compute_dtype: torch.dtype | None = None  # autocast dtype of the forward passes (None: off)


def statistics_of(model: Any, micro: RolloutBatch, group_ids: torch.Tensor, references: tuple[str, ...],
                  context: StepContext, differentiable_entropy: bool = False,
                  ) -> tuple[TokenStatistics, torch.Tensor | None]:
    """Token statistics of `micro` under `model` (log-probs carry gradients when grad is on), and
    the reference policy's log-probs when the loss or a `ref` score needs them.

    ``context.statistics_from``: ``"logits"`` computes them from the model's ``[B, T, V]``
    logits (`token_statistics`); ``"hidden"`` from its final hidden states and LM-head weight
    (`token_statistics_from_hidden`: no ``[B, T, V]`` tensor, forward or backward; equal within
    rounding), and the reference policy's log-probs (KL) likewise. The ``ref`` JS reference
    compares two models' full distributions and is refused with ``"hidden"``."""
    profile = context.profiler.phase
    from_hidden = context.statistics_from == "hidden"
    if from_hidden and "ref" in references:
        raise UsageError("the 'ref' JS reference needs the policy's and the reference policy's "
                         "logits; use statistics_from=logits")
    with profile("forward"):
        outputs = (response_hidden if from_hidden else response_logits)(model, micro, context.shared_prompt)
    reference_outputs = None
    if context.reference is not None and ("ref" in references or context.loss_config.kl_coef > 0):
        with profile("reference forward"):
            reference_outputs = context.reference.outputs(micro, hidden=from_hidden)
    with profile("statistics"):
        if from_hidden:
            weight, bias = linear_lm_head(model)
            stats = token_statistics_from_hidden(
                outputs, weight, micro.response_ids, micro.response_mask,
                temperature=context.temperature, js_references=references, group_ids=group_ids,
                lm_head_bias=bias, differentiable_entropy=differentiable_entropy,
                chunk_size=context.chunk_size)
        else:
            stats = token_statistics(
                outputs, micro.response_ids, micro.response_mask, temperature=context.temperature,
                js_references=tuple(name for name in references
                                    if name != "ref" or reference_outputs is not None),
                reference_logits=reference_outputs, differentiable_entropy=differentiable_entropy,
                chunk_size=context.chunk_size, group_ids=group_ids)
    reference_log_probs = None
    if reference_outputs is not None:
        with torch.no_grad():
            if from_hidden:
                assert context.reference is not None
                weight, bias = linear_lm_head(context.reference.model)
                reference_stats = token_statistics_from_hidden(
                    reference_outputs, weight.detach(), micro.response_ids, micro.response_mask,
                    temperature=context.temperature, chunk_size=context.chunk_size,
                    lm_head_bias=None if bias is None else bias.detach())
            else:
                reference_stats = token_statistics(
                    reference_outputs, micro.response_ids, micro.response_mask,
                    temperature=context.temperature, chunk_size=context.chunk_size)
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
    metrics: dict[str, float]
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
    with compute_context(micro.input_ids.device, context.compute_dtype):
        stats, reference_log_probs = statistics_of(
            model, micro, group_ids, references, context,
            differentiable_entropy=context.loss_config.entropy_coef > 0)
    if js_scores is not None:
        stats.js_scores = dict(js_scores)
    old = old_log_probs if old_log_probs is not None else stats.log_probs.detach()
    if selection is None:
        selection = select_population(method, stats, micro, advantages, group_ids, old, context, generator)
    loss, metrics = policy_loss(stats, old, advantages, micro.response_mask, selection.mask,
                                context.loss_config, reference_log_probs=reference_log_probs,
                                kl_penalty=selection.kl_penalty)
    weight = aggregation_weight(selection.mask, micro.response_mask, context.loss_config)
    if weight > 0 and loss.requires_grad:
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
    the mean over all its tokens (response or selected, per `_METRIC_COUNTS`)."""

    def __init__(self) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, float] = {}

    def add_count(self, name: str, count: float) -> None:
        self.counts[name] = self.counts.get(name, 0.0) + count

    def add(self, metrics: dict[str, float], num_response: float, num_selected: float) -> None:
        self.add_count("response", num_response)
        self.add_count("selected", num_selected)
        for name, over in _METRIC_COUNTS.items():
            value = metrics.get(name, math.nan)
            count = num_response if over == "response" else num_selected
            if value is None or not math.isfinite(value) or count == 0:
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
    totals: MetricTotals = field(default_factory=MetricTotals)


def accumulate_gradients(
    model: Any,
    batch: RolloutBatch,
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor | None,
    selector: str | Method,
    selector_options: dict[str, Any] | None,
    loss_config: PolicyLossConfig,
    temperature: float = 1.0,
    micro_batch_size: int = 8,
    chunk_size: int | None = None,
    reference: ReferencePolicy | None = None,
    selection_seed: int = 0,
    group_size: int = 1,
    population_stats: TokenStatistics | None = None,
    shared_prompt: bool = True,
    profiler: StepProfiler | None = None,
    statistics_from: str = "logits",
    compute_dtype: torch.dtype | None = None,
) -> UpdateResult:
    """Backward the selective policy loss of `batch` into `.grad` (not zeroed here).

    batch: N sequences, prompt-major in groups of `group_size`; advantages [N]; old_log_probs
    [N, T] or None (then the current log-probs, detached: ratio 1). Selection covers the
    selector's whole ranking population, never one micro-batch of a larger one: when every
    micro-batch holds whole populations it runs inside the gradient pass, otherwise on
    statistics of the whole batch (`population_stats`, or a no-grad scoring pass). The gradient
    left in `.grad` is that of the batch's loss aggregated over all its selected tokens."""
    method = selector if isinstance(selector, Method) else Method.of(selector, selector_options or {})
    context = StepContext(loss_config, temperature, chunk_size, reference, shared_prompt,
                          profiler or StepProfiler(), statistics_from, compute_dtype)
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
                selection.mask[part], None if selection.kl_penalty is None else selection.kl_penalty[part]),
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
    return UpdateResult(
        selected_mask=torch.cat([result.selection.mask for result in results]).cpu(),
        stats=stats,
        loss=(sum(result.weight * result.loss for result in results) / total_weight
              if total_weight > 0 else 0.0),
        totals=totals)



# ---------------------------------------------------------------------------------------------
# Evaluation

@torch.no_grad()
def evaluate_accuracy(model: Any, tokenizer: Any, problems: list[Problem], reward: Reward,
                      config: TrainConfig, temperature: float | None = None) -> dict[str, float]:
    """Accuracy (task reward >= 1) and mean reward of one completion per held-out problem
    (greedy when the evaluation temperature is 0)."""
    if not problems:
        return {}
    temperature = config.eval_temperature if temperature is None else temperature
    device = next(model.parameters()).device
    with compute_context(device, resolve_autocast(config.autocast, device)):
        rollout = generate_completions(
            model, tokenizer, [problem.prompt for problem in problems], num_samples=1,
            temperature=max(temperature, 1e-5), top_p=config.top_p,
            max_new_tokens=config.max_new_tokens, batch_size=config.generation_batch_size,
            seed=step_seed(config.seed, -1, 0), greedy=temperature <= 0,
            system_prompt=config.system_prompt, shared_prefill=config.generation_shared_prefill)
    totals, task = reward.score(rollout.flat_completions(), problems)
    return {"accuracy": sum(value >= 1.0 for value in task) / len(task),
            "reward_mean": sum(totals) / len(totals), "num_problems": len(problems),
            "example_completion": rollout.completions[0][0]}


# ---------------------------------------------------------------------------------------------
# The run

@dataclass
class TrainResult:
    run_dir: Path
    metrics: list[dict[str, Any]]
    eval_before: dict[str, Any]
    eval_after: dict[str, Any]
    checkpoint: Path | None


def default_run_dir(config: TrainConfig) -> Path:
    return Path("runs") / f"{config.method}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def build_optimizer(model: Any, config: TrainConfig) -> torch.optim.Optimizer:
    parameters = [parameter for parameter in model.parameters() if parameter.requires_grad]
    return torch.optim.AdamW(parameters, lr=config.learning_rate,
                             betas=(config.adam_beta1, config.adam_beta2), eps=config.adam_eps,
                             weight_decay=config.weight_decay, foreach=False)


def weights_dtype(config: TrainConfig) -> str:
    """The dtype option of the trained weights: `auto` is fp32 on every device (mixed precision
    on a GPU comes from `autocast`, as in TRL and verl: fp32 weights, bf16 compute)."""
    return "fp32" if config.dtype == "auto" else config.dtype


def learning_rate_at(config: TrainConfig, step: int) -> float:
    """Linear warm-up over `warmup_steps`, then constant. `step` is 0-based."""
    if config.warmup_steps > 0 and step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    return config.learning_rate


def _make_backend(config: TrainConfig, model: Any) -> Any:
    """vLLM backend when asked (or `auto` on a GPU with vLLM installed), else None (HF)."""
    import importlib.util

    from ict.training.models import OFFLINE_DEFAULT_MODEL, dtype_name, offline_default_path

    device = next(model.parameters()).device
    wanted = config.rollout_backend
    if wanted == "hf" or (wanted == "auto" and (device.type != "cuda"
                                                or importlib.util.find_spec("vllm") is None)):
        return None
    if device.type != "cuda":
        raise UsageError("rollout_backend=vllm needs a CUDA device")
    from ict.training.rollout import VLLMBackend

    path = str(offline_default_path()) if config.model == OFFLINE_DEFAULT_MODEL else config.model
    compute_dtype = resolve_autocast(config.autocast, device)
    dtype = (str(compute_dtype).removeprefix("torch.") if compute_dtype
             else dtype_name(weights_dtype(config), device))
    backend = VLLMBackend(path, dtype=dtype,
                          gpu_memory_utilization=config.vllm_gpu_memory_utilization,
                          max_model_len=4096, seed=config.seed)
    backend.sync_weights(model)
    return backend


def train(config: TrainConfig, console: Any = None,
          on_step: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Run `config.num_steps` training steps; return the metrics and where everything went."""
    from rich.console import Console

    config.resolve()
    console = console or Console(stderr=True, soft_wrap=True)
    run_dir = Path(config.run_dir) if config.run_dir else default_run_dir(config)
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the run directory {run_dir} ({error.strerror}); choose "
                         "another --run-dir") from None
    config.run_dir = str(run_dir)
    if not config.resume:
        if latest_checkpoint(run_dir) is not None:
            raise UsageError(f"{run_dir} already holds checkpoints of a run: pass --resume to "
                             "continue it, or choose another --run-dir")
        (run_dir / "eval.json").unlink(missing_ok=True)
    torch.manual_seed(config.seed)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)

    # ---- data and rewards
    data = load_training_data(
        config.dataset, dataset_config=config.dataset_config, dataset_subset=config.dataset_subset,
        dataset_split=config.dataset_split, dataset_size=config.dataset_size,
        question_field=config.question_field, answer_field=config.answer_field,
        choices_field=config.choices_field, prompt_suffix=config.prompt_suffix,
        eval_size=config.eval_size, seed=config.seed, skip_bad_rows=config.skip_bad_rows)
    reward = build_reward(config.reward, data.train[0].kind, config.answer_extraction,
                          config.format_reward, config.verify_timeout)
    sampler = PromptSampler(data.train, config.prompts_per_step, config.seed)

    # ---- model, reference policy, optimizer
    lora = LoraOptions(rank=config.lora_rank, alpha=config.lora_alpha, dropout=config.lora_dropout)
    # the optimizer updates weights of `dtype` (auto: fp32); `autocast` sets the compute dtype
    model, tokenizer = load_model_and_tokenizer(config.model, dtype=weights_dtype(config),
                                                device=config.device, lora=lora,
                                                gradient_checkpointing=config.gradient_checkpointing)
    require_chat_template(tokenizer, config.model)
    if config.statistics_from == "hidden":
        linear_lm_head(model)  # refuse a soft-capped or scaled head before any work
    if config.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    model.train()
    device = next(model.parameters()).device
    method = method_of(config)
    needs_reference = config.kl_coef > 0 or "ref" in method.js_references
    reference = ReferencePolicy(model, config.shared_prompt_forward) if needs_reference else None
    optimizer = build_optimizer(model, config)
    loss_config = loss_config_of(config)

    # ---- resume
    start_step, trainer_state = 0, {"initial_entropy": None, "warned": [], "consecutive_skips": 0}
    if config.resume:
        checkpoint = latest_checkpoint(run_dir)
        if checkpoint is None:
            console.print(f"[yellow]no complete checkpoint in {run_dir}; starting fresh[/]")
        else:
            trainer_state = load_checkpoint(checkpoint, model, optimizer)
            start_step = int(trainer_state["step"])
            console.print(f"resumed from {checkpoint} (step {start_step})")
    save_config(config, run_dir / "config.yaml")
    logger = MetricsLogger(run_dir, config.tensorboard, resume_step=start_step)
    backend = _make_backend(config, model)
    console.print(f"run directory: {run_dir}  |  method {config.method} ({method.selector} "
                  f"{method.options})  |  data: {data.description}  |  reward: "
                  f"{'+'.join(reward.names)}  |  device {device}")

    eval_before: dict[str, Any] = {}
    if data.eval and start_step == 0:
        eval_before = evaluate_accuracy(model, tokenizer, data.eval, reward, config)
        console.print(f"eval before training: accuracy {eval_before['accuracy']:.3f} on "
                      f"{len(data.eval)} held-out problems")
        write_eval(run_dir, "before", eval_before)

    all_metrics: list[dict[str, Any]] = []
    last_checkpoint = None
    progress = progress_bar(console, config.num_steps, config.progress, start_step)
    profiler = StepProfiler(config.profile, device)
    stop = _StopRequest(console)
    try:
        for step in range(start_step, config.num_steps):
            with profiler.phase("step"):
                metrics = train_step(step, config, model, tokenizer, optimizer, sampler, reward,
                                     method, loss_config, reference, backend, trainer_state,
                                     profiler)
            trainer_state = _check_entropy(metrics, trainer_state, config, console)
            if config.eval_every and data.eval and (step + 1) % config.eval_every == 0:
                evaluation = evaluate_accuracy(model, tokenizer, data.eval, reward, config)
                metrics["eval_accuracy"] = evaluation["accuracy"]
            logger.log(metrics)
            all_metrics.append(metrics)
            if on_step is not None:
                on_step(metrics)
            console.print(step_line(metrics, config.num_steps))  # above the live bar
            if progress is not None:
                progress.update(progress.task_ids[0], advance=1,
                                reward=f"{metrics['reward_mean']:.3f}",
                                entropy=f"{metrics['entropy']:.3f}")
            done = step + 1 == config.num_steps
            diverged = trainer_state["consecutive_skips"] >= config.max_consecutive_skips
            if done or stop.requested or diverged or (config.save_every
                                                      and (step + 1) % config.save_every == 0):
                with profiler.phase("checkpoint"):
                    last_checkpoint = save_checkpoint(run_dir, step + 1, model, optimizer,
                                                      trainer_state, tokenizer,
                                                      keep=config.keep_checkpoints)
            if diverged and not done:
                raise TrainingDiverged(
                    f"{trainer_state['consecutive_skips']} consecutive updates had a non-finite "
                    f"loss or gradient (weights untouched since the last good one, checkpointed "
                    f"in {last_checkpoint}); lower learning_rate or check the data, then "
                    f"--resume --run-dir {run_dir}")
            if stop.requested and not done:
                console.print(f"stopped after step {step + 1}: {last_checkpoint}; continue "
                              f"with --resume --run-dir {run_dir}")
                raise KeyboardInterrupt
    finally:
        stop.restore()
        if progress is not None:
            progress.stop()
        logger.close()
        profiler.close()
    if config.profile:
        steps_run = max(1, len(all_metrics))
        table = profiler.table(steps_run)
        (run_dir / "profile.md").write_text(table + "\n")
        console.print(f"step profile (mean of {steps_run} steps; also in {run_dir / 'profile.md'}):\n"
                      + table)

    eval_after: dict[str, Any] = {}
    if data.eval:
        eval_after = evaluate_accuracy(model, tokenizer, data.eval, reward, config)
        write_eval(run_dir, "after", eval_after)
    print_summary(console, run_dir, eval_before, eval_after, last_checkpoint)
    return TrainResult(run_dir, all_metrics, eval_before, eval_after, last_checkpoint)


class _StopRequest:
    """First SIGINT/SIGTERM: set `requested` (the loop checkpoints after the current step and
    stops); the second: abort at once. Signal handlers exist only in the main thread."""

    def __init__(self, console: Any) -> None:
        self.requested = False
        self.console = console
        self.previous: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            for number in (signal.SIGINT, signal.SIGTERM):
                self.previous[number] = signal.signal(number, self._handle)

    def _handle(self, number: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        with contextlib.suppress(Exception):
            self.console.print("stopping after this step (checkpointed; Ctrl-C again aborts)")

    def restore(self) -> None:
        for number, handler in self.previous.items():
            signal.signal(number, handler)
        self.previous = {}


def method_of(config: TrainConfig) -> Method:
    """The configured method with its resolved options (`TrainConfig.selector_options`)."""
    return Method.of(config.selector_name, config.selector_options())


def loss_config_of(config: TrainConfig) -> PolicyLossConfig:
    return PolicyLossConfig(
        clip_low=config.clip_low, clip_high=config.clip_high, aggregation=config.aggregation,
        max_response_length=config.max_response_length or config.max_new_tokens,
        kl_coef=config.kl_coef, entropy_coef=config.entropy_coef, clip_ratio_c=config.clip_ratio_c,
        regularizer_tokens=config.regularizer_tokens, denominator=config.denominator)


def group_order(num_groups: int, group_size: int, generator: torch.Generator) -> torch.Tensor:
    """A random order of the rows that keeps each group's rows together and in order."""
    groups = torch.randperm(num_groups, generator=generator)
    return (groups.unsqueeze(1) * group_size + torch.arange(group_size)).reshape(-1)


def train_step(step: int, config: TrainConfig, model: Any, tokenizer: Any,
               optimizer: torch.optim.Optimizer, sampler: PromptSampler, reward: Reward,
               method: Method, loss_config: PolicyLossConfig, reference: ReferencePolicy | None,
               backend: Any = None, trainer_state: dict[str, Any] | None = None,
               profiler: StepProfiler | None = None) -> dict[str, Any]:
    """One step: rollouts -> rewards -> advantages -> updates. Returns its metrics line.

    `trainer_state["consecutive_skips"]` counts updates skipped for a non-finite loss or
    gradient in a row (reset by a good update)."""
    step_start = time.perf_counter()
    device = next(model.parameters()).device
    group_size = config.num_generations
    state = trainer_state if trainer_state is not None else {"consecutive_skips": 0}
    profiler = profiler or StepProfiler()

    # 1-2. prompts and rollouts
    problems = sampler.batch(step)
    compute_dtype = resolve_autocast(config.autocast, device)
    with profiler.phase("generation"), compute_context(device, compute_dtype):
        rollout = generate_completions(
            model, tokenizer, [problem.prompt for problem in problems], num_samples=group_size,
            temperature=config.temperature, top_p=config.top_p,
            max_new_tokens=config.max_new_tokens, batch_size=config.generation_batch_size,
            seed=step_seed(config.seed, step, 0), system_prompt=config.system_prompt,
            backend=backend, shared_prefill=config.generation_shared_prefill)

    # 3. rewards and group advantages (completions are prompt-major: groups are adjacent)
    flat_problems = [problem for problem in problems for _ in range(group_size)]
    with profiler.phase("rewards"):
        totals, task = reward.score(rollout.flat_completions(), flat_problems)
    rewards = torch.tensor(totals, dtype=torch.float32)
    advantages = group_advantages(rewards, group_size, config.normalize_advantage_std)

    # 4. pack; when the batch feeds more than one optimizer step, score it once first: the
    #    rollout policy's log-probs (old) and the first mini-batch's population statistics
    training_start = time.perf_counter()
    batch = pack_rollout(rollout, tokenizer.pad_token_id).to(device)
    advantages = advantages.to(device)
    rows = batch.input_ids.shape[0]
    mini_batch_size = config.mini_batch_size or rows
    micro_batch_size = config.micro_batch_size or mini_batch_size
    if step < config.full_token_warmup_steps:
        method = ALL_TOKENS
    context = StepContext(loss_config, config.temperature, config.stats_chunk_size, reference,
                          config.shared_prompt_forward, profiler, config.statistics_from,
                          compute_dtype)
    reuses = config.updates_per_batch > 1 or mini_batch_size < rows
    initial_stats = None
    if reuses:
        group_ids = torch.arange(rows, device=device) // group_size
        initial_stats = score_batch(model, batch, group_ids, method.js_references, context,
                                    micro_batch_size, group_size)
    old_log_probs = initial_stats.log_probs if initial_stats is not None else None

    # 5. mini-batch updates
    learning_rate = learning_rate_at(config, step)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    order_generator = torch.Generator().manual_seed(step_seed(config.seed, step, 1))
    totals_all = MetricTotals()
    losses, grad_norms, skipped = [], [], 0
    first_pass: list[tuple[torch.Tensor, UpdateResult]] = []
    update_index = 0
    for _ in range(config.updates_per_batch):
        order = (group_order(rows // group_size, group_size, order_generator)
                 if mini_batch_size < rows else torch.arange(rows))
        for start in range(0, rows, mini_batch_size):
            index = order[start: start + mini_batch_size].to(device)
            optimizer.zero_grad(set_to_none=True)
            result = accumulate_gradients(
                model, batch.select(index), advantages[index],
                old_log_probs[index] if old_log_probs is not None else None, method, None,
                loss_config, temperature=config.temperature, micro_batch_size=micro_batch_size,
                chunk_size=config.stats_chunk_size, reference=reference,
                selection_seed=step_seed(config.seed, step, 2) + 1000 * update_index,
                group_size=group_size,
                population_stats=initial_stats.rows(index) if update_index == 0 and initial_stats
                is not None else None, shared_prompt=config.shared_prompt_forward,
                profiler=profiler, statistics_from=config.statistics_from,
                compute_dtype=compute_dtype)
            trainable = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
            max_norm = config.max_grad_norm if config.max_grad_norm > 0 else float("inf")
            with profiler.phase("optimizer"):
                norm = float(torch.nn.utils.clip_grad_norm_(trainable, max_norm)) if trainable else 0.0
                finite = math.isfinite(result.loss) and math.isfinite(norm)
                if finite and trainable:
                    optimizer.step()
            if finite:
                grad_norms.append(norm)
                state["consecutive_skips"] = 0
            else:  # weights and optimizer state stay as they are
                skipped += 1
                state["consecutive_skips"] = state.get("consecutive_skips", 0) + 1
            optimizer.zero_grad(set_to_none=True)
            losses.append(result.loss)
            totals_all.merge(result.totals)
            if update_index < math.ceil(rows / mini_batch_size):
                first_pass.append((index, result))
            update_index += 1
    if backend is not None:
        backend.sync_weights(model)
    training_seconds = time.perf_counter() - training_start

    # 6. diagnostics of the step's selection (each row once) and metrics
    rows_seen = torch.cat([index for index, _ in first_pass])
    with profiler.phase("diagnostics"):
        diagnostics = token_diagnostics(
            TokenStatistics.concat([result.stats for _, result in first_pass]),
            batch.response_mask[rows_seen].cpu(),
            torch.cat([result.selected_mask for _, result in first_pass]),
            advantages[rows_seen].cpu())
    lengths = [len(ids) for group in rollout.completion_ids for ids in group]
    step_seconds = time.perf_counter() - step_start
    grouped = rewards.view(-1, group_size)
    zero_advantage = float((grouped.max(dim=1).values == grouped.min(dim=1).values).float().mean())
    finished = [done for group in rollout.finished for done in group]
    counts = totals_all.counts
    finite_losses = [value for value in losses if math.isfinite(value)]
    return {
        "step": step + 1,
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        "accuracy": sum(value >= 1.0 for value in task) / len(task),
        "entropy": totals_all.mean("entropy"),
        "entropy_selected": totals_all.mean("entropy_selected"),
        "renyi2": totals_all.mean("renyi2"),
        "renyi2_selected": totals_all.mean("renyi2_selected"),
        "selected_fraction": (counts.get("selected", 0.0) / counts["response"]
                              if counts.get("response") else math.nan),
        "js_score": totals_all.mean("js_score"),
        "js_score_selected": totals_all.mean("js_score_selected"),
        "clip_fraction": totals_all.mean("clip_fraction") if counts.get("clip_fraction") else 0.0,
        "kl": totals_all.mean("kl"),
        "kl_old": totals_all.mean("kl_old") if counts.get("kl_old") else 0.0,
        "loss": sum(finite_losses) / len(finite_losses) if finite_losses else math.nan,
        "grad_norm": sum(grad_norms) / len(grad_norms) if grad_norms else math.nan,
        "learning_rate": learning_rate,
        "response_length_mean": sum(lengths) / len(lengths),
        "finished_fraction": sum(finished) / len(finished),
        "zero_advantage_fraction": zero_advantage,
        "skipped_updates": skipped,
        "tokens_per_second": rollout.num_generated_tokens / step_seconds,
        "generation_tokens_per_second": (rollout.num_generated_tokens
                                         / max(rollout.generation_seconds, 1e-9)),
        "generation_seconds": rollout.generation_seconds,
        "training_seconds": training_seconds,
        "step_seconds": step_seconds,
        **diagnostics,
        "sample_completion": rollout.completions[0][0][:200],
    }


def _check_entropy(metrics: dict[str, Any], state: dict[str, Any], config: TrainConfig,
                   console: Any) -> dict[str, Any]:
    """Warn (once per kind) when entropy collapses or explodes relative to its first value."""
    entropy = metrics["entropy"]
    if not math.isfinite(entropy):
        return state
    state = dict(state)
    warned = list(state.get("warned", []))
    if state.get("initial_entropy") is None:
        state["initial_entropy"] = entropy
    initial = state["initial_entropy"]
    warning = None
    if entropy < config.entropy_collapse_fraction * initial and "collapse" not in warned:
        warning = "collapse"
        console.print(f"[bold red]warning: entropy collapse[/] at step {metrics['step']}: "
                      f"{entropy:.4f} nats < {config.entropy_collapse_fraction} x initial "
                      f"{initial:.4f}")
    elif entropy > config.entropy_explosion_factor * initial and "explosion" not in warned:
        warning = "explosion"
        console.print(f"[bold red]warning: entropy explosion[/] at step {metrics['step']}: "
                      f"{entropy:.4f} nats > {config.entropy_explosion_factor} x initial "
                      f"{initial:.4f}")
    if warning:
        warned.append(warning)
    metrics["entropy_warning"] = warning
    state["warned"] = warned
    return state

"""The training loop: the one place that wires every part together.

Each step (read top to bottom):

1. take `prompts_per_step` problems (a seeded, resumable stream);
2. sample `num_generations` completions per prompt (`ict.rollout`);
3. score them (`ict.rewards`) and turn the rewards into group advantages
   (`ict.loss.group_advantages`);
4. pack prompt + completion tokens; when a batch is used for more than one optimizer step
   (`updates_per_batch > 1` or several mini-batches) record the rollout policy's log-probs first;
5. for each mini-batch, for each micro-batch: forward, slice the logits of the response positions,
   compute token statistics (`ict.stats.token_statistics`), select the tokens to update
   (`ict.selectors.select_tokens`), compute the clipped loss on them (`ict.loss.policy_loss`),
   backward; then normalise the accumulated gradient so the loss is aggregated over the whole
   mini-batch, clip it, and take an AdamW step;
6. log one JSON line of metrics (+ TensorBoard, progress bar), warn on entropy collapse or
   explosion, checkpoint every `save_every` steps and at the end.

Ctrl-C (or SIGTERM) lets the current step finish, checkpoints it and stops with
`KeyboardInterrupt`, so `--resume` loses nothing; a second Ctrl-C aborts at once.

Randomness is drawn from generators seeded by (seed, step), so a run resumed from a checkpoint
repeats exactly what the uninterrupted run would have done (CPU, fixed seed).
"""

from __future__ import annotations

import contextlib
import copy
import json
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

from ict.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from ict.config import TrainConfig, save_config
from ict.data import Problem, PromptSampler, load_training_data
from ict.errors import UsageError
from ict.loss import PolicyLossConfig, group_advantages, policy_loss
from ict.models import LoraOptions, load_model_and_tokenizer
from ict.rewards import Reward, build_reward
from ict.rollout import RolloutBatch, generate_completions, pack_rollout
from ict.selectors import SelectionInputs, required_js_references, select_tokens
from ict.stats import token_statistics

# Fields every metrics line carries (tests check them); values are floats or null (NaN).
METRIC_FIELDS = (
    "step", "reward_mean", "reward_std", "accuracy", "entropy", "entropy_selected", "renyi2",
    "renyi2_selected", "selected_fraction", "js_score", "js_score_selected", "clip_fraction", "kl",
    "kl_ref", "loss", "grad_norm", "learning_rate", "response_length_mean", "finished_fraction",
    "zero_advantage_fraction", "tokens_per_second", "generation_seconds", "training_seconds",
    "step_seconds",
)
MONITOR_JS_REFERENCE = "seq_mean"


def step_seed(seed: int, step: int, stream: int) -> int:
    """Seed of random stream `stream` (0: sampling, 1: mini-batch order, 2: selection) at `step`."""
    return (seed * 1_000_003 + step * 9_973 + stream * 7_919) % (2**63 - 1)


# ---------------------------------------------------------------------------------------------
# Forward pass and token statistics

def response_logits(model: Any, batch: RolloutBatch) -> torch.Tensor:
    """Logits [B, T, V] of the distributions that produced the response tokens.

    `logits[:, t]` comes from position `P - 1 + t`; only those positions are kept (the prompt's
    logits are never materialised beyond the model's own output)."""
    prompt_length = batch.prompt_length
    length = batch.response_ids.shape[1]
    # Left padding: positions count real tokens only, as `generate` does.
    position_ids = (batch.attention_mask.long().cumsum(-1) - 1).clamp(min=0)
    outputs = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask,
                    position_ids=position_ids, logits_to_keep=length + 1, use_cache=False)
    # logits_to_keep=T+1 keeps positions P-1 .. P+T-1; drop the last (it predicts past the end).
    logits = outputs.logits[:, :-1]
    assert logits.shape[1] == length and batch.input_ids.shape[1] == prompt_length + length
    return logits


@torch.no_grad()
def rollout_log_probs(model: Any, batch: RolloutBatch, temperature: float, micro_batch_size: int,
                      chunk_size: int | None) -> torch.Tensor:
    """log pi(token) [N, T] of the response tokens under `model` (no grad), in micro-batches."""
    parts = []
    for start in range(0, batch.input_ids.shape[0], micro_batch_size):
        micro = batch.select(slice(start, start + micro_batch_size))
        stats = token_statistics(response_logits(model, micro), micro.response_ids,
                                 micro.response_mask, temperature=temperature,
                                 chunk_size=chunk_size)
        parts.append(stats.log_probs.detach())
    return torch.cat(parts)


class ReferencePolicy:
    """The initial policy (for `kl_coef > 0` and the `ref` JS reference): a frozen copy of the
    model, or the LoRA model with its adapter disabled."""

    def __init__(self, model: Any) -> None:
        self.uses_adapter = hasattr(model, "disable_adapter")
        self.model = model if self.uses_adapter else copy.deepcopy(model).eval()
        if not self.uses_adapter:
            for parameter in self.model.parameters():
                parameter.requires_grad_(False)

    @torch.no_grad()
    def logits(self, batch: RolloutBatch) -> torch.Tensor:
        if self.uses_adapter:
            with self.model.disable_adapter():
                return response_logits(self.model, batch).detach()
        return response_logits(self.model, batch).detach()


# ---------------------------------------------------------------------------------------------
# One optimizer step's gradient over a mini-batch

@dataclass
class UpdateResult:
    """Gradient accumulation result: the selected mask of every row, summed metrics."""

    selected_mask: torch.Tensor
    loss: float
    metric_sums: dict[str, float] = field(default_factory=dict)
    metric_counts: dict[str, float] = field(default_factory=dict)


def aggregation_weight(selected: torch.Tensor, aggregation: str) -> float:
    """The denominator a micro-batch contributes to its mini-batch's aggregated loss, so that
    `sum_micro weight_micro * loss_micro / sum_micro weight_micro` equals the loss of the whole
    mini-batch: selected tokens (token_mean), sequences with a selected token
    (seq_mean_token_mean), sequences (seq_mean_token_sum_norm)."""
    if aggregation == "token_mean":
        return float(selected.sum())
    if aggregation == "seq_mean_token_mean":
        return float((selected.sum(dim=-1) > 0).sum())
    return float(selected.shape[0])


# metric name -> which tokens it averages over (used to combine micro-batches exactly)
_METRIC_COUNTS = {"entropy": "response", "renyi2": "response", "js_score": "response",
                  "kl": "response", "kl_old": "response", "entropy_selected": "selected",
                  "renyi2_selected": "selected", "js_score_selected": "selected",
                  "clip_fraction": "selected"}


def accumulate_gradients(
    model: Any,
    batch: RolloutBatch,
    advantages: torch.Tensor,
    old_log_probs: torch.Tensor | None,
    selector: str,
    selector_options: dict[str, Any],
    loss_config: PolicyLossConfig,
    temperature: float = 1.0,
    micro_batch_size: int = 8,
    chunk_size: int | None = None,
    reference: ReferencePolicy | None = None,
    selection_seed: int = 0,
) -> UpdateResult:
    """Backward the selective policy loss of `batch` into `.grad` (not zeroed here).

    batch: N sequences; advantages [N]; old_log_probs [N, T] or None (then the current
    log-probs, detached: ratio 1). Selection runs per micro-batch (a `batch`-scope ranking covers
    the micro-batch, as in the 20-Entropy reference). The gradient left in `.grad` is that of
    the mini-batch loss aggregated over all its selected tokens (see `aggregation_weight`)."""
    js_references = tuple(dict.fromkeys(
        (*required_js_references(selector, selector_options), MONITOR_JS_REFERENCE)))
    rows = batch.input_ids.shape[0]
    selected_rows: list[torch.Tensor] = []
    weighted_losses: list[tuple[float, float]] = []
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    trainable = [parameter for parameter in model.parameters() if parameter.requires_grad]
    for micro_index, start in enumerate(range(0, rows, micro_batch_size)):
        part = slice(start, start + micro_batch_size)
        micro = batch.select(part)
        logits = response_logits(model, micro)
        reference_logits = None
        need_reference = reference is not None and ("ref" in js_references
                                                    or loss_config.kl_coef > 0)
        if need_reference:
            assert reference is not None
            reference_logits = reference.logits(micro)
        stats = token_statistics(
            logits, micro.response_ids, micro.response_mask, temperature=temperature,
            js_references=tuple(name for name in js_references
                                if name != "ref" or reference_logits is not None),
            reference_logits=reference_logits,
            differentiable_entropy=loss_config.entropy_coef > 0, chunk_size=chunk_size)
        reference_log_probs = None
        if reference_logits is not None:
            reference_log_probs = token_statistics(
                reference_logits, micro.response_ids, micro.response_mask,
                temperature=temperature, chunk_size=chunk_size).log_probs.detach()
        del reference_logits
        micro_advantages = advantages[part]
        generator = torch.Generator(device=logits.device).manual_seed(
            selection_seed + micro_index)
        selected = select_tokens(selector, SelectionInputs(
            stats=stats, response_mask=micro.response_mask, advantages=micro_advantages,
            token_ids=micro.response_ids, generator=generator), **selector_options)
        old = old_log_probs[part] if old_log_probs is not None else stats.log_probs.detach()
        loss, metrics = policy_loss(stats, old, micro_advantages, micro.response_mask, selected,
                                    loss_config, reference_log_probs=reference_log_probs)
        weight = aggregation_weight(selected & micro.response_mask, loss_config.aggregation)
        if weight > 0 and loss.requires_grad:
            (loss * weight).backward()
        weighted_losses.append((weight, float(loss.detach())))
        selected_rows.append(selected.detach().cpu())
        num_response = float(micro.response_mask.sum())
        num_selected = float((selected & micro.response_mask).sum())
        counts["response"] = counts.get("response", 0.0) + num_response
        counts["selected"] = counts.get("selected", 0.0) + num_selected
        for name, over in _METRIC_COUNTS.items():
            value = metrics.get(name, math.nan)
            count = num_response if over == "response" else num_selected
            if value is None or not math.isfinite(value) or count == 0:
                continue
            sums[name] = sums.get(name, 0.0) + value * count
            counts[name] = counts.get(name, 0.0) + count
    total_weight = sum(weight for weight, _ in weighted_losses)
    if total_weight > 0:
        for parameter in trainable:
            if parameter.grad is not None:
                parameter.grad.div_(total_weight)
    loss_value = (sum(weight * value for weight, value in weighted_losses) / total_weight
                  if total_weight > 0 else 0.0)
    width = batch.response_mask.shape[1]
    mask = torch.zeros((rows, width), dtype=torch.bool)
    mask[:] = torch.cat(selected_rows)
    return UpdateResult(selected_mask=mask, loss=loss_value, metric_sums=sums,
                        metric_counts=counts)


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
    rollout = generate_completions(
        model, tokenizer, [problem.prompt for problem in problems], num_samples=1,
        temperature=max(temperature, 1e-5), top_p=config.top_p,
        max_new_tokens=config.max_new_tokens, batch_size=config.generation_batch_size,
        seed=step_seed(config.seed, -1, 0), greedy=temperature <= 0,
        system_prompt=config.system_prompt)
    totals, task = reward.score(rollout.flat_completions(), problems)
    return {"accuracy": sum(value >= 1.0 for value in task) / len(task),
            "reward_mean": sum(totals) / len(totals), "num_problems": len(problems),
            "example_completion": rollout.completions[0][0]}


# ---------------------------------------------------------------------------------------------
# Logging helpers

def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, torch.Tensor):
        return _json_value(value.item())
    return value


class MetricsLogger:
    """metrics.jsonl (one JSON object per step) + TensorBoard scalars."""

    def __init__(self, run_dir: Path, tensorboard: bool, resume_step: int = 0) -> None:
        self.path = run_dir / "metrics.jsonl"
        if self.path.exists():  # a resumed run keeps the lines up to its checkpoint only
            lines = [line for line in self.path.read_text().splitlines() if line.strip()
                     and json.loads(line).get("step", 0) <= resume_step]
            self.path.write_text("".join(line + "\n" for line in lines))
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step + 1
                                        if resume_step else None)

    def log(self, metrics: dict[str, Any]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps({key: _json_value(value) for key, value in metrics.items()})
                         + "\n")
        if self.writer is not None:
            for key, value in metrics.items():
                if key != "step" and isinstance(value, int | float) and math.isfinite(value):
                    self.writer.add_scalar(f"train/{key}", value, metrics["step"])
            self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def sparkline(values: list[float]) -> str:
    """A one-line text chart of `values` (for the terminal summary)."""
    bars = "▁▂▃▄▅▆▇█"
    finite = [value for value in values if math.isfinite(value)]
    if not finite:
        return ""
    low, high = min(finite), max(finite)
    span = high - low or 1.0
    return "".join(bars[min(len(bars) - 1, int((value - low) / span * (len(bars) - 1) + 0.5))]
                   if math.isfinite(value) else " " for value in values)


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


def learning_rate_at(config: TrainConfig, step: int) -> float:
    """Linear warm-up over `warmup_steps`, then constant. `step` is 0-based."""
    if config.warmup_steps > 0 and step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    return config.learning_rate


def _make_backend(config: TrainConfig, model: Any) -> Any:
    """vLLM backend when asked (or `auto` on a GPU with vLLM installed), else None (HF)."""
    import importlib.util

    from ict.models import OFFLINE_DEFAULT_MODEL, offline_default_path

    device = next(model.parameters()).device
    wanted = config.rollout_backend
    if wanted == "hf" or (wanted == "auto" and (device.type != "cuda"
                                                or importlib.util.find_spec("vllm") is None)):
        return None
    if device.type != "cuda":
        raise UsageError("rollout_backend=vllm needs a CUDA device")
    from ict.rollout import VLLMBackend

    path = str(offline_default_path()) if config.model == OFFLINE_DEFAULT_MODEL else config.model
    backend = VLLMBackend(path, dtype="bfloat16" if config.dtype in ("auto", "bf16") else "float32",
                          gpu_memory_utilization=config.vllm_gpu_memory_utilization,
                          max_model_len=4096, seed=config.seed)
    backend.sync_weights(model)
    return backend


def train(config: TrainConfig, console: Any = None,
          on_step: Callable[[dict[str, Any]], None] | None = None) -> TrainResult:
    """Run `config.num_steps` training steps; return the metrics and where everything went."""
    from rich.console import Console

    config.validate()
    console = console or Console(stderr=True, soft_wrap=True)
    run_dir = Path(config.run_dir) if config.run_dir else default_run_dir(config)
    run_dir.mkdir(parents=True, exist_ok=True)
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
        eval_size=config.eval_size, seed=config.seed)
    reward = build_reward(config.reward, data.train[0].kind, config.answer_extraction,
                          config.format_reward, config.verify_timeout)
    sampler = PromptSampler(data.train, config.prompts_per_step, config.seed)

    # ---- model, reference policy, optimizer
    lora = LoraOptions(rank=config.lora_rank, alpha=config.lora_alpha, dropout=config.lora_dropout)
    model, tokenizer = load_model_and_tokenizer(config.model, dtype=config.dtype,
                                                device=config.device, lora=lora,
                                                gradient_checkpointing=config.gradient_checkpointing)
    if config.freeze_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    model.train()
    device = next(model.parameters()).device
    selector, selector_options = config.selector, config.selector_options()
    if selector == "random":
        selector_options = {**selector_options, "seed": None}  # the per-step generator decides
    needs_reference = config.kl_coef > 0 or "ref" in required_js_references(selector,
                                                                            selector_options)
    reference = ReferencePolicy(model) if needs_reference else None
    optimizer = build_optimizer(model, config)
    loss_config = PolicyLossConfig(
        clip_low=config.clip_low, clip_high=config.clip_high, aggregation=config.aggregation,
        max_response_length=config.max_response_length or config.max_new_tokens,
        kl_coef=config.kl_coef, entropy_coef=config.entropy_coef)

    # ---- resume
    start_step, trainer_state = 0, {"initial_entropy": None, "warned": []}
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
    console.print(f"run directory: {run_dir}  |  method {config.method} ({selector} "
                  f"{selector_options})  |  data: {data.description}  |  reward: "
                  f"{'+'.join(reward.names)}  |  device {device}")

    eval_before: dict[str, Any] = {}
    if data.eval and start_step == 0:
        eval_before = evaluate_accuracy(model, tokenizer, data.eval, reward, config)
        console.print(f"eval before training: accuracy {eval_before['accuracy']:.3f} on "
                      f"{len(data.eval)} held-out problems")
        _write_eval(run_dir, "before", eval_before)

    all_metrics: list[dict[str, Any]] = []
    last_checkpoint = None
    progress = _progress(console, config, start_step)
    stop = _StopRequest(console)
    try:
        for step in range(start_step, config.num_steps):
            metrics = train_step(step, config, model, tokenizer, optimizer, sampler, reward,
                                 selector, selector_options, loss_config, reference, backend)
            trainer_state = _check_entropy(metrics, trainer_state, config, console)
            if config.eval_every and data.eval and (step + 1) % config.eval_every == 0:
                evaluation = evaluate_accuracy(model, tokenizer, data.eval, reward, config)
                metrics["eval_accuracy"] = evaluation["accuracy"]
            logger.log(metrics)
            all_metrics.append(metrics)
            if on_step is not None:
                on_step(metrics)
            console.print(_step_line(metrics, config.num_steps))  # above the live bar
            if progress is not None:
                progress.update(progress.task_ids[0], advance=1,
                                reward=f"{metrics['reward_mean']:.3f}",
                                entropy=f"{_fmt(metrics['entropy'])}")
            done = step + 1 == config.num_steps
            if done or stop.requested or (config.save_every
                                          and (step + 1) % config.save_every == 0):
                last_checkpoint = save_checkpoint(run_dir, step + 1, model, optimizer,
                                                  trainer_state, tokenizer,
                                                  keep=config.keep_checkpoints)
            if stop.requested and not done:
                console.print(f"stopped after step {step + 1}: {last_checkpoint}; continue "
                              f"with --resume --run-dir {run_dir}")
                raise KeyboardInterrupt
    finally:
        stop.restore()
        if progress is not None:
            progress.stop()
        logger.close()

    eval_after: dict[str, Any] = {}
    if data.eval:
        eval_after = evaluate_accuracy(model, tokenizer, data.eval, reward, config)
        _write_eval(run_dir, "after", eval_after)
    _summary(console, run_dir, eval_before, eval_after, last_checkpoint)
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


def train_step(step: int, config: TrainConfig, model: Any, tokenizer: Any,
               optimizer: torch.optim.Optimizer, sampler: PromptSampler, reward: Reward,
               selector: str, selector_options: dict[str, Any], loss_config: PolicyLossConfig,
               reference: ReferencePolicy | None, backend: Any = None) -> dict[str, Any]:
    """One step: rollouts -> rewards -> advantages -> updates. Returns its metrics line."""
    step_start = time.perf_counter()
    device = next(model.parameters()).device
    group_size = config.num_generations

    # 1-2. prompts and rollouts
    problems = sampler.batch(step)
    rollout = generate_completions(
        model, tokenizer, [problem.prompt for problem in problems], num_samples=group_size,
        temperature=config.temperature, top_p=config.top_p, max_new_tokens=config.max_new_tokens,
        batch_size=config.generation_batch_size, seed=step_seed(config.seed, step, 0),
        system_prompt=config.system_prompt, backend=backend)

    # 3. rewards and group advantages (completions are prompt-major: groups are adjacent)
    flat_problems = [problem for problem in problems for _ in range(group_size)]
    totals, task = reward.score(rollout.flat_completions(), flat_problems)
    rewards = torch.tensor(totals, dtype=torch.float32)
    advantages = group_advantages(rewards, group_size, config.normalize_advantage_std)

    # 4. pack; old log-probs only when the batch feeds more than one optimizer step
    training_start = time.perf_counter()
    batch = pack_rollout(rollout, tokenizer.pad_token_id).to(device)
    advantages = advantages.to(device)
    rows = batch.input_ids.shape[0]
    mini_batch_size = config.mini_batch_size or rows
    reuses = config.updates_per_batch > 1 or mini_batch_size < rows
    old_log_probs = (rollout_log_probs(model, batch, config.temperature, config.micro_batch_size,
                                       config.stats_chunk_size) if reuses else None)

    # 5. mini-batch updates
    learning_rate = learning_rate_at(config, step)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    order_generator = torch.Generator().manual_seed(step_seed(config.seed, step, 1))
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    losses, grad_norms = [], []
    update_index = 0
    for _ in range(config.updates_per_batch):
        order = (torch.randperm(rows, generator=order_generator) if mini_batch_size < rows
                 else torch.arange(rows))
        for start in range(0, rows, mini_batch_size):
            index = order[start: start + mini_batch_size].to(device)
            optimizer.zero_grad(set_to_none=True)
            result = accumulate_gradients(
                model, batch.select(index), advantages[index],
                old_log_probs[index] if old_log_probs is not None else None, selector,
                selector_options, loss_config, temperature=config.temperature,
                micro_batch_size=config.micro_batch_size, chunk_size=config.stats_chunk_size,
                reference=reference,
                selection_seed=step_seed(config.seed, step, 2) + 1000 * update_index)
            trainable = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
            if trainable:
                max_norm = config.max_grad_norm if config.max_grad_norm > 0 else float("inf")
                grad_norms.append(float(torch.nn.utils.clip_grad_norm_(trainable, max_norm)))
                optimizer.step()
            else:
                grad_norms.append(0.0)
            optimizer.zero_grad(set_to_none=True)
            losses.append(result.loss)
            for key, value in result.metric_sums.items():
                sums[key] = sums.get(key, 0.0) + value
            for key, value in result.metric_counts.items():
                counts[key] = counts.get(key, 0.0) + value
            update_index += 1
    if backend is not None:
        backend.sync_weights(model)
    training_seconds = time.perf_counter() - training_start

    # 6. metrics
    def mean_of(name: str) -> float:
        return sums[name] / counts[name] if counts.get(name) else math.nan

    lengths = [len(ids) for group in rollout.completion_ids for ids in group]
    step_seconds = time.perf_counter() - step_start
    grouped = rewards.view(-1, group_size)
    zero_advantage = float((grouped.max(dim=1).values == grouped.min(dim=1).values).float().mean())
    finished = [done for group in rollout.finished for done in group]
    return {
        "step": step + 1,
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        "accuracy": sum(value >= 1.0 for value in task) / len(task),
        "entropy": mean_of("entropy"),
        "entropy_selected": mean_of("entropy_selected"),
        "renyi2": mean_of("renyi2"),
        "renyi2_selected": mean_of("renyi2_selected"),
        "selected_fraction": (counts.get("selected", 0.0) / counts["response"]
                              if counts.get("response") else math.nan),
        "js_score": mean_of("js_score"),
        "js_score_selected": mean_of("js_score_selected"),
        "clip_fraction": mean_of("clip_fraction") if counts.get("clip_fraction") else 0.0,
        "kl": mean_of("kl_old") if counts.get("kl_old") else 0.0,
        "kl_ref": mean_of("kl"),
        "loss": sum(losses) / len(losses),
        "grad_norm": sum(grad_norms) / len(grad_norms),
        "learning_rate": learning_rate,
        "response_length_mean": sum(lengths) / len(lengths),
        "finished_fraction": sum(finished) / len(finished),
        "zero_advantage_fraction": zero_advantage,
        "tokens_per_second": rollout.num_generated_tokens / step_seconds,
        "generation_tokens_per_second": (rollout.num_generated_tokens
                                         / max(rollout.generation_seconds, 1e-9)),
        "generation_seconds": rollout.generation_seconds,
        "training_seconds": training_seconds,
        "step_seconds": step_seconds,
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


def _window_mean(values: list[float]) -> str:
    finite = [value for value in values if math.isfinite(value)]
    return _fmt(sum(finite) / len(finite)) if finite else "nan"


def _fmt(value: float) -> str:
    return f"{value:.3f}" if isinstance(value, float) and math.isfinite(value) else "nan"


def _step_line(metrics: dict[str, Any], total: int) -> str:
    return (f"step {metrics['step']:>4}/{total}  reward {metrics['reward_mean']:.3f}  acc "
            f"{metrics['accuracy']:.3f}  entropy {_fmt(metrics['entropy'])}  renyi2 "
            f"{_fmt(metrics['renyi2'])}  selected {_fmt(metrics['selected_fraction'])}  len "
            f"{metrics['response_length_mean']:.1f}  {metrics['step_seconds']:.1f}s")


def _progress(console: Any, config: TrainConfig, start_step: int) -> Any:
    """A rich progress bar with reward and entropy, or None (no TTY or progress disabled)."""
    if not config.progress or not console.is_terminal:
        return None
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
                        TextColumn("reward {task.fields[reward]}"),
                        TextColumn("entropy {task.fields[entropy]}"), TimeElapsedColumn(),
                        TimeRemainingColumn(), console=console)
    progress.add_task("train", total=config.num_steps, completed=start_step, reward="-",
                      entropy="-")
    progress.start()
    return progress


def _write_eval(run_dir: Path, name: str, result: dict[str, Any]) -> None:
    path = run_dir / "eval.json"
    data = json.loads(path.read_text()) if path.exists() else {}
    data[name] = result
    path.write_text(json.dumps(data, indent=1))


def _summary(console: Any, run_dir: Path, before: dict[str, Any], after: dict[str, Any],
             checkpoint: Path | None) -> None:
    metrics_path = run_dir / "metrics.jsonl"
    lines = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    rewards = [line["reward_mean"] for line in lines]
    entropies = [line["entropy"] if line["entropy"] is not None else math.nan for line in lines]
    if rewards:
        window = min(10, max(1, len(rewards) // 2))
        console.print(f"reward per step   {sparkline(rewards)}  (mean of the first {window} "
                      f"steps {_window_mean(rewards[:window])} -> last {window} "
                      f"{_window_mean(rewards[-window:])})")
        console.print(f"entropy per step  {sparkline(entropies)}  (first {window} "
                      f"{_window_mean(entropies[:window])} -> last {window} "
                      f"{_window_mean(entropies[-window:])} nats)")
    plot = _plot_curves(run_dir, lines)
    if plot is not None:
        console.print(f"reward/entropy plot: {plot}")
    if before and after:
        console.print(f"held-out accuracy: before {before['accuracy']:.3f} -> after "
                      f"{after['accuracy']:.3f} ({after['num_problems']} problems)")
    console.print(f"metrics: {metrics_path}  tensorboard: {run_dir / 'tensorboard'}")
    if checkpoint is not None:
        console.print(f"checkpoint: {checkpoint}")


def _plot_curves(run_dir: Path, lines: list[dict[str, Any]]) -> Path | None:
    """Save reward, accuracy and entropy per step as RUN_DIR/curves.png (None if no data)."""
    if not lines:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [line["step"] for line in lines]

    def series(name: str) -> list[float]:
        return [line.get(name) if line.get(name) is not None else math.nan for line in lines]

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    left.plot(steps, series("reward_mean"), label="reward mean")
    left.plot(steps, series("accuracy"), label="accuracy")
    left.set_xlabel("step")
    left.legend()
    right.plot(steps, series("entropy"), label="Shannon entropy (all)")
    right.plot(steps, series("renyi2"), label="Renyi-2 entropy (all)")
    right.plot(steps, series("entropy_selected"), label="Shannon entropy (selected)", ls="--")
    right.set_xlabel("step")
    right.set_ylabel("nats")
    right.legend(fontsize=7)
    figure.tight_layout()
    path = run_dir / "curves.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path

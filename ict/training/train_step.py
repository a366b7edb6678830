"""One training step of `ict train`, read top to bottom (`train_step`):

1. take `prompts_per_step` problems (a seeded, resumable stream);
2. sample `num_generations` (G) completions per prompt (`ict.models.rollout`); rows are
   prompt-major, so the G completions of a prompt (a group) are adjacent and `group_ids = row // G`;
3. score them (`ict.answers.rewards`) and turn the rewards into group advantages
   (`ict.core.loss.group_advantages`);
4. the policy updates (`ict.training.step.update_on_batch`: statistics -> selection -> loss ->
   backward per micro-batch, accumulated per mini-batch, one optimizer update per mini-batch);
5. the diagnostics of the step's selection (`ict.core.diagnostics`) and its metrics line
   (`ict.training.step_metrics`).

The run around the steps (run directory, resume, evaluation, logging, checkpoints) is
`ict.training.trainer`.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from ict.answers.rewards import Reward, soft_overlong_penalty
from ict.core.loss import PolicyLossConfig, group_advantages, mask_truncated_completions
from ict.core.profiling import StepProfiler
from ict.core.seeding import step_seed
from ict.core.stats import parse_tile_size
from ict.data.training_data import Problem, PromptSampler
from ict.models.loading import compute_context, resolve_autocast
from ict.models.rollout import SamplingSettings, generate_completions, pack_rollout
from ict.training.config import TrainConfig
from ict.training.step import (
    ALL_TOKENS,
    Method,
    ReferencePolicy,
    StepContext,
    statistics_source,
    update_on_batch,
)
from ict.training.step_metrics import (
    length_metrics,
    reward_metrics,
    selection_diagnostics,
    speed_metrics,
    update_metrics,
)


def learning_rate_at(config: TrainConfig, step: int) -> float:
    """Linear warm-up over `warmup_steps`, then constant. `step` is 0-based."""
    if config.warmup_steps > 0 and step < config.warmup_steps:
        return config.learning_rate * (step + 1) / config.warmup_steps
    return config.learning_rate


def method_of(config: TrainConfig) -> Method:
    """The configured method with its resolved options (`TrainConfig.selector_options`)."""
    return Method.of(config.selector_name, config.selector_options())


def loss_config_of(config: TrainConfig) -> PolicyLossConfig:
    return PolicyLossConfig(
        clip_low=config.clip_low, clip_high=config.clip_high, aggregation=config.aggregation,
        max_response_length=config.max_response_length or config.max_new_tokens,
        kl_coef=config.kl_coef, entropy_coef=config.entropy_coef, clip_ratio_c=config.clip_ratio_c,
        regularizer_tokens=config.regularizer_tokens, denominator=config.denominator)


def train_step(step: int, config: TrainConfig, model: Any, tokenizer: Any,
               optimizer: torch.optim.Optimizer, sampler: PromptSampler, reward: Reward,
               method: Method, loss_config: PolicyLossConfig, reference: ReferencePolicy | None,
               backend: Any = None, trainer_state: dict[str, Any] | None = None,
               profiler: StepProfiler | None = None) -> dict[str, Any]:
    """One step: rollouts -> rewards -> advantages -> updates (`ict.training.step`) ->
    diagnostics and metrics. Returns its metrics line.

    `trainer_state["consecutive_skips"]` counts updates skipped for a non-finite loss or
    gradient in a row (reset by a good update)."""
    step_start = time.perf_counter()
    device = next(model.parameters()).device
    state = trainer_state if trainer_state is not None else {"consecutive_skips": 0}
    profiler = profiler or StepProfiler()
    compute_dtype = resolve_autocast(config.autocast, device)
    problems = sampler.batch(step)
    rollout = _generate(step, config, model, tokenizer, problems, backend, profiler, compute_dtype)
    rewards, task = _score(rollout, problems, reward, config.num_generations, profiler)
    penalties = _overlong_penalties(rollout, config)
    rewards = rewards + penalties
    advantages = group_advantages(rewards, config.num_generations,
                                  config.normalize_advantage_std).to(device)
    training_start = time.perf_counter()
    batch = pack_rollout(rollout, tokenizer.pad_token_id).to(device)
    if config.mask_truncated_completions:
        finished = torch.tensor([done for group in rollout.finished for done in group])
        batch.response_mask = mask_truncated_completions(batch.response_mask, finished)
    statistics_from = statistics_source(config.statistics_from, model, device, method.js_references)
    warmup = step < config.full_token_warmup_steps
    if warmup:
        method = ALL_TOKENS
    context = StepContext(loss_config, config.temperature, parse_tile_size(config.stats_tile_size), reference,
                          config.shared_prompt_forward, profiler, statistics_from, compute_dtype)
    learning_rate = learning_rate_at(config, step)
    for group in optimizer.param_groups:
        group["lr"] = learning_rate
    updates = update_on_batch(model, optimizer, batch, advantages, method, context, config, step,
                              state)
    if backend is not None:
        backend.sync_weights(model)
    training_seconds = time.perf_counter() - training_start
    with profiler.phase("diagnostics"):
        diagnostics = selection_diagnostics(updates, batch, advantages, rollout,
                                             config.num_generations, tokenizer)
    grouped = rewards.view(-1, config.num_generations)
    return {"step": step + 1, **reward_metrics(rewards, task), **update_metrics(updates),
            "learning_rate": learning_rate, **length_metrics(rollout),
            "zero_advantage_fraction": float((grouped.max(dim=1).values
                                              == grouped.min(dim=1).values).float().mean()),
            "overlong_penalty_mean": float(penalties.mean()),
            "skipped_updates": updates.skipped, "full_token_warmup": float(warmup),
            **speed_metrics(rollout, time.perf_counter() - step_start, training_seconds),
            **diagnostics, "sample_completion": rollout.completions[0][0][:200]}


def sampling_settings(config: TrainConfig) -> SamplingSettings:
    """The training rollouts' sampling (`config.temperature` is also every statistic's)."""
    return SamplingSettings(config.temperature, config.max_new_tokens, config.top_p)


def _generate(step: int, config: TrainConfig, model: Any, tokenizer: Any, problems: list[Problem],
              backend: Any, profiler: StepProfiler, compute_dtype: torch.dtype | None) -> Any:
    """`num_generations` completions of each problem, prompt-major (groups are adjacent)."""
    device = next(model.parameters()).device
    with profiler.phase("generation"), compute_context(device, compute_dtype):
        return generate_completions(
            model, tokenizer, [problem.prompt for problem in problems], sampling_settings(config),
            num_samples=config.num_generations,
            batch_size=config.generation_batch_size, seed=step_seed(config.seed, step, 0),
            system_prompt=config.system_prompt, backend=backend,
            shared_prefill=config.generation_shared_prefill)


def _score(rollout: Any, problems: list[Problem], reward: Reward, group_size: int,
           profiler: StepProfiler) -> tuple[torch.Tensor, list[float]]:
    """Total rewards [N] (float32) and task rewards of the prompt-major completions."""
    flat_problems = [problem for problem in problems for _ in range(group_size)]
    with profiler.phase("rewards"):
        totals, task = reward.score(rollout.flat_completions(), flat_problems)
    return torch.tensor(totals, dtype=torch.float32), task


def _overlong_penalties(rollout: Any, config: TrainConfig) -> torch.Tensor:
    """`soft_overlong_penalty` of each completion's length [N] (float32; zeros when off), with the
    generation cap `max_new_tokens` as L_max and `overlong_buffer` as L_cache."""
    lengths = [len(ids) for group in rollout.completion_ids for ids in group]
    if config.overlong_buffer <= 0:
        return torch.zeros(len(lengths))
    return torch.tensor(soft_overlong_penalty(lengths, config.max_new_tokens, config.overlong_buffer,
                                              config.overlong_penalty_factor), dtype=torch.float32)



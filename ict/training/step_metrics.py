"""The metrics line of a training step (`ict.training.train_step.train_step`): the rewards, the
updates' token-weighted means, lengths, speed, the diagnostics of the step's selection, and the
entropy collapse / explosion warnings the run loop prints."""

from __future__ import annotations

import math
from typing import Any

import torch

from ict.core.diagnostics import (
    ANATOMY_KEYS,
    DIAGNOSTIC_KEYS,
    TOP_TOKEN_KEYS,
    paper_figures,
    selection_anatomy,
    token_diagnostics,
    top_token_counts,
)
from ict.core.stats import TokenStatistics
from ict.models.tokens import token_text
from ict.training.config import TrainConfig
from ict.training.step import BatchUpdates

# Fields every metrics line carries (tests check them); values are floats or null (NaN).
# `kl`: k3 KL to the reference (initial) policy, null without one; `kl_old`: to the rollout policy.
METRIC_FIELDS = (
    "step", "reward_mean", "reward_std", "accuracy", "entropy", "entropy_selected", "renyi2",
    "renyi2_selected", "selected_fraction", "js_score", "js_score_selected", "clip_fraction", "kl",
    "kl_old", "loss", "grad_norm", "learning_rate", "response_length_mean", "finished_fraction",
    "zero_advantage_fraction", "truncated_fraction", "overlong_penalty_mean", "skipped_updates",
    "full_token_warmup",
    "tokens_per_second", "generation_seconds",
    "training_seconds", "step_seconds", *DIAGNOSTIC_KEYS, *ANATOMY_KEYS,
)


def selection_diagnostics(updates: BatchUpdates, batch: Any, advantages: torch.Tensor,
                           rollout: Any, group_size: int, tokenizer: Any = None) -> dict[str, Any]:
    """`token_diagnostics`, `selection_anatomy` and `paper_figures` of the step's selection, each
    row once (the first pass; rows are prompt-major, so row // G is its group), and the most
    frequent selected / unselected tokens (`TOP_TOKEN_KEYS`: lists of [string, count],
    `token_text`)."""
    rows_seen = torch.cat([index for index, _ in updates.first_pass]).cpu()
    response_mask = batch.response_mask[rows_seen.to(batch.response_mask.device)].cpu()
    selected = torch.cat([result.selected_mask for _, result in updates.first_pass])
    ties = [result.tie_decided for _, result in updates.first_pass]
    finished = torch.tensor([done for group in rollout.finished for done in group])[rows_seen]
    stats = TokenStatistics.concat([result.stats for _, result in updates.first_pass])
    diagnostics = token_diagnostics(stats, response_mask, selected,
                                    advantages[rows_seen.to(advantages.device)].cpu())
    anatomy = selection_anatomy(selected, response_mask, rows_seen // group_size, finished,
                                torch.cat(ties))
    figures = paper_figures(stats, response_mask, selected)  # the knee: the registry's ICT score
    token_ids = batch.response_ids[rows_seen.to(batch.response_ids.device)].cpu()
    top = {TOP_TOKEN_KEYS[name]: [[token_text(tokenizer, token), count] for token, count in counts]
           for name, counts in top_token_counts(token_ids, response_mask, selected).items()}
    return {**diagnostics, **anatomy, **figures, **top}


def reward_metrics(rewards: torch.Tensor, task: list[float]) -> dict[str, float]:
    return {
        "reward_mean": float(rewards.mean()),
        "reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
        "accuracy": sum(value >= 1.0 for value in task) / len(task),
    }


def update_metrics(updates: BatchUpdates) -> dict[str, float]:
    """Token-weighted means of the loss metrics over the step's updates, the mean loss and
    gradient norm of its applied updates (NaN, written null, when every update was skipped for a
    non-finite loss or gradient: ``skipped_updates``)."""
    totals, counts = updates.totals, updates.totals.counts
    return {
        "entropy": totals.mean("entropy"),
        "entropy_selected": totals.mean("entropy_selected"),
        "renyi2": totals.mean("renyi2"),
        "renyi2_selected": totals.mean("renyi2_selected"),
        "selected_fraction": (counts.get("selected", 0.0) / counts["response"]
                              if counts.get("response") else math.nan),
        "js_score": totals.mean("js_score"),
        "js_score_selected": totals.mean("js_score_selected"),
        "clip_fraction": totals.mean("clip_fraction"),  # NaN (null) without a selected token
        "kl": totals.mean("kl"),
        "kl_old": totals.mean("kl_old"),  # NaN (null) without a response token
        "loss": sum(updates.losses) / len(updates.losses) if updates.losses else math.nan,
        "grad_norm": (sum(updates.grad_norms) / len(updates.grad_norms) if updates.grad_norms
                      else math.nan),
    }


def length_metrics(rollout: Any) -> dict[str, float]:
    lengths = [len(ids) for group in rollout.completion_ids for ids in group]
    finished = [done for group in rollout.finished for done in group]
    return {"response_length_mean": sum(lengths) / len(lengths),
            "finished_fraction": sum(finished) / len(finished),
            "truncated_fraction": 1.0 - sum(finished) / len(finished)}


def speed_metrics(rollout: Any, step_seconds: float, training_seconds: float) -> dict[str, float]:
    return {
        "tokens_per_second": rollout.num_generated_tokens / step_seconds,
        "generation_tokens_per_second": (rollout.num_generated_tokens
                                         / max(rollout.generation_seconds, 1e-9)),
        "generation_seconds": rollout.generation_seconds,
        "training_seconds": training_seconds,
        "step_seconds": step_seconds,
    }


def profile_heading(all_metrics: list[dict[str, Any]], config: TrainConfig) -> str:
    """The line above ``--profile``'s table: the steps its means are over, and how many of them
    were full-token warm-up steps (every response token updated, as GRPO does: the method's
    selection did not run, so they are not its cost)."""
    steps = max(1, len(all_metrics))
    warmup = (sum(1 for metrics in all_metrics if metrics.get("full_token_warmup"))
              if config.selector_name != "all" else 0)
    if warmup == 0:
        return f"step profile (mean of {steps} steps)"
    if warmup == len(all_metrics):
        return (f"step profile (mean of {steps} steps, all of them full-token warm-up steps: every response token "
                f"updated, as GRPO does; {config.method}'s selection never ran, train past "
                f"full_token_warmup_steps={config.full_token_warmup_steps} to profile it)")
    return (f"step profile (mean of {steps} steps: {warmup} full-token warm-up steps, every response token "
            f"updated as GRPO does, and {steps - warmup} of {config.method}'s selection)")


def check_entropy(metrics: dict[str, Any], state: dict[str, Any], config: TrainConfig,
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

"""What the training tests share: the synthetic reward ``contains_answer`` (registered on
import), a tiny run's configuration, its metrics lines, a grouped rollout batch built by hand and
one gradient accumulation (tests/test_train.py, test_micro_batches.py and others)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ict.answers.rewards import register_reward
from ict.core.loss import PolicyLossConfig
from ict.models.rollout import RolloutBatch
from ict.training.config import TrainConfig
from ict.training.step import Method, StepContext, accumulate_gradients


@register_reward("contains_answer")
def contains_answer(completion: str, problem) -> float:
    """Synthetic verifiable reward: 1 if the gold number appears as a word of the completion."""
    return float(problem.answer in completion.split())


def tiny_config(model_dir: Path, task: Path, run_dir: Path, **overrides) -> TrainConfig:
    values = dict(model=str(model_dir), dataset=str(task), reward="contains_answer",
                  num_steps=3, prompts_per_step=4, num_generations=4, max_new_tokens=10,
                  micro_batch_size=8, generation_batch_size=16, learning_rate=3e-3,
                  run_dir=str(run_dir), progress=False, tensorboard=False, seed=1)
    values.update(overrides)
    return TrainConfig(**values)


def read_metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def grouped_batch(vocab_size: int, groups: int = 4, group_size: int = 4, seed: int = 1):
    """`groups` prompts x `group_size` completions: equal prompts within a group (left padded),
    ragged responses."""
    generator = torch.Generator().manual_seed(seed)
    rows, prompt_width, response_width = groups * group_size, 5, 8
    input_ids = torch.zeros((rows, prompt_width + response_width), dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    response_ids = torch.zeros((rows, response_width), dtype=torch.long)
    response_mask = torch.zeros((rows, response_width), dtype=torch.bool)
    for group in range(groups):
        prompt_length = 3 + group % 3
        prompt = torch.randint(4, vocab_size, (prompt_length,), generator=generator)
        for member in range(group_size):
            row = group * group_size + member
            length = 2 + int(torch.randint(0, response_width - 1, (1,), generator=generator))
            response = torch.randint(4, vocab_size, (length,), generator=generator)
            input_ids[row, prompt_width - prompt_length: prompt_width] = prompt
            attention[row, prompt_width - prompt_length: prompt_width + length] = 1
            input_ids[row, prompt_width: prompt_width + length] = response
            response_ids[row, :length] = response
            response_mask[row, :length] = True
    advantages = torch.randn(rows, generator=generator)
    return RolloutBatch(input_ids, attention, response_ids, response_mask, prompt_width), advantages


def accumulate(model, batch, advantages, selector, options, micro_batch_size, group_size=1,
                selection_seed=0, temperature=1.0):
    """accumulate_gradients with the method and a step context at `temperature`."""
    return accumulate_gradients(model, batch, advantages, None, Method.of(selector, options),
                                StepContext(PolicyLossConfig(), temperature),
                                micro_batch_size=micro_batch_size, group_size=group_size,
                                selection_seed=selection_seed)

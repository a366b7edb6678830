"""What the training tests share: the synthetic reward ``contains_answer`` (registered on
import), a tiny run's configuration, its metrics lines, rollout batches of given token ids (packed by the
trainer's own `pack_rollout`) and one gradient accumulation (tests/test_train.py, test_micro_batches.py and others)."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from ict.answers.rewards import register_reward
from ict.core.loss import PolicyLossConfig
from ict.models.rollout import Rollout, RolloutBatch, pack_rollout
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


def grouped_batch_and_advantages(vocab_size: int, groups: int = 4, group_size: int = 4, seed: int = 1):
    """`groups` prompts x `group_size` completions: equal prompts within a group (3-5 tokens,
    left padded), ragged responses of 2-8 tokens; packed by the trainer's own `pack_rollout`."""
    generator = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for group in range(groups):
        prompts.append(torch.randint(4, vocab_size, (3 + group % 3,), generator=generator).tolist())
        responses.append([])
        for _ in range(group_size):
            length = 2 + int(torch.randint(0, 7, (1,), generator=generator))
            responses[-1].append(torch.randint(4, vocab_size, (length,), generator=generator).tolist())
    advantages = torch.randn(groups * group_size, generator=generator)
    return packed(prompts, responses), advantages


def packed(prompts: list[list[int]], responses: list[list[list[int]]]) -> RolloutBatch:
    """`pack_rollout` (pad id 0) of prompt ids and each prompt's completion ids."""
    rollout = Rollout(prompt_texts=[""] * len(prompts), prompt_ids=prompts,
                      completions=[[""] * len(group) for group in responses], completion_ids=responses,
                      finished=[[False] * len(group) for group in responses])
    return pack_rollout(rollout, pad_id=0)


def accumulate(model, batch, advantages, selector, options, micro_batch_size, group_size=1,
                selection_seed=0, temperature=1.0):
    """accumulate_gradients with the method and a step context at `temperature`."""
    return accumulate_gradients(model, batch, advantages, None, Method.of(selector, options),
                                StepContext(PolicyLossConfig(), temperature),
                                micro_batch_size=micro_batch_size, group_size=group_size,
                                selection_seed=selection_seed)

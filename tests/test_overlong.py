"""Overlong handling for every method: DAPO's soft overlong punishment (a reward penalty over the
last `overlong_buffer` tokens before the cap) and TRL's `mask_truncated_completions` (completions
cut off at the cap get no loss). The pure functions against hand-computed values and TRL's own
reward function; the trainer options against penalties and masks rebuilt by hand from the rollout."""

from __future__ import annotations

import pytest
import torch

import ict.training.train_step as train_step_module
from ict.answers.rewards import soft_overlong_penalty
from ict.cli import main
from ict.core.loss import mask_truncated_completions
from ict.training.config import TrainConfig
from ict.training.trainer import train


def test_soft_overlong_penalty_by_hand():
    # L_max = 10, L_cache = 4: free up to 6 tokens, then -1/4 per token, -1 at 10 and beyond
    lengths = [0, 5, 6, 7, 8, 9, 10, 11]
    assert soft_overlong_penalty(lengths, 10, 4) == [0.0, 0.0, 0.0, -0.25, -0.5, -0.75, -1.0, -1.0]
    assert soft_overlong_penalty(lengths, 10, 4, factor=0.5) == [0.0, 0.0, 0.0, -0.125, -0.25,
                                                                 -0.375, -0.5, -0.5]
    # the buffer may span the whole cap: -|y| / L_max
    assert soft_overlong_penalty([0, 1, 3], 3, 3) == [0.0, -1 / 3, -1.0]
    for bad in (0, 11, -1):
        with pytest.raises(ValueError, match="overlong buffer"):
            soft_overlong_penalty(lengths, 10, bad)


def test_soft_overlong_penalty_matches_trl():
    from trl.rewards import get_soft_overlong_punishment

    for max_length, buffer in ((10, 4), (32, 8), (7, 7), (5, 1)):
        lengths = list(range(max_length + 3))
        trl_reward = get_soft_overlong_punishment(max_length, buffer)([[1] * n for n in lengths])
        ours = soft_overlong_penalty(lengths, max_length, buffer)
        assert ours == pytest.approx(trl_reward, abs=1e-12), (max_length, buffer)


def test_mask_truncated_completions_by_hand():
    response = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    finished = torch.tensor([True, False, True, False])
    expected = torch.tensor([[1, 1, 1, 0], [0, 0, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    assert torch.equal(mask_truncated_completions(response, finished), expected)


def tiny_config(model_dir, task, run_dir, **overrides) -> TrainConfig:
    values = dict(model=str(model_dir), dataset=str(task), reward="last_number", method="grpo",
                  num_steps=1, prompts_per_step=4, num_generations=4, max_new_tokens=6,
                  micro_batch_size=16, generation_batch_size=16, learning_rate=1e-3,
                  run_dir=str(run_dir), progress=False, tensorboard=False, seed=3)
    values.update(overrides)
    return TrainConfig(**values)


class Recorder:
    """Wraps the trainer's `pack_rollout` and `update_on_batch` to keep what they saw."""

    def __init__(self, monkeypatch) -> None:
        self.rollouts, self.masks, self.advantages, self.task = [], [], [], []
        pack, update, score = (train_step_module.pack_rollout, train_step_module.update_on_batch,
                               train_step_module._score)

        def recording_score(*args, **kwargs):
            rewards, task = score(*args, **kwargs)
            self.task.append(list(task))
            return rewards, task

        def recording_pack(rollout, pad_id):
            self.rollouts.append(rollout)
            return pack(rollout, pad_id)

        def recording_update(model, optimizer, batch, advantages, *args, **kwargs):
            self.masks.append(batch.response_mask.clone())
            self.advantages.append(advantages.clone())
            return update(model, optimizer, batch, advantages, *args, **kwargs)

        monkeypatch.setattr(train_step_module, "_score", recording_score)
        monkeypatch.setattr(train_step_module, "pack_rollout", recording_pack)
        monkeypatch.setattr(train_step_module, "update_on_batch", recording_update)


def flat(nested):
    return [item for group in nested for item in group]


def test_trainer_adds_the_overlong_penalty_to_the_reward(tiny_model_dir, arithmetic_task, tmp_path,
                                                         monkeypatch, one_thread):
    plain = Recorder(monkeypatch)
    base = train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "base")).metrics[0]
    penalised = Recorder(monkeypatch)
    config = tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "pen", overlong_buffer=3,
                         overlong_penalty_factor=0.5)
    metrics = train(config).metrics[0]
    rollout = penalised.rollouts[0]
    assert flat(rollout.completions) == flat(plain.rollouts[0].completions)  # same samples
    # by hand: cap 6, buffer 3 -> 0 up to 3 tokens, then -0.5 * (|y| - 3) / 3
    lengths = [len(ids) for ids in flat(rollout.completion_ids)]
    assert max(lengths) == 6  # some completions reach the cap: the penalty is exercised
    penalties = [0.0 if n <= 3 else -0.5 * (n - 3) / 3 for n in lengths]
    assert metrics["overlong_penalty_mean"] == pytest.approx(sum(penalties) / len(penalties), abs=1e-6)
    assert base["overlong_penalty_mean"] == 0.0
    assert metrics["reward_mean"] == pytest.approx(base["reward_mean"] + sum(penalties) / len(penalties),
                                                   abs=1e-6)
    assert metrics["accuracy"] == base["accuracy"]  # the task reward alone
    # the advantages are GRPO's of task reward + penalty: (r - mean) / (std + 1e-6) per group of 4
    rewards = torch.tensor(penalised.task[0], dtype=torch.float64) + torch.tensor(penalties,
                                                                                  dtype=torch.float64)
    groups = rewards.view(-1, 4)
    expected = ((groups - groups.mean(1, keepdim=True)) / (groups.std(1, keepdim=True) + 1e-6)).view(-1)
    torch.testing.assert_close(penalised.advantages[0].double().cpu(), expected, atol=1e-5, rtol=0)
    # zero_advantage_fraction: the share of groups whose total rewards are all equal
    for line, totals in ((metrics, groups), (base, torch.tensor(plain.task[0]).view(-1, 4))):
        equal = [len(set(group.tolist())) == 1 for group in totals]
        assert line["zero_advantage_fraction"] == pytest.approx(sum(equal) / len(equal))


def test_trainer_masks_truncated_completions(tiny_model_dir, arithmetic_task, tmp_path, monkeypatch,
                                             one_thread):
    recorder = Recorder(monkeypatch)
    config = tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "mask", max_new_tokens=3,
                         mask_truncated_completions=True)
    metrics = train(config).metrics[0]
    rollout = recorder.rollouts[0]
    finished = flat(rollout.finished)
    width = recorder.masks[0].shape[1]
    expected = torch.tensor([[done and t < len(ids) for t in range(width)]
                             for ids, done in zip(flat(rollout.completion_ids), finished, strict=True)])
    assert torch.equal(recorder.masks[0].cpu(), expected)
    assert metrics["truncated_fraction"] == pytest.approx(1 - sum(finished) / len(finished))
    assert metrics["truncated_fraction"] > 0  # a random tiny model rarely stops within 3 tokens


def test_overlong_options_are_validated(tmp_path, capsys):
    for option, value, message in (("--overlong-buffer", "40", "overlong_buffer must be in 0..max_new_tokens (32)"),
                                   ("--overlong-penalty-factor", "-1", "overlong_penalty_factor")):
        assert main(["train", option, value, "--run-dir", str(tmp_path / "r")]) == 2
        assert message in capsys.readouterr().err


def test_a_one_token_buffer_penalises_the_completions_at_the_cap():
    """``overlong_buffer`` 1 (documented range 0..max_new_tokens; 0 is off): L_max = 10, L_cache = 1,
    so a completion of 10 tokens gets -factor and one of 9 none (DAPO: -(|y| - 9) / 1 * factor)."""
    from types import SimpleNamespace

    rollout = SimpleNamespace(completion_ids=[[[5] * 10, [5] * 9], [[5] * 3, [5] * 10]])
    config = TrainConfig(max_new_tokens=10, overlong_buffer=1, overlong_penalty_factor=0.5)
    assert train_step_module._overlong_penalties(rollout, config).tolist() == [-0.5, 0.0, 0.0, -0.5]
    config.overlong_buffer = 0
    assert train_step_module._overlong_penalties(rollout, config).tolist() == [0.0] * 4

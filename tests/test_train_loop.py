"""The training loop's schedule, worked by hand on a tiny random model (tests/test_train.py holds
the end-to-end runs): the rollout and evaluation seeds of each step, the learning rate the
optimizer applies, when the periodic evaluation runs, the optimizer's settings, and what counts
as a correct held-out answer."""

from __future__ import annotations

import pytest
import torch
from train_helpers import read_metrics, tiny_config

import ict.training.train_step as train_step
import ict.training.trainer as trainer
from ict.answers.rewards import Reward
from ict.core.problems import Problem
from ict.training.config import TrainConfig

pytestmark = pytest.mark.usefixtures("one_thread")


def test_each_step_samples_with_its_own_seed_and_applies_its_scheduled_learning_rate(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch):
    """seed 1, 3 steps, warm-up over 2 steps of lr 0.004, evaluation every 2 steps: the rollouts
    of step s (0-based) are seeded 1 * 1_000_003 + s * 9_973; every evaluation (before, at step 2,
    after) with step -1's seed 1_000_003 - 9_973 = 990_030; the optimizer applies 0.002, 0.004,
    0.004 (what the metrics report), and only step 2's line has an eval_accuracy."""
    seeds: list[tuple[int, int]] = []  # (samples per prompt, seed) of each generation call
    applied: list[float] = []
    generate, update = trainer.generate_completions, train_step.update_on_batch

    def recording_generate(*args, **options):
        seeds.append((options["num_samples"], options["seed"]))
        return generate(*args, **options)

    def recording_update(model, optimizer, *args, **options):
        applied.append(optimizer.param_groups[0]["lr"])
        return update(model, optimizer, *args, **options)

    monkeypatch.setattr(trainer, "generate_completions", recording_generate)  # the evaluations
    monkeypatch.setattr(train_step, "generate_completions", recording_generate)  # the steps' rollouts
    monkeypatch.setattr(train_step, "update_on_batch", recording_update)
    run_dir = tmp_path / "run"
    trainer.train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=3, warmup_steps=2,
                              learning_rate=0.004, eval_every=2, eval_size=2))
    assert seeds == [(1, 990_030), (4, 1_000_003), (4, 1_009_976), (1, 990_030), (4, 1_019_949),
                     (1, 990_030)]
    assert applied == [0.002, 0.004, 0.004]
    lines = read_metrics(run_dir)
    assert [line["learning_rate"] for line in lines] == applied
    assert ["eval_accuracy" in line for line in lines] == [False, True, False]


def test_held_out_accuracy_counts_a_task_reward_of_at_least_one(tiny_model_dir):
    """Task rewards 1, 0.5, 0, 1 (a second reward of 1 at weight 0.5 on top): accuracy 2/4 (a
    reward of exactly 1 is correct) and mean total reward (1.5 + 1 + 0.5 + 1.5) / 4 = 1.125."""
    from ict.models.loading import load_model_and_tokenizer

    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), device="cpu")
    problems = [Problem(prompt=f"what is {index} ?", answer=answer, kind="math")
                for index, answer in enumerate(["1.0", "0.5", "0.0", "1.0"])]
    reward = Reward(names=["task", "bonus"], weights=[1.0, 0.5],
                    functions=[lambda completion, problem: float(problem.answer),
                               lambda completion, problem: 1.0])
    result = trainer.evaluate_accuracy(model, tokenizer, problems, reward,
                                       TrainConfig(max_new_tokens=2, eval_temperature=0.0))
    assert result["correct"] == [True, False, False, True]
    assert result["accuracy"] == 0.5 and result["num_problems"] == 4
    assert result["reward_mean"] == pytest.approx(1.125)
    assert result["temperature"] == 0.0  # what the summary's phase lines say it drew with
    assert trainer.evaluate_accuracy(model, tokenizer, [], reward, TrainConfig()) == {}


def test_the_optimizer_takes_the_configured_adamw_settings_and_only_trainable_weights():
    """AdamW with (adam_beta1, adam_beta2), adam_eps, weight_decay and learning_rate as given,
    over the parameters that require gradients (a frozen one left out); `auto` weights are fp32."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Linear(3, 1))
    model[0].bias.requires_grad_(False)
    config = TrainConfig(adam_beta1=0.8, adam_beta2=0.95, adam_eps=1e-6, weight_decay=0.1,
                         learning_rate=0.01)
    optimizer = trainer.build_optimizer(model, config)
    assert isinstance(optimizer, torch.optim.AdamW)
    (group,) = optimizer.param_groups
    assert (group["betas"], group["eps"], group["weight_decay"], group["lr"]) == ((0.8, 0.95), 1e-6, 0.1, 0.01)
    assert [tuple(parameter.shape) for parameter in group["params"]] == [(3, 2), (1, 3), (1,)]
    assert trainer.weights_dtype(TrainConfig(dtype="auto")) == "fp32"
    assert trainer.weights_dtype(TrainConfig(dtype="bf16")) == "bf16"


def test_a_divergence_at_the_last_step_finishes_the_run(tiny_model_dir, arithmetic_task, tmp_path, monkeypatch):
    """max_consecutive_skips 1 reached by the last step's non-finite update (NaN logits): nothing
    is left to stop, so the run ends as a finished one (its final checkpoint, no
    TrainingDiverged), the skip logged."""
    import ict.training.step as step_module

    original = step_module.response_logits
    finished = {"steps": 0}

    def poisoned(model, batch, *args):
        logits = original(model, batch, *args)
        return logits * float("nan") if finished["steps"] == 1 and model.training else logits

    monkeypatch.setattr(step_module, "response_logits", poisoned)
    run_dir = tmp_path / "run"
    result = trainer.train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=2, max_consecutive_skips=1),
                           on_step=lambda metrics: finished.update(steps=metrics["step"]))
    assert [line["skipped_updates"] for line in read_metrics(run_dir)] == [0, 1]
    assert result.checkpoint == run_dir / "checkpoints" / "step-00000002"


def test_each_completion_is_scored_against_its_own_prompts_problem():
    """Rows are prompt-major (the G completions of a prompt adjacent): completions '1', '1' of
    problem 1 and '2', 'x' of problem 2 score 1, 1, 1, 0 under an exact-match reward."""
    from ict.core.profiling import StepProfiler
    from ict.models.rollout import Rollout

    problems = [Problem(prompt="one", answer="1", kind="math"), Problem(prompt="two", answer="2", kind="math")]
    rollout = Rollout(prompt_texts=["one", "two"], prompt_ids=[[5], [6]], completions=[["1", "1"], ["2", "x"]],
                      completion_ids=[[[7], [7]], [[8], [9]]], finished=[[True, True], [True, True]])
    reward = Reward(names=["exact"], weights=[2.0],
                    functions=[lambda completion, problem: float(completion == problem.answer)])
    totals, task = train_step._score(rollout, problems, reward, 2, StepProfiler())
    assert task == [1.0, 1.0, 1.0, 0.0]
    assert totals.dtype == torch.float32 and totals.tolist() == [2.0, 2.0, 2.0, 0.0]


def test_the_warmup_note_and_phase_when_the_warmup_covers_every_step():
    """full_token_warmup_steps 3 of 3: the selection never runs (no phase; the note says so);
    2 of 3: the method's own selection is step 3 alone."""
    covering = TrainConfig(method="ict", num_steps=3, full_token_warmup_steps=3)
    assert trainer.selection_phase(covering) is None
    assert trainer.full_token_warmup_note(covering).startswith(
        "note: full_token_warmup_steps=3 >= num_steps=3: every step updates all response tokens (GRPO) "
        "and ict's selection never runs")
    partial = TrainConfig(method="ict", num_steps=3, full_token_warmup_steps=2)
    assert trainer.selection_phase(partial) == ("ict", 3, 3)
    assert trainer.full_token_warmup_note(partial) == ("full-token warm-up: steps 1-2 of 3 update every "
                                                       "response token, ict's selection from step 3")
    assert trainer.full_token_warmup_note(TrainConfig(method="grpo", num_steps=3, full_token_warmup_steps=2)) == ""


def test_keep_checkpoints_prunes_and_a_resumed_profile_averages_over_the_steps_it_ran(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch):
    """save_every 1 with keep_checkpoints 1 leaves only the newest checkpoint; a run resumed at
    step 2 of 3 with --profile divides its phase times by the 1 step it ran, not by num_steps."""
    from ict.runs.checkpoint import complete_checkpoints

    run_dir = tmp_path / "run"
    options = dict(save_every=1, keep_checkpoints=1)
    trainer.train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=2, **options))
    assert [path.name for path in complete_checkpoints(run_dir)] == ["step-00000002"]
    divided_by: list[int] = []
    table = trainer.StepProfiler.table

    def recording_table(self, steps):
        divided_by.append(steps)
        return table(self, steps)

    monkeypatch.setattr(trainer.StepProfiler, "table", recording_table)
    trainer.train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=3, resume=True, profile=True,
                              **options))
    assert divided_by == [1]
    assert [path.name for path in complete_checkpoints(run_dir)] == ["step-00000003"]


def test_dr_grpos_length_is_max_new_tokens_unless_max_response_length_is_given():
    """--help: max_response_length is "L of seq_mean_token_sum_norm (None: max_new_tokens)". The
    trainer's loss of 2 rows with 3 and 1 tokens at ratio 1 is -sum_t A / (B L): with A = 1 on
    every token, -4 / (2 * 20) at max_new_tokens 20 (not the padded length 3), -4 / (2 * 8) given 8."""
    from ict.core.loss import policy_loss
    from ict.core.stats import TokenStatistics
    from ict.training.train_step import loss_config_of

    mask = torch.tensor([[True, True, True], [True, False, False]])
    log_probs = torch.full((2, 3), -1.0)
    stats = TokenStatistics(log_probs=log_probs, entropy=torch.zeros(2, 3), renyi2=torch.zeros(2, 3))
    for given, length in ((None, 20), (8, 8)):
        config = TrainConfig(max_new_tokens=20, aggregation="seq_mean_token_sum_norm", max_response_length=given)
        loss, _ = policy_loss(stats, log_probs, torch.ones(2), mask, mask, loss_config_of(config))
        assert float(loss) == pytest.approx(-4 / (2 * length))


def test_the_profile_says_which_steps_were_full_token_warm_up_steps(tiny_model_dir, arithmetic_task, tmp_path):
    """`ict train --method ict --profile --num-steps 3` profiled three full-token warm-up steps
    (every token updated, as GRPO does; ict's warm-up is 10 steps) under "step profile (mean of 3
    steps)", which reads as ict's cost. The heading (console and profile.md) now counts them:
    2 steps with a 1-step warm-up are 1 warm-up step and 1 of ict's selection; with the default
    warm-up, all of them; grpo's steps (its selection is every token) are never counted."""
    for warmup, heading in ((1, "step profile (mean of 2 steps: 1 full-token warm-up steps, every response token "
                                "updated as GRPO does, and 1 of ict's selection)"),
                            (None, "step profile (mean of 2 steps, all of them full-token warm-up steps: every "
                                   "response token updated, as GRPO does; ict's selection never ran, train past "
                                   "full_token_warmup_steps=10 to profile it)")):
        run_dir = tmp_path / f"warmup-{warmup}"
        trainer.train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=2, method="ict", profile=True,
                                  full_token_warmup_steps=warmup))
        assert (run_dir / "profile.md").read_text().splitlines()[0] == heading
        assert [line["full_token_warmup"] for line in read_metrics(run_dir)] == [1.0, 1.0 if warmup is None else 0.0]
    from ict.training.step_metrics import profile_heading

    grpo = TrainConfig(method="grpo", full_token_warmup_steps=2)
    assert profile_heading([{"full_token_warmup": 1.0}] * 2, grpo) == "step profile (mean of 2 steps)"


def test_a_run_stopped_by_a_signal_writes_the_profile_of_the_steps_it_finished(
        tiny_model_dir, arithmetic_task, tmp_path):
    """`--profile` wrote profile.md only after the last step: a run stopped by Ctrl-C (checkpointed,
    exit 130) lost the profile of the steps it had run. Stopped after step 2 of 4, profile.md now
    holds the means over those 2 steps."""
    import signal

    run_dir = tmp_path / "run"
    divided_by: list[int] = []
    table = trainer.StepProfiler.table

    def recording_table(self, steps):
        divided_by.append(steps)
        return table(self, steps)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer.StepProfiler, "table", recording_table)
        with pytest.raises(KeyboardInterrupt):
            trainer.train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=4, profile=True,
                                      method="grpo"),
                          on_step=lambda metrics: signal.raise_signal(signal.SIGINT) if metrics["step"] == 2 else None)
    assert [line["step"] for line in read_metrics(run_dir)] == [1, 2]
    assert divided_by == [2]
    lines = (run_dir / "profile.md").read_text().splitlines()
    assert lines[0] == "step profile (mean of 2 steps)"
    assert any(line.startswith("| step | ") for line in lines)


def test_a_run_stopped_by_a_divergence_writes_the_profile_of_the_steps_it_finished(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch):
    """As a signal's stop: max_consecutive_skips 1 reached at step 1 of 3 (NaN logits) raises
    TrainingDiverged after its checkpoint, and profile.md holds that 1 step's profile."""
    import ict.training.step as step_module
    from ict.core.errors import TrainingDiverged

    original = step_module.response_logits

    def poisoned(model, batch, *args):
        logits = original(model, batch, *args)
        return logits * float("nan") if model.training else logits

    monkeypatch.setattr(step_module, "response_logits", poisoned)
    run_dir = tmp_path / "run"
    with pytest.raises(TrainingDiverged):
        trainer.train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=3, max_consecutive_skips=1,
                                  profile=True, method="grpo"))
    assert [line["skipped_updates"] for line in read_metrics(run_dir)] == [1]
    assert (run_dir / "profile.md").read_text().splitlines()[0] == "step profile (mean of 1 steps)"

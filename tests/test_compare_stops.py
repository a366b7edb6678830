"""`ict compare` stopped (Ctrl-C, SIGTERM) in a run's training, in its last step, in a run's
held-out evaluation and in the final evaluation, then rerun with the same command: what it says,
what it leaves on disk, and that the rerun completes the comparison. Split from
tests/test_compare.py (the comparison end to end)."""

from __future__ import annotations

import json

import pytest
from compare_helpers import gsm8k_data_dir

from ict.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_run_stopped_inside_a_comparison_says_to_rerun_the_comparison(tiny_model_dir, arithmetic_task,
                                                                       tmp_path, capsys, monkeypatch):
    """Ctrl-C in a comparison's run checkpoints the step and stops; the message told the user to
    continue with `--resume --run-dir DIR` (ict train's way), which trains that run alone, outside
    the comparison. It names the comparison's own command now."""
    import signal

    import ict.training.trainer
    from ict.training.trainer import train

    def stopped_at_step_1(config, **options):
        return train(config, on_step=lambda metrics: signal.raise_signal(signal.SIGINT)
                     if metrics["step"] == 1 else None, **options)

    monkeypatch.setattr(ict.training.trainer, "train", stopped_at_step_1)  # compare imports it when run
    output = tmp_path / "cmp"
    arguments = ["compare", "--train-only", "--methods", "grpo", "--seeds", "0", "--output-dir", str(output),
                 "--eval-benchmarks", "gsm8k", "--eval-data-dir", str(gsm8k_data_dir(tmp_path / "data")),
                 f"model={tiny_model_dir}", f"dataset={arithmetic_task}", "reward=compare_contains_answer",
                 "num_steps=2", "prompts_per_step=2", "num_generations=2", "max_new_tokens=4",
                 "tensorboard=false", "dtype=fp32", "eval_size=2"]
    assert main(arguments) == 130
    error = capsys.readouterr().err
    assert "to continue, rerun the same ict compare command" in error and "--resume --run-dir" not in error
    assert (output / "runs" / "grpo" / "seed0" / "checkpoints" / "step-00000001").is_dir()
    monkeypatch.setattr(ict.training.trainer, "train", train)
    assert main(arguments) == 0  # the same command trains the stopped run on to its last step
    assert "held-out problems" not in capsys.readouterr().out  # trained on, not only evaluated
    assert (output / "runs" / "grpo" / "seed0" / "checkpoints" / "step-00000002").is_dir()
    assert len((output / "runs" / "grpo" / "seed0" / "metrics.jsonl").read_text().splitlines()) == 2


def test_a_stop_in_a_runs_last_step_stops_the_comparison_after_that_run(tiny_model_dir, arithmetic_task,
                                                                        tmp_path, capsys, monkeypatch):
    """Ctrl-C or SIGTERM in a run's last step lets the run finish (ict train's way: nothing after
    it to stop), but the comparison went on to train and evaluate every other run and exited 0:
    a scheduler's SIGTERM was ignored until its SIGKILL cut the next run short. The comparison
    stops after that run now, with status 130, and the same command trains the rest."""
    import signal

    import ict.training.trainer
    from ict.training.trainer import train

    def stopped_in_last_step(config, **options):
        return train(config, on_step=lambda metrics: signal.raise_signal(signal.SIGTERM)
                     if metrics["step"] == config.num_steps else None, **options)

    monkeypatch.setattr(ict.training.trainer, "train", stopped_in_last_step)
    output = tmp_path / "cmp"
    arguments = ["compare", "--train-only", "--methods", "grpo", "--seeds", "0,1", "--output-dir", str(output),
                 "--eval-benchmarks", "gsm8k", f"model={tiny_model_dir}", f"dataset={arithmetic_task}",
                 "reward=compare_contains_answer", "num_steps=2", "prompts_per_step=2", "num_generations=2",
                 "max_new_tokens=4", "tensorboard=false", "dtype=fp32"]
    capsys.readouterr()
    assert main(arguments) == 130
    captured = capsys.readouterr()
    first, second = output / "runs" / "grpo" / "seed0", output / "runs" / "grpo" / "seed1"
    assert captured.err.splitlines()[-1] == "interrupted"
    assert (f"stopped after training {first} (a stop request came in its last step); to continue, rerun the "
            "same ict compare command" in captured.out)
    assert (first / "checkpoints" / "step-00000002" / "COMPLETE").is_file()  # the run finished
    assert not second.exists()  # nothing started after it
    monkeypatch.setattr(ict.training.trainer, "train", train)
    assert main(arguments) == 0  # the same command trains the rest
    assert [json.loads(line)["step"] for line in (second / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert len((first / "metrics.jsonl").read_text().splitlines()) == 2  # not trained again


def _stopped_at_call(monkeypatch, owner, name: str, call: int) -> None:
    """``owner.name`` raising KeyboardInterrupt (Ctrl-C, or SIGTERM through the command's handler)
    at its ``call``-th call, working otherwise."""
    real, calls = getattr(owner, name), []

    def stopping(*args, **kwargs):
        calls.append(1)
        if len(calls) == call:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(owner, name, stopping)


def test_a_comparison_stopped_in_a_runs_evaluation_after_training_completes_it_on_rerun(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch, capsys):
    """Stopped in a run's held-out evaluation after training (eval_size), a comparison left the
    final checkpoint, which its rerun took for a finished run: eval.json kept "before" only, not
    the "after" of an uninterrupted comparison. The rerun now resumes the run at its end, which
    evaluates after training and trains nothing, so eval.json is the uninterrupted one's."""
    import ict.training.trainer

    def arguments(output):
        return ["compare", "--train-only", "--methods", "grpo", "--seeds", "0", "--output-dir", str(output),
                "--eval-benchmarks", "gsm8k", f"model={tiny_model_dir}", f"dataset={arithmetic_task}",
                "reward=compare_contains_answer", "num_steps=1", "prompts_per_step=2", "num_generations=2",
                "max_new_tokens=4", "eval_size=2", "tensorboard=false", "dtype=fp32"]

    assert main(arguments(tmp_path / "whole")) == 0
    _stopped_at_call(monkeypatch, ict.training.trainer, "evaluate_accuracy", 2)  # 1: before training
    assert main(arguments(tmp_path / "cut")) == 130
    run = tmp_path / "cut" / "runs" / "grpo" / "seed0"
    assert list(json.loads((run / "eval.json").read_text())) == ["before"]
    monkeypatch.undo()
    evaluate_only = [word if word != "--train-only" else "--eval-only" for word in arguments(tmp_path / "cut")]
    assert main([*evaluate_only, "--eval-data-dir", str(gsm8k_data_dir(tmp_path / "data")), "--eval-n", "1",
                 "--eval-max-new-tokens", "2"]) == 0  # trains nothing: safe next to a --train-only process
    assert list(json.loads((run / "eval.json").read_text())) == ["before"]
    capsys.readouterr()
    assert main(arguments(tmp_path / "cut")) == 0
    whole = tmp_path / "whole" / "runs" / "grpo" / "seed0"
    assert (run / "eval.json").read_bytes() == (whole / "eval.json").read_bytes()
    assert f"evaluate {run}'s held-out problems after training" in capsys.readouterr().out
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1]
    assert main(arguments(tmp_path / "cut")) == 0  # nothing left to do: no second evaluation
    assert "held-out problems" not in capsys.readouterr().out


def test_a_comparison_stopped_in_a_final_evaluation_says_how_to_go_on_and_its_rerun_equals_an_uninterrupted_one(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch, capsys):
    """Stopped (Ctrl-C, SIGTERM) in the `ict eval` of a run's final checkpoint, a comparison said
    only "interrupted". It says how to go on now; the rerun keeps the finished samples, draws the
    rest and reports what an uninterrupted comparison reports."""
    import ict.evaluation.generator

    data = gsm8k_data_dir(tmp_path / "data")

    def arguments(output):  # 16 samples, 32 sequences a call: 2 problems of the 6 a call
        return ["compare", "--methods", "grpo", "--seeds", "0", "--output-dir", str(output),
                "--eval-benchmarks", "gsm8k", "--eval-data-dir", str(data), "--eval-n", "16",
                "--eval-max-new-tokens", "4", "--eval-math-extraction", "lenient", "--bootstrap-resamples", "100",
                f"model={tiny_model_dir}", f"dataset={arithmetic_task}", "reward=compare_contains_answer",
                "num_steps=1", "prompts_per_step=2", "num_generations=2", "max_new_tokens=4",
                "tensorboard=false", "dtype=fp32"]

    assert main(arguments(tmp_path / "whole")) == 0
    _stopped_at_call(monkeypatch, ict.evaluation.generator.Generator, "generate", 2)
    capsys.readouterr()
    assert main(arguments(tmp_path / "cut")) == 130
    captured = capsys.readouterr()
    evaluation = tmp_path / "cut" / "runs" / "grpo" / "seed0" / "eval"
    assert captured.err.splitlines()[-1] == "interrupted"
    assert (f"stopped evaluating {evaluation} (its finished samples are kept); to continue, rerun the same "
            "ict compare command" in captured.out)
    assert len((evaluation / "samples.jsonl").read_text().splitlines()) == 2 * 16  # the first call's
    monkeypatch.undo()
    assert main(arguments(tmp_path / "cut")) == 0
    assert "held-out problems" not in capsys.readouterr().out  # no eval_size: nothing to evaluate after training
    for name in ("results.csv", "training_end.csv"):
        assert (tmp_path / "cut" / name).read_text() == (tmp_path / "whole" / name).read_text()
    whole = tmp_path / "whole" / "runs" / "grpo" / "seed0" / "eval"
    assert sorted(evaluation.joinpath("samples.jsonl").read_text().splitlines()) == sorted(
        whole.joinpath("samples.jsonl").read_text().splitlines())

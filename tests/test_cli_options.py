"""Every command's options come from its config dataclass: one flag per documented field, the
field's default in --help, YAML keys = field names (``--config``), flags over YAML."""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import pytest

from ict.analysis.plots import PlotConfig
from ict.analysis.token_view import InspectConfig
from ict.cli import build_parser, main
from ict.cli.options import options_from_args
from ict.evaluation.evaluate import EvalConfig
from ict.experiments.compare import CompareConfig, compare_options
from ict.training.config import TrainConfig

COMMANDS = {"train": TrainConfig, "eval": EvalConfig, "compare": CompareConfig,
            "inspect": InspectConfig, "plot": PlotConfig}
# what a command adds beside its dataclass's fields: the YAML file, positional key=value
# overrides of training options, and eval's progress switch
EXTRA = {"train": {"config", "overrides"}, "eval": {"config", "quiet"},
         "compare": {"overrides"}, "inspect": {"config"}, "plot": {"config"}}


def subparser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[command]


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_option_of_every_command_is_one_field_of_its_dataclass(command):
    cls = COMMANDS[command]
    parser = subparser(command)
    destinations = {a.dest for a in parser._actions if a.dest != "help"}
    fields = {item.name for item in dataclasses.fields(cls) if "help" in item.metadata}
    assert destinations == fields | EXTRA[command]
    internal = {item.name for item in dataclasses.fields(cls)} - fields
    assert command != "compare" or internal == {"overrides", "command"}
    help_text = parser.format_help()
    for item in dataclasses.fields(cls):
        if "help" in item.metadata and not item.metadata.get("positional"):
            assert "--" + item.name.replace("_", "-") in help_text


def test_help_shows_the_defaults_a_user_would_get():
    # independent facts: the documented defaults of ict compare (docs/results.md) and ict plot
    compare_help = " ".join(subparser("compare").format_help().split())
    assert "--seeds INT,... comma-separated training seeds (distinct) (default: 0,1,2)" in compare_help
    assert "(default: grpo,random)" in compare_help
    assert "--by {run,method}" in " ".join(subparser("plot").format_help().split())


def test_every_help_line_shows_a_default_a_user_can_type():
    """Every option's --help line ends with its default, never a blank one: an empty text or
    list shows as ``""``, which is how it is given (``--eval-steps ""`` is the empty list); and
    only there (`ict inspect --num-prompts` read "(default: all) (default: None)")."""
    for name in COMMANDS:
        for action in subparser(name)._actions:
            if not action.option_strings or action.dest == "help":  # positionals; -h
                continue
            shown = re.search(r"\(default: ([^)]*)\)$", " ".join((action.help or "").split()))
            assert shown and shown.group(1).strip(), (name, action.dest, action.help)
            assert (action.help or "").count("(default") == 1, (name, action.dest, action.help)
    compare_help = " ".join(subparser("compare").format_help().split())
    assert 'DIR/base-model/ (default: "")' in compare_help
    parsed = subparser("compare").parse_args(["--eval-steps", ""])
    assert options_from_args(CompareConfig, parsed, {}).eval_steps == ()


def test_yaml_keys_are_the_field_names_and_flags_override_them(tmp_path):
    path = tmp_path / "eval.yaml"
    path.write_text("benchmarks: gsm8k\nnum_samples: 8\nks: [1, 2]\ntemperature: 0.3\n"
                    "max-new-tokens: 100\n")
    args = build_parser().parse_args(["eval", "--config", str(path), "--n", "6"])
    config = options_from_args(EvalConfig, args)
    assert (config.benchmarks, config.num_samples, config.ks, config.temperature,
            config.max_new_tokens) == ("gsm8k", 6, (1, 2), 0.3, 100)


def test_an_unknown_yaml_key_is_one_line_exit_2(tmp_path, capsys):
    path = tmp_path / "eval.yaml"
    path.write_text("num_sample: 8\n")
    assert main(["eval", "--config", str(path)]) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert error == ["error: unknown option 'num_sample' (did you mean num_samples?)"]


def test_the_compare_yaml_holds_training_options_and_may_set_compare_options(tmp_path):
    values = {"model": "m", "num_steps": 3, "methods": "grpo,ict:ratio=0.2", "eval-n": 2,
              "seeds": [3, 4]}
    ours, training = compare_options(values)
    assert ours == {"methods": "grpo,ict:ratio=0.2", "eval-n": 2, "seeds": [3, 4]}
    assert training == {"model": "m", "num_steps": 3}
    path = tmp_path / "compare.yaml"
    path.write_text(json.dumps(values))
    args = build_parser().parse_args(["compare", "--config", str(path), "--output-dir", "out",
                                      "--seeds", "7", "lr=1"])
    config = options_from_args(CompareConfig, args, ours).validate()
    assert [spec.label for spec in config.method_specs] == ["grpo", "ict-ratio=0.2"]
    assert (config.eval_n, config.seeds, config.output_dir, config.config_file) == (
        2, (7,), Path("out"), str(path))
    assert args.overrides == ["lr=1"]


@pytest.mark.parametrize("argv,message", [
    (["compare", "--methods", "grpo"], "error: --output-dir is required"),
    (["compare", "--output-dir", "x", "--seeds", "0,0"], "error: --seeds needs distinct integers"),
    (["compare", "--output-dir", "x", "--seeds", "a"], "error: bad value for seeds: 'a'"),
    (["compare", "--output-dir", "x", "--train-only", "--eval-only"], "error: give at most one"),
    (["plot", "--out", "x.png"], "error: give at least one run directory"),
    (["plot", "nowhere"], "error: --out is required"),
    (["plot", "nowhere", "--out", "x.png"], "error: no metrics.jsonl in nowhere"),
])
def test_bad_compare_and_plot_options_are_one_line_exit_2(argv, message, tmp_path, monkeypatch,
                                                          capsys):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    error = capsys.readouterr().err.strip().splitlines()
    assert len(error) == 1 and error[0].startswith(message), error
    assert not (tmp_path / "x").exists()


def test_plot_reads_its_run_directories_from_yaml(tmp_path):
    run = tmp_path / "runs" / "ict" / "seed0"
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("\n".join(json.dumps({"step": step, "reward_mean": step / 4})
                                                 for step in range(1, 4)) + "\n")
    path = tmp_path / "plot.yaml"
    path.write_text(f"run_dirs: [{run}]\nby: method\nout: {tmp_path / 'curves.png'}\n")
    assert main(["plot", "--config", str(path)]) == 0
    assert (tmp_path / "curves.png").stat().st_size > 1000


def test_plot_draws_the_steps_before_a_torn_last_line_and_names_a_bad_line(tmp_path, capsys):
    """A metrics.jsonl whose last line an interrupted write tore is drawn from the steps before it;
    a line that is not JSON before the last, or a record without an integer step, is one error
    line naming the file and the line (exit status 2)."""
    run = tmp_path / "run"
    run.mkdir()
    steps = "\n".join(json.dumps({"step": step, "reward_mean": step / 4}) for step in range(1, 4))
    (run / "metrics.jsonl").write_text(steps + '\n{"step": 4, "rew')
    assert main(["plot", str(run), "--out", str(tmp_path / "torn.png")]) == 0
    assert (tmp_path / "torn.png").stat().st_size > 1000
    capsys.readouterr()
    for text, message in (('oops\n' + steps + "\n", "metrics.jsonl:1: not valid JSON"),
                          # the line before the last: not a torn last line (nor is the step after it lost)
                          (steps + '\noops\n{"step": 5}\n', "metrics.jsonl:4: not valid JSON"),
                          ('{"reward_mean": 1}\n' + steps + "\n", "metrics.jsonl:1: not a metrics record")):
        (run / "metrics.jsonl").write_text(text)
        assert main(["plot", str(run), "--out", str(tmp_path / "bad.png")]) == 2
        error = capsys.readouterr().err.strip().splitlines()
        assert len(error) == 1 and message in error[0], error
    assert not (tmp_path / "bad.png").exists()


@pytest.mark.parametrize("argv", [["compare"], ["--debug", "compare"]])
def test_compare_records_its_command_line_with_global_flags_too(argv, tmp_path, monkeypatch):
    """``ict --debug compare ...`` recorded no command in DIR/commands.txt (only ``ict compare``
    in first place was recognised as the command line)."""
    import sys

    import ict.experiments.compare as compare

    seen = {}
    monkeypatch.setattr(compare, "run_comparison", lambda config: seen.setdefault("command", config.command))
    words = [*argv, "--output-dir", str(tmp_path / "out"), "--methods", "grpo"]
    monkeypatch.setattr(sys, "argv", ["ict", *words])
    main(words)
    assert seen["command"] == "ict " + " ".join(words)
    # called from Python (sys.argv another program's, here pytest's): no command line recorded
    seen.clear()
    monkeypatch.setattr(sys, "argv", ["pytest", "-q", "tests"])
    main(words)
    assert seen["command"] == ""


def test_plot_writes_the_png_it_names(tmp_path, capsys):
    """`ict plot --out xpng` printed `plot: xpng` while matplotlib wrote xpng.png; now a name
    without .png is refused (tests/test_cli_errors.py) and the file printed is the one written,
    a PNG, also for an upper-case suffix and for plot_runs given a path without one."""
    from ict.analysis.plots import plot_runs

    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n")
    out = tmp_path / "curves.PNG"
    assert main(["plot", str(run), "--out", str(out)]) == 0
    assert capsys.readouterr().out == f"plot: {out}\n"
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_runs([run], tmp_path / "figure") == tmp_path / "figure"
    assert (tmp_path / "figure").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["curves.PNG", "figure", "run"]


def test_plot_reads_and_writes_paths_under_the_home_directory(tmp_path, monkeypatch, capsys):
    """`ict plot ~/run --out ~/curves.png` (from --config, or --out=~/...: no shell expands it):
    the check before the work expands ~ but the figure was written to ./~/curves.png (a directory
    ~ made in the working directory), and ~/run had 'no metrics.jsonl'. Both now name ~'s files."""
    home = tmp_path / "home"
    (home / "run").mkdir(parents=True)
    (home / "run" / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + "\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    assert main(["plot", str(home / "run"), "--out", "~/curves.png"]) == 0
    assert capsys.readouterr().out == f"plot: {home / 'curves.png'}\n"
    assert (home / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "~").exists()
    assert main(["plot", "~/run", "--out", str(tmp_path / "other.png")]) == 0
    assert (tmp_path / "other.png").is_file()


def test_the_same_value_means_the_same_by_every_route(tmp_path, capsys):
    """Found by a review, each was read differently by one route (flag, YAML, override): YAML's
    unquoted off / no became the text 'False' (autocast: off refused, dataset_subset: no silently
    'False'); a YAML list option refused a single number (ks: 4) and the empty list
    (eval_steps: []); --aggregation null was refused where aggregation=null passes; a 400-digit
    number for a float escaped as OverflowError."""
    from ict.core.errors import UsageError
    from ict.core.options import parse_field
    from ict.training.config_loading import build_config

    config = tmp_path / "train.yaml"
    config.write_text("autocast: off\ndataset_subset: 'no'\n")
    built = build_config(config)
    assert (built.autocast, built.dataset_subset) == ("off", "no")
    config.write_text("dataset_subset: no\n")
    with pytest.raises(UsageError, match="quote the text"):
        build_config(config)
    assert parse_field(EvalConfig, "ks", 4) == (4,) and parse_field(CompareConfig, "eval_steps", []) == ()
    assert parse_field(CompareConfig, "eval_steps", "") == () and parse_field(CompareConfig, "seeds", 3) == (3,)
    with pytest.raises(UsageError, match="expected a finite float"):
        parse_field(TrainConfig, "learning_rate", 10**400)
    args = subparser("train").parse_args(["--aggregation", "null"])
    assert options_from_args(TrainConfig, args).aggregation is None


def test_an_infinite_float_is_refused_as_nan_is():
    """A float option is finite: inf, -Infinity, 1e999 (inf once read) are refused in one line by
    parse_field (learning_rate=inf passed validate's '> 0')."""
    from ict.core.errors import UsageError
    from ict.core.options import parse_field

    for raw in ("inf", "-Infinity", "1e999", float("inf"), "nan"):
        with pytest.raises(UsageError, match=r"bad value for learning_rate: .* \(expected a finite float\)$"):
            parse_field(TrainConfig, "learning_rate", raw)


def test_a_choice_option_without_none_quotes_the_value_typed(capsys):
    """`--dtype null` (dtype takes no none): the one-line error quotes 'null', as typed (it said
    "invalid choice: 'none'", a value nobody typed); an option that takes none reads null as none."""
    with pytest.raises(SystemExit) as stop:
        main(["train", "--dtype", "null"])
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "argument --dtype: invalid choice: 'null'" in err and len(err.splitlines()) == 1
    assert subparser("train").parse_args(["--aggregation", "~"]).aggregation == "none"


def test_values_that_failed_late_are_refused_first(tmp_path, capsys):
    """Each of these passed the checks and failed later: a seed outside numpy's [0, 2^32) after the
    run directory was made, a verify timeout of 1e10 s (an OverflowError after generation), a YAML
    dtype outside the choices (after the benchmarks loaded), an --html in a missing directory
    (after the model had scored every token)."""
    from ict.core.errors import UsageError
    from ict.training.config_loading import build_config

    for overrides, message in (({"seed": "-1"}, "seed must be in"), ({"seed": str(2**32)}, "seed must be in"),
                               ({"verify_timeout": "1e10"}, "verify_timeout must be in")):
        with pytest.raises(UsageError, match=message):
            build_config(None, {}, overrides)
    with pytest.raises(UsageError, match="--seeds must lie in"):
        CompareConfig(output_dir=tmp_path / "c", seeds=(0, -1)).validate()
    with pytest.raises(UsageError, match="--verify-timeout must be in"):
        EvalConfig(verify_timeout=1e10).validate()
    with pytest.raises(UsageError, match="dtype"):
        EvalConfig(dtype="bogus").validate()
    with pytest.raises(UsageError, match="--system-prompt is not valid text"):  # a TypeError at the first prompt
        EvalConfig(system_prompt="\udcff").validate()
    assert main(["inspect", "--model", str(tmp_path / "no-model"), "--prompt", "x",
                 "--html", str(tmp_path / "missing" / "view.html")]) == 2
    assert "no directory" in capsys.readouterr().err


def test_a_compare_yaml_gives_eval_temperature_to_the_runs_too():
    """eval_temperature is a field of both commands: compare_options gave it to ict compare alone,
    so the runs' own evaluations (eval_size, eval_every) were greedy where ict train --config of
    the same file samples at it."""
    ours, training = compare_options({"eval_temperature": 0.7, "seeds": [0], "learning_rate": 1e-5})
    assert ours == {"eval_temperature": 0.7, "seeds": [0]}
    assert training == {"eval_temperature": 0.7, "learning_rate": 1e-5}


@pytest.mark.parametrize("count", [3, 15, 25])
def test_plot_gives_every_run_its_own_colour(tmp_path, monkeypatch, count):
    """matplotlib's colour cycle repeats after 10: of ict compare's 15 runs (5 methods x 3 seeds)
    plotted one label per run, runs 1 and 11 (and 2 and 12, ...) were drawn in the same colour. The
    legend's colours are now distinct, the first 10 still matplotlib's default ones."""
    from matplotlib import colors
    from matplotlib.figure import Figure

    from ict.analysis.plots import plot_runs

    seen = []
    legend = Figure.legend
    monkeypatch.setattr(Figure, "legend", lambda self, handles, **kw: (seen.append(handles),
                                                                        legend(self, handles=handles, **kw))[1])
    runs = []
    for index in range(count):
        runs.append(tmp_path / f"run{index:02d}")
        runs[-1].mkdir()
        (runs[-1] / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": index / count}) + "\n")
    assert plot_runs(runs, tmp_path / "curves.png") == tmp_path / "curves.png"
    drawn = [colors.to_hex(handle.get_color()) for handle in seen[0][:count]]
    assert len(set(drawn)) == count
    if count <= 10:
        assert drawn == ["#1f77b4", "#ff7f0e", "#2ca02c"][:count]


def test_key_value_overrides_may_come_between_options(tmp_path, monkeypatch):
    """docs/training.md's `ict train --method stapo selector.tau_p=0.002 selector.quantile=0.75 ...`
    with more options and overrides after them (`... --num-steps 5 seed=1`) stopped with
    "unrecognized arguments: seed=1": argparse fills the positional override list once. Every
    key=value counts, in the order typed (the last of a key wins), for `ict compare`'s too; an
    unknown option still stops the command."""
    import ict.experiments.compare as compare
    import ict.training.trainer as trainer

    seen = []
    monkeypatch.setattr(trainer, "train", seen.append)
    assert main(["train", "--method", "stapo", "selector.tau_p=0.002", "--num-steps", "5", "seed=1",
                 "selector.quantile=0.75", "--temperature", "0.3", "learning_rate=1e-6", "seed=3"]) == 0
    config = seen[-1]
    assert (config.method, config.num_steps, config.temperature) == ("stapo", 5, 0.3)
    assert (config.seed, config.learning_rate, config.selector) == (3, 1e-6, {"tau_p": 0.002, "quantile": 0.75})
    monkeypatch.setattr(compare, "run_comparison", lambda config: seen.append(config) or tmp_path)
    assert main(["compare", "--output-dir", str(tmp_path), "seed=1", "--methods", "grpo", "num_steps=7"]) == 0
    assert seen[-1].overrides == {"seed": "1", "num_steps": "7"}
    with pytest.raises(SystemExit) as stopped:
        main(["train", "seed=1", "--num-steps", "5", "--no-such-option", "x=1"])
    assert stopped.value.code == 2


def test_plot_run_directories_may_come_between_options(tmp_path, monkeypatch, capsys):
    """`ict plot A --by method B` stopped with "unrecognized arguments: B" (argparse fills the
    positional list once); every run directory counts, in the order typed, and an unknown
    option still stops the command."""
    import ict.analysis.plots as plots

    seen = []
    monkeypatch.setattr(plots, "plot", lambda config: seen.append(config) or config.out)
    a, b, c = (str(tmp_path / name) for name in "abc")
    assert main(["plot", a, "--by", "method", b, "--out", str(tmp_path / "x.png"), c]) == 0
    assert [str(path) for path in seen[-1].run_dirs] == [a, b, c] and seen[-1].by == "method"
    with pytest.raises(SystemExit) as stopped:
        main(["plot", a, "--by", "method", "--no-such-option", b])
    assert stopped.value.code == 2 and "unrecognized arguments: --no-such-option" in capsys.readouterr().err


@pytest.mark.parametrize(("argv", "error"), [
    (["train", "--output-dir", ""], "--output-dir is empty: give a directory, or leave it out"),
    (["train", "--run-dir", ""], "--run-dir is empty: give a directory, or leave it out"),
    (["eval", "--num-samples", "0"], "--num-samples must be >= 1, got 0"),
    (["eval", "--n", "0"], "--n must be >= 1, got 0"),
    (["compare", "--config-file", "", "--output-dir", "OUT"], "--config-file is empty: give a YAML file"),
    (["compare", "--config", "", "--output-dir", "OUT"], "--config is empty: give a YAML file"),
])
def test_an_error_names_a_flag_as_it_was_typed_alias_or_not(tmp_path, capsys, argv, error):
    """``ict train --output-dir ""`` (TRL's name of --run-dir) was refused as "--run-dir is empty",
    a flag the user had not typed; ``ict eval --num-samples 0`` as "--n must be >= 1"."""
    assert main([str(tmp_path / "out") if word == "OUT" else word for word in argv]) == 2
    assert capsys.readouterr().err.startswith(f"error: {error}")


def test_only_a_whole_other_spelling_of_the_flag_typed_is_replaced():
    """``--n`` in ``--no-progress`` or ``--n-best`` is no flag of its own; a flag without an alias
    and a message of a command line without one are as they were."""
    from ict.cli.options import in_typed_spelling

    args = build_parser().parse_args(["eval", "--num-samples", "3", "--limit", "2"])
    assert in_typed_spelling("--n 3 (see --no-progress, --n-best, x--n, --n)", args) == (
        "--num-samples 3 (see --no-progress, --n-best, x--n, --num-samples)")
    assert in_typed_spelling("--n 3, --limit 2", build_parser().parse_args(["eval", "--limit", "2"])) == (
        "--n 3, --limit 2")


@pytest.mark.parametrize("argv,message", [
    (["--seeds", ""], "error: --seeds needs at least one seed (e.g. --seeds 0,1,2)"),
    (["--eval-ks", ""], "error: --eval-ks needs at least one value (e.g. --eval-ks 1,4)"),
    (["--methods", ""], "error: --methods needs at least one method (e.g. --methods grpo,ict)"),
    (["--methods", " , "], "error: --methods needs at least one method (e.g. --methods grpo,ict)"),
])
def test_an_empty_compare_list_is_refused_as_empty(argv, message, tmp_path, monkeypatch, capsys):
    """ict compare's --seeds '', --eval-ks '' and --methods '' said "needs distinct integers, got
    ()", "needs distinct k in 1..--eval-n (4), got ()", "needs distinct methods, got ''" (nothing
    repeats in an empty list); ict eval's --seeds '' and --k '' say what is wrong, and so do these."""
    monkeypatch.chdir(tmp_path)
    assert main(["compare", "--output-dir", "x", "--report-only", *argv]) == 2  # a slip trains nothing
    assert capsys.readouterr().err.strip().splitlines() == [message]
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(("command", "line"), [
    ("eval", "--temperature FLOAT sampling temperature; 0 = greedy, else >= 1e-06 (default: 0.6)"),
    ("train", "--eval-temperature FLOAT evaluation sampling temperature; 0 = greedy, else >= 1e-06 (default: 0.0)"),
    ("compare", "--eval-temperature FLOAT evaluation sampling temperature; 0 = greedy, else >= 1e-06 (default: 0.6)"),
])
def test_each_evaluation_temperature_s_help_names_greedy_and_its_floor(command, line, capsys):
    """ict eval, ict train and ict compare refuse an evaluation temperature in (0, 1e-6) alike
    (check_sampling_temperature); ict compare's --help named neither 0 (greedy)
    nor the floor, ict train's not the floor. Each says both now, as ict eval's does."""
    with pytest.raises(SystemExit, match="^0$"):
        main([command, "--help"])
    assert line in " ".join(capsys.readouterr().out.split())

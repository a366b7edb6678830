"""`ict compare --config`: the training options it gives every run, and the selector options
(those of one method) that some method refuses, named before anything trains."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ict.core.errors import UsageError
from ict.experiments.compare import CompareConfig, _training_config, parse_methods, run_comparison

OFFLINE_DEFAULT = Path(__file__).parents[1] / "configs" / "offline-default.yaml"


def test_the_offline_default_config_s_selector_is_named_before_anything_trains(tmp_path, capsys):
    """configs/offline-default.yaml writes out ICT's selector options; `ict compare --config` gives
    them every run, and the grpo run's config said only "selector 'all' has no option 'ratio'",
    which named neither the file nor the key to remove. One line, exit 2, nothing created."""
    from ict.cli import main

    output = tmp_path / "cmp"
    assert main(["compare", "--config", str(OFFLINE_DEFAULT), "--methods", "ict,grpo", "--seeds", "0",
                 "--output-dir", str(output)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(
        f"error: --config {OFFLINE_DEFAULT} sets selector for every run, which method grpo refuses ("), error
    assert "remove it and give each method its own options in --methods" in error
    assert not output.exists()


@pytest.mark.parametrize(("options", "overrides", "named"), [
    ({"ratio": 0.1}, {}, "--config c.yaml sets ratio"),
    ({"preset": "paper"}, {}, "--config c.yaml sets preset"),
    ({"js_reference": "prev"}, {}, "--config c.yaml sets js_reference"),  # an earlier version's name
    ({"selector.reference": "prev", "learning_rate": 1e-5}, {}, "--config c.yaml sets selector.reference"),
    ({}, {"selector.ratio": "0.2"}, "the command line sets selector.ratio=0.2"),
])
def test_each_shared_selector_option_a_method_refuses_is_named_with_its_source(tmp_path, options, overrides,
                                                                                named):
    config = CompareConfig(output_dir=tmp_path / "cmp", config_file="c.yaml", overrides=overrides)
    with pytest.raises(UsageError, match=re.escape(f"{named} for every run, which method grpo refuses")):
        _training_config(config, options, parse_methods("grpo")[0], 0)


def test_other_refusals_and_selector_options_every_method_takes_are_unchanged(tmp_path):
    """A refusal that is not the shared selector options' is the run's own; selector options that
    every compared method takes still reach every run (ratio: ict's and random's)."""
    config = CompareConfig(output_dir=tmp_path / "cmp", config_file="c.yaml")
    with pytest.raises(UsageError, match=r"^learning_rate must be > 0"):
        _training_config(config, {"ratio": 0.1, "learning_rate": -1.0}, parse_methods("ict")[0], 0)
    for spec in parse_methods("ict,random"):
        assert _training_config(config, {"selector": {"ratio": 0.2}}, spec, 0).selector["ratio"] == 0.2


def test_run_comparison_refuses_it_before_the_first_run_trains(tmp_path):
    with pytest.raises(UsageError, match="sets selector for every run, which method grpo refuses"):
        run_comparison(CompareConfig(output_dir=tmp_path / "cmp", config_file=str(OFFLINE_DEFAULT),
                                     methods="ict,grpo", seeds=(0,)))
    assert not (tmp_path / "cmp").exists()


@pytest.mark.parametrize(("options", "overrides", "named"), [
    ({"method": "ict"}, {}, "--config c.yaml sets method 'ict' for every run, but ict compare gives each run "
                            "its own from --methods (this one: grpo): remove it"),
    ({"seed": 7}, {}, "--config c.yaml sets seed 7 for every run, but ict compare gives each run its own "
                      "from --seeds (this one: 0)"),
    ({"run-dir": "elsewhere"}, {}, "--config c.yaml sets run_dir 'elsewhere' for every run"),
    ({}, {"method": "entropy"}, "the command line sets method 'entropy' for every run"),
    ({}, {"seed": "1"}, "the command line sets seed '1' for every run, but ict compare gives each run its own "
                        "from --seeds (this one: 0)"),
])
def test_a_run_s_own_option_given_for_every_run_is_refused_naming_where_it_comes_from(tmp_path, options,
                                                                                   overrides, named):
    """``method: ict`` in an ict compare --config (or ``method=...`` after it) was replaced by each
    run's method of --methods, silently; ``seed`` by --seeds' and ``run_dir`` by the run's own."""
    config = CompareConfig(output_dir=tmp_path / "cmp", config_file="c.yaml", overrides=overrides)
    with pytest.raises(UsageError, match=re.escape(named)):
        _training_config(config, options, parse_methods("grpo")[0], 0)


def test_a_run_s_own_option_that_agrees_with_the_run_s_is_taken(tmp_path, capsys):
    """``method: grpo`` (or its selector's name, all) with ``--methods grpo``, ``seed: 0`` with
    ``--seeds 0`` and ``run_dir: null`` replace nothing; from the command line, a file's ``method:``
    that a method of --methods differs from is one line before anything trains."""
    from ict.cli import main

    config = CompareConfig(output_dir=tmp_path / "cmp", config_file="c.yaml", overrides={"method": "all"})
    train_config = _training_config(config, {"method": "grpo", "seed": 0, "run_dir": None},
                                    parse_methods("grpo")[0], 0)
    assert (train_config.method, train_config.seed) == ("grpo", 0)
    path = tmp_path / "c.yaml"
    path.write_text(f"method: ict\nnum_steps: 1\nmodel: {tmp_path / 'no-model'}\n")  # nothing could train
    assert main(["compare", "--config", str(path), "--methods", "ict,entropy", "--seeds", "0",
                 "--output-dir", str(tmp_path / "out"), "--train-only"]) == 2
    error = capsys.readouterr().err
    assert error == (f"error: --config {path} sets method 'ict' for every run, but ict compare gives each "
                     "run its own from --methods (this one: entropy): remove it\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("where", ["overrides", "config"])
def test_a_plugin_selector_s_options_in_methods_reach_its_run(tmp_path, where):
    """`--methods low_prob:threshold=0.3` with the plugin that registers low_prob: its option was
    taken for a training option ("unknown option 'threshold'") unless an earlier method's run had
    imported the plugin (`ict compare --methods grpo,low_prob:...` worked, the method alone did not)."""
    from ict.core.selectors import SELECTORS

    name = f"compare_plugin_{where}"
    plugin = tmp_path / f"{name}.py"
    plugin.write_text("from ict import register_selector\n\n"
                      f"@register_selector({name!r}, defaults={{'threshold': 0.5}})\n"
                      "def select(inputs, threshold):\n    return inputs.response_mask\n")
    given = {"plugin": str(plugin)}
    config = CompareConfig(output_dir=tmp_path / "cmp", overrides=given if where == "overrides" else {})
    try:
        train_config = _training_config(config, given if where == "config" else {},
                                        parse_methods(f"{name}:threshold=0.3")[0], 0)
    finally:
        SELECTORS.pop(name, None)
    assert train_config.method == name and train_config.selector == {"threshold": 0.3}


def test_compare_option_edges_that_would_be_wrong_runs():
    """Mutation tests: a method option before any method is one line, not an IndexError; a seed of
    2^32 (past the training seeds' range, [0, 2^32)) is refused; a key of both dataclasses
    (eval_temperature) goes to the comparison and to every run, the others to one side."""
    from ict.experiments.compare import compare_options

    with pytest.raises(UsageError, match="bad method option 'ratio=0.1'; use method:key=value"):
        parse_methods("ratio=0.1,ict")
    with pytest.raises(UsageError, match=r"--seeds must lie in \[0, 2\^32\)"):
        CompareConfig(output_dir=Path("c"), report_only=True, seeds=(0, 2**32)).validate()
    ours, training = compare_options({"eval_temperature": 0.6, "eval-n": 4, "learning_rate": 1e-5})
    assert ours == {"eval_temperature": 0.6, "eval-n": 4}
    assert training == {"eval_temperature": 0.6, "learning_rate": 1e-5}


def test_report_only_on_a_directory_without_runs_is_refused_and_creates_nothing(tmp_path):
    """Mutation test: a mistyped --output-dir with --report-only (or --eval-only) is one line, and
    the directory is not created."""
    for flag in ("report_only", "eval_only"):
        with pytest.raises(UsageError, match=r"no runs under .*typo/runs; train them first"):
            run_comparison(CompareConfig(output_dir=tmp_path / "typo", eval_n=1, **{flag: True}))
    assert not (tmp_path / "typo").exists()


def test_the_cli_reads_compare_options_from_config_and_records_the_command(tmp_path, monkeypatch, capsys):
    """Mutation tests of `ict compare`'s command: a --config key of the comparison (eval_n) is read
    as that option (eval_n: 0 is refused), and the command line as typed is appended to
    DIR/commands.txt before the first run trains (here a Ctrl-C in its place)."""
    import sys

    import ict.training.trainer
    from ict.cli import main

    def interrupted(config, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ict.training.trainer, "train", interrupted)  # nothing trains
    (tmp_path / "c.yaml").write_text("eval_n: 0\n")
    assert main(["compare", "--config", str(tmp_path / "c.yaml"), "--output-dir", str(tmp_path / "a")]) == 2
    assert "--eval-n, --eval-max-new-tokens and --bootstrap-resamples must be >= 1" in capsys.readouterr().err
    argv = ["compare", "--methods", "grpo", "--seeds", "0", "--output-dir", str(tmp_path / "b"), "--train-only",
            "num_steps=1"]
    monkeypatch.setattr(sys, "argv", ["ict", *argv])
    assert main(argv) == 130
    assert (tmp_path / "b" / "commands.txt").read_text() == (
        f"ict compare --methods grpo --seeds 0 --output-dir {tmp_path / 'b'} --train-only num_steps=1\n")


def test_a_command_with_a_line_break_in_a_word_is_one_line_of_commands_txt_recorded_once(tmp_path, monkeypatch):
    """``ict compare ... system_prompt=$'Think.\\nAnswer.'``: shlex quoted the line break raw, so the
    command took two lines of DIR/commands.txt and every rerun appended it again (no line equalled
    it; three runs, six lines). It is one line, recorded once (here two runs, a Ctrl-C in place of
    the first run's training)."""
    import sys

    import ict.training.trainer
    from ict.cli import main

    monkeypatch.setattr(ict.training.trainer, "train", lambda config, **kwargs: (_ for _ in ()).throw(
        KeyboardInterrupt))  # nothing trains
    argv = ["compare", "--methods", "grpo", "--seeds", "0", "--output-dir", str(tmp_path / "b"), "--train-only",
            "num_steps=1", "system_prompt=Think.\nAnswer."]
    monkeypatch.setattr(sys, "argv", ["ict", *argv])
    for _ in range(2):
        assert main(argv) == 130
    assert (tmp_path / "b" / "commands.txt").read_text() == (
        f"ict compare --methods grpo --seeds 0 --output-dir {tmp_path / 'b'} --train-only num_steps=1 "
        "$'system_prompt=Think.\\nAnswer.'\n")


def test_a_recorded_command_is_one_line_that_bash_reads_back_as_the_words_typed():
    """`command_line` of words holding line breaks (\\n, \\r, U+2028, U+0085), a tab, escape and
    format characters, quotes, a backslash, a $, an empty word, non-ASCII: one line, which bash
    (the reference: the words it passes to printf) reads back as those words."""
    import shutil
    import subprocess

    from ict.cli.compare import command_line

    words = ["system_prompt=Think.\nAnswer in \\boxed{}.", "tab\there", "it's", "a\u2028b\x85c\r", "", "$HOME",
             "caf\u00e9 \U0001f600", "\x1b[0m\x7f\u200b", "don't\nstop \\\\n", "plain"]
    line = command_line(words)
    assert line.splitlines() == [line]
    assert line.endswith(" plain") and " '' " in line  # a printable word as shlex quotes it
    if shutil.which("bash") is None:
        pytest.skip("no bash to read the line back")
    done = subprocess.run(["bash", "-c", f"printf '%s\\0' {line}"], capture_output=True, check=True,
                          env={"LC_ALL": "C.UTF-8", "PATH": "/usr/bin:/bin"})
    assert done.stdout.split(b"\0")[:-1] == [word.encode() for word in words]


def test_a_command_after_a_torn_line_of_commands_txt_is_recorded_whole(tmp_path, monkeypatch):
    """A rerun on a full disk tore its line of DIR/commands.txt (no newline at the end); the next
    command was appended onto it, and the report's "Reproduce" showed the two glued together. It
    is a line of its own (recorded before the first run trains: here a Ctrl-C in its place)."""
    import ict.training.trainer

    def interrupted(config, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ict.training.trainer, "train", interrupted)  # nothing trains
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "commands.txt").write_text("ict compare --methods grpo --se")
    with pytest.raises(KeyboardInterrupt):
        run_comparison(CompareConfig(methods="grpo", seeds=(0,), output_dir=tmp_path / "b", train_only=True,
                                     overrides={"num_steps": "1"}, command="ict compare -y"))
    assert (tmp_path / "b" / "commands.txt").read_text() == "ict compare --methods grpo --se\nict compare -y\n"


def test_an_eval_temperature_too_cold_to_sample_at_is_refused_before_anything_trains(tmp_path, capsys):
    """--eval-temperature 1e-40 passed ict compare's check (>= 0): every run trained, then its
    evaluation was refused (ict eval's bound, 0 or >= 1e-6)."""
    from ict.cli import main

    assert main(["compare", "--output-dir", str(tmp_path / "cmp"), "--eval-temperature", "1e-40",
                 "--methods", "grpo", "--seeds", "0", "num_steps=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: --eval-temperature must be 0 (greedy) or >= 1e-06, got 1e-40"]
    assert not (tmp_path / "cmp").exists()
    assert CompareConfig(output_dir=tmp_path / "cmp", eval_temperature=0.0).validate().eval_temperature == 0.0


@pytest.mark.parametrize(("installed", "temperature", "options", "refused"), [
    (True, 0.005, [], True), (True, 3.0, [], True), (True, 0.01, [], False), (True, 2.0, [], False),
    (True, 0.0, [], False), (False, 0.005, [], False),
    (True, 0.005, ["lora_rank=2"], False),  # its checkpoints: LoRA adapters, evaluated with hf
    (True, 0.005, ["lora_rank=2", "--eval-steps", "0"], True),  # its untrained model with vLLM
])
def test_an_eval_temperature_vllm_does_not_sample_at_is_refused_before_anything_trains(
        installed: bool, temperature: float, options: list[str], refused: bool, tmp_path, capsys, monkeypatch):
    """Where ict compare's evaluations use vLLM (installed: backend auto), --eval-temperature 0.005
    (vLLM raises it to 0.01) or 3 (vLLM refuses it) trained the first run, then its evaluation
    stopped with "... or the hf backend", an option ict compare has not. Refused before anything
    trains now, in one line; vLLM's limits 0.01 and 2 themselves pass, as 0 (greedy) does."""
    import ict.evaluation.generator as generator
    import ict.training.trainer as trainer
    from ict.cli import main

    class Trains(Exception):
        pass

    def train(*args, **kwargs):
        raise Trains

    monkeypatch.setattr(generator, "vllm_installed", lambda: installed)
    monkeypatch.setattr(trainer, "train", train)
    output = tmp_path / "cmp"
    argv = ["compare", "--output-dir", str(output), "--eval-temperature", str(temperature), "--methods", "grpo",
            "--seeds", "0", "num_steps=1", "device=cpu", *options]
    if not refused:  # it got to the training (stopped there by this test)
        assert main(argv) == 1 and "train grpo seed 0 -> " in capsys.readouterr().out
        return
    assert main(argv) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: --eval-temperature {temperature:g}: ict compare evaluates with vLLM here (installed), which "
        "samples at temperatures in [0.01, 2]: give one there, or 0 (greedy)"]
    assert not output.exists()


def test_an_option_key_written_with_hyphens_leaves_its_run_the_method_it_names(tmp_path):
    """A --methods option's key may hold ``-`` (``grpo:learning-rate=1e-6`` trains with
    ``learning_rate``, as ict train's --learning-rate); its run label ``grpo-learning-rate=1e-6``
    was read as a method ``grpo-learning`` (the label up to its first ``-key=value``): no baseline
    grpo in the report, and ``--baselines grpo`` refused. Reference: each spec's own method name."""
    from ict.analysis.compare import RunRecord, is_baseline, method_of, summarize
    from ict.experiments.methods import method_overrides
    from ict.training.config_loading import build_config

    specs = parse_methods("grpo:learning-rate=1e-6,ict:max-new-tokens=512,stapo:tau-p=0.01,"
                          "random:scope=group,ratio=0.2,ict:x=-1,my-sel:ratio=0.2,random-topk,grpo")
    assert [spec.label for spec in specs] == [
        "grpo-learning-rate=1e-6", "ict-max-new-tokens=512", "stapo-tau-p=0.01", "random-scope=group-ratio=0.2",
        "ict-x=-1", "my-sel-ratio=0.2", "random-topk", "grpo"]
    assert [method_of(spec.label) for spec in specs] == [spec.name for spec in specs]
    assert build_config(None, {}, method_overrides(specs[0])).learning_rate == 1e-6  # the key is an option
    assert is_baseline("grpo-learning-rate=1e-6", ("grpo", "random"))
    verdicts = {"grpo-learning-rate=1e-6": [True, False, False, False], "ict": [True, True, False, False]}
    runs = [RunRecord(label, 0, tmp_path, [], {"b": {i: [v] * 4 for i, v in enumerate(values)}})
            for label, values in verdicts.items()]
    rows = summarize(runs, resamples=20)["differences"]
    assert {(row["method"], row["baseline"]) for row in rows} == {("ict", "grpo-learning-rate=1e-6")}
    config = CompareConfig(methods="grpo:learning-rate=1e-6,ict", baselines=("grpo",), output_dir=tmp_path / "cmp",
                           report_only=True)
    assert config.validate().baselines == ("grpo",)  # was "--baselines 'grpo' is none of the runs"
    plugin = CompareConfig(methods="grpo,random-topk:ratio=0.2", baselines=("random-topk",),
                           output_dir=tmp_path / "cmp", report_only=True)
    assert plugin.validate().baselines == ("random-topk",)  # its plugin not loaded yet: its spec names it
    from ict.core.selectors import SELECTORS, register_selector

    register_selector("random-topk")(lambda inputs: inputs.response_mask.bool())
    try:  # loaded, a plugin whose name starts with a built-in's is itself
        assert method_of("random-topk-ratio=0.2") == "random-topk"
        assert not is_baseline("random-topk-ratio=0.2", ("grpo", "random"))
    finally:
        SELECTORS.pop("random-topk", None)


def test_compare_help_names_the_default_baselines_the_report_uses(monkeypatch):
    """The description's "(default ...)" is read from the baselines the report falls back to."""
    import argparse

    import ict.analysis.compare as analysis_compare
    from ict.cli.compare import add_parser

    monkeypatch.setattr(analysis_compare, "BASELINES", ("grpo", "entropy20"))
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    compare = parser._subparsers._group_actions[0].choices["compare"]  # type: ignore[union-attr]
    assert "(default grpo and entropy20)" in compare.description

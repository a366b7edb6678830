"""`ict compare`'s report of evaluations made by hand: a multi-seed `ict eval`'s pass@k, the
settings of each run's final evaluation, and a run that recorded no step."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


def _write_eval(directory: Path, verdicts: dict[int, dict[int, list[bool]]], config: dict) -> None:
    """An `ict eval` output directory: samples.jsonl (problem -> seed -> verdicts) and results.json."""
    directory.mkdir(parents=True, exist_ok=True)
    records = [{"benchmark": "b", "index": index, "sample": sample, "seed": seed, "greedy": False,
                "correct": correct}
               for index, by_seed in verdicts.items() for seed, values in by_seed.items()
               for sample, correct in enumerate(values)]
    (directory / "samples.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (directory / "results.json").write_text(json.dumps({"config": config, "benchmarks": {"b": {}}}))


def test_a_multi_seed_evaluation_s_pass_at_k_is_the_mean_over_its_seeds(tmp_path):
    """`ict eval --seeds 0,1` reports pass@k as the mean over seeds of each seed's n-sample
    estimate (docs/evaluation.md); the report read the seeds' samples as one pool of 2n.
    Hand-worked, n = 3, k = 2 (pass@2 = 1 - C(n-c, 2) / C(3, 2)): problem 0, c = 1 and 2 ->
    (2/3 + 1) / 2 = 5/6; problem 1, c = 0 and 1 -> (0 + 2/3) / 2 = 1/3; mean 7/12 (pooled:
    (4/5 + 1/3) / 2 = 17/30). pass@1 is the same either way: (3/6 + 1/6) / 2 = 1/3. A seed with
    fewer than k samples of a problem leaves the run out of that pass@k even when the pool has k."""
    from ict.analysis.compare import complete_verdicts, summarize
    from ict.analysis.comparison_runs import RunRecord

    verdicts = {0: {0: [True, False, False], 1: [True, True, False]},
                1: {0: [False, False, False], 1: [False, True, False]}}
    _write_eval(tmp_path / "eval", verdicts, {"seeds": [0, 1], "ks": [1, 2]})
    correct = complete_verdicts(tmp_path / "eval")
    assert correct == {"b": {0: [True, False, False, True, True, False], 1: [False] * 4 + [True, False]}}
    summary = summarize([RunRecord("ict", 0, tmp_path, [], correct, ks=(1, 2))], resamples=10)
    means = {row["metric"]: row["mean"] for row in summary["table"]}
    assert means == pytest.approx({"pass@1": 1 / 3, "pass@2": 7 / 12})

    _write_eval(tmp_path / "short", {0: {0: [True, False, False], 1: [True]}}, {"seeds": [0, 1], "ks": [2]})
    short = RunRecord("ict", 0, tmp_path, [], complete_verdicts(tmp_path / "short"), ks=(2,))
    summary = summarize([short], resamples=10)
    assert summary["table"] == []
    assert "ict on b pass@2: left out (fewer than 2 samples of a problem: ict/seed0)" in summary["pairing"]


def _run(output: Path, label: str, seed: int, config: dict, verdicts: dict[int, dict[int, list[bool]]],
         **files: str) -> Path:
    """A run directory of a comparison, with a finished final evaluation (benchmark b) and the
    given files (name -> text, e.g. config_yaml for config.yaml)."""
    run = output / "runs" / label / f"seed{seed}"
    _write_eval(run / "eval", verdicts, config)
    for name, text in files.items():
        (run / name.replace("_", ".")).write_text(text)
    return run


SETTINGS = {"benchmarks": "b", "data_dir": None, "num_samples": 2, "ks": [1, 2], "temperature": 1.0,
            "max_new_tokens": 64, "seed": 0, "seeds": [0], "limit": None, "math_extraction": "lenient",
            "answer_extraction": "lenient"}


def test_report_only_names_a_run_whose_final_evaluation_had_other_settings(tmp_path, capsys):
    """`ict compare --report-only` pooled runs whose final evaluations were made by hand with
    other settings (here ict/seed0 at temperature 0.6 and 64 -> 32 new tokens, beside grpo's two
    seeds at the comparison's) without a word: the report names each such run and the settings
    that differ from the most runs'. A results.json that records only ``seed`` is that seed's
    ``seeds``, and ``ks`` (every k is taken from the samples) is no difference."""
    from ict.cli import main

    output = tmp_path / "cmp"
    verdicts = {0: {0: [True, False]}, 1: {0: [False, False]}}
    steps = {"config_yaml": "num_steps: 1\n", "metrics_jsonl": '{"step": 1}\n'}
    _run(output, "grpo", 0, SETTINGS, verdicts, **steps)
    _run(output, "grpo", 1, {**SETTINGS, "ks": [1]}, verdicts, **steps)
    other = {**SETTINGS, "temperature": 0.6, "max_new_tokens": 32}
    del other["seeds"]  # an ict eval older than --seeds
    _run(output, "ict", 0, other, verdicts, **steps)
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "10"]) == 0
    note = "ict/seed0 (temperature 0.6, the others' 1.0, max_new_tokens 32, the others' 64)"
    assert json.loads((output / "summary.json").read_text())["settings"] == [note]
    assert f"- {note}" in (output / "report.md").read_text()

    _run(output, "ict", 0, {**SETTINGS, "ks": [2]}, verdicts, **steps)
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "10"]) == 0
    assert json.loads((output / "summary.json").read_text())["settings"] == []
    assert "other settings" not in (output / "report.md").read_text()
    capsys.readouterr()


def test_report_only_names_a_final_evaluation_sampled_with_another_top_p_or_system_prompt(tmp_path, capsys):
    """A run evaluated by hand at top-p 1.0 with a system prompt (ict compare's evaluations: 0.95,
    none) changes what is sampled, as a temperature does, but the report named no setting; it now
    names both, and a reused evaluation made so is refused (test_compare_reruns)."""
    from ict.cli import main

    output = tmp_path / "cmp"
    verdicts = {0: {0: [True, False]}, 1: {0: [False, False]}}
    steps = {"config_yaml": "num_steps: 1\n", "metrics_jsonl": '{"step": 1}\n'}
    ours = {**SETTINGS, "top_p": 0.95, "system_prompt": None}
    _run(output, "grpo", 0, ours, verdicts, **steps)
    _run(output, "grpo", 1, ours, verdicts, **steps)
    _run(output, "ict", 0, {**ours, "top_p": 1.0, "system_prompt": "Answer briefly."}, verdicts, **steps)
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "10"]) == 0
    note = "ict/seed0 (top_p 1.0, the others' 0.95, system_prompt 'Answer briefly.', the others' None)"
    assert json.loads((output / "summary.json").read_text())["settings"] == [note]
    assert f"- {note}" in (output / "report.md").read_text()
    capsys.readouterr()


def test_report_only_takes_an_empty_system_prompt_for_none(tmp_path, capsys):
    """``ict eval --system-prompt ""`` adds no system message (`render_prompt`: the prompts of none),
    but the report named such a run as evaluated with other settings ("system_prompt '', the
    others' None")."""
    from ict.cli import main
    from ict.models.rollout import render_prompt

    class Plain:  # a tokenizer without a chat template: the messages' contents, joined
        chat_template = None

    assert render_prompt(Plain(), "2 + 2?", "") == render_prompt(Plain(), "2 + 2?", None) == "2 + 2?"
    output = tmp_path / "cmp"
    verdicts = {0: {0: [True, False]}, 1: {0: [False, False]}}
    steps = {"config_yaml": "num_steps: 1\n", "metrics_jsonl": '{"step": 1}\n'}
    _run(output, "grpo", 0, {**SETTINGS, "system_prompt": None}, verdicts, **steps)
    _run(output, "grpo", 1, {**SETTINGS, "system_prompt": None}, verdicts, **steps)
    _run(output, "ict", 0, {**SETTINGS, "system_prompt": ""}, verdicts, **steps)
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "10"]) == 0
    assert json.loads((output / "summary.json").read_text())["settings"] == []
    assert "other settings" not in (output / "report.md").read_text()
    capsys.readouterr()


def test_the_report_compares_the_settings_a_reused_evaluation_must_share():
    """The report's EVALUATION_SETTINGS are ict compare's EVAL_SETTINGS (what a reused evaluation
    must share) but ks, with seeds for seed, and verify_timeout (which ict compare re-grades rather
    than refuses): a setting added to one is added to the other."""
    from ict.analysis.comparison_runs import EVALUATION_SETTINGS
    from ict.experiments.compare import EVAL_SETTINGS

    assert sorted(EVALUATION_SETTINGS) == sorted({*EVAL_SETTINGS, "seeds", "verify_timeout"} - {"seed", "ks"})


def test_report_only_names_a_final_evaluation_graded_with_another_verify_timeout(tmp_path, capsys):
    """A run re-graded by hand with `ict eval --verify-timeout 0.5` (every check that took longer
    counted incorrect) was pooled with runs graded with 5 s without a word; the report names it."""
    from ict.cli import main

    output = tmp_path / "cmp"
    verdicts = {0: {0: [True, False]}, 1: {0: [False, False]}}
    steps = {"config_yaml": "num_steps: 1\n", "metrics_jsonl": '{"step": 1}\n'}
    _run(output, "grpo", 0, {**SETTINGS, "verify_timeout": 5.0}, verdicts, **steps)
    _run(output, "grpo", 1, {**SETTINGS, "verify_timeout": 5.0}, verdicts, **steps)
    _run(output, "ict", 0, {**SETTINGS, "verify_timeout": 0.5}, verdicts, **steps)
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "10"]) == 0
    note = "ict/seed0 (verify_timeout 0.5, the others' 5.0)"
    assert json.loads((output / "summary.json").read_text())["settings"] == [note]
    assert f"- {note}" in (output / "report.md").read_text()
    capsys.readouterr()


def test_the_final_evaluation_of_a_run_that_records_no_step_is_not_step_0(tmp_path):
    """A run with neither config.yaml nor metrics.jsonl (its step unknown) put its final
    evaluation (pass@1 1.0) at step 0 of the learning curves, over the base model's (0.0): the
    untrained model's point became the trained one's. Its curve keeps step 0 (the base model)
    and step 3 (evals/step-3/, 0.5); the final evaluation, at no known step, is not a point."""
    from ict.analysis.compare import learning_curves, load_runs

    output = tmp_path / "cmp"
    _write_eval(output / "base-model", {0: {0: [False]}, 1: {0: [False]}}, {"ks": [1]})
    run = _run(output, "ict", 0, {"ks": [1]}, {0: {0: [True]}, 1: {0: [True]}})
    _write_eval(run / "evals" / "step-00000003", {0: {0: [True]}, 1: {0: [False]}}, {"ks": [1]})
    rows = learning_curves(output, load_runs(output))
    assert [(row["step"], row["metric"], row["value"]) for row in rows] == [(0, "pass@1", 0.0), (3, "pass@1", 0.5)]


def test_the_limit_and_the_seed_of_old_records_and_the_benchmarks_as_evaluated(tmp_path):
    """Mutation tests of read_verdicts / evaluation_settings: --limit 2 keeps problems 0 and 1,
    not problem 2 (a rerun with a lower limit keeps it in samples.jsonl); a record without a
    'seed' (written before it existed) is seed 0's; and two runs whose evaluations name one
    benchmark as 'b' and ['b'] evaluated the same benchmarks (results.json's names): no note."""
    from ict.analysis.compare import complete_verdicts, summarize
    from ict.analysis.comparison_runs import RunRecord, evaluation_settings

    directory = tmp_path / "eval"
    _write_eval(directory, {0: {0: [True]}, 1: {0: [False]}, 2: {0: [True]}}, {**SETTINGS, "limit": 2})
    assert complete_verdicts(directory) == {"b": {0: [True], 1: [False]}}
    lines = (directory / "samples.jsonl").read_text().splitlines()
    (directory / "samples.jsonl").write_text("".join(json.dumps({key: value for key, value in json.loads(line).items()
                                                                 if key != "seed"}) + "\n" for line in lines))
    assert complete_verdicts(directory) == {"b": {0: [True], 1: [False]}}

    runs = []
    for seed, benchmarks in enumerate(["b", ["b"]]):
        _write_eval(tmp_path / str(seed), {0: {0: [True]}}, {**SETTINGS, "benchmarks": benchmarks})
        runs.append(RunRecord("ict", seed, tmp_path, [], complete_verdicts(tmp_path / str(seed)), ks=(1,),
                              eval_settings=evaluation_settings(tmp_path / str(seed))))
    assert summarize(runs, resamples=10)["settings"] == []
    _write_eval(tmp_path / "2", {0: {0: [True]}}, {**SETTINGS, "benchmarks": "b", "num_samples": 1})
    runs.append(RunRecord("grpo", 0, tmp_path, [], complete_verdicts(tmp_path / "2"), ks=(1,),
                          eval_settings=evaluation_settings(tmp_path / "2")))
    assert summarize(runs, resamples=10)["settings"] == ["grpo/seed0 (num_samples 1, the others' 2)"]


def test_ict_compare_evaluates_with_its_eval_options_and_checks_reused_step_evaluations(tmp_path):
    """Mutation tests of ict.experiments.compare: each --eval-* option reaches the `ict eval`
    settings (--eval-temperature dropped for the default survived), and a rerun with other
    settings is refused over a reused intermediate evaluation (evals/step-N/) too, not only over
    eval/ (leaving evals/step-* out of the check survived)."""
    from types import SimpleNamespace

    from ict.core.errors import UsageError
    from ict.experiments.compare import CompareConfig, _eval_config, run_comparison, run_dir
    from ict.training.config_loading import build_config, save_config

    options = {"eval_benchmarks": "gsm8k", "eval_n": 3, "eval_ks": (1, 2), "eval_temperature": 0.3,
               "eval_max_new_tokens": 7, "eval_limit": 5, "eval_math_extraction": "strict",
               "eval_answer_extraction": "tag"}
    config = CompareConfig(methods="grpo", seeds=(0,), output_dir=tmp_path / "cmp", **options)
    device = SimpleNamespace(device="cpu", dtype="float32", num_threads=1)
    made = vars(_eval_config(config, device, "m", tmp_path / "eval"))  # type: ignore[arg-type]
    assert {name: made[name] for name in ("benchmarks", "num_samples", "ks", "temperature", "max_new_tokens",
                                           "limit", "math_extraction", "answer_extraction", "seed")} \
        == {"benchmarks": "gsm8k", "num_samples": 3, "ks": (1, 2), "temperature": 0.3, "max_new_tokens": 7,
            "limit": 5, "math_extraction": "strict", "answer_extraction": "tag", "seed": 0}

    output = tmp_path / "cmp"
    directory = run_dir(output, "grpo", 0)
    directory.mkdir(parents=True)
    train_config = build_config(None, {}, {"method": "grpo", "seed": "0", "run_dir": str(directory),
                                           "num_steps": "2"})
    save_config(train_config, directory / "config.yaml")
    (directory / "metrics.jsonl").write_text('{"step": 1}\n{"step": 2}\n')
    config = CompareConfig(methods="grpo", seeds=(0,), output_dir=output, overrides={"num_steps": "2"},
                           eval_n=2, eval_ks=(1,))
    settings = json.loads(json.dumps(vars(_eval_config(config, train_config, "m", directory / "eval"))))
    _write_eval(directory / "eval", {0: {0: [True, False]}}, settings)
    _write_eval(directory / "evals" / "step-00000001", {0: {0: [True]}}, {**settings, "num_samples": 1})
    with pytest.raises(UsageError, match=r"step-00000001 was evaluated with other settings \(num_samples 1 -> 2\)"):
        run_comparison(config, log=lambda *_: None)


def test_only_the_evaluated_seeds_count_and_unnamed_ks_are_1_and_4(tmp_path):
    """Mutation tests of evaluated_units / evaluated_ks: samples.jsonl keeps the records of seeds
    an earlier `ict eval --seeds 0,1` wrote (a rerun keeps them); a results.json of seeds [1] (or,
    older, of seed 1) counts seed 1's alone (reading every seed survived). A results.json that
    names no ks asks for pass@1 and pass@4 (docs/evaluation.md's default; (1, 2) survived)."""
    from ict.analysis.compare import complete_verdicts, evaluated_ks

    verdicts = {0: {0: [True, True], 1: [False, True]}}
    for config in ({"seeds": [1], "ks": [1]}, {"seed": 1, "ks": [1]}):
        _write_eval(tmp_path / "eval", verdicts, config)
        assert complete_verdicts(tmp_path / "eval") == {"b": {0: [False, True]}}
    _write_eval(tmp_path / "eval", verdicts, {"seeds": [0, 1]})
    assert evaluated_ks(tmp_path / "eval") == (1, 4)


def test_report_only_names_a_base_model_or_step_evaluation_made_with_other_settings(tmp_path, capsys):
    """The learning curves' evaluations were pooled without a word: base-model/ evaluated with
    n = 4 at temperature 0.6 (all right: step 0 at 100%) and grpo/seed0's evals/step-1 with 32 new
    tokens, beside final evaluations at the comparison's settings. Each is named as a final
    evaluation with other settings is; seed 1's step evaluation (only ks differs) is not."""
    from ict.cli import main

    output = tmp_path / "cmp"
    steps = {"config_yaml": "num_steps: 2\n", "metrics_jsonl": '{"step": 1}\n{"step": 2}\n'}
    verdicts = {0: {0: [True, False]}, 1: {0: [False, False]}}
    for seed in (0, 1):
        run = _run(output, "grpo", seed, SETTINGS, verdicts, **steps)
        step = {**SETTINGS, "max_new_tokens": 32} if seed == 0 else {**SETTINGS, "ks": [1]}
        _write_eval(run / "evals" / "step-00000001", verdicts, step)
    _write_eval(output / "base-model", {0: {0: [True] * 4}, 1: {0: [True] * 4}},
                {**SETTINGS, "num_samples": 4, "temperature": 0.6})
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "10"]) == 0
    notes = ["base-model (num_samples 4, the others' 2, temperature 0.6, the others' 1.0)",
             "grpo/seed0 evals/step-00000001 (max_new_tokens 32, the others' 64)"]
    assert json.loads((output / "summary.json").read_text())["settings"] == notes
    report = (output / "report.md").read_text()
    assert all(f"- {note}" in report for note in notes)
    assert "| b | pass@1 | grpo | 100.0 | 25.0 | 25.0 |" in report  # the curves themselves unchanged

    _write_eval(output / "base-model", {0: {0: [True] * 2}, 1: {0: [True] * 2}}, SETTINGS)
    _write_eval(output / "runs" / "grpo" / "seed0" / "evals" / "step-00000001", verdicts, SETTINGS)
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "10"]) == 0
    assert json.loads((output / "summary.json").read_text())["settings"] == []
    assert "other settings" not in (output / "report.md").read_text()
    capsys.readouterr()


def test_records_from_before_the_seed_field_count_as_their_evaluation_s_seed(tmp_path):
    """An `ict eval --seed 3` older than --seeds wrote records without 'seed' and a results.json
    whose config has seed 3 only: the report read each record as seed 0, not among the
    evaluation's seeds {3}, and the finished evaluation had no verdict at all ({}). They count as
    seed 3 now, as ict eval's resume reads them (its run.json's seed)."""
    from ict.analysis.compare import complete_verdicts

    directory = tmp_path / "eval"
    directory.mkdir()
    records = [{"benchmark": "b", "index": index, "sample": sample, "greedy": False, "correct": sample == index}
               for index in range(2) for sample in range(2)]
    (directory / "samples.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    for seed in (3, 0):
        (directory / "results.json").write_text(json.dumps({"config": {"seed": seed, "ks": [1]}, "benchmarks": {"b": {}}}))
        correct = complete_verdicts(directory)
        assert correct == {"b": {0: [True, False], 1: [False, True]}}
        assert {index: verdicts.by_seed for index, verdicts in correct["b"].items()} == {
            0: {seed: [True, False]}, 1: {seed: [False, True]}}


def test_a_reused_evaluation_older_than_a_setting_is_checked_on_the_settings_it_records(tmp_path):
    """Mutation test of _check_eval_settings: a results.json written before a setting existed
    (here answer_extraction, math_extraction and limit missing) is compared on the settings it
    records, and passes when they agree (reading each missing one as None refused every such
    evaluation: 'answer_extraction None -> ...'); one it records that differs is still refused."""
    from ict.core.errors import UsageError
    from ict.evaluation.evaluate import EvalConfig
    from ict.experiments.compare import _check_eval_settings

    config = EvalConfig(model="m", benchmarks="gsm8k", num_samples=2, ks=(1,), temperature=1.0,
                        max_new_tokens=8, seed=0, limit=5, math_extraction="anchored", answer_extraction="tag")
    older = {"model": "m", "benchmarks": "gsm8k", "data_dir": None, "num_samples": 2, "ks": [1],
             "temperature": 1.0, "max_new_tokens": 8, "seed": 0}
    _write_eval(tmp_path / "eval", {0: {0: [True, False]}}, older)
    _check_eval_settings(tmp_path / "eval", config)
    _write_eval(tmp_path / "eval", {0: {0: [True, False]}}, {**older, "temperature": 0.6})
    with pytest.raises(UsageError, match=r"other settings \(temperature 0.6 -> 1.0\)"):
        _check_eval_settings(tmp_path / "eval", config)


def test_a_reused_evaluation_made_with_an_empty_system_prompt_passes_for_none(tmp_path):
    """An ``ict eval --system-prompt ""`` run by hand into a run's eval directory sampled the
    prompts of none (render_prompt adds no system message for either); _check_eval_settings
    refused to reuse it ("system_prompt '' -> None"). Another system prompt is still refused."""
    from ict.core.errors import UsageError
    from ict.evaluation.evaluate import EvalConfig
    from ict.experiments.compare import _check_eval_settings

    config = EvalConfig(model="m", benchmarks="gsm8k", num_samples=2, ks=(1,), temperature=1.0,
                        max_new_tokens=8, seed=0)
    stored = {"model": "m", "benchmarks": "gsm8k", "data_dir": None, "num_samples": 2, "ks": [1],
              "temperature": 1.0, "max_new_tokens": 8, "seed": 0, "system_prompt": ""}
    _write_eval(tmp_path / "eval", {0: {0: [True, False]}}, stored)
    _check_eval_settings(tmp_path / "eval", config)
    _write_eval(tmp_path / "eval", {0: {0: [True, False]}}, {**stored, "system_prompt": " "})
    with pytest.raises(UsageError, match=r"other settings \(system_prompt ' ' -> None\)"):
        _check_eval_settings(tmp_path / "eval", config)


def test_report_only_names_evaluations_graded_under_older_grading_rules(tmp_path, capsys):
    """`ict compare --report-only` pooled an evaluation graded under older answer-grading rules
    (results.json records ``grading_rules``; none: an ict eval older than it) with those graded
    under the current ones, without a word: the report names each (final, base-model), with how
    to re-grade it. An evaluation at the current version is not named."""
    from ict.analysis.compare import load_runs
    from ict.analysis.evaluation_notes import regrade_notes
    from ict.answers.grading import GRADING_RULES_VERSION
    from ict.cli import main

    output = tmp_path / "cmp"
    verdicts = {0: {0: [True, False]}, 1: {0: [False, False]}}
    steps = {"config_yaml": "num_steps: 1\n", "metrics_jsonl": '{"step": 1}\n'}
    current = {**SETTINGS, "grading_rules": GRADING_RULES_VERSION}
    _run(output, "grpo", 0, current, verdicts, **steps)
    _run(output, "grpo", 1, SETTINGS, verdicts, **steps)  # no grading_rules recorded
    _write_eval(output / "base-model", verdicts, {**current, "grading_rules": GRADING_RULES_VERSION - 1})
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "10"]) == 0
    notes = [f"grpo/seed1 eval (grading rules unknown (older), current {GRADING_RULES_VERSION})",
             f"base-model (grading rules {GRADING_RULES_VERSION - 1}, current {GRADING_RULES_VERSION})"]
    assert json.loads((output / "summary.json").read_text())["regrade"] == notes
    report = (output / "report.md").read_text()
    assert "graded under other answer-grading rules" in report
    assert all(f"- {note}" in report for note in notes)
    assert "other settings" not in report  # the rules are no --eval-* setting
    assert regrade_notes(output, load_runs(output)) == notes  # no current version given: the newest recorded

    _run(output, "grpo", 1, current, verdicts, **steps)
    _write_eval(output / "base-model", verdicts, current)
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "10"]) == 0
    assert json.loads((output / "summary.json").read_text())["regrade"] == []
    assert "answer-grading rules" not in (output / "report.md").read_text()
    capsys.readouterr()


def _boxed_three_evaluation(tmp_path: Path) -> tuple[Any, Any, Path]:
    """A finished `ict eval` of ict compare's final evaluation (its `_eval_config`) in
    ``tmp_path / "eval"``: one gsm8k problem of gold 3 in ``tmp_path / "data"``, two completions
    ``\\boxed{3}`` (both right); (compare config, train config, evaluation directory)."""
    from types import SimpleNamespace

    from ict.evaluation.evaluate import Generator, evaluate
    from ict.experiments.compare import CompareConfig, _eval_config

    class Scripted(Generator):
        def __init__(self) -> None:
            self.name = "scripted"

        def generate(self, prompts, num_samples, greedy, seed):
            return [["\\boxed{3}"] * num_samples for _ in prompts], [[1] * num_samples for _ in prompts], \
                [[True] * num_samples for _ in prompts]

    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text(json.dumps({"question": "question 3?", "answer": "#### 3"}) + "\n")
    config = CompareConfig(methods="grpo", seeds=(0,), output_dir=tmp_path / "cmp", eval_benchmarks="gsm8k",
                           eval_data_dir=str(data), eval_n=2, eval_ks=(1,))
    train_config = SimpleNamespace(device="cpu", dtype="fp32", num_threads=None)
    out = tmp_path / "eval"
    evaluate(_eval_config(config, train_config, "m", out), Scripted(), progress=False, print_table=False)  # type: ignore[arg-type]
    return config, train_config, out


def test_a_reused_evaluation_graded_under_older_rules_is_regraded_by_the_comparison(tmp_path):
    """A comparison rerun reused a final evaluation graded under older rules as it was; it now
    resumes that `ict eval` (every unit is finished: nothing generated), which re-grades its
    stored completions: two right answers stored as wrong (what older rules said) count as right,
    and results.json records the current version. One graded under the current rules is left
    alone (results.json not rewritten)."""
    from ict.answers.grading import GRADING_RULES_VERSION
    from ict.data.benchmarks import load_benchmark
    from ict.experiments.compare import _evaluate

    config, train_config, out = _boxed_three_evaluation(tmp_path)
    assert load_benchmark("gsm8k", tmp_path / "data").problems[0].answer == "3"
    before = (out / "results.json").stat().st_mtime_ns
    _evaluate(config, train_config, None, out, log=lambda *_: None)  # type: ignore[arg-type]
    assert (out / "results.json").stat().st_mtime_ns == before  # current rules: left alone

    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    for record in records:
        del record["grading"]["grading_rules"]
        record.update(correct=False, extracted=None, score=0.0, status="no_answer")
    (out / "samples.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    results = json.loads((out / "results.json").read_text())
    results["config"]["grading_rules"] = GRADING_RULES_VERSION - 1  # older rules recorded
    results["benchmarks"]["gsm8k"]["metrics"]["pass@1"] = 0.0
    (out / "results.json").write_text(json.dumps(results))
    logged: list[str] = []
    _evaluate(config, train_config, None, out, log=logged.append)  # type: ignore[arg-type]
    assert logged == [f"re-grade {out} (grading rules {GRADING_RULES_VERSION - 1}, current {GRADING_RULES_VERSION})"]
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["grading_rules"] == GRADING_RULES_VERSION
    assert results["benchmarks"]["gsm8k"]["metrics"]["pass@1"] == 1.0


def test_a_reused_evaluation_graded_with_another_verify_timeout_is_regraded_by_the_comparison(tmp_path):
    """An evaluation re-graded by hand with `ict eval --verify-timeout 0.001` (the report says to
    re-grade with `ict eval` into the directory) counted every check cut short as incorrect; ict
    compare, which has no such option and grades with ict eval's default (5 s), reused it as it was
    (only the grading rules were compared), beside runs graded with 5 s. It now re-grades it (nothing
    generated): the two right answers count as right again, and results.json records 5 s."""
    from ict.answers.verify import DEFAULT_TIMEOUT_SECONDS
    from ict.experiments.compare import _evaluate

    config, train_config, out = _boxed_three_evaluation(tmp_path)
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    for record in records:  # as `ict eval --verify-timeout 0.001` graded them: every check timed out
        record["grading"]["verify_timeout"] = 0.001
        record.update(correct=False, score=0.0, status="timeout")
    (out / "samples.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    results = json.loads((out / "results.json").read_text())
    results["config"]["verify_timeout"] = 0.001
    results["benchmarks"]["gsm8k"]["metrics"]["pass@1"] = 0.0
    (out / "results.json").write_text(json.dumps(results))
    logged: list[str] = []
    _evaluate(config, train_config, None, out, log=logged.append)  # type: ignore[arg-type]
    assert logged == [f"re-grade {out} (verify_timeout 0.001, the comparison's {DEFAULT_TIMEOUT_SECONDS!r})"]
    results = json.loads((out / "results.json").read_text())
    assert results["config"]["verify_timeout"] == 5.0
    assert results["benchmarks"]["gsm8k"]["metrics"]["pass@1"] == 1.0
    before = (out / "results.json").stat().st_mtime_ns
    _evaluate(config, train_config, None, out, log=logged.append)  # type: ignore[arg-type]
    assert (out / "results.json").stat().st_mtime_ns == before and len(logged) == 1  # the same now: left alone
    del results["config"]["verify_timeout"]  # a results.json that records none: the default's, left alone
    (out / "results.json").write_text(json.dumps(results))
    before = (out / "results.json").stat().st_mtime_ns
    _evaluate(config, train_config, None, out, log=logged.append)  # type: ignore[arg-type]
    assert (out / "results.json").stat().st_mtime_ns == before and len(logged) == 1


def test_a_last_line_torn_inside_a_character_leaves_a_finished_evaluation_readable(tmp_path, capsys):
    """A finished evaluation (its results.json) whose samples.jsonl an `ict eval` rerun (another
    seed) is appending to, or was killed while appending to, ends in a line cut inside a UTF-8
    character ("−" is 3 bytes): the report refused the whole comparison ('not UTF-8 text ...;
    re-encode the file as UTF-8'); ict eval leaves that line out, and so does the report now. A
    line that is not UTF-8 before the last is still the one-line refusal."""
    from ict.cli import main

    output = tmp_path / "cmp"
    steps = {"config_yaml": "num_steps: 1\n", "metrics_jsonl": '{"step": 1}\n'}
    for label in ("grpo", "ict"):
        _run(output, label, 0, SETTINGS, {0: {0: [True, False]}, 1: {0: [False, False]}}, **steps)
    samples = output / "runs" / "ict" / "seed0" / "eval" / "samples.jsonl"
    torn = json.dumps({"benchmark": "b", "index": 0, "sample": 0, "seed": 1, "greedy": False,
                       "completion": "x − 1", "correct": True}, ensure_ascii=False).encode()
    whole = samples.read_bytes()
    samples.write_bytes(whole + torn[:torn.index("−".encode()) + 1])
    arguments = ["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "10"]
    assert main(arguments) == 0
    table = json.loads((output / "summary.json").read_text())["table"]
    assert {(row["method"], row["mean"]) for row in table if row["metric"] == "pass@1"} == {
        ("grpo", 0.25), ("ict", 0.25)}
    samples.write_bytes(whole + b"\xff\n" + whole)
    assert main(arguments) == 2
    bad_line = whole.count(b"\n") + 1
    assert f"{samples}:{bad_line}: not UTF-8 text" in capsys.readouterr().err


class _AnswersIndex:
    """A generator whose every completion of "q <i>?" answers i (all correct)."""

    name = "scripted"

    def generate(self, prompts, num_samples, greedy, seed):
        drawn = [[f"\\boxed{{{prompt.split('q ')[1].split('?')[0]}}}"] * num_samples for prompt in prompts]
        return drawn, [[1] * num_samples for _ in prompts], [[True] * num_samples for _ in prompts]


class _Killed:
    name = "killed"

    def generate(self, *arguments):
        raise KeyboardInterrupt


@pytest.mark.parametrize("change", ["limit", "regrade"])
def test_a_rerun_killed_after_rewriting_samples_leaves_no_old_results_json(tmp_path: Path, change: str):
    """--limit 3 with two problems a call (chunks 0-1, 2), then --limit 4 (chunks 0-1, 2-3): problem
    2's unit is deleted to be drawn again in chunk 2-3; killed before that, the old results.json
    (3 problems) stayed beside samples of 2, and `complete_verdicts` (ict compare) read problems
    0 and 1 as the finished evaluation. Likewise --regrade (after --limit 2: nothing is drawn
    again) rewrites the verdicts before generating problems 2 and 3. Now results.json goes first:
    the evaluation reads as unfinished (None) until a rerun ends it."""
    from ict.analysis.comparison_runs import complete_verdicts
    from ict.evaluation.evaluate import EvalConfig, evaluate

    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text("".join(json.dumps({"question": f"q {i}?", "answer": f"#### {i}"}) + "\n"
                                              for i in range(4)))
    out = tmp_path / "out"
    config = dict(model="scripted", benchmarks="gsm8k", data_dir=str(data), output_dir=str(out), num_samples=2,
                  ks=(1,), device="cpu", batch_size=4)
    first = 3 if change == "limit" else 2
    evaluate(EvalConfig(**config, limit=first), _AnswersIndex(), progress=False, print_table=False)
    assert sorted(complete_verdicts(out)["gsm8k"]) == list(range(first))
    with pytest.raises(KeyboardInterrupt):
        evaluate(EvalConfig(**config, limit=4, regrade=change == "regrade"), _Killed(), progress=False,
                 print_table=False)
    assert not (out / "results.json").exists() and complete_verdicts(out) is None
    evaluate(EvalConfig(**config, limit=4), _AnswersIndex(), progress=False, print_table=False)
    assert {index: list(verdicts) for index, verdicts in complete_verdicts(out)["gsm8k"].items()} == {
        index: [True, True] for index in range(4)}


def test_compare_counts_a_repeated_sample_record_once_and_refuses_two_draws_of_one(tmp_path: Path):
    """One problem, n 4, samples wrong, wrong, right, right: pass@1 = 2/4, pass@2 = 1 - C(2,2)/C(4,2)
    = 5/6 (results.json's figures). Sample 1's record appended twice was read as a fifth sample
    (pass@1 2/5, pass@2 1 - C(3,2)/C(5,2) = 0.7); now once. Two different records of sample 3: a
    one-line UsageError naming the file and line."""
    from ict.analysis.comparison_runs import read_verdicts, verdict_scores
    from ict.core.errors import UsageError

    def line(sample: int, correct: bool, completion: str = "c") -> str:
        return json.dumps({"benchmark": "gsm8k", "index": 0, "sample": sample, "seed": 0, "greedy": False,
                           "completion": completion, "correct": correct}) + "\n"

    lines = [line(sample, sample >= 2) for sample in range(4)]
    samples = tmp_path / "samples.jsonl"
    for edited in (lines, lines[:2] + lines[1:], lines + lines):
        samples.write_text("".join(edited))
        per_problem = read_verdicts(samples)["gsm8k"]
        assert [verdict_scores(per_problem, k)[1][0] for k in (1, 2)] == pytest.approx([0.5, 5 / 6], abs=1e-12)
    samples.write_text("".join(lines) + line(3, False, "other"))
    with pytest.raises(UsageError, match=r"samples.jsonl:5: a second, different record of gsm8k #0 sample 3"):
        read_verdicts(samples)


def test_compare_leaves_out_a_record_whose_seed_is_no_integer_as_ict_eval_does(tmp_path: Path):
    """Problem 0 of an `ict eval --seeds 0,1`: seed 0 samples right, wrong; seed 1 sample wrong.
    Three more records whose 'seed' is true, false and "1" are no seed's (`ict eval` leaves them
    out: true is no seed 1). The report counted true as seed 1 (two verdicts for its one sample,
    pass@1 of seed 1 read 1/2 instead of 0) and false as a third seed; now by seed {0: [right,
    wrong], 1: [wrong]}, the records `load_sample_records` keeps, with or without the seeds."""
    from ict.analysis.comparison_runs import read_verdicts
    from ict.evaluation.records import load_sample_records

    def line(sample: int, seed: object, correct: bool) -> str:
        return json.dumps({"benchmark": "gsm8k", "index": 0, "sample": sample, "seed": seed, "greedy": False,
                           "completion": f"c{sample}", "correct": correct, "status": "ok",
                           "extracted": None}) + "\n"

    samples = tmp_path / "samples.jsonl"
    samples.write_text(line(0, 0, True) + line(1, 0, False) + line(0, 1, False) + line(1, True, True)
                       + line(2, False, True) + line(3, "1", True))
    for units in ((None, None, None), (None, {0, 1}, None)):
        verdicts = read_verdicts(samples, units)["gsm8k"][0]
        assert list(verdicts) == [True, False, False]
        assert verdicts.by_seed == {0: [True, False], 1: [False]}
    assert {key: [record["correct"] for record in unit] for key, unit in load_sample_records(samples).items()} == {
        "gsm8k#0#seed=0": [True, False], "gsm8k#0#seed=1": [False]}


def test_compare_names_the_rerun_that_settles_two_records_of_one_sample(tmp_path: Path):
    """Sample 0 of one problem (n 2) graded right, and a copy of it graded under older rules
    (wrong, no answer; its grading fields only differ: one completion graded twice, which `ict
    eval` now grades again). The report's one line said the rerun would "draw that problem
    again"; it says it grades it again, and still says "draw" for a record of another draw (its
    completion differs). A record written before the 'seed' field and its copy with the seed `ict
    eval` gives it on a rewrite (seed 0) are one record, as ict eval reads them: counted once; so is
    a record whose 'seed' is null of that seed."""
    from ict.analysis.comparison_runs import read_verdicts
    from ict.core.errors import UsageError

    record = {"benchmark": "gsm8k", "index": 0, "sample": 0, "seed": 0, "greedy": False, "completion": "c",
              "gold": "3", "extracted": "3", "correct": True, "score": 1.0, "status": "ok",
              "grading": {"math_extraction": "lenient", "grading_rules": 2}}
    older = {**record, "gold": "5", "extracted": None, "correct": False, "score": 0.0, "status": "no_answer",
             "grading": {"math_extraction": "lenient", "grading_rules": 1}}
    other = {**record, "sample": 1, "correct": False}
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps(r) + "\n" for r in (record, other, older)))
    with pytest.raises(UsageError) as error:
        read_verdicts(samples)
    assert str(error.value) == (f"{samples}:3: a second, different grading of gsm8k #0 sample 0 (seed 0); rerun "
                                f"ict eval in {tmp_path} to grade it again")
    samples.write_text("".join(json.dumps(r) + "\n" for r in (record, other, {**older, "completion": "d"})))
    with pytest.raises(UsageError) as error:
        read_verdicts(samples)
    assert str(error.value) == (f"{samples}:3: a second, different record of gsm8k #0 sample 0 (seed 0); rerun "
                                f"ict eval in {tmp_path} to draw that problem again")
    unseeded = {key: value for key, value in record.items() if key != "seed"}
    samples.write_text("".join(json.dumps(r) + "\n" for r in (unseeded, {**other, "seed": None}, record)))
    assert read_verdicts(samples)["gsm8k"][0].by_seed == {0: [True, False]}

"""The report of `ict compare` (`ict.analysis.compare`) on comparison directories built by hand:
baselines and ablations, runs in progress, the paper figures and top tokens, learning curves, the
environment and commands, and summary.json. The pairing by seed and problem and the paired
difference: tests/test_compare_pairing.py."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
from compare_helpers import finished_run, write_eval

from ict.analysis.compare import RunRecord
from ict.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def test_a_baseline_with_options_is_still_a_baseline(tmp_path):
    """`random:ratio=0.1` runs under the label `random-ratio=0.1`: every method is compared to it
    (as to `grpo`), with the difference of the per-problem pass@1 means."""
    from ict.analysis.compare import RunRecord, summarize

    verdicts = {"grpo": [True, True, False, False], "random-ratio=0.1": [True, False, False, False],
                "ict-ratio=0.1": [True, True, True, False]}
    runs = [RunRecord(label, seed, tmp_path, [], {"b": {i: [v] * 4 for i, v in enumerate(values)}})
            for label, values in verdicts.items() for seed in (0, 1)]
    rows = summarize(runs, resamples=200)["differences"]
    pairs = {(row["method"], row["baseline"]): row["difference"] for row in rows if row["metric"] == "pass@1"}
    assert pairs[("ict-ratio=0.1", "random-ratio=0.1")] == pytest.approx(0.75 - 0.25)
    assert pairs[("ict-ratio=0.1", "grpo")] == pytest.approx(0.75 - 0.5)
    assert pairs[("grpo", "random-ratio=0.1")] == pytest.approx(0.5 - 0.25)
    assert ("random-ratio=0.1", "random-ratio=0.1") not in pairs


def test_an_ablation_compares_with_a_run_label_named_as_baseline(tmp_path):
    """`--baselines ict-reference=group_mean-ratio=0.1`: each ablation run against the default
    run (and no grpo or random runs needed); the report names the baselines."""
    from ict.analysis.compare import RunRecord, summarize

    verdicts = {"ict-reference=group_mean-ratio=0.1": [True, True, False, False],
                "ict-reference=group_mean-ratio=0.2": [True, False, False, False],
                "ict-reference=prev-ratio=0.1": [True, True, True, True]}
    runs = [RunRecord(label, 0, tmp_path, [], {"b": {i: [v] * 4 for i, v in enumerate(values)}})
            for label, values in verdicts.items()]
    assert summarize(runs, resamples=200)["differences"] == []  # the default baselines: none here
    rows = summarize(runs, resamples=200, baselines=["ict-reference=group_mean-ratio=0.1"])["differences"]
    pairs = {(row["method"], row["baseline"]): row["difference"] for row in rows if row["metric"] == "pass@1"}
    assert pairs == {
        ("ict-reference=group_mean-ratio=0.2", "ict-reference=group_mean-ratio=0.1"): pytest.approx(0.25 - 0.5),
        ("ict-reference=prev-ratio=0.1", "ict-reference=group_mean-ratio=0.1"): pytest.approx(1.0 - 0.5),
    }
    # "ict" as a method name makes every ict run a baseline of the others.
    rows = summarize(runs, resamples=200, baselines=["ict"])["differences"]
    assert len([row for row in rows if row["metric"] == "pass@1"]) == 6



def test_a_plugin_method_whose_name_holds_a_hyphen_is_its_own_method(tmp_path):
    """A plugin selector's name may hold ``-`` (the registry takes letters, digits, _ and -); the
    method of a run label was its text up to the first ``-``: a plugin ``random-topk`` was a
    default baseline (the method ``random``), compared with as one, and ``--baselines my-sel``
    with ``--methods grpo,my-sel:ratio=0.2`` was refused (its run ``my-sel-ratio=0.2`` read as a
    method ``my``). The method is the label up to its first ``-key=value``."""
    from ict.analysis.compare import RunRecord, is_baseline, method_of, summarize
    from ict.experiments.compare import CompareConfig
    from ict.experiments.methods import parse_methods

    labels = [spec.label for spec in parse_methods("grpo,random-topk,my-sel:ratio=0.2,random:ratio=0.1,"
                                                   "ict:reference=group_mean,x=a-b")]
    assert labels == ["grpo", "random-topk", "my-sel-ratio=0.2", "random-ratio=0.1", "ict-reference=group_mean-x=a-b"]
    assert [method_of(label) for label in labels] == ["grpo", "random-topk", "my-sel", "random", "ict"]
    assert [is_baseline(label, ("grpo", "random")) for label in labels] == [True, False, False, True, False]
    verdicts = {"grpo": [True, False, False, False], "random-topk": [True, True, False, False]}
    runs = [RunRecord(label, 0, tmp_path, [], {"b": {i: [v] * 4 for i, v in enumerate(values)}})
            for label, values in verdicts.items()]
    rows = summarize(runs, resamples=20)["differences"]
    assert {(row["method"], row["baseline"]) for row in rows} == {("random-topk", "grpo")}  # not grpo vs it too
    config = CompareConfig(methods="grpo,my-sel:ratio=0.2", baselines=("my-sel",), output_dir=tmp_path / "cmp",
                           report_only=True)
    assert config.validate().baselines == ("my-sel",)  # was "--baselines 'my-sel' is none of the runs"

def test_runs_logged_before_the_anatomy_report_a_dash(tmp_path):
    """Metrics without the anatomy keys (runs older than it): NaN in training_end.csv, a dash in
    the report's anatomy table, no anatomy panel in the curves (and no crash)."""
    from ict.analysis.compare import write_report
    from ict.analysis.plots import panels_with_data, read_metrics

    run = tmp_path / "cmp" / "runs" / "grpo" / "seed0"
    run.mkdir(parents=True)
    lines = [{"step": step, "reward_mean": 0.25 * step, "entropy": 1.0, "response_length_mean": 8.0}
             for step in (1, 2)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = write_report(tmp_path / "cmp", ("grpo", "random"), 10).read_text()
    rows = [line for line in report.splitlines() if line.startswith("| grpo | 1 |")]
    assert rows[0].split(" | ")[2] == "0.38"  # reward: (0.25 + 0.5) / 2
    assert rows[1] == "| grpo | 1 | - | - | - | - |"
    row = next(csv.DictReader(open(tmp_path / "cmp" / "training_end.csv")))
    assert math.isnan(float(row["selected_partial_group_fraction"]))
    titles = [panel[0] for panel in panels_with_data({"grpo": [read_metrics(run)]})]
    assert titles == ["Reward", "Shannon entropy", "Response length"]
    assert (tmp_path / "cmp" / "curves.png").stat().st_size > 5_000



def test_the_report_says_what_the_held_out_accuracy_panel_drew(tmp_path):
    """The training curves' held-out accuracy panel (ict train's eval_every evaluation, at each
    run's eval_temperature: greedy by default) sat beside the final-model evaluation (at
    --eval-temperature, on the benchmarks) with nothing to tell them apart, and runs whose
    evaluations during training drew otherwise (a rerun that changed eval_temperature) shared one
    panel without a word. The report now says what the panel is and how each run drew it."""
    from compare_helpers import finished_run

    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    for label, temperature in (("grpo", 0.0), ("ict", 0.0)):
        run = finished_run(output, label, {0: [True, False]})
        (run / "config.yaml").write_text(f"method: {label}\nnum_steps: 2\neval_temperature: {temperature}\n")
        (run / "metrics.jsonl").write_text("".join(json.dumps({"step": step, "reward_mean": 0.5, "eval_accuracy": 0.25})
                                                   + "\n" for step in (1, 2)))
    panel = ("The held-out accuracy panel is each run's `eval_every` evaluation during training (one completion "
             "of each of its held-out training problems), not the final-model evaluation above; ")
    report = write_report(output, ("grpo",), 10).read_text()
    assert panel + "drawn greedy." in report.splitlines()
    (output / "runs" / "ict" / "seed0" / "config.yaml").write_text("method: ict\nnum_steps: 2\neval_temperature: 0.7\n")
    report = write_report(output, ("grpo",), 10).read_text()
    assert (panel + "drawn otherwise by run, so its lines are not comparable: grpo/seed0 greedy, ict/seed0 at "
            "temperature 0.7.") in report.splitlines()
    for run in (output / "runs").glob("*/seed0"):  # no run logged one: no word of it
        (run / "metrics.jsonl").write_text(json.dumps({"step": 2, "reward_mean": 0.5}) + "\n")
    assert "held-out accuracy panel" not in write_report(output, ("grpo",), 10).read_text()

def test_a_run_still_training_is_listed_not_averaged(tmp_path):
    """A run that logged 2 of its 30 planned steps (another process's, or one stopped) is named as
    in progress and kept out of the end-of-training table, the CSVs and the curves; with no
    finished run the report is refused in one line."""
    from ict.analysis.compare import write_report
    from ict.core.errors import UsageError

    def make_run(label: str, planned: int, rewards: list[float]) -> None:
        run = tmp_path / "cmp" / "runs" / label / "seed0"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(f"method: {label}\nnum_steps: {planned}\n")
        lines = [{"step": step, "reward_mean": reward, "entropy": 1.0, "response_length_mean": 8.0}
                 for step, reward in enumerate(rewards, start=1)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))

    make_run("stapo", 30, [0.5, 0.7])
    with pytest.raises(UsageError, match=r"no run .* has finished training yet \(in progress: stapo/seed0 "
                                         r"\(2 of 30 steps\)\)"):
        write_report(tmp_path / "cmp", ("grpo", "random"), 10)
    make_run("grpo", 2, [0.25, 0.5])
    report = write_report(tmp_path / "cmp", ("grpo", "random"), 10).read_text()
    assert "In progress, left out of every table and figure: stapo/seed0 (2 of 30 steps)." in report
    assert "Runs: 1 (grpo/seed0)" in report
    rows = [line for line in report.splitlines() if line.startswith("| ")]
    assert not any(line.startswith("| stapo") for line in rows)
    assert [row["method"] for row in csv.DictReader(open(tmp_path / "cmp" / "training_end.csv"))] == ["grpo"]
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["in_progress"] == ["stapo/seed0 (2 of 30 steps)"]


def test_an_unfinished_evaluation_is_in_progress_and_a_torn_metrics_line_is_read_as_plot_does(tmp_path):
    """A final evaluation with samples but no results.json (interrupted at 3 of 4 problems) was
    reported as the run's result; a metrics.jsonl whose last line a kill tore stopped the report
    with a bare JSON error; a samples line without its fields was a KeyError (exit 1)."""
    from ict.analysis.compare import write_report
    from ict.core.errors import UsageError

    def make_run(label: str, problems: int, finished: bool) -> Path:
        run = tmp_path / "cmp" / "runs" / label / "seed0"
        (run / "eval").mkdir(parents=True)
        (run / "config.yaml").write_text(f"method: {label}\nnum_steps: 1\n")
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.5}) + '\n{"step": 2, "rew')
        (run / "eval" / "samples.jsonl").write_text("".join(
            json.dumps({"benchmark": "b", "index": i, "correct": i % 2 == 0}) + "\n" for i in range(problems)))
        if finished:
            (run / "eval" / "results.json").write_text("{}")
        return run

    make_run("grpo", 4, finished=True)
    ict = make_run("ict", 3, finished=False)
    report = write_report(tmp_path / "cmp", ("grpo",), 10).read_text()
    assert "In progress, left out of every table and figure: ict/seed0 (final evaluation not finished)." in report
    assert [line for line in report.splitlines() if line.startswith("| b | pass@1 |")] == [
        "| b | pass@1 | grpo | 1 | 4 | 50.0 | - |"]
    (ict / "eval" / "results.json").write_text("{}")
    (ict / "eval" / "samples.jsonl").write_text('{"index": 0, "correct": true}\n')
    with pytest.raises(UsageError, match=r"ict/seed0/eval/samples.jsonl:1: not an evaluation sample"):
        write_report(tmp_path / "cmp", ("grpo",), 10)


def test_the_paper_figures_and_top_tokens_in_the_report(tmp_path):
    """Hand-written metrics lines with the paper's figures and the top-token lists: the report's
    figures table holds each seed's mean over its steps (finite values only: a null ratio, an
    infinite one in the trainer, is left out), then the mean over seeds; the top tokens are the
    per-step lists summed over steps and seeds; the curves gain the figures' panels."""
    from ict.analysis.compare import write_report
    from ict.analysis.plots import panels_with_data, read_metrics

    def make_run(seed: int, lines: list[dict]) -> Path:
        run = tmp_path / "cmp" / "runs" / "ict" / f"seed{seed}"
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text("".join(json.dumps({"step": step, "reward_mean": 0.5, **line}) + "\n"
                                                   for step, line in enumerate(lines, start=1)))
        return run

    base = {"above_beta_fraction": 0.5, "above_beta_fraction_selected": 0.25, "sample_completion": "text"}
    run0 = make_run(0, [
        {**base, "selected_token_prob_mean": 0.2, "all_token_prob_mean": 0.6, "selected_token_prob_std": 0.1,
         "all_token_prob_std": 0.3, "selected_high_low_entropy_ratio": 1.0, "score_knee_fraction": 0.1,
         "score_knee_share": 0.5, "top_selected_tokens": [["7", 3], [" the", 1]],
         "top_unselected_tokens": [["|", 4]]},
        {**base, "selected_token_prob_mean": 0.4, "all_token_prob_mean": 0.6, "selected_token_prob_std": 0.3,
         "all_token_prob_std": 0.3, "selected_high_low_entropy_ratio": None, "score_knee_fraction": 0.3,
         "score_knee_share": 1.0, "top_selected_tokens": [[" the", 5]], "top_unselected_tokens": []},
    ])
    make_run(1, [{**base, "selected_token_prob_mean": 0.1, "all_token_prob_mean": 0.5,
                  "selected_token_prob_std": 0.06, "all_token_prob_std": 0.2,
                  "selected_high_low_entropy_ratio": 0.5, "score_knee_fraction": 0.2, "score_knee_share": 0.25,
                  "top_selected_tokens": [["7", 1]], "top_unselected_tokens": [["|", 1], ["x", 1]]}])
    report = write_report(tmp_path / "cmp", ("grpo", "random"), 10).read_text()
    header = next(line for line in report.splitlines() if line.startswith("| method | seeds | p(a*) mean"))
    assert header.split(" | ")[2:] == ["p(a*) mean (probability)", "p(a*) std (probability)",
                                       "high:low entropy (ratio of counts, median split)",
                                       "p(a*) > beta (fraction of tokens)", "score knee (rank / L of the sorted score)",
                                       "responses with a knee (fraction of responses) |"]
    assert "| paper (arXiv 2606.19771) | - | 0.18 | 0.09 | 1.03 (GSM8K), 0.99 (MATH) | - | ~0.10 | - |" in report
    row = [line for line in report.splitlines() if line.startswith("| ict | 2 |")][2]
    # seed 0: means over its 2 steps, seed 1: its one step; then the mean of the two seeds
    p_mean = ((0.2 + 0.4) / 2 + 0.1) / 2          # 0.2
    p_all = (0.6 + 0.5) / 2                       # 0.55
    std = ((0.1 + 0.3) / 2 + 0.06) / 2            # 0.13
    std_all = (0.3 + 0.2) / 2                     # 0.25
    ratio = (1.0 + 0.5) / 2                       # seed 0 has one finite ratio (1.0)
    knee = ((0.1 + 0.3) / 2 + 0.2) / 2            # 0.2
    share = ((0.5 + 1.0) / 2 + 0.25) / 2          # 0.5
    assert row == (f"| ict | 2 | {p_mean:.2f} ({p_all:.2f}) | {std:.2f} ({std_all:.2f}) | {ratio:.2f} | "
                   f"0.25 (0.50) | {knee:.2f} | {share:.2f} |")
    # top tokens: " the" 1 + 5, "7" 3 + 1; unselected "|" 4 + 1, "x" 1 (the pipe escaped for markdown)
    assert "| ict | `' the'` x6, `'7'` x4 | `'\\|'` x5, `'x'` x1 |" in report
    row = next(csv.DictReader(open(tmp_path / "cmp" / "training_end.csv")))
    assert float(row["selected_token_prob_mean"]) == pytest.approx(0.3)
    assert float(row["selected_high_low_entropy_ratio"]) == pytest.approx(1.0)
    summary = json.loads((tmp_path / "cmp" / "summary.json").read_text())
    assert summary["top_tokens"]["ict"]["selected"] == [[" the", 6], ["7", 4]]
    titles = [panel[0] for panel in panels_with_data({"ict": [read_metrics(run0)]})]
    assert titles == ["Reward", "Regime: p(token) > beta", "Paper: p(a*) mean", "Paper: p(a*) std",
                      "Paper: high:low entropy", "Paper: score knee", "Paper: responses with a knee"]
    assert (tmp_path / "cmp" / "curves.png").stat().st_size > 5_000


def test_an_interrupted_base_model_evaluation_is_no_step_0(tmp_path):
    """base-model/ with samples of 2 of 4 problems (all right) and no results.json, as a killed
    `--eval-steps 0` leaves it, was read as the untrained model's pass@1 of 100%, step 0 of every
    curve. Now it is left out (as an unfinished step evaluation is) and named as in progress."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    run = finished_run(output, "grpo", {i: [False] * 2 for i in range(4)})
    write_eval(run / "evals" / "step-00000001", {i: [i == 0] * 2 for i in range(4)})
    write_eval(output / "base-model", {0: [True] * 2, 1: [True] * 2}, finished=False)
    report = write_report(output, ("grpo",), 10).read_text()
    rows = list(csv.DictReader(open(output / "learning_curves.csv")))
    assert sorted((int(row["step"]), float(row["value"])) for row in rows) == [(1, 0.25), (2, 0.0)]
    assert "| b | pass@1 | grpo | 25.0 | 0.0 |" in report
    assert "base-model (evaluation not finished)" in report


def test_eval_steps_0_alone_gives_learning_curves(tmp_path):
    """`--eval-steps 0` (or 0 and the final step) evaluates the untrained model into base-model/
    and no evals/ directory: the report had no learning curves, the evaluation was ignored. Now
    step 0 is the base model's pass@1 and the final step the run's."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    finished_run(output, "grpo", {0: [True, True], 1: [True, False], 2: [False, False]})
    write_eval(output / "base-model", {0: [True, False], 1: [False, False], 2: [False, False]})
    report = write_report(output, ("grpo",), 10).read_text()
    rows = list(csv.DictReader(open(output / "learning_curves.csv")))
    assert sorted((int(row["step"]), row["metric"], float(row["value"])) for row in rows) == [
        (0, "pass@1", pytest.approx(0.5 / 3)), (2, "pass@1", pytest.approx(1.5 / 3))]
    assert "| b | pass@1 | grpo | 16.7 | 50.0 |" in report
    assert (output / "learning_curves.png").is_file()


def test_a_curve_step_evaluated_for_some_seeds_says_so(tmp_path):
    """grpo seed 0 scores 100% at steps 1 and 2, seed 1 0% at both, and seed 1's step-1
    evaluation has not finished: the table's 'mean over seeds' read 0.0, 100.0, 50.0, a rise and a
    fall that no seed made. Now the step-1 cell says it is 1 of the 2 seeds."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    for seed, score in ((0, True), (1, False)):
        run = finished_run(output, "grpo", {i: [score] * 2 for i in range(4)}, seed=seed)
        write_eval(run / "evals" / "step-00000001", {i: [score] * 2 for i in range(4)}, finished=seed == 0)
    write_eval(output / "base-model", {i: [False] * 2 for i in range(4)})
    report = write_report(output, ("grpo",), 10).read_text()
    assert "| b | pass@1 | grpo | 0.0 | 100.0 (1 of 2 seeds) | 50.0 |" in report


def test_a_torn_environment_line_is_skipped(tmp_path):
    """environment.jsonl gets a line on every resume: a kill that tore the last one stopped the
    report with `error: Unterminated string ...` (naming no file) after the CSVs were written. Now
    a line that is not an environment record is skipped; a file with none is said so."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    record = json.dumps({"python": "3.11", "cpu_count": 2, "packages": {"torch": "2.9"}, "gpu": None})
    grpo = finished_run(output, "grpo", {0: [True, False]})
    (grpo / "environment.jsonl").write_text(record + "\n" + record[:30])
    ict = finished_run(output, "ict", {0: [True, True]})
    (ict / "environment.jsonl").write_text('[1, 2]\n{"packages": "torch"}\n')
    finished_run(output, "random", {0: [False, False]})
    report = write_report(output, ("grpo",), 10).read_text()
    assert "- 1 run(s) trained with torch 2.9; 2 CPUs\n" in report
    assert "- 1 run(s) trained with no readable line in its environment.jsonl\n" in report
    assert "- 1 run(s) trained before environment.jsonl was recorded\n" in report


def test_the_reproduce_command_quotes_the_directory_and_keeps_the_resamples(tmp_path, capsys):
    """The report's last command dropped --bootstrap-resamples (it rebuilt other intervals) and
    wrote the directory unquoted ("my cmp" became two arguments). Run as written, it now rebuilds
    the same summary.json."""
    import shlex

    from ict.analysis.compare import write_report
    from ict.answers.grading import GRADING_RULES_VERSION

    output = tmp_path / "my cmp"
    finished_run(output, "grpo", {i: [i % 2 == 0, False] for i in range(6)})
    finished_run(output, "ict", {i: [i % 3 == 0, True] for i in range(6)})
    report = write_report(output, ("grpo",), 200, GRADING_RULES_VERSION).read_text()  # as ict compare
    command = report.split("## Reproduce")[1].split("```")[1].strip().splitlines()[-1]
    assert shlex.split(command) == ["ict", "compare", "--report-only", "--output-dir", str(output),
                                    "--baselines", "grpo", "--bootstrap-resamples", "200"]
    summary = (output / "summary.json").read_text()
    write_report(output, ("grpo", "random"), 10_000)  # the defaults: no option for them
    assert (output / "report.md").read_text().split("```")[-2].strip().splitlines()[-1] == \
        f"ict compare --report-only --output-dir {shlex.quote(str(output))}"
    assert main(shlex.split(command)[1:]) == 0
    assert (output / "summary.json").read_text() == summary


def test_summary_json_is_strict_json(tmp_path):
    """summary.json held bare NaN (the std over one seed, metrics a run never logged), which
    strict JSON readers refuse; now they are null."""
    from ict.analysis.compare import write_report

    def refuse(constant: str) -> None:
        raise AssertionError(f"summary.json holds {constant}")

    output = tmp_path / "cmp"
    finished_run(output, "grpo", {0: [True, False], 1: [True, True]})
    finished_run(output, "ict", {0: [True, True], 1: [False, False]})
    write_report(output, ("grpo",), 100)
    summary = json.loads((output / "summary.json").read_text(), parse_constant=refuse)
    assert {(row["method"], row["mean"], row["std"]) for row in summary["table"] if row["metric"] == "pass@1"} \
        == {("grpo", 0.75, None), ("ict", 0.5, None)}
    (end,) = [row for row in summary["training_end"] if row["method"] == "grpo"]
    assert (end["reward_mean"], end["entropy"]) == (0.5, None)


def test_a_sample_whose_verdict_is_no_boolean_or_a_file_not_utf8_is_a_one_line_error(tmp_path, capsys):
    """A samples.jsonl line with ``"correct": "false"`` was read by truthiness: a correct sample
    (ict at 100.0 and a difference of 0 to grpo, from wrong verdicts); a file that is not UTF-8
    gave 'error: 'utf-8' codec can't decode byte 0xff ...', naming no file of the many runs."""
    output = tmp_path / "cmp"
    finished_run(output, "grpo", {0: [True, True]})
    ict = finished_run(output, "ict", {0: [False, False]})
    samples = ict / "eval" / "samples.jsonl"
    samples.write_text('{"benchmark": "b", "index": 0, "correct": "false"}\n' * 2)
    arguments = ["compare", "--report-only", "--output-dir", str(output)]
    assert main(arguments) == 2
    assert f"{samples}:1: not an evaluation sample" in capsys.readouterr().err
    assert not (output / "report.md").exists()
    samples.write_bytes(b'{"benchmark": "b", "index": 0, "correct": false}\n\xff\n')
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert f"{samples}:2: not UTF-8 text" in error and len(error.strip().splitlines()) == 1
    samples.write_text('{"benchmark": "b", "index": 0, "correct": false}\n')
    config = ict / "config.yaml"
    config.write_bytes(b"method: ict\nnum_steps: 2\n# \xff\n")
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert f"{config}: not UTF-8 text" in error and len(error.strip().splitlines()) == 1


def test_the_end_of_training_means_its_last_steps_over_finite_values(tmp_path):
    """Mutation tests of training_end, _seed_mean and top_tokens: the last END_WINDOW (10) of 12
    steps (not the first 10), a NaN step left out of a run's mean, a seed with no finite value
    left out of the seeds' mean, and the top tokens of the last 10 steps only."""
    from ict.analysis.compare import _seed_mean, top_tokens, training_end

    lines = [{"step": step, "reward_mean": 0.0 if step <= 2 else 1.0, "entropy": math.nan if step == 12 else 0.5,
              "top_selected_tokens": [["early" if step <= 2 else "late", 1]]} for step in range(1, 13)]
    runs = [RunRecord("ict", 0, tmp_path, lines, {})]
    (row,) = training_end(runs)
    assert (row["reward_mean"], row["entropy"], row["steps"]) == (1.0, 0.5, 12)
    assert top_tokens(runs)["ict"]["selected"] == [["late", 10]]
    assert _seed_mean([{"x": math.nan}, {"x": 0.25}], "x") == 0.25


def test_greedy_samples_and_nan_pass_at_k_stay_out_of_the_curves(tmp_path):
    """Mutation tests: a greedy completion is no sample (problem 0: 2 wrong samples and a right
    greedy one is pass@1 0, not 1/3); a k above n gives no learning-curve row (not a NaN one);
    the score matrix's rows are in seed order (seed 2 before seed 10); the last logged step,
    not the number of metrics lines, tells a run in progress."""
    from ict.analysis.compare import learning_curves, read_verdicts, score_matrix

    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"benchmark": "b", "index": 0, "correct": correct, "greedy": greedy}) + "\n"
                               for correct, greedy in ((False, False), (False, False), (True, True))))
    assert read_verdicts(samples) == {"b": {0: [False, False]}}
    output = tmp_path / "cmp"
    run = finished_run(output, "grpo", {0: [True, False]})
    write_eval(output / "base-model", {0: [False, False]})
    record = RunRecord("grpo", 0, run, [], {"b": {0: [True, False]}}, planned_steps=2, ks=(1, 4))
    assert [(row["step"], row["metric"]) for row in learning_curves(output, [record])] == [(0, "pass@1"), (2, "pass@1")]
    runs = [RunRecord("grpo", seed, tmp_path, [], {"b": {0: [seed == 2]}}) for seed in (10, 2)]
    seeds, _, matrix = score_matrix(runs, "b", 1)
    assert seeds == [2, 10] and matrix.tolist() == [[1.0], [0.0]]
    resumed = RunRecord("grpo", 0, tmp_path, [{"step": 1}, {"step": 1}, {"step": 2}], {}, planned_steps=3)
    assert resumed.in_progress and resumed.progress == "2 of 3 steps"


def test_a_run_not_evaluated_adds_no_k(tmp_path):
    """ict seed 1 trained but not evaluated has no results.json, so its ks default to (1, 4); they
    were added to the evaluated runs' (1, 2), and every method got a 'pass@4: left out (fewer
    than 4 samples ...)' note for a k that no evaluation asked for."""
    from ict.analysis.compare import summarize

    runs = [RunRecord("grpo", 0, tmp_path, [], {"b": {0: [True, False], 1: [False, False]}}, ks=(1, 2)),
            RunRecord("ict", 0, tmp_path, [], {"b": {0: [True, True], 1: [False, True]}}, ks=(1, 2)),
            RunRecord("ict", 1, tmp_path, [], {})]
    summary = summarize(runs, resamples=20)
    assert sorted({row["metric"] for row in summary["table"]}) == ["pass@1", "pass@2"]
    assert summary["pairing"] == ["ict on b: the 1 seeds evaluated (no final evaluation of b: ict/seed1)"]


def test_a_method_with_no_final_evaluation_is_named_not_silently_left_out(tmp_path):
    """`ict compare --train-only`, then `--report-only` before `--eval-only`: ict (trained, not
    evaluated) was missing from the final-model table and the differences with no word, though
    the pairing notes name each method with a run that has no final evaluation. Now it is named
    as left out (once, whatever the benchmarks); grpo's 50% and the training rows are unchanged."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    finished_run(output, "grpo", {0: [True], 1: [False]})
    shutil.rmtree(finished_run(output, "ict", {0: [True], 1: [True]}) / "eval")
    report = write_report(output, ("grpo",), 10).read_text()
    assert "| b | pass@1 | grpo | 1 | 2 | 50.0 | - |" in report
    assert "| b | pass@1 | ict |" not in report
    note = "ict: left out of the evaluation tables (no final evaluation: ict/seed0)"
    assert f"- {note}" in report
    summary = json.loads((output / "summary.json").read_text())
    assert summary["pairing"] == [note]
    assert [row["method"] for row in summary["training_end"]] == ["grpo", "ict"]


def test_the_end_of_training_is_the_mean_of_exactly_its_last_ten_steps(tmp_path):
    """Mutation test of END_WINDOW's slice: reward = step over 12 steps, so the last 10 (3..12)
    average 7.5, the last 9 8.0 and the last 11 7.0."""
    from ict.analysis.compare import training_end

    lines = [{"step": step, "reward_mean": float(step)} for step in range(1, 13)]
    (row,) = training_end([RunRecord("ict", 0, tmp_path, lines, {})])
    assert row["reward_mean"] == pytest.approx(7.5)


def test_the_report_names_entropy_warnings_absent_baselines_and_the_finished_share_in_percent(tmp_path):
    """Mutation tests of write_report: a run's entropy_warning is listed at its step (dropping it
    would print 'No run collapsed or exploded.'), a default baseline with no runs is named, and
    finished_fraction (0.5 and 1.0: 0.75) is a percentage, 75%, not 1%."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    finished_run(output, "grpo", {0: [True], 1: [False]})
    run = finished_run(output, "ict", {0: [True], 1: [True]})
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in (
        {"step": 1, "reward_mean": 0.5, "finished_fraction": 0.5},
        {"step": 2, "reward_mean": 0.5, "finished_fraction": 1.0, "entropy_warning": "entropy collapse"})))
    report = write_report(output, ("grpo", "random"), 10).read_text()
    assert "- ict seed 0: entropy collapse at step 2" in report and "No run collapsed" not in report
    assert "Baselines: grpo, random (no runs of random)." in report
    assert "| ict | 1 | 0.50 | - | - | - | - | 75% |" in report


def test_only_the_benchmarks_of_the_finished_evaluation_are_read_and_a_boolean_index_is_refused(tmp_path):
    """Mutation tests of read_verdicts / evaluated_units: samples.jsonl keeps the records of other
    benchmarks an earlier `ict eval` wrote there (a rerun keeps them), but results.json says this
    evaluation was of b alone: c is not in the report. An 'index' of true (read as problem 1) is
    no evaluation sample: a one-line UsageError naming the line."""
    from ict.analysis.compare import complete_verdicts, read_verdicts
    from ict.core.errors import UsageError

    directory = tmp_path / "eval"
    directory.mkdir()
    records = [{"benchmark": "b", "index": 0, "correct": True}, {"benchmark": "c", "index": 0, "correct": False}]
    (directory / "samples.jsonl").write_text("".join(json.dumps(record) + "\n" for record in records))
    (directory / "results.json").write_text(json.dumps({"config": {"ks": [1]}, "benchmarks": {"b": {}}}))
    assert complete_verdicts(directory) == {"b": {0: [True]}}
    (directory / "samples.jsonl").write_text(json.dumps({"benchmark": "b", "index": True, "correct": True}) + "\n")
    with pytest.raises(UsageError, match=r"samples.jsonl:1: not an evaluation sample"):
        read_verdicts(directory / "samples.jsonl")


@pytest.mark.parametrize("torn", ["results.csv", "summary.json", "report.md"])
def test_a_report_cut_short_mid_write_leaves_the_previous_files_whole(torn, tmp_path, monkeypatch):
    """The report's files were written in place: a kill or a full disk in the middle of one left
    it torn (a CSV of a header and some rows, JSON cut mid-object) beside a report that looked
    finished. Each is now replaced atomically, so the previous report's file stays whole."""
    import ict.analysis.compare as module

    output = tmp_path / "cmp"
    for label, verdicts in (("grpo", {0: [True, False]}), ("random", {0: [False, False]})):
        finished_run(output, label, verdicts)
    module.write_report(output, ("grpo", "random"), 10)
    before = (output / torn).read_bytes()
    real_open = open

    def cut_short(path, mode="r", *args, **kwargs):  # the write of `torn` stops after 20 bytes
        handle = real_open(path, mode, *args, **kwargs)
        if "w" in mode and Path(path).name.lstrip(".").startswith(torn):
            write = handle.write

            def write_then_fail(text):
                write(text[:20])
                raise OSError(28, "No space left on device")
            handle.write = write_then_fail
        return handle

    monkeypatch.setattr("builtins.open", cut_short)
    monkeypatch.setattr(Path, "write_text", lambda self, text, *a, **k: cut_short(self, "w").write(text))
    with pytest.raises(OSError, match="No space left"):
        module.write_report(output, ("grpo", "random"), 10)
    monkeypatch.undo()
    assert (output / torn).read_bytes() == before


def test_the_learning_curve_table_orders_k_as_a_number():
    """pass@10 sorted as text came between pass@1 and pass@2 (the final-evaluation table orders k as
    a number, per benchmark); a row's cells stay its own (pass@k = k / 20 here)."""
    from ict.analysis.compare import _learning_curve_lines

    rows = [{"method": method, "seed": 0, "step": step, "benchmark": benchmark, "metric": f"pass@{k}",
             "problems": 3, "value": k / 20} for step in (0, 10) for k in (10, 1, 2)
            for benchmark in ("math500", "gsm8k") for method in ("ict", "grpo")]
    table = [line for line in _learning_curve_lines(rows, None) if line.startswith(("| gsm8k", "| math500"))]
    assert table == [f"| {benchmark} | pass@{k} | {method} | {cell} | {cell} |"
                     for benchmark in ("gsm8k", "math500") for k, cell in ((1, "5.0"), (2, "10.0"), (10, "50.0"))
                     for method in ("grpo", "ict")]


def test_the_held_out_accuracy_panel_names_a_run_resumed_with_another_eval_temperature(tmp_path):
    """A run whose evaluations during training sampled greedily, then (a resume) at 0.7: the
    report read config.yaml's last eval_temperature (0.7) and said the panel was drawn at
    temperature 0.7 throughout. It reads each point's eval_temperature (metrics.jsonl) and names
    the run as mixed; a run whose points all record 0.7 is drawn at 0.7, whatever config.yaml says."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    for label in ("grpo", "ict"):
        run = finished_run(output, label, {0: [True, False]})
        (run / "config.yaml").write_text(f"method: {label}\nnum_steps: 2\neval_temperature: 0.7\n")
        temperatures = (0.0, 0.7) if label == "ict" else (0.7, 0.7)
        (run / "metrics.jsonl").write_text("".join(
            json.dumps({"step": step, "reward_mean": 0.5, "eval_accuracy": 0.25, "eval_temperature": temperature})
            + "\n" for step, temperature in zip((1, 2), temperatures, strict=True)))
    panel = ("The held-out accuracy panel is each run's `eval_every` evaluation during training (one completion "
             "of each of its held-out training problems), not the final-model evaluation above; ")
    report = write_report(output, ("grpo",), 10).read_text()
    assert (panel + "drawn otherwise by step, so its lines are not comparable: grpo/seed0 at temperature 0.7, "
            "ict/seed0 mixed (greedy, at temperature 0.7: eval_temperature changed on a resume).") in report.splitlines()
    (output / "runs" / "grpo" / "seed0" / "config.yaml").write_text("method: grpo\nnum_steps: 2\neval_temperature: 0\n")
    (output / "runs" / "ict" / "seed0" / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "reward_mean": 0.5, "eval_accuracy": 0.25, "eval_temperature": 0.7}) + "\n"
        for step in (1, 2)))
    assert panel + "drawn at temperature 0.7." in write_report(output, ("grpo",), 10).read_text().splitlines()
    # resumed after an upgrade: its first point has no record, and is not taken for config.yaml's 0.7
    (output / "runs" / "ict" / "seed0" / "metrics.jsonl").write_text("".join(
        json.dumps({"step": step, "reward_mean": 0.5, "eval_accuracy": 0.25, **extra}) + "\n"
        for step, extra in ((1, {}), (2, {"eval_temperature": 0.7}))))
    assert ("ict/seed0 mixed (at an unrecorded temperature, at temperature 0.7: its first points were logged "
            "before metrics.jsonl recorded it).") in write_report(output, ("grpo",), 10).read_text()

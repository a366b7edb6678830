"""The report of `ict compare` (`ict.analysis.compare`) on comparison directories built by hand:
baselines and ablations, runs in progress, pairing by seed and problem, the paper figures and top
tokens, learning curves, the environment and commands, and summary.json."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import pytest

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


def test_methods_are_paired_by_problem_index_on_the_problems_both_evaluated(tmp_path):
    """grpo evaluated problems 0-3, ict 1-4: the columns were paired by position (a difference of
    0 over 4 problems) and a method with one problem more had no difference rows at all, silently.
    Now each pair is compared on the problems both evaluated, and the report says so."""
    from ict.analysis.compare import RunRecord, summarize

    grpo = {0: [True] * 4, 1: [False] * 4, 2: [False] * 4, 3: [False] * 4}
    ict = {1: [True] * 4, 2: [False] * 4, 3: [False] * 4, 4: [False] * 4, 5: [True] * 4}
    runs = [RunRecord("grpo", 0, tmp_path, [], {"b": grpo}), RunRecord("ict", 0, tmp_path, [], {"b": ict})]
    summary = summarize(runs, resamples=200)
    (row,) = [row for row in summary["differences"] if row["metric"] == "pass@1"]
    assert (row["method"], row["baseline"], row["problems"]) == ("ict", "grpo", 3)
    assert row["difference"] == pytest.approx(1 / 3)  # problems 1-3: (1 - 0) / 3
    assert summary["pairing"][0] == "ict against grpo on b pass@1: paired on the 3 problems both evaluated (of 5 and 4)"


def test_a_pair_over_fewer_seeds_than_a_side_evaluated_is_named(tmp_path):
    """grpo seeds 0-2, ict seeds 0-1: the table's means (ict 50.0, grpo 55.6: ict 5.6 points
    lower) are over each method's seeds, the paired difference over seeds 0 and 1 only (+16.7),
    and the report said nothing of the seed grpo/seed2 left out. Now the pair is named."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    grpo = [[1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]]
    ict = [[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]]
    for label, rows in (("grpo", grpo), ("ict", ict)):
        for seed, row in enumerate(rows):
            _finished_run(output, label, {i: [bool(value)] * 2 for i, value in enumerate(row)}, seed=seed)
    report = write_report(output, ("grpo",), 50).read_text()
    assert "| b | pass@1 | grpo | 3 | 6 | 55.6 |" in report and "| b | pass@1 | ict | 2 | 6 | 50.0 |" in report
    assert "| b | pass@1 | ict | grpo | 16.7 |" in report  # (2/6 + 4/6) / 2 - (1/6 + 3/6) / 2, seeds 0 and 1
    assert "- ict against grpo on b pass@1: paired on the 2 seeds both evaluated (of 2 and 3)" in report
    summary = json.loads((output / "summary.json").read_text())
    assert summary["pairing"] == ["ict against grpo on b pass@1: paired on the 2 seeds both evaluated (of 2 and 3)"]


def test_a_method_with_a_seed_not_evaluated_keeps_its_evaluated_seeds(tmp_path):
    """ict seeds 0 and 1 evaluated, seed 2 trained to its end but not evaluated yet (no eval/, so
    not in progress): ict vanished from the pass@k table and from every difference, and the report
    said nothing. Now its evaluated seeds are averaged and compared, and the seed is named."""
    import shutil

    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    for label, rows in (("grpo", [[1, 0, 0, 0], [1, 1, 0, 0]]), ("ict", [[1, 1, 1, 0], [1, 1, 1, 1], [0] * 4])):
        for seed, row in enumerate(rows):
            _finished_run(output, label, {i: [bool(value)] * 2 for i, value in enumerate(row)}, seed=seed)
    shutil.rmtree(output / "runs" / "ict" / "seed2" / "eval")
    report = write_report(output, ("grpo",), 50).read_text()
    assert "Runs: 5 (" in report and "In progress" not in report
    assert "| b | pass@1 | ict | 2 | 4 | 87.5 | 17.7 |" in report  # seeds 0 and 1: 3/4 and 4/4
    assert "| b | pass@1 | ict | grpo | 50.0 |" in report  # 7/8 - 3/8
    assert "- ict on b: the 2 seeds evaluated (no final evaluation of b: ict/seed2)" in report


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


def _finished_run(output: Path, label: str, verdicts: dict[int, list[bool]], steps: int = 2, seed: int = 0) -> Path:
    """A run directory trained to its num_steps with a finished final evaluation (benchmark b)."""
    run = output / "runs" / label / f"seed{seed}"
    (run / "eval").mkdir(parents=True)
    (run / "config.yaml").write_text(f"method: {label}\nnum_steps: {steps}\n")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": step, "reward_mean": 0.5}) + "\n"
                                               for step in range(1, steps + 1)))
    _write_eval(run / "eval", verdicts)
    return run


def _write_eval(directory: Path, verdicts: dict[int, list[bool]], finished: bool = True) -> None:
    """An `ict eval` output directory of benchmark b (results.json only when ``finished``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "samples.jsonl").write_text("".join(
        json.dumps({"benchmark": "b", "index": index, "correct": correct}) + "\n"
        for index, values in verdicts.items() for correct in values))
    if finished:
        (directory / "results.json").write_text(json.dumps({"config": {"ks": [1]}}))


def test_an_interrupted_base_model_evaluation_is_no_step_0(tmp_path):
    """base-model/ with samples of 2 of 4 problems (all right) and no results.json, as a killed
    `--eval-steps 0` leaves it, was read as the untrained model's pass@1 of 100%, step 0 of every
    curve. Now it is left out (as an unfinished step evaluation is) and named as in progress."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    run = _finished_run(output, "grpo", {i: [False] * 2 for i in range(4)})
    _write_eval(run / "evals" / "step-00000001", {i: [i == 0] * 2 for i in range(4)})
    _write_eval(output / "base-model", {0: [True] * 2, 1: [True] * 2}, finished=False)
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
    _finished_run(output, "grpo", {0: [True, True], 1: [True, False], 2: [False, False]})
    _write_eval(output / "base-model", {0: [True, False], 1: [False, False], 2: [False, False]})
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
        run = _finished_run(output, "grpo", {i: [score] * 2 for i in range(4)}, seed=seed)
        _write_eval(run / "evals" / "step-00000001", {i: [score] * 2 for i in range(4)}, finished=seed == 0)
    _write_eval(output / "base-model", {i: [False] * 2 for i in range(4)})
    report = write_report(output, ("grpo",), 10).read_text()
    assert "| b | pass@1 | grpo | 0.0 | 100.0 (1 of 2 seeds) | 50.0 |" in report


def test_a_torn_environment_line_is_skipped(tmp_path):
    """environment.jsonl gets a line on every resume: a kill that tore the last one stopped the
    report with `error: Unterminated string ...` (naming no file) after the CSVs were written. Now
    a line that is not an environment record is skipped; a file with none is said so."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    record = json.dumps({"python": "3.11", "cpu_count": 2, "packages": {"torch": "2.9"}, "gpu": None})
    grpo = _finished_run(output, "grpo", {0: [True, False]})
    (grpo / "environment.jsonl").write_text(record + "\n" + record[:30])
    ict = _finished_run(output, "ict", {0: [True, True]})
    (ict / "environment.jsonl").write_text('[1, 2]\n{"packages": "torch"}\n')
    _finished_run(output, "random", {0: [False, False]})
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
    _finished_run(output, "grpo", {i: [i % 2 == 0, False] for i in range(6)})
    _finished_run(output, "ict", {i: [i % 3 == 0, True] for i in range(6)})
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
    _finished_run(output, "grpo", {0: [True, False], 1: [True, True]})
    _finished_run(output, "ict", {0: [True, True], 1: [False, False]})
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
    _finished_run(output, "grpo", {0: [True, True]})
    ict = _finished_run(output, "ict", {0: [False, False]})
    samples = ict / "eval" / "samples.jsonl"
    samples.write_text('{"benchmark": "b", "index": 0, "correct": "false"}\n' * 2)
    arguments = ["compare", "--report-only", "--output-dir", str(output)]
    assert main(arguments) == 2
    assert f"{samples}:1: not an evaluation sample" in capsys.readouterr().err
    assert not (output / "report.md").exists()
    samples.write_bytes(b'{"benchmark": "b", "index": 0, "correct": false}\n\xff\n')
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert f"{samples}: not UTF-8 text" in error and len(error.strip().splitlines()) == 1
    samples.write_text('{"benchmark": "b", "index": 0, "correct": false}\n')
    config = ict / "config.yaml"
    config.write_bytes(b"method: ict\nnum_steps: 2\n# \xff\n")
    assert main(arguments) == 2
    error = capsys.readouterr().err
    assert f"{config}: not UTF-8 text" in error and len(error.strip().splitlines()) == 1


def test_a_method_left_out_of_a_benchmarks_pass_at_k_is_named(tmp_path):
    """ict seed 1 sampled 2 completions per problem, seed 0 four: ict vanished from pass@4 (its
    seed 1's pass@4 is NaN) with no word in the report; random's seeds evaluated problems 0-1 and
    2-3: random vanished from every table. ict's seeds evaluated problems 0-1 and 0-2: its mean
    is over problems 0-1 only, and nothing said so. Each is now a note."""
    from ict.analysis.compare import RunRecord, summarize

    def run(label: str, seed: int, verdicts: dict[int, list[bool]]) -> RunRecord:
        return RunRecord(label, seed, tmp_path, [], {"b": verdicts}, ks=(1, 4))

    runs = [run("grpo", 0, {0: [True] * 4, 1: [False] * 4}), run("grpo", 1, {0: [True] * 4, 1: [False] * 4}),
            run("ict", 0, {0: [True] * 4, 1: [True] * 4, 2: [False] * 4}), run("ict", 1, {0: [True] * 2, 1: [True] * 2}),
            run("random", 0, {0: [True] * 4, 1: [True] * 4}), run("random", 1, {2: [True] * 4, 3: [True] * 4})]
    summary = summarize(runs, resamples=20, baselines=("grpo",))
    assert [(row["method"], row["metric"], row["problems"]) for row in summary["table"]] == [
        ("grpo", "pass@1", 2), ("ict", "pass@1", 2), ("grpo", "pass@4", 2)]
    assert summary["pairing"] == [
        "ict on b pass@1: the 2 problems all its seeds evaluated (of 3)",
        "random on b pass@1: left out (its seeds evaluated no problem in common)",
        "ict on b pass@4: left out (fewer than 4 samples of a problem: ict/seed1)",
        "random on b pass@4: left out (its seeds evaluated no problem in common)"]


def test_two_directories_of_one_seed_are_refused(tmp_path, capsys):
    """runs/ict/seed1 and runs/ict/seed01 both parse as seed 1: the report listed 'ict/seed1,
    ict/seed1', its table averaged both as 2 seeds, and the pair took seed01's scores (+100.0,
    'paired on the 1 seeds both evaluated (of 2 and 2)') while seed1 scored 0. Now refused."""
    output = tmp_path / "cmp"
    for seed in (0, 1):
        _finished_run(output, "grpo", {i: [False] * 2 for i in range(4)}, seed=seed)
    copy = _finished_run(output, "ict", {i: [True] * 2 for i in range(4)}, seed=1)
    copy.rename(copy.with_name("seed01"))
    _finished_run(output, "ict", {i: [False] * 2 for i in range(4)}, seed=1)
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "20"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {output}/runs/ict/seed01 and {output}/runs/ict/seed1 are both seed 1 of ict; keep one of "
        "them, named seed1")
    assert not (output / "report.md").exists()


def test_pairs_over_a_subset_or_no_shared_problem_or_seed(tmp_path):
    """Mutation tests of summarize's pairing: stapo evaluated a subset of grpo's problems (the
    note comes when only one side differs from the common set); ict's problems and random's seed
    share nothing with grpo (no difference row, a note, no ValueError from an empty pair); a
    label with no run of a benchmark gets no 'seeds evaluated' note for it; over 16 problems the
    p-value is the Monte Carlo one with the resamples asked for."""
    from ict.analysis.compare import RunRecord, summarize
    from ict.core.significance import paired_permutation_test

    def run(label: str, seed: int, verdicts: dict[int, list[bool]], benchmark: str = "b") -> RunRecord:
        return RunRecord(label, seed, tmp_path, [], {benchmark: verdicts}, ks=(1,))

    grpo = {i: [i % 3 == 0] * 2 for i in range(20)}
    runs = [run("grpo", 0, grpo), run("stapo", 0, {i: [True] * 2 for i in range(4)}),
            run("ict", 0, {i: [True] * 2 for i in range(20, 22)}), run("random", 1, grpo),
            run("entropy", 0, {i: [True, False] for i in range(20)}), run("kl_cov", 0, {0: [True] * 2}, "c")]
    summary = summarize(runs, resamples=7, baselines=("grpo",))
    assert {(row["method"], row["problems"]) for row in summary["differences"] if row["benchmark"] == "b"} == {
        ("stapo", 4), ("entropy", 20)}
    assert summary["pairing"] == [
        "stapo against grpo on b pass@1: paired on the 4 problems both evaluated (of 4 and 20)",
        "ict against grpo on b pass@1: paired on the 0 problems both evaluated (of 2 and 20)",
        "random against grpo on b pass@1: paired on the 0 seeds both evaluated (of 1 and 1)"]
    (entropy,) = [row for row in summary["differences"] if row["method"] == "entropy"]
    scores = {name: [[float(value) for value in (values if name == "grpo" else [0.5] * 20)]]
              for name, values in (("grpo", [i % 3 == 0 for i in range(20)]), ("entropy", None))}
    expected = paired_permutation_test(scores["entropy"], scores["grpo"], resamples=7, seed=0)
    assert entropy["p_value"] == expected and expected != paired_permutation_test(
        scores["entropy"], scores["grpo"], resamples=10, seed=0)


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
    run = _finished_run(output, "grpo", {0: [True, False]})
    _write_eval(output / "base-model", {0: [False, False]})
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
    _finished_run(output, "grpo", {0: [True], 1: [False]})
    shutil.rmtree(_finished_run(output, "ict", {0: [True], 1: [True]}) / "eval")
    report = write_report(output, ("grpo",), 10).read_text()
    assert "| b | pass@1 | grpo | 1 | 2 | 50.0 | - |" in report
    assert "| b | pass@1 | ict |" not in report
    note = "ict: left out of the evaluation tables (no final evaluation: ict/seed0)"
    assert f"- {note}" in report
    summary = json.loads((output / "summary.json").read_text())
    assert summary["pairing"] == [note]
    assert [row["method"] for row in summary["training_end"]] == ["grpo", "ict"]


def test_the_reported_difference_interval_and_p_match_a_hand_computation_on_the_shared_cells(tmp_path):
    """Mutation tests of summarize's pairing and the report's row: grpo evaluated seeds 0, 1, 3 and
    problems 0, 1, 3, 4; ict seeds 1, 2, 3 and problems 1-4. The pair is seeds 1 and 3 x problems
    1, 3 and 4 (neither side's first rows or columns: taking the leading positions of either, or
    printing the interval high first, gives other numbers), against a hand-written bootstrap of
    the documented draw (rows, then columns, numpy's default_rng(0)) and an exact enumeration of
    the 2^3 sign patterns."""
    import itertools

    import numpy as np

    from ict.analysis.compare import write_report

    def score(label: str, seed: int, problem: int) -> float:  # pass@1 of 2 samples: 0, 0.5 or 1
        return 1.0 if label == "ict" and (seed + problem) % 4 else (seed + problem) % 2 / 2

    output = tmp_path / "cmp"
    for label, seeds, problems in (("grpo", (0, 1, 3), (0, 1, 3, 4)), ("ict", (1, 2, 3), (1, 2, 3, 4))):
        for seed in seeds:
            _finished_run(output, label, {p: [True] * int(2 * score(label, seed, p))
                                          + [False] * (2 - int(2 * score(label, seed, p))) for p in problems}, seed=seed)
    d = np.array([[score("ict", s, p) - score("grpo", s, p) for p in (1, 3, 4)] for s in (1, 3)])
    draw, means = np.random.default_rng(0), []
    for _ in range(40):
        rows, columns = draw.integers(0, 2, 2), draw.integers(0, 3, 3)
        means.append(sum(d[r, c] for r in rows for c in columns) / 6)
    low, high = np.percentile(means, [2.5, 97.5])
    per_problem = d.mean(axis=0)
    p = sum(abs(np.mean(np.array(signs) * per_problem)) >= abs(per_problem.mean()) - 1e-12
            for signs in itertools.product([-1, 1], repeat=3)) / 8
    assert low < high and p < 1
    report = write_report(output, ("grpo",), 40).read_text()
    assert (f"| b | pass@1 | ict | grpo | {100 * d.mean():.1f} | [{100 * low:.1f}, {100 * high:.1f}] | "
            f"{p:.3g} |") in report
    (row,) = json.loads((output / "summary.json").read_text())["differences"]
    assert (row["seeds"], row["problems"]) == (2, 3)
    assert [row["difference"], row["low"], row["high"], row["p_value"]] == pytest.approx([d.mean(), low, high, p])


def test_an_exactly_zero_difference_prints_0_0_not_minus_0_0(tmp_path):
    """ict and grpo solve 1 and 2 of 3 samples of two problems each, on other problems: pass@1
    (1/3, 2/3, 0, 0) against (0, 0, 1/3, 2/3), an exact difference of 0 whose float mean is
    -2.8e-17. The report printed it as -0.0 (ict looking worse); a value that rounds to zero now
    prints 0.0, and a negative one that does not keeps its sign."""
    from ict.analysis.compare import _fmt, write_report

    output = tmp_path / "cmp"
    counts = {"grpo": (0, 0, 1, 2), "ict": (1, 2, 0, 0)}
    for label, solved in counts.items():
        _finished_run(output, label, {p: [True] * c + [False] * (3 - c) for p, c in enumerate(solved)})
    report = write_report(output, ("grpo",), 40).read_text()
    (row,) = json.loads((output / "summary.json").read_text())["differences"]
    assert -1e-15 < row["difference"] < 0  # the float residue this test is about
    (line,) = [line for line in report.splitlines() if line.startswith("| b | pass@1 | ict | grpo |")]
    assert line.split(" | ")[4] == "0.0"
    assert (_fmt(-0.0004), _fmt(-0.004, 2, 1.0), _fmt(-0.001), _fmt(0.0004)) == ("0.0", "0.00", "-0.1", "0.0")


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
    _finished_run(output, "grpo", {0: [True], 1: [False]})
    run = _finished_run(output, "ict", {0: [True], 1: [True]})
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

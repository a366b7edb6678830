"""`ict compare` end to end on a tiny random model: 2 methods x 2 seeds, 2 steps, a tiny
evaluation; the report's numbers are recomputed here from the runs' raw samples.jsonl."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from ict.answers.rewards import register_reward
from ict.cli import main


@register_reward("compare_contains_answer")
def compare_contains_answer(completion: str, problem) -> float:
    return float(problem.answer in completion.split())


pytestmark = pytest.mark.usefixtures("one_thread")


def _data_dir(path: Path) -> Path:
    path.mkdir(parents=True)
    with open(path / "gsm8k.jsonl", "w") as handle:
        for a, b in [(1, 2), (3, 4), (2, 2), (4, 5), (0, 3), (1, 1)]:
            handle.write(json.dumps({"question": f"what is {a} + {b} ?",
                                     "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}) + "\n")
    return path


def _per_problem_pass_at_k(samples: Path, k: int) -> dict[int, float]:
    """Independent pass@k: 1 - C(n-c, k)/C(n, k) from the raw verdicts."""
    verdicts: dict[int, list[bool]] = {}
    for line in samples.read_text().splitlines():
        record = json.loads(line)
        if not record["greedy"]:
            verdicts.setdefault(record["index"], []).append(record["correct"])
    return {index: 1 - math.comb(len(v) - sum(v), k) / math.comb(len(v), k)
            for index, v in verdicts.items()}


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_compare_end_to_end(tiny_model_dir, arithmetic_task, tmp_path):
    output = tmp_path / "cmp"
    argv = ["compare", "--methods", "grpo,ict:ratio=0.2", "--seeds", "0,1",
            "--output-dir", str(output), "--eval-benchmarks", "gsm8k",
            "--eval-data-dir", str(_data_dir(tmp_path / "data")), "--eval-n", "4",
            "--eval-max-new-tokens", "6", "--eval-math-extraction", "lenient",
            "--bootstrap-resamples", "2000",
            f"model={tiny_model_dir}", f"dataset={arithmetic_task}",
            "reward=compare_contains_answer", "num_steps=2", "prompts_per_step=2",
            "num_generations=4", "max_new_tokens=8", "micro_batch_size=8",
            "learning_rate=3e-3", "tensorboard=false"]
    assert main(argv) == 0
    for label in ("grpo", "ict-ratio=0.2"):
        for seed in (0, 1):
            run = output / "runs" / label / f"seed{seed}"
            assert (run / "eval" / "results.json").is_file()
            assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    # same seed -> same training prompts: the first step's prompts are identical across methods
    # (the sample completion differs only through the model, which is identical at step 1)
    first = [json.loads((output / "runs" / label / "seed0" / "metrics.jsonl").read_text()
                        .splitlines()[0]) for label in ("grpo", "ict-ratio=0.2")]
    assert first[0]["sample_completion"] == first[1]["sample_completion"]
    assert first[0]["reward_mean"] == first[1]["reward_mean"]

    report = (output / "report.md").read_text()
    assert "problems and seeds" in report and "![training curves](curves.png)" in report
    assert (output / "curves.png").stat().st_size > 10_000

    # one cell: pass@4 of ict-ratio=0.2, mean over seeds of the mean over problems
    expected = []
    matrices = {}
    for label in ("grpo", "ict-ratio=0.2"):
        rows = []
        for seed in (0, 1):
            scores = _per_problem_pass_at_k(output / "runs" / label / f"seed{seed}" / "eval"
                                            / "samples.jsonl", 4)
            rows.append([scores[i] for i in sorted(scores)])
        matrices[label] = np.array(rows)
    expected = matrices["ict-ratio=0.2"].mean(axis=1)
    rows = list(csv.DictReader(open(output / "results.csv")))
    cell = next(row for row in rows if row["method"] == "ict-ratio=0.2"
                and row["metric"] == "pass@4")
    assert float(cell["mean"]) == pytest.approx(expected.mean(), abs=1e-12)
    assert float(cell["std"]) == pytest.approx(expected.std(ddof=1), abs=1e-12)
    assert f"| gsm8k | pass@4 | ict-ratio=0.2 | 2 | 6 | {100 * expected.mean():.1f} |" in report

    # one bootstrap interval, recomputed with the same draws (rows, then columns, seed 0)
    diff = matrices["ict-ratio=0.2"] - matrices["grpo"]
    rng = np.random.default_rng(0)
    stats = []
    for _ in range(2000):
        r = rng.integers(0, 2, 2)
        c = rng.integers(0, 6, 6)
        stats.append(np.mean([[diff[i, j] for j in c] for i in r]))
    low, high = np.percentile(stats, [2.5, 97.5])
    row = next(r for r in csv.DictReader(open(output / "differences.csv"))
               if r["method"] == "ict-ratio=0.2" and r["baseline"] == "grpo"
               and r["metric"] == "pass@4")
    assert float(row["difference"]) == pytest.approx(diff.mean(), abs=1e-12)
    assert float(row["low"]) == pytest.approx(low, abs=1e-12)
    assert float(row["high"]) == pytest.approx(high, abs=1e-12)

    # the end-of-training table: a run's metrics averaged over its last steps (here both)
    lines = [json.loads(line) for line in (output / "runs" / "grpo" / "seed1" / "metrics.jsonl")
             .read_text().splitlines()]
    row = next(r for r in csv.DictReader(open(output / "training_end.csv"))
               if r["method"] == "grpo" and r["seed"] == "1")
    assert int(row["steps"]) == 2
    assert float(row["entropy"]) == pytest.approx((lines[0]["entropy"] + lines[1]["entropy"]) / 2)
    assert float(row["response_length_mean"]) == pytest.approx(
        (lines[0]["response_length_mean"] + lines[1]["response_length_mean"]) / 2)
    lengths = [np.mean([json.loads(line)["response_length_mean"] for line in
                        (output / "runs" / "ict-ratio=0.2" / f"seed{seed}" / "metrics.jsonl")
                        .read_text().splitlines()]) for seed in (0, 1)]
    table_row = next(line for line in report.splitlines() if line.startswith("| ict-ratio=0.2 | 2 |"))
    assert table_row.split(" | ")[6] == f"{np.mean(lengths):.1f}"  # the length column

    # the selection anatomy: each seed's mean over its last steps, then the mean over seeds,
    # with the all-token value in parentheses
    ict_lines = [[json.loads(line) for line in (output / "runs" / "ict-ratio=0.2" / f"seed{seed}"
                                                 / "metrics.jsonl").read_text().splitlines()]
                 for seed in (0, 1)]
    row = next(r for r in csv.DictReader(open(output / "training_end.csv"))
               if r["method"] == "ict-ratio=0.2" and r["seed"] == "0")
    for key in ("selected_partial_group_fraction", "all_relative_position", "selected_tie_fraction"):
        assert float(row[key]) == pytest.approx(sum(line[key] for line in ict_lines[0]) / 2)
    def seed_mean(key):
        return np.mean([np.mean([line[key] for line in lines]) for lines in ict_lines])
    anatomy_row = [line for line in report.splitlines() if line.startswith("| ict-ratio=0.2 | 2 |")][1]
    cells = anatomy_row.strip(" |").split(" | ")[2:]
    assert cells[0] == (f"{seed_mean('selected_partial_group_fraction'):.2f} "
                        f"({seed_mean('all_partial_group_fraction'):.2f})")
    assert cells[1] == (f"{seed_mean('selected_relative_position'):.2f} "
                        f"({seed_mean('all_relative_position'):.2f})")
    assert cells[3] == f"{seed_mean('selected_tie_fraction'):.2f}"

    # a rerun reuses every run; --report-only rebuilds the same report from the directories
    mtime = (output / "runs" / "grpo" / "seed0" / "metrics.jsonl").stat().st_mtime
    (output / "report.md").unlink()
    assert main(["compare", "--methods", "grpo", "--seeds", "0", "--output-dir", str(output),
                 "--report-only", "--bootstrap-resamples", "2000"]) == 0
    assert (output / "report.md").read_text().split("## Reproduce")[0] == \
        report.split("## Reproduce")[0]
    assert (output / "runs" / "grpo" / "seed0" / "metrics.jsonl").stat().st_mtime == mtime
    # the report's reproduce line carries non-default baselines
    assert main(["compare", "--output-dir", str(output), "--report-only", "--baselines", "grpo",
                 "--bootstrap-resamples", "100"]) == 0
    assert (f"ict compare --report-only --output-dir {output} --baselines grpo"
            in (output / "report.md").read_text())

    # ict plot on any set of runs
    out = tmp_path / "plot.png"
    assert main(["plot", *[str(p) for p in sorted((output / "runs").glob("*/seed*"))],
                 "--by", "method", "--out", str(out)]) == 0
    assert out.stat().st_size > 10_000
    from ict.analysis.plots import panels_with_data, read_metrics

    titles = [panel[0] for panel in panels_with_data(
        {"ict": [read_metrics(output / "runs" / "ict-ratio=0.2" / "seed0")]})]
    assert titles[-4:] == ["Anatomy: fewer than G alive", "Anatomy: relative position t/L",
                           "Anatomy: end tokens", "Anatomy: decided by a tie"]


def test_method_options_map_to_config_fields():
    from ict.experiments.compare import method_overrides, parse_methods

    specs = parse_methods("grpo,ict:reference=prev,ratio=0.2,random")
    assert [spec.label for spec in specs] == ["grpo", "ict-reference=prev-ratio=0.2", "random"]
    assert method_overrides(specs[1]) == {"method": "ict", "selector.reference": "prev",
                                          "selector.ratio": "0.2"}
    assert method_overrides(parse_methods("ict:preset=paper,aggregation=token_mean")[0]) == {
        "method": "ict", "preset": "paper", "aggregation": "token_mean"}
    assert main(["compare", "--methods", "ict:ratio", "--output-dir", "x"]) == 2


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_train_only_then_eval_only(tiny_model_dir, arithmetic_task, tmp_path, capsys):
    """A grid trained by one process (--train-only) is evaluated by another (--eval-only), which
    skips runs not trained to their final step and never trains."""
    output = tmp_path / "cmp"
    common = ["--methods", "grpo", "--output-dir", str(output), "--eval-benchmarks", "gsm8k",
              "--eval-data-dir", str(_data_dir(tmp_path / "data")), "--eval-n", "2",
              "--eval-max-new-tokens", "4", "--eval-math-extraction", "lenient",
              "--bootstrap-resamples", "100", f"model={tiny_model_dir}",
              f"dataset={arithmetic_task}", "reward=compare_contains_answer", "num_steps=1",
              "prompts_per_step=2", "num_generations=2", "max_new_tokens=4",
              "tensorboard=false", "dtype=fp32"]
    assert main(["compare", "--train-only", "--seeds", "0", *common]) == 0
    trained = output / "runs" / "grpo" / "seed0"
    assert (trained / "checkpoints" / "step-00000001").is_dir()
    assert not (trained / "eval").exists() and not (output / "report.md").exists()
    assert f"trained: {output}" in capsys.readouterr().out  # it printed "report: DIR", writing none
    assert main(["compare", "--eval-only", "--seeds", "0,1", *common]) == 0
    assert (trained / "eval" / "results.json").is_file()
    # the evaluation loads the weights in the run's own dtype (eval's auto is bf16 on a GPU)
    evaluated = json.loads((trained / "eval" / "results.json").read_text())
    assert evaluated["config"]["dtype"] == "fp32"
    import torch

    assert evaluated["environment"]["packages"]["torch"] == torch.__version__
    assert f"1 run(s) trained with torch {torch.__version__}" in (output / "report.md").read_text()
    assert not (output / "runs" / "grpo" / "seed1").exists()  # untrained: skipped, not trained
    assert (output / "report.md").is_file()


def test_a_run_stopped_inside_a_comparison_says_to_rerun_the_comparison(tiny_model_dir, arithmetic_task,
                                                                       tmp_path, capsys, monkeypatch):
    """Ctrl-C in a comparison's run checkpoints the step and stops; the message told the user to
    continue with `--resume --run-dir DIR` (ict train's way), which trains that run alone, outside
    the comparison. It names the comparison's own command now."""
    import signal

    import ict.training.trainer
    from ict.training.trainer import train

    def stopped_at_step_1(config, **options):
        return train(config, on_step=lambda metrics: signal.raise_signal(signal.SIGINT)
                     if metrics["step"] == 1 else None, **options)

    monkeypatch.setattr(ict.training.trainer, "train", stopped_at_step_1)  # compare imports it when run
    output = tmp_path / "cmp"
    arguments = ["compare", "--train-only", "--methods", "grpo", "--seeds", "0", "--output-dir", str(output),
                 "--eval-benchmarks", "gsm8k", "--eval-data-dir", str(_data_dir(tmp_path / "data")),
                 f"model={tiny_model_dir}", f"dataset={arithmetic_task}", "reward=compare_contains_answer",
                 "num_steps=2", "prompts_per_step=2", "num_generations=2", "max_new_tokens=4",
                 "tensorboard=false", "dtype=fp32"]
    assert main(arguments) == 130
    error = capsys.readouterr().err
    assert "to continue, rerun the same ict compare command" in error and "--resume --run-dir" not in error
    assert (output / "runs" / "grpo" / "seed0" / "checkpoints" / "step-00000001").is_dir()


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


def test_ict_metric_and_complement_specs_build_configs():
    """`ict compare --methods` accepts the ablations' options (generic over selector options):
    each spec becomes a training config whose selector asks for the keyed score; nothing trains."""
    from ict.core.errors import UsageError
    from ict.core.selectors import required_js_references
    from ict.experiments.compare import method_overrides, parse_methods
    from ict.training.config import build_config

    specs = parse_methods("ict:metric=kl,ict:metric=wasserstein,ict:complement=true,ratio=0.1")
    assert [spec.label for spec in specs] == ["ict-metric=kl", "ict-metric=wasserstein",
                                              "ict-complement=true-ratio=0.1"]
    assert method_overrides(specs[0]) == {"method": "ict", "selector.metric": "kl"}
    assert method_overrides(specs[2]) == {"method": "ict", "selector.complement": "true",
                                          "selector.ratio": "0.1"}
    configs = [build_config(None, {}, method_overrides(spec)) for spec in specs]
    assert [(config.selector["metric"], config.selector["complement"]) for config in configs] == [
        ("kl", False), ("wasserstein", False), ("js", True)]
    reference = configs[0].selector["reference"]
    assert [required_js_references("ict", config.selector) for config in configs] == [
        (f"{reference}:kl",), (f"{reference}:wasserstein",), (reference,)]
    with pytest.raises(UsageError, match="unknown score metric"):
        build_config(None, {}, method_overrides(parse_methods("ict:metric=tv")[0]))


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


def test_compare_learning_curves_from_kept_checkpoints(tiny_model_dir, arithmetic_task, tmp_path):
    """--eval-steps evaluates the untrained model once (base-model/) and each kept checkpoint
    (evals/step-N/) with the final evaluation's settings; learning_curves.csv holds their pass@k,
    recomputed here from the raw samples; --eval-ks reaches ict eval and the report (k = n)."""
    output = tmp_path / "cmp"
    common = ["--methods", "grpo", "--seeds", "0", "--output-dir", str(output),
              "--eval-benchmarks", "gsm8k", "--eval-data-dir", str(_data_dir(tmp_path / "data")),
              "--eval-n", "3", "--eval-ks", "1,3", "--eval-max-new-tokens", "4",
              "--eval-math-extraction", "lenient", "--bootstrap-resamples", "100",
              f"model={tiny_model_dir}", f"dataset={arithmetic_task}",
              "reward=compare_contains_answer", "num_steps=3", "prompts_per_step=2",
              "num_generations=2", "max_new_tokens=4", "tensorboard=false", "save_every=1",
              "keep_checkpoints=0", "learning_rate=3e-3"]
    assert main(["compare", "--train-only", *common]) == 0
    assert main(["compare", "--eval-only", "--eval-steps", "0,1,2", *common]) == 0
    run = output / "runs" / "grpo" / "seed0"
    sources = {0: output / "base-model", 1: run / "evals" / "step-00000001",
               2: run / "evals" / "step-00000002", 3: run / "eval"}
    for directory in sources.values():
        results = json.loads((directory / "results.json").read_text())
        assert results["config"]["ks"] == [1, 3] and results["config"]["num_samples"] == 3
    rows = list(csv.DictReader(open(output / "learning_curves.csv")))
    for step, directory in sources.items():
        for k in (1, 3):
            expected = np.mean(list(_per_problem_pass_at_k(directory / "samples.jsonl", k).values()))
            row = next(r for r in rows if int(r["step"]) == step and r["metric"] == f"pass@{k}")
            assert float(row["value"]) == pytest.approx(expected, abs=1e-12)
            assert row["method"] == "grpo" and row["problems"] == "6"
    assert not any(r["metric"] == "pass@4" for r in rows)  # k above n is left out
    report = (output / "report.md").read_text()
    assert "## Held-out learning curves" in report and "| step 0 | step 1 | step 2 | step 3 |" in report
    assert (output / "learning_curves.png").stat().st_size > 5_000
    # a second run of the same command reuses every evaluation (nothing regenerated)
    stamps = {step: (d / "results.json").stat().st_mtime_ns for step, d in sources.items()}
    assert main(["compare", "--eval-only", "--eval-steps", "0,1,2", *common]) == 0
    assert stamps == {step: (d / "results.json").stat().st_mtime_ns for step, d in sources.items()}


def test_compare_refuses_bad_eval_steps_and_ks(tmp_path, capsys):
    base = ["compare", "--output-dir", str(tmp_path / "x"), "--eval-n", "4"]
    assert main([*base, "--eval-ks", "1,8"]) == 2
    assert "--eval-ks" in capsys.readouterr().err
    assert main([*base, "--eval-steps", "25,25"]) == 2
    assert "--eval-steps" in capsys.readouterr().err
    assert main([*base, "--eval-steps", "-5"]) == 2


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

    output = tmp_path / "my cmp"
    _finished_run(output, "grpo", {i: [i % 2 == 0, False] for i in range(6)})
    _finished_run(output, "ict", {i: [i % 3 == 0, True] for i in range(6)})
    report = write_report(output, ("grpo",), 200).read_text()
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


def test_the_runs_leave_the_comparisons_reasoning_gym_sets_out_of_training(tmp_path):
    """chain_sum's 2-term 1-digit task asks its 200 questions over and over: the first
    comparison's 200-problem evaluation set (119 distinct questions) was all in every run's
    training draws. Each run of a reasoning-gym task now leaves the comparison's rg: evaluation
    sets out (held_out_sets), checked against reasoning-gym's own draws; a file task is left as
    it is."""
    import reasoning_gym

    from ict.core.errors import UsageError
    from ict.data.training_data import load_training_data
    from ict.experiments.compare import CompareConfig, _training_config, parse_methods

    evaluated = "rg:chain_sum:min_terms=2:max_terms=2:min_digits=1:max_digits=1:size=200"
    config = CompareConfig(output_dir=tmp_path / "cmp", eval_benchmarks=f"gsm8k,{evaluated}")
    spec = parse_methods("grpo")[0]
    train_config = _training_config(config, {}, spec, 0)
    assert train_config.held_out_sets == evaluated
    data = load_training_data(train_config.dataset, dataset_config=train_config.dataset_config,
                              dataset_size=2000, seed=0, held_out_sets=[evaluated])
    options = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    asked = {entry["question"] for entry in reasoning_gym.create_dataset("chain_sum", size=200, seed=1_000_003,
                                                                         **options)}
    drawn = [entry["question"] for entry in reasoning_gym.create_dataset("chain_sum", size=2000, seed=0, **options)]
    assert len(asked) == 119 and sum(question in asked for question in drawn) > 1000
    assert [problem.prompt for problem in data.train] == [question for question in drawn if question not in asked]
    # a set the user gave is kept, the comparison's added; a file task gets none
    given = _training_config(config, {"held_out_sets": "rg:chain_sum:size=10"}, spec, 0)
    assert given.held_out_sets == f"rg:chain_sum:size=10,{evaluated}"
    file_task = tmp_path / "task.jsonl"
    file_task.write_text('{"question": "what is 1 + 1 ?", "answer": "2"}\n')
    assert _training_config(config, {"dataset": str(file_task)}, spec, 0).held_out_sets is None
    with pytest.raises(UsageError, match="needs a reasoning-gym training task"):
        load_training_data(str(file_task), held_out_sets=[evaluated])
    with pytest.raises(UsageError, match="takes reasoning-gym evaluation sets"):
        load_training_data("chain_sum", dataset_size=10, held_out_sets=["gsm8k"])


def test_a_run_with_a_checkpoint_resumes_with_its_own_config(tmp_path, monkeypatch):
    """run_comparison set `resume` after building a run's config, so build_config's check never
    ran: an interrupted run of an older comparison silently took the new held_out_sets (another
    training pool than its finished peers), and any changed option likewise. Now such a run
    resumes through build_config: its config.yaml's values hold, a different one is refused."""
    import yaml

    import ict.runs.checkpoint
    from ict.core.errors import UsageError
    from ict.experiments.compare import CompareConfig, _training_config, parse_methods, run_dir
    from ict.training.config import build_config, save_config

    evaluated = "rg:chain_sum:min_terms=2:max_terms=2:min_digits=1:max_digits=1:size=200"
    config = CompareConfig(output_dir=tmp_path / "cmp", eval_benchmarks=evaluated)
    spec = parse_methods("grpo")[0]
    directory = run_dir(config.output_dir, spec.label, 0)
    directory.mkdir(parents=True)
    old = build_config(None, {}, {"method": "grpo", "seed": "0", "run_dir": str(directory)}).to_dict()
    del old["held_out_sets"], old["held_out_rule"]  # a config.yaml from before both options
    (directory / "config.yaml").write_text(yaml.safe_dump(old))
    monkeypatch.setattr(ict.runs.checkpoint, "latest_checkpoint", lambda path: path / "checkpoints" / "step-1")
    resumed = _training_config(config, {}, spec, 0)
    assert resumed.resume and resumed.held_out_sets is None and resumed.held_out_rule == "draws"
    with pytest.raises(UsageError, match="learning_rate"):
        _training_config(config, {"learning_rate": 3e-4}, spec, 0)
    # a compare --config's eval_temperature reaches the runs; a resumed run may take it (it was
    # refused: the comparison's own evaluation temperature could not be set again)
    assert _training_config(config, {"eval_temperature": 0.6}, spec, 0).eval_temperature == 0.6
    save_config(build_config(None, {}, {"method": "grpo", "seed": "0", "run_dir": str(directory),
                                        "held_out_sets": evaluated}), directory / "config.yaml")
    assert _training_config(config, {}, spec, 0).held_out_sets == evaluated  # a new run's, kept

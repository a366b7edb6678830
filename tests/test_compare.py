"""`ict compare` end to end on a tiny random model: 2 methods x 2 seeds, 2 steps, a tiny
evaluation; the report's numbers are recomputed here from the runs' raw samples.jsonl. Also the
runs' configurations and resumes. The report on hand-built directories:
tests/test_compare_report.py; reruns refused before they mix runs: tests/test_compare_reruns.py;
a comparison stopped and rerun: tests/test_compare_stops.py."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
from compare_helpers import gsm8k_data_dir

from ict.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


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
            "--eval-data-dir", str(gsm8k_data_dir(tmp_path / "data")), "--eval-n", "4",
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
              "--eval-data-dir", str(gsm8k_data_dir(tmp_path / "data")), "--eval-n", "2",
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


def test_ict_metric_and_complement_specs_build_configs():
    """`ict compare --methods` accepts the ablations' options (generic over selector options):
    each spec becomes a training config whose selector asks for the keyed score; nothing trains."""
    from ict.core.errors import UsageError
    from ict.core.selectors import required_js_references
    from ict.experiments.compare import method_overrides, parse_methods
    from ict.training.config_loading import build_config

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


def test_compare_learning_curves_from_kept_checkpoints(tiny_model_dir, arithmetic_task, tmp_path):
    """--eval-steps evaluates the untrained model once (base-model/) and each kept checkpoint
    (evals/step-N/) with the final evaluation's settings; learning_curves.csv holds their pass@k,
    recomputed here from the raw samples; --eval-ks reaches ict eval and the report (k = n)."""
    output = tmp_path / "cmp"
    common = ["--methods", "grpo", "--seeds", "0", "--output-dir", str(output),
              "--eval-benchmarks", "gsm8k", "--eval-data-dir", str(gsm8k_data_dir(tmp_path / "data")),
              "--eval-n", "3", "--eval-ks", "1,3", "--eval-max-new-tokens", "4",
              "--eval-math-extraction", "lenient", "--bootstrap-resamples", "100",
              f"model={tiny_model_dir}", f"dataset={arithmetic_task}",
              "reward=compare_contains_answer", "num_steps=3", "prompts_per_step=2",
              "num_generations=2", "max_new_tokens=4", "tensorboard=false", "save_every=1",
              "keep_checkpoints=0", "learning_rate=3e-3"]
    assert main(["compare", "--train-only", *common]) == 0
    assert main(["compare", "--eval-only", "--eval-steps", "0,1,2,3", *common]) == 0
    run = output / "runs" / "grpo" / "seed0"
    assert not (run / "evals" / "step-00000003").exists()  # the final step is eval/, not evaluated twice
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


@pytest.mark.parametrize("methods,eval_steps,error", [
    ("grpo", "1,7,9", "error: --eval-steps 7,9: past num_steps (2) of every run, so no checkpoint of it will exist"),
    ("grpo", "2", "error: train reached"),  # the final step: eval/
    ("grpo,entropy:num_steps=8", "7,8", "error: train reached"),  # a step of the longer run
    ("grpo,entropy:num_steps=8", "9", "error: --eval-steps 9: past num_steps (8) of every run"),
])
def test_eval_steps_past_every_runs_num_steps_are_refused_before_anything_trains(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch, capsys, methods, eval_steps, error):
    """A step past num_steps of every run has no checkpoint ever: it was "not evaluated" once
    every run had trained; now one line (exit 2) before the first run trains or the comparison's
    directory is made. A step of some run passes (here the first ``train`` call stops it)."""
    import ict.training.trainer as trainer
    from ict.core.errors import UsageError

    def train(config, **kwargs):
        raise UsageError("train reached")

    monkeypatch.setattr(trainer, "train", train)
    output = tmp_path / "cmp"
    assert main(["compare", "--methods", methods, "--seeds", "0", "--output-dir", str(output),
                 "--eval-steps", eval_steps, "--eval-benchmarks", "rg:chain_sum:size=2",
                 f"model={tiny_model_dir}", f"dataset={arithmetic_task}", "reward=last_number", "num_steps=2",
                 "prompts_per_step=2", "num_generations=2", "max_new_tokens=4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(error), err
    assert output.exists() == (error == "error: train reached")


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
    from ict.training.config_loading import build_config, save_config

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


def test_compare_config_refusals_and_labels(tmp_path):
    """Mutation tests of CompareConfig.validate, .ks, parse_methods and MethodSpec.label, each a
    one-line UsageError before anything trains: repeated seeds, --bootstrap-resamples 0, a k of 0
    or a repeated k, two methods of one label, an unknown baseline; the default ks are those of
    ict eval that fit in --eval-n (k = n included); a label's odd characters become '_'."""
    from ict.core.errors import UsageError
    from ict.evaluation.evaluate import EvalConfig
    from ict.experiments.compare import CompareConfig, MethodSpec

    def config(**values) -> CompareConfig:
        return CompareConfig(output_dir=tmp_path / "c", report_only=True, **values)

    for values, message in (({"seeds": (0, 0)}, "--seeds"), ({"bootstrap_resamples": 0}, "--bootstrap-resamples"),
                            ({"eval_ks": (0, 1)}, "--eval-ks"), ({"eval_ks": (1, 1)}, "--eval-ks"),
                            ({"eval_ks": (1, 5), "eval_n": 4}, "--eval-ks"),
                            ({"methods": "ict:ratio=0.1,ict:ratio=0.1"}, "distinct methods"),
                            ({"baselines": ("nope",)}, "--baselines 'nope'"),
                            # --baselines '' wrote a report that compared nothing ("Baselines: .")
                            ({"baselines": ()}, "--baselines needs"), ({"baselines": ("",)}, "--baselines needs")):
        with pytest.raises(UsageError, match=message):
            config(**values).validate()
    n = max(EvalConfig.ks)
    assert config(eval_n=n).ks == tuple(EvalConfig.ks)
    assert MethodSpec("ict", {"reference": "a/b c"}).label == "ict-reference=a_b_c"


def test_the_closed_ends_of_the_compare_ranges_are_accepted(tmp_path):
    """Mutation test of CompareConfig.validate: the ends its messages allow pass (--eval-temperature
    0, greedy sampling: 'must be >= 0'; seed 0 and 2^32 - 1; k = --eval-n; --eval-limit 1;
    --eval-steps 0, the untrained model)."""
    from ict.experiments.compare import CompareConfig

    config = CompareConfig(output_dir=tmp_path / "c", report_only=True, eval_temperature=0.0,
                           seeds=(0, 2**32 - 1), eval_n=3, eval_ks=(1, 3), eval_limit=1, eval_steps=(0,))
    assert config.validate().eval_temperature == 0.0


def test_an_empty_compare_config_path_is_refused_not_ignored(tmp_path):
    """`ict compare --config "$CFG"` with CFG unset trained every run on the defaults: the empty
    path was taken for no --config. It is load_yaml's one-line refusal, before anything trains."""
    from ict.core.errors import UsageError
    from ict.experiments.compare import CompareConfig, run_comparison

    with pytest.raises(UsageError, match="--config is empty"):
        run_comparison(CompareConfig(output_dir=tmp_path / "c", config_file=""))
    assert not (tmp_path / "c" / "runs").exists()


def test_an_empty_eval_data_dir_is_refused_before_anything_trains(tmp_path):
    """`ict compare --eval-data-dir ""` trained every run, then the first evaluation refused
    `--data-dir is empty` (ict eval's flag, not the one typed)."""
    from ict.core.errors import UsageError
    from ict.experiments.compare import CompareConfig

    with pytest.raises(UsageError, match="^--eval-data-dir is empty: give a directory, or leave it out for the hub$"):
        CompareConfig(output_dir=tmp_path / "c", eval_data_dir=" ").validate()


def _isomorphic_strings_compare(output, model_dir, task) -> list[str]:
    """`ict compare` argv: one GRPO run of one step on ``task``, evaluated on 3 problems of
    reasoning-gym's isomorphic_strings (a task whose questions vary between processes)."""
    return ["compare", "--methods", "grpo", "--seeds", "0", "--output-dir", str(output),
            "--eval-benchmarks", "rg:isomorphic_strings:size=3", "--eval-n", "1",
            "--eval-max-new-tokens", "4", "--bootstrap-resamples", "10",
            f"model={model_dir}", f"dataset={task}", "reward=compare_contains_answer",
            "num_steps=1", "prompts_per_step=2", "num_generations=2", "max_new_tokens=4",
            "micro_batch_size=4", "tensorboard=false"]


def test_compare_refuses_a_reused_evaluation_of_other_reasoning_gym_questions(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch, capsys):
    """Some reasoning-gym tasks generate other questions for the same seed in another process
    (docs/training.md "Determinism"): a comparison rerun there would compare the runs it
    evaluates on this process's questions with the ones it reuses, evaluated on others. The
    reused evaluation's stored prompts are checked; simulated by another question at index 1."""

    output = tmp_path / "cmp"
    argv = _isomorphic_strings_compare(output, tiny_model_dir, arithmetic_task)
    assert main(argv) == 0
    assert main(argv) == 0  # the same questions: reused
    from eval_helpers import generate_another_second_question

    generate_another_second_question(monkeypatch)
    capsys.readouterr()
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {output / 'runs' / 'grpo' / 'seed0' / 'eval'} holds samples of another question at "
        "rg:isomorphic_strings:size=3 #1 (reasoning-gym generated another one in this process: some "
        "tasks vary between processes, e.g. with PYTHONHASHSEED); rerun with the PYTHONHASHSEED "
        "those runs were evaluated with (if one was set), or evaluate every run anew in another --output-dir")


def test_compare_refusing_an_evaluation_it_cannot_resume_names_its_own_way_out(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch, capsys):
    """An evaluation's samples that cannot be resumed (a line that is no JSON, another question, a
    samples.jsonl whose run.json was lost) were refused by `ict compare` with ict eval's advice,
    "pass --overwrite or another --output-dir": compare has no --overwrite (its parser refuses it).
    It names moving that evaluation aside, which the rerun then evaluates again."""
    from eval_helpers import generate_another_second_question

    output = tmp_path / "cmp"
    argv = _isomorphic_strings_compare(output, tiny_model_dir, arithmetic_task)
    assert main(argv) == 0
    evaluation = output / "runs" / "grpo" / "seed0" / "eval"
    advice = f"pass another --output-dir, or move {evaluation} aside to evaluate it again"
    samples = evaluation / "samples.jsonl"
    records = samples.read_text()
    samples.write_text("{garbled\n" + records)
    garbled = (f"error: {samples}:1: not an evaluation record (no JSON: Expecting property name enclosed "
               f"in double quotes: line 1 column 2 (char 1)); {advice}")
    capsys.readouterr()
    assert main(argv) == 2  # reused (its results.json there): its questions checked first
    assert capsys.readouterr().err.strip() == garbled
    (evaluation / "results.json").unlink()  # stopped before its results: resumed by ict eval's code
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == garbled
    samples.write_text(records)
    with monkeypatch.context() as patch:
        generate_another_second_question(patch)
        assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {evaluation} holds samples of another question at rg:isomorphic_strings:size=3 #1 "
        "(reasoning-gym generated another one in this process: some tasks vary between processes, e.g. "
        f"with PYTHONHASHSEED); {advice}")
    (evaluation / "run.json").unlink()  # and its run.json lost
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {evaluation} holds samples.jsonl but no run.json (the settings its samples were "
        f"drawn with); {advice}")
    evaluation.rename(evaluation.with_name("eval-aside"))  # the advice, followed
    assert main(argv) == 0
    assert (evaluation / "results.json").is_file()
    with pytest.raises(SystemExit, match="^2$"):  # the flag eval's advice names is none of compare's
        main([*argv, "--overwrite"])
    assert "unrecognized arguments: --overwrite" in capsys.readouterr().err


def test_the_default_random_control_differs_from_ict_only_in_the_score():
    """`ict compare`'s default control is a random 10% of each response with ICT's recipe
    (scope, loss aggregation, warm-up), not plain `random` (batch-ranked, token_mean, no warm-up)."""
    import dataclasses

    from ict.experiments.compare import CompareConfig, method_overrides
    from ict.training.config_loading import build_config

    configs = {spec.name: build_config(None, {}, method_overrides(spec)) for spec in CompareConfig().method_specs}
    ict, control = configs["ict"], configs["random"]
    differ = {f.name for f in dataclasses.fields(ict) if getattr(ict, f.name) != getattr(control, f.name)}
    assert differ == {"method", "selector", "preset"}
    assert control.selector["ratio"] == ict.selector["ratio"] == 0.1
    assert control.selector["scope"] == ict.selector["scope"] == "sequence"
    assert control.aggregation == ict.aggregation == "seq_mean_token_mean"
    assert control.full_token_warmup_steps == ict.full_token_warmup_steps == 10

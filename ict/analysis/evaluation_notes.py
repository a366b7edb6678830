"""The notes of `ict compare`'s report on its evaluations: which were made with other settings than
the most runs' final evaluations (`settings_notes`, `curve_settings_notes`: their pass@k is not
that of the same evaluation) and which were graded under other answer-grading rules than the
current ones (`regrade_notes`). Read from each evaluation's results.json only."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from ict.analysis.comparison_runs import (
    BASE_MODEL_DIR,
    RunRecord,
    complete_verdicts,
    evaluation_settings,
    graded_under,
)


def _reference_settings(runs: list[RunRecord]) -> tuple[dict[str, Any] | None, list[list[RunRecord]]]:
    """The most runs' final-evaluation settings (on a tie, the first run's group; None when no
    finished final evaluation records them) and the runs grouped by their settings."""
    groups: dict[str, list[RunRecord]] = {}
    for run in sorted(runs, key=lambda run: (run.label, run.seed)):
        if run.eval_settings is not None and run.correct:
            groups.setdefault(json.dumps(run.eval_settings, sort_keys=True, default=str), []).append(run)
    reference = max(groups.values(), key=len)[0].eval_settings if groups else None
    return reference, list(groups.values())


def _settings_note(name: str, settings: dict[str, Any], reference: dict[str, Any]) -> str:
    """``"ict/seed1 (num_samples 4, the others' 8)"``: the settings that differ from ``reference``."""
    return f"{name} (" + ", ".join(f"{key} {value!r}, the others' {reference.get(key)!r}"
                                   for key, value in settings.items() if value != reference.get(key)) + ")"


def settings_notes(runs: list[RunRecord]) -> list[str]:
    """One line per run whose final evaluation was made with other settings
    (:data:`~ict.analysis.comparison_runs.EVALUATION_SETTINGS`) than the most runs' (on a tie, the
    first run's group): ``"ict/seed1 (num_samples 4, the others' 8)"``; runs whose results.json
    records none are not compared. Empty when they all agree."""
    reference, groups = _reference_settings(runs)
    if len(groups) < 2:
        return []
    assert reference is not None
    return [_settings_note(f"{run.label}/seed{run.seed}", run.eval_settings, reference)
            for group in groups if group[0].eval_settings != reference for run in group
            if run.eval_settings is not None]


def curve_settings_notes(output_dir: Path, runs: list[RunRecord]) -> list[str]:
    """As `settings_notes`, one line per finished evaluation of the learning curves made with
    other settings than the most runs' final evaluations: ``DIR/base-model/`` (step 0 of every
    curve: ``"base-model (num_samples 4, the others' 8)"``) and each run's ``evals/step-N/``
    (``"ict/seed1 evals/step-00000010 (...)"``). Empty without a final evaluation's settings."""
    reference, _ = _reference_settings(runs)
    if reference is None:
        return []
    notes = []
    for name, directory in _curve_evaluations(output_dir, runs):
        settings = evaluation_settings(directory)
        if settings is not None and settings != reference and complete_verdicts(directory):
            notes.append(_settings_note(name, settings, reference))
    return notes


def _curve_evaluations(output_dir: Path, runs: list[RunRecord]) -> list[tuple[str, Path]]:
    """(name, directory) of the learning curves' evaluations: base-model/, each run's evals/step-N/."""
    evaluations = [(BASE_MODEL_DIR, output_dir / BASE_MODEL_DIR)]
    for run in sorted(runs, key=lambda run: (run.label, run.seed)):
        evaluations += [(f"{run.label}/seed{run.seed} evals/{directory.name}", directory)
                        for directory in sorted((run.directory / "evals").glob("step-*"))
                        if re.fullmatch(r"step-(\d+)", directory.name)]
    return evaluations


def regrade_notes(output_dir: Path, runs: list[RunRecord], current: int | None = None) -> list[str]:
    """One line per finished evaluation of the report (each run's eval/, base-model/, each
    evals/step-N/) graded under other answer-grading rules than ``current`` (the
    ``GRADING_RULES_VERSION`` of `ict.answers.grading`, which ict compare passes; None: the newest
    any of them records): ``"ict/seed0 eval (grading rules unknown (older), current 2)"``. Its
    verdicts may not be those of the same completions graded now. Reads results.json only."""
    evaluations = [(f"{run.label}/seed{run.seed} eval", run.directory / "eval")
                   for run in sorted(runs, key=lambda run: (run.label, run.seed))]
    found = [(name, *graded_under(directory)) for name, directory in
             evaluations + _curve_evaluations(output_dir, runs)]
    if current is None:
        current = max((rules for _, config, rules in found if config is not None and rules is not None), default=None)
        if current is None:  # none records a version: all as old as each other
            return []
    return [f"{name} (grading rules {'unknown (older)' if rules is None else rules}, current {current})"
            for name, config, rules in found if config is not None and rules != current]

"""The rules by which a record of an `ict eval` samples.jsonl counts, one home for the two readers:
`ict eval`'s resume (`ict.evaluation.records`) and `ict compare`'s report
(`ict.analysis.comparison_runs.read_verdicts`), so that both count the same draws."""

from __future__ import annotations

from typing import Any

GRADED_FIELDS = ("gold", "extracted", "correct", "score", "status", "grading")
"""A record's fields that grading writes (those `ict.evaluation.evaluate.regrade_records`
rewrites); the others are its draw's."""


def sampling_seed(record: dict[str, Any], legacy_seed: int = 0) -> int | None:
    """A sampled record's sampling seed: its ``seed``, ``legacy_seed`` where it has none (written
    before the field existed); None where its ``seed`` is no integer (``true`` too, which Python
    takes for 1): a record left out."""
    seed = record.get("seed")
    if seed is None:
        return legacy_seed
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else None


def compared_setting(key: str, value: Any) -> Any:
    """An `ict eval` setting (a results.json ``config`` key) as two evaluations' settings compare
    (`ict eval`'s resume, `ict compare`'s report and its reuse of an evaluation): an empty
    ``system_prompt`` as None, the same prompts (`ict.models.rollout.render_prompt` adds no system
    message for either)."""
    return None if key == "system_prompt" and value == "" else value


def same_draw(first: dict[str, Any], second: dict[str, Any]) -> bool:
    """Are two records of one sample one draw: equal in every field but `GRADED_FIELDS` (one
    completion graded twice, or a record repeated)?"""
    ungraded = dict.fromkeys(GRADED_FIELDS)
    return {**first, **ungraded} == {**second, **ungraded}

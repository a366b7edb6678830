"""verl reward function for the CPU run's chain_sum problems, graded by ict's own grader.

verl calls ``compute_score(data_source, solution_str, ground_truth, extra_info)`` for every
completion (``reward.custom_reward_function.path`` = this file). The score is
:func:`ict.answers.grading.grade_number`: 1 when the last number of the completion equals the gold
sum (the extraction ``ict train`` uses for this 135M model, ``answer_extraction: last_number``).
"""

from __future__ import annotations

from typing import Any

from ict.answers.grading import grade_number
from ict.core.problems import Problem


def compute_score(data_source: str, solution_str: str, ground_truth: str,
                  extra_info: dict[str, Any] | None = None, **kwargs: Any) -> float:
    """1.0 if the last number in ``solution_str`` equals ``ground_truth``, else 0.0."""
    problem = Problem(prompt="", answer=str(ground_truth), kind="reasoning_gym")
    return float(grade_number(problem, solution_str).score)

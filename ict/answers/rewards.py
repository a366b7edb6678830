"""Reward functions: a registry of `name -> fn(completion, problem) -> float`.

Each task reward is a rule of the one grader, `ict.answers.grading` (evaluation uses the same rules).
Built in:
- `reasoning_gym`: the task's own scorer (`dataset.score_answer`) on a strictly extracted answer
  (extraction `last_number`: the last number in the completion, or `tag`: the content of the last
  `<answer></answer>` pair, else the last `\\boxed{}`); the scorer never sees the whole text, so
  verbose answers earn no partial credit, but its own rule still credits an extracted answer that
  contains the gold: ``len(gold) / len(answer)``, e.g. 0.5 for ``14`` or ``-4`` against ``4``
  (chain_sum's `compute_decimal_reward`); `last_number` is the binary reward for numeric tasks;
- `math`: math-verify on the completion against the normalised gold, with a hard time bound
  per check in a worker process (`ict.answers.grading.grade_math_batch`, lenient extraction);
- `choice`: the committed option letter (`ict.answers.grading.grade_choice`) is the gold's or names
  an option worded as the gold's;
- `last_number`: the last number in the completion equals the numeric gold;
- `format`: 1 if the completion holds exactly one non-empty `<answer>...</answer>` pair.

Register your own with `@register_reward("name")`; `build_reward` combines several names with
weights (`"math,format"` with `format_weight`). `soft_overlong_penalty` is DAPO's length penalty,
added to the total reward by the trainer when `overlong_buffer > 0`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ict.answers.extraction import tail
from ict.answers.grading import (
    GradingRules,
    grade_choice,
    grade_math_batch,
    grade_number,
    grade_reasoning_gym,
)
from ict.core.errors import UsageError

if TYPE_CHECKING:
    from ict.core.problems import Problem

RewardFunction = Callable[[str, "Problem"], float]
BatchRewardFunction = Callable[[Sequence[str], Sequence["Problem"]], list[float]]
REWARDS: dict[str, RewardFunction] = {}

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


def register_reward(name: str) -> Callable[[RewardFunction], RewardFunction]:
    """Decorator: register `fn(completion, problem) -> float` under `name`."""

    def decorator(function: RewardFunction) -> RewardFunction:
        REWARDS[name] = function
        return function

    return decorator


def reasoning_gym_reward(completion: str, problem: Problem, extraction: str = "last_number") -> float:
    """The reasoning-gym task's score of the strictly extracted answer (0 when none)."""
    return grade_reasoning_gym(problem, completion, extraction).score


@register_reward("reasoning_gym")
def _reasoning_gym_last_number(completion: str, problem: Problem) -> float:
    return reasoning_gym_reward(completion, problem, "last_number")


@register_reward("reasoning_gym_tag")
def _reasoning_gym_tag(completion: str, problem: Problem) -> float:
    return reasoning_gym_reward(completion, problem, "tag")


@register_reward("math")
def math_reward(completion: str, problem: Problem, timeout_seconds: float = 5.0) -> float:
    """1 if math-verify judges the completion's answer equal to the gold, else 0 (lenient
    extraction: a bare final number counts)."""
    return math_rewards([completion], [problem], timeout_seconds)[0]


def math_rewards(completions: Sequence[str], problems: Sequence[Problem],
                 timeout_seconds: float = 5.0) -> list[float]:
    """`math_reward` of each paired completion and problem, as one batch of checks spread over
    math-verify's worker processes (`Reward.score` grades a rollout this way)."""
    rules = GradingRules(math_extraction="lenient", timeout_seconds=timeout_seconds)
    return [verdict.score for verdict in grade_math_batch(list(zip(problems, completions, strict=True)), rules)]


@register_reward("choice")
def choice_reward(completion: str, problem: Problem) -> float:
    """1 if the option letter the completion commits to is the gold letter."""
    return grade_choice(problem, completion).score


@register_reward("last_number")
def last_number_reward(completion: str, problem: Problem) -> float:
    """1 if the last number in the completion equals the (numeric) gold answer."""
    return grade_number(problem, completion).score


@register_reward("format")
def format_reward(completion: str, problem: Problem) -> float:
    """1 if the completion contains exactly one non-empty `<answer>...</answer>` pair."""
    matches = _ANSWER_TAG.findall(tail(completion))
    return float(len(matches) == 1 and bool(matches[0].strip()))


@dataclass
class Reward:
    """A weighted sum of registered rewards. The first is the task reward; `score` also returns
    it alone, for the accuracy metric (correct = task reward >= 1). ``batch_functions``: function
    index -> the same reward over a whole rollout at once (`math`: one batch of checks over the
    worker pool, not one check at a time)."""

    names: list[str]
    weights: list[float]
    functions: list[RewardFunction]
    batch_functions: dict[int, BatchRewardFunction] = field(default_factory=dict)

    def score(self, completions: Sequence[str], problems: Sequence[Problem]) -> tuple[
            list[float], list[float]]:
        """(total rewards, task rewards) for paired completions and problems."""
        pairs = list(zip(completions, problems, strict=True))  # (and its check of the lengths)
        columns = [batch(completions, problems) if (batch := self.batch_functions.get(index))
                   else [function(completion, problem) for completion, problem in pairs]
                   for index, function in enumerate(self.functions)]
        for name, column in zip(self.names, columns, strict=True):
            for value in column:
                _check_reward_value(name, value)
        rows = list(zip(*columns, strict=True)) if columns else [()] * len(pairs)
        totals = [sum(weight * value for weight, value in zip(self.weights, values, strict=True))
                  for values in rows]
        return totals, [values[0] for values in rows]


def _check_reward_value(name: str, value: object) -> None:
    """A one-line ValueError naming reward `name` when its `value` for a completion is no finite
    number (a bool counts as 0 or 1): a plugin's ``None`` was a TypeError naming no reward, and its
    NaN made the group's advantages NaN, an update skipped in silence (then "diverged")."""
    try:
        number = float(value) if not isinstance(value, str | bytes) else math.nan  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if not math.isfinite(number):
        raise ValueError(f"reward {name!r} returned {value!r:.40} for a completion; a reward must be a finite number")


def soft_overlong_penalty(lengths: Sequence[int], max_length: int, buffer: int,
                          factor: float = 1.0) -> list[float]:
    """DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13; TRL's
    `trl.rewards.get_soft_overlong_punishment`, with verl's `overlong_buffer.penalty_factor`).

    For a completion of ``|y|`` tokens (EOS included), ``L_max = max_length`` and
    ``L_cache = buffer`` (``0 < buffer <= max_length``), times ``factor``::

        0                                  if |y| <= L_max - L_cache
        ((L_max - L_cache) - |y|) / L_cache  if L_max - L_cache < |y| <= L_max
        -1                                 if |y| > L_max

    So the penalty falls linearly from 0 to ``-factor`` over the last ``buffer`` tokens before
    the cap; with the generation cap as ``L_max``, a completion cut off at the cap gets
    ``-factor``. Added to the task reward (it never rewards short completions)."""
    if not 0 < buffer <= max_length:
        raise ValueError(f"overlong buffer must be in 1..{max_length} (the length cap), got {buffer}")
    start = max_length - buffer
    penalties = []
    for length in lengths:
        if length <= start:
            penalties.append(0.0)
        elif length <= max_length:
            penalties.append(factor * (start - length) / buffer)
        else:
            penalties.append(-factor)
    return penalties


def default_reward_name(kind: str, extraction: str = "last_number") -> str:
    """The task reward for a problem kind."""
    if kind == "reasoning_gym":
        return "reasoning_gym" if extraction == "last_number" else "reasoning_gym_tag"
    return {"math": "math", "choice": "choice"}.get(kind, "math")


def build_reward(spec: str, problem_kind: str, extraction: str = "last_number",
                 format_weight: float = 0.0, verify_timeout: float = 5.0) -> Reward:
    """Reward from a comma-separated spec (`auto` = the default task reward for the problem
    kind), plus `format` with `format_weight` when that is > 0. Task rewards have weight 1."""
    names = [name.strip() for name in spec.split(",") if name.strip()] or ["auto"]
    names = [default_reward_name(problem_kind, extraction) if name == "auto" else name
             for name in names]
    weights = [1.0] * len(names)
    if format_weight > 0:
        if "format" in names:
            weights[names.index("format")] = format_weight
        else:
            names.append("format")
            weights.append(format_weight)
    functions: list[RewardFunction] = []
    batch_functions: dict[int, BatchRewardFunction] = {}
    for name in names:
        if name not in REWARDS:
            raise UsageError(f"unknown reward {name!r}; registered: {', '.join(sorted(REWARDS))}")
        function = REWARDS[name]
        if name == "math":
            def function(completion: str, problem: Problem, _t: float = verify_timeout) -> float:
                return math_reward(completion, problem, _t)

            def batch(completions: Sequence[str], problems: Sequence[Problem], _t: float = verify_timeout) -> list[float]:
                return math_rewards(completions, problems, _t)
            batch_functions[len(functions)] = batch
        functions.append(function)
    return Reward(names, weights, functions, batch_functions)

"""The one problem type of training and evaluation, and the one way prompts are rendered.

A `Problem` is a prompt with a verifiable gold answer. Training data (`ict.data.training_data`) and evaluation
benchmarks (`ict.data.benchmarks`) both produce them, and both render multiple-choice options the same
way (`render_options`: ``A) first``), so a model trained on one is tested on the same format.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

_PLACEHOLDER = re.compile(r"\{question\}|\{options\}")

ProblemKind = Literal["math", "choice", "reasoning_gym"]
OPTION_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
"""The option alphabet of multiple-choice problems (index 0 is ``A``)."""

MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
MATH_TEMPLATE = "{question}\n" + MATH_INSTRUCTION
"""Prompt templates: ``{question}`` and ``{options}`` are replaced literally (no str.format, so
LaTeX braces need no escaping)."""
REASONING_GYM_TEMPLATES = {"tag": MATH_TEMPLATE, "last_number": "{question}"}
"""Reasoning-gym prompt by answer extraction: ``tag`` asks for a ``\\boxed{}`` answer; ``last_number``
is the bare question, the prompt `ict train` uses with its default ``last_number`` reward."""
CHOICE_TEMPLATE = (
    "{question}\n\n{options}\n\n"
    "Answer with the letter of the correct option. Please reason step by step, and put the "
    "letter of your final answer within \\boxed{}."
)


@dataclass
class Problem:
    """One verifiable problem.

    prompt: what the model sees (text, or a list of chat messages).
    answer: the gold answer: bare LaTeX (math), an option letter (choice), or the task's
        reference answer (reasoning_gym; scoring uses ``scorer`` and ``entry``).
    kind: ``math``, ``choice`` or ``reasoning_gym`` (picks the grader and the default reward).
    choices: the options of a multiple-choice problem.
    scorer: for reasoning-gym problems, the dataset whose ``score_answer`` judges answers.
    entry: the raw record (reasoning-gym entry, file or hub row).
    benchmark, index, problem_id, question: where an evaluation problem comes from.
    """

    prompt: str | list[dict[str, str]]
    answer: str
    kind: str
    choices: list[str] | None = None
    scorer: Any = None
    entry: dict[str, Any] = field(default_factory=dict)
    benchmark: str = ""
    index: int = 0
    problem_id: str = ""
    question: str = ""


def render_template(template: str, question: str, options: str = "") -> str:
    """Fill ``{question}`` and ``{options}`` in a prompt template (literal replacement, in one pass:
    a question or option that itself holds ``{question}`` or ``{options}`` is kept as written)."""
    values = {"{question}": question, "{options}": options}
    return _PLACEHOLDER.sub(lambda match: values[match.group(0)], template)


def render_options(options: Sequence[str]) -> str:
    """``A) first\\nB) second ...``"""
    return "\n".join(f"{OPTION_LETTERS[i]}) {str(option).strip()}" for i, option in enumerate(options))


def choice_prompt(question: str, options: Sequence[str]) -> str:
    """The multiple-choice prompt of training and evaluation alike (``CHOICE_TEMPLATE``)."""
    return render_template(CHOICE_TEMPLATE, question.strip(), render_options(options))

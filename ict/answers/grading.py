"""The one grader of training rewards and evaluation: which answer rule judges which problem.

Rules, picked by ``Problem.kind`` (`grade_batch`) or by name (the reward functions):

* ``math`` (`grade_math_batch`): math-verify on the completion against the normalised gold,
  under a hard time bound per check in a worker process (`ict.answers.verify`); ``math_extraction``
  ``anchored`` (only ``\\boxed{}`` or "the answer is"-style anchors) or ``lenient``;
* ``choice`` (`grade_choice`): the option letter the completion commits to
  (`ict.answers.extraction.extract_choice_letter`) is the gold letter or names an option worded
  as the gold option;
* ``reasoning_gym`` (`grade_reasoning_gym`): the task's own scorer on the strictly extracted
  answer; ``answer_extraction`` ``last_number`` (the last number in the completion) or ``tag``
  (the last ``<answer></answer>`` pair, else the last ``\\boxed{}``). The scorer never sees the
  whole text, so a verbose answer earns no partial credit; its own rule still gives an extracted
  answer that contains the gold ``len(gold) / len(answer)`` (0.5 for ``14`` against ``4``), which
  is the training reward (``correct`` stays ``score >= 1``); a scorer that raises scores 0;
* ``number`` (`grade_number`): the last number in the completion equals the numeric gold.

A `Verdict`'s ``score`` is the raw score (1 or 0, or reasoning-gym's float in [0, 1]) and is the
training reward; ``correct`` is ``score >= 1`` and is what evaluation counts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from ict.answers.extraction import (
    extract_choice_letter,
    extract_last_number,
    extract_tagged_answer,
    number_value,
)
from ict.answers.gold import strip_math_delimiters
from ict.answers.verify import (
    DEFAULT_TIMEOUT_SECONDS,
    MATH_EXTRACTIONS,
    MathVerifier,
    default_verifier,
)
from ict.core.errors import UsageError
from ict.core.metrics import answer_key
from ict.core.problems import OPTION_LETTERS, Problem

ANSWER_EXTRACTIONS = ("tag", "last_number")
"""How a reasoning-gym answer is found (see the module docstring)."""
GRADING_RULES_VERSION = 11
"""The version of the answer-grading rules (`ict.answers`: extraction, gold, verify, grading): bump
it when any verdict may change (3: plain-text algebra after an answer anchor read whole; in
maj@n, math answers that are numbers of equal value vote together; 4: a listing of options reads
no option, a reason after the answer's option ends its clause, and a math hedge `3 or 4`, `either
3 or 4`, `3 \\lor 4`, a pair `3 and 4` and a percent hedge `62.5% or 40%` are read as both
alternatives, not one; 5: worded hedges `3 or maybe 4`, `3 and/or 4`, `3, maybe 4`, `3 (or 4)`,
hedges with units `3 hours or 4 hours` (in a box's text too) and hedges in an answer tag or
`####` line read as both alternatives, an anchored range `between 3 and 4` as no number, a
reason right after a boxed or tagged option ends it, and a gold listing percents as the list;
6: a bare range `3 to 4` reads no number, and options a reason names together count once;
7: a subscript in a text wrapper `v_{\\text{max}}` is read plain, and a letter of an option
worded as the gold option is right; 8: a box's closing full stop `\\boxed{3.}` is dropped, a
subscripted `E`, `e` or `I` is a symbol, an option in math delimiters `$687$` is worded as `687`,
an anchored number before a condition in math `5 when $x = 2$` is the answer, a hedged option `A,
or maybe B` commits to none, an anchored piecewise answer `1 if $n$ is odd and 0 if ...` is a
hedge, an anchored number before a reason or a bracketed condition `3, since $x = 4$ fails` is
the answer, and after an anchor `- 5`, `2√3` and `2:30` are read whole, `15: 3*5` as 15; 9: a letter in
math delimiters or brackets `$(C)$`, `$\\textbf{(C)}$` or after "choice" is the answer, a last
box after "not" `\\boxed{B}, not \\boxed{C}` is none, after an anchor a rejected answer `not 5,
it is 6` is dropped, a piecewise answer in words is a hedge, `3:45 pm` and `2 in $10$ years`
are read whole, a power after a box `\\boxed{2}^{2}` joins it, and `#### .5` keeps its point;
10: after an anchor a rejected answer before a reason or in math `not $5$, but $6$` and after
"isn't" is dropped, a rejected letter `not A but B` too, a time with words after it `10:30 a.m.
on Monday` is read whole and a boxed time on the hour `2:00 pm` is its hour too, `.5 dollars`
reads 0.5, a dash range `3–5` is a range, and a letter in a formula, relation or LaTeX hedge
`$C \\cup D$`, `A \\to B`, `B \\lor C` is no option, and a gold stored as a list `["1", "2"]`
reads as the list `1, 2`; 11: the last number after a digit or letter `10-2` is 2 and after
an en dash or U+2212 minus `–5` is -5 (last numbers that are not integers agree within 1e-9
relative only), `#### .5 or .75 dollars` is a hedge, after "no longer" or before a dash `not 5 —
it's 6` the rejected answer or letter is dropped, odds `1 in 6` read 1/6, two plain numbers with
an operation in words `0.5 times 4` read its value, and an amount in two units `3 hours and 30
minutes`, boxed too, reads in either unit).
`ict eval` records it among each verdict's grading settings and re-grades stored completions
graded under another (records older than it: unknown, older rules); results.json names it, and
`ict compare`'s report names evaluations graded under other rules."""


@dataclass(frozen=True)
class GradingRules:
    """The grading options shared by `ict train` (rewards) and `ict eval`."""

    answer_extraction: str = "tag"
    """Reasoning-gym answers: ``tag`` or ``last_number``."""
    math_extraction: str = "anchored"
    """Math answers: ``anchored`` or ``lenient`` (`ict.answers.verify.MathExtraction`)."""
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    """Hard time bound per math check in seconds (over it: incorrect, status ``timeout``)."""

    def __post_init__(self) -> None:
        if self.answer_extraction not in ANSWER_EXTRACTIONS:
            raise UsageError(f"unknown answer extraction {self.answer_extraction!r} (use "
                             f"{' or '.join(ANSWER_EXTRACTIONS)})")
        if self.math_extraction not in MATH_EXTRACTIONS:
            raise UsageError(f"unknown math extraction {self.math_extraction!r} (use "
                             f"{' or '.join(MATH_EXTRACTIONS)})")


@dataclass
class Verdict:
    """Grade of one completion. ``score``: the raw score (1/0, or reasoning-gym's float);
    ``status``: ``ok``, ``no_answer``, ``timeout``, ``error`` or ``bad_gold``."""

    correct: bool
    extracted: str | None
    status: str
    score: float


def _binary(correct: bool, extracted: str | None) -> Verdict:
    return Verdict(correct, extracted, "ok" if extracted is not None else "no_answer",
                   float(correct))


def extract_answer(completion: str, extraction: str) -> str | None:
    """A reasoning-gym answer by ``extraction`` (``last_number`` or ``tag``)."""
    if extraction == "last_number":
        return extract_last_number(completion)
    if extraction == "tag":
        return extract_tagged_answer(completion)
    raise UsageError(f"unknown answer extraction {extraction!r} (use "
                     f"{' or '.join(ANSWER_EXTRACTIONS)})")


def grade_reasoning_gym(problem: Problem, completion: str, extraction: str = "tag") -> Verdict:
    """The task's scorer (``problem.scorer.score_answer``) on the extracted answer."""
    if problem.scorer is None:
        raise UsageError("reasoning-gym grading needs reasoning-gym problems (with a scorer)")
    extracted = extract_answer(completion, extraction)
    if extracted is None:
        return Verdict(False, None, "no_answer", 0.0)
    try:
        score = float(problem.scorer.score_answer(answer=extracted, entry=problem.entry))
    except Exception:  # noqa: BLE001 - a scorer failing on odd input is a wrong answer
        return Verdict(False, extracted, "error", 0.0)
    return Verdict(score >= 1.0 - 1e-9, extracted, "ok", score)


def grade_choice(problem: Problem, completion: str) -> Verdict:
    """The committed option letter equals the gold letter, or names an option of the gold option's
    text (stripped, math delimiters too: `_option_texts`): MMLU-STEM lists ``687`` as both A and B
    for ``2,396 - 1,709``, gold A."""
    if not problem.choices:
        raise UsageError("choice grading needs problems with choices (set choices_field)")
    letter = extract_choice_letter(completion, len(problem.choices))
    options = _option_texts(problem)
    correct = (letter is not None and problem.answer in options
               and options[letter] == options[problem.answer])
    return _binary(correct, letter)


def _option_texts(problem: Problem) -> dict[str, str]:
    """Each option letter's option text (`grade_choice`, `vote_key`), stripped, outer math delimiters
    too (`ict.answers.gold.strip_math_delimiters`): ``$687$``, ``\\(687\\)`` and ``687`` are one."""
    return dict(zip(OPTION_LETTERS, (strip_math_delimiters(str(option)).strip()
                                     for option in problem.choices or ()), strict=False))


def _numbers_equal(left: str, right: str) -> bool:
    """Do two numbers' texts name one number? Two integers exactly (`number_value`: 1e-9 of 10**9
    is one unit, and a float rounds integers beyond 2**53); other numbers within 1e-9 relative
    (``0.1000000000001`` is 0.1), none absolute (within 1e-9 absolute, ``1.005e-07`` was a gold
    ``1e-07`` and ``5e-10`` a gold ``1e-10``); a text that is no number as text."""
    values = [number_value(text) for text in (left, right)]
    if all(value is not None and value.denominator == 1 for value in values):
        return values[0] == values[1]
    try:
        return math.isclose(float(left.replace(",", "")), float(right.replace(",", "")),
                            rel_tol=1e-9)
    except ValueError:
        return left.strip() == right.strip()


def grade_number(problem: Problem, completion: str) -> Verdict:
    """The last number in the completion equals the (numeric) gold answer."""
    number = extract_last_number(completion)
    return _binary(number is not None and _numbers_equal(number, problem.answer), number)


def grade_math_batch(items: Sequence[tuple[Problem, str]], rules: GradingRules = GradingRules(),
                     verifier: MathVerifier | None = None) -> list[Verdict]:
    """math-verify on every ``(problem, completion)`` pair, as one batch of bounded checks."""
    verifier = verifier or default_verifier()
    verdicts = verifier.check_batch(
        [(completion, problem.answer) for problem, completion in items], rules.timeout_seconds,
        rules.math_extraction,  # type: ignore[arg-type]
    )
    return [Verdict(v.correct, v.extracted, v.status, float(v.correct)) for v in verdicts]


def grade_batch(items: Sequence[tuple[Problem, str]], rules: GradingRules = GradingRules(),
                verifier: MathVerifier | None = None) -> list[Verdict]:
    """Grade ``(problem, completion)`` pairs by each problem's ``kind`` (math checks run as one
    batch). Returns one `Verdict` per pair, in order."""
    verdicts: list[Verdict | None] = [None] * len(items)
    math_indices = [i for i, (problem, _) in enumerate(items) if problem.kind == "math"]
    if math_indices:
        graded = grade_math_batch([items[i] for i in math_indices], rules, verifier)
        for index, verdict in zip(math_indices, graded, strict=True):
            verdicts[index] = verdict
    for index, (problem, completion) in enumerate(items):
        if problem.kind == "math":
            continue
        if problem.kind == "choice":
            verdicts[index] = grade_choice(problem, completion)
        elif problem.kind == "reasoning_gym":
            verdicts[index] = grade_reasoning_gym(problem, completion, rules.answer_extraction)
        else:
            raise UsageError(f"no grading rule for problem kind {problem.kind!r}")
    return [verdict for verdict in verdicts if verdict is not None]


def grade(problem: Problem, completion: str, rules: GradingRules = GradingRules(),
          verifier: MathVerifier | None = None) -> Verdict:
    """`grade_batch` of one pair."""
    return grade_batch([(problem, completion)], rules, verifier)[0]


_SPACED_DIGITS = re.compile(r"[\d,]\s+[\d,]")
"""Digits or a comma on both sides of a space: ``2, 100`` and ``1 2`` list numbers, and math-verify
does not read ``1 000`` as 1000 (a thousands comma has no space beside it)."""


def vote_key(problem: Problem, extracted: str | None) -> str | None:
    """The key one sample's extracted answer votes with in maj@n (`ict.core.metrics.
    majority_vote_correct`): a math answer written as a plain number or a fraction of two integers
    votes for its exact value (``18.50``, ``18.5``, ``37/2`` and ``\\frac{37}{2}`` are one vote;
    `number_value`); a choice letter for the first letter of an option worded as its option
    (`grade_choice`: MMLU-STEM lists 687 as A and B, one answer, one vote); any other answer, and
    every reasoning-gym answer, for its string with whitespace removed. ``None``: no answer. Digits
    split by a space (``2, 100``, ``1 000``, `_SPACED_DIGITS`) are no number: `number_value`, which
    drops spaces, read 2100 and 1000, and they voted with ``2100`` and ``1000``, which math-verify
    grades otherwise."""
    if (problem.kind == "math" and not _SPACED_DIGITS.search(extracted or "")
            and (value := number_value(extracted)) is not None):
        return f"={value}"
    key = answer_key(extracted)
    if problem.kind == "choice" and key in (options := _option_texts(problem)):
        return next(letter for letter, text in options.items() if text == options[key])
    return key

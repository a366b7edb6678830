"""Answers in words or typography that math-verify misreads, written as it reads them: a minus
typed as a dash (`spell_minus`), odds (`odds`), arithmetic in words (`arithmetic_in_words`) and a
quantity in two units (`two_unit_amounts`). Pure string functions; `ict.answers.readings` applies them to a
completion's readings."""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

from ict.answers.extraction import box_contents

_DASH_BEFORE_NUMBER = re.compile(r"[\u2212\u2013](?=\.?\d|\\[^\W\d_])")  # -5, -.5, -\frac{1}{2}


def spell_minus(text: str) -> str:
    """``text`` with the minus sign U+2212 written ``-`` and an en dash U+2013 that opens a number or
    a command (``\u2013\\frac{1}{2}``) too, unless the last character before it that is no space is a digit (``3\u20135``, ``3 \u2013 5``:
    a range, see `ict.answers.readings._RANGE`; after a letter or a bracket, ``x\u20135``, it subtracts,
    as ``-`` does): math-verify reads ``The answer is \u22125`` and ``\\boxed{\u20135}`` as no number.
    One scan (each dash looks back over the spaces before it, a run only once)."""
    pieces, done = [], 0
    for dash in _DASH_BEFORE_NUMBER.finditer(text):
        index = dash.start() - 1
        while index >= 0 and text[index].isspace():
            index -= 1
        if dash[0] == "\u2013" and index >= 0 and text[index].isdigit():
            continue
        pieces += [text[done:dash.start()], "-"]
        done = dash.end()
    return "".join(pieces) + text[done:]


_MATH_INTEGER = r"(?:(\d+)|\$\s*(\d+)\s*\$|\\\(\s*(\d+)\s*\\\))"  # 6, $6$ or \(6\)
_ODDS = re.compile(
    rf"(?:(?i:an?)\s+)?(\d+)\s+in\s+{_MATH_INTEGER}(?:\s+(?i:chances?|odds))?", re.ASCII)


def odds(value: str) -> str | None:
    """The probability an answer in odds is, ``\\frac{a}{b}``: ``1 in 6``, ``1 in $6$``, ``a 1 in 6
    chance`` (whole, ``a <= b``, ``b > 0``); math-verify read ``1 in 6`` as 1 and ``1 in $6$`` as 6,
    where the benchmarks' golds for a chance are fractions (MATH's ``\\frac{1}{6}``). None for
    anything else: a number in a time, ``2 in 10 years`` (`ict.answers.readings` reads 2), or in
    a set, ``7 in \\(\\mathbb{Z}_9\\)``, and ``5 in 2``."""
    found = _ODDS.fullmatch(value.strip())
    if found is None:
        return None
    first, second = int(found[1]), int(found[2] or found[3] or found[4])
    return f"\\frac{{{first}}}{{{second}}}" if 0 < second and first <= second else None


_OPERAND = r"(\d+(?:\.\d+)?(?:/\d+)?|\.\d+)"  # 4, 0.5, 1/2, .5
_OPERATOR_WORDS = {"times": "\\times", "multiplied by": "\\times", "divided by": "\\div", "plus": "+",
                   "minus": "-"}
_ARITHMETIC = re.compile(
    rf"{_OPERAND}\s+((?i:times|multiplied\s+by|divided\s+by|plus|minus))\s+{_OPERAND}"
    r"(?:\s+[^\W\d_]+(?:/[^\W\d_]+)?){0,2}", re.ASCII)


def arithmetic_in_words(value: str) -> str | None:
    """Two plain numbers and an operation in words, optionally a unit of one or two words after
    them, written in LaTeX: ``0.5 times 4 dollars`` -> ``0.5 \\times 4``, ``12 divided by 3`` ->
    ``12 \\div 3``, ``3 plus 4`` (math-verify read 0.5, 12 and 3: the first number, wrong for a gold
    2, 4 or 7 and right for 0.5, 12 or 3; ``\\boxed{0.5 \\times 4}`` is 2 to it). None for anything
    else: ``2 times $\\pi$``, ``3 times``, ``2 times 3 = 6``."""
    found = _ARITHMETIC.fullmatch(value.strip())
    if found is None:
        return None
    return f"{found[1]} {_OPERATOR_WORDS[' '.join(found[2].lower().split())]} {found[3]}"


_UNIT_PAIRS = [  # (larger unit, smaller unit, smaller units in one larger), singular, plural and short
    (r"hours?|hrs?|h", r"minutes?|mins?", 60), (r"minutes?|mins?", r"seconds?|secs?|s", 60),
    (r"days?", r"hours?|hrs?|h", 24), (r"weeks?", r"days?", 7), (r"years?", r"months?", 12),
    (r"feet|foot|ft", r"inch(?:es)?", 12), (r"pounds?|lbs?", r"ounces?|oz", 16),
    (r"dollars?", r"cents?", 100), (r"meters?|metres?|m", r"centimeters?|centimetres?|cm", 100),
]
_AMOUNT = r"(\d+(?:\.\d+)?)"
_TWO_UNITS = [(re.compile(rf"{_AMOUNT}\s*(?:{larger})\.?,?\s+(?:(?i:and)\s+)?{_AMOUNT}\s*(?:{smaller})\.?",
                          re.ASCII | re.IGNORECASE), factor) for larger, smaller, factor in _UNIT_PAIRS]


def _number_text(value: Fraction) -> str:
    """``value`` as a plain decimal when it has one (``3.5``, ``210``), else ``\\frac{p}{q}``."""
    if value.denominator == 1:
        return str(value.numerator)
    decimal = Decimal(value.numerator) / Decimal(value.denominator)
    if Fraction(decimal) == value:
        return format(decimal, "f")
    return f"\\frac{{{value.numerator}}}{{{value.denominator}}}"


def two_unit_amounts(value: str) -> list[str] | None:
    """A quantity in two units, ``3 hours and 30 minutes``, ``5 feet 6 inches``, ``2 min 30 s``
    (`_UNIT_PAIRS`), as the one number it is in each: ``["3.5", "210"]`` (hours, minutes); one
    quantity, not a hedge, so a gold in either unit is right (GSM8K's golds for a time are in the
    unit the question asks: 215 for "how many minutes"). math-verify read its first number, 3,
    wrong for both. None for anything else."""
    for pattern, factor in _TWO_UNITS:
        found = pattern.fullmatch(value.strip())
        if found is not None:
            larger, smaller = Fraction(found[1]), Fraction(found[2])
            return [_number_text(larger + smaller / factor), _number_text(larger * factor + smaller)]
    return None


_BOX_OPEN = re.compile(r"\\boxed\s*\{")
_TEXT_IN_BOX = re.compile(r"\\(?:text|mathrm|textrm|mbox)\s*\{([^{}]*)\}|\\[ ,;:]|~")  # \text{ hours}, \,


def two_unit_box_readings(text: str) -> list[str]:
    """``text``, or with a box that holds a quantity in two units (``\\boxed{2 \\text{ hours and } 30
    \\text{ minutes}}``: `two_unit_amounts` of its content, text wrappers and LaTeX spaces read as
    spaces) one reading for each of its numbers (``\\boxed{2.5}``, ``\\boxed{150}``) in its place:
    math-verify read the box's first number, 2. The boxes are found in one pass
    (`ict.answers.extraction.box_contents`)."""
    for found, content in box_contents(text, _BOX_OPEN):
        plain = _TEXT_IN_BOX.sub(lambda piece: f" {piece[1] or ''} ", content) if content is not None else None
        amounts = two_unit_amounts(" ".join(plain.split())) if plain is not None and len(plain) <= 200 else None
        if amounts is not None:
            close = found.end() + len(content)  # type: ignore[arg-type]
            return [f"{text[:found.end()]}{amount}{text[close:]}" for amount in amounts]
    return [text]

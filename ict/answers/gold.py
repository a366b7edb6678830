"""Gold answers: every published format turned into one bare LaTeX answer.

`normalize_gold`: ``"#### 1,234"`` -> ``"1234"``, ``"['$2$']"`` -> ``"2"``, ``27.0`` -> ``"27"``,
a Minerva solution -> its last ``\\boxed{}``. `ict.answers.verify`'s worker wraps the result as
``$<gold>$`` before parsing (a bare ``1 - \\sqrt{2}`` would otherwise parse as ``1``).
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Sequence
from typing import Any, Literal

from ict.answers.extraction import BOXED_COMMANDS, extract_boxed_answer

# --------------------------------------------------------------------------------------------
# Gold answers
# --------------------------------------------------------------------------------------------

GoldFormat = Literal["latex", "gsm8k", "list", "number", "boxed_solution", "auto"]


# sentence punctuation after a closing math delimiter: "$\\{1\\}$." (not part of the answer)
_TRAILING_PUNCTUATION = re.compile(r"((?<!\\)\$|\\\)|\\\])\s*[.,;]+$")


def strip_math_delimiters(text: str) -> str:
    """``"$x$"`` -> ``"x"`` (also ``$$``, ``\\(\\)``, ``\\[\\]``); a ``.``, ``,`` or ``;`` after the
    closing delimiter is dropped first."""
    text = _TRAILING_PUNCTUATION.sub(r"\1", text.strip())
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
            inner = text[len(left) : len(text) - len(right)].strip()
            if left == "$" and re.search(r"(?<!\\)\$", inner):
                continue  # "$a$, $b$" is two formulas, not one; "$\\$5$" is one
            return inner
    return text


def gold_from_gsm8k(answer_text: str) -> str:
    """``"... #### 1,234"`` -> ``"1234"`` (text after the last ``####``, commas and ``$`` removed)."""
    if "####" not in answer_text:
        raise ValueError(f"GSM8K answer has no '####' marker: {answer_text[-80:]!r}")
    final = answer_text.rsplit("####", 1)[1].strip()
    return final.replace(",", "").replace("$", "").strip()


def gold_from_number(value: float | int | str) -> str:
    """``27.0`` / ``"27.0"`` -> ``"27"``; non-integral numbers keep their shortest repr (``"4.25"``)."""
    if isinstance(value, str):
        text = value.strip().replace(",", "")
        try:
            number = float(text)
        except ValueError:
            return value.strip()
    elif isinstance(value, int) and not isinstance(value, bool):  # exact: float() overflows past ~1e308
        return str(value)
    else:
        number = float(value)
        text = repr(value)
    if math.isfinite(number) and number == int(number) and abs(number) < 1e15:
        return str(int(number))
    return text


MAX_LIST_LITERAL_CHARS = 10_000


def list_literal(text: str) -> list[str] | None:
    """The strings of ``text`` when it is a Python list (or tuple) literal of strings, such as
    OlympiadBench's ``"['$2$']"``; else None. LaTeX intervals and sets (``[0, \\infty)``,
    ``[-1, 3]``) are not string lists and give None. ``ast.literal_eval`` evaluates literals
    only (no code), on at most ``MAX_LIST_LITERAL_CHARS`` characters."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")) or len(text) > MAX_LIST_LITERAL_CHARS:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if isinstance(value, list | tuple) and value and all(isinstance(item, str) for item in value):
        return list(value)
    return None


def gold_from_list(value: Sequence[str] | str) -> str:
    """OlympiadBench ``final_answer``: a list (or its Python-literal string) of LaTeX answers like
    ``['$2$']``. Math delimiters are stripped from each element; several elements are joined with
    ``", "`` (a multiple answer, compared as a set/tuple by math-verify)."""
    items: Any = value
    if isinstance(value, str):
        items = list_literal(value) or [value.strip()]
    # "$a$,$b$" inside one element is one answer typeset as several formulas: drop every
    # unescaped "$" (a currency "\\$" stays)
    parts = [re.sub(r"(?<!\\)\$", "", strip_math_delimiters(str(item))).strip() for item in items]
    parts = [part for part in parts if part]
    if not parts:
        raise ValueError(f"empty gold answer list: {value!r}")
    return ", ".join(parts)


def gold_from_boxed_solution(solution: str) -> str:
    """Minerva-style gold: the content of the last ``\\boxed{}`` of the reference solution."""
    boxed = extract_boxed_answer(solution)
    if boxed is None:
        raise ValueError(f"solution has no \\boxed{{}} answer: {solution[-80:]!r}")
    return boxed.replace("$", " ").strip()  # a '$' inside a box is a typesetting slip


def normalize_gold(raw: Any, fmt: GoldFormat = "auto") -> str:
    """One bare LaTeX gold answer from a published format (see module docstring).

    ``fmt``: ``"latex"`` (bare LaTeX, outer ``$`` stripped), ``"gsm8k"``, ``"list"``, ``"number"``,
    ``"boxed_solution"``, or ``"auto"`` (a list, or a string that is a Python list literal of
    strings -> list; text with ``####`` -> gsm8k, text with ``\\boxed`` -> boxed_solution, a
    number -> number, else latex: so ``[0, \\infty)`` and ``[-1, 3]`` stay as they are).
    """
    if fmt == "auto":
        if isinstance(raw, (list, tuple)) or (isinstance(raw, str) and list_literal(raw) is not None):
            fmt = "list"
        elif isinstance(raw, (int, float)):
            fmt = "number"
        elif isinstance(raw, str) and "####" in raw:
            fmt = "gsm8k"
        elif isinstance(raw, str) and any(command in raw for command in BOXED_COMMANDS):
            fmt = "boxed_solution"
        else:
            fmt = "latex"
    if fmt == "gsm8k":
        return gold_from_gsm8k(str(raw))
    if fmt == "list":
        return gold_from_list(raw)
    if fmt == "number":
        return gold_from_number(raw)
    if fmt == "boxed_solution":
        return gold_from_boxed_solution(str(raw))
    if fmt == "latex":
        text = strip_math_delimiters(str(raw))
        if re.fullmatch(r"[-+]?\d+\.0+", text):
            text = text.split(".")[0]
        return text
    raise ValueError(f"unknown gold format {fmt!r}")

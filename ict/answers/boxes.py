"""Rewrites of a box's content that math-verify misreads: a closing full stop (`drop_boxed_full_stop`),
a power written after the box (`boxed_power`) and a number in a text wrapper
(`unwrap_boxed_text_number`). Pure string functions; `ict.answers.readings` applies them to each
reading of a completion."""

from __future__ import annotations

import re

from ict.answers.extraction import LATEX_WRAPPER, box_contents

_BOXED_OPEN = re.compile(r"\\boxed\s*\{")
# a box holding only a number, optionally in parentheses, in a text wrapper: \boxed{\textbf{(073)}}
_BOXED_TEXT_NUMBER = re.compile(rf"(\\boxed\s*\{{\s*){LATEX_WRAPPER}\s*(\(?\d+(?:\.\d+)?\)?)\s*\}}(\s*\}})")
# a full stop that ends a box's content after something other than a point or a backslash: the
# "." of \boxed{3.} (see `drop_boxed_full_stop`)
_FULL_STOP_AT_END = re.compile(r"(?<=[^\s.\\])\s*\.\s*$")
# a power of digits written after a box: the ^2, ^{2}, ^{-3} of \boxed{2}^{2} (see `boxed_power`; not
# \boxed{30}^\circ nor \boxed{2}^{\text{nd}})
_POWER_AFTER_BOX = re.compile(r"\s*\^\s*(\{\s*[-+]?\d+\s*\}|\d)")
_UNSIGNED = re.compile(r"\d+(?:\.\d+)?")  # an unsigned number, raised to a power with no brackets
# a unit that ends a box's content, whose power the one after the box is: the cm of \boxed{25 \text{
# cm}}^2, \boxed{25 cm}^2 (25 cm^2, not 625; see `boxed_power`)
_UNIT_AT_END = re.compile(r"(?:\\(?:text|textrm|mathrm|mbox)\s*\{[^{}]*\}|(?<![\\\w])[^\W\d_]{2,})\s*$")


def drop_boxed_full_stop(text: str) -> str:
    """``text`` with a sentence's full stop written at the end of a box's content dropped:
    ``\\boxed{3.}`` -> ``\\boxed{3}``, ``\\boxed{\\frac{1}{2}.}`` -> ``\\boxed{\\frac{1}{2}}``, ``\\boxed{x
    = 3. }`` -> ``\\boxed{x = 3}``; math-verify's LaTeX parser reads no number in ``3.`` (``\\boxed{3.}``
    was wrong for the gold 3). Not an ellipsis (``\\boxed{1, 2, ...}``), an escaped ``\\.`` or a box
    that is only the point; a box that does not close (`_balanced_group`) is left as it is."""
    pieces, done = [], 0
    for found, content in box_contents(text, _BOXED_OPEN):
        if found.start() < done or content is None:
            continue
        kept = _FULL_STOP_AT_END.sub("", content)
        if kept != content:
            pieces += [text[done:found.end()], kept, "}"]
            done = found.end() + len(content) + 1
    return "".join(pieces) + text[done:]


def boxed_power(text: str) -> str:
    """``text`` with a power of digits written right after a box moved into it: ``\\boxed{2}^{2}`` ->
    ``\\boxed{2^{2}}``, ``\\boxed{10}^3`` -> ``\\boxed{10^{3}}``, any other content in brackets
    (``\\boxed{1+2}^{2}`` -> ``\\boxed{(1+2)^{2}}``); math-verify read the box alone (2,
    right for a gold 2, wrong for 4). Not a degree sign or words (``\\boxed{30}^\\circ``,
    ``\\boxed{2}^{\\text{nd}}``), a degree written ``\\boxed{30}^0``, nor the power of a unit that ends
    the box (``\\boxed{25 \\text{ cm}}^2``: `_UNIT_AT_END`; read 25, not 625); a box that does not
    close (`_balanced_group`) is left as it is."""
    pieces, done = [], 0
    for found, content in box_contents(text, _BOXED_OPEN):
        if found.start() < done or content is None:
            continue
        close = found.end() + len(content) + 1
        power = _POWER_AFTER_BOX.match(text, close)
        # not a unit's power (\boxed{25 \text{ cm}}^2) nor a degree written ^0 (\boxed{30}^0)
        exponent = power[1].strip("{} ") if power is not None else "0"
        if int(exponent) != 0 and not _UNIT_AT_END.search(content):
            base = content if _UNSIGNED.fullmatch(content.strip()) else f"({content})"  # (1+2)^{2}, (-2)^{2}
            pieces += [text[done:found.end()], f"{base}^{{{exponent}}}}}"]
            done = power.end()
    return "".join(pieces) + text[done:]


def unwrap_boxed_text_number(text: str) -> str:
    """``text`` with a number in a text wrapper inside a box unwrapped: ``\\boxed{\\textbf{(073)}}``
    (AoPS's AIME answers) -> ``\\boxed{(073)}``, ``\\boxed{\\text{073}}`` -> ``\\boxed{073}``, both 73;
    math-verify reads ``\\text{073}`` as the text "073", not equal to 73."""
    return _BOXED_TEXT_NUMBER.sub(r"\1\2\3", text)

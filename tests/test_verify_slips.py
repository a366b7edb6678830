"""Slips of a model's writing that the math check read wrong: a full stop inside a box
(``\\boxed{3.}``), Euler's ``e`` and the imaginary ``I`` with a subscript (``E_{1}``, ``I_{0}``), and
an anchored number followed by a condition in math (``The answer is 20 m/s for $v_{max}$``).
Hand-worked golds; both extractions unless said."""

from __future__ import annotations

import pytest
from conftest import assert_graded_in_both_extractions


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    ("\\boxed{3.}", "3", True),  # math-verify read no number in "3.": wrong
    ("so \\boxed{-3.} done", "-3", True),
    ("\\boxed{3.5.}", "3.5", True),
    ("\\boxed{\\frac{1}{2}.}", "\\frac{1}{2}", True),  # anchored: no answer
    ("\\boxed{x = 3. }", "3", True),
    ("<answer>3.</answer>", "3", True),  # the answer tag's box
    ("\\boxed{60\\%.}", "60", True),
    # still wrong: another number, and the point is no decimal point (3. is 3, not 0.3 or 35)
    ("\\boxed{3.}", "4", False),
    ("\\boxed{3.}", "0.3", False),
    ("\\boxed{3.5.}", "35", False),
])
def test_a_full_stop_closing_a_box_is_no_part_of_the_answer(verifier, completion, gold, expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("\\boxed{3.}", "\\boxed{3}"),
    ("a \\boxed{ 3 . } b \\boxed{4.}", "a \\boxed{ 3} b \\boxed{4}"),
    ("\\boxed{\\frac{1}{2}.}", "\\boxed{\\frac{1}{2}}"),
    # left alone: an ellipsis, an escaped point, a lone point, no point at the end, an open box
    ("\\boxed{1, 2, ...}", None),
    ("\\boxed{x\\.}", None),
    ("\\boxed{.}", None),
    ("\\boxed{3.5}", None),
    ("\\boxed{3.", None),
])
def test_drop_boxed_full_stop(text, expected):
    from ict.answers.readings import drop_boxed_full_stop

    assert drop_boxed_full_stop(text) == (text if expected is None else expected)

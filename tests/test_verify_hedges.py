"""Hedges, alternatives and ranges in math answers: ``3 or 4``, ``3 hours or 4 hours``,
``\\boxed{3 \\lor 4}``, ``25%, 50%``, ``between 3 and 4``, ``3 to 4`` and ``3. or 4`` are read as
all their alternatives (or as no number), never as the one a gold may equal. Split from
test_verify_rules.py."""

from __future__ import annotations

import pytest
from conftest import assert_graded_in_both_extractions


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # each was right for the alternative math-verify read (the first after an anchor, the last
    # of \\lor or \\vee): a hedge rewarded
    ("Final answer: 3, or 4", "3", False),
    ("The answer is 3 or 4.", "3", False),
    ("Final answer: 3 \\text{ or } 4", "3", False),
    ("Final answer: 3 \\lor 4", "4", False),
    ("\\boxed{3 \\vee 4}", "4", False),
    ("Final answer: \\boxed{3 \\lor 4}", "4", False),
    ("The answer is x = 3 or x = 4.", "3", False),
    # the alternatives are the answer, as math-verify reads \\boxed{3 \\text{ or } 4}
    ("The answer is 3 or 4.", "3, 4", True),
    ("Final answer: 3 \\lor 4", "\\{3, 4\\}", True),
    ("The answer is x = 3 or x = 4.", "3, 4", True),
    ("Final answer: 3, or 4", "4", False),
    ("The answer is either 3 or 4.", "3", False),     # "either" before them (read 3)
    ("The answer is either 3 or 4.", "3, 4", True),
    ("The answer is 3 (or 4).", "4", False),          # no alternatives: "3 (" (read "3 (, 4)")
    # not alternatives: a word after "or" (read as before, its first number), a plain number
    ("The answer is 3 or more.", "3", True),
    ("The answer is 12.", "12", True),
    ("Final answer: 8,.", "8", True),                 # a dangling comma (was "8,", wrong)
    ("Final answer: 3, 4,", "3, 4", True),
])
def test_alternatives_after_an_anchor_or_as_logical_or_are_read_together(
        verifier, completion, gold, expected):
    """An anchored answer "3 or 4" ("3, or 4", "3 \\text{ or } 4", "3 \\lor 4") was read as 3, and
    math-verify reads "\\lor" and "\\vee" as the last alternative (4): each hedge was rewarded for
    one gold. Alternatives are now read together, as math-verify reads a box holding "3
    \\text{ or } 4": {3, 4}. Hand-checked golds; both extractions."""
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "expected"), [
    ("Final answer: 3, or 4", "Final answer: \\boxed{3 \\text{ or } 4}"),
    ("The answer is 3 or 4.", "The answer is \\boxed{3 \\text{ or } 4}"),
    ("The answer is 2 or 3\\sqrt{2}.", "The answer is \\boxed{2 \\text{ or } 3\\sqrt{2}}"),
    ("Final answer: 3 \\text{ or } 4", "Final answer: \\boxed{3 \\text{ or } 4}"),
    ("The answer is 3 and 4.", "The answer is \\boxed{3 \\text{ or } 4}"),
    ("Final answer: 1, 2, and 3", "Final answer: \\boxed{1, 2 \\text{ or } 3}"),
    ("The answer is 62.5\\% or 40 %.", "The answer is \\boxed{62.5 \\text{ or } 40}"),
    ("The answer is 3 and more.", None),
    ("The answer is band 3.", None),
    ("The answer is either 3 or 4.", "The answer is \\boxed{3 \\text{ or } 4}"),
    ("Final answer: Either x = 3 or x = 4", "Final answer: \\boxed{x = 3 \\text{ or } x = 4}"),
    ("Final answer: [1, 2) or (3, 4]", "Final answer: \\boxed{[1, 2) \\text{ or } (3, 4]}"),
    # left alone: a word in an alternative, math delimiters, "or" inside a word, an empty one
    ("The answer is 3 or more.", None),
    ("The answer is $3$ or $4$.", None),
    ("The answer is for 3.", None),
    ("The answer is 3 or.", None),
    ("The answer is 3 (or 4", None),                   # an alternative that leaves "(" open
    ("The answer is either 3.", None),
    ("The answer is 3 or neither 4.", None),           # "either" only before the first
])
def test_anchor_answer_readings_box_alternatives_together(completion, expected):
    from ict.answers.readings import anchor_answer_readings

    assert anchor_answer_readings(completion) == [completion if expected is None else expected]


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a pair after an anchor was read as its first number: rewarded for one gold
    ("The answer is 3 and 4.", "3", False),
    ("Final answer: 3, and 4", "3", False),
    ("Final answer: 3 \\text{ and } 4", "3", False),
    # ... now as math-verify reads \\boxed{3 \\text{ and } 4}: {3, 4}, right for the two answers
    ("The answer is 3 and 4.", "3, 4", True),
    ("The answer is x = 3 and y = 4.", "x = 3, y = 4", True),
    # a percent in a hedge: math-verify read the list as its last element (40%), a hedge
    # rewarded; now {62.5, 40}
    ("The answer is 62.5% or 40%.", "40%", False),
    ("The answer is 62.5\\% or 40.", "40", False),
    ("The answer is 40 or 62.5%.", "62.5%", False),
    ("\\boxed{62.5\\% \\text{ or } 40\\%}", "40", False),  # the lenient extraction read 40
    ("\\boxed{62.5 \\lor 40%}", "40%", False),
    ("The answer is 62.5% or 40%.", "40, 62.5", True),
    # a percent with no alternatives is read as before
    ("The answer is 62.5%.", "62.5%", True),
    ("\\boxed{40\\%}", "40", True),
])
def test_a_pair_or_a_percent_hedge_is_read_as_both_alternatives(
        verifier, completion, gold, expected):
    """"3 and 4" after an anchor was read as 3, and a hedge holding a percent as its last
    alternative (math-verify reads a list holding a percent so): each was rewarded for one gold.
    Both are now read as the alternatives together. Hand-checked golds; both extractions."""
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "expected"), [
    ("\\boxed{62.5\\% \\text{ or } 40\\%}", "\\boxed{62.5 \\text{ or } 40}"),
    ("so \\boxed{5% \\text{ and } 7 \\%}.", "so \\boxed{5 \\text{ or } 7}."),
    # left as is: no alternatives, no percent, a word, braces other than \\text's
    ("\\boxed{62.5\\%}", None),
    ("\\boxed{3 \\text{ or } 4}", None),
    ("\\boxed{3 and 4}", None),
    ("\\boxed{40\\% \\text{ or more}}", None),
    # a list, braces other than \\text's (the parent left both as they were)
    ("\\boxed{\\frac{1}{2}\\% \\text{ or } 40\\%}", "\\boxed{\\frac{1}{2} \\text{ or } 40}"),
    ("\\boxed{25\\%, 50\\%} and \\boxed {5%,7%}", "\\boxed{25 \\text{ or } 50} and \\boxed {5 \\text{ or } 7}"),
    ("\\boxed{\\boxed{5\\%, 6\\%}}", "\\boxed{\\boxed{5 \\text{ or } 6}}"),  # the inner box's list
    # left as is: a thousands comma, a bracket left open in an element, a box that does not close
    ("\\boxed{1,000\\%}", None),
    ("\\boxed{(25\\%, 50\\%)}", None),
    ("\\boxed{5\\%, 6\\%", None),
])
def test_unpercent_boxed_alternatives_drops_the_percent_signs_of_a_boxed_hedge(completion, expected):
    from ict.answers.readings import _unpercent_boxed_alternatives

    assert _unpercent_boxed_alternatives(completion) == (completion if expected is None else expected)


@pytest.mark.parametrize(("completion", "expected"), [
    ("\\boxed{3 \\lor 4}", True), ("\\boxed{3, 4}", True),
    ("\\boxed{4}", False),  # was right: math-verify read the gold as its last alternative
])
def test_a_gold_with_a_logical_or_is_read_as_its_alternatives(verifier, completion, expected):
    """The gold is read as the completion is: ``3 \\lor 4`` is {3, 4}. No shared benchmark gold
    holds ``\\lor`` or ``\\vee``. Both extractions."""
    assert_graded_in_both_extractions(verifier, completion, "3 \\lor 4", expected)


def test_spell_logical_or_writes_lor_and_vee_as_text_or():
    from ict.answers.readings import spell_logical_or

    assert spell_logical_or("\\boxed{3 \\lor 4} and 1\\vee2") == (
        "\\boxed{3 \\text{ or } 4} and 1\\text{ or }2")
    assert spell_logical_or("\\bigvee_i a_i \\veebar \\lorem") == "\\bigvee_i a_i \\veebar \\lorem"


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a hedge with words was read as its first alternative (or, for "and/or", math-verify's
    # "3, /, 4" as 4): rewarded for one gold; now {3, 4}, right for the two answers only
    ("The answer is 3 or maybe 4.", "3", False),
    ("The answer is 3, or possibly 4.", "3", False),
    ("The answer is 3 and/or 4.", "4", False),
    ("The answer is 3 or maybe 4.", "3, 4", True),
    ("The answer is 3 and/or 4.", "3, 4", True),
    # in an answer tag or after "####" the number-and-unit reading took "or" for a unit (3)
    ("<answer>3 or maybe 4</answer>", "3", False),
    ("<answer>3 or 4</answer>", "3", False),
    ("#### 3 or 4", "3", False),
    ("<answer>3 hours or 4 hours</answer>", "3", False),
    ("<answer>2 and 1/2 cups</answer>", "2", False),   # a mixed number, not 2
    ("<answer>62.5% or 40%</answer>", "40%", False),  # the lenient extraction read 40%
    ("<answer>3 or 4</answer>", "3, 4", True),
    ("<answer>62.5% or 40%</answer>", "40, 62.5", True),
    # a number and its unit, a word after "or" with no number: read as before
    ("<answer>18 dollars</answer>", "18", True),
    ("#### 18 dollars", "18", True),
    ("<answer>7 or more</answer>", "7", True),
])
def test_a_hedge_with_words_or_in_an_answer_tag_is_read_as_both_alternatives(
        verifier, completion, gold, expected):
    """Hedges the parent rewarded for one gold ("3 or maybe 4", "3 and/or 4", and any hedge in
    ``<answer>`` or after ``####``) are read as math-verify reads ``\\boxed{3 \\text{ or } 4}``:
    {3, 4}. Hand-checked golds; both extractions."""
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # hedges with units, in brackets, after a comma or with a "?": each was read as one
    # alternative (3 after an anchor or in a box; the last number, 4, for "3? or 4" and in the
    # lenient reading of a "####" line with two words), rewarded for one gold
    ("The answer is 3 hours or 4 hours.", "3", False),
    ("Final answer: 3 cm or 4 cm", "3", False),
    ("The answer is 3 or 4 hours.", "3", False),
    ("The answer is 3 hours, or maybe 4 hours.", "3", False),
    ("\\boxed{3 \\text{ hours or } 4 \\text{ hours}}", "3", False),
    ("#### 3 apples or 4 apples", "4", False),
    ("The answer is 3 (or possibly 4).", "3", False),
    ("The answer is 3 (or 4).", "3", False),
    ("The answer is 3, maybe 4.", "3", False),
    ("The answer is 3 cm, possibly 4 cm.", "3", False),
    ("The answer is 3? or 4", "4", False),
    # ... now {3, 4}, as math-verify reads \\boxed{3 \\text{ or } 4}: right for the two only
    ("The answer is 3 hours or 4 hours.", "3, 4", True),
    ("<answer>3 apples or 4 apples</answer>", "3, 4", True),
    ("#### 3 apples or 4 apples", "3, 4", True),
    ("\\boxed{3 \\text{ hours or } 4 \\text{ hours}}", "3, 4", True),
    ("\\boxed{3 \\text{ or possibly } 4}", "3, 4", True),
    ("\\boxed{3 \\text{ and/or } 4}", "3, 4", True),
    ("The answer is 3 (or possibly 4).", "3, 4", True),
    # one answer with its unit, a fraction, a quantity in two units: read as before
    ("The answer is 3 hours.", "3", True),
    ("\\boxed{3 \\text{ hours}}", "3", True),
    ("The answer is 3 / 4.", "\\frac{3}{4}", True),
    ("The answer is 2 hours and 30 minutes.", "2.5", True),  # one quantity: 2.5 or 150 (read 2)
    ("The answer is 2 hours and 30 minutes.", "2", False),
    ("\\boxed{2 \\text{ hours and } 30 \\text{ minutes}}", "2", False),
    ("\\boxed{2 \\text{ hours and } 30 \\text{ minutes}}", "150", True),
    ("The answer is 7 or more.", "7", True),
])
def test_a_hedge_with_units_or_a_hedge_word_is_read_as_both_alternatives(
        verifier, completion, gold, expected):
    """A hedge whose alternatives are a number and a unit (``3 hours or 4 hours``, ``3 or 4 cm``,
    in a box's text wrappers too), a hedge in brackets (``3 (or 4)``), after a comma (``3, maybe
    4``) or with a ``?`` is read as its numbers together, {3, 4}. Hand-checked golds; both
    extractions."""
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "expected"), [
    ("The answer is 3 hours or 4 hours.", "The answer is \\boxed{3 \\text{ or } 4}"),
    ("Final answer: 3 or 4.5 cm", "Final answer: \\boxed{3 \\text{ or } 4.5}"),
    ("The answer is 3 (or possibly 4).", "The answer is \\boxed{3 \\text{ or } 4}"),
    ("The answer is 1/2 cup, maybe 3/4 cup.", "The answer is \\boxed{1/2 \\text{ or } 3/4}"),
    ("The answer is 3? or 4", "The answer is \\boxed{3 \\text{ or } 4}"),
    # left alone: two words after a number, a word with no number ("and" joins one quantity in two
    # units: ict.answers.wording.two_unit_amounts)
    ("The answer is 3 or 4 more hours.", None),
    ("The answer is 3 hours or more.", None),
    ("The answer is 3, maybe.", None),
    ("The answer is 3 (and 4).", None),
    # a letter after a number is algebra, no unit: 2x or 3x
    ("The answer is 2 x or 3 x.", "The answer is \\boxed{2 x \\text{ or } 3 x}"),
])
def test_anchor_answer_readings_box_a_hedge_with_units(completion, expected):
    from ict.answers.readings import anchor_answer_readings

    assert anchor_answer_readings(completion) == [completion if expected is None else expected]


@pytest.mark.parametrize(("completion", "expected"), [
    ("#### 3 apples or 4 apples", ["\\boxed{3 \\text{ or } 4}"]),
    ("#### 3 apples and 4 pears", ["#### 3 apples and 4 pears"]),   # a heading, as before
    ("<answer>3 cm or 4 cm</answer>", ["\\boxed{3 \\text{ or } 4}"]),
    ("\\boxed{3 \\text{ cm or } 4 \\text{ cm}}.", ["\\boxed{3 \\text{ or } 4}."]),
    ("\\boxed{3 \\text{ hours}}", ["\\boxed{3 \\text{ hours}}"]),
    # one quantity in two units: its number in each (ict.answers.wording.two_unit_box_readings)
    ("\\boxed{2 \\text{ hours and } 30 \\text{ minutes}}", ["\\boxed{2.5}", "\\boxed{150}"]),
    # a list holding a percent and a word is no list of numbers (units only for "or")
    ("\\boxed{25\\%, 50 people}", ["\\boxed{25\\%, 50 people}"]),
])
def test_completion_readings_of_a_hedge_with_units(completion, expected):
    from ict.answers.readings import completion_readings

    assert completion_readings(completion) == expected


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a range after an anchor was read as its first number (math-verify's plain-text anchor)
    ("The answer is between 3 and 4.", "3", False),
    ("Final answer: from 3 to 4 hours", "3", False),
    ("The answer is between -1.5 and 2, since f(0) > 0", "-1.5", False),
    ("The answer is between 3 and 4.", "4", False),
    # ... and with no "between" or "from", also in an answer tag or after "####" (there the
    # number-and-unit reading took "to" for a unit): each read 3; a ratio 3:4 is no 3 either
    ("The answer is 3 to 4.", "3", False),
    ("The answer is 3 to 4 hours.", "3", False),
    ("Final answer: -2.5 to 4", "-2.5", False),
    ("<answer>3 to 4</answer>", "3", False),
    ("#### 3 to 4", "3", False),
    ("The answer is 3 to 4.", "\\frac{3}{4}", False),
    # an interval math-verify reads as one is kept; "2 to 1" may be a ratio 2:1, which is 2: read
    # as before
    ("The answer is [3, 4].", "[3, 4]", True),
    ("\\boxed{[3, 4]}", "[3, 4]", True),
    ("The answer is 2 to 1.", "2", True),
    ("<answer>2 to 1</answer>", "2", True),
    ("#### 6 to 1.0", "6", True),
    # "to 2 decimal places" gives the precision, no upper bound: read as before (read "3.14 \text{
    # to } 2", equal to no number)
    ("The answer is 3.14 to 2 decimal places.", "3.14", True),
    ("**Answer:** 0.67 to 2 significant figures", "0.67", True),
    ("<answer>0.667 to 3 s.f.</answer>", "0.667", True),
    ("The answer is 12.35 to 2 d.p.", "12.35", True),
    ("The final answer is 1.41 to 3 sig figs.", "1.41", True),
])
def test_a_range_after_an_anchor_is_not_its_first_number(verifier, completion, gold, expected):
    """"between 3 and 4", "from 3 to 4" and "3 to 4" are boxed as ``3 \\text{ to } 4``, which
    math-verify reads as a product equal to no number (as ``\\boxed{3 \\text{ to } 4}``). Both
    extractions."""
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a range written with an en or em dash is a range, as "3 to 5" is (read 3)
    ("The answer is 3\u20135.", "3", False),
    ("The answer is 3\u20135.", "5", False),
    ("The answer is 3 \u2013 5 apples.", "3", False),
    ("The answer is 3.5\u20144.5 hours.", "3.5", False),
    ("#### 3\u20135", "3", False),
    # as before: one number
    ("The answer is 3 apples.", "3", True),
])
def test_a_range_with_a_dash_after_an_anchor_is_not_its_first_number(verifier, completion, gold, expected):
    from ict.answers.readings import anchor_answer_readings

    assert_graded_in_both_extractions(verifier, completion, gold, expected)
    assert anchor_answer_readings("The answer is 3\u20135.") == ["The answer is \\boxed{3 \\text{ to } 5}"]


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a dash after the answer that opens an aside is no range (each read "12 to 3": none, since rules 10)
    ("The answer is 12 \u2014 3 more than 9.", "12", True),
    ("The answer is 16 \u2013 2 less than 18.", "16", True),
    ("The answer is 4 \u2014 2 + 2 = 4.", "4", True),
    ("The answer is 6 \u2014 12 divided by 2.", "6", True),
    # ... nor "1\u20130", which math-verify read as the product 1 to 0, equal to 0
    ("The answer is 1\u20130.", "0", False),
    # a range still is one: up to a larger number, a unit or words after it
    ("The answer is 3 \u2014 5 apples.", "3", False),
    ("The answer is 10\u201315 minutes, give or take.", "10", False),
])
def test_a_dash_before_an_aside_is_no_range(verifier, completion, gold, expected):
    """A dash opens a range only up to a larger number with no arithmetic after it: "12 \u2014 3 more
    than 9" is 12 and an aside (rules 10 read it as a range, equal to no number). Both extractions."""
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a range between bare decimals is a range too (a bare decimal before a unit, ".5 dollars", is
    # also read alone since rules 10, which read ".5 to .75 dollars" as .5)
    ("<answer>.5 to .75 dollars</answer>", "0.5", False),
    ("The answer is .5 to .75 dollars.", "0.5", False),
    ("#### .5 to .75", "0.5", False),
    ("The answer is between .5 and 2 cups.", "0.5", False),
    # as before: a bare decimal and its unit, a ratio to 1
    ("<answer>.5 dollars</answer>", "0.5", True),
    ("<answer>.5 to 1 dollars</answer>", "0.5", True),
])
def test_a_range_between_bare_decimals_is_no_number(verifier, completion, gold, expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "expected"), [
    ("The answer is between 3 and 4.", "The answer is \\boxed{3 \\text{ to } 4}"),
    ("Final answer: From -3 to 4.5 hours", "Final answer: \\boxed{-3 \\text{ to } 4.5}"),
    ("The answer is 3 or maybe 4.", "The answer is \\boxed{3 \\text{ or } 4}"),
    ("The answer is 3, or possibly 4.", "The answer is \\boxed{3 \\text{ or } 4}"),
    ("Final answer: 3 \\text{ or perhaps } 4", "Final answer: \\boxed{3 \\text{ or } 4}"),
    ("The answer is 3 and/or 4.", "The answer is \\boxed{3 \\text{ or } 4}"),
    ("The answer is 3 to 4.", "The answer is \\boxed{3 \\text{ to } 4}"),
    ("Final answer: 10 TO 20 cm", "Final answer: \\boxed{10 \\text{ to } 20}"),
    ("The answer is 3 to 0.5.", "The answer is \\boxed{3 \\text{ to } 0.5}"),   # a ratio 6
    ("The answer is between 0 and 1.", "The answer is \\boxed{0 \\text{ to } 1}"),
    # a word that gives no precision after a range: still a range
    ("The answer is 3 to 4 dpi.", "The answer is \\boxed{3 \\text{ to } 4}"),
    ("The answer is 3 to 4 signals.", "The answer is \\boxed{3 \\text{ to } 4}"),
    ("The answer is 3 to 4 hours, rounded to 2 decimal places.",
     "The answer is \\boxed{3 \\text{ to } 4}"),
    ("The answer is between 2 and 3 decimal places.", "The answer is \\boxed{2 \\text{ to } 3}"),
    # left alone: no number after "between ... and", a ratio, a word that is no hedge, a range
    # after the answer, in its reason
    ("The answer is between x and 4.", None),
    ("The answer is 12, which lies between 3 and 40.", None),
    ("The answer is 2 to 1.", None),
    ("The answer is 5 to 1.0 against.", None),
    ("The answer is 3.14 to 2 decimal places.", None),
    ("The answer is 3.14 to 2dp.", None),
    ("The answer is 0.67 TO 2 Significant Figures.", None),
    ("The answer is 3 to 4 places.", None),
    ("The answer is 3 to 4 digits.", None),
    ("The answer is 3 to 4 figures.", None),
    ("The answer is 0.67 to 2 s.f.", None),
    ("The answer is 3 tons.", None),
    ("The answer is 3 or surely 4.", None),
])
def test_anchor_answer_readings_box_a_range_or_a_worded_hedge(completion, expected):
    from ict.answers.readings import anchor_answer_readings

    assert anchor_answer_readings(completion) == [completion if expected is None else expected]


@pytest.mark.parametrize(("completion", "expected"), [
    # the gold 25\%, 50\% was read as its last element, 50: one answer was right, both wrong
    ("\\boxed{25\\%, 50\\%}", True),
    ("\\boxed{25, 50}", True),
    ("\\boxed{25\\% \\text{ or } 50\\%}", True),
    ("\\boxed{50\\%}", False),
    ("\\boxed{50}", False),
])
def test_a_gold_that_lists_percents_is_read_as_the_list(verifier, completion, expected):
    """The gold's percent signs are dropped as a boxed list's are (`gold_reading`): {25, 50}. No
    shared benchmark gold lists a percent. Both extractions."""
    assert_graded_in_both_extractions(verifier, completion, "25\\%, 50\\%", expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a boxed percent hedge holding other braces: the lenient extraction read its last number
    ("\\boxed{\\frac{1}{2}\\% \\text{ or } 40\\%}", "40", False),
    ("\\boxed{\\frac{1}{2}\\% \\text{ or } 40\\%}", "40\\%", False),
    ("\\boxed{25\\%, 50\\%}", "50", False),
    ("\\boxed{\\frac{1}{2}\\% \\text{ or } 40\\%}", "\\frac{1}{2}, 40", True),
])
def test_a_boxed_percent_hedge_with_braces_is_read_as_both_alternatives(
        verifier, completion, gold, expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


def test_the_alternatives_separators_are_found_one_after_another():
    """A separator right after another's spaces is a separator too (an empty alternative: no
    alternatives), also now that no match starts inside a run of spaces."""
    from ict.answers.readings import _ALTERNATIVE, _PERCENT_LIST, _PERCENT_SIGN

    assert _ALTERNATIVE.split("3 or\tand/or 4") == ["3", "", "4"]
    assert _ALTERNATIVE.split("3 " + " " * 50 + "4") == ["3 " + " " * 50 + "4"]
    assert _PERCENT_LIST.split("25%, , 50%") == ["25%", "", "50%"]
    assert _PERCENT_SIGN.sub("", "3  %, 4 \\% 5") == "3, 4 5"


@pytest.mark.parametrize(("completion", "expected"), [
    ("<answer>3 to 4</answer>", ["\\boxed{3 \\text{ to } 4}"]),
    ("#### -3 to 4.5", ["\\boxed{-3 \\text{ to } 4.5}"]),
    ("<answer>between 3 and 4</answer>", ["\\boxed{3 \\text{ to } 4}"]),
    ("<answer>2 to 1</answer>", ["\\boxed{2 to 1}", "\\boxed{2}"]),   # a ratio 2:1: as before
])
def test_a_range_in_an_answer_tag_or_hash_line_is_boxed_as_a_range(completion, expected):
    """The number-and-unit reading took the range's "to" for a unit: ``3 to 4`` read 3."""
    from ict.answers.readings import completion_readings

    assert completion_readings(completion) == expected


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # an alternative with a bare decimal point: math-verify's LaTeX parser read no number in "3."
    # or "-3./2" and dropped it from \boxed{3. \text{ or } 4}, which read 4: a hedge rewarded
    ("The answer is 3. or 4", "4", False),
    ("The answer is -3./2 or 4", "4", False),
    ("<answer>-3. or 4</answer>", "4", False),
    ("\\boxed{3. \\text{ or } 4}", "4", False),
    ("\\boxed{3.\\% \\text{ or } 4\\%}", "4", False),
    ("The answer is -3./2 or 4", "-\\frac{3}{2}, 4", True),
    ("The answer is 3. or 4.", "3, 4", True),
    # a decimal with its digits, and a bare decimal point, read as before
    ("The answer is 3.5 or 4", "3.5, 4", True),
    ("The answer is .5 or 4", "0.5, 4", True),
])
def test_a_hedge_with_a_bare_decimal_point_is_read_as_both_alternatives(
        verifier, completion, gold, expected):
    """Hand-checked golds; both extractions."""
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


def test_alternatives_drop_only_a_decimal_point_with_no_digit_after_it():
    """... at an alternative's end or before its "/": "4. 5" (a sentence's ".") is kept."""
    from ict.answers.readings import _PERCENT_LIST, _alternatives

    assert _alternatives("-3./2 or 4.") == "-3/2 \\text{ or } 4"
    assert _alternatives("3.5 or x.y or 2.x") == "3.5 \\text{ or } x.y \\text{ or } 2.x"
    assert _alternatives("3.5 or 4.25") == "3.5 \\text{ or } 4.25"
    assert _alternatives("1..2 or 3") == "1..2 \\text{ or } 3"
    assert _alternatives("4. 5 + 9 = 45, and 9 - 9 = 0") == "4. 5 + 9 = 45 \\text{ or } 9 - 9 = 0"
    assert _alternatives("3.% or 4.5%", _PERCENT_LIST) == "3 \\text{ or } 4.5"
    # a "." after no digit is left to math-verify, which reads no number in the box (no reward)
    assert _alternatives("\\pi. or 4") == "\\pi. \\text{ or } 4"

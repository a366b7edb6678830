"""Rules of the math check that hand mutants of `ict.answers.verify` passed the other tests with:
the relative tolerance's bound on small golds, a gold that does not parse, a completion that is only
its ``#### N`` line, which reading's answer a wrong verdict reports, and the last
``<answer>...</answer>`` as the answer when nothing is boxed."""

from __future__ import annotations

import pytest

from ict.answers.extraction import expand_scientific
from ict.answers.readings import mark_hash_answer
from ict.answers.verify import MATH_EXTRACTIONS, MathVerifier


@pytest.fixture(scope="module")
def verifier():
    pool = MathVerifier(num_workers=1)
    yield pool
    pool.close()


def _assert_graded_in_both_extractions(verifier, completion: str, gold: str, expected: bool) -> None:
    """``completion`` is graded ``expected`` against ``gold`` in each of `MATH_EXTRACTIONS`."""
    for extraction in MATH_EXTRACTIONS:
        verdict = verifier.check(completion, gold, 10.0, extraction)
        assert verdict.correct is expected, (extraction, verdict)


@pytest.mark.parametrize(("answer", "gold", "expected"), [
    # |0.0009004 - 0.0009| / 0.0009 = 4.4e-4 > 1e-4 (a gold just below the 1e-3 bound)
    ("0.0009004", "0.0009", False),
    ("0.00090008", "0.0009", True),  # 8.9e-5 <= 1e-4
    ("0.0000001", "0.0000002", False),  # 0.5
    ("0.00000025", "0.0000002", False),  # 0.25
    ("0.0000002", "0.0000002", True),
    # at and above the bound, and for a complex gold, math-verify's rounding alone decides: the
    # same 2e-4 relative miss as above passes (a bound of 1e-2 failed it)
    ("0.0020004", "0.002", True),
    ("0.0001 + \\sqrt{-4}", "0.0001 + \\sqrt{-4}", True),  # held to its real part: wrong by 2i
])
def test_golds_below_a_thousandth_need_a_relative_match(verifier, answer, gold, expected):
    """math-verify alone judges each of these equal (it rounds); `SMALL_NUMBER_BOUND` is 1e-3."""
    for extraction in MATH_EXTRACTIONS:
        assert verifier.check(f"\\boxed{{{answer}}}", gold, 10.0, extraction).correct is expected


@pytest.mark.parametrize("gold", ["", "\\text{}"])
def test_a_gold_that_does_not_parse_is_bad_gold(verifier, gold):
    verdict = verifier.check("\\boxed{3}", gold, 10.0)
    assert (verdict.correct, verdict.extracted, verdict.status) == (False, None, "bad_gold")


def test_a_completion_that_is_only_its_hash_line_is_the_answer(verifier):
    assert mark_hash_answer("#### 1,234") == "\\boxed{1234}"
    assert mark_hash_answer("####20\n") == "\\boxed{20}"
    for extraction in MATH_EXTRACTIONS:
        assert verifier.check("#### 20", "20", 10.0, extraction).correct, extraction


def test_a_wrong_answer_reports_the_first_reading(verifier):
    """A boxed percent is read as ``61%`` and then ``61``; a wrong verdict reports the first."""
    verdict = verifier.check("so \\boxed{61\\%}", "60", 10.0)
    assert (verdict.correct, verdict.extracted, verdict.status) == (False, "61%", "ok")


@pytest.mark.parametrize(("completion", "gold"), [
    ("The sum is 1 + 2.\n<answer>3</answer>", "3"),
    ("<answer>0.5</answer>", "\\frac{1}{2}"),
    ("so <answer> \\frac{1}{2} </answer> done", "\\frac{1}{2}"),
    ("<answer>72 dollars</answer>", "72"),
    ("<answer>(1, 2)</answer>", "(1, 2)"),
    ("first <answer>4</answer>, then <answer>3</answer>", "3"),
])
def test_the_last_answer_tag_is_the_answer_when_nothing_is_boxed(verifier, completion, gold):
    """math-verify reads no number right after a '>': '<answer>3</answer>', the answer the
    `format` reward asks for, had no answer in either extraction (so `--reward math,format` paid
    the tag and never the answer). The last complete pair's content is boxed in its place, as a
    GSM8K '#### N' line is (a number before a unit also alone). Hand-checked golds."""
    for extraction in MATH_EXTRACTIONS:
        verdict = verifier.check(completion, gold, 10.0, extraction)
        assert (verdict.correct, verdict.status) == (True, "ok"), (extraction, verdict)


@pytest.mark.parametrize(("completion", "gold"), [
    ("<answer>4</answer> so \\boxed{3}", "3"),  # a box wins over a tag
    ("<answer>4</answer> so \\boxed{3}", "4"),
    ("<answer></answer>", "3"),  # an empty pair is no answer
    ("the tag <answer>3 is not closed", "3"),
])
def test_a_box_wins_over_an_answer_tag_and_an_empty_or_open_tag_is_no_answer(verifier, completion, gold):
    """Anchored (ict eval's default): only a box, an anchor or a complete non-empty tag counts
    (lenient would also read the last number)."""
    expected = completion.endswith("\\boxed{3}") and gold == "3"
    assert verifier.check(completion, gold, 10.0, "anchored").correct is expected


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    ("The answer is 4.5e33.", "4.5e33", True),
    ("The answer is 4.5E+33.", "4.5 \\times 10^{33}", True),
    ("The answer is 1.2 \\times 10^{-5}.", "1.2e-5", True),
    ("The answer is 1.2e-5", "1.2 \\times 10^{-5}", True),
    ("Final answer: 1.2 \\cdot 10^{5}", "120000", True),
    ("The answer is 3 × 10^8 m/s.", "3e8", True),
    ("The answer is \\boxed{1.2E5}", "1.2 \\cdot 10^{5}", True),
    ("The answer is $2.5 \\times 10^{-3}$.", "0.0025", True),
    # the number the notation denotes, not its mantissa (math-verify's plain-text reading)
    ("The answer is 4.5e33.", "4.5", False),
    ("The answer is 1.2 \\times 10^{-5}.", "1.2", False),
    ("Final answer: 1.2 \\cdot 10^{5}", "1.2", False),
    ("The answer is 4.5e33.", "4.5e32", False),
    ("The answer is 1.2e-5", "1.2e-6", False),
    # an exponent over 100 too (it was left as written, and read as its mantissa: 1.5e120 as 1.5)
    ("The answer is 1.5e120.", "1.5e120", True),
    ("The answer is 1.5 \\times 10^{120}.", "1.5e120", True),
    ("The answer is 2 \\times 10^{150}.", "2e150", True),
    ("The answer is 1.5e-120.", "1.5 \\times 10^{-120}", True),
    ("The answer is \\boxed{1.5e120}", "1.5 \\times 10^{120}", True),
    ("The answer is 1.5e120.", "1.5", False),
    ("The answer is 1.5 \\times 10^{120}.", "1.5", False),
    ("The answer is 2 \\times 10^{150}.", "2", False),
    ("The answer is 1.5e-120.", "1.5", False),
    ("The answer is 1.5e120.", "1.6e120", False),
    ("The answer is 1.5e-120.", "1.6e-120", False),
])
def test_an_answer_in_scientific_notation_is_the_number_it_denotes(verifier, completion, gold, expected):
    """Outside a box or ``$...$`` math-verify read ``4.5e33`` as 4.5 and ``1.2 \\times 10^{-5}`` as
    1.2, so a right answer so written was wrong and its mantissa right. Hand-checked values; both
    extractions (each answer follows an anchor)."""
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


def test_scientific_notation_is_written_out_at_any_exponent_it_reads():
    """`expand_scientific` wrote out only ``|exponent| <= 100``: ``1.5e120`` stayed as written
    (math-verify reads it, in plain text, as 1.5). Hand-written decimals."""
    assert expand_scientific("so 1.5e120.") == "so 15" + "0" * 119 + "."
    assert expand_scientific("x = 2 \\times 10^{150}") == "x = 2" + "0" * 150
    assert expand_scientific("1.5e-120") == "0." + "0" * 119 + "15"
    assert expand_scientific("1e1234") == "1e1234"  # a 4-digit exponent is no scientific number


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    ("The answer is 3\\sqrt{13}.", "3\\sqrt{13}", True),
    ("The answer is 3\\sqrt{13}.", "3", False),
    ("Final answer: 7\\pi", "7\\pi", True),
    ("Final answer: 7\\pi", "7", False),
    ("So the answer is 1,-2.", "1, -2", True),
    ("So the answer is 1,-2.", "1", False),
    ("The answer is -2,1.", "-2.1", False),
    ("The answer is (2,4).", "(2,4)", True),
    ("The answer is (a+5)(b+2).", "(a+5)(b+2)", True),
    ("**Final Answer:** \\frac{\\sqrt{3}}{3}", "\\frac{\\sqrt{3}}{3}", True),
    ("The answer is 1,000.", "1000", True),  # a plain number as before
    # a number before a parenthesis is one answer, not a number and a unit: "3 (4^{1})" is 3 * 4,
    # not also 3; "42 (27, 9)" is no 42
    ("The answer is 3 (4^{1}).", "12", True),
    ("The answer is 3 (4^{1}).", "3", False),
    ("The answer is 42 (27, 9).", "42", False),
    ("The answer is 5 (\\frac{14}{3}).", "5", False),
    # algebra with no LaTeX markup: "2n" was right for gold 2 and "6 - 5i" for 6 (math-verify's
    # plain-text reading stops at the first number), "p - q" and "f(x)=x+1" were no answer
    ("The answer is 2n.", "2", False),
    ("The answer is 2n.", "2n", True),
    ("The final answer is 6 - 5i.", "6", False),
    ("The final answer is 6 - 5i.", "6 - 5i", True),
    ("The answer is 15x - 80.", "15", False),
    ("The answer is 2ab+1.", "2", False),
    ("The answer is p - q.", "p - q", True),
    ("The answer is p - q.", "q - p", False),
    ("The answer is 1 - x.", "1", False),
    ("The answer is N=n.", "N=n", True),
    ("The answer is f(x)=x+1.", "f(x)=x+1", True),
    ("The answer is I(0).", "I(0)", True),  # Minerva's gold for row 61
    ("The answer is 3(1/2)x.", "3", False),
    ("The answer is x = 5.", "5", True),  # an assignment, as \\boxed{x = 5} is
    ("The answer is 5 m.", "5", True),  # a number and its unit: read as the number, as before
    ("The answer is 20 m/s.", "20", True),
    ("Final answer: 2nd", "2", True),  # an ordinal: a suffix of two letters is no symbol
    # a vector (an environment's name is no word) and a dollar amount (\\$ is no delimiter)
    ("The answer is \\begin{pmatrix} -7 \\\\ 16 \\end{pmatrix}.",
     "\\begin{pmatrix} -7 \\\\ 16 \\end{pmatrix}", True),
    ("The answer is \\begin{pmatrix} -7 \\\\ 16 \\end{pmatrix}.", "-7", False),
    ("The answer is \\$32,\\!348.", "32348", True),
])
def test_an_anchored_latex_tuple_or_list_answer_in_plain_text_is_read_whole(
        verifier, completion, gold, expected):
    """math-verify read an anchored answer with no math delimiters as its first number (or none):
    "The answer is 3\\sqrt{13}." was right for gold 3 and wrong for 3\\sqrt{13}, "1,-2" right for 1,
    "-2,1" for -2.1, "(2,4)" no answer. Such an answer on the last line is boxed in its place
    (`anchor_answer_readings`). Hand-checked golds; both extractions."""
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "expected"), [
    ("The answer is 3\\sqrt{13}.", "The answer is \\boxed{3\\sqrt{13}}"),
    ("so the final answer is: (2, 4)\n", "so the final answer is: \\boxed{(2, 4)}\n"),
    ("**Final Answer:** **x^2+1**", "**Final Answer:** \\boxed{x^2+1}"),
    ("I checked my answer: the final answer is x^2+1", "I checked my answer: the final answer is \\boxed{x^2+1}"),
    ("The answer is 3 (4^{1}).", "The answer is \\boxed{3 (4^{1})}"),  # one reading, no "unit"
    # left alone: a plain number, math delimiters, a plain word, not the last line, a box, an
    # unbalanced brace, no LaTeX, tuple or list
    ("The answer is 1,000.", None),
    ("The answer is $3\\sqrt{13}$.", None),
    ("The answer is \\(3\\sqrt{13}\\).", None),
    ("The final answer is 1, since 2 - 1 = 1.", None),
    ("The answer is \\text{Evelyn}.", None),
    ("The answer is 3\\sqrt{13}.\nHope it helps!", None),
    ("The answer is 3\\sqrt{13}.\n\n3 + 1 = 4", None),
    ("\\boxed{2}, so the answer is 3\\sqrt{13}", None),
    ("The answer is \\frac{1}{2", None),
    # algebra: a one-letter symbol after a digit or next to + - = or a bracket
    ("The answer is 6 - 5i.", "The answer is \\boxed{6 - 5i}"),
    ("Final answer: 2n", "Final answer: \\boxed{2n}"),
    ("The answer is p - q.", "The answer is \\boxed{p - q}"),
    ("The answer is f(x)=x+1.", "The answer is \\boxed{f(x)=x+1}"),
    ("The answer is y = 2x + 3.", "The answer is \\boxed{y = 2x + 3}"),
    # an environment's name is no plain word; an escaped \\$ is no math delimiter
    ("The answer is \\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}.",
     "The answer is \\boxed{\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}}"),
    ("The answer is \\$32,\\!348.", "The answer is \\boxed{\\$32,\\!348}"),
    # left alone: a number and its unit (read as the number), a letter alone, a word, \\(...\\)
    ("The answer is 5 m.", None),
    ("The answer is 20 m/s.", None),
    ("The answer is x.", None),
    ("The answer is 2 apples - 1.", None),
    ("The answer is \\(2n\\).", None),
    ("The answer is $\\$36$.", None),
])
def test_anchor_answer_readings_boxes_only_a_last_line_answer_math_verify_misreads(completion, expected):
    from ict.answers.readings import anchor_answer_readings

    assert anchor_answer_readings(completion) == [completion if expected is None else expected]


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
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


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
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


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
    _assert_graded_in_both_extractions(verifier, completion, "3 \\lor 4", expected)


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
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


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
    ("The answer is 2 hours and 30 minutes.", "2", True),
    ("\\boxed{2 \\text{ hours and } 30 \\text{ minutes}}", "2", True),
    ("The answer is 7 or more.", "7", True),
])
def test_a_hedge_with_units_or_a_hedge_word_is_read_as_both_alternatives(
        verifier, completion, gold, expected):
    """A hedge whose alternatives are a number and a unit (``3 hours or 4 hours``, ``3 or 4 cm``,
    in a box's text wrappers too), a hedge in brackets (``3 (or 4)``), after a comma (``3, maybe
    4``) or with a ``?`` is read as its numbers together, {3, 4}. Hand-checked golds; both
    extractions."""
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "expected"), [
    ("The answer is 3 hours or 4 hours.", "The answer is \\boxed{3 \\text{ or } 4}"),
    ("Final answer: 3 or 4.5 cm", "Final answer: \\boxed{3 \\text{ or } 4.5}"),
    ("The answer is 3 (or possibly 4).", "The answer is \\boxed{3 \\text{ or } 4}"),
    ("The answer is 1/2 cup, maybe 3/4 cup.", "The answer is \\boxed{1/2 \\text{ or } 3/4}"),
    ("The answer is 3? or 4", "The answer is \\boxed{3 \\text{ or } 4}"),
    # left alone: "and" joins one quantity, two words after a number, a word with no number
    ("The answer is 2 hours and 30 minutes.", None),
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
    ("\\boxed{2 \\text{ hours and } 30 \\text{ minutes}}",
     ["\\boxed{2 \\text{ hours and } 30 \\text{ minutes}}"]),
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
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


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
    _assert_graded_in_both_extractions(verifier, completion, "25\\%, 50\\%", expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a boxed percent hedge holding other braces: the lenient extraction read its last number
    ("\\boxed{\\frac{1}{2}\\% \\text{ or } 40\\%}", "40", False),
    ("\\boxed{\\frac{1}{2}\\% \\text{ or } 40\\%}", "40\\%", False),
    ("\\boxed{25\\%, 50\\%}", "50", False),
    ("\\boxed{\\frac{1}{2}\\% \\text{ or } 40\\%}", "\\frac{1}{2}, 40", True),
])
def test_a_boxed_percent_hedge_with_braces_is_read_as_both_alternatives(
        verifier, completion, gold, expected):
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("gold", "expected"), [
    ("25\\%, 50\\%", "$25 \\text{ or } 50$"),
    ("5\\% \\text{ or } 7 \\%", "$5 \\text{ or } 7$"),
    ("3 \\lor 4", "$3 \\text{ or } 4$"),
    ("1.5e3", "$1500$"),
    ("62.5%", "$62.5%$"),               # one percent: as before
    ("1,000\\%", "$1,000\\%$"),         # a thousands comma is no list
    ("(25\\%, 50\\%)", "$(25\\%, 50\\%)$"),
])
def test_gold_reading(gold, expected):
    from ict.answers.readings import gold_reading

    assert gold_reading(gold) == expected


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    ("so $d = \\boxed{\\textbf{(073)}}.$", "73", True),  # AoPS's AIME 2024 #15 solution
    ("\\boxed{\\text{073}}", "73", True),
    ("\\boxed{\\textbf{ 073 }}", "73", True),
    ("\\boxed{\\textbf{(073)}}", "74", False),
    ("\\boxed{\\text{(C)}}", "\\text{(C)}", True),  # no number: as before
])
def test_a_boxed_number_in_a_text_wrapper_is_the_number(verifier, completion, gold, expected):
    """math-verify reads ``\\text{073}`` as the text "073", not 73: the shared AIME 2024 #15 solution
    (``\\boxed{\\textbf{(073)}}``) was wrong for its gold 73. Such a number is unwrapped
    (`unwrap_boxed_text_number`). Hand-checked golds; both extractions."""
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("\\boxed{\\textbf{(073)}}", "\\boxed{(073)}"),
    ("\\boxed{ \\mathbf{ 7.5 } }", "\\boxed{ 7.5 }"),
    ("so \\boxed{\\textbf{12}} and \\boxed{\\mathrm{5}}", "so \\boxed{12} and \\boxed{5}"),
    # left alone: no number, more than the number in the box or in the wrapper
    ("\\boxed{\\text{(C)}}", None),
    ("\\boxed{\\text{73}\\%}", None),
    ("\\boxed{\\textbf{(C) }42}", None),
    ("\\boxed{\\text{2 and 3}}", None),
])
def test_unwrap_boxed_text_number_unwraps_only_a_box_that_is_one_number(text, expected):
    from ict.answers.readings import unwrap_boxed_text_number

    assert unwrap_boxed_text_number(text) == (text if expected is None else expected)


def test_the_verify_timeout_is_refused_at_zero_and_past_a_day():
    """``--verify-timeout`` / ``verify_timeout`` lie in ``(0, 86400]`` seconds (docs: a check's
    hard bound). A mutant taking 0 (``0 <= seconds``) passed every test; the pool would refuse it
    only at its first check (a ValueError, after generating)."""
    from ict.answers.verify import MAX_TIMEOUT_SECONDS, check_timeout
    from ict.core.errors import UsageError

    assert MAX_TIMEOUT_SECONDS == 86_400
    for good in (1e-6, 5.0, 86_400.0):
        check_timeout(good, "--verify-timeout")
    for bad in (0.0, -1.0, 86_400.001):
        with pytest.raises(UsageError, match=r"^--verify-timeout must be in \(0, 86400\] seconds"):
            check_timeout(bad, "--verify-timeout")


@pytest.mark.parametrize("form", [
    "The answer is 42{}dollars.", "<answer>42{}cm</answer>", "#### 42{}cm", "\\boxed{{42{}\\%}}"])
def test_a_long_run_of_spaces_in_an_answer_is_graded_within_the_bound(verifier, form):
    """The alternatives' split and the percent readings tried every start in a run of n spaces
    (n^3 steps: 13 s at n = 1000): these answers (3,000 spaces; newlines in the tag) ran past the
    check's bound and were graded "timeout", wrong; each is 42 (or 42%). Both extractions."""
    completion = form.format(("\n" if "<answer>" in form else " ") * 3_000)
    for extraction in MATH_EXTRACTIONS:
        verdict = verifier.check(completion, "42", 5.0, extraction)
        assert (verdict.status, verdict.correct) == ("ok", True), (extraction, verdict)


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
    # every comma of a "####" line was dropped: "3,5" (a decimal comma or a list, as a box reads
    # it) was 35, "3, 5" was "3 5" (no list) and "3, maybe 4" was "3 maybe 4", read as 3
    ("#### 3,5", "35", False),
    ("#### 12,50", "1250", False),
    ("#### 3, 5", "3, 5", True),
    ("#### 3, maybe 4", "3", False),
    ("#### 3, maybe 4", "3, 4", True),
    # a tuple or a list (MATH-500, OlympiadBench golds) was read with no commas: "(2,4)" was
    # "(24)", wrong for its gold, and "(8,-2)" was "(8-2)", right for a gold 6
    ("#### (2,4)", "(2,4)", True),
    ("#### 1,-2", "1,-2", True),
    ("#### (8,-2)", "6", False),
    # a thousands comma is still dropped
    ("#### 1,234", "1234", True),
    ("#### \\$1,234,567.50", "1234567.5", True),
    ("#### 1,000 dollars", "1000", True),
    # ... and so are an Indian grouping's (lakh, crore), read 100000 by 46d2660, "1,00000" after it
    ("#### 1,00,000", "100000", True),
    ("#### 12,34,567.", "1234567", True),
    ("#### \\$1,00,000 dollars", "100000", True),
])
def test_a_hash_line_drops_only_a_thousands_comma(verifier, completion, gold, expected):
    """As ``\\boxed{3,5}``, ``\\boxed{(2,4)}`` and "The answer is 3, maybe 4." are read. Hand-checked
    golds; both extractions."""
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


def test_mark_hash_answer_keeps_a_comma_that_is_no_thousands_comma():
    assert mark_hash_answer("#### 3,5") == "\\boxed{3,5}"
    assert mark_hash_answer("#### 3, 5.") == "\\boxed{3, 5}"
    assert mark_hash_answer("x\n#### 1,234,567\n") == "x\n\\boxed{1234567}"
    assert mark_hash_answer("#### (x,100)") == "\\boxed{(x,100)}"
    # an Indian grouping's commas are dropped, no comma of two-digit groups that do not end one
    assert mark_hash_answer("#### 1,00,000, 2,00,000") == "\\boxed{100000, 200000}"
    assert mark_hash_answer("#### 1,12,34,567") == "\\boxed{11234567}"
    assert mark_hash_answer("#### 1,00,000,000") == "\\boxed{100000000}"  # as 46d2660 read it
    assert mark_hash_answer("#### (12,34,5)") == "\\boxed{(12,34,5)}"
    assert mark_hash_answer("#### 12,34") == "\\boxed{12,34}"
    assert mark_hash_answer("#### 123,45,678") == "\\boxed{123,45678}"
    assert mark_hash_answer("#### 123,12,34,567") == "\\boxed{123,12,34567}"
    assert mark_hash_answer("#### 1,00,0000") == "\\boxed{1,000000}"


@pytest.mark.parametrize("form", [
    "The answer is 42{}", "The answer is 42{}dollars.", "<answer>42{}cm</answer>", "#### 42{}cm",
    "\\boxed{{42{}\\%}}"])
def test_an_answer_before_19000_whitespace_characters_is_graded_within_the_bound(verifier, form):
    """math-verify's own patterns are quadratic in a run of whitespace after a number: "The answer
    is 42" and 19,000 newlines (a model that pads to its token limit) took 20 s to parse and was
    graded "timeout", wrong. Each is 42 (or 42%). Both extractions."""
    for run in (" " * 19_000, "\n" * 19_000):
        completion = form.format(run)
        for extraction in MATH_EXTRACTIONS:
            verdict = verifier.check(completion, "42", 5.0, extraction)
            assert (verdict.status, verdict.correct) == ("ok", True), (form, extraction, verdict)


def test_a_shortened_run_of_whitespace_reads_as_the_long_one(verifier):
    """A run cut to 128 characters is still longer than math-verify's answer window (".{0,50}"
    after "answer"): no anchored answer 200 spaces after it, as none 19,000 after it."""
    for gap in (" " * 200, " " * 19_000):
        verdict = verifier.check(f"The answer is{gap}42", "42", 5.0, "anchored")
        assert (verdict.status, verdict.correct) == ("no_answer", False), verdict


def test_shortened_whitespace_keeps_128_characters_and_a_newline():
    from ict.answers.readings import _shortened_whitespace

    assert _shortened_whitespace("4" + " " * 128 + "x") == "4" + " " * 128 + "x"
    assert _shortened_whitespace("4" + " " * 129 + "x") == "4" + " " * 128 + "x"
    assert _shortened_whitespace("4" + " " * 500 + "\n" + " " * 9 + "x") == "4" + " " * 127 + "\nx"
    assert _shortened_whitespace("\t" * 300 + "4") == "\t" * 128 + "4"
    assert _shortened_whitespace(("a" + " " * 200) * 3) == ("a" + " " * 128) * 3


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
    _assert_graded_in_both_extractions(verifier, completion, gold, expected)


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

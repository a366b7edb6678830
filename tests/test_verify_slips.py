"""Slips of a model's writing that the math check read wrong: a full stop inside a box
(``\\boxed{3.}``), Euler's ``e`` and the imaginary ``I`` with a subscript (``E_{1}``, ``I_{0}``), and
an anchored number followed by a condition in math (``The answer is 20 m/s for $v_{max}$``), and a
spaced sign, a plain-text root or a ratio after an anchor (``- 5``, ``2√3``, ``2:30``).
Hand-worked golds; both extractions unless said."""

from __future__ import annotations

import time

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
    from ict.answers.boxes import drop_boxed_full_stop

    assert drop_boxed_full_stop(text) == (text if expected is None else expected)


_MINERVA_MEAN = "\\frac{1}{3} E_{1}+\\frac{2}{3} E_{2}"  # Minerva Math's golds (minerva_math.jsonl)
_MINERVA_PAIR = "E_{1},E_{2}"
_MINERVA_LEVELS = "\\hbar \\omega(v+1 / 2)-\\frac{E_{0}^{2} e^{2}}{2 m \\omega^{2}}"


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # renderings of the golds: math-verify parsed no E_{1}, so only the gold's own string matched
    ("\\boxed{\\frac{E_{1}+2E_{2}}{3}}", _MINERVA_MEAN, True),
    ("\\boxed{\\frac{E_1 + 2 E_2}{3}}", _MINERVA_MEAN, True),
    ("\\boxed{E_1, E_2}", _MINERVA_PAIR, True),
    ("\\boxed{E_{2},E_{1}}", _MINERVA_PAIR, True),
    ("\\boxed{\\hbar \\omega\\left(v+\\frac{1}{2}\\right)-\\frac{e^{2} E_{0}^{2}}{2 m \\omega^{2}}}",
     _MINERVA_LEVELS, True),
    ("\\boxed{\\mathrm{E}_1}", "E_{1}", True),  # math-verify cut \mathrm{ (as \text{) to the end
    ("\\boxed{I_{0}}", "I_{0}", True),
    ("\\boxed{E_{1} = 13.6}", "13.6", True),  # anchored: no answer
    # wrong answers: the gold with E_{0}^{2} parsed as a stray 2 (any 2 was right in the
    # lenient extraction), I's subscript was dropped (I_{0} equalled I_{1} and i)
    ("\\boxed{\\frac{2}{3} E_{1}+\\frac{1}{3} E_{2}}", _MINERVA_MEAN, False),
    ("\\boxed{e}", _MINERVA_MEAN, False),
    ("\\boxed{E_{1}}", _MINERVA_PAIR, False),
    ("\\boxed{E_{3},E_{4}}", _MINERVA_PAIR, False),
    ("\\boxed{2}", _MINERVA_LEVELS, False),
    ("\\boxed{\\hbar \\omega(v+1 / 2)-\\frac{E_{1}^{2} e^{2}}{2 m \\omega^{2}}}", _MINERVA_LEVELS, False),
    ("\\boxed{\\frac{I_{0}}{2}}", "\\frac{I_{1}}{2}", False),
    ("\\boxed{I_{1}}", "i", False),
    ("\\boxed{E_{1} = 13.6}", "13.7", False),
    # Euler's number and the imaginary unit with no subscript are as they were
    ("\\boxed{2e}", "2e", True),
    ("\\boxed{E}", "e", True),
    ("\\boxed{e^{2}}", "e^2", True),
    ("\\boxed{i}", "i", True),
])
def test_a_subscripted_e_or_i_is_a_symbol(verifier, completion, gold, expected):
    """math-verify's LaTeX parser reads E and e as Euler's number and I as the imaginary unit: it
    failed on ``E_{1}`` and dropped the subscript of ``I_{0}`` (`plain_subscripted_constants`)."""
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("E_{1}+2E_{2}", "\\mathsf{E}_{1}+2\\mathsf{E}_{2}"),
    ("\\frac{e_n}{I _0}", "\\frac{\\mathsf{e}_n}{\\mathsf{I} _0}"),
    ("\\mathrm{E}_1 + \\mathcal{ I }_2", "\\mathsf{E}_1 + \\mathsf{I}_2"),
    # left alone: no subscript, a piece of a word or a command, another letter
    ("e^{2} + E + I", None),
    ("NONE_1 + \\Xi_1 + \\hat{x}_1", None),
    ("x_{1}", None),
])
def test_plain_subscripted_constants(text, expected):
    from ict.answers.readings import plain_subscripted_constants

    assert plain_subscripted_constants(text) == (text if expected is None else expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # math-verify read the rightmost formula after the anchor: v_{max}, x = 2, n
    ("The answer is 20 m/s for $v_{\\text{max}}$", "20", True),
    ("so the answer is 5 when $x = 2$.", "5", True),
    ("so the answer is 5 when $x = 2$.", "2", False),  # was right: a false positive
    ("Final answer: 12 cm when $r = 3$", "12", True),
    ("The answer is 1/2 if $n$ is even.", "\\frac{1}{2}", True),
    # a "unit" that is algebra stays with its number, as with no condition ("The answer is 2 x^2."
    # is 2x^2): the number alone was right for a gold 2
    ("The answer is 2 x^2 for $x > 0$.", "2", False),
    ("The answer is 2 x^2 for $x > 0$.", "2x^2", True),
    ("The answer is 2 x^2.", "2", False),
    ("The answer is 3 n^2 when $n$ is odd.", "3", False),
    # a piecewise answer is a hedge, as "1 or 0" is: its first number alone was right for a gold 1
    ("The answer is 1 if $n$ is odd and 0 if $n$ is even.", "1", False),
    ("The answer is 1 if $n$ is odd and 0 if $n$ is even.", "0", False),
    ("The answer is 3 for $n = 1$ or maybe 5 for $n = 2$.", "3", False),
    ("The answer is 5 when $x = 2$ and 7 otherwise.", "5", False),
    ("The answer is 5 when $x = 2$ and 7 otherwise.", "2", False),
    # ... not a second formula, a number inside the condition's math, or a number in its words
    ("The answer is 12 for $n = 3$ and $n = 4$.", "12", True),
    ("The answer is 12 when \\(n = 3 \\text{ or } 4\\).", "12", True),
    ("The answer is 5 for $n$ greater than 3.", "5", True),
    ("The answer is 12 when $n = 3 or 4$.", "12", True),
    # odds are no condition: read 1/6 (`ict.answers.wording.odds`; the 1 alone was right for a gold 1)
    ("The answer is 1 in $6$.", "1", False),
    ("The answer is 1 in \\(36\\).", "1", False),
    ("The answer is 7 in \\(\\mathbb{Z}_9\\).", "7", True),
    # as before: arithmetic with the formula
    ("The answer is 2 times $\\pi$.", "2", False),
    ("The answer is 3 over $\\sqrt{2}$.", "3", False),
    ("The answer is 20 m/s.", "20", True),
])
def test_an_anchored_number_before_a_condition_in_math_is_the_answer(verifier, completion, gold,
                                                                      expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "expected"), [
    ("The answer is 20 m/s for $v_{max}$.", "The answer is \\boxed{20}"),
    ("Answer: -3.5 if $n$ is odd", "Answer: \\boxed{-3.5}"),
    ("The answer is 2 x^2 for $x > 0$.", "The answer is \\boxed{2 x^2}"),
    # as with no condition: a squared unit reads as algebra ("The answer is 9.8 m/s^2.")
    ("The answer is 9.8 m/s^2 when $t = 1$.", "The answer is \\boxed{9.8 m/s^2}"),
    ("The answer is 7 in \\(\\mathbb{Z}_9\\).", "The answer is \\boxed{7}"),
    ("The answer is 1 if $n$ is odd and 0 if $n$ is even.", "The answer is \\boxed{1 \\text{ or } 0}"),
    ("The answer is 3 when \\(x = 2\\) or 4.5 when \\(x = 3\\)", "The answer is \\boxed{3 \\text{ or } 4.5}"),
    ("The answer is 3 when $x = 2$ and 4x", "The answer is \\boxed{3}"),
    ("The answer is 12 when $n = 3 or 4$.", "The answer is \\boxed{12}"),
    # left alone: arithmetic, no math in the condition, a condition past a comma, no condition word
    ("The answer is 2 times $\\pi$.", None),
    ("The answer is 4 squared when $x = 2$.", None),
    ("The answer is 5 when x is 2.", None),
    ("The answer is 10 for each of the $4$ boxes, so $40$.", None),
    ("The answer is 2 $\\pi$.", None),
    ("The answer is 1 in $6$.", "The answer is \\boxed{\\frac{1}{6}}"),  # odds: a probability
])
def test_anchor_answer_readings_boxes_the_number_before_a_condition(completion, expected):
    from ict.answers.readings import anchor_answer_readings

    assert anchor_answer_readings(completion) == [completion if expected is None else expected]


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # math-verify read each as a piece of it, in plain text after an anchor
    ("The answer is - 5.", "5", False),  # read 5
    ("The answer is - 5.", "-5", True),
    ("The answer is 2\u221a3.", "2", False),  # read 2
    ("The answer is 2\u221a3.", "2\\sqrt{3}", True),
    ("The answer is 2 sqrt(3).", "2", False),  # read 2
    ("The answer is 2 sqrt(3).", "2\\sqrt{3}", True),
    ("Final answer: sqrt(2)", "\\sqrt{2}", True),  # read none
    ("The answer is 2:30.", "2", False),  # read 2
    ("The answer is 3:1.", "3", True),  # the ratio 3:1 is 3, as in a box
    ("The answer is 2 : 30.", "2", False),  # read 2
    ("The answer is 2 : 30.", "\\frac{1}{15}", True),
    # a colon that opens an explanation is no ratio: read 15 and 7, as before
    ("The answer is 15: 3*5.", "15", True),
    ("The answer is 7: 3 + 4", "7", True),
    ("The answer is 7: 3 + 4", "\\frac{7}{3}", False),
    # as before
    ("The answer is -5.", "-5", True),
    ("The answer is 5.", "-5", False),
])
def test_a_spaced_sign_a_plain_root_and_a_ratio_after_an_anchor_are_read_whole(
        verifier, completion, gold, expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a number in the condition's words is no later piece: these were hedges ("4, 3"), wrong for 4
    ("The answer is 4 when $x$ is between 2 and 3.", "4", True),
    ("The answer is 4 when $x$ is 2 or 3.", "4", True),
    ("The answer is 4 when $x$ is 2 or 3.", "3", False),
    ("The answer is 10 for $n = 2$ and 5.", "10", True),
    ("The answer is 4 when $a = 1$ and 2 more steps.", "4", True),
    # a later piece with a condition of its own, "otherwise" or a hedge word is still a hedge
    ("The answer is 8 at $t = 2$ and 1 at $t = 0$.", "8", False),
    ("The answer is 8 at $t = 2$ and 1 at $t = 0$.", "1", False),
    ("The answer is 3 hours for $d = 120$ and 2.5 hours otherwise.", "3", False),
    ("The answer is 20 m/s for $v_{max}$ and 10 m/s for $v_{min}$.", "20", False),
    ("The answer is 3 for $n = 1$ or maybe 5.", "3", False),
])
def test_only_a_number_with_its_own_condition_or_a_hedge_word_is_a_later_piece(verifier, completion, gold,
                                                                                 expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # math-verify read the condition's formula, n = 2: right for a gold 2, a false positive
    ("Final answer: 5 (when $n = 2$)", "5", True),
    ("Final answer: 5 (when $n = 2$)", "2", False),
    ("The answer is 12 cm (for $r = 3$).", "12", True),
    ("The answer is 12 cm (for $r = 3$).", "3", False),
    ("The answer is 1 (if $n$ is odd) and 0 (if $n$ is even).", "1", False),  # a hedge
])
def test_an_anchored_number_before_a_condition_in_brackets_is_the_answer(verifier, completion, gold, expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "expected"), [
    ("Final answer: 5 (when $n = 2$)", "Final answer: \\boxed{5}"),
    ("The answer is 1 (if $n$ is odd) and 0 (if $n$ is even).", "The answer is \\boxed{1 \\text{ or } 0}"),
    ("The answer is 4 when $x$ is between 2 and 3.", "The answer is \\boxed{4}"),
    ("The answer is 5 when $x = 2$ and 7 else.", "The answer is \\boxed{5 \\text{ or } 7}"),
    # left alone: a bracket that does not close the answer
    ("The answer is 3 (for $n = 1$) times $\\pi$.", None),
])
def test_anchor_answer_readings_reads_bracketed_conditions_and_later_pieces(completion, expected):
    from ict.answers.readings import anchor_answer_readings

    assert anchor_answer_readings(completion) == [completion if expected is None else expected]


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a reason holding math after the number: math-verify read its formula (x = 4, 3^2 = 9), right
    # for a gold 4 or 9
    ("The answer is 3, since $x = 4$ fails.", "3", True),
    ("The answer is 3, since $x = 4$ fails.", "4", False),
    ("The answer is 3 because $3^2 = 9$.", "3", True),
    ("The answer is 3 because $3^2 = 9$.", "9", False),
    ("The answer is 3 (since $x = 4$ fails).", "4", False),
    ("The answer is 2 as $n \\to \\infty$.", "2", True),
    ("The answer is 5, when $x = 2$.", "2", False),
    # a plain number in math delimiters before a condition: math-verify read n = 2, x = 1, r = 3
    ("The answer is $5$ when $n = 2$.", "5", True),
    ("The answer is $5$ when $n = 2$.", "2", False),
    ("The answer is \\(5\\) for \\(x = 1\\).", "1", False),
    ("Final answer: $12$ cm when $r = 3$", "12", True),
    ("Final answer: $12$ cm when $r = 3$", "3", False),
    # as before: a reason that goes on past a comma, a formula that is the answer
    ("The answer is 3, since $x = 3$, so $x^2 = 9$.", "9", True),
    ("The answer is $\\frac{1}{2}$ if $n$ is even.", "\\frac{1}{2}", True),
])
def test_a_number_before_a_reason_or_in_math_before_a_condition_is_the_answer(verifier, completion, gold,
                                                                             expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a rejected answer before the answer: math-verify read it (5), right for a gold 5
    ("The answer is not 5, it is 6.", "5", False),
    ("The answer is not 5, it is 6.", "6", True),
    ("The answer is not 5 but 6.", "5", False),
    ("The answer is not 5 but 6.", "6", True),
    ("The answer is not 5; rather, it's 6 apples.", "6", True),
    # ... and what follows it is read as an answer is: a hedge, a range, a piecewise answer (read 6)
    ("The answer is not 5 but 6 or 7.", "6", False),
    ("The answer is not 5 but 6 apples or 7 apples.", "6", False),
    ("The answer is not 5 but 6 to 8.", "6", False),
    ("The answer is not 5, it is 6 if we count the ends and 7 otherwise.", "6", False),
    ("The answer is not 5 but 6 when x is 2 or 3.", "6", True),
    # ... and in bold, as an anchored answer is (read **6 and 5)
    ("**Final Answer:** not 5, but **6**", "6", True),
    ("The answer is not **5** but **6**.", "6", True),
    # a piecewise answer in words is a hedge, as one with a condition in math is (read 12)
    ("The answer is 12 if we count the endpoints and 14 otherwise.", "12", False),
    ("The answer is 12 if we count the endpoints and 14 otherwise.", "14", False),
    ("The answer is 12 if we count the endpoints and 14 otherwise.", "12, 14", True),
    ("The answer is 3 hours if he walks and 1 hour if he cycles.", "3", False),
    # a time of day is read whole, as 2:30 is (read 3)
    ("The answer is 3:45 pm.", "3", False),
    ("The answer is 3:45 pm.", "3:45", True),
    ("Final answer: 11:05 a.m.", "11", False),
    # as before: one number, a number in the condition's words
    ("The answer is 5 when x is 2.", "5", True),
    ("The answer is 4 when x is 2 or 3.", "4", True),
    ("The answer is 3 pm.", "3", True),
])
def test_a_rejected_answer_a_piecewise_answer_in_words_and_a_time_are_read_whole(verifier, completion, gold,
                                                                                expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a rejected answer, then the answer and a reason after a comma, or in math delimiters:
    # math-verify read the rejected 5
    ("The answer is not 5 but 6, since 5 fails.", "6", True),
    ("The answer is not 5 but 6, since 5 fails.", "5", False),
    ("The answer is not 5, it is 6 apples, because 5 is odd.", "6", True),
    ("The answer is not $5$, but $6$.", "6", True),
    ("The answer is not $5$, but $6$.", "5", False),
    ("The answer is not \\(5\\) but \\(6\\).", "6", True),
    ("The answer is not $5$ but $\\frac{1}{2}$.", "\\frac{1}{2}", True),
    ("The answer is not $5$ but $\\frac{1}{2}$.", "5", False),
    ("The answer is not $5$ but $6$ apples.", "6", True),
    # ... and a hedge after it is still both (read 5, then 6 alone)
    ("The answer is not $5$ but $6$ or $7$.", "6", False),
    ("The answer is not 5, it is 6, if we count the ends, and 7 otherwise.", "6", False),
    # "isn't" rejects as "is not" does (the anchor's "is" ended at no word boundary: read 5)
    ("The answer isn't 5, it's 6.", "6", True),
    ("The answer isn't 5, it's 6.", "5", False),
    ("The final answer isn\u2019t 5 but 6.", "6", True),
    ("The answer isn't 5.", "5", True),  # as before: no answer after it (read 5, as "is not 5.")
])
def test_a_rejected_answer_before_a_reason_or_in_math_is_dropped(verifier, completion, gold, expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # "it\u2019s" with a typographic apostrophe opens the answer as "it's" does (math-verify read the
    # rejected 5)
    ("The answer isn\u2019t 5, it\u2019s 6.", "6", True),
    ("The answer isn\u2019t 5, it\u2019s 6.", "5", False),
    ("The answer is not 5; it\u2019s 6 apples.", "6", True),
    ("The answer is not 5, it\u2019s 6, since 5 fails.", "6", True),
])
def test_a_rejected_answer_before_it_s_with_a_typographic_apostrophe_is_dropped(verifier, completion, gold,
                                                                                 expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a time of day with words after it is read whole, as "3:45 pm" is (read 10)
    ("The answer is 10:30 a.m. on Monday.", "10:30", True),
    ("The answer is 10:30 a.m. on Monday.", "10", False),
    ("The answer is 10:30 a.m. or 11 a.m.", "10:30", False),  # a hedge: no 10:30 alone
    # a time on the hour is its hour too: GSM8K's "the latest time of day that Jordan can start" is 2
    # (math-verify read 2:00 as no number equal to 2, wrong in every rendering)
    ("The answer is 2:00 pm.", "2", True),
    ("#### 2:00 pm", "2", True),
    ("<answer>2:00 PM</answer>", "2", True),
    ("\\boxed{2:00 \\text{ PM}}", "2", True),
    ("\\boxed{2:00}", "2", True),
    ("\\boxed{2:00}", "2:00", True),
    # ... and no other number: not 3, nor the hour of a time off the hour, nor one of a hedge
    ("\\boxed{2:00}", "3", False),
    ("\\boxed{2:30}", "2", False),
    ("\\boxed{2:00 \\text{ or } 3:00}", "2", False),
])
def test_a_time_of_day_with_words_after_it_or_on_the_hour(verifier, completion, gold, expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("text", "most_chars"), [("\\boxed{" * 3000, 0), ("\\boxed{2:00 " * 1700, 1700 * 200)])
def test_boxes_that_do_not_close_are_read_for_a_time_on_the_hour_in_linear_time(monkeypatch, text, most_chars):
    """A box is looked into for a time on the hour only when its content opens with one, and to 200
    characters: each of 3,000 unclosed boxes was scanned to 2,000 characters (0.4 s of a check).
    ``most_chars``: the characters all the boxes' scans may take together."""
    from ict.answers import readings

    scanned, balanced_group = [], readings._balanced_group

    def counted(text: str, open_index: int, limit: int = 2_000) -> str | None:
        scanned.append(limit)
        return balanced_group(text, open_index, limit)

    monkeypatch.setattr(readings, "_balanced_group", counted)
    start = time.perf_counter()
    assert readings._on_the_hour_readings(text) == [text]
    assert sum(scanned) <= most_chars
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(("completion", "expected"), [
    ("The answer is not 5, it is 6.", "The answer is \\boxed{6}"),
    ("The answer is not 5, it is 6 apples.", "The answer is \\boxed{6}"),
    ("The answer is not 5 but 6 or 7.", "The answer is \\boxed{6 \\text{ or } 7}"),
    ("The answer is not **5** but **6**.", "The answer is \\boxed{6}"),
    ("The answer is 12 if we count the endpoints and 14 otherwise.", "The answer is \\boxed{12 \\text{ or } 14}"),
    ("The answer is 3:45 pm.", "The answer is \\boxed{3:45}"),
    # left alone: no answer after the rejected one, a word after it, no later piece
    ("The answer is not 5.", None),
    ("The answer is not 5, it is more.", None),
    ("The answer is 12 if we count the endpoints.", None),
])
def test_anchor_answer_readings_of_a_rejected_answer_a_piecewise_answer_in_words_and_a_time(completion,
                                                                                            expected):
    from ict.answers.readings import anchor_answer_readings

    assert anchor_answer_readings(completion) == [completion if expected is None else expected]


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a number in math then a unit of time is a condition, no odds: math-verify read 10 and 5
    ("The answer is 2 in $10$ years.", "2", True),
    ("The answer is 2 in $10$ years.", "10", False),
    ("The answer is 3 in \\(5\\) days.", "3", True),
    # odds: read 1/6 (read 6)
    ("The answer is 1 in $6$.", "1", False),
    ("The answer is 1 in $6$ chances.", "1", False),
])
def test_an_anchored_number_in_a_time_in_math_is_the_answer(verifier, completion, gold, expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # a power written after the box: math-verify read the box alone, 2 (right for a gold 2)
    ("so \\boxed{2}^{2}", "2", False),
    ("so \\boxed{2}^{2}", "4", True),
    ("so \\boxed{2}^2.", "4", True),
    ("\\boxed{10}^{-3}", "0.001", True),
    ("\\boxed{1+2}^{2}", "9", True),  # in brackets: not 1 + 4
    ("\\boxed{-2}^{2}", "4", True),
    # as before: a degree sign, an ordinal
    ("so \\boxed{30}^\\circ", "30", True),
    ("so \\boxed{2}^{\\text{nd}}", "2", True),
    # ... a degree written ^0 and the power of a unit in the box (read 30^0 = 1 and 625)
    ("so \\boxed{30}^0", "30", True),
    ("The area is \\boxed{25 \\text{ cm}}^2.", "25", True),
    ("The area is \\boxed{48 \\text{ square units}}^{2}", "48", True),
    ("\\boxed{x}^2", "x^2", True),
])
def test_a_power_after_a_box_is_part_of_the_answer(verifier, completion, gold, expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("so \\boxed{2}^{2}.", "so \\boxed{2^{2}}."),
    ("\\boxed{10} ^ 3 m", "\\boxed{10^{3}} m"),
    ("\\boxed{\\frac{1}{2}}^{2}", "\\boxed{(\\frac{1}{2})^{2}}"),
    ("\\boxed{30}^\\circ", None),
    ("\\boxed{2}^{\\text{nd}}", None),
    ("\\boxed{2^{2}}", None),
    ("\\boxed{30}^0", None),
    ("\\boxed{30}^{0}", None),
    ("\\boxed{25 \\text{ cm}}^2", None),
    ("\\boxed{25 \\, \\mathrm{m}}^{2}", None),
    ("\\boxed{25 cm}^2", None),
    ("\\boxed{x}^2", "\\boxed{(x)^{2}}"),
    ("\\boxed{2\\pi}^2", "\\boxed{(2\\pi)^{2}}"),
    ("\\boxed{2", None),
])
def test_boxed_power(text, expected):
    from ict.answers.boxes import boxed_power

    assert boxed_power(text) == (text if expected is None else expected)

"""Rules of the math check that hand mutants of `ict.answers.verify` passed the other tests with:
the relative tolerance's bound on small golds, a gold that does not parse, a completion that is only
its ``#### N`` line, which reading's answer a wrong verdict reports, and the last
``<answer>...</answer>`` as the answer when nothing is boxed."""

from __future__ import annotations

import pytest
from conftest import assert_graded_in_both_extractions

from ict.answers.extraction import expand_scientific
from ict.answers.readings import mark_hash_answer
from ict.answers.verify import MATH_EXTRACTIONS


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
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


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
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


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
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("completion", "gold", "expected"), [
    # Minerva Math's gold (the shared minerva_math.jsonl) and renderings of it
    ("\\boxed{\\lambda_{\\text{red}} / \\sqrt{2}}", "\\lambda_{\\text {red}} / \\sqrt{2}", True),
    ("\\boxed{\\frac{\\lambda_{\\text{red}}}{\\sqrt{2}}}", "\\lambda_{\\text {red}} / \\sqrt{2}", True),
    ("\\boxed{\\frac{\\lambda_{\\mathrm{red}}}{\\sqrt{2}}}", "\\lambda_{\\text {red}} / \\sqrt{2}", True),
    ("\\boxed{\\lambda_{red} / \\sqrt{2}}", "\\lambda_{\\text {red}} / \\sqrt{2}", True),
    ("\\boxed{\\lambda_{\\text{red}} / \\sqrt{3}}", "\\lambda_{\\text {red}} / \\sqrt{2}", False),
    ("\\boxed{\\lambda_{\\text{blue}} / \\sqrt{2}}", "\\lambda_{\\text {red}} / \\sqrt{2}", False),
    ("\\boxed{v_{\\text{total}} = \\frac{1}{2}}", "\\frac{1}{2}", True),
    ("\\boxed{v_\\text{total} = \\frac{1}{2}}", "\\frac{1}{2}", True),
    ("\\boxed{v_{\\text{total}} = \\frac{1}{3}}", "\\frac{1}{2}", False),
])
def test_a_subscript_in_a_text_wrapper_is_part_of_the_answer(verifier, completion, gold, expected):
    """math-verify strips a unit from ``\\text{`` to the end of a boxed answer: it read
    ``\\boxed{\\lambda_{\\text{red}} / \\sqrt{2}}`` as ``\\lambda_{``, wrong for Minerva's gold
    ``\\lambda_{\\text {red}} / \\sqrt{2}``, and ``v_{\\text{total}} = \\frac{1}{2}`` as ``v_{``. Such a
    subscript is written plain in the gold and the completion (`plain_subscript_text`). Both
    extractions."""
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


@pytest.mark.parametrize(("text", "expected"), [
    ("\\lambda_{\\text {red}} / \\sqrt{2}", "\\lambda_{red} / \\sqrt{2}"),
    ("E_\\mathrm{total} + v_{ \\textbf{max speed} }", "E_{total} + v_{maxspeed}"),
    ("x_{\\mathbf{a}}^2", "x_{a}^2"),
    ("x_ {\\text{a}} + y_ \\mathrm {b}", "x_{a} + y_{b}"),  # LaTeX allows a space after _
    # left alone: no subscript, or more than the wrapper in it
    ("5 \\text{ cm}", None),
    ("x_{1}", None),
    ("x_{\\text{a} + 1}", None),
    ("x_{\\text{a}{b}}", None),
])
def test_plain_subscript_text(text, expected):
    from ict.answers.readings import plain_subscript_text

    assert plain_subscript_text(text) == (text if expected is None else expected)


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
    from ict.answers.boxes import unwrap_boxed_text_number

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
    assert_graded_in_both_extractions(verifier, completion, gold, expected)


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
    # a bare decimal after "####" lost its point: ".5" was 5, right for a gold 5
    ("So it is half.\n#### .5", "0.5", True),
    ("So it is half.\n#### .5", "5", False),
    ("#### $.75$", "0.75", True),
    ("#### $.75$", "75", False),
    # as before: a closing full stop, a signed bare decimal
    ("#### 72.", "72", True),
    ("#### -.5", "-0.5", True),
    ("#### ... 72", "72", True),
    # ... and before a unit its number alone is a reading, as 18's is in "#### 18 dollars" (the
    # text "0.5 dollars" was wrong for a gold 0.5)
    ("So it is half.\n#### .5 dollars", "0.5", True),
    ("So it is half.\n#### .5 dollars", "5", False),
    ("<answer>.25 dollars</answer>", "0.25", True),
    ("<answer>.25 dollars</answer>", "25", False),
    ("The answer is not 5 but .5 dollars.", "0.5", True),
])
def test_a_bare_decimal_after_the_hash_marker_keeps_its_point(verifier, completion, gold, expected):
    assert_graded_in_both_extractions(verifier, completion, gold, expected)
    assert mark_hash_answer("#### .5") == "\\boxed{.5}"

"""Answer extraction, gold normalization and the bounded math-verify checker.

The real-data tests read the benchmark copies in ../shared/data/benchmarks (skipped when absent):
each row's reference solution (or its gold wrapped in a boxed completion) must be judged correct,
and another row's must be judged incorrect. "Another row" is the next row whose normalized gold
string differs (rows with identical golds are genuinely interchangeable).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
import types
from pathlib import Path

import pytest
from verify_helpers import use_fake_workers

from ict.answers.extraction import (
    extract_boxed_answer,
    extract_choice_letter,
    extract_tagged_answer,
    sanitize_text,
)
from ict.answers.gold import gold_from_gsm8k, gold_from_list, gold_from_number, normalize_gold
from ict.answers.readings import mark_hash_answer
from ict.answers.verify import (
    MATH_EXTRACTIONS,
    MathVerifier,
    check_math,
    verify_math,
    verify_math_batch,
)

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "benchmarks"


# ------------------------------------------------------------------------ extraction


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("so \\boxed{42}.", "42"),
        ("\\boxed{1} then \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)"),
        ("$\\fbox{7}$", "7"),
        ("or $\\framebox{204}$ minutes", "204"),
        ("\\boxed {  5 }", "5"),
        ("\\boxed 5 apples", "5"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),  # escaped braces are literal
        ("first \\boxed{3} then \\boxed{4", "3"),  # unclosed last box: the earlier complete one
        ("\\boxed{7} (boxed: \\boxed{})", "7"),  # an empty last box (an echoed instruction) is skipped
        ("\\boxed{B} \\boxed{ }", "B"),
        ("within \\boxed{}.", None),
        ("no box here", None),
        ("\\boxed{", None),
        ("", None),
        (None, None),
    ],
)
def test_extract_boxed_answer(text, expected):
    assert extract_boxed_answer(text) == expected


def test_extract_boxed_answer_bounded_on_huge_input():
    huge = "x" * 1_000_000 + "\\boxed{12}"
    assert extract_boxed_answer(huge) == "12"
    assert extract_boxed_answer("\\boxed{" + "{" * 10_000) is None
    assert extract_boxed_answer("\\boxed{" * 10_000) is None
    assert extract_boxed_answer(b"\\boxed{\xff\xfe 3}") == "\ufffd\ufffd 3"


@pytest.mark.parametrize(
    ("text", "num_choices", "expected"),
    [
        ("The answer is \\boxed{C}.", 4, "C"),
        ("\\boxed{(B)}", 4, "B"),
        ("\\boxed{\\text{D}}", 4, "D"),
        ("\\boxed{\\textbf{(A)}}", 4, "A"),
        ("\\boxed{B) 42 kg}", 4, "B"),
        ("\\boxed{E}", 4, None),  # not one of 4 options
        ("\\boxed{42}", 4, None),
        ("Reasoning... The answer is (B).", 4, "B"),
        ("so the final answer is: **C**", 4, "C"),
        ("Answer: D", 4, "D"),
        ("answer is A, no wait, the answer is B", 4, "B"),
        ("B", 4, "B"),
        ("(c)", 4, None),  # lower case is not an option letter
        (" C. ", 4, "C"),
        ("B) the mitochondria", 4, "B"),
        ("I think A is wrong and B is right", 4, None),
        ("the answer is a good question", 4, None),
        ("The answer is J", 10, "J"),
        ("The answer is A or B.", 4, None),  # several letters commit to none (was A)
        ("The answer is A, B and C.", 4, None),
        ("The correct answer is (A) or (D).", 4, None),
        ("Answer: C/D", 4, None),
        ("The answer is B, and A is wrong.", 4, "B"),  # a letter after the commitment, not a list
        ("The answer is (B), which is 42.", 4, "B"),
        # an empty \boxed{} echoing the prompt's instruction hides no answer
        ("The answer is B.\nI put the letter of my final answer within \\boxed{} as asked.", 4, "B"),
        ("\\boxed{B}\nAs requested, the letter is within \\boxed{}.", 4, "B"),
        ("Final answer: \\boxed{B} \\boxed{ }", 4, "B"),
        ("The answer is $B$.", 4, "B"),  # like \(B\)
        ("The answer is \\(B\\).", 4, "B"),
        ("The answer is $B$ or $C$.", 4, None),
        ("The answer is \\(B\\) or \\(C\\).", 4, None),
        ("", 4, None),
    ],
)
def test_extract_choice_letter(text, num_choices, expected):
    assert extract_choice_letter(text, num_choices) == expected


def test_extract_choice_letter_rejects_bad_count():
    with pytest.raises(ValueError):
        extract_choice_letter("A", 0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>7</answer>", "7"),
        ("<answer>1</answer> then <answer> -6 </answer>", "-6"),
        ("so \\boxed{12}", "12"),
        ("<answer>3</answer> and \\boxed{4}", "3"),  # the tag wins
        ("the result is 7", None),  # no fallback to the last number
        ("<answer></answer>", None),
        ("<answer>5", None),
        ("\\boxed{7} (boxed: \\boxed{})", "7"),  # was None: the empty box hid the answer
    ],
)
def test_extract_tagged_answer(text, expected):
    assert extract_tagged_answer(text) == expected


# ------------------------------------------------------------------------ gold formats


def test_gold_formats():
    assert gold_from_gsm8k("So 3 + 4 = <<3+4=7>>7\n#### 1,234") == "1234"
    assert gold_from_gsm8k("#### $72") == "72"
    with pytest.raises(ValueError):
        gold_from_gsm8k("no marker")
    assert gold_from_number(27.0) == "27"
    assert gold_from_number("27.0") == "27"
    assert gold_from_number(4.25) == "4.25"
    assert gold_from_number("-900") == "-900"
    assert gold_from_list(["$2$"]) == "2"
    assert gold_from_list("['$2$']") == "2"
    assert gold_from_list(["$\\frac{1}{4} n(n+1)$"]) == "\\frac{1}{4} n(n+1)"
    assert gold_from_list(["$(3,2),(-3,2)$", "$x$"]) == "(3,2),(-3,2), x"
    assert normalize_gold("\\boxed{1.6} \\mathrm{~cm}", "boxed_solution") == "1.6"
    assert normalize_gold("$\\frac{1}{2}$", "latex") == "\\frac{1}{2}"
    assert normalize_gold("27.0", "latex") == "27"
    assert normalize_gold(["$2$"]) == "2"
    assert normalize_gold("text #### 5") == "5"
    assert normalize_gold(36.0) == "36"
    assert mark_hash_answer("x\n#### 1,234\n") == "x\n\\boxed{1234}"
    assert mark_hash_answer("\\boxed{3} #### 4") == "\\boxed{3} #### 4"


# ------------------------------------------------------------------------ math checks


@pytest.fixture(scope="module")
def verifier():
    pool = MathVerifier(num_workers=2)
    yield pool
    pool.close()


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("so \\boxed{\\frac{1}{2}}", "0.5", True),
        ("so \\boxed{\\dfrac12}", "\\frac{1}{2}", True),
        ("\\boxed{1}", "1 - \\sqrt{2}", False),  # a bare gold must not parse as its first number
        ("\\boxed{1-\\sqrt{2}}", "1 - \\sqrt{2}", True),
        ("\\boxed{\\left( 3, \\frac{\\pi}{2} \\right)}", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
        ("\\boxed{(3, \\pi/2)}", "\\left( 3, \\frac{\\pi}{2} \\right)", True),
        ("\\boxed{(2, 3)}", "\\left( 3, \\frac{\\pi}{2} \\right)", False),
        ("The answer is $x = 5$.", "5", True),
        ("\\boxed{27}", normalize_gold(27.0), True),
        ("\\boxed{4.5\\times 10^{33}}", "4.5e33", True),
        ("\\boxed{4.5e33}", "4.5e33", True),
        ("\\boxed{1.3e-27}", "2.88e-19", False),  # tiny numbers: relative, not 6-decimal, match
        ("\\boxed{2.88 \\times 10^{-19}}", "2.88e-19", True),
        # below a float's range (~5e-324) too: the gold underflowed to 0 and the check was skipped
        ("\\boxed{1.6 \\times 10^{-400}}", "1.5 \\times 10^{-400}", False),
        ("\\boxed{1.5 \\times 10^{-400}}", "1.5 \\times 10^{-400}", True),
        ("\\boxed{1.50001 \\times 10^{-400}}", "1.5 \\times 10^{-400}", True),  # within 1e-4 relative
        # an equation is compared by its right-hand side (hand-checked: x2 is wrong; math-verify
        # alone says equal, its 6-decimal rounding makes both 0)
        ("\\boxed{E = 5.760 \\times 10^{-19}}", "2.88e-19", False),
        ("\\boxed{E = h\\nu = 5.760 \\times 10^{-19}}", "2.88e-19", False),
        ("The answer is $E = 5.76e-19$.", "2.88e-19", False),
        ("\\boxed{5.76 \\times 10^{-19}}", "E = 2.88e-19", False),
        ("\\boxed{E = 2.88 \\times 10^{-19}}", "2.88e-19", True),
        ("\\boxed{E = h\\nu = 2.88 \\times 10^{-19}}", "2.88e-19", True),
        ("\\boxed{2.88 \\times 10^{-19}}", "E = 2.88e-19", True),
        # both equations: right-hand side against right-hand side (was graded right)
        ("\\boxed{E = 5.76 \\times 10^{-19}}", "E = 2.88 \\times 10^{-19}", False),
        ("\\boxed{k = 2.76e-23}", "k = 1.38e-23", False),
        ("\\boxed{E = 2.88 \\times 10^{-19}}", "E = 2.88 \\times 10^{-19}", True),
        ("...\n#### 72", "72", True),  # GSM8K-style final line
        ("so \\boxed{62.5\\%}", "62.5%", True),  # a percent gold (OlympiadBench): was read as the text 62.5\%
        ("so \\boxed{61\\%}", "60", False),
        ("I do not know", "3", False),
    ],
)
def test_check_math_cases(verifier, completion, gold, expected):
    verdict = verifier.check(completion, gold, timeout_seconds=10.0)
    assert verdict.correct is expected, verdict


@pytest.mark.parametrize(
    ("completion", "lenient", "anchored"),
    [
        ("so \\boxed{20}", True, True),
        ("The final answer is 20.", True, True),
        ("Answer: 20", True, True),
        ("...\n#### 20", True, True),
        ("#### Step 2: Revenue\n10 + 10 = 20\n\nThe answer is 20.", True, True),  # a heading, not ####'s answer
        ("#### Final Answer\nThe answer is 20.", True, True),
        ("so \\boxed{20\\%}", True, True),  # math-verify reads a boxed percent as no number
        ("so \\boxed{20 %}.", True, True),
        ("10 * 20 = 200 and then 20 chickens", True, False),  # a number merely mentioned
        ("20", True, False),
        ("So there is 10C10 * 20 * 20 * 10 = 10 * 20 * 20 *", True, False),
    ],
)
def test_anchored_extraction(verifier, completion, lenient, anchored):
    assert verifier.check(completion, "20", 10.0, "lenient").correct is lenient
    assert verifier.check(completion, "20", 10.0, "anchored").correct is anchored
    with pytest.raises(ValueError):
        verifier.check(completion, "20", 10.0, "fuzzy")


EGGS = "#### 1. Eggs left\n16 - 3 - 4 = 9 eggs.\n#### 2. Money made\n9 * 2 = 18 dollars.\nThe answer is 18."


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        (EGGS, "18", True),  # a numbered heading was boxed as the answer "2. Money made"
        (EGGS, "2", False),
        ("#### 1) Eggs\n9 eggs\n#### 2) Money\nFinal Answer: 18", "18", True),
        ("#### 60 % of the students\nSo 60 percent. The answer is 60.", "60", True),
        ("#### 60 % of the students\nSo 60 percent. The answer is 60.", "6", False),
    ],
)
def test_numbered_heading_is_not_the_hash_answer(verifier, completion, gold, expected):
    """Hand-checked verdicts, which math-verify used directly (its defaults) gives too."""
    from math_verify import parse, verify

    assert bool(verify(parse(f"${gold}$"), parse(completion))) is expected
    for extraction in MATH_EXTRACTIONS:
        assert verifier.check(completion, gold, 10.0, extraction).correct is expected, extraction
    assert mark_hash_answer(completion) == completion


def test_mark_hash_answer_boxes_a_bare_number_only():
    assert mark_hash_answer("x\n#### $18.\nThat is all.") == "x\n\\boxed{18}\nThat is all."
    assert mark_hash_answer("x\n#### -2.5 %") == "x\n\\boxed{-2.5 %}"
    assert mark_hash_answer("x\n#### \\$1,234") == "x\n\\boxed{1234}"
    assert mark_hash_answer("x\n#### 3/4") == "x\n\\boxed{3/4}"
    for heading in ("#### 2. Money made\n18", "#### 1) Eggs\n9", "#### 60 % of them\n60", "#### Step 2: Revenue"):
        assert mark_hash_answer(heading) == heading
    assert mark_hash_answer("x\n#### 18 eggs\nok") == "x\n\\boxed{18 eggs}\nok"  # one unit: an answer


@pytest.mark.parametrize(("line", "gold"), [("1e5", "1"), ("2:30", "2"), ("5 x", "5"), ("3 dollars", "4"),
                                            ("-2.5 %", "-25"), ("3 (4^{1})", "3"), ("42 (27, 9)", "42"),
                                            ("5 (\\frac{14}{3})", "5"), ("3 (2)", "3"), ("3 (x+1)", "3")])
def test_a_hash_answer_is_not_graded_right_by_a_piece_of_it(verifier, line, gold):
    """The unit reading boxes the number before a unit of two letters or more ("18 dollars"), never
    a piece of a number or expression: 1e5 is not 1, 2:30 not 2, 5 x not 5, and a number before
    brackets holding math is no number before a unit: 3 (4^{1}) is 12, not also 3; 42 (27, 9) is
    no 42 (hand-checked). So for an answer tag (the same readings)."""
    for completion in (f"We work it out.\n#### {line}", f"We work it out.\n<answer>{line}</answer>"):
        for extraction in MATH_EXTRACTIONS:
            assert not verifier.check(completion, gold, 10.0, extraction).correct, (completion, extraction)


@pytest.mark.parametrize(("line", "gold"), [
    ("\\frac{1}{2}", "\\frac{1}{2}"), ("-\\frac{3}{4}", "-\\frac{3}{4}"), ("2\\sqrt{2}", "2\\sqrt{2}"),
    ("1e5", "100000"), ("1.5e3", "1500"), ("2:30", "2:30"), ("10^3", "1000"), ("x = 5", "5"),
    ("7.5 hours", "7.5"), ("25 cents", "25"), ("18 dollars", "18"), ("42 km/h", "42"), ("18 (dollars)", "18"), ("9.8 (m/s^2)", "9.8"), ("3 (4^{1})", "12"), ("1,000", "1000"), ("$1,000.50", "1000.5"), ("-3", "-3"),
    ("3/4", "\\frac{3}{4}"),
])
def test_a_hash_answer_in_latex_or_with_a_unit_is_the_answer(verifier, line, gold):
    """Boxing a bare number only (e70fbde) lost these answers in anchored mode (ict eval's default),
    and \\sqrt, e-notation and times in both: '#### x' is the answer unless the line is a heading.
    Hand-checked golds; the GSM8K references (#### N) are tested above."""
    completion = f"Tom had 9 apples and 4 pears in 2 boxes.\n#### {line}"
    for extraction in MATH_EXTRACTIONS:
        assert verifier.check(completion, gold, 10.0, extraction).correct, extraction


@pytest.mark.parametrize(
    "completion",
    ["So the answer is \\boxed{18}. (Final answer within \\boxed{} as requested.)",
     "The answer is 18. I put it within \\boxed{}."],
)
def test_math_empty_box_reads_as_math_verify(verifier, completion):
    """Math answers are math-verify's extraction: an empty box after the answer counts as it does
    there (the first completion has no answer in either, unlike the choice and tag rules)."""
    from math_verify import parse, verify

    expected = bool(verify(parse("$18$"), parse(completion)))
    for extraction in MATH_EXTRACTIONS:
        assert verifier.check(completion, "18", 10.0, extraction).correct is expected


def test_module_functions_and_threads():
    assert verify_math("\\boxed{18}", "18") is True
    assert verify_math_batch([("\\boxed{3}", "3"), ("\\boxed{4}", "3")]) == [True, False]
    assert verify_math_batch([("it is 3", "3")], extraction="anchored") == [False]
    results: list[bool] = []
    thread = threading.Thread(target=lambda: results.append(verify_math("\\boxed{2}", "2")))
    thread.start()
    thread.join()
    assert results == [True]  # works off the main thread (no signal.alarm)


ADVERSARIAL = {
    "one_megabyte": "a" * 1_000_000,
    "power_tower": "\\boxed{9^{9^{9^{9}}}}",
    "nested_braces": "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
    "open_braces": "{" * 10_000,
    "unclosed_box": "The answer is \\boxed{12",
    "invalid_utf8": b"\\boxed{\xff\xfe\xfd} \xc3\x28 \x80",
    "lone_surrogate": "\\boxed{\udcff12}",
}


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_adversarial_completions_get_a_verdict(verifier):
    timeout = 2.0
    verdicts = {name: verifier.check(text, "12", timeout) for name, text in ADVERSARIAL.items()}
    for name, verdict in verdicts.items():
        assert verdict.correct is False, name
        assert verdict.status in {"ok", "no_answer", "timeout", "error"}, name
    # the power tower cannot be evaluated: it must be cut off by the bound, not hang the run
    assert verdicts["power_tower"].status == "timeout"
    assert verdicts["power_tower"].seconds >= timeout
    # invalid bytes around a valid answer are replaced, the answer still counts
    assert verifier.check(b"\xff\xfe so \\boxed{12} \xc3\x28", "12", timeout).correct is True
    # the pool recovers after a killed worker
    assert verifier.check("\\boxed{12}", "12", timeout).correct is True
    # a batch mixing adversarial and normal items keeps every normal verdict
    batch = [(text, "12") for text in ADVERSARIAL.values()] + [("\\boxed{12}", "12")] * 3
    results = verifier.check_batch(batch, timeout)
    assert [v.correct for v in results[-3:]] == [True, True, True]
    assert len(results) == len(batch)


def test_sanitize_text():
    assert sanitize_text(b"a\xffb") == "a\ufffdb"
    assert sanitize_text("a\udcffb").encode("utf-8") == b"a?b"
    assert sanitize_text(None) == ""


# ------------------------------------------------------------------------ real data


def _rows(name: str) -> list[dict]:
    path = DATA_DIR / f"{name}.jsonl"
    if not path.is_file():
        pytest.skip(f"benchmark copy not found: {path} (../shared/data/benchmarks is absent)")
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _other_index(golds: list[str], index: int) -> int:
    other = (index + 1) % len(golds)
    while golds[other] == golds[index]:
        other = (other + 1) % len(golds)
    return other


def _accuracy(verifier, completions: list[str], golds: list[str]) -> tuple[float, float, list]:
    """(fraction of own completions judged correct, fraction of others judged incorrect, misses),
    with the anchored extraction `ict eval` uses (the lenient one gives the same numbers here)."""
    own = verifier.check_batch(list(zip(completions, golds, strict=True)), 10.0, "anchored")
    others = verifier.check_batch(
        [(completions[_other_index(golds, i)], gold) for i, gold in enumerate(golds)], 10.0,
        "anchored",
    )
    misses = [("own", i, golds[i], v) for i, v in enumerate(own) if not v.correct]
    misses += [("other", i, golds[i], v) for i, v in enumerate(others) if v.correct]
    positive = sum(v.correct for v in own) / len(own)
    negative = sum(not v.correct for v in others) / len(others)
    return positive, negative, misses


def _boxed(gold: str) -> str:
    return f"Let me think. The final answer is \\boxed{{{gold}}}."


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_math500_reference_solutions(verifier):
    rows = _rows("math500")
    golds = [normalize_gold(row["answer"], "latex") for row in rows]
    positive, negative, misses = _accuracy(verifier, [row["solution"] for row in rows], golds)
    assert len(rows) == 500
    assert positive >= 0.99 and negative >= 0.99, misses[:5]


def test_gsm8k_reference_answers(verifier):
    rows = _rows("gsm8k")
    golds = [normalize_gold(row["answer"], "gsm8k") for row in rows]
    positive, negative, misses = _accuracy(verifier, [row["answer"] for row in rows], golds)
    assert len(rows) == 1319
    assert positive >= 0.99 and negative >= 0.99, misses[:5]


@pytest.mark.parametrize(("name", "field", "fmt"), [("aime24", "answer", "number"),
                                                    ("amc23", "answer", "number"),
                                                    ("olympiadbench", "final_answer", "list")])
def test_boxed_gold_completions(verifier, name, field, fmt):
    rows = _rows(name)
    golds = [normalize_gold(row[field], fmt) for row in rows]
    positive, negative, misses = _accuracy(verifier, [_boxed(gold) for gold in golds], golds)
    assert positive >= 0.99 and negative >= 0.99, misses[:5]


@pytest.mark.slow
def test_minerva_reference_solutions(verifier):
    rows = _rows("minerva_math")
    golds = [normalize_gold(row["solution"], "boxed_solution") for row in rows]
    positive, negative, misses = _accuracy(verifier, [row["solution"] for row in rows], golds)
    assert positive >= 0.99 and negative >= 0.99, misses[:5]


def test_minerva_tiny_golds_in_equation_form(verifier):
    """Each Minerva gold with 0 < |gold| < 1e-3, written ``E = m \\times 10^{e}``: itself is correct,
    x2, x10 and x0.5 (hand-checked wrong) are not (were graded correct for rows 264, 265, 267)."""
    rows = _rows("minerva_math")
    golds = [normalize_gold(row["solution"], "boxed_solution") for row in rows]
    tiny = [gold for gold in golds if re.fullmatch(r"[-+]?[\d.]+(e[-+]?\d+)?", gold)
            and 0 < abs(float(gold)) < 1e-3]
    assert len(tiny) == 20
    pairs, expected = [], []
    for gold in tiny:
        for factor in (1, 2, 10, 0.5):
            mantissa, exponent = f"{float(gold) * factor:.4e}".split("e")
            pairs.append((f"\\boxed{{E = {mantissa} \\times 10^{{{int(exponent)}}}}}", gold))
            expected.append(factor == 1)
    verdicts = verifier.check_batch(pairs, 10.0, "anchored")
    wrong = [(pair, v) for pair, v, e in zip(pairs, verdicts, expected, strict=True) if v.correct is not e]
    assert not wrong, wrong[:5]


def test_mmlu_stem_letters():
    rows = _rows("mmlu_stem")
    letters = "ABCD"
    for row in rows:
        gold = letters[int(row["answer"])]
        wrong = letters[(int(row["answer"]) + 1) % 4]
        assert extract_choice_letter(f"Reasoning.\nThe answer is \\boxed{{{gold}}}", 4) == gold
        assert extract_choice_letter(f"Reasoning.\nThe answer is \\boxed{{{wrong}}}", 4) != gold
        assert extract_choice_letter(f"The answer is ({wrong}).", 4) == wrong
        assert extract_choice_letter(f"The answer is ${gold}$. Letter within \\boxed{{}}.", 4) == gold


def test_check_math_default_pool_smoke():
    verdict = check_math("\\boxed{\\sqrt{4}}", "2")
    assert verdict.correct and verdict.status == "ok" and verdict.extracted == "\\sqrt{4}"


def test_worker_imports_this_copy_of_ict(monkeypatch):
    """The math-verify worker's PYTHONPATH starts with the directory that holds this ``ict``
    package (it was ``ict/`` itself, parents[1] of ict/answers/verify.py since the module moved
    there: the worker imported another installed ict, or none, when the checkout was on sys.path
    by other means than PYTHONPATH)."""
    import ict
    import ict.answers.verify as verify_module

    seen = {}

    def no_start(args, **kwargs):
        seen.update(kwargs["env"])
        raise OSError("not started")

    fake = types.SimpleNamespace(Popen=no_start, PIPE=subprocess.PIPE, DEVNULL=subprocess.DEVNULL)
    monkeypatch.setattr(verify_module, "subprocess", fake)  # this module's only
    with pytest.raises(OSError, match="not started"):
        verify_module._Worker()
    first = seen["PYTHONPATH"].split(os.pathsep)[0]
    assert Path(first) == Path(ict.__file__).resolve().parents[1]


def test_a_worker_restart_does_not_time_out_the_checks_answered_meanwhile(monkeypatch, tmp_path):
    """A worker that dies (or times out) is restarted when a check needs its slot. The restart
    blocked the pool until the new worker had imported math-verify (seconds), so a check that
    another worker answered within its bound meanwhile was read after that bound and judged a
    timeout (incorrect). Here the second check answers after 0.5 s of a 2 s bound while the
    restart takes 3 s: it must be judged by its answer."""
    use_fake_workers(monkeypatch, tmp_path, "ok,ok,slow:3")  # the restart (third start) takes 3 s
    pool = MathVerifier(num_workers=2)
    try:
        verdicts = pool.check_batch([("die", "1"), ("sleep 0.5", "1"), ("quick", "1")], 2.0)
    finally:
        pool.close()
    assert [verdict.status for verdict in verdicts] == ["error", "ok", "ok"]
    assert [verdict.correct for verdict in verdicts] == [False, True, True]


@pytest.mark.parametrize("sign", ["", "-"])
@pytest.mark.parametrize(
    ("mantissa", "expected"),
    [("2.88", True), ("2.8802", True),  # 6.9e-5 of the gold: within SMALL_NUMBER_RELATIVE_TOLERANCE (1e-4)
     ("2.8803", False), ("2.89", False),  # 1.04e-4 and 3.5e-3 of the gold: over it
     ("1.3 \\times 10^{-8}", False)],  # 1.3e-27, equal to the gold once both are rounded to 6 decimals
)
def test_a_tiny_gold_is_matched_within_a_relative_tolerance_of_either_sign(verifier, sign, mantissa,
                                                                             expected):
    """math-verify rounds numbers to 6 decimals, so every answer near a gold below 1e-3 in size
    would be equal to it; the answer must be within 1e-4 of the gold, relative (hand-worked:
    |2.8803 - 2.88| / 2.88 = 1.04e-4), a negative gold too (its size, not its value, is small)."""
    gold = f"{sign}2.88 \\times 10^{{-19}}"
    verdict = verifier.check(f"\\boxed{{{sign}{mantissa} \\times 10^{{-19}}}}", gold, 10.0, "anchored")
    assert verdict.correct is expected


def test_a_bound_of_a_second_still_reads_the_answers(verifier):
    """The pool waits in select for the answers until the earliest bound; checks answered well
    within a 1 s bound (a fresh worker answers these in ~0.1 s) are judged by their answers."""
    verdicts = verifier.check_batch([("\\boxed{12}", "12"), ("\\boxed{13}", "12"), ("\\boxed{12}", "12")], 1.0)
    assert [(v.correct, v.status) for v in verdicts] == [(True, "ok"), (False, "ok"), (True, "ok")]

"""Rules of the math check that hand mutants of `ict.answers.verify` passed the other tests with:
the relative tolerance's bound on small golds, a gold that does not parse, a completion that is only
its ``#### N`` line, and which reading's answer a wrong verdict reports."""

from __future__ import annotations

import pytest

from ict.answers.verify import MATH_EXTRACTIONS, MathVerifier, mark_hash_answer


@pytest.fixture(scope="module")
def verifier():
    pool = MathVerifier(num_workers=1)
    yield pool
    pool.close()


@pytest.mark.parametrize(("answer", "gold", "expected"), [
    # |0.0009004 - 0.0009| / 0.0009 = 4.4e-4 > 1e-4 (a gold just below the 1e-3 bound)
    ("0.0009004", "0.0009", False),
    ("0.00090008", "0.0009", True),  # 8.9e-5 <= 1e-4
    ("0.0000001", "0.0000002", False),  # 0.5
    ("0.00000025", "0.0000002", False),  # 0.25
    ("0.0000002", "0.0000002", True),
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

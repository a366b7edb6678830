"""Untrusted completions through every verifier (math, multiple choice, reasoning-gym): each gets
a wrong verdict (or a counted timeout/error), never a hang or a crash, all under one time bound,
and none is evaluated as code."""

from __future__ import annotations

import time

import pytest

from ict.answers.extraction import (
    extract_boxed_answer,
    extract_choice_letter,
    extract_tagged_answer,
)
from ict.answers.rewards import choice_reward, reasoning_gym_reward
from ict.answers.verify import MathVerifier
from ict.core.problems import Problem

RTL = "\u202e"
ADVERSARIAL: dict[str, str | bytes] = {
    "one_megabyte": "a" * 1_000_000,
    "one_megabyte_of_boxes": "\\boxed{1}" * 120_000,
    "million_digits": "\\boxed{" + "7" * 1_000_000 + "}",
    "million_digits_bare": "9" * 1_000_000,
    "power_tower": "\\boxed{9^{9^{9^{9}}}}",
    "huge_exponent": "\\boxed{10^{10^{100}}}",
    "factorial_tower": "\\boxed{(10^{10})!!}",
    "nested_braces": "\\boxed{" + "{" * 10_000 + "1" + "}" * 10_000 + "}",
    "nested_fracs": "\\boxed{" + "\\frac{1}{" * 2_000 + "2" + "}" * 2_000 + "}",
    "nested_parens": "\\boxed{" + "(" * 50_000 + "1" + ")" * 50_000 + "}",
    "open_braces": "{" * 100_000,
    "close_braces": "}" * 100_000,
    "unclosed_box": "The answer is \\boxed{12",
    "unclosed_many": "\\boxed{" * 50_000,
    "invalid_utf8": b"\\boxed{\xff\xfe\xfd} \xc3\x28 \x80",
    "nul_bytes": "\\boxed{1\x002} \x00\x00 answer: \x00",
    "nul_bytes_raw": b"\x00" * 100_000,
    "rtl_marks": f"The answer is {RTL}\\boxed{{21}}{RTL} (B)",
    "rtl_only": RTL * 10_000,
    "lone_surrogate": "\\boxed{\udcff12}",
    "python_code": "\\boxed{__import__('os').system('echo pwned > /tmp/ict_pwned')}",
    "eval_call": "\\boxed{eval('1+1')}",
    "lambda": "\\boxed{(lambda: 1)()}",
    "sympy_injection": "\\boxed{Symbol('x').__class__.__mro__}",
    "latex_def": "\\def\\x{\\x\\x}\\boxed{\\x}",
    "deep_sqrt": "\\boxed{" + "\\sqrt{" * 3_000 + "2" + "}" * 3_000 + "}",
    "giant_matrix": "\\boxed{\\begin{pmatrix}" + "1 & " * 20_000 + "1\\end{pmatrix}}",
    "many_answers_tags": "<answer>1</answer>" * 100_000,
    "unclosed_tag": "<answer>" + "5" * 100_000,
    "emoji_flood": "\U0001f600" * 200_000,
    "combining_marks": "1" + "\u0301" * 200_000,
    "newlines": "\n" * 1_000_000,
    "latex_env_flood": "\\begin{array}" * 20_000,
    "exponent_e_notation": "\\boxed{1e999999999}",
    "choice_spam": "(A) (B) (C) (D) " * 100_000,
}


@pytest.fixture(scope="module")
def verifier():
    pool = MathVerifier(num_workers=2)
    yield pool
    pool.close()


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_at_least_thirty_adversarial_completions_through_every_verifier(verifier, tmp_path):
    assert len(ADVERSARIAL) >= 30
    import reasoning_gym

    dataset = reasoning_gym.create_dataset("chain_sum", size=1, seed=0, min_terms=2, max_terms=2,
                                           min_digits=1, max_digits=1)
    entry = dataset[0]
    rg_problem = Problem(entry["question"], str(entry["answer"]), "reasoning_gym", scorer=dataset, entry=entry)
    choice_problem = Problem("q", "C", "choice", choices=["1", "2", "3", "4"])
    start = time.monotonic()
    timeout = 2.0
    math_verdicts = verifier.check_batch([(text, "12") for text in ADVERSARIAL.values()], timeout)
    counted = {"timeout": 0, "error": 0}
    for name, verdict in zip(ADVERSARIAL, math_verdicts, strict=True):
        assert verdict.correct is False, name
        assert verdict.status in {"ok", "no_answer", "timeout", "error"}, name
        counted[verdict.status] = counted.get(verdict.status, 0) + 1
    for name, text in ADVERSARIAL.items():
        completion = text.decode("utf-8", errors="replace") if isinstance(text, bytes) else text
        assert choice_reward(completion, choice_problem) in (0.0, 1.0), name
        assert extract_choice_letter(text, 4) in (None, "A", "B", "C", "D"), name
        for extraction in ("last_number", "tag"):
            reward = reasoning_gym_reward(completion, rg_problem, extraction)
            assert 0.0 <= reward <= 1.0, name
        extract_boxed_answer(text)
        extract_tagged_answer(text)
    elapsed = time.monotonic() - start
    # one bound for all of them: each math check is cut at 2 s, and a cut-off worker is restarted
    # (a few seconds of imports; more on a loaded machine)
    assert elapsed < 600, elapsed
    assert counted["timeout"] >= 1  # the power tower is cut off by the bound and counted
    assert not (tmp_path / "ict_pwned").exists()
    import os

    assert not os.path.exists("/tmp/ict_pwned")  # nothing was run as code
    # the pool still works after the killed workers
    assert verifier.check("\\boxed{12}", "12", timeout).correct is True


def test_spam_of_choice_letters_commits_to_none():
    assert extract_choice_letter(ADVERSARIAL["choice_spam"], 4) is None

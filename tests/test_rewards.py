"""Reward functions: strict extraction, reasoning-gym scorer, math-verify, option letters, format."""

from __future__ import annotations

import pytest

from ict.answers.extraction import extract_last_number
from ict.answers.rewards import REWARDS, build_reward, register_reward
from ict.core.errors import UsageError
from ict.data.training_data import Problem, reasoning_gym_problems


@pytest.mark.parametrize("text,expected", [
    ("4 + 3 = 7", "7"),
    ("The answer is 1,234.", "1234"),
    ("so -5 it is", "-5"),
    ("value 12.50 then 3.0", "3"),
    ("no digits here", None),
    # a bare decimal is 0.5, not 5 (gold 5 must not match it); the minus sign U+2212 is a sign
    ("so x = .5", "0.5"),
    ("the answer is \u22127", "-7"),
    ("$-.25$", "-0.25"),
    ("1.1.1.", "1"),  # not a bare .1 after a digit
    # commas group thousands only: a pair or a list ends in its last number
    ("the point (2,3)", "3"),
    ("1,234.5 in all", "1234.5"),
])
def test_extract_last_number(text, expected):
    assert extract_last_number(text) == expected


@pytest.mark.parametrize("text,expected", [
    ("so x = 1e5", "100000"),
    ("it is 4.5e33.", "4500000000000000000000000000000000"),
    ("it is 4.5E+33", "4500000000000000000000000000000000"),
    ("it is 1.2\\times 10^{-5}", "0.000012"),
    ("it is $1.2 \\cdot 10^{5}$.", "120000"),
    ("light: 3 × 10^8 m/s", "300000000"),
    ("so -2.5e-3", "-0.0025"),
    ("so \u22124e2", "-400"),
    ("so -0e5", "0"),  # no minus zero (a scorer comparing text would call it wrong)  # the minus sign U+2212, as for any last number
    ("so 1.50e1, or 2.50e-1", "0.25"),  # a trailing zero of the written-out value dropped
    ("so 1.50e1", "15"),  # (1.50e1 is 15, not 15.0)
    ("1e3 apples, then 42", "42"),  # a later number is the last one
    # no scientific notation: an exponent of x, a divisor, a digit run of 4 in the exponent
    ("x^2 \\cdot 10^3", "3"),
    ("1/2 \\times 10^3", "3"),
    ("1e1000", "1000"),
])
def test_the_last_number_in_scientific_notation_is_its_value(text, expected):
    """It was the exponent (``1e5`` ended in 5, ``4.5e33`` in 33): a wrong number, and for a
    gold 5 a right one. Hand-written values."""
    assert extract_last_number(text) == expected


def test_reasoning_gym_reward_scores_only_the_extracted_answer():
    problem = reasoning_gym_problems("chain_sum", 1, seed=3, options={
        "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1})[0]
    gold = problem.answer
    wrong = str(int(gold) + 1)
    reward = REWARDS["reasoning_gym"]
    assert reward(f"Let me think. The answer is {gold}.", problem) == 1.0
    assert reward(f"The answer is {gold}, no wait, {wrong}", problem) == 0.0
    assert reward("I do not know", problem) == 0.0
    tagged = REWARDS["reasoning_gym_tag"]
    assert tagged(f"<answer>{gold}</answer>", problem) == 1.0
    assert tagged(f"the answer is {gold}", problem) == 0.0  # strict: no tag, no credit
    # the scorer's own rule (documented): an extracted answer containing the gold earns
    # len(gold) / len(answer); last_number is the binary reward
    contains = f"{gold}0"  # gold is not 0 here
    assert reward(f"The answer is {contains}", problem) == pytest.approx(len(gold) / len(contains))
    assert REWARDS["last_number"](f"The answer is {contains}", problem) == 0.0


def test_math_reward_uses_bounded_math_verify():
    problem = Problem(prompt="1/2 + 1/4?", answer="\\frac{3}{4}", kind="math")
    reward = build_reward("math", "math", verify_timeout=10.0)
    totals, task = reward.score(["so the answer is \\boxed{0.75}", "\\boxed{\\frac{1}{2}}"],
                                [problem, problem])
    assert task == [1.0, 0.0]


def test_choice_reward():
    problem = Problem(prompt="q", answer="C", kind="choice", choices=["1", "2", "3", "4"])
    assert REWARDS["choice"]("The answer is (C).", problem) == 1.0
    assert REWARDS["choice"]("The answer is B", problem) == 0.0


def test_format_reward_and_weights():
    problem = Problem(prompt="q", answer="7", kind="math")
    assert REWARDS["format"]("<answer>7</answer>", problem) == 1.0
    assert REWARDS["format"]("<answer></answer>", problem) == 0.0
    assert REWARDS["format"]("<answer>1</answer><answer>7</answer>", problem) == 0.0
    reward = build_reward("last_number", "math", format_weight=0.5)
    totals, task = reward.score(["<answer>7</answer>", "7", "<answer>3</answer>"], [problem] * 3)
    assert totals == [1.5, 1.0, 0.5]
    assert task == [1.0, 1.0, 0.0]


def test_auto_reward_follows_problem_kind_and_unknown_names_fail():
    assert build_reward("auto", "reasoning_gym").names == ["reasoning_gym"]
    assert build_reward("auto", "reasoning_gym", extraction="tag").names == ["reasoning_gym_tag"]
    assert build_reward("auto", "choice").names == ["choice"]
    assert build_reward("auto", "math").names == ["math"]
    with pytest.raises(UsageError, match="unknown reward"):
        build_reward("nope", "math")


def test_register_custom_reward():
    @register_reward("length_under_5")
    def short(completion: str, problem: Problem) -> float:
        return float(len(completion) < 5)

    reward = build_reward("length_under_5", "math")
    assert reward.score(["abc", "abcdef"], [Problem("q", "1", "math")] * 2)[0] == [1.0, 0.0]


def test_a_format_tag_holding_only_whitespace_is_empty():
    problem = Problem(prompt="q", answer="7", kind="math")
    assert REWARDS["format"]("<answer> \n\t </answer>", problem) == 0.0
    assert REWARDS["format"]("so <answer>\n 7 \n</answer> done", problem) == 1.0


def test_format_weight_reweights_a_format_reward_named_in_the_spec():
    """`--reward last_number,format --format-reward 0.5`: the named format reward gets weight 0.5
    (not 1, nor a second format term). Hand-worked totals: 1 + 0.5 * format."""
    problem = Problem(prompt="q", answer="7", kind="math")
    reward = build_reward("last_number,format", "math", format_weight=0.5)
    assert (reward.names, reward.weights) == (["last_number", "format"], [1.0, 0.5])
    totals, task = reward.score(["<answer>7</answer>", "<answer>3</answer>", "7"], [problem] * 3)
    assert totals == [1.5, 0.5, 1.0]
    assert task == [1.0, 0.0, 1.0]
    assert build_reward("format", "math", format_weight=0.25).weights == [0.25]


def test_an_empty_reward_spec_is_the_problem_kinds_default():
    assert build_reward("", "choice").names == ["choice"]
    assert build_reward(" , ", "math").names == ["math"]


def test_the_math_reward_grades_leniently_within_the_runs_verify_timeout(monkeypatch):
    """The math reward is the grader's lenient math rule (a bare final number counts) under the
    run's `verify_timeout`, not the 5 s default."""
    import ict.answers.rewards as rewards_module

    seen = []
    real = rewards_module.grade_math_batch

    def spy(items, rules):
        seen.append((rules.math_extraction, rules.timeout_seconds, len(items)))
        return real(items, rules)

    monkeypatch.setattr(rewards_module, "grade_math_batch", spy)
    problem = Problem(prompt="1/2 + 1/4?", answer="\\frac{3}{4}", kind="math")
    reward = build_reward("math", "math", verify_timeout=7.5)
    assert reward.score(["1/2 + 1/4 = 3/4, so it is 0.75", "it is 0.5"], [problem] * 2)[1] == [1.0, 0.0]
    assert seen == [("lenient", 7.5, 2)]  # the rollout's checks as one batch over the workers
    assert reward.functions[0]("it is 0.75", problem) == 1.0 and seen[-1] == ("lenient", 7.5, 1)


def test_a_rollout_is_scored_with_its_math_checks_in_one_batch_and_its_rewards_in_order(monkeypatch):
    """Reward.score graded math one completion at a time (one check_batch call each, one worker
    busy); the rollout's checks go as one batch now, and each completion keeps its own rewards:
    the weighted totals of math + format + a registered reward, against hand-worked values."""
    import ict.answers.rewards as rewards_module

    calls = []
    real = rewards_module.grade_math_batch
    monkeypatch.setattr(rewards_module, "grade_math_batch",
                        lambda items, rules: calls.append(len(items)) or real(items, rules))
    monkeypatch.setitem(REWARDS, "length_is_odd", lambda completion, problem: float(len(completion) % 2))
    half = Problem(prompt="1/2?", answer="\\frac{1}{2}", kind="math")
    three = Problem(prompt="1 + 2?", answer="3", kind="math")
    completions = ["\\boxed{\\frac{1}{2}} <answer>1/2</answer>", "\\boxed{3}", "\\boxed{4} <answer>4</answer>", "so 1/2"]
    reward = build_reward("math,length_is_odd", "math", format_weight=0.5)
    totals, task = reward.score(completions, [half, three, three, half])
    assert calls == [4]
    assert task == [1.0, 1.0, 0.0, 1.0]
    assert [len(c) for c in completions] == [40, 9, 28, 6]  # length_is_odd: 0, 1, 0, 0
    assert totals == [1.0 + 0.5, 1.0 + 1.0, 0.0 + 0.5, 1.0]


def test_the_last_number_reward_reads_scientific_notation_as_its_value():
    problem = Problem(prompt="q", answer="100000", kind="number")
    assert REWARDS["last_number"]("so it is 1e5", problem) == 1.0
    assert REWARDS["last_number"]("so it is 1e5", Problem(prompt="q", answer="5", kind="number")) == 0.0


@pytest.mark.parametrize("returned", [None, float("nan"), float("inf"), "0.5", [1.0]])
def test_a_plugin_reward_that_returns_no_finite_number_is_named_in_one_line(returned):
    """A registered reward returning None was a TypeError at the weighted sum ("unsupported operand
    type(s) for *: 'float' and 'NoneType'") naming no reward; NaN or infinity made its group's
    advantages non-finite, the update skipped without a word. A bool, an int or a numpy float is a
    number (True = 1)."""
    import numpy as np

    problem = Problem(prompt="p", answer="1", kind="math")
    values = {"bad": returned, "flag": True, "count": 2, "np": np.float32(0.25)}
    try:
        for name, value in values.items():
            register_reward(f"test_plugin_{name}")(lambda completion, problem, _value=value: _value)
        with pytest.raises(ValueError, match=r"^reward 'test_plugin_bad' returned .* for a completion; a reward "
                                             r"must be a finite number$"):
            build_reward("last_number,test_plugin_bad", "math").score(["1"], [problem])
        totals, task = build_reward("test_plugin_flag,test_plugin_count,test_plugin_np", "math").score(["1"], [problem])
        assert (totals, task) == ([3.25], [True])
    finally:
        for name in values:
            REWARDS.pop(f"test_plugin_{name}", None)

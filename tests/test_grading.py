"""The one grader: training rewards and evaluation judge the same completion the same way."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ict.answers.grading import GradingRules, grade, grade_batch
from ict.answers.rewards import REWARDS, build_reward
from ict.core.errors import UsageError
from ict.core.problems import Problem
from ict.data.benchmarks import load_benchmark
from ict.data.training_data import reasoning_gym_problems
from ict.evaluation.evaluate import EvalConfig, grade_completions
from ict.evaluation.records import GRADING_KEYS, RESUME_KEYS, RUN_FILE, prepare_output_dir

RG = "rg:chain_sum:min_terms=2:max_terms=2:min_digits=1:max_digits=1:size=4"


class ExactScorer:
    """A reasoning-gym-like scorer written here: 1.0 for the exact answer, 0.5 for the answer with
    a trailing period, raises on 'boom'."""

    def score_answer(self, answer: str, entry: dict) -> float:
        if answer == "boom":
            raise RuntimeError("scorer failure")
        if answer == entry["answer"]:
            return 1.0
        return 0.5 if answer == entry["answer"] + "." else 0.0


def rg_problem(answer: str = "12") -> Problem:
    return Problem("What is 5 + 7?", answer, "reasoning_gym", scorer=ExactScorer(),
                   entry={"answer": answer})


@pytest.mark.parametrize(
    ("completion", "extraction", "expected"),
    [
        ("5 + 7 = 12", "last_number", (True, "12", "ok", 1.0)),
        ("12 or maybe 13", "last_number", (False, "13", "ok", 0.0)),
        ("no digits here", "last_number", (False, None, "no_answer", 0.0)),
        ("5 + 7 = 12", "tag", (False, None, "no_answer", 0.0)),
        ("<answer>12</answer> then 40", "tag", (True, "12", "ok", 1.0)),
        ("\\boxed{12.}", "tag", (False, "12.", "ok", 0.5)),
        ("\\boxed{12} (boxed: \\boxed{})", "tag", (True, "12", "ok", 1.0)),  # an empty box is skipped
        ("<answer>boom</answer>", "tag", (False, "boom", "error", 0.0)),
    ],
)
def test_reasoning_gym_rules(completion, extraction, expected):
    verdict = grade(rg_problem(), completion, GradingRules(answer_extraction=extraction))
    assert (verdict.correct, verdict.extracted, verdict.status, verdict.score) == expected


def test_rewards_are_the_graders_scores():
    """Each task reward of `ict train` is the grader's score of the same completion."""
    problem = rg_problem()
    completions = ["5 + 7 = 12", "<answer>12</answer> 3", "\\boxed{12.}", "none", "<answer>boom</answer>"]
    by_rule = {"reasoning_gym": "last_number", "reasoning_gym_tag": "tag"}
    for name, extraction in by_rule.items():
        rewards = [REWARDS[name](c, problem) for c in completions]
        scores = [v.score for v in grade_batch([(problem, c) for c in completions],
                                               GradingRules(answer_extraction=extraction))]
        assert rewards == scores
    # "\\boxed{12.}": the last number is 12 (a trailing period is not a decimal point)
    assert [REWARDS["reasoning_gym"](c, problem) for c in completions] == [1.0, 0.0, 1.0, 0.0, 0.0]
    choice = Problem("q", "B", "choice", choices=["x", "y", "z"])
    assert [REWARDS["choice"](c, choice) for c in ("\\boxed{B}", "A", "")] == [1.0, 0.0, 0.0]
    number = Problem("q", "1,234", "math")
    assert [REWARDS["last_number"](c, number) for c in ("so 1234.0", "1233", "")] == [1.0, 0.0, 0.0]


def test_mixed_kinds_keep_their_order():
    math_problem = Problem("1+2?", "3", "math")
    choice = Problem("q", "A", "choice", choices=["a", "b"])
    items = [(choice, "\\boxed{A}"), (math_problem, "\\boxed{3}"), (rg_problem(), "12"),
             (math_problem, "\\boxed{4}"), (choice, "B")]
    verdicts = grade_batch(items, GradingRules(answer_extraction="last_number"))
    assert [v.correct for v in verdicts] == [True, True, True, False, False]
    with pytest.raises(UsageError):
        grade_batch([(Problem("q", "1", "poetry"), "1")])
    with pytest.raises(UsageError):
        GradingRules(answer_extraction="first_number")


@pytest.mark.parametrize(("completion", "expected"), [
    ("\\boxed{A}", True), ("\\boxed{B}", True), ("The answer is B.", True),
    ("\\boxed{C}", False), ("\\boxed{D}", False), ("no letter", False),
])
def test_a_letter_of_an_option_worded_as_the_gold_option_is_right(completion, expected):
    """MMLU-STEM (the shared mmlu_stem.jsonl, row 2553): "Subtract. 2,396 - 1,709", options 687,
    687, 1,493, 1,695, gold A; B names the same answer, 687 (B was graded wrong). Spaces around an
    option do not count; a distinct option stays wrong."""
    problem = Problem("q", "A", "choice", choices=["687", " 687 ", "1,493", "1,695"])
    assert grade(problem, completion).correct is expected
    distinct = Problem("q", "A", "choice", choices=["687", "688", "1,493", "1,695"])
    assert grade(distinct, completion).correct is (expected and "A" in completion)
    beyond = Problem("q", "E", "choice", choices=["687", "687", "1,493", "1,695"])  # no such option
    assert grade(beyond, completion).correct is False


@pytest.mark.parametrize(("votes", "expected"), [
    ("CAB", True), ("ABCC", True), ("BAD", True), ("CCAB", False), ("BCC", False),
])
def test_letters_of_options_worded_alike_vote_together_in_maj_at_n(votes, expected):
    """maj@n on MMLU-STEM row 2553 (687 listed as A and B, gold A): A and B are one answer, 687,
    one vote (`vote_key`). Hand-worked: CAB is 687 two to one (A and B voted apart, 1 vote each,
    and C won); ABCC ties 687 with 1,493, 687 first; BAD is 687 two to one; CCAB ties, 1,493 first;
    BCC is 1,493 two to one."""
    from ict.answers.grading import vote_key
    from ict.core.metrics import majority_vote_correct

    problem = Problem("q", "A", "choice", choices=["687", " 687 ", "1,493", "1,695"])
    verdicts = [grade(problem, f"\\boxed{{{vote}}}") for vote in votes]
    keys = [vote_key(problem, verdict.extracted) for verdict in verdicts]
    assert majority_vote_correct(keys, [verdict.correct for verdict in verdicts]) is expected
    assert [vote_key(problem, letter) for letter in ("A", "B", " B ", "C", "D", None)] == [
        "A", "A", "A", "C", "D", None]


def test_eval_last_number_uses_the_training_prompt_and_answer_rule():
    """`ict eval --answer-extraction last_number` shows the model exactly the prompt `ict train`
    trains on (the bare question) and grades the answer the reward grades."""
    tagged = load_benchmark(RG)
    bare = load_benchmark(RG, answer_extraction="last_number")
    assert [p.entry["question"] for p in bare.problems] == [p.entry["question"]
                                                             for p in tagged.problems]
    for problem in bare.problems:
        assert problem.prompt == problem.entry["question"]
        assert "\\boxed" not in problem.prompt
    for problem in tagged.problems:
        assert "\\boxed{}" in problem.prompt
    training = reasoning_gym_problems(
        "chain_sum", 4, 1_000_003, {"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                    "max_digits": 1})
    assert [p.prompt for p in training] == [p.prompt for p in bare.problems]
    problem = bare.problems[0]
    completions = [f"The sum is {problem.answer}", f"{problem.answer} then 99", "no idea"]
    verdicts = grade_completions(bare, [(problem, c) for c in completions],
                                 answer_extraction="last_number")
    assert [v.correct for v in verdicts] == [True, False, False]
    reward = build_reward("auto", "reasoning_gym", "last_number")
    assert reward.score(completions, [problem] * 3)[1] == [1.0, 0.0, 0.0]


def _prepare(config: EvalConfig, out):
    return prepare_output_dir(out, {key: getattr(config, key) for key in RESUME_KEYS},
                              {key: getattr(config, key) for key in GRADING_KEYS},
                              config.num_samples, config.greedy)


def test_eval_runs_from_before_the_option_still_resume(tmp_path):
    out = tmp_path / "eval"
    out.mkdir()
    (out / "samples.jsonl").write_text("")
    old = {"model": "m", "num_samples": 4, "greedy": False, "temperature": 0.6, "top_p": 0.95,
           "max_new_tokens": 8, "seed": 0, "system_prompt": None,
           "grading": {"math_extraction": "anchored", "verify_timeout": 5.0}}
    (out / RUN_FILE).write_text(json.dumps(old))
    config = EvalConfig(model="m", max_new_tokens=8, output_dir=str(out))
    _prepare(config, out)  # answer_extraction "tag" = what older runs used
    assert json.loads((out / RUN_FILE).read_text())["answer_extraction"] == "tag"
    (out / "samples.jsonl").write_text("")
    config = EvalConfig(model="m", max_new_tokens=8, output_dir=str(out),
                        answer_extraction="last_number")
    with pytest.raises(UsageError, match="answer_extraction"):
        _prepare(config, out)


def test_a_math_answer_votes_with_its_exact_value_when_it_is_a_plain_number_or_fraction():
    """maj@n's key (`vote_key`): the math answers below, as math-verify extracts them, are one
    vote per value (hand-worked: 18.5 = 37/2, 1,000 = 1000, -3/4 written four ways, 2/4 = 1/2);
    a zero denominator, a tuple, an equation, a root and digits with a stray comma keep their
    string; choice letters and reasoning-gym answers always vote with their string (05 is not 5)."""
    from fractions import Fraction

    from ict.answers.extraction import number_value
    from ict.answers.grading import vote_key

    math = Problem(prompt="q", answer="1", kind="math")
    same = [["18.50", "18.5", "37/2", "\\frac{37}{2}", "\\dfrac{37}{2}", " 18.500 "],
            ["1,000", "1000", "1000.0", "\\frac{2000}{2}"],
            ["-\\frac{3}{4}", "\\frac{-3}{4}", "-0.75", "\u22120.75", "-3/4", "- \\tfrac{3}{4}"],
            ["\\frac{2}{4}", "\\frac{1}{2}", ".5", "0.5"]]
    values = [Fraction(37, 2), Fraction(1000), Fraction(-3, 4), Fraction(1, 2)]
    for answers, value in zip(same, values, strict=True):
        assert [number_value(answer) for answer in answers] == [value] * len(answers)
        assert {vote_key(math, answer) for answer in answers} == {f"={value}"}
    for text in ("\\frac{1}{0}", "(1,2)", "x=3", "\\sqrt{2}", "1,2", "1/2/3", "3.", "--3", ""):
        assert number_value(text) is None
    assert [vote_key(math, text) for text in ("x = 3", "(1, 2)", "3", None)] == ["x=3", "(1,2)", "=3", None]
    choice = Problem(prompt="q", answer="A", kind="choice", choices=["1", "2"])
    gym = Problem(prompt="q", answer="5", kind="reasoning_gym")
    assert [vote_key(choice, "A"), vote_key(gym, "05"), vote_key(gym, "5"), vote_key(gym, None)] == ["A", "05", "5", None]


def test_a_listed_pair_of_numbers_does_not_vote_with_the_number_its_digits_join_into():
    """maj@n: ``2, 100`` (two numbers, as math-verify extracts a listed answer) and ``2100`` are two
    answers; dropping the space made ``2,100``, a thousands comma, and they voted as one, so the
    first sample's verdict decided for both. Hand-worked: three ``2, 100`` (right against the gold
    ``2, 100``) beat two ``2100`` (wrong); against the gold 2100 two ``2100`` beat one ``2, 100``.
    ``2,100`` without a space stays the number 2100. Likewise ``1 000`` and ``1 2``, which
    math-verify grades wrong against the golds 1000 and 12 (``\\boxed{1,000}`` right), vote apart
    from 1000 and 12; a space beside a sign, a brace or the ends is no split."""
    from ict.answers.grading import vote_key
    from ict.core.metrics import majority_vote_correct

    math = Problem(prompt="q", answer="2, 100", kind="math")
    texts = ("2, 100", "2,  100", "2 ,100", "2100", "2,100", "1 000", "1,000", "1 2", " 12 ", "- \\frac{1}{ 2}")
    assert [vote_key(math, text) for text in texts] == [
        "2,100", "2,100", "2,100", "=2100", "=2100", "1000", "=1000", "12", "=12", "=-1/2"]
    listed_wins = ["2100", "2100", "2, 100", "2, 100", "2, 100"]
    assert majority_vote_correct([vote_key(math, text) for text in listed_wins],
                                 [False, False, True, True, True])
    number_wins = ["2, 100", "2100", "2100"]
    assert majority_vote_correct([vote_key(math, text) for text in number_wins], [False, True, True])



_NUMBERS = (st.integers(-10**15, 10**15).map(str)
            | st.decimals(-10**6, 10**6, places=3, allow_nan=False, allow_infinity=False).map(str)
            | st.tuples(st.integers(-99, 99), st.integers(1, 99)).map(lambda pair: f"\\frac{{{pair[0]}}}{{{pair[1]}}}"))


@given(gold=_NUMBERS, offset=st.sampled_from(["1", "-1", "10", "1/7"]),
       before=st.sampled_from(["", "So the answer is ", "We get $x = 3$, and finally ", "\n\n"]),
       wrap=st.sampled_from(["\\boxed{%s}", "$\\boxed{%s}$", "$\\boxed{ %s }$."]),
       extraction=st.sampled_from(["anchored", "lenient"]))
def test_a_boxed_number_is_right_exactly_when_it_is_the_gold(gold, offset, before, wrap, extraction):
    """Property (math-verify through the worker pool): for an integer, a decimal or a fraction X,
    ``\\boxed{X}`` after any prose grades correct against the gold X, under either extraction, and
    ``\\boxed{X + offset}`` (the sum written out exactly, in lowest terms) wrong."""
    from fractions import Fraction

    from ict.answers.extraction import number_value
    from ict.answers.gold import normalize_gold

    other = number_value(gold) + Fraction(offset)
    other_text = str(other.numerator) if other.denominator == 1 else f"\\frac{{{other.numerator}}}{{{other.denominator}}}"
    problem = Problem(prompt="q", answer=normalize_gold(gold), kind="math")
    verdicts = grade_batch([(problem, before + wrap % gold), (problem, before + wrap % other_text)],
                           GradingRules(math_extraction=extraction))
    assert [verdict.correct for verdict in verdicts] == [True, False]


@pytest.mark.parametrize(("choices", "completion", "expected"), [
    (["687", "$687$", "1,493", "1,695"], "\\boxed{B}", True),
    (["$687$", " \\(687\\) ", "1,493", "1,695"], "The answer is B.", True),
    (["$687$", "687.", "1,493", "1,695"], "\\boxed{B}", False),  # "687." is no math: as before
    (["$687$", "$688$", "1,493", "1,695"], "\\boxed{B}", False),
    (["$687$", "687", "1,493", "1,695"], "\\boxed{C}", False),
])
def test_an_option_in_math_delimiters_is_worded_as_the_same_option_without(choices, completion,
                                                                            expected):
    """``$687$`` and ``687`` name one answer (gold A): B was graded wrong, and in maj@n A and B
    voted apart (`vote_key`)."""
    from ict.answers.grading import vote_key

    problem = Problem("q", "A", "choice", choices=choices)
    verdict = grade(problem, completion)
    assert verdict.correct is expected
    assert (vote_key(problem, verdict.extracted) == vote_key(problem, "A")) is expected


@pytest.mark.parametrize(("completion", "expected"), [
    # hedges: two options, none committed to (A was read, right for a gold A)
    ("The answer is A, or maybe B.", None),
    ("The answer is (A) or possibly (B)", None),
    ("The answer is A and/or B.", None),
    ("The answer is A (or B).", None),
    ("\\boxed{A} or \\boxed{B}", None),
    ("so \\boxed{A}, \\boxed{C}.", None),
    ("\\boxed{(A)} or maybe \\boxed{B}", None),
    # still one option: a reason, a repeated box, boxes not joined
    ("The answer is A (not B).", "A"),
    ("The answer is A, because B is too small.", "A"),
    ("\\boxed{A} or \\boxed{A}", "A"),
    ("First \\boxed{B}. On reflection the answer is \\boxed{A}", "A"),
    ("The answer is A (maybe).", "A"),
])
def test_a_hedged_option_commits_to_none(completion, expected):
    """"The answer is A, or maybe B" names two options as "A or B" does (`extract_choice_letter`'s
    rule 2, `_HEDGE`), and so do two boxes joined by "or" or a comma (math-verify reads ``\\boxed{3}
    or \\boxed{4}`` as both numbers): a hedge is graded wrong, whichever the gold."""
    problem = Problem("q", "A", "choice", choices=["1", "2", "3", "4"])
    verdict = grade(problem, completion)
    assert verdict.extracted == expected
    assert verdict.correct is (expected == "A")


@pytest.mark.parametrize(("completion", "expected"), [
    # hedges read as one option: a hedge word after a comma, boxes in text wrappers, a bold answer
    ("\\boxed{A}, or perhaps \\boxed{C}", None),  # was C ("\boxed{B} or perhaps \boxed{C}": none)
    ("\\boxed{A}, maybe \\boxed{C}", None),
    ("\\boxed{\\text{A}} or \\boxed{\\text{B}}", None),  # was B
    ("\\boxed{\\textbf{(A)}}, \\boxed{\\textbf{(C)}}", None),
    ("**Answer: B** (or maybe C)", None),  # was B
    ("**Answer: B** or C.", None),
    # still one option
    ("\\boxed{\\text{B}} or \\boxed{\\text{B}}", "B"),
    ("\\boxed{\\text{A}}, so \\boxed{\\text{B}}", "B"),
    ("\\boxed{A}, perhaps wrongly. Then \\boxed{B}", "B"),
    ("**Answer: B** (C is too small).", "B"),
    ("**Answer: B**", "B"),
])
def test_a_hedge_after_a_comma_between_wrapped_boxes_or_after_bold_commits_to_none(completion,
                                                                                     expected):
    """Session 61's hedge rules read a hedge word only after "or" between boxes, boxes of no
    braces, and no ``**`` after the answer's letter: the second option of these hedges was
    committed to, right for its gold."""
    problem = Problem("q", "C", "choice", choices=["1", "2", "3", "4"])
    verdict = grade(problem, completion)
    assert verdict.extracted == expected
    assert verdict.correct is (expected == "C")


@pytest.mark.parametrize(("completion", "expected"), [
    # a bold second option is a hedge as a plain one is ("The answer is B or C": none)
    ("**Answer: B** or **C**", None),  # was B: right for a gold B
    ("The correct answer is **(B)** or **(C)**.", None),
    ("The answer is **B** and **C**.", None),
    ("**Answer: B**/**C**", None),
    ("**Answer: B**, or maybe **C**", None),
    # still one option
    ("**Answer: B** and **C is wrong**.", "B"),
    ("**Answer: B**, **C** is too large.", "B"),
    ("**Answer: (B)**", "B"),
])
def test_a_bold_second_option_after_a_bold_answer_commits_to_none(completion, expected):
    problem = Problem("q", "B", "choice", choices=["1", "2", "3", "4"])
    verdict = grade(problem, completion)
    assert verdict.extracted == expected
    assert verdict.correct is (expected == "B")


@pytest.mark.parametrize(("completion", "expected"), [
    # the letter in math delimiters and a bracket or a text wrapper, or after "choice": read none
    ("So the answer is $(C)$.", "C"),
    ("The answer is $\\textbf{(C)}$", "C"),
    ("The answer is \\(\\textbf{(C)}\\).", "C"),
    ("The answer is choice C.", "C"),
    ("The answer is $[C]$.", "C"),
    # ... and two of them, or a hedge, commit to none as "(B) or (C)" does
    ("The answer is $(B)$ or $(C)$.", None),
    ("The answer is $\\textbf{(B)}$ or $\\textbf{(C)}$.", None),
    ("The answer is $(B)$, or maybe $(C)$.", None),
    ("The answer is choice B or choice C.", None),
    # a reason after it still ends its clause
    ("The answer is $(C)$ because $(B)$ is too large.", "C"),
])
def test_a_letter_in_math_delimiters_with_a_bracket_or_after_choice_is_the_answer(completion, expected):
    """"The answer is" then ``$(C)$``, ``$\\textbf{(C)}$`` or "choice C" (rule 2 of
    `extract_choice_letter`) read no letter: wrong for a gold C."""
    problem = Problem("q", "C", "choice", choices=["1", "2", "3", "4"])
    verdict = grade(problem, completion)
    assert verdict.extracted == expected
    assert verdict.correct is (expected == "C")


@pytest.mark.parametrize(("completion", "expected"), [
    ("\\boxed{B}, not \\boxed{C}", "B"),  # was C: right for a gold C
    ("The answer is \\boxed{B} rather than $\\boxed{C}$.", "B"),
    ("The answer is \\boxed{B}, instead of \\boxed{C}", "B"),
    ("The answer is not \\boxed{C}.", None),
    ("\\boxed{A} or \\boxed{B}, not \\boxed{C}", None),  # the hedge before it commits to none
    # a box after a sentence that says "not" is the answer
    ("\\boxed{C} is not right, so \\boxed{B}", "B"),
    ("Not C. The answer is \\boxed{C}", "C"),
])
def test_a_negated_last_box_is_no_answer(completion, expected):
    """A last box after "not", "rather than" or "instead of" (`_NEGATED_BOX`) rejects its option:
    the text before the word is read."""
    problem = Problem("q", "C", "choice", choices=["1", "2", "3", "4"])
    verdict = grade(problem, completion)
    assert verdict.extracted == expected
    assert verdict.correct is (expected == "C")


@pytest.mark.parametrize(("completion", "expected"), [
    # options listed after a letter in math delimiters or a wrapper, as after "(B) 42 (C) 43": none
    ("The answer is $(B)$ 42 $(C)$ 43.", None),
    ("The answer is $\\textbf{(B)}\\ 42 \\qquad \\textbf{(C)}\\ 43$", None),
    ("The answer is \\(\\textbf{(B)}\\) 42 \\(\\textbf{(C)}\\) 43", None),
    ("The answer is $(D)$ 6 $(C)$ 5 $(B)$ 4 $(A)$ 3", None),
    ("The answer is $(B)\\ 42 \\quad (C)\\ 43$", None),
    # one option with its text, an option its text names, a reason: the letter
    ("The answer is $\\textbf{(B)}\\ 42$", "B"),
    ("The answer is $(B)$, not $(C)$.", "B"),
    ("The answer is $(D)$ Both $(A)$ and $(B)$", "D"),
])
def test_options_listed_after_a_letter_in_math_delimiters_commit_to_none(completion, expected):
    """"The answer is $(B)$ 42 $(C)$ 43" echoes the options (rule 2's listing, read as without the
    math markup); it read B: right for a gold B."""
    problem = Problem("q", "B", "choice", choices=["41", "42", "43", "44"])
    verdict = grade(problem, completion)
    assert verdict.extracted == expected
    assert verdict.correct is (expected == "B")

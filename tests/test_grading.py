"""The one grader: training rewards and evaluation judge the same completion the same way."""

from __future__ import annotations

import json

import pytest

from ict.answers.grading import GradingRules, answer_classes, grade, grade_batch
from ict.answers.rewards import REWARDS, build_reward
from ict.core.errors import UsageError
from ict.core.metrics import majority_vote_correct
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


def test_answer_classes_group_the_math_answers_the_grader_calls_equal():
    """Hand-worked classes (each answer -> the first answer of its class, whitespace removed):
    0.5 and \\frac {1}{2} equal \\frac{2}{4}; 7.0 equals 7; \\frac{1}{3} is a class of its own;
    no answer (None, "") stays None; r^2\\pi joins \\pi r^2 (named \\pir^2). Choice letters and
    reasoning-gym answers are compared as strings: 05 and 5 stay apart. Problems of different
    lengths share the rounds. A later answer is checked against the first as the gold: math-verify
    calls (2,\\infty) equal to gold x>2 but not x>2 equal to gold (2,\\infty), so order counts."""
    half = Problem("q", "\\frac{1}{2}", "math")
    area = Problem("q", "\\pi r^2", "math")
    choice = Problem("q", "B", "choice", choices=["x", "y", "z"])
    gym = Problem("q", "5", "reasoning_gym", scorer=ExactScorer(), entry={"answer": "5"})
    answers = [["\\frac{2}{4}", None, "0.5", "7", "\\frac {1}{2}", "", "7.0", "\\frac{1}{3}"],
               ["\\pi r^2", "r^2\\pi", "2\\pi r"], ["B", " B", "C"], ["05", "5", "5"], [], [None],
               ["x>2", "(2,\\infty)"], ["(2,\\infty)", "x>2"]]
    assert answer_classes([half, area, choice, gym, half, half, half, half], answers) == [
        ["\\frac{2}{4}", None, "\\frac{2}{4}", "7", "\\frac{2}{4}", None, "7", "\\frac{1}{3}"],
        ["\\pir^2", "\\pir^2", "2\\pir"], ["B", "B", "C"], ["05", "5", "5"], [], [None],
        ["x>2", "x>2"], ["(2,\\infty)", "x>2"]]


def test_an_answer_equal_to_two_classes_joins_the_first_and_a_class_is_right_as_its_first_answer():
    """math-verify's check is not transitive for a small gold (it also asks |answer - gold| <=
    1e-4 |gold|, `_close_for_small_numbers`): 0.000100009 is within 0.9e-8 of both 0.0001 and
    0.000100018, which are 1.8e-8 apart (over 1e-8: two classes). So it joins the first class.
    The class's verdict is its first answer's: against gold 0.0001, 0.000100018 is wrong and
    0.000100009 right; their class (first answer 0.000100018, 2 votes) is wrong, maj@2 False: a
    member equal to both the first answer and the gold does not make the first answer right."""
    small = Problem("q", "0.0001", "math")
    assert answer_classes([small], [["0.0001", "0.000100018", "0.000100009"]]) == [
        ["0.0001", "0.000100018", "0.0001"]]
    answers = ["0.000100018", "0.000100009"]
    verdicts = [grade(small, f"\\boxed{{{answer}}}").correct for answer in answers]
    assert verdicts == [False, True]
    classes = answer_classes([small], [answers])[0]
    assert classes == ["0.000100018", "0.000100018"]
    assert majority_vote_correct(classes, verdicts) is False

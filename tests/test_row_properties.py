"""Properties of a benchmark row's choices: any value a dataset may store in a choices field
(a list, an object, their Python-literal text, any other text or JSON value, nested) is read as
the options it lists or refused with one line naming the field (`ValueError`, which the loader
turns into a `UsageError` naming the file and row); never a traceback."""

from __future__ import annotations

import json

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ict.core.errors import UsageError
from ict.data.benchmarks import REGISTRY, load_benchmark, problem_from_row
from ict.data.rows import checked_choices

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=6),
                           lambda inner: st.lists(inner, max_size=4)
                           | st.dictionaries(st.sampled_from(["label", "text", "x"]), inner, max_size=3),
                           max_leaves=10)
choices_values = json_values | st.builds(repr, json_values) | st.text(max_size=20)
TOO_DEEP = ["-" * 100_000 + "1", "{" + "-" * 5_000 + "1: 2}"]  # the parser's MemoryError, RecursionError


@given(spec=st.sampled_from(["arc_challenge", "commonsense_qa", "mmlu_stem"]), choices=choices_values)
@example(spec="arc_challenge", choices=TOO_DEEP[0])
@example(spec="arc_challenge", choices=TOO_DEEP[1])
@example(spec="arc_challenge", choices="{'label': ['A', 'B'], 'text': ['x', 'y']")
def test_any_choices_value_is_read_as_its_options_or_refused_in_one_line(spec, choices):
    row = {"question": "q", "choices": choices, "answerKey": "A", "answer": 0}
    try:
        problem = problem_from_row(REGISTRY[spec], row, 0)
    except ValueError as error:
        assert "\n" not in str(error) and "choices" in str(error), str(error)
        return
    assert all(isinstance(option, str) for option in problem.choices) and 2 <= len(problem.choices) <= 26
    assert problem.answer in "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:len(problem.choices)]


@pytest.mark.parametrize("choices", TOO_DEEP + ["label: A, B", "{'label': ['A', 'B'], 'text': ['x', 'y']"])
def test_label_text_choices_that_spell_no_literal_are_one_line_naming_the_field(choices, tmp_path):
    """ARC's and CommonsenseQA's choices as a text that spells no Python literal were the parser's
    own words ("'{' was never closed (<unknown>, line 1)") or, nested deep, a traceback."""
    row = {"id": "q1", "question": "Q?", "choices": choices, "answerKey": "A"}
    (tmp_path / "arc_challenge.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(UsageError, match=r"arc_challenge.jsonl:1: row 1 of arc_challenge: field 'choices' must be "
                                         r"an object with 'label' and 'text' lists, got text \("):
        load_benchmark("arc_challenge", tmp_path)
    with pytest.raises(ValueError, match=r"^field 'options': choices .* are not a list$"):
        checked_choices(choices, "options")


def test_label_text_choices_as_their_literal_text_are_read_as_the_object():
    row = {"question": "q", "choices": "\n {'label': ['A', 'B'], 'text': ['x', 'y']} ", "answerKey": "B"}
    problem = problem_from_row(REGISTRY["arc_challenge"], row, 0)
    assert (problem.answer, problem.choices) == ("B", ["x", "y"])

"""Fuzzing with hypothesis: dataset loaders, gold normalisation and answer extractors never let
an exception escape except the documented one (`UsageError` for loaders, `ValueError` for a gold
that has no answer)."""

from __future__ import annotations

import json

from hypothesis import example, given
from hypothesis import strategies as st

from ict.answers.extraction import (
    extract_boxed_answer,
    extract_choice_letter,
    extract_tagged_answer,
    sanitize_text,
)
from ict.answers.gold import list_literal, normalize_gold
from ict.core.errors import UsageError
from ict.core.problems import Problem
from ict.data.benchmarks import load_benchmark
from ict.data.training_data import read_records, records_to_problems

LATEX_PIECES = ["\\boxed{", "\\frac{", "}", "{", "\\sqrt", "[", "]", "(", ")", "$", "\\$", "####", "\\text{",
                "answer is", "Answer:", "<answer>", "</answer>", "(B)", "C)", "1", "-2.5", ",", "'", '"',
                "\\infty", "\\cup", "%", "^", "_", "\x00", "\u202e", "\udcff", "\\\\", "&", "\\begin{pmatrix}"]
latex_like = st.lists(st.sampled_from(LATEX_PIECES) | st.text(max_size=5), max_size=40).map("".join)


@given(data=st.binary(max_size=400))
def test_random_bytes_files_load_or_fail_with_a_usage_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "data.jsonl"
    path.write_bytes(data)
    try:
        rows = read_records(path)
        records_to_problems(rows, "question", "answer")
    except UsageError:
        pass


FIELD_NAMES = ["question", "answer", "choices", "role", "content", "problem", "final_answer", "x"]
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda children: st.lists(children, max_size=3)
                           | st.dictionaries(st.sampled_from(FIELD_NAMES), children, max_size=3),
                           max_leaves=8)


def assert_well_formed(problem: Problem) -> None:
    """What a loader returns: a text prompt or chat messages of text, and a non-empty text gold."""
    assert isinstance(problem.answer, str) and problem.answer.strip()
    if isinstance(problem.prompt, list):
        assert all(isinstance(m["role"], str) and isinstance(m["content"], str) for m in problem.prompt)
    else:
        assert isinstance(problem.prompt, str)
    assert all(isinstance(choice, str) for choice in problem.choices or [])


# regression examples found by fuzzing (see `make fuzz`); each was an internal error once
@example(rows=[{"question": [None], "answer": None}])
@example(rows=[{"question": [{"role": "user"}], "answer": "1"}])
@example(rows=[{"question": [{"role": "user", "content": 3}], "answer": "1"}])
@example(rows=[{"question": "q", "answer": True}])
@example(rows=[{"question": "q", "answer": {"x": 1}}])
@example(rows=[{"question": {"x": "q"}, "answer": "1"}])
@example(rows=[3, None, [], "text"])
@given(rows=st.lists(json_values, max_size=5))
def test_random_json_lines_load_or_fail_with_a_usage_error(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("fuzz") / "data.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows))
    for choices_field in (None, "choices"):
        try:
            problems = records_to_problems(read_records(path), "question", "answer", choices_field)
        except UsageError:
            continue
        for problem in problems:
            assert_well_formed(problem)


@example(rows=[{"question": "q", "choices": [None, "b"], "answer": 0}])
@example(rows=[{"problem": ["q"], "answer": "1"}])
@example(rows=[{"question": "q", "final_answer": [{"x": 1}]}])
@given(rows=st.lists(json_values, max_size=4))
def test_random_benchmark_rows_load_or_fail_with_a_usage_error(tmp_path_factory, rows):
    data_dir = tmp_path_factory.mktemp("fuzz-bench")
    text = "\n".join(json.dumps(row) for row in rows)
    for name in ("gsm8k", "math500", "mmlu_stem", "olympiadbench"):
        (data_dir / f"{name}.jsonl").write_text(text)
        try:
            benchmark = load_benchmark(name, data_dir)
        except UsageError:
            continue
        for problem in benchmark.problems:
            assert_well_formed(problem)


@given(text=latex_like)
def test_gold_normalisation_returns_text_or_a_value_error(text):
    for fmt in ("auto", "latex", "list", "gsm8k", "number", "boxed_solution"):
        try:
            assert isinstance(normalize_gold(text, fmt), str)
        except ValueError:
            pass
    assert list_literal(text) is None or all(isinstance(item, str) for item in list_literal(text))


@given(text=latex_like | st.binary(max_size=200), choices=st.integers(1, 26))
def test_extractors_never_raise(text, choices):
    assert isinstance(sanitize_text(text), str)
    boxed = extract_boxed_answer(text)
    assert boxed is None or isinstance(boxed, str)
    assert extract_choice_letter(text, choices) in (None, *"ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:choices])
    tagged = extract_tagged_answer(text)
    assert tagged is None or isinstance(tagged, str)

"""Fuzzing with hypothesis: dataset loaders, gold normalisation and answer extractors never let
an exception escape except the documented one (`UsageError` for loaders, `ValueError` for a gold
that has no answer)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ict.answers.extraction import (
    extract_boxed_answer,
    extract_choice_letter,
    extract_tagged_answer,
    sanitize_text,
)
from ict.answers.gold import list_literal, normalize_gold
from ict.core.errors import UsageError
from ict.data.training_data import read_records, records_to_problems

LATEX_PIECES = ["\\boxed{", "\\frac{", "}", "{", "\\sqrt", "[", "]", "(", ")", "$", "\\$", "####", "\\text{",
                "answer is", "Answer:", "<answer>", "</answer>", "(B)", "C)", "1", "-2.5", ",", "'", '"',
                "\\infty", "\\cup", "%", "^", "_", "\x00", "\u202e", "\udcff", "\\\\", "&", "\\begin{pmatrix}"]
latex_like = st.lists(st.sampled_from(LATEX_PIECES) | st.text(max_size=5), max_size=40).map("".join)
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(data=st.binary(max_size=400))
def test_random_bytes_files_load_or_fail_with_a_usage_error(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "data.jsonl"
    path.write_bytes(data)
    try:
        rows = read_records(path)
        records_to_problems(rows, "question", "answer")
    except UsageError:
        pass


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda children: st.lists(children, max_size=3)
                           | st.dictionaries(st.sampled_from(["question", "answer", "x"]), children, max_size=3),
                           max_leaves=8)


@SETTINGS
@given(rows=st.lists(json_values, max_size=5))
def test_random_json_lines_load_or_fail_with_a_usage_error(tmp_path_factory, rows):
    path = tmp_path_factory.mktemp("fuzz") / "data.jsonl"
    path.write_text("\n".join(json.dumps(row) for row in rows))
    try:
        records_to_problems(read_records(path), "question", "answer")
    except UsageError:
        pass


@SETTINGS
@given(text=latex_like)
def test_gold_normalisation_returns_text_or_a_value_error(text):
    for fmt in ("auto", "latex", "list", "gsm8k", "number", "boxed_solution"):
        try:
            assert isinstance(normalize_gold(text, fmt), str)
        except ValueError:
            pass
    assert list_literal(text) is None or all(isinstance(item, str) for item in list_literal(text))


@SETTINGS
@given(text=latex_like | st.binary(max_size=200), choices=st.integers(1, 26))
def test_extractors_never_raise(text, choices):
    assert isinstance(sanitize_text(text), str)
    boxed = extract_boxed_answer(text)
    assert boxed is None or isinstance(boxed, str)
    assert extract_choice_letter(text, choices) in (None, *"ABCDEFGHIJKLMNOPQRSTUVWXYZ"[:choices])
    tagged = extract_tagged_answer(text)
    assert tagged is None or isinstance(tagged, str)

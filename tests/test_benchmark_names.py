"""Benchmark lists split into names (`ict.data.benchmark_names.split_benchmark_names`): what a
Python literal closes is closed (the refusal of a quote left open in tests/test_benchmarks.py); the
names moved out of ict.data.benchmarks still import from there."""

from __future__ import annotations

import ast

import pytest

from ict.data.benchmark_names import split_benchmark_names
from ict.data.benchmarks import expand_benchmark_names, load_benchmarks

NAMES = r"['O\'Brien', 'Smith', 'Jones', 'Brown']"


@pytest.mark.parametrize("value", [NAMES, r"'it\'s'", r'"x\"y, z"', r"'C:\\'", r"('\\', ',')"])
def test_a_quote_escaped_in_a_python_literal_leaves_the_literal_closed(value):
    """``male_names=['O\\'Brien', ...]`` (a closed Python literal, as the docs' values are) was
    refused as "a ' quote is not closed" (5346203 took it): the escaped quote closed the string,
    the real closing quote opened another. A backslash escapes the next character in quotes, so
    the list splits where Python's tokenizer ends the literal."""
    name = f"rg:family_relationships:male_names={value}"
    ast.literal_eval(value)  # the reference: Python closes it
    assert split_benchmark_names(f"{name}, gsm8k,{name}") == [name, "gsm8k", name]
    windows = "rg:spell_backward:data_file=C:\\words\\"  # out of quotes a backslash is text, as on 5346203
    assert split_benchmark_names(f"{windows},gsm8k") == [windows, "gsm8k"]


def test_an_escaped_quote_reaches_the_reasoning_gym_option_as_python_reads_it():
    name = f"rg:family_relationships:male_names={NAMES}:size=2"
    assert expand_benchmark_names(f"{name},gsm8k") == [name, "gsm8k"]
    benchmark, = load_benchmarks(name)
    assert benchmark.config["male_names"] == ["O'Brien", "Smith", "Jones", "Brown"]


@pytest.mark.parametrize("name, value", [("REASONING_GYM_EVAL_SEED", 1_000_003), ("REASONING_GYM_DEFAULT_SIZE", 200)])
def test_the_reasoning_gym_constants_moved_out_of_the_benchmarks_module_still_import_with_a_warning(name, value):
    """``from ict.data.benchmarks import REASONING_GYM_EVAL_SEED`` (5346203) was an ImportError once
    the constants moved to ict.data.benchmark_names ("no change of behaviour"); moved names resolve
    at their old path with a DeprecationWarning until ict 0.3.0, as ict.training.config's do. The
    values are the docs' (docs/evaluation.md: seed 1_000_003, size default 200)."""
    import warnings

    from ict.data import benchmarks

    with pytest.warns(DeprecationWarning, match=rf"ict.data.benchmarks.{name} moved to "
                                                rf"ict.data.benchmark_names.{name}; .* ict 0.3.0"):
        namespace: dict[str, object] = {}
        exec(f"from ict.data.benchmarks import {name}", namespace)  # the import a user's script makes
    assert namespace[name] == value
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(AttributeError, match="ict.data.benchmarks"):
            benchmarks.no_such_name  # noqa: B018
    assert not caught  # a name that never lived here is no moved name

"""Benchmark lists split into names (`ict.data.benchmark_names.split_benchmark_names`): what a
Python literal closes is closed (the refusal of a quote left open in tests/test_benchmarks.py)."""

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

"""Properties of `parse_field`: any value a user may give an option (a command-line text, or a
YAML value: null, boolean, number, text, list, mapping, nested) is read as the option's type
says, item by item, or refused in one line (`UsageError`); never stringified, never a traceback."""

from __future__ import annotations

import math
import typing
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ict.analysis.plots import PlotConfig
from ict.analysis.token_view import InspectConfig
from ict.core.errors import UsageError
from ict.core.options import option_fields, optional_inner, parse_field
from ict.evaluation.evaluate import EvalConfig
from ict.experiments.compare import CompareConfig
from ict.training.config import TrainConfig

OPTIONS = [(cls, item.name) for cls in (TrainConfig, EvalConfig, CompareConfig, InspectConfig, PlotConfig)
           for item in option_fields(cls)]
scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats() | st.text(max_size=8)
yaml_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6)


def _item_text(item: typing.Any) -> str:
    return str(item).strip()


def _check_read(kind: typing.Any, raw: typing.Any, value: typing.Any) -> None:
    """`value` is of type `kind` and, for a list option given a list, holds its items one by one."""
    if typing.get_origin(kind) is tuple:
        element = typing.get_args(kind)[0]
        assert isinstance(value, tuple) and all(type(item) is element or isinstance(item, element)
                                                for item in value), value
        if isinstance(raw, list):
            assert len(value) == len(raw)
            for given_item, item in zip(raw, value, strict=True):
                assert not isinstance(given_item, bool | dict | list) and given_item is not None, (raw, value)
                expected = int(_item_text(given_item)) if element is int else element(_item_text(given_item))
                assert item == expected
        assert not isinstance(raw, dict), (raw, value)
    elif kind is float:
        assert type(value) is float and math.isfinite(value)
    elif kind is dict or typing.get_origin(kind) is dict:
        assert isinstance(value, dict)
    else:
        assert type(value) is kind or isinstance(value, kind), (kind, value)
        if kind in (int, bool) and type(raw) is kind:
            assert value == raw


@given(option=st.sampled_from(OPTIONS), raw=yaml_values | st.text(max_size=12))
@example(option=(CompareConfig, "baselines"), raw={"grpo": 1})
@example(option=(CompareConfig, "baselines"), raw=["grpo", ["ict", "gtpo"]])
@example(option=(CompareConfig, "baselines"), raw=["grpo", None])
@example(option=(EvalConfig, "ks"), raw={1: "a", 4: "b"})
@example(option=(PlotConfig, "run_dirs"), raw=[True])
def test_any_value_of_any_option_is_read_as_its_type_or_refused_in_one_line(option, raw):
    cls, name = option
    kind, optional = optional_inner(typing.get_type_hints(cls)[name])
    try:
        value = parse_field(cls, name, raw)
    except UsageError as error:
        assert "\n" not in str(error)
        return
    if value is None:
        assert optional
        return
    _check_read(kind, raw, value)


@pytest.mark.parametrize("raw", [{"grpo": 1}, ["grpo", ["ict", "gtpo"]], ["grpo", None], ["grpo", {"a": 1}],
                                 ("grpo", ("ict",))])
def test_a_list_option_refuses_a_mapping_a_nested_list_and_a_null_item(raw):
    """`baselines: {grpo: 1}` was read as (grpo,), `[grpo, [ict, gtpo]]` as (grpo, "['ict', 'gtpo']")
    and `[grpo, null]` as (grpo, "None")."""
    with pytest.raises(UsageError, match=r"^bad value for baselines: .* \(expected a comma-separated list of strs"):
        parse_field(CompareConfig, "baselines", raw)
    with pytest.raises(UsageError, match=r"^bad value for run_dirs: "):
        parse_field(PlotConfig, "run_dirs", raw)


@pytest.mark.parametrize("raw", [{1: "a", 4: "b"}, [1, [2]], [1, None], [1, True]])
def test_a_list_of_ints_refuses_a_mapping_a_nested_list_and_a_null_item(raw):
    """`ks: {1: a, 4: b}` was read as (1, 4)."""
    with pytest.raises(UsageError, match=r"^bad value for ks: .* \(expected a comma-separated list of ints"):
        parse_field(EvalConfig, "ks", raw)


def test_a_text_list_refuses_a_yaml_boolean_item_as_a_text_option_does():
    """`baselines: [grpo, yes]` (YAML 1.1 reads yes as True) was read as (grpo, "True")."""
    with pytest.raises(UsageError, match=r"^baselines: YAML reads an unquoted true / yes / on as true; quote"):
        parse_field(CompareConfig, "baselines", ["grpo", True])
    with pytest.raises(UsageError, match=r"^run_dirs: YAML reads an unquoted false / no / off as false; quote"):
        parse_field(PlotConfig, "run_dirs", ["a", False])
    assert parse_field(CompareConfig, "baselines", ["grpo", " ict ", 7]) == ("grpo", "ict", "7")
    assert parse_field(EvalConfig, "ks", [1, " 4 "]) == (1, 4)
    assert parse_field(PlotConfig, "run_dirs", ["a", "b/c"]) == (Path("a"), Path("b/c"))

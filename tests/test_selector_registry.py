"""The selector registry's own rules, for selectors registered outside the library: a mask of
the wrong dtype is refused, a population outside ``POPULATIONS`` or a training option a method
does not set is refused, a plugin file runs once per process, a selector's description is the
first line of its docstring; and the refusals of option values a selector would silently cut
(``seed=1.5``) or that would select nothing (an empty Clip-Cov band), and of missing advantages."""

from __future__ import annotations

import pytest
from selection_references import make_inputs

from ict.core.selectors import (
    SELECTORS,
    load_plugin,
    parse_selector_options,
    ranking_population,
    register_selector,
    select,
)


def test_a_registered_selector_must_return_a_bool_mask_and_declare_a_known_population() -> None:
    @register_selector("float_mask_test")
    def float_mask(inputs):
        return inputs.response_mask.float()

    @register_selector("odd_population_test", population="rows")
    def odd_population(inputs):
        return inputs.response_mask.clone()

    try:
        with pytest.raises(ValueError, match="must return a bool mask"):
            select("float_mask_test", make_inputs())
        with pytest.raises(ValueError, match="declares population 'rows'"):
            ranking_population("odd_population_test")
    finally:
        SELECTORS.pop("float_mask_test", None)
        SELECTORS.pop("odd_population_test", None)


def test_a_plugin_file_runs_once_per_process(tmp_path) -> None:
    log = tmp_path / "imports.txt"
    plugin = tmp_path / "counting_plugin.py"
    plugin.write_text(f"with open({str(log)!r}, 'a') as handle:\n    handle.write('imported\\n')\n")
    load_plugin(str(plugin))
    load_plugin(str(plugin))
    assert log.read_text().splitlines() == ["imported"]


def test_a_selectors_description_is_the_first_line_of_its_docstring() -> None:
    assert SELECTORS["ict"].description == (
        "ICT: the top ``ratio`` of response tokens by Jensen-Shannon score (default: to the group mean).")
    assert SELECTORS["all"].description == "GRPO: every response token."


def test_a_method_may_set_only_known_training_options_and_typed_values_pass_through() -> None:
    with pytest.raises(ValueError, match="'lr' is not a training option"):
        @register_selector("train_option_test", train_defaults={"lr": 1e-6})
        def with_learning_rate(inputs):
            return inputs.response_mask.clone()
    assert "train_option_test" not in SELECTORS
    assert parse_selector_options("ict", {"ratio": 0.2, "complement": True}) == {"ratio": 0.2, "complement": True}


@pytest.mark.parametrize("name,options,message", [
    ("random", {"seed": 1.5}, "random's seed must be an integer"),
    ("random", {"seed": True}, "random's seed must be an integer"),
    ("clip_cov", {"cov_low": 1.0, "cov_high": 1.0}, "clip_cov needs cov_low < cov_high"),
])
def test_option_values_that_would_be_cut_or_select_nothing_are_refused(name, options, message) -> None:
    """``seed=1.5`` would run as seed 1 (``True`` as 1); an empty Clip-Cov band would cut nothing."""
    with pytest.raises(ValueError, match=message):
        select(name, make_inputs(), **options)


def test_a_selector_that_needs_advantages_says_so() -> None:
    inputs = make_inputs()
    inputs.advantages = None
    for name in ("stapo", "clip_cov", "kl_cov"):
        with pytest.raises(ValueError, match="needs advantages"):
            select(name, inputs)

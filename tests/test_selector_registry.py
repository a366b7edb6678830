"""The selector registry's own rules, for selectors registered outside the library: a mask of
the wrong dtype is refused, a population outside ``POPULATIONS`` is refused, a plugin file runs
once per process, and a selector's description is the first line of its docstring."""

from __future__ import annotations

import pytest
from selection_references import make_inputs

from ict.core.selectors import SELECTORS, load_plugin, ranking_population, register_selector, select


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

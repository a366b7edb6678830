"""The selector registry's own rules, for selectors registered outside the library: a mask of
the wrong dtype is refused, a population outside ``POPULATIONS`` or a training option a method
does not set is refused, a plugin file runs once per process, a selector's description is the
first line of its docstring; and the refusals of option values a selector would silently cut
(``seed=1.5``) or that would select nothing (an empty Clip-Cov band), and of missing advantages;
a plugin's selector named like a built-in, returning no bool mask, failing on the start-up check
or whose function does not take its options is one line naming it."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize("returned,got", [
    (lambda mask: mask.tolist(), "got list"), (lambda mask: None, "got NoneType"),
    (lambda mask: mask.float(), "got torch.float32 of shape (4, 16)"),
    (lambda mask: mask.flatten(), "got torch.bool of shape (64,)")])
def test_a_selector_returning_no_bool_mask_of_the_shape_is_refused_saying_what_it_returned(returned, got) -> None:
    """A list or None was an AttributeError (exit 1, no selector named); a float mask or a
    flattened one said only what was expected."""
    @register_selector("returns_other_test")
    def returns_other(inputs):
        return returned(inputs.response_mask.bool())

    try:
        with pytest.raises(ValueError) as error:
            select("returns_other_test", make_inputs())
    finally:
        SELECTORS.pop("returns_other_test", None)
    assert str(error.value) == f"selector 'returns_other_test' must return a bool mask of shape (4, 16), {got}"


def test_a_plugin_selector_failing_on_the_start_up_check_is_one_line_naming_it() -> None:
    """Was ``error: RuntimeError: my bug`` (exit 1), without a word of which selector or when;
    a ValueError of its own (refusing its options) stays as it is."""
    from ict.core.selectors import check_options

    @register_selector("raises_test", defaults={"kind": "runtime"})
    def raises(inputs, kind):
        raise (RuntimeError("my\n bug") if kind == "runtime" else ValueError("kind must be runtime"))

    try:
        with pytest.raises(ValueError) as error:
            check_options("raises_test")
        with pytest.raises(ValueError) as own:
            check_options("raises_test", {"kind": "value"})
    finally:
        SELECTORS.pop("raises_test", None)
    assert str(error.value) == ("selector 'raises_test' failed on a dummy [2, 3] batch (the start-up check): "
                                "RuntimeError: my bug")
    assert isinstance(error.value.__cause__, RuntimeError)  # --debug shows the plugin's traceback
    assert str(own.value) == "kind must be runtime"


def test_a_plugin_selector_failing_on_a_batch_is_a_value_error_naming_it_and_its_file() -> None:
    """Any error of a plugin's code while selecting (mid-training too, where no start-up check wraps
    it) is a ValueError naming the selector and the file it is defined in (the command line exits
    with 2), its cause the plugin's own error; a built-in selector's error is raised as it is."""
    import dataclasses
    import pickle

    @register_selector("index_error_test")
    def index_error(inputs):
        return [][3]

    try:
        with pytest.raises(ValueError) as error:
            select("index_error_test", make_inputs())
    finally:
        SELECTORS.pop("index_error_test", None)
    assert str(error.value) == (f"selector 'index_error_test' (plugin {__file__}) failed: IndexError: list "
                                "index out of range")
    assert isinstance(error.value.__cause__, IndexError)
    assert str(pickle.loads(pickle.dumps(error.value))) == str(error.value)  # a worker's error (verl on Ray)
    inputs = make_inputs()
    no_scores = dataclasses.replace(inputs, stats=dataclasses.replace(inputs.stats, js_scores={}))
    with pytest.raises(ValueError) as built_in:  # ICT's own words, not a plugin's failure
        select("ict", no_scores)
    assert str(built_in.value).startswith("JS scores for reference 'group_mean_absorbing' were not computed")


@pytest.mark.parametrize("name,fragment", [
    ("ict", "selector 'ict' is built in"), ("all", "selector 'all' is built in"),
    ("grpo", "selector 'grpo' is built in (or a method's other name)"),
    ("my sel", "selector name 'my sel': use letters, digits, _ and -"), ("a,b", "selector name 'a,b'"),
    ("a:b=c", "selector name 'a:b=c'"), ("", "selector name ''"), ("../x", "selector name '../x'")])
def test_a_plugin_may_not_take_a_built_in_name_an_alias_or_one_a_spec_splits(name, fragment) -> None:
    """``register_selector("ict")`` in a plugin silently replaced ICT (``ict compare --methods
    grpo,ict`` reported it as the paper's method); ``"grpo"`` was never run (ict train's alias of
    ``all``); ``"a,b"`` could not be named in ``--methods`` or a token_selector spec."""
    import ict.core.selectors as built_ins

    before = dict(SELECTORS)
    try:
        with pytest.raises(ValueError, match=re.escape(fragment)):
            register_selector(name)(lambda inputs: inputs.response_mask.bool())
        assert SELECTORS == before and SELECTORS["ict"].function is built_ins.select_ict
    finally:  # the built-ins back, whatever happened
        SELECTORS.clear()
        SELECTORS.update(before)
    register_selector("my-sel_2")(lambda inputs: inputs.response_mask.bool())
    SELECTORS.pop("my-sel_2")


def test_a_selectors_function_must_take_each_of_its_options_and_need_no_other() -> None:
    """An option missing from the signature, or an argument that is no option, was a TypeError at
    the first call (exit 1); now the plugin's import fails naming the selector and the argument."""
    with pytest.raises(ValueError, match=re.escape("selector 'sig_test': its function takes no argument 'k'")):
        register_selector("sig_test", defaults={"k": 1})(lambda inputs: inputs.response_mask.bool())
    with pytest.raises(ValueError, match=re.escape("its function's argument 'k' is not one of its options: give "
                                                   "it a default in defaults={'k': ...}")):
        register_selector("sig_test")(lambda inputs, k: inputs.response_mask.bool())
    with pytest.raises(ValueError, match="takes no argument 'k'"):  # positional-only: not by keyword
        register_selector("sig_test", defaults={"k": 1})(lambda inputs, k, /: inputs.response_mask.bool())
    assert "sig_test" not in SELECTORS
    for function in (lambda inputs, **options: inputs.response_mask.bool(),
                     lambda inputs, *, k, extra=0: inputs.response_mask.bool()):
        register_selector("sig_test", defaults={"k": 1})(function)
        assert select("sig_test", make_inputs(), k=2).mask.equal(make_inputs().response_mask.bool())
    SELECTORS.pop("sig_test")


def test_js_references_of_one_name_alone_is_refused_not_read_letter_by_letter() -> None:
    """``js_references=lambda options: "prev"`` asked for the references 'p', 'r', 'e', 'v'
    ("unknown JS reference 'p'"); a tuple of names is what it returns."""
    from ict.core.selectors import check_options, required_js_references

    @register_selector("one_name_test", js_references=lambda options: "prev")
    def one_name(inputs):
        return inputs.response_mask.bool()

    try:
        with pytest.raises(ValueError, match=re.escape("selector 'one_name_test': js_references must return a "
                                                       "tuple of names, e.g. ('prev',), got 'prev'")):
            check_options("one_name_test")
        register_selector("one_name_test", js_references=lambda options: ["prev", "seq_mean"])(one_name)
        assert required_js_references("one_name_test") == ("prev", "seq_mean")  # a list: as a tuple
    finally:
        SELECTORS.pop("one_name_test", None)


def test_an_unknown_selector_says_a_plugins_module_is_imported_first() -> None:
    """TRL's token_selector or verl's ict_selector naming a plugin's selector whose module was
    not imported said only which are registered."""
    from ict.integrations import parse_token_selector

    with pytest.raises(ValueError) as error:
        parse_token_selector("not_imported_selector:ratio=0.2")
    assert str(error.value).startswith("unknown selector 'not_imported_selector'; registered: all, ")
    assert str(error.value).endswith("(a plugin's: import its module first; verl: list it in "
                                     "VERL_USE_EXTERNAL_MODULES)")

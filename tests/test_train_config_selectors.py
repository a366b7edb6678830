"""Selector options in the configuration: presets, plugin selectors, one strict parser for
selector specs and text values, the option names of earlier versions, and the recipes the
committed runs' config.yaml files record."""

from __future__ import annotations

import pytest

from ict.core.errors import UsageError
from ict.training.config_loading import build_config
from ict.training.config_text import parse_key_values


@pytest.mark.parametrize("explicit", [
    {"aggregation": "token_mean", "full_token_warmup_steps": 0},  # equal to the old defaults
    {"aggregation": "seq_mean_token_sum_norm", "full_token_warmup_steps": 3},
])
@pytest.mark.parametrize("preset", ["paper", "batch", None])
def test_a_preset_never_overrides_an_explicit_option_and_resolving_again_changes_nothing(
        explicit, preset, tmp_path):
    """Issue 30 item 1: `train()` resolves the config it is given again; a value the user set
    (even one equal to a field's former default) must survive that, and config.yaml records it."""
    from ict.training.config_loading import save_config
    from ict.training.config_text import load_yaml

    options = {"method": "ict", **explicit}
    if preset:
        options["preset"] = preset
    config = build_config(None, options, {})
    assert (config.aggregation, config.full_token_warmup_steps) == (
        explicit["aggregation"], explicit["full_token_warmup_steps"])
    before = config.to_dict()
    config.resolve()
    assert config.to_dict() == before
    save_config(config, tmp_path / "config.yaml")
    recorded = load_yaml(tmp_path / "config.yaml")
    assert recorded["aggregation"] == explicit["aggregation"]
    assert recorded["full_token_warmup_steps"] == explicit["full_token_warmup_steps"]
    # the recorded file reproduces the run: rebuilt from it, the config is the same
    assert build_config(tmp_path / "config.yaml").to_dict() == before


def test_presets_fill_only_what_is_unset():
    batch = build_config(None, {"method": "ict", "preset": "batch"}, {})
    assert batch.selector["scope"] == "batch"
    assert (batch.aggregation, batch.full_token_warmup_steps) == ("token_mean", 0)
    mixed = build_config(None, {"method": "ict", "preset": "batch", "full_token_warmup_steps": "4",
                                "selector.scope": "group"}, {})
    assert mixed.selector["scope"] == "group" and mixed.full_token_warmup_steps == 4
    assert mixed.aggregation == "token_mean"


def test_a_plugin_module_runs_once(tmp_path):
    """Issue 30 item 1: validation used to import a plugin file on every call (4 times a run)."""
    counter = tmp_path / "count.txt"
    plugin = tmp_path / "counting_plugin.py"
    plugin.write_text(
        "from pathlib import Path\n"
        f"path = Path({str(counter)!r})\n"
        "path.write_text(str(int(path.read_text()) + 1) if path.exists() else '1')\n")
    config = build_config(None, {"method": "entropy", "plugin": str(plugin)}, {})
    config.resolve()
    config.validate()
    assert counter.read_text() == "1"


@pytest.mark.parametrize("where", ["options", "overrides", "yaml"])
def test_a_plugin_selectors_number_options_on_the_command_line_are_read_as_yaml_1_2_numbers(tmp_path, where):
    """``selector.KEY=1e-1`` for a --plugin selector was refused ("YAML 1.1 reads an unquoted
    1e-1 as '1e-1', YAML 1.2 as 0.1"): the key=value texts were read before the plugin registered
    its selector, as a value of unknown type. A built-in selector's option was read as the number
    (0.1), and so is a plugin's now, wherever --plugin is given."""
    from ict.core.selectors import SELECTORS

    name = f"numbers_plugin_{where}"
    plugin = tmp_path / f"{name}.py"
    plugin.write_text("from ict import register_selector\n\n"
                      f"@register_selector({name!r}, defaults={{'threshold': 0.5, 'count': 3}})\n"
                      "def select(inputs, threshold, count):\n    return inputs.response_mask\n")
    path, earlier = tmp_path / "c.yaml", tmp_path / "earlier.yaml"
    path.write_text(f"plugin: {plugin}\n")
    earlier.write_text("plugin: json\n")  # replaced by the later layer's (the file)
    yaml_path, options, overrides = {"options": (earlier, {"plugin": str(plugin)}, []),
                                     "overrides": (earlier, {}, [f"plugin={plugin}"]),
                                     "yaml": (path, {}, [])}[where]
    try:
        config = build_config(yaml_path, {"method": name, **options},
                              parse_key_values([*overrides, "selector.threshold=1e-1", "selector.count=1e3"]))
    finally:
        SELECTORS.pop(name, None)
    assert config.selector == {"threshold": 0.1, "count": 1000.0}
    assert build_config(None, {"method": "entropy"}, {"selector.ratio": "1e-1"}).selector == {"ratio": 0.1}


def test_one_strict_parser_for_selector_specs_everywhere():
    """Issue 32 item 3: the TRL/verl spec parser is the registry's strict one (the lenient
    `_coerce` turned "flase" into False without a word); presets work in specs too."""
    from ict.core.selectors import resolve_options
    from ict.integrations import parse_token_selector

    with pytest.raises(ValueError, match="complement='flase' is not a bool") as error:
        parse_token_selector("ict:complement=flase")
    assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="is not a float"):
        parse_token_selector("entropy:ratio=a lot")
    with pytest.raises(ValueError, match="given twice"):
        parse_token_selector("entropy:ratio=0.1,ratio=0.2")
    name, options = parse_token_selector("random:seed=none,ratio=0.25")
    assert name == "random" and options["seed"] is None and options["ratio"] == 0.25
    name, options, preset = parse_token_selector("ict:preset=batch,ratio=0.2", with_preset=True)
    assert preset == "batch" and options["scope"] == "batch" and options["ratio"] == 0.2
    # the CLI/YAML path gives the same options for the same text
    config = build_config(None, {"method": "ict", "preset": "batch"}, {"selector.ratio": "0.2"})
    assert config.selector == options == resolve_options("ict", {"ratio": 0.2}, "batch")
    with pytest.raises(UsageError, match="is not a bool"):
        build_config(None, {"method": "ict"}, {"selector.complement": "flase"})


def test_every_committed_run_reproduces_from_its_config_yaml():
    """Issue 30 item 5: the defaults changed (ict is the paper's recipe), but every committed
    run's config.yaml records its resolved options, so rebuilding a config from it gives the same
    recipe it ran: the same selector options (new options at the value that reproduces the old
    behaviour), loss aggregation, warm-up and temperature."""
    from pathlib import Path

    from ict.training.config_text import load_yaml

    root = Path(__file__).resolve().parents[1] / "results"
    paths = sorted(root.rglob("config.yaml"))
    assert len(paths) >= 20
    for path in paths:
        recorded = load_yaml(path)
        config = build_config(path)
        for key in ("aggregation", "full_token_warmup_steps", "temperature", "method", "num_steps"):
            assert getattr(config, key) == recorded.get(key, getattr(config, key)), (path, key)
        if recorded.get("aggregation") is None:  # recorded before the option existed: the old default
            assert config.aggregation == "token_mean", path
        assert config.full_token_warmup_steps == recorded.get("full_token_warmup_steps", 0), path
        for key, value in (recorded.get("selector") or {}).items():
            assert config.selector[key] == value, (path, key)
        assert config.selector.get("metric", "js") == "js" and not config.selector.get("complement", False)


def test_the_option_names_of_earlier_versions_set_the_selector_options_of_now():
    """`_renamed` (js_reference, selection_unit, selection_scope, stapo_tau_p, stapo_quantile) held
    by no test; and --ratio is folded into selector.ratio (config.yaml holds it once)."""
    config = build_config(None, {}, {"js_reference": "seq_mean", "selection_unit": "token_id",
                                     "selection-scope": "batch", "ratio": "0.3"})
    assert (config.selector["reference"], config.selector["unit"], config.selector["scope"]) == (
        "seq_mean", "token_id", "batch")
    assert config.selector["ratio"] == 0.3 and config.ratio is None
    stapo = build_config(None, {"method": "stapo", "stapo_tau_p": 0.01}, {"stapo_quantile": "0.5"})
    assert stapo.selector == {"tau_p": 0.01, "quantile": 0.5}
    assert build_config(None, {}, {"lora_dropout": "0.1", "disable_dropout": "false"}).lora_dropout == 0.1


def test_selector_options_given_as_text_are_read_as_their_defaults_kind():
    """Mutation testing: no test held parse_selector_options' text forms (--selector JSON or a
    quoted YAML value): yes / no / 1 / 0 for a boolean, null / ~ / none for 'the default', and
    text stripped; nor that selector.ratio=none (or null) keeps the registry's ratio."""
    from ict.core.selectors import parse_selector_options

    for text, value in (("yes", True), ("True", True), ("1", True), ("no", False), ("0", False)):
        assert parse_selector_options("ict", {"complement": text}) == {"complement": value}, text
    with pytest.raises(ValueError, match="complement='maybe' is not a bool"):
        parse_selector_options("ict", {"complement": "maybe"})
    for text in ("none", "null", "~", " Null "):
        assert parse_selector_options("ict", {"ratio": text}) == {"ratio": None}, text
    assert parse_selector_options("ict", {"reference": " seq_mean "}) == {"reference": "seq_mean"}
    for text in ("none", "null", "~"):
        assert build_config(None, {}, {"selector.ratio": text}).selector["ratio"] == 0.1, text
    assert build_config(None, {"selector": '{"complement": "yes"}'}, {}).selector["complement"] is True

"""Building a :class:`TrainConfig` from its layers, and saving it.

Precedence (later wins): field defaults < YAML file (`--config`) < command-line options <
`key=value` overrides (:func:`build_config`); with `--resume` the run's own `RUN_DIR/config.yaml`
takes the defaults' place, and only `RESUME_MAY_CHANGE` may differ from it. Option names of
earlier versions are read as the options they became. The resolved configuration is written to
`RUN_DIR/config.yaml` (:func:`save_config`).
"""

from __future__ import annotations

import functools
import typing
from pathlib import Path
from typing import Any

from ict.core import selectors
from ict.core.errors import UsageError, read_utf8_text
from ict.core.options import dump_options_yaml, optional_inner, parse_field, type_hints
from ict.runs.checkpoint import complete_checkpoints, write_atomically
from ict.training.config import TrainConfig
from ict.training.config_text import load_yaml, read_option_text, read_overrides


def field_types() -> dict[str, Any]:
    """Field name -> resolved type annotation."""
    return dict(type_hints(TrainConfig))


def parse_value(name: str, raw: Any) -> Any:
    """Convert `raw` (a string from the CLI or a YAML value) to the type of field `name`; a mapping
    given as text (``--dataset-config '{name: 0123}'``) is read with a config file's checks."""
    if isinstance(raw, str) and name in ("dataset_config", "selector"):
        raw = read_option_text(raw, name, prefix=f"{name}.")
        raw = {} if raw is None else raw  # "" or null: none, as before
    return parse_field(TrainConfig, name, raw)


def apply_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """Merge `overrides` (field name or dotted `dataset_config.key` -> value) into `values`; a
    dotted key's value is taken as it is (a command line's text is read first: `read_overrides`)."""
    merged = dict(values)
    for key, raw in overrides.items():
        key = key.replace("-", "_")
        if "." in key:
            head, tail = key.split(".", 1)
            inner, _ = optional_inner(field_types().get(head, None))
            if head not in field_types() or not (inner is dict or typing.get_origin(inner) is dict):
                raise UsageError(f"unknown option {key!r}: only dict options take dotted keys")
            merged[head] = {**(merged.get(head) or {}), tail: raw}
        else:
            merged[key] = parse_value(key, raw)
    return merged


# Option names of earlier versions -> the selector option they set now.
_RENAMED = {"js_reference": "reference", "selection_unit": "unit", "selection_scope": "scope",
            "stapo_tau_p": "tau_p", "stapo_quantile": "quantile"}
SELECTOR_KEYS = frozenset({"selector", "ratio", "preset", *_RENAMED})
"""The options that set the method's selector options (and so do ``selector.KEY`` keys)."""


# The options a resumed run may change: how long and how visibly it runs, where, and how often it
# saves and evaluates; not what a step computes.
RESUME_MAY_CHANGE = frozenset({"num_steps", "resume", "run_dir", "device", "num_threads", "progress",
                               "tensorboard", "profile", "save_every", "keep_checkpoints", "eval_every",
                               "eval_temperature", "verify_timeout"})


def saved_before(stored: dict[str, Any]) -> dict[str, Any]:
    """What a run's config.yaml written before an option existed meant by its absence (on
    --resume): ``held_out_rule: draws`` for a file from before held-out questions were left out of
    training, which has neither that key nor ``held_out_sets`` (added together, 2026-11-28);
    ``disable_dropout: false`` for one without that key (added 2026-11-27: the model's dropout,
    LoRA's too, was on before)."""
    meant: dict[str, Any] = {}
    if "held_out_rule" not in stored and "held_out_sets" not in stored:
        meant["held_out_rule"] = "draws"
    if "disable_dropout" not in stored:
        meant["disable_dropout"] = False
    return meant


def build_config(yaml_path: str | Path | None = None, options: dict[str, Any] | None = None,
                 overrides: dict[str, Any] | None = None) -> TrainConfig:
    """Resolve defaults < YAML < options < overrides into a validated `TrainConfig`.

    The method's training options (e.g. `aggregation`; a preset's first) apply where unset; the
    returned config holds the selector's fully resolved options in `selector`. With `resume`, the
    run's own `RUN_DIR/config.yaml` takes the place of the defaults, and an option given with a
    value other than the run's is a UsageError unless it is in `RESUME_MAY_CHANGE`."""
    given = _given_layers(yaml_path, options, overrides)
    values = functools.reduce(_with_layer, given, {})  # where the run is (the overrides' text not read yet)
    run_config = Path(values["run_dir"]).expanduser() / "config.yaml" if values.get("run_dir") else None
    if run_config is not None and run_config.is_dir():
        # was "starting fresh", then an IsADirectoryError (exit 1) writing the run's config.yaml over it
        raise UsageError(f"--run-dir {values['run_dir']}: its config.yaml is a directory, not the run's "
                         "config file: move it aside, or give another --run-dir")
    saved_path = run_config if values.get("resume") else None
    if saved_path is None or not saved_path.is_file():
        if saved_path is not None and complete_checkpoints(saved_path.parent):
            raise UsageError(f"--resume: {saved_path} is missing, but the run has checkpoints: restore it, or "
                             "start another --run-dir")
        return TrainConfig(**functools.reduce(_with_layer, _read_layers(given), {})).resolve()
    if not read_utf8_text(saved_path).strip():  # a write cut short (before writes were atomic)
        raise UsageError(f"--resume: {saved_path} is empty: restore it, or start another --run-dir")
    try:  # parsed as any YAML layer is; load_yaml's errors name the file (once)
        stored = _renamed(load_config_file(saved_path))
    except UsageError as error:
        raise UsageError(f"--resume: {error}") from None
    if stored.get("plugin") is not None:  # the run's plugin, imported now: the options given read again
        given = _given_layers(yaml_path, options, overrides)
    try:  # an unknown key or a bad value is one line naming the file (a value a check added since the
        # run started refuses, e.g. entropy_explosion_factor 0.5, named no file: the user gave no such option)
        saved = _with_layer(saved_before(stored), stored)
        run = TrainConfig(**saved).resolve()
    except UsageError as error:
        raise UsageError(f"--resume: config file {saved_path}: {error}") from None
    values = functools.reduce(_with_layer, _read_layers(given), saved)

    def refused(name: str, value: Any) -> UsageError:
        return UsageError(f"--resume continues {values['run_dir']} with its config.yaml, where {name} is "
                          f"{getattr(run, name)!r}, not {value!r}: drop the option, or start another --run-dir")

    try:
        config = TrainConfig(**values).resolve()
    except UsageError:  # a change can fail the checks first (another method meets the run's selector options);
        # a bad selector option given keeps its own message
        changed = next((name for name, value in values.items() if name not in RESUME_MAY_CHANGE | SELECTOR_KEYS
                        and value != saved.get(name)), None)
        if changed is None:
            raise
        raise refused(changed, values[changed]) from None
    for name, value in config.to_dict().items():
        if name in RESUME_MAY_CHANGE:  # e.g. --device auto stays auto
            continue
        if value == "auto" and getattr(run, name) != "auto":  # the run's resolution of it (statistics_from)
            setattr(config, name, getattr(run, name))
        elif value != getattr(run, name):
            raise refused(name, value)
    return config


def _given_layers(yaml_path: str | Path | None, options: dict[str, Any] | None,
                  overrides: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The layers given (the YAML file's, the options', the overrides' as typed), the file read
    once the plugin they name (the last one given) is imported, so its selectors' options are
    read as the built-in selectors' are (`load_config_file`); `_read_layers` reads the overrides."""
    plugins = [layer["plugin"] for layer in (options or {}, overrides or {}) if "plugin" in layer]
    plugin = plugins[-1] if plugins else None
    file_layer = _renamed(load_config_file(yaml_path, plugin)) if yaml_path is not None else {}
    if plugin is not None:
        load_plugin_option(plugin)
    return [file_layer, _renamed(options or {}), _renamed(overrides or {})]


def _read_layers(given: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`_given_layers`' layers with the overrides' text read (`read_overrides`), once every plugin
    is imported (a resumed run's, named in its config.yaml only, too)."""
    return [*given[:-1], read_overrides(given[-1])]


def load_plugin_option(plugin: Any) -> bool:
    """Import the plugins of the option value `plugin` (comma-separated modules and .py files, as
    given or read from YAML); True when that registered a selector or replaced one."""
    before = dict(selectors.SELECTORS)
    TrainConfig(plugin=parse_value("plugin", plugin)).load_plugins()
    return selectors.SELECTORS != before


def load_config_file(path: str | Path, plugin: Any = None, text_options: typing.Collection[str] | None = None,
                     number_options: typing.Collection[str] | None = None) -> dict[str, Any]:
    """`load_yaml(path)` with `plugin` (else the file's own `plugin`) imported first: read again
    when that registered a selector, whose options are then read as the built-in selectors' are
    (``count: 0o17`` is 15, ``count: 017`` refused), not as YAML 1.1 reads them (017 is 15,
    0o17 the text)."""
    values = load_yaml(path, text_options, number_options)
    plugin = values.get("plugin") if plugin is None else plugin
    if plugin is not None and load_plugin_option(plugin):
        values = load_yaml(path, text_options, number_options)
    return values


def _with_layer(values: dict[str, Any], layer: dict[str, Any]) -> dict[str, Any]:
    """`values` with one layer of options applied (:func:`apply_overrides`); a layer that sets the
    selector's ratio (``selector.ratio``) and not ``ratio`` also drops an earlier ``ratio`` (which
    would otherwise win, being the shortcut applied last)."""
    merged = apply_overrides(values, layer)  # each value read, or refused (``selector: -1``, a TypeError here)
    sets_selector_ratio = "selector.ratio" in layer or ("selector" in layer and "ratio" in merged["selector"])
    if sets_selector_ratio and "ratio" not in layer:
        merged.pop("ratio", None)
    return merged


_WHOLE_VOCABULARY = 1 << 30  # a vocabulary tile wider than any vocabulary


def _renamed(values: dict[str, Any]) -> dict[str, Any]:
    """Accept the option names of earlier versions (`js_reference=prev` is `selector.reference`)."""
    out = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        if name == "stats_chunk_size":  # positions per chunk before the tiles (2026-11-26)
            if value is not None and str(value).strip().lower() not in ("none", "null", "~"):
                out["stats_tile_size"] = f"{_chunk_size(value)}x{_WHOLE_VOCABULARY}"
            continue
        out[f"selector.{_RENAMED[name]}" if name in _RENAMED else key] = value
    return out


def _chunk_size(value: Any) -> int:
    """The positions per chunk of an earlier version's ``stats_chunk_size`` (an integer, as text
    or a YAML number); anything else is a one-line UsageError naming the option."""
    try:  # int() alone would take True as 1 and truncate 2.5 to 2
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise UsageError(f"bad value for stats_chunk_size: {value!r:.80} (expected int or none)") from None


def save_config(config: TrainConfig, path: str | Path) -> None:
    """``config`` as YAML at ``path``, written atomically (a kill mid-write leaves the old file:
    an empty one would resume with every default)."""
    write_atomically(path, dump_options_yaml(config.to_dict()))



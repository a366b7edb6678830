"""Options of `ict train` read from text: a YAML config file (`load_yaml`), the command line's
``key=value`` overrides (`parse_key_values`, `read_overrides`) and a value given as text
(`read_option_text`), each with `ict.core.options`' checks of what YAML reads otherwise than meant
(the registered selectors' options and ``dataset_config``'s values too). Used by
`ict.training.config_loading`, which builds a `TrainConfig` from them.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any

import yaml

from ict.core import selectors
from ict.core.errors import UsageError, check_input_file, check_path_given, read_utf8_text
from ict.core.options import (
    load_options_yaml,
    load_value_yaml,
    merge_dotted_keys,
    number_option_names,
    text_option_names,
    yaml_problem,
)


def read_overrides(overrides: dict[str, Any]) -> dict[str, Any]:
    """Command-line overrides, each dotted key's text read as YAML with a config file's checks
    (`read_option_text`: ``dataset_config.x=0123`` is refused, not 83)."""
    return {key: read_option_text(raw, key.replace("-", "_")) if "." in key and isinstance(raw, str) else raw
            for key, raw in overrides.items()}


def parse_key_values(items: list[str]) -> dict[str, str]:
    """`["a=1", "b.c=x"]` -> `{"a": "1", "b.c": "x"}`."""
    result: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"override {item!r} is not of the form key=value")
        key, value = item.split("=", 1)
        result[key.strip()] = value
    return result


def load_yaml(path: str | Path, text_options: typing.Collection[str] | None = None,
              number_options: typing.Collection[str] | None = None) -> dict[str, Any]:
    """Options from a YAML mapping file (keys are field names; hyphens allowed), read by
    `load_options_yaml` (text and number options: `text_options`, `number_options`, by default
    TrainConfig's; a selector's and ``dataset_config``'s too: `_read_yaml`). A key given twice
    (``learning_rate`` and ``learning-rate`` too) is a one-line UsageError; a dotted key keeps its
    value as YAML read it (`merge_dotted_keys`)."""
    check_path_given("--config", path, "give a YAML file, or leave it out")  # `--config ""`
    path = Path(path)
    check_input_file("config file", path, "give a YAML file")
    from ict.training.config import TrainConfig  # which imports this module

    try:
        names = text_option_names(TrainConfig) if text_options is None else text_options
        numbers = number_option_names(TrainConfig) if number_options is None else number_options
        data = _read_yaml(read_utf8_text(path), names, numbers) or {}
    except yaml.YAMLError as error:
        raise UsageError(f"cannot parse YAML config {path}: {yaml_problem(error)}") from None
    except UsageError as error:
        raise UsageError(f"config file {path}: {error}") from None
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must hold a mapping of option: value")
    values: dict[str, Any] = {}
    for key, value in data.items():
        name = str(key).replace("-", "_")
        if name in values:
            raise UsageError(f"config file {path}: option {name!r} is given twice (as {key!r} too): keep one")
        values[name] = value
    try:
        return merge_dotted_keys(values)
    except UsageError as error:
        raise UsageError(f"config file {path}: {error}") from None


def _read_yaml(text: str, text_options: typing.Collection[str] = (), number_options: typing.Collection[str] = (),
               prefix: str = "") -> Any:
    """`load_options_yaml` with the selectors' options and ``dataset_config``'s values checked too."""
    return load_options_yaml(text, {*text_options, *_selector_options(str)}, ("dataset_config", *_selector_options(None)),
                             {*number_options, *_selector_options(int)}, prefix)


def read_option_text(raw: str, name: str, prefix: str | None = None) -> Any:
    """The command line's text `raw` for option `name` read as YAML (`prefix`: a mapping's keys,
    `_read_yaml`; else one value, `load_value_yaml`); a YAML error is a one-line UsageError."""
    try:
        if prefix is not None:
            return _read_yaml(raw, prefix=prefix)
        return load_value_yaml(raw, name, typed=name in _selector_options(str), number=name in _selector_options(int))
    except yaml.YAMLError as error:
        raise UsageError(f"bad value for {name}: {raw!r} ({yaml_problem(error)})") from None


def _selector_options(kind: type | None) -> set[str]:
    """``selector.KEY`` for each option of a registered selector whose default is text (`kind`
    ``str``), a number (``int``: an int or float, not a bool) or ``None`` (any YAML value)."""
    kinds = {str: (str,), int: (int, float), None: (type(None),)}[kind]
    return {f"selector.{key}" for selector in selectors.SELECTORS.values()
            for key, default in selector.defaults.items() if isinstance(default, kinds) and not isinstance(default, bool)}

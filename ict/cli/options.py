"""Command-line flags from documented config dataclasses (`ict.core.options.option` fields): one
field = one flag (``--num-steps`` for ``num_steps``, plus aliases), its help text and default.
A field declared with ``positional=True`` is an argument without a flag; a field without help
text (declared with plain `dataclasses.field`) is internal and gets no flag.

`options_from_args` builds the dataclass from ``--config YAML`` (keys = field names) and the
flags given, in that order of precedence, each value converted by `ict.core.options.parse_field`.
"""

from __future__ import annotations

import argparse
import re
import typing
from pathlib import Path
from typing import Any

from ict.core.errors import UsageError
from ict.core.options import (
    default_of,
    describe,
    number_option_names,
    option_fields,
    optional_inner,
    parse_field,
    suggestion,
    text_option_names,
    type_hints,
)


def add_dataclass_options(parser: argparse.ArgumentParser, cls: type,
                          aliases: dict[str, list[str]] | None = None) -> None:
    """One flag per option field of `cls` (default suppressed: unset options are absent from the
    parsed namespace, so YAML values and dataclass defaults are not masked)."""
    aliases = aliases or {}
    types_by_name = type_hints(cls)
    for item in option_fields(cls):
        inner, optional = optional_inner(types_by_name[item.name])
        default = describe(default_of(item))
        help_text = item.metadata["help"] + ("" if item.metadata.get("positional")
                                             else f" (default: {default})")
        help_text = help_text.replace("%", "%%")
        if item.metadata.get("positional"):
            many = typing.get_origin(inner) is tuple  # "*": a --config YAML may give them instead
            parser.add_argument(item.name, nargs="*" if many else "?", default=[] if many else None,
                                metavar=item.name.upper(), help=help_text)
            continue
        flags = ["--" + item.name.replace("_", "-"), *aliases.get(item.name, [])]
        if inner is bool:
            parser.add_argument(*flags, dest=item.name, action=argparse.BooleanOptionalAction,
                                default=argparse.SUPPRESS, help=help_text)
            continue
        choices = item.metadata.get("choices")
        metavar = ("{" + ",".join(choices) + "}" if choices
                   else {int: "INT", float: "FLOAT", dict: "JSON", Path: "PATH"}.get(inner, "TEXT"))
        if typing.get_origin(inner) is tuple:
            element = typing.get_args(inner)[0]
            metavar = {int: "INT", Path: "PATH"}.get(element, "TEXT") + ",..."
        if optional:
            metavar += "|none"
            choices = (*choices, "none") if choices else None
        parser.add_argument(*flags, dest=item.name, default=argparse.SUPPRESS, metavar=metavar,
                            choices=choices, help=help_text, **({"type": _none_spelled} if choices and optional else {}),
                            **({"action": _NoteSpelling} if len(flags) > 1 else {}))


class _NoteSpelling(argparse.Action):
    """argparse's plain store that also notes which spelling of the flag was typed (its alias,
    ``--output-dir``, or ``--run-dir``), for `in_typed_spelling`."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        setattr(namespace, self.dest, values)
        namespace.__dict__.setdefault("typed_spellings", {})[self.dest] = (option_string, self.option_strings)


def in_typed_spelling(message: str, namespace: argparse.Namespace) -> str:
    """`message` with each other spelling of a flag given by an alias replaced by the one typed:
    ``--output-dir ""`` is refused as ``--output-dir is empty``, not as ``--run-dir is empty``."""
    for typed, spellings in getattr(namespace, "typed_spellings", {}).values():
        for other in spellings:
            if other != typed:
                message = re.sub(rf"(?<![\w-]){re.escape(other)}(?![\w-])", typed, message)
    return message


def _none_spelled(text: str) -> str:
    """``none`` for each spelling the other routes take as None (null, ~, None): an optional
    option with choices lists only ``none``."""
    return "none" if text.strip().lower() in ("none", "null", "~") else text


def add_config_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--config YAML``: a file of the command's options (keys = the flags' names)."""
    parser.add_argument("--config", metavar="YAML", default=None,
                        help=f"YAML file of {what}; the flags given override it (default: none)")


def given_options(cls: type, namespace: argparse.Namespace) -> dict[str, Any]:
    """The option fields of `cls` that the command line set (raw strings or booleans; an absent
    positional argument reads as [] or None and is not set)."""
    names = {item.name for item in option_fields(cls)}
    return {name: value for name, value in vars(namespace).items()
            if name in names and value not in ([], None)}


def options_from_args(cls: type, namespace: argparse.Namespace,
                      yaml_values: dict[str, Any] | None = None) -> Any:
    """`cls` built from defaults < `yaml_values` (keys = option names, ``-`` allowed; by default
    the file of ``--config``) < the flags given; every value converted (and an unknown key
    refused) by `parse_field`."""
    if yaml_values is None and getattr(namespace, "config", None) is not None:
        from ict.training.config_text import load_yaml

        yaml_values = load_yaml(namespace.config, text_option_names(cls), number_option_names(cls))
    names = {item.name for item in option_fields(cls)}
    values = {key.replace("-", "_"): value for key, value in (yaml_values or {}).items()}
    unknown = [key for key in values if key not in names]
    if unknown:
        raise UsageError(f"unknown option {unknown[0]!r}{suggestion(cls, unknown[0])}")
    values.update(given_options(cls, namespace))
    return cls(**{name: parse_field(cls, name, raw) for name, raw in values.items()})

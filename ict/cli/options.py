"""Command-line flags from documented config dataclasses (`ict.core.options.option` fields): one
field = one flag (``--num-steps`` for ``num_steps``, plus aliases), its help text and default."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from typing import Any

from ict.core.options import default_of, describe, optional_inner


def add_dataclass_options(parser: argparse.ArgumentParser, cls: type,
                          aliases: dict[str, list[str]] | None = None) -> None:
    """One flag per field of `cls` (default suppressed: unset options are absent from the parsed
    namespace, so YAML values and dataclass defaults are not masked)."""
    aliases = aliases or {}
    types_by_name = typing.get_type_hints(cls)
    for item in dataclasses.fields(cls):
        inner, optional = optional_inner(types_by_name[item.name])
        help_text = f"{item.metadata.get('help', '')} (default: {describe(default_of(item))})"
        help_text = help_text.replace("%", "%%")
        flags = ["--" + item.name.replace("_", "-"), *aliases.get(item.name, [])]
        if inner is bool:
            parser.add_argument(*flags, dest=item.name, action=argparse.BooleanOptionalAction,
                                default=argparse.SUPPRESS, help=help_text)
            continue
        choices = item.metadata.get("choices")
        metavar = ("{" + ",".join(choices) + "}" if choices
                   else {int: "INT", float: "FLOAT", dict: "JSON"}.get(inner, "TEXT"))
        if typing.get_origin(inner) is tuple:
            metavar = "INT,INT,..."
        if optional:
            metavar += "|none"
            choices = (*choices, "none") if choices else None
        parser.add_argument(*flags, dest=item.name, default=argparse.SUPPRESS, metavar=metavar,
                            choices=choices, help=help_text)


def given_options(cls: type, namespace: argparse.Namespace) -> dict[str, Any]:
    """The fields of `cls` that the command line set (raw strings or booleans)."""
    names = {item.name for item in dataclasses.fields(cls)}
    return {name: value for name, value in vars(namespace).items() if name in names}

"""`ict train`: options generated from `ict.config.TrainConfig` (one source of truth)."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

from ict.config import (
    TrainConfig,
    _optional_inner,
    build_config,
    describe,
    field_types,
    parse_key_values,
)

# The names users of TRL / transformers expect, accepted next to ours.
ALIASES = {"run_dir": ["--output-dir"], "num_steps": ["--max-steps"]}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train a model with ICT or a baseline (GRPO, 20-Entropy, STAPO, random)",
        description="Train a causal LM with RL from verifiable rewards and token-selective "
        "policy updates. Every option can also be set in a YAML file (--config) or as "
        "key=value overrides after the options (dotted keys for mappings, e.g. "
        "dataset_config.max_terms=3). Precedence: defaults < --config < options < key=value.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="YAML", default=None,
                        help="YAML file of options (default: none)")
    types_by_name = field_types()
    for item in dataclasses.fields(TrainConfig):
        inner, optional = _optional_inner(types_by_name[item.name])
        default = (item.default if item.default is not dataclasses.MISSING
                   else item.default_factory())  # type: ignore[misc]
        help_text = f"{item.metadata.get('help', '')} (default: {describe(default)})".replace("%", "%%")
        flags = ["--" + item.name.replace("_", "-"), *ALIASES.get(item.name, [])]
        if inner is bool:
            parser.add_argument(*flags, dest=item.name, action=argparse.BooleanOptionalAction,
                                default=argparse.SUPPRESS, help=help_text)
            continue
        choices = item.metadata.get("choices")
        metavar = ("{" + ",".join(choices) + "}" if choices
                   else {int: "INT", float: "FLOAT", dict: "JSON"}.get(inner, "TEXT"))
        if optional:
            metavar += "|none"
        parser.add_argument(*flags, dest=item.name, default=argparse.SUPPRESS, metavar=metavar,
                            choices=item.metadata.get("choices"), help=help_text)
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="option overrides, applied last (default: none)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ict.trainer import train

    names = {item.name for item in dataclasses.fields(TrainConfig)}
    options = {name: value for name, value in vars(args).items() if name in names}
    config = build_config(args.config, options, parse_key_values(args.overrides))
    train(config)
    return 0

"""`ict compare`: options generated from `ict.experiments.compare.CompareConfig`, then
`ict.experiments.compare.run_comparison`."""

from __future__ import annotations

import argparse
import shlex
import sys
from typing import Any

from ict.cli.options import add_dataclass_options, options_from_args

# `--config` is the training YAML every run reads (as in `ict train`); it may set compare options.
ALIASES = {"config_file": ["--config"]}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `compare` subcommand."""
    from ict.analysis.compare import BASELINES
    from ict.experiments.compare import CompareConfig

    parser = subparsers.add_parser(
        "compare", help="train methods x seeds identically, evaluate pass@k, write a report",
        description="For every method and seed: train (same prompts, same rollout seeds per "
        "seed), evaluate the final checkpoint (same problems, same sampling seed), and write "
        "DIR/report.md, results.csv, differences.csv and curves.png with paired bootstrap "
        f"intervals and permutation p-values against the baselines (default {' and '.join(BASELINES)}). "
        "Finished runs are reused.")
    add_dataclass_options(parser, CompareConfig, ALIASES)
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="training option overrides for every run (default: none)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Build a `CompareConfig` (defaults < --config's compare keys < flags) and run it."""
    from ict.experiments.compare import (
        CompareConfig,
        compare_number_options,
        compare_options,
        compare_text_options,
        run_comparison,
    )
    from ict.training.config_text import load_yaml, parse_key_values

    yaml_values = compare_options(load_yaml(
        args.config_file, compare_text_options(), compare_number_options()))[0] if getattr(
        args, "config_file", None) is not None else {}  # --config "": load_yaml's refusal
    config = options_from_args(CompareConfig, args, yaml_values)
    config.overrides = parse_key_values(args.overrides)
    # the command line as typed, global flags (e.g. --debug) included; empty when called otherwise
    command = next((word for word in sys.argv[1:] if not word.startswith("-")), None)
    config.command = "ict " + command_line(sys.argv[1:]) if command == "compare" else ""
    written = run_comparison(config)  # validates it first; the report, or (train only) the directory
    print(f"trained: {written}" if config.train_only else f"report: {written}")
    return 0


def command_line(words: list[str]) -> str:
    """``words`` as one line a shell reads back as them (`shlex.join`), a word holding a character
    that is not printable (the line break of a multi-line ``system_prompt=...``, a tab, U+2028)
    quoted as bash's ``$'...'``, that character escaped (``\\n``, ``\\x09``, ``\\u2028``): shlex
    quotes it raw, so one command took two lines of DIR/commands.txt, and each rerun recorded it
    again (no line of the file equalled it)."""
    return " ".join(shlex.quote(word) if word.isprintable() else _ansi_c_quoted(word) for word in words)


def _ansi_c_quoted(word: str) -> str:
    """bash's ``$'...'`` quoting of ``word``: backslash and quote escaped, every character that is
    not printable as ``\\n``, ``\\xHH``, ``\\uHHHH`` or ``\\UHHHHHHHH``."""
    escaped = []
    for char in word:
        code = ord(char)
        if char in "\\'":
            escaped.append("\\" + char)
        elif char == "\n":
            escaped.append("\\n")
        elif char.isprintable():
            escaped.append(char)
        else:
            escaped.append(f"\\x{code:02x}" if code < 0x80 else f"\\u{code:04x}" if code <= 0xFFFF
                           else f"\\U{code:08x}")
    return "$'" + "".join(escaped) + "'"

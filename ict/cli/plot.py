"""`ict plot RUN_DIR... --out FILE.png`: options generated from `ict.analysis.plots.PlotConfig`,
then `ict.analysis.plots.plot`."""

from __future__ import annotations

import argparse
from typing import Any

from ict.cli.options import add_config_option, add_dataclass_options, options_from_args


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `plot` subcommand."""
    from ict.analysis.plots import PlotConfig

    parser = subparsers.add_parser(
        "plot", help="plot the training curves of run directories",
        description="Runs whose directories share a name (e.g. DIR/runs/ict/seed0, "
        "OTHER/runs/ict/seed1 with --by method) are pooled: mean line and min..max band.")
    add_config_option(parser, "ict plot options")
    add_dataclass_options(parser, PlotConfig)
    parser.set_defaults(run=run, uses_hub=False)  # reads run directories only
    return parser


def run(args: argparse.Namespace) -> int:
    """Build a `PlotConfig` (defaults < --config < flags) and draw it."""
    from ict.analysis.plots import PlotConfig, plot
    config = options_from_args(PlotConfig, args)
    print(f"plot: {plot(config)}")
    return 0

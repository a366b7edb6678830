"""`ict plot RUN_DIR... --out FILE.png`: training curves of any set of runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ict.core.errors import UsageError


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `plot` subcommand."""
    parser = subparsers.add_parser(
        "plot", help="plot the training curves of run directories",
        description="Runs whose directories share a name (e.g. DIR/runs/ict/seed0, "
        "OTHER/runs/ict/seed1 with --by method) are pooled: mean line and min..max band.")
    parser.add_argument("run_dirs", nargs="+", help="run directories (with metrics.jsonl)")
    parser.add_argument("--out", required=True, help="output PNG")
    parser.add_argument("--by", choices=("run", "method"), default="run",
                        help="label each run by its directory name, or pool by the parent "
                             "directory name (ict compare's runs/<method>/seed<k>)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ict.analysis.plots import plot_runs

    directories = [Path(path) for path in args.run_dirs]
    missing = [str(path) for path in directories if not (path / "metrics.jsonl").is_file()]
    if missing:
        raise UsageError(f"no metrics.jsonl in {', '.join(missing)}; pass ict train run "
                         "directories")
    labels = [(path.parent.name if args.by == "method" else str(path)) for path in directories]
    print(f"plot: {plot_runs(directories, Path(args.out), labels)}")
    return 0

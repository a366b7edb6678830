"""Command line: `ict train`, `ict eval`. Only parses arguments and calls the library."""

from __future__ import annotations

import argparse
import os
import sys

from ict.errors import UsageError


def build_parser() -> argparse.ArgumentParser:
    from ict.cli import compare as compare_command
    from ict.cli import evaluate as eval_command
    from ict.cli import inspect as inspect_command
    from ict.cli import plot as plot_command
    from ict.cli import train as train_command

    parser = argparse.ArgumentParser(
        prog="ict",
        description="RL with verifiable rewards and token-selective policy updates (ICT).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    subparsers = parser.add_subparsers(dest="command", required=True)
    train_command.add_parser(subparsers)
    eval_command.add_parser(subparsers)
    compare_command.add_parser(subparsers)
    plot_command.add_parser(subparsers)
    inspect_command.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args) or 0)
    except (UsageError, FileNotFoundError, ValueError) as error:
        if os.environ.get("ICT_DEBUG"):
            raise
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())

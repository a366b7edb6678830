"""Command line: `ict train`, `ict eval`. Only parses arguments and calls the library.

Errors are one line on stderr (a line break in a value echoed escaped, `one_line`), never a
traceback: bad input (`UsageError`, a missing file, a directory where a file goes, a name too long,
a bad value) exits with 2, a run stopped by non-finite updates with 1, anything unexpected with 1
and a hint; `--debug` (before or after the command, or ICT_DEBUG=1) shows the traceback instead.
Ctrl-C and SIGTERM print "interrupted" and exit with 130.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
import threading
import typing
from collections.abc import Iterator
from typing import Any

from ict.core.errors import TrainingDiverged, UsageError, one_line


class OneLineErrors(argparse.ArgumentParser):
    """argparse's parser whose error (a flag unknown, a choice not among the choices, ...) is one
    line, with where to look for help, instead of the command's whole usage text (exit status 2,
    as argparse's). Its subcommands' parsers are of this class too."""

    def error(self, message: str) -> typing.NoReturn:
        self.exit(2, f"{self.prog}: error: {one_line(message)} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    from ict.cli import compare as compare_command
    from ict.cli import evaluate as eval_command
    from ict.cli import inspect as inspect_command
    from ict.cli import plot as plot_command
    from ict.cli import train as train_command

    parser = OneLineErrors(
        prog="ict",
        description="RL with verifiable rewards and token-selective policy updates (ICT).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error (also ICT_DEBUG=1)")
    # not required here: `main` names a missing command itself, after unknown flags (argparse
    # would report "required: command" for `ict --bogus`)
    subparsers = parser.add_subparsers(dest="command", metavar="command")
    train_command.add_parser(subparsers)
    eval_command.add_parser(subparsers)
    compare_command.add_parser(subparsers)
    plot_command.add_parser(subparsers)
    inspect_command.add_parser(subparsers)
    parser.set_defaults(commands=tuple(subparsers.choices))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    # argparse fills a positional list once: items given after an option that follows earlier
    # ones (`selector.tau_p=0.002 --num-steps 5 seed=1`, `ict plot A --by method B`) come back unknown
    for name, belongs in (("overrides", _is_override), ("run_dirs", _is_operand)):
        if isinstance(getattr(args, name, None), list):
            setattr(args, name, [*getattr(args, name), *(word for word in unknown if belongs(word))])
            unknown = [word for word in unknown if not belongs(word)]
    if "--debug" in unknown:  # `ict train ... --debug`: where an error's hint "run with --debug" puts it
        args.debug = True
        unknown = [word for word in unknown if word != "--debug"]
    if unknown:
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    if args.command is None:
        parser.error(f"choose a command: {', '.join(args.commands)}")
    debug = args.debug or bool(os.environ.get("ICT_DEBUG"))
    with _sigterm_as_interrupt():
        return _run(args, debug)


def _is_override(word: str) -> bool:
    """A `key=value` override of `ict train` / `ict compare` (not an option or its value)."""
    return _is_operand(word) and "=" in word


def _is_operand(word: str) -> bool:
    """A word argparse left over that is not an option (`ict plot`'s run directories)."""
    return not word.startswith("-")


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (a scheduler's stop, `kill`) acts as Ctrl-C for the whole command: the same one-line
    "interrupted" and exit 130, after the `finally` blocks ran, instead of a silent death wherever
    it lands (the training step loop handles both signals itself). Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(number: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _run(args: argparse.Namespace, debug: bool) -> int:
    """The command, with its errors as one line and an exit status."""
    try:
        if getattr(args, "uses_hub", True):  # before transformers, which a bad HF_ENDPOINT stops importing
            from ict.data.hub import check_endpoint

            check_endpoint()
        return int(args.run(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except (UsageError, FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError,
            ValueError) as error:
        if debug:
            raise
        from ict.cli.options import in_typed_spelling

        # a flag named as typed: --output-dir "" is refused as --output-dir, not as --run-dir
        print(f"error: {one_line(in_typed_spelling(str(error), args))}", file=sys.stderr)
        return 2
    except TrainingDiverged as error:
        if debug:
            raise
        print(f"error: {error}", file=sys.stderr)
        return 1
    except Exception as error:  # noqa: BLE001 - the last line of defence: one line, not a traceback
        if debug:
            raise
        if isinstance(error, OSError) and error.errno == errno.ENAMETOOLONG:  # a path given (or named
            # after a value given) longer than the file system takes: bad input, wherever it is met
            print(f"error: {one_line(str(error))}", file=sys.stderr)
            return 2
        message = " ".join(str(error).split()) or type(error).__name__
        print(f"error: {type(error).__name__}: {message} (run with --debug for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

"""What the tests of the docs share: the repository root, the docs, their text read as commands
or as prose, and each `ict` command's parser (tests/test_docs_defaults.py, test_docs_commands.py)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def command_parsers() -> dict:
    """Each `ict` command's argument parser, by name, and the top one under ``""``."""
    import argparse

    from ict.cli import build_parser

    parser = build_parser()
    subparsers = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return {"": parser, **subparsers.choices}


def command_options() -> dict[str, set[str]]:
    """The option strings each `ict` command accepts, with the global ones (`--debug`, `--help`)."""
    parsers = command_parsers()
    common = set(parsers.pop("")._option_string_actions)
    return {name: set(sub._option_string_actions) | common for name, sub in parsers.items()}


def doc_text(name: str) -> str:
    """A doc with its shell line continuations joined (``\\`` + newline)."""
    return re.sub(r"\\\n\s*", " ", (ROOT / name).read_text())


ALL_DOCS = ["README.md", *sorted(f"docs/{path.name}" for path in (ROOT / "docs").glob("*.md"))]


def flat(name: str) -> str:
    """A doc's text with every run of whitespace one space (a phrase the docs wrap is one line)."""
    return " ".join((ROOT / name).read_text().split())

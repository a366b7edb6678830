"""Raw data rows: reading JSON-lines/JSON/Parquet files into JSON objects that remember where they
came from, and checking the values of question, answer, choices and chat-message fields.

The one home of these checks for both loaders (`ict.data.training_data` for `ict train --dataset`,
`ict.data.benchmarks` for `ict eval --data-dir`). A value that cannot be used raises `ValueError`
with one line naming the field; the loaders prefix the file, line and row (`Rows.where`) and turn
it into a `UsageError` (exit code 2). What the published datasets ship is accepted: text
questions, chat-message lists, text/number/list-of-text golds (AMC's ``27.0``, MMLU's index ``2``,
OlympiadBench's ``["$2$"]``), choices as a list or its Python-literal string.
"""

from __future__ import annotations

import ast
import codecs
import json
import math
import numbers
import re
import sys
from pathlib import Path
from typing import Any

from ict.core.errors import (
    UsageError,
    check_input_file,
    encodes_as_utf8,
    is_finite_number,
    read_utf8_text,
)

MAX_CHOICES = 26
TOO_LONG_NUMBER = f"a number of more than {sys.get_int_max_str_digits()} digits, more than Python reads"


class Rows(list):
    """A list of rows (dicts) that knows its source and each row's line (JSON lines) or record
    number (a JSON list); without `numbers`, rows are counted from 1."""

    def __init__(self, rows: list[dict[str, Any]], source: str, numbers: list[int] | None = None,
                 unit: str = "line") -> None:
        super().__init__(rows)
        self.source = source
        self.numbers = numbers
        self.unit = unit

    def where(self, index: int) -> str:
        """``file:line: row n`` for the 0-based row `index` (``file: record m`` in a JSON list,
        ``source: row n`` without numbers)."""
        if self.numbers is None:
            return f"{self.source}: row {index + 1}"
        if self.unit == "line":
            return f"{self.source}:{self.numbers[index]}: row {index + 1}"
        return f"{self.source}: {self.unit} {self.numbers[index]}"


def row_location(rows: Any, index: int) -> str:
    """Where row `index` of `rows` came from: `Rows.where`, or ``row n`` for a plain list."""
    return rows.where(index) if isinstance(rows, Rows) else f"row {index + 1}"


def describe(value: Any) -> str:
    """A short name of a JSON value for error lines: ``null``, ``a number (3)``, ``a list``..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, int | float):
        return f"a number ({value!r:.40})"
    if isinstance(value, str):
        return f"text ({value!r:.40})"
    if isinstance(value, list | tuple):
        return f"a list of {len(value)}"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def checked_object(row: Any) -> dict[str, Any]:
    """`row` itself when it is a JSON object (dict); else `ValueError`."""
    if not isinstance(row, dict):
        raise ValueError(f"expected a JSON object, got {describe(row)}")
    return row


def checked_text(value: Any, field: str) -> str:
    """A text field (question, context, option): a string that is valid Unicode, else `ValueError`."""
    if not isinstance(value, str):
        raise ValueError(f"field {field!r} must be text, got {describe(value)}")
    return encodable(value, field)


def encodable(text: str, field: str) -> str:
    """`text`, which the prompt carries to the tokenizer: a `ValueError` naming `field` for a lone
    surrogate (JSON's ``\\ud800``), which no tokenizer encodes (a TypeError mid-run otherwise)."""
    if not encodes_as_utf8(text):
        raise ValueError(f"field {field!r} is not valid text (a lone surrogate, as \\ud800): no tokenizer "
                         "encodes it")
    return text


def checked_messages(value: list[Any], field: str) -> list[dict[str, Any]]:
    """A non-empty list of chat messages, each an object with text ``role`` and ``content``."""
    if not value:
        raise ValueError(f"field {field!r} is an empty list (expected text or chat messages)")
    messages = []
    for number, message in enumerate(value, 1):
        if not isinstance(message, dict):
            raise ValueError(f"field {field!r}: message {number} must be an object with 'role' and "
                             f"'content', got {describe(message)}")
        for key in ("role", "content"):
            if key not in message:
                raise ValueError(f"field {field!r}: message {number} has no {key!r}")
            if not isinstance(message[key], str):
                raise ValueError(f"field {field!r}: message {number} {key!r} must be text, got "
                                 f"{describe(message[key])}")
            encodable(message[key], f"{field}: message {number} {key}")
        messages.append(dict(message))
    return messages


def checked_question(value: Any, field: str, messages: bool = True) -> str | list[dict[str, Any]]:
    """A question: non-blank text, or (with `messages`) a list of chat messages."""
    if messages and isinstance(value, list):
        return checked_messages(value, field)
    if not isinstance(value, str):
        expected = "text or a list of chat messages" if messages else "text"
        raise ValueError(f"field {field!r} must be {expected}, got {describe(value)}")
    if not value.strip():
        raise ValueError("empty question; fix or remove the row")
    return encodable(value, field)


def checked_answer(value: Any, field: str) -> str | int | float | list[Any]:
    """A gold answer: non-blank text, a finite number, or a non-empty list of texts/numbers."""
    if isinstance(value, str):
        if not value.strip():
            raise ValueError(f"field {field!r} is empty")
        return value
    if is_finite_number(value):
        return value
    if isinstance(value, list | tuple) and value and all(
            isinstance(item, str) or is_finite_number(item) for item in value):
        return list(value)
    raise ValueError(f"field {field!r} must be text, a number or a list of texts, got "
                     f"{describe(value)}")


def gold_index(value: Any) -> int | None:
    """An option index a gold is written as: an integer, an integral float (``1.0``, as a pandas
    export writes an integer column with a gap) or the text of one (``"1"``, ``" 1.0 "``); None
    for anything else (``1.5``, ``"B"``, ``"²"``). The range is the caller's to check."""
    if isinstance(value, bool):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return int(value) if math.isfinite(value) and float(value).is_integer() else None
    if isinstance(value, str) and (match := re.fullmatch(r"\s*([-+]?\d+)(?:\.0*)?\s*", value)):
        return int(match.group(1))
    return None


def python_literal(text: str, refusal: str) -> Any:
    """The Python literal `text` spells (``ast.literal_eval`` of the stripped text: a list, an
    object, a number...), as datasets store a column of lists or objects; one-line `ValueError`
    `refusal` for a text that spells none (a syntax error, nesting too deep for the parser)."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ValueError(refusal) from None


def checked_choices(value: Any, field: str) -> list[str]:
    """Multiple-choice options: a list (or its Python-literal string) of 2-26 texts/numbers."""
    if isinstance(value, str):
        value = python_literal(value, f"field {field!r}: choices {value[:80]!r} are not a list")
    if hasattr(value, "tolist"):  # numpy arrays from parquet/hub rows
        value = value.tolist()
    if not isinstance(value, list | tuple):
        raise ValueError(f"field {field!r}: choices must be a list, got {describe(value)}")
    for number, option in enumerate(value, 1):
        if not (isinstance(option, str) or is_finite_number(option)):
            raise ValueError(f"field {field!r}: option {number} must be text or a number, got "
                             f"{describe(option)}")
        encodable(str(option), f"{field}: option {number}")
    if not 2 <= len(value) <= MAX_CHOICES:
        raise ValueError(f"field {field!r}: expected 2-{MAX_CHOICES} options, got {len(value)}")
    return [str(option) for option in value]


# --------------------------------------------------------------------------------------------
# Files
# --------------------------------------------------------------------------------------------


def read_records(path: str | Path, skipped: list[str] | None = None) -> Rows:
    """Rows of a .jsonl (one JSON object a line), .json (a list of objects) or .parquet file.

    A .jsonl line that is not UTF-8 or not a JSON object (and a .json element that is not an
    object) raises a `UsageError` naming the file and line, unless `skipped` is a list: then it is
    left out and its reason appended there. A leading ``~`` is the home directory, and a leading
    UTF-8 byte-order mark (as Windows editors write) is not part of the first row."""
    path = Path(path).expanduser()
    check_input_file("data file", path, "give a .jsonl, .json or .parquet file")
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        return _read_jsonl(path, skipped)
    if suffix == ".json":
        return _read_json(path, skipped)
    if suffix == ".parquet":
        import pyarrow.parquet as parquet

        return Rows(parquet.read_table(path).to_pylist(), str(path))
    raise UsageError(f"unsupported data file {path} (use .jsonl, .json, .parquet)")


def _refuse_or_skip(where: str, error: Exception, skipped: list[str] | None) -> None:
    if skipped is None:
        raise UsageError(f"{where}: {error}") from None
    skipped.append(f"{where}: {error}")


def _read_jsonl(path: Path, skipped: list[str] | None) -> Rows:
    rows, lines = [], []
    for number, raw in _numbered_lines(path.read_bytes().removeprefix(codecs.BOM_UTF8)):
        try:
            row = _jsonl_row(raw)
        except ValueError as error:
            _refuse_or_skip(f"{path}:{number}", error, skipped)
            continue
        if row is not None:
            rows.append(row)
            lines.append(number)
    return Rows(rows, str(path), lines)


def _numbered_lines(data: bytes) -> list[tuple[int, bytes]]:
    """(line number, bytes) of each line of a JSON-lines file, numbered as an editor and ``grep -n``
    count them: at each "\\n" (a Windows "\\r\\n", or the "\\r\\r\\n" a second conversion of one
    leaves, ends in "\\r"s, which `bytes.splitlines` counted as line breaks of their own: each row
    after them named a line further down than it is), each "\\r" in a line a break within it; in a
    file without a "\\n" (an old Mac file) at each "\\r"."""
    if b"\n" not in data:
        return list(enumerate(data.splitlines(), 1))
    return [(number, raw) for number, line in enumerate(data.split(b"\n"), 1) for raw in line.splitlines()]


def _read_json(path: Path, skipped: list[str] | None) -> Rows:
    try:
        data = json.loads(read_utf8_text(path))
    except json.JSONDecodeError as error:
        raise UsageError(f"{path}: invalid JSON ({error.msg} at line {error.lineno})") from None
    except RecursionError:  # as a .jsonl line nested too deeply (`_jsonl_row`)
        raise UsageError(f"{path}: JSON nested too deeply; fix the file") from None
    except ValueError:  # json's int(): past Python's limit on an integer's digits
        raise UsageError(f"{path}: {TOO_LONG_NUMBER}; fix the file") from None
    if not isinstance(data, list):
        raise UsageError(f"{path} must hold a JSON list of records")
    rows, numbers = [], []
    for number, row in enumerate(data, 1):
        try:
            rows.append(checked_object(row))
            numbers.append(number)
        except ValueError as error:
            _refuse_or_skip(f"{path}: record {number}", error, skipped)
    return Rows(rows, str(path), numbers, unit="record")


def _jsonl_row(raw: bytes) -> dict[str, Any] | None:
    """One JSON-lines row (None for a blank line); a bad one is a `ValueError`."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text; re-encode the file as UTF-8") from None
    if not line.strip():
        return None
    try:
        row = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"not valid JSON ({error.msg}); fix or remove the line") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply; fix or remove the line") from None
    except ValueError:  # json's int(): past Python's limit on an integer's digits
        raise ValueError(f"{TOO_LONG_NUMBER}; fix or remove the line") from None
    return checked_object(row)

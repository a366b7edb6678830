"""Errors the command line turns into one line on stderr (never a traceback), and the type checks
that decide the commonest of them."""

import contextlib
import errno
import json
import math
import numbers
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def is_integer(value: Any) -> bool:
    """An integer (``int``, numpy's) that is not a ``bool`` (YAML and hydra read ``true`` as one;
    ``1.5`` would be cut to 1 by ``int``)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_finite_number(value: Any) -> bool:
    """A finite real number (``int``, ``float``, numpy's ``float32``...) that is not a ``bool``; an
    integer always is, however large (``math.isfinite(2**1400)`` raises OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return False
    return isinstance(value, numbers.Integral) or math.isfinite(value)


# the characters at which `str.splitlines` (and a terminal or a log reader) starts a new line
_LINE_BREAKS = {ord(char): repr(char)[1:-1] for char in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"}


def one_line(message: str) -> str:
    """`message` as one line: each line break in it (a path or a value typed with a newline, a
    U+2028) written as its escape, ``\\n``, ``\\x0b``, ``\\u2028``; other text as it is."""
    return message.translate(_LINE_BREAKS)


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message, stripped, or its type's name when it has none: a
    library's error of many lines (transformers', peft's, datasets') inside a one-line message."""
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


class UsageError(Exception):
    """Bad user input (an option, a file, a path): the message names the problem and the fix."""


class TrainingDiverged(Exception):
    """Training stopped after too many consecutive non-finite updates (checkpointed first)."""


def check_path_given(flag: str, path: Any, instead: str) -> None:
    """One-line UsageError ``"<flag> is empty: <instead>"`` when `path` is given (not None) but
    empty or blank: ``Path("")`` is the working directory, and an empty directory option would
    otherwise fall back to its default without a word."""
    if path is not None and not str(path).strip():
        raise UsageError(f"{flag} is empty: {instead}")


def check_input_file(what: str, path: Path, give: str) -> None:
    """One-line UsageError unless `path` is a regular file to read: ``<what> <path> is a
    directory: <give>``, ``<what> <path> is not a regular file (a device or a pipe): <give>``
    (``--config /dev/null``, bash's ``<(...)``: read more than once, or without end), or
    ``<what> not found: <path>``."""
    if path.is_file():
        return
    if path.is_dir():
        raise UsageError(f"{what} {path} is a directory: {give}")
    if path.exists():
        raise UsageError(f"{what} {path} is not a regular file (a device or a pipe): {give}")
    raise UsageError(f"{what} not found: {path}")


MAX_THREADS = 1024
"""the most CPU threads `--threads` / ``num_threads`` give torch (more than the largest machines'
cores; the limit does not depend on this machine's, so a run resumes on another)"""


def check_thread_count(flag: str, threads: int | None) -> None:
    """One-line UsageError unless `threads` (torch's CPU threads; None: one per core) is in
    1..`MAX_THREADS`: OpenMP starts them all at the first parallel operation, and 100000 ran out of
    memory there (exit 1, "unable to mmap ... Cannot allocate memory", or an abort of libgomp)."""
    if threads is not None and not 1 <= threads <= MAX_THREADS:
        raise UsageError(f"{flag} must be in 1..{MAX_THREADS}, got {threads}")


ITEM_BYTES = 64
"""a lower bound of the memory one completion of a step (or one generated problem) holds at once:
its own list of token ids (an empty list object is 56 bytes in CPython) and a pointer to it"""

PROBLEM_BYTES = 256
"""a lower bound of the memory one generated problem holds: its `Problem` object, the object's
`__dict__`, its task's entry (a dict) and its prompt (a string of its own): over 600 bytes in CPython
3.11 for reasoning-gym's chain_sum, ~1.4 KB with the rest of its strings"""


def machine_memory_bytes() -> int:
    """This machine's RAM + swap in bytes (``/proc/meminfo``; else sysconf's RAM), the most that
    can exist for one process; ``2**63`` where neither says."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/meminfo").read_text().splitlines() if ":" in line)
        return (int(fields["MemTotal"].split()[0]) + int(fields.get("SwapTotal", "0 kB").split()[0])) * 1024
    except (OSError, KeyError, ValueError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return 2**63


def check_fits_in_memory(count: int, what: str, fix: str, item_bytes: int = ITEM_BYTES) -> None:
    """One-line UsageError when `count` items (`what`: e.g. "completions a step") need more than
    the machine has even at `item_bytes` each (a bound below their real size), checked before the
    model loads: a million million completions a step ran out of memory after the load (MemoryError,
    or the kernel's kill, exit 137), and a billion reasoning-gym problems were generated one by one
    until memory ran out."""
    memory = machine_memory_bytes()
    if count * item_bytes > memory:
        raise UsageError(f"{count:,} {what} need at least {count * item_bytes / 2**30:,.0f} GiB of memory "
                         f"({item_bytes} bytes each), more than this machine's {memory / 2**30:,.1f} GiB of "
                         f"RAM + swap: {fix}")


def check_output_file(flag: str, path: Any) -> None:
    """One-line UsageError unless `path` can name a file to write, checked before any work: not a
    directory, its nearest existing ancestor a directory, a name the file system takes (a name
    too long is an OSError of its own); nothing is created."""
    path = Path(path).expanduser()
    try:
        if path.is_dir() or not path.name:
            raise UsageError(f"{flag} must name a file, got {str(path)!r}")
        existing = next((parent for parent in path.parents if parent.exists()), None)
    except OSError as error:
        raise UsageError(f"{flag} {path}: {error.strerror or error}") from None
    if existing is not None and not existing.is_dir():
        raise UsageError(f"{flag} {path}: {existing} is a file, not a directory")


@contextlib.contextmanager
def writing_output(flag: str, path: Any) -> Iterator[None]:
    """Write the output `flag` names inside the body: an OSError there (no space, no permission)
    is a one-line UsageError naming the flag and the path."""
    try:
        yield
    except OSError as error:
        raise UsageError(f"{flag} {path}: cannot write it ({error.strerror or error})") from None


def write_failure(error: BaseException) -> str | None:
    """Why a write failed, when ``error`` is the file system's refusal of it (a full disk, a quota,
    a file too large, no permission): an OSError's reason, or the I/O error that safetensors'
    SafetensorError (no OSError) reports, e.g. ``"No space left on device (os error 28)"``; None
    for any other error."""
    if isinstance(error, OSError):
        return error.strerror or str(error)
    message = str(error)
    if type(error).__name__ == "SafetensorError" and "I/O error: " in message:
        return message.split("I/O error: ", 1)[1]
    return None


_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}
_NOT_ALLOWED = {errno.EACCES, errno.EPERM, errno.EROFS}


def write_remedy(error: BaseException) -> str:
    """What to do about a write the file system refused (`write_failure`), by its errno (an
    OSError's, or the ``os error N`` that safetensors reports): "free some space" for a full disk,
    a quota or a file too large, "make it writable" for no permission or a read-only file system,
    else (a file where a directory goes, a name taken) "clear the way for it"."""
    number = getattr(error, "errno", None)
    if number is None and (found := re.search(r"\(os error (\d+)\)", str(error))):
        number = int(found[1])
    if number in _NOT_ALLOWED:
        return "make it writable"
    if number is None or number in _NO_SPACE:
        return "free some space"
    return "clear the way for it"


def encodes_as_utf8(text: str) -> bool:
    """Whether `text` is valid Unicode text, which UTF-8 and a tokenizer can encode: False for a
    lone surrogate (JSON's ``\\ud800``, or a non-UTF-8 byte of argv read as ``\\udcff``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_option_text(flag: str, text: str | None) -> None:
    """One-line UsageError when the text option `flag` is given but no valid text
    (:func:`encodes_as_utf8`: a byte of argv that is not UTF-8, read as ``\\udcff``, or YAML's
    ``"\\ud800"``): it goes into every prompt, and the tokenizer would fail at the first one."""
    if text is not None and not encodes_as_utf8(text):
        raise UsageError(f"{flag} is not valid text (a byte that is not UTF-8, or a lone surrogate?): "
                         "no tokenizer encodes it")


def read_utf8_text(path: Any) -> str:
    """The text of the file `path`, less a leading byte-order mark (as Windows editors write), each
    line ending ``\\n``: a Windows ``\\r\\n``, and the ``\\r\\r\\n`` a second conversion of one
    leaves (read as two line breaks, it put a blank line between every two lines of a YAML block
    scalar, a ``system_prompt: |``), one line break; a lone ``\\r`` (an old Mac file) one too. A
    one-line UsageError naming it, and where, if it is not UTF-8."""
    try:
        text = Path(path).read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise _not_utf8(path, error) from None
    return _CARRIAGE_RETURNS.sub("\n", text).replace("\r", "\n") if "\r" in text else text


_CARRIAGE_RETURNS = re.compile(r"\r+\n")  # the end of a Windows line, converted once or more


def jsonl_records(path: Path, what: str, fix: str = "") -> Iterator[tuple[int, Any]]:
    """(line number, JSON value) of each line of the JSON Lines file ``path`` that is not blank,
    read as bytes split at "\\n" and "\\r" only (`str.splitlines` also splits at U+2028, U+2029 and U+0085,
    which ``json.dumps(..., ensure_ascii=False)``, as `ict eval` writes samples.jsonl, leaves raw
    inside a string), a leading byte-order mark dropped. The one home of the policy for an
    append-only run file (``samples.jsonl``: `ict eval`, `ict compare`, `ict inspect`): a crash
    (a kill, a full disk) can only leave a torn last line, one without its newline, which is left
    out when it is no UTF-8 or no JSON (`ict eval`'s resume rewrites the file without it); any
    other such line is a one-line UsageError naming ``<path>:<line>``: ``not UTF-8 text``, or
    ``not <what> (no JSON: ...)<fix>``. A lone "\\r" (an old Mac's line end, a file converted to it)
    ends a line too, as "\\r\\n" does: JSON has none raw inside a string (json.dumps writes
    ``\\r``), and the file read as one torn line was no record at all, which `ict eval`'s resume
    rewrote as an empty file."""
    number = 0
    with open(path, "rb") as handle:
        for chunk in handle:
            pieces = chunk.removesuffix(b"\n").rstrip(b"\r").split(b"\r")
            ended = chunk.endswith((b"\n", b"\r"))  # only the last line can lack its end
            for position, data in enumerate(pieces):
                number += 1
                torn = not ended and position == len(pieces) - 1
                try:
                    line = data.decode("utf-8-sig" if number == 1 else "utf-8")
                except UnicodeDecodeError as error:
                    if torn:
                        continue
                    raise UsageError(f"{path}:{number}: not UTF-8 text ({error.reason} at byte {error.start} of "
                                     "the line); re-encode the file as UTF-8") from None
                if not line.strip():
                    continue
                try:
                    value = json.loads(line)
                except json.JSONDecodeError as error:
                    if torn:
                        continue
                    raise UsageError(f"{path}:{number}: not {what} (no JSON: {error}){fix}") from None
                yield number, value


def _not_utf8(path: Any, error: UnicodeDecodeError) -> UsageError:
    return UsageError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start}); re-encode the "
                      "file as UTF-8")

"""Answer extraction and checking: bounded math-verify, option letters, strict tagged answers.

Everything here treats model output as untrusted input:

* extraction helpers (`extract_boxed_answer`, `extract_choice_letter`, `extract_tagged_answer`) do
  bounded work in the calling process (at most `MAX_SCAN_CHARS` characters are scanned, no
  regular expression with nested quantifiers runs over the whole text);
* math checks (`verify_math`, `check_math`, their `_batch` forms) run math-verify in a persistent
  worker *process* and enforce a hard wall-clock bound per check by killing and restarting the
  worker. math-verify's own timeouts use `signal.alarm` (main thread only), so they are switched off
  (`parsing_timeout=None`, `timeout_seconds=None`) and the bound is ours. A check that exceeds the
  bound is judged incorrect with status ``"timeout"``. One round trip to a warm worker costs well
  under a millisecond plus the parse itself.

Gold answers come in several published formats; `normalize_gold` turns each into one bare LaTeX
answer (``"#### 1,234"`` -> ``"1234"``, ``"['$2$']"`` -> ``"2"``, ``27.0`` -> ``"27"``, a Minerva
solution -> its last ``\\boxed{}``), and the worker wraps it as ``$<gold>$`` before parsing (a bare
``1 - \\sqrt{2}`` would otherwise parse as ``1``).
"""

from __future__ import annotations

import ast
import atexit
import math
import os
import pickle
import re
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ict.problems import OPTION_LETTERS

# Bounds on the work done in the calling process.
MAX_SCAN_CHARS = 20_000
"""Only the last this-many characters of a completion are scanned or sent to math-verify."""
MAX_BOXED_CHARS = 2_000
"""A ``\\boxed{...}`` whose content is longer than this is treated as not closed."""
MAX_BOXED_TRIES = 8
"""How many ``\\boxed`` occurrences, from the last backwards, are tried before giving up."""
DEFAULT_TIMEOUT_SECONDS = 5.0
WORKER_START_TIMEOUT_SECONDS = 120.0
WORKER_MEMORY_LIMIT_BYTES = 8 * 1024**3
"""Address-space limit of a math worker (a runaway sympy power raises MemoryError, not OOM)."""

MathStatus = Literal["ok", "no_answer", "timeout", "error", "bad_gold"]
MathExtraction = Literal["lenient", "anchored"]
"""How the completion's answer is found. ``lenient`` (math-verify's defaults): ``\\boxed{}``
first, then "final answer is ..."-style anchors, then any ``$...$`` formula or number (the last
one). ``anchored``: only ``\\boxed{}`` (or ``#### x``) and anchors such as "the answer is",
"final answer:", "Answer:"; a completion that merely mentions numbers has no answer."""
MATH_EXTRACTIONS = ("lenient", "anchored")


# --------------------------------------------------------------------------------------------
# Text hygiene and bounded extraction
# --------------------------------------------------------------------------------------------


def sanitize_text(text: str | bytes | None) -> str:
    """Return valid UTF-8-encodable text: bytes are decoded with U+FFFD for invalid sequences,
    lone surrogates and NUL characters are replaced. ``None`` becomes ``""``."""
    if text is None:
        return ""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", errors="replace")
    elif not isinstance(text, str):
        text = str(text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = text.encode("utf-8", errors="replace").decode("utf-8")
    return text.replace("\x00", "\ufffd")


def _tail(text: str, limit: int = MAX_SCAN_CHARS) -> str:
    return text if len(text) <= limit else text[-limit:]


def _balanced_group(text: str, open_index: int, limit: int = MAX_BOXED_CHARS) -> str | None:
    """Content of the brace group opening at ``text[open_index] == '{'``; ``None`` if it does not
    close within ``limit`` characters. ``\\{`` and ``\\}`` are literal braces and do not count."""
    depth = 0
    index = open_index
    end = min(len(text), open_index + limit + 2)
    while index < end:
        char = text[index]
        if char == "\\":
            index += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[open_index + 1 : index]
        index += 1
    return None


_BOXED_COMMANDS = ("\\boxed", "\\fbox", "\\framebox")


def extract_boxed_answer(text: str | bytes | None) -> str | None:
    """Content of the last complete ``\\boxed{...}`` (or ``\\fbox{...}``, ``\\framebox{...}``).

    Rule: find the last occurrence of one of the commands; after optional spaces it must be followed
    by a brace group that closes within `MAX_BOXED_CHARS` characters (``\\{``/``\\}`` are literal),
    or by ``\\boxed <token>`` (space form, the token runs to the next whitespace or ``$``). If the
    last occurrence is unclosed, earlier ones are tried (at most `MAX_BOXED_TRIES`). Only the last
    `MAX_SCAN_CHARS` characters are looked at. Returns the stripped content, or ``None``.
    """
    text = _tail(sanitize_text(text))
    candidates: list[tuple[int, str]] = []
    for command in _BOXED_COMMANDS:
        start = len(text)
        for _ in range(MAX_BOXED_TRIES):
            position = text.rfind(command, 0, start)
            if position < 0:
                break
            candidates.append((position, command))
            start = position
    candidates.sort(reverse=True)
    for position, command in candidates[:MAX_BOXED_TRIES]:
        after = position + len(command)
        if after < len(text) and text[after].isalpha():
            continue  # e.g. \boxedA is another macro
        index = after
        while index < len(text) and text[index] in " \t":
            index += 1
        if index < len(text) and text[index] == "{":
            content = _balanced_group(text, index)
            if content is not None:
                return content.strip()
            continue
        if command == "\\boxed" and index > after and index < len(text):
            match = re.match(r"[^\s$]{1,100}", text[index : index + 101])
            if match:
                return match.group(0)
    return None




def _choice_pattern(letters: str) -> str:
    return f"[{letters}]"


def extract_choice_letter(completion: str | bytes | None, num_choices: int) -> str | None:
    """The option letter a completion commits to, or ``None``. Strict rule, first that applies:

    1. the content of the last ``\\boxed{}`` is a single valid letter, optionally wrapped as
       ``(B)``, ``B)``, ``B.``, ``\\text{B}``, ``\\textbf{(B)}``, or starts with such a letter
       followed by ``)``/``.``/``:`` and the option text (``\\boxed{B) 42}``);
    2. otherwise the last phrase "answer is", "answer:", "Answer -" (case-insensitive, optionally
       "final"/"correct", optionally bold ``**``) followed by a valid letter as a whole word, in
       optional parentheses;
    3. otherwise the whole completion, stripped of whitespace, ``*`` and a trailing period, is one
       valid letter, optionally in parentheses or followed by ``)`` / ``.`` / ``:`` and option text
       on the same line (``B) 42``).

    Valid letters are the first ``num_choices`` of A-Z, upper case only (a lone "a" is an article).
    Anything else (a letter mentioned mid-sentence, several letters) gives ``None``.
    """
    if not 1 <= num_choices <= len(OPTION_LETTERS):
        raise ValueError(f"num_choices must be in 1..26, got {num_choices}")
    letters = OPTION_LETTERS[:num_choices]
    text = _tail(sanitize_text(completion))
    letter = _choice_pattern(letters)

    boxed = extract_boxed_answer(text)
    if boxed is not None:
        inner = boxed.strip()
        for _ in range(3):  # peel \text{...}, \textbf{...}, \mathrm{...}
            match = re.fullmatch(r"\\(?:text|textbf|mathrm|mathbf)\s*\{(.*)\}", inner, flags=re.S)
            if not match:
                break
            inner = match.group(1).strip()
        match = re.fullmatch(rf"\(?({letter})\)?\.?", inner) or re.match(
            rf"\(?({letter})(?:\)|\.|:)\s", inner + " "
        )
        if match:
            return match.group(1)
        return None

    phrase = re.compile(
        rf"(?:final\s+|correct\s+)?answer\s*(?:is\s*:?|:|-)\s*(?:option\s+)?\**\s*(?:\\?\(|\[)?\s*({letter})\b(?![\w'])",
        flags=re.IGNORECASE,
    )
    last = None
    for match in phrase.finditer(text):
        if match.group(1) in letters:  # IGNORECASE widened the class; keep upper case only
            last = match
    if last is not None:
        return last.group(1)

    stripped = text.strip().strip("*").strip()
    match = re.fullmatch(rf"\(?({letter})\)?\.?", stripped)
    if match:
        return match.group(1)
    match = re.match(rf"\(?({letter})(?:\)|\.|:)[ \t]([^\n]*)$", stripped)
    # "B) 42" commits to B; "(A) (B) (C) (D)" lists every option and commits to none
    if match and not re.search(rf"(?:^|\s)\(?({letter})\)", match.group(2)):
        return match.group(1)
    return None


def extract_tagged_answer(completion: str | bytes | None, tag_name: str = "answer") -> str | None:
    """Strict answer extraction for reasoning-gym style tasks.

    Rule: the content of the last complete ``<answer>...</answer>`` pair; if there is none, the
    content of the last ``\\boxed{}`` (`extract_boxed_answer`); else ``None``. No fallback to "the
    last number in the text": reasoning-gym scorers give partial credit to verbose answers, so only
    an explicitly marked answer is scored. Content is stripped; an empty answer gives ``None``.
    """
    text = _tail(sanitize_text(completion))
    close = f"</{tag_name}>"
    open_tag = f"<{tag_name}>"
    end = text.rfind(close)
    if end >= 0:
        start = text.rfind(open_tag, 0, end)
        if start >= 0:
            content = text[start + len(open_tag) : end].strip()
            return content or None
    boxed = extract_boxed_answer(text)
    return boxed or None


# --------------------------------------------------------------------------------------------
# Gold answers
# --------------------------------------------------------------------------------------------

GoldFormat = Literal["latex", "gsm8k", "list", "number", "boxed_solution", "auto"]


def _strip_math_delimiters(text: str) -> str:
    text = text.strip()
    for left, right in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if text.startswith(left) and text.endswith(right) and len(text) >= len(left) + len(right):
            inner = text[len(left) : len(text) - len(right)].strip()
            if left == "$" and "$" in inner:
                continue  # "$a$, $b$" is two formulas, not one
            return inner
    return text


def gold_from_gsm8k(answer_text: str) -> str:
    """``"... #### 1,234"`` -> ``"1234"`` (text after the last ``####``, commas and ``$`` removed)."""
    if "####" not in answer_text:
        raise ValueError(f"GSM8K answer has no '####' marker: {answer_text[-80:]!r}")
    final = answer_text.rsplit("####", 1)[1].strip()
    return final.replace(",", "").replace("$", "").strip()


def gold_from_number(value: float | int | str) -> str:
    """``27.0`` / ``"27.0"`` -> ``"27"``; non-integral numbers keep their shortest repr (``"4.25"``)."""
    if isinstance(value, str):
        text = value.strip().replace(",", "")
        try:
            number = float(text)
        except ValueError:
            return value.strip()
    else:
        number = float(value)
        text = repr(value)
    if math.isfinite(number) and number == int(number) and abs(number) < 1e15:
        return str(int(number))
    return text


MAX_LIST_LITERAL_CHARS = 10_000


def list_literal(text: str) -> list[str] | None:
    """The strings of ``text`` when it is a Python list (or tuple) literal of strings, such as
    OlympiadBench's ``"['$2$']"``; else None. LaTeX intervals and sets (``[0, \\infty)``,
    ``[-1, 3]``) are not string lists and give None. ``ast.literal_eval`` evaluates literals
    only (no code), on at most ``MAX_LIST_LITERAL_CHARS`` characters."""
    text = text.strip()
    if not (text.startswith("[") and text.endswith("]")) or len(text) > MAX_LIST_LITERAL_CHARS:
        return None
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if isinstance(value, list | tuple) and value and all(isinstance(item, str) for item in value):
        return list(value)
    return None


def gold_from_list(value: Sequence[str] | str) -> str:
    """OlympiadBench ``final_answer``: a list (or its Python-literal string) of LaTeX answers like
    ``['$2$']``. Math delimiters are stripped from each element; several elements are joined with
    ``", "`` (a multiple answer, compared as a set/tuple by math-verify)."""
    items: Any = value
    if isinstance(value, str):
        items = list_literal(value) or [value.strip()]
    # "$a$,$b$" inside one element is one answer typeset as several formulas: drop every
    # unescaped "$" (a currency "\\$" stays)
    parts = [re.sub(r"(?<!\\)\$", "", _strip_math_delimiters(str(item))).strip() for item in items]
    parts = [part for part in parts if part]
    if not parts:
        raise ValueError(f"empty gold answer list: {value!r}")
    return ", ".join(parts)


def gold_from_boxed_solution(solution: str) -> str:
    """Minerva-style gold: the content of the last ``\\boxed{}`` of the reference solution."""
    boxed = extract_boxed_answer(solution)
    if boxed is None:
        raise ValueError(f"solution has no \\boxed{{}} answer: {solution[-80:]!r}")
    return boxed.replace("$", " ").strip()  # a '$' inside a box is a typesetting slip


def normalize_gold(raw: Any, fmt: GoldFormat = "auto") -> str:
    """One bare LaTeX gold answer from a published format (see module docstring).

    ``fmt``: ``"latex"`` (bare LaTeX, outer ``$`` stripped), ``"gsm8k"``, ``"list"``, ``"number"``,
    ``"boxed_solution"``, or ``"auto"`` (a list, or a string that is a Python list literal of
    strings -> list; text with ``####`` -> gsm8k, text with ``\\boxed`` -> boxed_solution, a
    number -> number, else latex: so ``[0, \\infty)`` and ``[-1, 3]`` stay as they are).
    """
    if fmt == "auto":
        if isinstance(raw, (list, tuple)) or (isinstance(raw, str) and list_literal(raw) is not None):
            fmt = "list"
        elif isinstance(raw, (int, float)):
            fmt = "number"
        elif isinstance(raw, str) and "####" in raw:
            fmt = "gsm8k"
        elif isinstance(raw, str) and any(command in raw for command in _BOXED_COMMANDS):
            fmt = "boxed_solution"
        else:
            fmt = "latex"
    if fmt == "gsm8k":
        return gold_from_gsm8k(str(raw))
    if fmt == "list":
        return gold_from_list(raw)
    if fmt == "number":
        return gold_from_number(raw)
    if fmt == "boxed_solution":
        return gold_from_boxed_solution(str(raw))
    if fmt == "latex":
        text = _strip_math_delimiters(str(raw))
        if re.fullmatch(r"[-+]?\d+\.0+", text):
            text = text.split(".")[0]
        return text
    raise ValueError(f"unknown gold format {fmt!r}")


_E_NOTATION = re.compile(r"(?<![\w.])([-+]?\d+(?:\.\d+)?)[eE]([-+]?\d{1,3})(?![\w.])")


def mark_hash_answer(completion: str) -> str:
    """GSM8K convention: a completion with no ``\\boxed`` whose last ``####`` is followed by an
    answer on the same line gets that answer boxed (``"... #### 72"`` -> ``"... \\boxed{72}"``),
    so that math-verify's boxed-first extraction picks it. Other completions are returned as is."""
    marker = completion.rfind("####")
    if marker < 0 or any(command in completion for command in _BOXED_COMMANDS):
        return completion
    line = completion[marker + 4 :].split("\n", 1)[0].strip().replace(",", "").strip("$ .")
    if not line:
        return completion
    return f"{completion[:marker]}\\boxed{{{line}}}"


def _latex_e_notation(text: str) -> str:
    """``4.5e33`` -> ``4.5\\times10^{33}`` (sympy reads ``4.5e33`` in LaTeX as ``4.5*e*33``)."""
    return _E_NOTATION.sub(r"\1\\times10^{\2}", text)


# --------------------------------------------------------------------------------------------
# The worker process (runs math-verify)
# --------------------------------------------------------------------------------------------

_HEADER = struct.Struct(">I")


def _write_message(fd: int, message: Any) -> None:
    payload = pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    data = memoryview(_HEADER.pack(len(payload)) + payload)
    while data:
        written = os.write(fd, data)
        data = data[written:]


def _read_exact_blocking(fd: int, size: int) -> bytes | None:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = os.read(fd, size - len(chunks))
        if not chunk:
            return None
        chunks += chunk
    return bytes(chunks)


def _worker_check(
    completion: str, gold: str, gold_cache: dict[str, list[Any]], extraction: str = "lenient"
) -> tuple[bool, str | None, str]:
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    parsed_gold = gold_cache.get(gold)
    if parsed_gold is None:
        wrapped = f"${_latex_e_notation(gold)}$"
        parsed_gold = parse(
            wrapped,
            extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
            parsing_timeout=None,  # type: ignore[arg-type]
        )
        if len(gold_cache) > 4096:
            gold_cache.clear()
        gold_cache[gold] = parsed_gold
    if not parsed_gold:
        return False, None, "bad_gold"
    unanchored = extraction != "anchored"
    parsed = parse(
        _latex_e_notation(mark_hash_answer(completion)),
        extraction_config=[
            LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=unanchored),
            ExprExtractionConfig(try_extract_without_anchor=unanchored),
        ],
        parsing_timeout=None,  # type: ignore[arg-type]
    )
    if not parsed:
        return False, None, "no_answer"
    extracted = str(parsed[-1]) if len(parsed) > 1 else str(parsed[0])
    correct = bool(verify(parsed_gold, parsed, timeout_seconds=None))
    if correct and not _close_for_small_numbers(parsed_gold[0], parsed[0]):
        correct = False
    return correct, extracted, "ok"


SMALL_NUMBER_BOUND = 1e-3
SMALL_NUMBER_RELATIVE_TOLERANCE = 1e-4


def _close_for_small_numbers(gold: Any, prediction: Any) -> bool:
    """math-verify compares numbers after rounding to 6 decimals, so ``2.88e-19`` equals
    ``1.3e-27``. When the gold is a real number with ``0 < |gold| < SMALL_NUMBER_BOUND``, also
    require ``|prediction - gold| <= SMALL_NUMBER_RELATIVE_TOLERANCE * |gold|``."""
    try:
        if not (getattr(gold, "is_number", False) and getattr(prediction, "is_number", False)):
            return True
        gold_value = complex(gold.evalf())
        predicted_value = complex(prediction.evalf())
    except (TypeError, ValueError, AttributeError, OverflowError):
        return True
    if gold_value.imag != 0 or not 0 < abs(gold_value.real) < SMALL_NUMBER_BOUND:
        return True
    return abs(predicted_value - gold_value) <= SMALL_NUMBER_RELATIVE_TOLERANCE * abs(gold_value)


def _worker_main() -> None:
    """Entry of the worker process: length-prefixed pickles on stdin/stdout.

    Requests ``(task_id, completion, gold, extraction)``; replies ``(task_id, correct, extracted, status)``.
    Python-level stdout is redirected to stderr so that library prints cannot corrupt the protocol.
    """
    import logging

    protocol_out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    protocol_in = sys.stdin.fileno()
    try:
        import resource

        limit = int(os.environ.get("ICT_VERIFY_MEMORY_LIMIT", WORKER_MEMORY_LIMIT_BYTES))
        if limit > 0:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    except (ImportError, ValueError, OSError):
        pass
    parent = os.getppid()

    def watchdog() -> None:  # exit if the parent dies while we are stuck in a computation
        while True:
            time.sleep(1.0)
            if os.getppid() != parent:
                os._exit(0)

    threading.Thread(target=watchdog, daemon=True).start()
    logging.getLogger("math_verify").setLevel(logging.CRITICAL)
    import math_verify  # noqa: F401  (import before announcing readiness)

    gold_cache: dict[str, list[Any]] = {}
    _write_message(protocol_out, ("ready", os.getpid()))
    while True:
        header = _read_exact_blocking(protocol_in, _HEADER.size)
        if header is None:
            return
        body = _read_exact_blocking(protocol_in, _HEADER.unpack(header)[0])
        if body is None:
            return
        task_id, completion, gold, extraction = pickle.loads(body)
        try:
            correct, extracted, status = _worker_check(completion, gold, gold_cache, extraction)
        except MemoryError:
            correct, extracted, status = False, None, "error"
        except BaseException:  # noqa: BLE001 - any failure on untrusted input is a wrong answer
            correct, extracted, status = False, None, "error"
        _write_message(protocol_out, (task_id, correct, extracted, status))


class _Worker:
    """One math-verify process; blocking start, deadline-bounded reads."""

    def __init__(self) -> None:
        package_root = str(Path(__file__).resolve().parents[1])
        env = dict(os.environ)
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("OMP_NUM_THREADS", "1")
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from ict.verify import _worker_main; _worker_main()"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            close_fds=True,
            start_new_session=True,  # a Ctrl-C in the terminal does not kill it mid-protocol
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self.write_fd = self.process.stdin.fileno()
        self.read_fd = self.process.stdout.fileno()
        self.buffer = bytearray()
        reply = self.read(time.monotonic() + WORKER_START_TIMEOUT_SECONDS)
        if not (isinstance(reply, tuple) and reply and reply[0] == "ready"):
            self.kill()
            raise RuntimeError("the math-verify worker process failed to start")

    def send(self, message: Any) -> None:
        _write_message(self.write_fd, message)

    def try_parse(self) -> tuple[bool, Any]:
        if len(self.buffer) < _HEADER.size:
            return False, None
        size = _HEADER.unpack(self.buffer[: _HEADER.size])[0]
        if len(self.buffer) < _HEADER.size + size:
            return False, None
        payload = bytes(self.buffer[_HEADER.size : _HEADER.size + size])
        del self.buffer[: _HEADER.size + size]
        return True, pickle.loads(payload)

    def fill(self) -> bool:
        """Read what is available (call after select says readable); False on EOF."""
        chunk = os.read(self.read_fd, 1 << 16)
        if not chunk:
            return False
        self.buffer += chunk
        return True

    def read(self, deadline: float) -> Any:
        while True:
            done, message = self.try_parse()
            if done:
                return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            readable, _, _ = select.select([self.read_fd], [], [], remaining)
            if readable and not self.fill():
                return None

    def kill(self) -> None:
        try:
            self.process.kill()
        except OSError:
            pass
        for stream in (self.process.stdin, self.process.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


@dataclass(frozen=True)
class MathVerdict:
    """Result of one math check. ``status``: ``ok`` (compared), ``no_answer`` (nothing parsable in
    the completion), ``timeout`` (exceeded the bound; worker restarted), ``error`` (math-verify
    raised), ``bad_gold`` (the gold did not parse: a data problem, judged incorrect)."""

    correct: bool
    extracted: str | None
    status: MathStatus
    seconds: float


class MathVerifier:
    """A pool of persistent math-verify worker processes with a hard per-check time bound.

    ``check_batch(pairs, timeout_seconds)`` dispatches one check at a time to each idle worker and
    waits with `select`; a worker that has not answered ``timeout_seconds`` after receiving its
    check is killed (SIGKILL) and replaced, and the check is judged incorrect (status
    ``"timeout"``). Thread-safe (one batch at a time); recreated automatically after a fork.
    """

    def __init__(self, num_workers: int | None = None) -> None:
        if num_workers is None:
            num_workers = max(1, min(2, os.cpu_count() or 1))
        if num_workers < 1:
            raise ValueError("num_workers must be >= 1")
        self.num_workers = num_workers
        self._workers: list[_Worker | None] = []  # None: killed, restarted when next needed
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._task_counter = 0
        self.restarts = 0

    def _ensure_workers(self, wanted: int) -> None:
        if self._pid != os.getpid():  # forked: the pipes belong to the parent
            self._workers = []
            self._pid = os.getpid()
        while len(self._workers) < wanted:
            self._workers.append(_Worker())

    def close(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                for worker in self._workers:
                    if worker is not None:
                        worker.kill()
            self._workers = []

    def check(
        self,
        completion: str | bytes,
        gold: str,
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        extraction: MathExtraction = "lenient",
    ) -> MathVerdict:
        return self.check_batch([(completion, gold)], timeout_seconds, extraction)[0]

    def check_batch(
        self,
        pairs: Iterable[tuple[str | bytes, str]],
        timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
        extraction: MathExtraction = "lenient",
    ) -> list[MathVerdict]:
        """Check ``(completion, gold)`` pairs; gold is a normalized bare-LaTeX answer;
        ``extraction``: see `MathExtraction`."""
        if not timeout_seconds > 0:
            raise ValueError(f"timeout_seconds must be > 0, got {timeout_seconds}")
        if extraction not in MATH_EXTRACTIONS:
            raise ValueError(f"extraction must be one of {MATH_EXTRACTIONS}, got {extraction!r}")
        tasks = [(_tail(sanitize_text(completion)), sanitize_text(gold), extraction)
                 for completion, gold in pairs]
        results: list[MathVerdict | None] = [None] * len(tasks)
        if not tasks:
            return []
        with self._lock:
            self._ensure_workers(min(self.num_workers, len(tasks)))
            pending = list(range(len(tasks)))
            pending.reverse()
            # worker index -> (task index, task id, start time)
            busy: dict[int, tuple[int, int, float]] = {}
            while pending or busy:
                for worker_index, worker in enumerate(self._workers):
                    if worker_index in busy or not pending:
                        continue
                    if worker is None:
                        worker = self._workers[worker_index] = _Worker()
                    task_index = pending.pop()
                    self._task_counter += 1
                    try:
                        worker.send((self._task_counter, *tasks[task_index]))
                    except OSError:
                        self._replace(worker_index)
                        pending.append(task_index)
                        continue
                    busy[worker_index] = (task_index, self._task_counter, time.monotonic())
                now = time.monotonic()
                wait = min(start + timeout_seconds for _, _, start in busy.values()) - now
                fds = {self._worker(index).read_fd: index for index in busy}
                readable: list[int] = []
                if wait > 0:
                    readable, _, _ = select.select(list(fds), [], [], wait)
                for fd in readable:
                    worker_index = fds[fd]
                    worker = self._worker(worker_index)
                    alive = worker.fill()
                    done, message = worker.try_parse()
                    task_index, task_id, start = busy[worker_index]
                    if done and message[0] == task_id:
                        _, correct, extracted, status = message
                        results[task_index] = MathVerdict(
                            bool(correct), extracted, status, time.monotonic() - start
                        )
                        del busy[worker_index]
                    elif not alive:  # the worker died (e.g. killed by the OS): an error verdict
                        results[task_index] = MathVerdict(
                            False, None, "error", time.monotonic() - start
                        )
                        del busy[worker_index]
                        self._replace(worker_index)
                now = time.monotonic()
                for worker_index, (task_index, _, start) in list(busy.items()):
                    if now - start >= timeout_seconds:
                        results[task_index] = MathVerdict(False, None, "timeout", now - start)
                        del busy[worker_index]
                        self._replace(worker_index)
        return [result for result in results if result is not None]

    def _worker(self, worker_index: int) -> _Worker:
        worker = self._workers[worker_index]
        assert worker is not None
        return worker

    def _replace(self, worker_index: int) -> None:
        """Kill a worker; a new one is started when a check next needs the slot (so a timed-out
        check returns at its bound, not after a restart)."""
        worker = self._workers[worker_index]
        if worker is not None:
            worker.kill()
        self.restarts += 1
        self._workers[worker_index] = None


_DEFAULT_VERIFIER: MathVerifier | None = None
_DEFAULT_LOCK = threading.Lock()


def default_verifier() -> MathVerifier:
    """The process-wide `MathVerifier` (started lazily, closed at exit)."""
    global _DEFAULT_VERIFIER
    with _DEFAULT_LOCK:
        if _DEFAULT_VERIFIER is None:
            _DEFAULT_VERIFIER = MathVerifier()
            atexit.register(_DEFAULT_VERIFIER.close)
        return _DEFAULT_VERIFIER


def check_math(
    completion: str | bytes,
    gold: str,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    extraction: MathExtraction = "lenient",
) -> MathVerdict:
    """Full verdict (correct, extracted answer, status, seconds) for one completion vs a
    normalized gold (see `normalize_gold`)."""
    return default_verifier().check(completion, gold, timeout_seconds, extraction)


def check_math_batch(
    pairs: Iterable[tuple[str | bytes, str]],
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    extraction: MathExtraction = "lenient",
) -> list[MathVerdict]:
    """`check_math` over many ``(completion, gold)`` pairs, spread over the worker pool."""
    return default_verifier().check_batch(pairs, timeout_seconds, extraction)


def verify_math(
    completion: str | bytes,
    gold: str,
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    extraction: MathExtraction = "lenient",
) -> bool:
    """True iff math-verify judges the completion's answer equal to ``gold``.

    ``gold`` is a bare LaTeX answer (normalize published formats with `normalize_gold`); it is
    wrapped as ``$gold$`` and parsed. The completion is parsed with a ``\\boxed{}``-first LaTeX
    extraction, falling back to math-verify's other LaTeX/expression matches (its last
    ``$...$`` formula or number) with ``extraction="lenient"`` (the default), or only to
    anchored answers ("the answer is ...", "Answer: ...") with ``"anchored"``. Checks longer than
    ``timeout_seconds`` are judged False. Safe to call from any thread.
    """
    return check_math(completion, gold, timeout_seconds, extraction).correct


def verify_math_batch(
    pairs: Iterable[tuple[str | bytes, str]],
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS,
    extraction: MathExtraction = "lenient",
) -> list[bool]:
    """`verify_math` over many ``(completion, gold)`` pairs (much faster than a loop of calls
    when the pool has several workers)."""
    return [verdict.correct for verdict in check_math_batch(pairs, timeout_seconds, extraction)]


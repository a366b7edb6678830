"""Bounded math-verify: a persistent worker process with a hard wall-clock bound per check.

Model output is untrusted input. Math checks (`verify_math`, `check_math`, their `_batch` forms)
run math-verify in a persistent worker *process* and enforce a hard wall-clock bound per check by
killing and restarting the worker. math-verify's own timeouts use `signal.alarm` (main thread
only), so they are switched off (`parsing_timeout=None`, `timeout_seconds=None`) and the bound
is ours. A check that exceeds the bound is judged incorrect with status ``"timeout"``. One round
trip to a warm worker costs well under a millisecond plus the parse itself.

Gold answers arrive normalised by `ict.answers.gold.normalize_gold`; the worker wraps each as
``$<gold>$`` before parsing (`ict.answers.readings.gold_reading`: scientific notation written out,
``\\lor`` spelt ``\\text{ or }``, a percent list's signs dropped, as in the completion); the
readings of a completion it parses are `ict.answers.readings.completion_readings`. Answer
extraction outside math-verify lives in `ict.answers.extraction`; which rule grades which problem
is `ict.answers.grading`'s job.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ict.answers.extraction import sanitize_text, tail
from ict.answers.readings import completion_readings, gold_reading
from ict.core.errors import UsageError

DEFAULT_TIMEOUT_SECONDS = 5.0
MAX_TIMEOUT_SECONDS = 86_400.0
"""The longest time bound of one check (a day); 1e10 s overflowed the deadline's timestamp."""


def check_timeout(seconds: float, name: str) -> None:
    """A one-line UsageError unless ``0 < seconds <= MAX_TIMEOUT_SECONDS`` (``name``: the option as
    its command spells it)."""
    if not 0 < seconds <= MAX_TIMEOUT_SECONDS:
        raise UsageError(f"{name} must be in (0, {MAX_TIMEOUT_SECONDS:.0f}] seconds, got {seconds}")

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
        parsed_gold = parse(
            gold_reading(gold),  # as the completion is read
            extraction_config=[LatexExtractionConfig(), ExprExtractionConfig()],
            parsing_timeout=None,  # type: ignore[arg-type]
        )
        if len(gold_cache) > 4096:
            gold_cache.clear()
        gold_cache[gold] = parsed_gold
    if not parsed_gold:
        return False, None, "bad_gold"
    unanchored = extraction != "anchored"
    verdict: tuple[bool, str | None, str] = (False, None, "no_answer")
    for reading in completion_readings(completion):
        parsed = parse(
            reading,
            extraction_config=[
                LatexExtractionConfig(boxed_match_priority=0, try_extract_without_anchor=unanchored),
                ExprExtractionConfig(try_extract_without_anchor=unanchored),
            ],
            parsing_timeout=None,  # type: ignore[arg-type]
        )
        if not parsed:
            continue
        extracted = str(parsed[-1]) if len(parsed) > 1 else str(parsed[0])
        correct = bool(verify(parsed_gold, parsed, timeout_seconds=None))
        if correct and not _close_for_small_numbers(parsed_gold[0], parsed[0]):
            correct = False
        if correct:
            return True, extracted, "ok"
        if verdict[2] == "no_answer":  # the first reading that has an answer is reported
            verdict = (False, extracted, "ok")
    return verdict


SMALL_NUMBER_BOUND = 1e-3
SMALL_NUMBER_RELATIVE_TOLERANCE = 1e-4


def _close_for_small_numbers(gold: Any, prediction: Any) -> bool:
    """math-verify compares numbers after rounding to 6 decimals, so ``2.88e-19`` equals
    ``1.3e-27``. When the gold is a real number with ``0 < |gold| < SMALL_NUMBER_BOUND``, also
    require ``|prediction - gold| <= SMALL_NUMBER_RELATIVE_TOLERANCE * |gold|``. An equation
    (``E = 5.76 \\times 10^{-19}``) is compared by its last right-hand side, as math-verify does;
    a gold and a prediction that are both equations by their right-hand sides."""
    from math_verify.grader import is_assignment_relation, is_equation, take_last_relation

    try:
        if is_equation(prediction) and is_equation(gold):
            gold, prediction = take_last_relation(gold).rhs, take_last_relation(prediction).rhs
        elif is_equation(prediction) and not is_equation(gold):
            prediction = take_last_relation(prediction).rhs
        elif is_assignment_relation(gold) and not is_equation(prediction):
            gold = take_last_relation(gold).rhs
        if not (getattr(gold, "is_number", False) and getattr(prediction, "is_number", False)):
            return True
        # sympy's floats, not Python's: 1e-999 is no 0 (a float underflows below ~5e-324, and a
        # zero gold skipped the check, so 1.6e-999 equalled 1.5e-999)
        gold_real, gold_imag = gold.evalf(30).as_real_imag()
        if gold_imag != 0 or not 0 < abs(gold_real) < SMALL_NUMBER_BOUND:
            return True
        difference = abs((prediction.evalf(30) - gold_real).evalf(30))
        return bool(difference <= SMALL_NUMBER_RELATIVE_TOLERANCE * abs(gold_real))
    except (TypeError, ValueError, AttributeError, OverflowError):
        return True


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
    """One math-verify process; deadline-bounded reads. ``wait``: block until it has imported
    math-verify (``ready``); without it the caller reads its ``ready`` message (`take_ready`)."""

    def __init__(self, wait: bool = True) -> None:
        package_root = str(Path(__file__).resolve().parents[2])  # the directory holding ict/
        env = dict(os.environ)
        env["PYTHONPATH"] = package_root + os.pathsep + env.get("PYTHONPATH", "")
        env.setdefault("OMP_NUM_THREADS", "1")
        self.process = subprocess.Popen(
            [sys.executable, "-c", "from ict.answers.verify import _worker_main; _worker_main()"],
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
        self.ready = False
        self.start_deadline = time.monotonic() + WORKER_START_TIMEOUT_SECONDS
        if wait:
            self.take_ready(self.read(self.start_deadline))

    def take_ready(self, reply: Any) -> None:
        """Mark the worker ready on its first message, ``("ready", pid)``; anything else (None:
        none came before its start deadline, or the process ended) kills it, a RuntimeError."""
        if not (isinstance(reply, tuple) and reply and reply[0] == "ready"):
            self.kill()
            raise RuntimeError("the math-verify worker process failed to start")
        self.ready = True

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
    raised, or the worker process died during the check), ``bad_gold`` (the gold did not parse: a
    data problem, judged incorrect)."""

    correct: bool
    extracted: str | None
    status: MathStatus
    seconds: float


class MathVerifier:
    """A pool of persistent math-verify worker processes with a hard per-check time bound.

    ``check_batch(pairs, timeout_seconds)`` dispatches one check at a time to each idle worker and
    waits with `select`; a worker that has not answered ``timeout_seconds`` after receiving its
    check is killed (SIGKILL) and replaced, and the check is judged incorrect (status
    ``"timeout"``). A batch that raises (Ctrl-C) kills its busy workers: none is left computing an
    abandoned check. Thread-safe (one batch at a time); recreated automatically after a fork.
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
        ``extraction``: see `MathExtraction`; ``0 < timeout_seconds <= MAX_TIMEOUT_SECONDS``."""
        if not 0 < timeout_seconds <= MAX_TIMEOUT_SECONDS:
            raise ValueError(f"timeout_seconds must be in (0, {MAX_TIMEOUT_SECONDS:.0f}], got {timeout_seconds}")
        if extraction not in MATH_EXTRACTIONS:
            raise ValueError(f"extraction must be one of {MATH_EXTRACTIONS}, got {extraction!r}")
        tasks = [(tail(sanitize_text(completion)), sanitize_text(gold), extraction)
                 for completion, gold in pairs]
        results: list[MathVerdict | None] = [None] * len(tasks)
        if not tasks:
            return []
        with self._lock:
            self._ensure_workers(min(self.num_workers, len(tasks)))
            # worker index -> (task index, task id, start time)
            busy: dict[int, tuple[int, int, float]] = {}
            try:
                self._run_batch(tasks, results, busy, timeout_seconds)
            except BaseException:  # e.g. Ctrl-C: a busy worker would answer a stale check later
                for worker_index in busy:
                    self._replace(worker_index)
                raise
        return [result for result in results if result is not None]

    def _run_batch(self, tasks: list[tuple[str, str, str]], results: list[MathVerdict | None],
                   busy: dict[int, tuple[int, int, float]], timeout_seconds: float) -> None:
        """Dispatch ``tasks`` to the workers and fill ``results`` (by task index); ``busy`` (worker
        index -> task index, task id, start time) holds the checks in flight."""
        pending = list(range(len(tasks)))
        pending.reverse()
        while pending or busy:
            for worker_index, worker in enumerate(self._workers):
                if worker_index in busy or not pending:
                    continue
                if worker is None:
                    # not waited for: the other workers' replies are read (and their bounds
                    # kept) while it starts; blocking here judged a check that had answered
                    # in time a timeout, its bound passing during the restart
                    worker = self._workers[worker_index] = _Worker(wait=False)
                if not worker.ready:
                    continue
                task_index = pending.pop()
                self._task_counter += 1
                try:
                    worker.send((self._task_counter, *tasks[task_index]))
                except OSError:
                    self._replace(worker_index)
                    pending.append(task_index)
                    continue
                busy[worker_index] = (task_index, self._task_counter, time.monotonic())
            starting = [index for index, worker in enumerate(self._workers)
                        if worker is not None and not worker.ready]
            if not busy and not starting:  # every send failed (dead workers): restart them
                continue
            now = time.monotonic()
            wait = min([start + timeout_seconds for _, _, start in busy.values()]
                       + [self._worker(index).start_deadline for index in starting]) - now
            fds = {self._worker(index).read_fd: index for index in [*busy, *starting]}
            # a bound already past still polls (timeout 0): a worker restarted in an earlier batch
            # may have sent its "ready" since, and an answer already sent is read, not timed out
            readable, _, _ = select.select(list(fds), [], [], max(wait, 0.0))
            for fd in readable:
                worker_index = fds[fd]
                worker = self._worker(worker_index)
                alive = worker.fill()
                done, message = worker.try_parse()
                if not worker.ready:  # a restarted worker's first message
                    if done or not alive:
                        self._take_ready(worker_index, message if done else None)
                    continue
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
            for worker_index in starting:
                worker = self._worker(worker_index)
                if not worker.ready and now >= worker.start_deadline:
                    self._take_ready(worker_index, None)

    def _worker(self, worker_index: int) -> _Worker:
        worker = self._workers[worker_index]
        assert worker is not None
        return worker

    def _take_ready(self, worker_index: int, reply: Any) -> None:
        """`_Worker.take_ready` for a restarted worker; one that failed to start leaves its slot
        empty (a RuntimeError here; the next check starts another), not a killed worker whose
        closed pipe the next batch would select on."""
        try:
            self._worker(worker_index).take_ready(reply)
        except RuntimeError:
            self._workers[worker_index] = None
            raise

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


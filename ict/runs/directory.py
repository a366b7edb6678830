"""A run directory (`ict train`'s, `ict eval`'s output directory): created with a one-line error,
and one writer at a time.

`exclusive_run_dir` holds an advisory `flock` on `DIR/run.lock` while a run trains or evaluates.
Two `ict train` (or `ict compare`) processes given the same run directory would interleave their
metrics lines, overwrite each other's checkpoints and, for a fresh run, delete the other's
eval.json; two `ict eval` processes would generate the same problems, append both to samples.jsonl
and rewrite it under each other. The second is refused instead, with a one-line `UsageError` that names the holder's
process id. The kernel releases the lock when its holder exits, however it exits (a SIGKILL
included), so a killed run never leaves a stale lock behind: `--resume` takes it at once. Where
`fcntl` does not exist (Windows) the directory is not locked.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path

from ict.core.errors import UsageError

LOCK_FILE = "run.lock"


@contextlib.contextmanager
def exclusive_run_dir(run_dir: Path, option: str = "--run-dir") -> Iterator[None]:
    """Hold `run_dir`'s lock for the body; raise `UsageError` at once if another process holds it
    (`option`: the flag the message tells the user to change). The lock file keeps the holder's
    pid (for that message) and stays after the run."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks here
        yield
        return
    with open(Path(run_dir) / LOCK_FILE, "a+") as handle:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip()
            raise UsageError(
                f"{run_dir} is in use by another ict process{f' (pid {holder})' if holder else ''}: "
                f"wait for it to finish or stop it, or choose another {option}") from None
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def create_run_dir(run_dir: Path, what: str = "run directory", option: str = "--run-dir") -> Path:
    """`mkdir -p run_dir`; a `UsageError` naming the cause when it cannot be created."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the {what} {run_dir} ({error.strerror}); choose "
                         f"another {option}") from None
    return run_dir

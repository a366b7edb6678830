"""A run directory (`ict train`'s, `ict eval`'s output directory): created with a one-line error,
and one writer at a time.

`exclusive_run_dir` holds an advisory `flock` on `DIR/run.lock` while a run trains or evaluates.
Two `ict train` (or `ict compare`) processes given the same run directory would interleave their
metrics lines, overwrite each other's checkpoints and, for a fresh run, delete the other's
eval.json; two `ict eval` processes would generate the same problems, append both to samples.jsonl
and rewrite it under each other. The second is refused instead, with a one-line `UsageError` that names the holder's
process id. The kernel releases the lock when its holder exits, however it exits (a SIGKILL
included), so a killed run never leaves a stale lock behind: `--resume` takes it at once. Where
`fcntl` does not exist (Windows) the directory is not locked, nor where its file system refuses
`flock` (Lustre mounted without ``-o flock``: ENOSYS; NFS without a lock daemon: ENOLCK), which a
one-line note on stderr says instead of failing the run.

`discarded_if_unused` removes a directory (and its parents) this process created when its run
fails before writing anything of its own (a missing model, bad data): a failed start leaves no
empty run directory (``run.lock`` alone, or an evaluation's ``run.json``) behind.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from ict.core.errors import UsageError

LOCK_FILE = "run.lock"


class RunDirInUse(UsageError):
    """Another process holds the run directory's lock (`exclusive_run_dir`)."""


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
            raise RunDirInUse(
                f"{run_dir} is in use by another ict process{f' (pid {holder})' if holder else ''}: "
                f"wait for it to finish or stop it, or choose another {option}") from None
        except OSError as error:  # a file system without flock: run unlocked, as on Windows
            refused: str | None = error.strerror or type(error).__name__
        else:
            refused = None
        if refused is not None:
            print(f"note: {run_dir} is not locked (its file system refuses flock: {refused}); make "
                  "sure no other ict process writes it at the same time", file=sys.stderr)
            yield
            return
        try:
            handle.seek(0)
            handle.truncate()
            handle.write(f"{os.getpid()}\n")
            handle.flush()
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


@contextlib.contextmanager
def discarded_if_unused(run_dir: Path, scratch: tuple[str, ...] = (LOCK_FILE,)) -> Iterator[None]:
    """Run the body (which creates ``run_dir``); if it raises while ``run_dir`` holds nothing but
    files named in ``scratch``, remove them, ``run_dir`` and the parents the body created, where
    none of them existed before it; not when the body was refused the directory (`RunDirInUse`:
    another process created it meanwhile and holds it). Wrap it around `exclusive_run_dir`, so the
    lock is released first."""
    run_dir = Path(run_dir).absolute()
    created = [path for path in (run_dir, *run_dir.parents) if not path.exists()]
    try:
        yield
    except RunDirInUse:
        raise
    except BaseException:
        with contextlib.suppress(OSError):
            entries = list(run_dir.iterdir()) if created else []
            if created and all(entry.name in scratch and entry.is_file() for entry in entries):
                for entry in entries:
                    entry.unlink()
                for directory in created:  # run_dir first, then its new parents, deepest first
                    directory.rmdir()
        raise


def create_run_dir(run_dir: Path, what: str = "run directory", option: str = "--run-dir") -> Path:
    """`mkdir -p run_dir`; a `UsageError` naming the cause when it cannot be created."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(f"cannot create the {what} {run_dir} ({error.strerror}); choose "
                         f"another {option}") from None
    return run_dir

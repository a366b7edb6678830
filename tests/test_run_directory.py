"""One process writes a run directory at a time (`ict.runs.directory.exclusive_run_dir`): a second
`ict train` on a directory in use is refused in one line before it touches a file, a killed holder
leaves no stale lock; and SIGTERM anywhere in a command ends it as Ctrl-C does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from train_helpers import tiny_config

from ict.cli import main
from ict.core.errors import UsageError
from ict.runs.directory import LOCK_FILE, create_run_dir, discarded_if_unused, exclusive_run_dir
from ict.training.trainer import train

ROOT = Path(__file__).resolve().parents[1]


def test_a_second_holder_is_refused_with_the_first_ones_pid_and_the_lock_is_released(tmp_path):
    (tmp_path / LOCK_FILE).write_text("123456789\n")  # left by an earlier, longer pid: replaced
    with exclusive_run_dir(tmp_path):
        assert (tmp_path / LOCK_FILE).read_text() == f"{os.getpid()}\n"
        with pytest.raises(UsageError, match=rf"in use by another ict process \(pid {os.getpid()}\)"):
            with exclusive_run_dir(tmp_path):
                pass
    with exclusive_run_dir(tmp_path):  # released on exit: taken again at once
        pass


@pytest.mark.parametrize("number", ["ENOSYS", "ENOLCK"])
def test_a_file_system_without_flock_runs_unlocked_with_a_note(tmp_path, monkeypatch, capsys, number):
    """Lustre mounted without ``-o flock`` answers flock with ENOSYS, NFS without a lock daemon
    with ENOLCK: every `ict train` and `ict eval` there ended at once on "error: OSError: [Errno
    38] Function not implemented", exit 1. They now run unlocked (as on Windows) after a one-line
    note; a second holder is not refused there (nothing can tell), and a held lock still is."""
    import errno
    import fcntl

    def refused(fd: int, operation: int) -> None:
        code = getattr(errno, number)
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", refused)
    with exclusive_run_dir(tmp_path), exclusive_run_dir(tmp_path):
        pass
    note = f"note: {tmp_path} is not locked (its file system refuses flock: {os.strerror(getattr(errno, number))})"
    assert capsys.readouterr().err.count(note) == 2
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--model", "./no_model", "--run-dir", "run"]) == 2  # past the lock
    assert "error: model directory not found: ./no_model" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_a_failed_start_leaves_no_new_directory_behind(tmp_path, monkeypatch, capsys):
    """`ict train` and `ict eval` of a model that is not there made their directory (and its new
    parents: runs/, runs/eval/) and left it holding run.lock (and eval's run.json) after the error;
    each retry under the default name added another. A directory that was there stays."""
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--model", "./no_model", "--run-dir", "new/parent/run"]) == 2
    assert main(["train", "--model", "./no_model"]) == 2  # runs/<method>-<timestamp>
    assert main(["eval", "--model", "./no_model", "--benchmarks", "rg:chain_sum:size=2", "--limit", "1"]) == 2
    assert "model directory not found: ./no_model" in capsys.readouterr().err
    assert sorted(path.name for path in tmp_path.iterdir()) == []
    (tmp_path / "kept").mkdir()
    assert main(["train", "--model", "./no_model", "--run-dir", "kept"]) == 2
    assert (tmp_path / "kept").is_dir()


def test_a_run_directory_under_the_home_directory_is_written_and_resumed_there(
        tmp_path, monkeypatch, tiny_model_dir, arithmetic_task):
    """``--run-dir ~/r`` (from a config file, or ``--run-dir=~/r``, which no shell expands) trained
    into ./~/r, and its --resume did not find the run; ``ict compare --output-dir ~/c`` the same."""
    from ict.experiments.compare import CompareConfig

    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    args = ["train", "--model", str(tiny_model_dir), "--dataset", str(arithmetic_task), "--reward",
            "last_number", "--prompts-per-step", "2", "--num-generations", "2", "--max-new-tokens", "4",
            "--no-progress", "--no-tensorboard", "--run-dir=~/r"]
    assert main([*args, "--num-steps", "1"]) == 0
    assert main([*args, "--num-steps", "2", "--resume"]) == 0
    assert [json.loads(line)["step"] for line in
            (tmp_path / "home" / "r" / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert not (tmp_path / "~").exists()
    assert CompareConfig(output_dir="~/c").validate().output_dir == tmp_path / "home" / "c"


def test_only_the_unused_new_directory_of_a_run_that_failed_is_removed(tmp_path):
    run_dir = tmp_path / "a" / "run"
    with pytest.raises(KeyError):  # nothing but its scratch files: removed with its new parent
        with discarded_if_unused(run_dir, (LOCK_FILE, "run.json")):
            with exclusive_run_dir(create_run_dir(run_dir)):
                (run_dir / "run.json").write_text("{}")
                raise KeyError
    assert not (tmp_path / "a").exists()
    with pytest.raises(KeyError):  # a file of its own: kept
        with discarded_if_unused(run_dir):
            with exclusive_run_dir(create_run_dir(run_dir)):
                (run_dir / "config.yaml").write_text("seed: 0\n")
                raise KeyError
    assert (run_dir / "config.yaml").is_file()
    other = tmp_path / "b"
    with discarded_if_unused(other):  # no error: kept
        create_run_dir(other)
    assert other.is_dir()
    taken = tmp_path / "c"
    with pytest.raises(UsageError, match="in use"), discarded_if_unused(taken):  # before it was made
        with exclusive_run_dir(create_run_dir(taken)):  # another run made it meanwhile and holds it
            with exclusive_run_dir(taken):  # refused: not this run's to remove
                pass
    assert (taken / LOCK_FILE).is_file()


def test_a_run_directory_in_use_is_refused_before_anything_in_it_changes(tmp_path, tiny_model_dir,
                                                                         arithmetic_task, capsys):
    """A fresh run on a directory another process is training in would have deleted its eval.json
    and environment records; it stops in one line (exit 2) instead, and every file stays."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "eval.json").write_text(json.dumps({"before": {"accuracy": 0.5}}))
    (run_dir / "environment.jsonl").write_text("{}\n")
    with exclusive_run_dir(run_dir):
        before = {path.name: path.read_bytes() for path in run_dir.iterdir()}
        with pytest.raises(UsageError, match="in use by another ict process"):
            train(tiny_config(tiny_model_dir, arithmetic_task, run_dir))
        code = main(["train", "--model", str(tiny_model_dir), "--dataset", str(arithmetic_task),
                     "--run-dir", str(run_dir), "--num-steps", "1"])
        error = capsys.readouterr().err.strip()
        current = {path.name: path.read_bytes() for path in run_dir.iterdir()}
    assert code == 2
    assert error.startswith("error: ") and "in use by another ict process" in error
    assert len(error.splitlines()) == 1
    assert current == before


def test_a_killed_holder_leaves_no_stale_lock(tmp_path, tiny_model_dir, arithmetic_task):
    """The kernel drops the lock of a SIGKILLed run, so the next run (a resume) takes it at once."""
    holder = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from pathlib import Path
            from ict.runs.directory import exclusive_run_dir
            with exclusive_run_dir(Path({str(tmp_path)!r})):
                print("held", flush=True)
                time.sleep(120)
        """)], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(UsageError, match=rf"\(pid {holder.pid}\)"):
            with exclusive_run_dir(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    result = train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path, num_steps=1))
    assert result.checkpoint is not None


def test_sigterm_outside_the_step_loop_ends_the_command_as_ctrl_c(tmp_path):
    """SIGTERM while a command runs anywhere (here: a command that signals itself) prints the one
    line "interrupted" and exits 130 after the command's `finally` blocks ran; without a handler
    the process died silently with -15."""
    marker = tmp_path / "finally-ran"
    script = textwrap.dedent(f"""
        import os, signal, sys, time
        from pathlib import Path
        import ict.cli.plot as plot

        def run(args):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(30)
                return 0
            finally:
                Path({str(marker)!r}).write_text("yes")

        plot.run = run
        from ict.cli import main
        sys.exit(main(["plot", "whatever"]))
    """)
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                               timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert completed.returncode == 130, completed.stderr
    assert completed.stderr.strip() == "interrupted"
    assert marker.read_text() == "yes"
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # this process's handler untouched

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
from ict.runs.directory import LOCK_FILE, exclusive_run_dir
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

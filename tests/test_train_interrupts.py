"""Interrupting a training run and going on: a fresh run refuses a used directory; Ctrl-C and
SIGTERM checkpoint the finished step; --resume reproduces and refuses what it cannot continue; a
plugin failing mid-run, a full disk and a kill mid-save leave the run resumable (tiny random
model, synthetic task)."""

from __future__ import annotations

import errno
import json

import pytest
from train_helpers import read_metrics, tiny_config

from ict.runs.checkpoint import latest_checkpoint
from ict.training.trainer import train


def test_a_fresh_run_refuses_a_directory_with_checkpoints(tiny_model_dir, arithmetic_task,
                                                          tmp_path):
    from ict.core.errors import UsageError

    train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=1))
    with pytest.raises(UsageError, match="--resume"):
        train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=2))


def test_ctrl_c_checkpoints_the_finished_step_and_resume_completes(tiny_model_dir, arithmetic_task,
                                                                  tmp_path, capsys):
    import signal

    run_dir = tmp_path / "run"
    config = tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=3)
    before = signal.getsignal(signal.SIGINT)  # SIG_IGN where the test runs in the background
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C during step 1: it finishes, then stops
        train(config, on_step=lambda metrics: signal.raise_signal(signal.SIGINT)
              if metrics["step"] == 1 else None)
    assert f"to continue, rerun with --resume --run-dir {run_dir}" in capsys.readouterr().err
    assert latest_checkpoint(run_dir).name == "step-00000001"
    assert [line["step"] for line in read_metrics(run_dir)] == [1]
    assert signal.getsignal(signal.SIGINT) is before  # the caller's handler is restored
    train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=3, resume=True))
    assert [line["step"] for line in read_metrics(run_dir)] == [1, 2, 3]


def test_the_resume_hint_of_a_relative_run_dir_works_from_another_directory(tiny_model_dir, arithmetic_task,
                                                                           tmp_path, monkeypatch, capsys):
    """A run given a relative --run-dir printed "rerun with --resume --run-dir runs/my run" as
    typed: run from another working directory that found no run there, so --resume started a
    fresh run with every default ("no complete checkpoint ...; starting fresh"), and the space
    split the path. The hint names the absolute directory, quoted for a shell, now: run as printed
    from elsewhere, it continues the run."""
    import re
    import shlex
    import signal

    from ict.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "elsewhere").mkdir()
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(tiny_model_dir, arithmetic_task, "runs/my run", num_steps=2),
              on_step=lambda metrics: signal.raise_signal(signal.SIGINT))
    hint = re.search(r"to continue, rerun with (--resume --run-dir .*)$", capsys.readouterr().err, re.M)
    assert hint is not None and shlex.split(hint[1]) == ["--resume", "--run-dir", str(tmp_path / "runs" / "my run")]
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert main(["train", *shlex.split(hint[1])]) == 0
    assert [line["step"] for line in read_metrics(tmp_path / "runs" / "my run")] == [1, 2]
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_the_metrics_lines_a_checkpoint_covers_are_fsynced_before_it(tiny_model_dir, arithmetic_task,
                                                                     tmp_path, monkeypatch):
    """Checkpoints are fsynced, metrics.jsonl was only flushed: after a power loss the checkpoint
    of step N could survive without the lines of steps up to N, and the resume (which keeps the
    lines up to its checkpoint and appends after them) left a gap. Before each checkpoint's
    COMPLETE marker is fsynced, metrics.jsonl (and the run directory, which holds its entry) is now,
    holding at least the lines up to its step. Files are told apart by inode (all of them exist at the end); sizes are those at the fsync."""
    import os

    synced: list[tuple[int, int]] = []  # (inode, size) of each fsync, in order
    real_fsync = os.fsync

    def recording(fd: int) -> None:
        info = os.fstat(fd)
        synced.append((info.st_ino, info.st_size))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording)
    run_dir = tmp_path / "run"
    train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=3, save_every=2))
    metrics = run_dir / "metrics.jsonl"
    line_ends = [0]
    for line in metrics.read_bytes().splitlines(keepends=True):
        line_ends.append(line_ends[-1] + len(line))
    for step in (2, 3):  # save_every 2, and the last step
        marker = (run_dir / "checkpoints" / f"step-{step:08d}" / "COMPLETE").stat().st_ino
        before = synced[:[inode for inode, _ in synced].index(marker)]
        assert any(inode == metrics.stat().st_ino and size >= line_ends[step] for inode, size in before), step
        assert run_dir.stat().st_ino in [inode for inode, _ in before], step  # its directory entry too
    assert (metrics.stat().st_ino, line_ends[1]) not in synced  # no checkpoint after step 1: no fsync


def test_a_ctrl_c_in_the_last_step_finishes_the_run(tiny_model_dir, arithmetic_task, tmp_path):
    """The last step has nothing after it to stop: the run ends as an uninterrupted one (its
    checkpoint, the evaluation after training), not with KeyboardInterrupt and a --resume hint. It
    says so, and how to finish the evaluation if a scheduler kills it (SIGKILL after SIGTERM)."""
    import shlex
    import signal

    from rich.console import Console

    run_dir = tmp_path / "run"
    console = Console(record=True, width=400)
    result = train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=1, eval_size=2),
                   console=console, on_step=lambda metrics: signal.raise_signal(signal.SIGINT))
    assert result.checkpoint == run_dir / "checkpoints" / "step-00000001"
    assert result.eval_after["num_problems"] == 2
    hint = (f"stop requested in the last step: {result.checkpoint} holds it; the evaluation after training "
            f"follows (if it is killed, rerun with --resume --run-dir {shlex.quote(str(run_dir))} to finish it)")
    assert hint in console.export_text().splitlines()
    quiet = Console(record=True, width=400)  # no stop, no line
    train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "other", num_steps=1, eval_size=2), console=quiet)
    assert "stop requested" not in quiet.export_text()


def test_a_second_ctrl_c_aborts_at_once(tiny_model_dir, arithmetic_task, tmp_path):
    """The second Ctrl-C does not wait for the step's checkpoint (docs/training.md: it aborts at
    once, losing the steps since the last checkpoint), and the caller's handler is restored."""
    import signal

    run_dir = tmp_path / "run"
    before = signal.getsignal(signal.SIGINT)

    def twice(metrics):
        if metrics["step"] == 1:
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGINT)

    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=3), on_step=twice)
    assert latest_checkpoint(run_dir) is None
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.parametrize("save_every", [0, 1])
def test_a_signal_right_after_the_checkpoint_decision_still_checkpoints_before_stopping(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch, save_every):
    """The step end read the stop request twice: once to decide on a checkpoint, once to stop. A
    Ctrl-C landing between the two reads (a signal handler runs between any two bytecodes) stopped
    the run with no checkpoint of its finished steps ("stopped after step 1: None"; the resume
    started over). A request that comes after the decision now saves the step before stopping;
    one that comes during a due checkpoint (save_every 1) stops right after it, as before."""
    import signal

    import ict.training.trainer as trainer

    class LateSignal(trainer.StopRequest):
        """SIGINT handled just after the first read of `requested` once `armed`."""

        armed = False

        @property
        def requested(self) -> bool:
            value = self._requested
            if LateSignal.armed:
                LateSignal.armed = False
                self._handle(signal.SIGINT, None)  # what the real handler does on Ctrl-C
            return value

        @requested.setter
        def requested(self, value: bool) -> None:
            self._requested = value

    monkeypatch.setattr(trainer, "StopRequest", LateSignal)
    run_dir = tmp_path / "run"

    def arm(metrics):
        LateSignal.armed = metrics["step"] == 1

    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=3, save_every=save_every),
              on_step=arm)
    assert [line["step"] for line in read_metrics(run_dir)] == [1]
    assert latest_checkpoint(run_dir).name == "step-00000001"  # the finished step is saved


def test_a_run_resumed_at_its_last_step_names_its_final_checkpoint(tiny_model_dir, arithmetic_task, tmp_path):
    """A run killed after its last checkpoint (in the evaluation after training, the summary or
    the plot) and resumed trains no step and saves no checkpoint: its result and summary named
    none (`TrainResult.checkpoint` None), where the uninterrupted run names the final one."""
    import io

    from rich.console import Console

    run_dir = tmp_path / "run"
    first = train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=1))
    output = io.StringIO()
    resumed = train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=1, resume=True),
                    console=Console(file=output, width=200))
    assert resumed.checkpoint == first.checkpoint == run_dir / "checkpoints" / "step-00000001"
    assert f"checkpoint: {first.checkpoint}" in output.getvalue()
    assert [line["step"] for line in read_metrics(run_dir)] == [1]


def test_a_resumed_run_refuses_num_steps_below_the_steps_it_trained(tiny_model_dir, arithmetic_task, tmp_path):
    """`--resume --num-steps 1` on a run checkpointed at step 2 trained nothing, reported the
    step-2 model as the run's result and rewrote config.yaml with num_steps 1 (`ict compare` then
    evaluated the step-2 checkpoint as a 1-step run). It is one line now, before anything is
    written; resuming with num_steps equal to the trained steps still finishes the run."""
    from ict.core.errors import UsageError

    run_dir = tmp_path / "run"
    train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=2))
    config_text = (run_dir / "config.yaml").read_text()
    with pytest.raises(UsageError, match=r"has trained 2 steps .*num_steps 1: give --num-steps 2 or more"):
        train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=1, resume=True))
    assert (run_dir / "config.yaml").read_text() == config_text
    assert [line["step"] for line in read_metrics(run_dir)] == [1, 2]
    resumed = train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=2, resume=True))
    assert resumed.checkpoint == run_dir / "checkpoints" / "step-00000002"


def test_a_resumed_run_reports_the_evaluation_before_it_and_refuses_a_damaged_eval_json(
        tiny_model_dir, arithmetic_task, tmp_path):
    """The held-out accuracy line (before -> after) was missing from a resumed run's summary; an
    eval.json torn by a kill (it was rewritten in place) made every resume train to the end and
    then stop on a bare JSON error. eval.json is now written atomically, and a damaged one is
    one line naming it, before any step."""
    import io
    import signal

    from rich.console import Console

    from ict.core.errors import UsageError

    run_dir = tmp_path / "run"
    config = tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=2, eval_size=4)
    with pytest.raises(KeyboardInterrupt):
        train(config, on_step=lambda metrics: signal.raise_signal(signal.SIGINT) if metrics["step"] == 1 else None)
    before = json.loads((run_dir / "eval.json").read_text())["before"]
    assert not list(run_dir.glob(".eval.json.tmp"))
    (run_dir / "eval.json").write_text('{"before": {"accur')
    with pytest.raises(UsageError, match=r"eval.json is damaged \(.*\); move it aside"):
        train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=2, eval_size=4, resume=True))
    assert [line["step"] for line in read_metrics(run_dir)] == [1]  # refused before any step
    (run_dir / "eval.json").write_text(json.dumps({"before": before}))
    output = io.StringIO()
    result = train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=2, eval_size=4, resume=True),
                   console=Console(file=output, width=200))
    assert result.eval_before == before and result.eval_after
    assert f"held-out accuracy: before {before['accuracy']:.3f} -> after" in output.getvalue()



def test_a_plugin_selector_failing_mid_run_is_one_line_naming_it_and_the_run_resumable(
        tiny_model_dir, arithmetic_task, tmp_path, capsys):
    """A plugin selector that passes the start-up check and raises at step 3: the error was the
    plugin's words alone ("error: RuntimeError: index 7 out of range (run with --debug ...)", exit
    1), naming neither the selector nor how to go on. Now one line naming the step, the selector,
    its file and the error, and the resume; exit 2; the checkpoints and metrics of steps 1-2 stay."""
    from ict.cli import main
    from ict.core.selectors import SELECTORS

    plugin = tmp_path / "flaky.py"
    plugin.write_text(
        "from ict.core.selectors import register_selector\n"
        "calls = []\n"
        "@register_selector('flaky_plugin', population='sequence')\n"
        "def flaky(inputs):\n"
        "    if tuple(inputs.response_mask.shape) != (2, 3):  # not the start-up check's dummy batch\n"
        "        calls.append(1)\n"
        "    if len(calls) > 2:\n"
        "        raise RuntimeError('index 7 out of range')\n"
        "    return inputs.response_mask.bool()\n")
    run = tmp_path / "run"
    args = ["train", "--model", str(tiny_model_dir), "--dataset", str(arithmetic_task), "--reward", "last_number",
            "--num-steps", "4", "--prompts-per-step", "2", "--num-generations", "2", "--max-new-tokens", "4",
            "--no-progress", "--no-tensorboard", "--run-dir", str(run), "--save-every", "1",
            "method=flaky_plugin", f"plugin={plugin}"]
    try:
        assert main(args) == 2
    finally:
        SELECTORS.pop("flaky_plugin", None)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert errors == [f"error: step 3: selector 'flaky_plugin' (plugin {plugin}) failed: RuntimeError: index 7 "
                      f"out of range; nothing of the step was saved: fix the plugin and rerun with --resume "
                      f"--run-dir {run}"]
    assert latest_checkpoint(run).name == "step-00000002"
    assert [line["step"] for line in read_metrics(run)] == [1, 2]


def _cli_train(model, task, run, steps: int) -> list[str]:
    return ["train", "--model", str(model), "--dataset", str(task), "--reward", "last_number",
            "--num-steps", str(steps), "--prompts-per-step", "2", "--num-generations", "2", "--max-new-tokens",
            "4", "--no-progress", "--no-tensorboard", "--run-dir", str(run), "--save-every", "1"]


def test_a_full_disk_mid_run_names_the_file_and_the_resume_and_the_run_resumes(tiny_model_dir, arithmetic_task,
                                                                                tmp_path, capsys):
    """A checkpoint write the file system refuses (here a file-size limit: EFBIG, as ENOSPC) was
    'error: SafetensorError: Error while serializing: I/O error: File too large (os error 27) (run
    with --debug ...)', exit 1: neither the file nor how to go on. Now one line naming the
    checkpoint and the resume, exit 2; the rerun with --resume trains every step."""
    resource = pytest.importorskip("resource")
    from ict.cli import main

    run = tmp_path / "run"
    previous = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, previous[1]))  # metrics lines fit, weights do not
    try:
        assert main(_cli_train(tiny_model_dir, arithmetic_task, run, 2)) == 2
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, previous)
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert errors == [f"error: cannot write {run / 'checkpoints' / 'step-00000001'} (File too large (os error "
                      f"27)); free some space, then rerun with --resume --run-dir {run} (from its last complete "
                      "checkpoint, if any)"]
    assert latest_checkpoint(run) is None
    assert main([*_cli_train(tiny_model_dir, arithmetic_task, run, 2), "--resume"]) == 0
    assert [line["step"] for line in read_metrics(run)] == [1, 2]
    assert latest_checkpoint(run).name == "step-00000002"


def test_a_metrics_line_the_disk_refuses_names_metrics_jsonl(tiny_model_dir, arithmetic_task, tmp_path, capsys,
                                                             monkeypatch):
    """ENOSPC while appending step 2's metrics line: one line naming RUN/metrics.jsonl and the
    resume (it was 'error: OSError: [Errno 28] No space left on device ...', exit 1); the
    checkpoint of step 1 stays the run's last. A quota refusing eval.json names eval.json; an
    error that is no refusal of a write stays as it was (exit 1)."""
    from ict.cli import main
    from ict.runs.reporting import MetricsLogger

    log = MetricsLogger.log

    def full_at_step_2(self, metrics):
        if metrics["step"] == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        log(self, metrics)

    monkeypatch.setattr(MetricsLogger, "log", full_at_step_2)
    run = tmp_path / "run"
    assert main(_cli_train(tiny_model_dir, arithmetic_task, run, 3)) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert errors == [f"error: cannot write {run / 'metrics.jsonl'} (No space left on device); free some space, "
                      f"then rerun with --resume --run-dir {run} (from its last complete checkpoint, if any)"]
    assert latest_checkpoint(run).name == "step-00000001"
    import ict.training.trainer

    def refused(run_dir, name, result):
        raise OSError(errno.EDQUOT, "Disk quota exceeded")

    monkeypatch.setattr(ict.training.trainer, "write_eval", refused)  # the held-out evaluation's eval.json
    assert main([*_cli_train(tiny_model_dir, arithmetic_task, tmp_path / "eval", 1), "eval_size=2"]) == 2
    assert (f"error: cannot write {tmp_path / 'eval' / 'eval.json'} (Disk quota exceeded); free some space, then "
            "rerun with --resume") in capsys.readouterr().err
    monkeypatch.setattr(MetricsLogger, "log", lambda self, metrics: [][1])  # a bug, not the disk: as it is
    assert main(_cli_train(tiny_model_dir, arithmetic_task, tmp_path / "other", 1)) == 1
    assert "error: IndexError: list index out of range" in capsys.readouterr().err



def test_a_run_resumed_at_its_last_step_deletes_what_a_kill_mid_save_or_mid_delete_left(
        tiny_model_dir, arithmetic_task, tmp_path):
    """A kill while keep_checkpoints deleted an old checkpoint after the last step left it renamed
    `.del-step-...` (a whole checkpoint, hidden), a kill mid-save a `.tmp-step-...`; only the next
    save deleted them, and a run resumed at its last step saves none: they stayed for good. The
    resume deletes them; the complete checkpoint stays."""
    run_dir = tmp_path / "run"
    train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=1))
    root = run_dir / "checkpoints"
    for name in (".del-step-00000000-4242", ".tmp-step-00000001-abcd"):
        (root / name).mkdir()
        (root / name / "model.safetensors").write_bytes(b"weights")
    resumed = train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=1, resume=True))
    assert sorted(path.name for path in root.iterdir()) == ["step-00000001"]
    assert resumed.metrics == []  # resumed from it: no step trained again


def test_a_write_refused_for_other_reasons_than_space_says_what_to_do(tiny_model_dir, arithmetic_task, tmp_path,
                                                                      capsys, monkeypatch):
    """Every refused write said "free some space": a file named `checkpoints` in the run directory
    (File exists, after a whole step) and a read-only file system too. The hint follows the
    errno: space for ENOSPC, EDQUOT and EFBIG (safetensors' "os error 27"), "make it writable" for
    EACCES, EPERM and EROFS, "clear the way for it" for the rest."""
    from ict.cli import main
    from ict.core.errors import write_remedy

    assert [write_remedy(OSError(number, "x")) for number in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)] == [
        "free some space"] * 3
    assert [write_remedy(OSError(number, "x")) for number in (errno.EACCES, errno.EPERM, errno.EROFS)] == [
        "make it writable"] * 3
    assert write_remedy(OSError(errno.EEXIST, "x")) == write_remedy(OSError(errno.ENOTDIR, "x")) == "clear the way for it"
    assert write_remedy(RuntimeError("I/O error: File too large (os error 27)")) == "free some space"
    assert write_remedy(RuntimeError("I/O error: Read-only file system (os error 30)")) == "make it writable"
    run = tmp_path / "run"
    run.mkdir()
    (run / "checkpoints").write_text("not a directory")
    assert main(_cli_train(tiny_model_dir, arithmetic_task, run, 1)) == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "; clear the way for it, then rerun with --resume" in errors[0], errors

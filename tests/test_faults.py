"""SIGKILL a real training process at random moments (one of them while a checkpoint is being
written), resume it each time, and check that nothing is lost beyond the last checkpoint and
that the finished run's metrics equal an uninterrupted run's."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ict.checkpoint import WRITE_DELAY_ENV, complete_checkpoints

ROOT = Path(__file__).resolve().parents[1]
TIMING = {"tokens_per_second", "generation_tokens_per_second", "generation_seconds", "training_seconds",
          "step_seconds"}
STEPS = 4


def command(model: Path, task: Path, run_dir: Path, resume: bool = False) -> list[str]:
    args = [sys.executable, "-m", "ict", "train", "--model", str(model), "--dataset", str(task),
            "--reward", "last_number", "--num-steps", str(STEPS), "--prompts-per-step", "2",
            "--num-generations", "4", "--max-new-tokens", "6", "--save-every", "1", "--keep-checkpoints",
            "2", "--no-progress", "--no-tensorboard", "--seed", "3", "--run-dir", str(run_dir)]
    return args + (["--resume"] if resume else [])


def environment(delay: float = 0.0) -> dict[str, str]:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "HOME": os.environ.get("HOME", "/tmp")}
    if delay:
        env[WRITE_DELAY_ENV] = str(delay)
    return env


def metrics_of(run_dir: Path) -> list[dict]:
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [{key: value for key, value in line.items() if key not in TIMING} for line in lines]


def kill_when(process: subprocess.Popen, condition, timeout: float = 240.0) -> bool:
    """SIGKILL `process` as soon as `condition()` holds; False if it ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        if condition():
            process.send_signal(signal.SIGKILL)
            process.wait()
            return True
        time.sleep(0.005)
    process.kill()
    raise AssertionError("the training process neither reached the kill point nor ended")


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_equals_an_uninterrupted_run(tiny_model_dir, arithmetic_task,
                                                                           tmp_path):
    reference = tmp_path / "reference"
    done = subprocess.run(command(tiny_model_dir, arithmetic_task, reference), env=environment(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = metrics_of(reference)
    assert [line["step"] for line in expected] == list(range(1, STEPS + 1))

    rng = random.Random(7)
    run = tmp_path / "killed"
    kills, during_checkpoint = 0, 0
    plans = ["checkpoint", *(rng.choice(["metrics", "time"]) for _ in range(5))]
    for plan in plans:
        delay = 2.0 if plan == "checkpoint" else 0.0
        resume = (run / "checkpoints").is_dir()
        process = subprocess.Popen(command(tiny_model_dir, arithmetic_task, run, resume=resume),
                                   env=environment(delay), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        start = time.monotonic()
        if plan == "checkpoint":
            def condition():
                root = run / "checkpoints"
                return root.is_dir() and any(path.name.startswith(".tmp-") for path in root.iterdir())
        elif plan == "metrics":
            lines_seen = len(metrics_of(run)) if (run / "metrics.jsonl").exists() else 0
            target = lines_seen + 1

            def condition(target: int = target) -> bool:
                path = run / "metrics.jsonl"
                return path.exists() and len(path.read_text().splitlines()) >= target
        else:
            wait = rng.uniform(3.0, 12.0)

            def condition(start: float = start, wait: float = wait) -> bool:
                return time.monotonic() - start > wait
        killed = kill_when(process, condition)
        if not killed:
            break  # the run finished before this kill point
        kills += 1
        during_checkpoint += plan == "checkpoint"
        checkpoints = complete_checkpoints(run)
        if checkpoints and (run / "metrics.jsonl").exists():
            # at most the steps since the last complete checkpoint are lost
            saved_step = int(checkpoints[-1].name.split("-")[-1])
            assert len(metrics_of(run)) <= saved_step + 1
    assert kills >= 5 and during_checkpoint == 1

    finish = subprocess.run(command(tiny_model_dir, arithmetic_task, run, resume=(run / "checkpoints").is_dir()),
                            env=environment(), capture_output=True, text=True, timeout=300)
    assert finish.returncode == 0, finish.stderr[-2000:]
    assert metrics_of(run) == expected

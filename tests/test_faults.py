"""Fault injection: SIGKILL a real `python -m ict.cli train` subprocess at seeded random points
(one while a checkpoint is being written), `--resume` each time, and check that the finished
run's metrics.jsonl equals an uninterrupted run's (timing fields excluded) and that a kill loses
at most the steps since the newest complete checkpoint. Also what a restart leaves of a killed
attempt's TensorBoard points."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import build_tiny_model, build_tiny_tokenizer, write_arithmetic_task

from ict.runs.checkpoint import complete_checkpoints, verify_checkpoint

REPO = Path(__file__).resolve().parents[1]
NUM_STEPS = 4
TIMING_FIELDS = {"tokens_per_second", "generation_tokens_per_second", "generation_seconds",
                 "training_seconds", "step_seconds"}


def _train_command(model_dir: Path, task: Path, run_dir: Path, resume: bool) -> list[str]:
    command = [sys.executable, "-m", "ict.cli", "train", "--model", str(model_dir),
               "--dataset", str(task), "--reward", "last_number", "--num-steps", str(NUM_STEPS),
               "--prompts-per-step", "2", "--num-generations", "4", "--max-new-tokens", "8",
               "--micro-batch-size", "8", "--learning-rate", "3e-3", "--run-dir", str(run_dir),
               "--no-progress", "--no-tensorboard", "--seed", "1", "--save-every", "1",
               "--keep-checkpoints", "2", "--num-threads", "1"]
    return command + (["--resume"] if resume else [])


def _env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **extra)
    env.pop("ICT_CHECKPOINT_WRITE_DELAY", None)
    env.update(extra)
    return env


def _metrics(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    lines = []
    for line in path.read_text().splitlines():
        try:
            lines.append(json.loads(line))
        except ValueError:
            pass  # torn by the kill; the resume drops it
    return lines


def _without_timing(lines: list[dict]) -> list[dict]:
    return [{key: value for key, value in line.items() if key not in TIMING_FIELDS}
            for line in lines]


def _checkpoint_steps(run_dir: Path) -> list[int]:
    return [int(path.name.split("-")[1]) for path in complete_checkpoints(run_dir)]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer))
    model.save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    task = write_arithmetic_task(root / "sums.jsonl")
    reference = root / "reference"
    done = subprocess.run(_train_command(root / "model", task, reference, False), env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return root, task, _metrics(reference)


def _run_and_kill(command: list[str], env: dict[str, str], run_dir: Path,
                  trigger) -> tuple[bool, list[int]]:
    """Start `command`, SIGKILL it as soon as `trigger(run_dir)` is true. Returns (killed,
    the complete checkpoint steps seen just before the kill)."""
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        while process.poll() is None:
            if trigger(run_dir):
                seen = _checkpoint_steps(run_dir)
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=60)
                return True, seen
            time.sleep(0.01)
        return False, _checkpoint_steps(run_dir)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def _after_step(step: int, delay: float):
    """Trigger: `delay` seconds after metrics.jsonl first shows `step` (anywhere in the step
    loop, the checkpoint write or the next step)."""
    state: dict[str, float] = {}

    def trigger(run_dir: Path) -> bool:
        if "at" not in state and any(line["step"] >= step for line in _metrics(run_dir)):
            state["at"] = time.monotonic()
        return "at" in state and time.monotonic() - state["at"] >= delay
    return trigger


def _during_checkpoint(step: int, file_name: str):
    """Trigger: checkpoint `step` is being written (its temp directory holds `file_name`)."""
    def trigger(run_dir: Path) -> bool:
        root = run_dir / "checkpoints"
        return root.is_dir() and any(
            (path / file_name).exists() for path in root.glob(f".tmp-step-{step:08d}-*"))
    return trigger


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_sigkill_at_random_points_then_resume_gives_the_uninterrupted_metrics(setup):
    root, task, reference = setup
    assert [line["step"] for line in reference] == list(range(1, NUM_STEPS + 1))
    run_dir = root / "killed"
    rng = random.Random(13)
    # Seeded random kill points, alternating: while a checkpoint is being written (the next
    # checkpoint of the run, a random file of it), and a random delay after a random step was
    # logged (the step loop, the checkpoint write or the next step's start).
    kills = kills_in_checkpoint = attempts = 0
    while kills < 5:
        attempts += 1
        assert attempts <= 12, "the kill triggers keep missing"
        newest = max(_checkpoint_steps(run_dir), default=0)
        if attempts % 2 == 1 and newest < NUM_STEPS - 1:
            kind, step = "checkpoint", rng.randint(newest + 1, NUM_STEPS - 1)
            detail = rng.choice(["model.safetensors", "optimizer.safetensors",
                                 "trainer_state.json"])
        else:
            kind, step, detail = "after", rng.randint(1, NUM_STEPS - 1), rng.uniform(0.0, 0.3)
        command = _train_command(root / "model", task, run_dir, run_dir.exists())
        if kind == "checkpoint":
            env = _env(ICT_CHECKPOINT_WRITE_DELAY="0.5")
            trigger = _during_checkpoint(step, detail)
        else:
            env = _env()
            trigger = _after_step(step, detail)
        killed, seen = _run_and_kill(command, env, run_dir, trigger)
        if not killed:  # the run finished before the trigger fired: start a fresh run
            shutil.rmtree(run_dir)
            continue
        kills += 1
        kills_in_checkpoint += kind == "checkpoint"
        # Nothing complete was lost, every complete checkpoint is intact, and at most the
        # steps since the newest complete checkpoint are lost.
        steps = _checkpoint_steps(run_dir)
        assert max(seen, default=0) <= max(steps, default=0)
        for path in complete_checkpoints(run_dir):
            verify_checkpoint(path)
        logged = max((line["step"] for line in _metrics(run_dir)), default=0)
        newest = max(steps, default=0)
        assert logged - newest <= 1  # save_every=1: at most one step lost
        if kind == "checkpoint":
            assert newest == step - 1  # the checkpoint being written is not taken as complete
    print(f"kills survived: {kills}, during checkpoint writing: {kills_in_checkpoint}")
    assert kills_in_checkpoint >= 1, (kills, kills_in_checkpoint)
    done = subprocess.run(_train_command(root / "model", task, run_dir, True), env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert _without_timing(_metrics(run_dir)) == _without_timing(reference)
    assert not list((run_dir / "checkpoints").glob(".tmp-*"))


def test_a_run_restarted_before_its_first_checkpoint_drops_the_killed_attempts_tensorboard_points(tmp_path):
    """A run killed before its first checkpoint restarts from step 0 (`--resume`: 'starting fresh',
    or a new run in the same --run-dir): metrics.jsonl dropped the killed attempt's lines, but
    TensorBoard showed its points beside the new ones (steps 1, 2, 1, 2, 3: purge_step was only
    set from a checkpoint's step)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from ict.runs.reporting import MetricsLogger

    killed = MetricsLogger(tmp_path, tensorboard=True, resume_step=0)
    for step in (1, 2):
        killed.log({"step": step, "reward_mean": 0.5})
    killed.close()
    restarted = MetricsLogger(tmp_path, tensorboard=True, resume_step=0)
    for step in (1, 2, 3):
        restarted.log({"step": step, "reward_mean": 1.0})
    restarted.close()
    board = EventAccumulator(str(tmp_path / "tensorboard"))
    board.Reload()
    assert [(event.step, event.value) for event in board.Scalars("train/reward_mean")] == [
        (1, 1.0), (2, 1.0), (3, 1.0)]
    assert [json.loads(line)["step"] for line in (tmp_path / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]

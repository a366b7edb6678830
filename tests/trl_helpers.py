"""What the TRL integration tests share: the driver script that trains through TRL's real
GRPOTrainer in a process of its own, and how to run it."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "trl_integration_run.py"


def run_driver(command: list[str], out_dir: Path, **extra_env: str) -> None:
    """Run ``command`` in ``out_dir`` with this checkout on PYTHONPATH, offline, one thread; the
    output's tail is the assertion message when it fails."""
    env = {**os.environ, **extra_env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, env=env, cwd=out_dir, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


def free_port() -> int:
    """A TCP port free on this machine now, for a 2-process launch's rendezvous
    (``--main_process_port``): accelerate's default 29500 is shared by every test or session
    launching at the same time, and a rank that reaches another job's store aborts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

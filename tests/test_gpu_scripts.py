"""The shell scripts a lent GPU runs (benchmarks/gpu_run.sh, gpu_tile_sweep.sh, gpu_recheck.sh), run
whole at tiny shapes on the CPU so that a broken script is found before it spends GPU time, and
gpu_clocks.py, which reads their clock log, on hand-made inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from benchmark_scripts import BENCHMARKS, benchmark_module, gpu_script_environment


@pytest.mark.slow  # every step of the script at tiny shapes, TRL's runs included: ~2 minutes on 2 cores
def test_gpu_run_script_runs_whole_at_tiny_shapes_on_the_cpu(tmp_path):
    """benchmarks/gpu_run.sh, the one script a lent GPU runs, here at tiny shapes on the CPU with
    its GPU options and the tiny ones after them: every step runs and each of its 8 result files
    comes back, so a broken script is found before it spends GPU time."""
    pytest.importorskip("trl")
    import tarfile

    out = tmp_path / "out"
    env = gpu_script_environment(
        tmp_path, AGREEMENT_ARGS="--vocab 211 --length 12 --group 4", PROFILE_ARGS="--length 8 --vocab 1000",
        GPU_RUN_TESTS="tests/test_ranking.py::test_tie_keys_reach_the_device_from_a_host_generator")
    result = subprocess.run(["bash", str(BENCHMARKS / "gpu_run.sh"), "--tiny", "--device", "cpu", "--models", "tiny",
                             "--train-models", "tiny", "--ict-tiles", "8x1000"],
                            capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    assert {path.name for path in out.iterdir()} == {
        "versions.txt", "stats_agreement.log", "stats_agreement.json", "ict_cost.log", "ict_cost.json",
        "stats_profile.log", "stats_traces.tar", "test_tiles.log"}
    assert "imports: ok" in (out / "versions.txt").read_text()
    assert json.loads((out / "stats_agreement.json").read_text())["shape"] == [8, 12, 211]
    assert set(json.loads((out / "ict_cost.json").read_text())) >= {"a", "b", "c"}
    assert "ict_cost.py exit status 0" in (out / "ict_cost.log").read_text()
    profile = (out / "stats_profile.log").read_text()
    assert profile.count("## ours, ICT from hidden states") == 2 and "# the 1.5B shape" in profile
    with tarfile.open(out / "stats_traces.tar") as traces:
        assert {Path(name).name for name in traces.getnames()} >= {"trl.json.gz", "grpo.json.gz", "ict.json.gz"}
    tests = (out / "test_tiles.log").read_text()
    assert "the tests' exit status 0" in tests
    assert "test_tie_keys_reach_the_device_from_a_host_generator SKIPPED" in tests  # each test by name


def test_gpu_tile_sweep_script_runs_tiny_on_the_cpu(tmp_path):
    """benchmarks/gpu_tile_sweep.sh runs ict_cost.py's section (a) once for each tile size given and
    leaves one log and one JSON per size, each with the size it ran at, then profiles the paths of
    PROFILE_PATHS in their order."""
    pytest.importorskip("trl")
    out = tmp_path / "out"
    env = gpu_script_environment(tmp_path, TILE_SIZES="8x1000 16x512", RUN_LIMIT="300", PROFILE_PATHS="grpo,trl",
                                 PROFILE_ARGS="--length 8 --vocab 1000 --width 16")
    result = subprocess.run(["bash", str(BENCHMARKS / "gpu_tile_sweep.sh"), "--tiny", "--device", "cpu",
                             "--models", "tiny"], capture_output=True, text=True, env=env, timeout=600, cwd=tmp_path)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    assert {path.name for path in out.iterdir()} == {"tile_sweep.log", "tiles_8x1000.json", "tiles_16x512.json",
                                                     "stats_profile.log"}  # no nvidia-smi here: no clock log
    profile = (out / "stats_profile.log").read_text()
    assert [line for line in profile.splitlines() if line.startswith("## ")] == [
        "## ours, GRPO from hidden states", "## TRL 1.16 fused head"]
    for size in ("8x1000", "16x512"):
        figures = json.loads((out / f"tiles_{size}.json").read_text())
        assert figures["settings"]["tile_size"] == size
        # its own budget, below the run's time limit (RUN_LIMIT): (a)'s rounds stop before it
        assert 0 < figures["settings"]["budget"] < 300
        assert figures["a"]["tiny"]["rows"]["grpo_hidden"]["median"] > 0
    log = (out / "tile_sweep.log").read_text()
    assert log.count("## --tile-size") == 2 and log.count("ours GRPO from hidden states |") == 2


def test_gpu_clocks_sets_each_rows_samples_beside_its_calls(tmp_path):
    """gpu_clocks.py on a hand-made clock log and (a) result: TRL's head called at 0.0-0.1 s and
    1.0-1.1 s, ours at 0.5-0.6 s, from 12:00:00 UTC; samples at 0.05 s (1980 MHz, 600 W, 50 C),
    0.55 s (1800 MHz, 700 W, 60 C), 0.8 s (outside every call) and 1.05 s (1900 MHz, 500 W,
    52 C), and a line of nvidia-smi's that is no sample. TRL's head: 2 samples, means 1940 MHz,
    550 W, 51 C; ours: 1 sample."""
    from datetime import datetime, timezone

    origin = datetime(2026, 11, 27, 12, 0, 0, tzinfo=timezone.utc).timestamp()
    result = {"origin_epoch": origin, "rows": {
        "trl": {"label": "TRL's head", "seconds": [0.1, 0.1], "started": [0.0, 1.0]},
        "grpo_hidden": {"label": "ours", "seconds": [0.1], "started": [0.5]},
        "naive": {"label": "naive", "seconds": [], "started": []}}}
    cost = tmp_path / "cost.json"
    cost.write_text(json.dumps({"a": {"1.5b": result}}))
    clocks = tmp_path / "clocks.csv"
    clocks.write_text("2026/11/27 12:00:00.050, 1980, 600.00, 50\n"
                      "2026/11/27 12:00:00.550, 1800, 700.00, 60\n"
                      "Failed to query power.draw\n"
                      "2026/11/27 12:00:00.800, 345, 100.00, 40\n"
                      "2026/11/27 12:00:01.050, 1900, 500.00, 52\n")
    gpu_clocks = benchmark_module("gpu_clocks")
    samples = gpu_clocks.read_samples(clocks)
    assert len(samples) == 4 and samples[0][0] == pytest.approx(origin + 0.05)
    table = gpu_clocks.row_clocks(result, samples)
    assert table["trl"]["samples"] == 2 and table["trl"]["calls"] == 2
    assert (table["trl"]["sm_mhz"], table["trl"]["watts"], table["trl"]["celsius"]) == pytest.approx((1940, 550, 51))
    assert (table["grpo_hidden"]["samples"], table["grpo_hidden"]["sm_mhz"]) == (1, pytest.approx(1800))
    assert table["naive"]["samples"] == 0 and table["naive"]["sm_mhz"] is None
    printed = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_clocks.py"), str(cost), str(clocks)],
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert "| TRL's head | 2 | 0.1000 | 2 | 1940 | 550 | 51.0 |" in printed.stdout
    assert "| naive | 0 | - | 0 | - | - | - |" in printed.stdout
    missing = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_clocks.py"), str(cost), str(tmp_path / "none")],
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "no file" in missing.stderr


@pytest.mark.slow  # the sweep's runs and a TRL run pair; ~1 minute on 2 cores
def test_gpu_recheck_script_runs_tiny_on_the_cpu(tmp_path):
    """benchmarks/gpu_recheck.sh, the next GPU's one call, at tiny shapes: the sweep's section (a)
    at the sizes given and its profile in the order given, the tests asked for, then (b) with
    LoRA alone, each file where the script's header says."""
    pytest.importorskip("trl")
    out = tmp_path / "out"
    env = gpu_script_environment(tmp_path, TILE_SIZES="8x1000", RUN_LIMIT="300",
                                 SWEEP_ARGS="--tiny --device cpu --models tiny --repeats 2 --backward-ab --gradient-mask-ab",
                                 PROFILE_ARGS="--length 8 --vocab 1000 --width 16",
                                 B_ARGS="--tiny --device cpu --rounds 1 --steps 2", GPU_RUN_LIMIT="900",
                                 GPU_TESTS="gemm_of_the_bf16_operands or (half_precision and bfloat16-64-torch)")
    result = subprocess.run(["bash", str(BENCHMARKS / "gpu_recheck.sh")], capture_output=True, text=True, env=env,
                            timeout=900, cwd=tmp_path)
    assert result.returncode == 0, (result.stdout[-3000:], result.stderr[-3000:])
    assert result.stdout.count("no wheels in") == 1  # the wheels are looked for once, not again by the sweep
    assert {path.name for path in out.iterdir()} == {"tile_sweep.log", "tiles_8x1000.json", "stats_profile.log",
                                                     "gpu_tests.log", "lora.log", "lora.json"}  # no nvidia-smi: no clock log
    tests = (out / "gpu_tests.log").read_text()
    assert "1 passed, 1 skipped" in tests and "exit status 0" in tests, tests[-2000:]  # no CUDA here: skipped
    section_a = json.loads((out / "tiles_8x1000.json").read_text())["a"]["tiny"]
    assert section_a["repeats"] == 2 and section_a["rows"]["grpo_hidden_forward_tiles"]["median"] > 0
    assert section_a["rows"]["grpo_hidden_unmasked"]["median"] > 0
    profile = (out / "stats_profile.log").read_text()
    assert [line for line in profile.splitlines() if line.startswith("## ")] == [
        "## ours, GRPO from hidden states", "## TRL 1.16 fused head"] * 2
    lora = json.loads((out / "lora.json").read_text())
    assert {(run["variant"], run["config"]) for run in lora["b"]["tiny"]["runs"]} == {("trl", "lora"), ("ict", "lora")}


@pytest.mark.parametrize("cost_json", ["[1, 2]", '{"a": [1]}', '{"a": {"m": 3}}'])
def test_gpu_clocks_rejects_a_json_that_is_not_ict_costs_in_one_line(tmp_path, cost_json):
    """A JSON file that is not ict_cost.py's with section (a) (a list, a section that is no mapping
    of models) ended in a TypeError or AttributeError traceback; now the one-line error, exit 2."""
    cost, clocks = tmp_path / "cost.json", tmp_path / "clocks.csv"
    cost.write_text(cost_json)
    clocks.write_text("2026/11/27 12:00:00.050, 1980, 600.00, 50\n")
    result = subprocess.run([sys.executable, str(BENCHMARKS / "gpu_clocks.py"), str(cost), str(clocks)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "is not ict_cost.py's JSON with section (a)" in result.stderr


@pytest.mark.parametrize(("agreement", "cost", "expected"), [(3, 1, 1), (3, 0, 3), (0, 1, 1), (0, 0, 0)])
def test_gpu_run_script_reports_a_failed_step_even_when_the_agreement_target_is_missed(
        tmp_path, agreement, cost, expected):
    """gpu_run.sh's exit status, with every Python step replaced by a stub that exits as told:
    3 means the agreement target was missed and every other step ran through; a failed step
    (here ict_cost.py) gives its status. Before, a missed agreement target (3) hid the failed
    step behind the status that says every value was computed."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    stub = stubs / "python3"
    stub.write_text("#!/usr/bin/env bash\ncase \"$*\" in\n"
                    f"  *stats_agreement.py*) exit {agreement} ;;\n  *ict_cost.py*) exit {cost} ;;\n"
                    "  *) exit 0 ;;\nesac\n")
    stub.chmod(0o755)
    env = gpu_script_environment(tmp_path)
    env["PATH"] = f"{stubs}:{env['PATH']}"
    result = subprocess.run(["bash", str(BENCHMARKS / "gpu_run.sh")], capture_output=True, text=True, env=env,
                            timeout=60, cwd=tmp_path)
    assert result.returncode == expected, (result.stdout[-2000:], result.stderr[-2000:])
    assert ("the agreement target was missed" in result.stdout) == (agreement == 3)

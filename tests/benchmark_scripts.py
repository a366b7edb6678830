"""Helpers for the tests that run the scripts of benchmarks/ (tests/test_benchmark_scripts.py,
tests/test_gpu_scripts.py): import one as a module, or run one in the environment it needs."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def benchmark_module(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` imported as a module (its folder on ``sys.path`` only
    while importing)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def environment_with_root() -> dict[str, str]:
    """This process's environment with the repository root added to ``PYTHONPATH`` (for a
    benchmark run as a script)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)]))}


def gpu_script_environment(tmp_path: Path, **variables: str) -> dict[str, str]:
    """The environment a GPU script (``gpu_run.sh``, ``gpu_tile_sweep.sh``) runs in here: its
    results in ``tmp_path/out``, its scratch files in ``tmp_path/scratch``, no wheels (the packages
    installed here), this Python first on ``PATH``, and ``variables``."""
    return {**environment_with_root(), "OUT": str(tmp_path / "out"), "GPU_RUN_SCRATCH": str(tmp_path / "scratch"),
            "GPU_RUN_WHEELS": str(tmp_path / "no-wheels"),
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]), **variables}

"""Helpers for the tests that run the scripts of benchmarks/ (tests/test_benchmark_scripts.py,
test_benchmark_ict_cost.py, test_gpu_scripts.py): import one as a module, run one in the
environment it needs, and read the markdown tables it prints."""

from __future__ import annotations

import importlib
import math
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

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


def argparse_refusal(name: str, options: list[str], monkeypatch: Any, capsys: Any) -> str:
    """The one-line error with which ``benchmarks/<name>.py``'s ``main`` refuses ``options``:
    asserts argparse's exit (status 2, ``<name>.py: error: ...`` last on stderr) and returns
    that line."""
    import pytest

    monkeypatch.setattr(sys, "argv", [f"{name}.py", *options])
    with pytest.raises(SystemExit) as stopped:
        benchmark_module(name).main()
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert error.startswith(f"{name}.py: error: ")
    return error


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


def table_rows(output: str, first_cells: tuple[str, ...]) -> list[list[str]]:
    """The markdown table lines of ``output`` whose first cells are ``first_cells``."""
    rows = []
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and tuple(cells[:len(first_cells)]) == first_cells:
            rows.append(cells)
    return rows


def finite(cell: str, positive: bool = True) -> bool:
    value = float(cell)
    return math.isfinite(value) and (value > 0 if positive else value >= 0)

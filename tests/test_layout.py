"""Imports point downward only: core math, then data / rewards / rollout, then the trainer and
evaluation, then the command line (the README's "Layout" section lists the modules)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ict"

# module -> layer; a module may import modules of its own layer or lower ones.
LAYERS = {
    # 0: pure math and plain types: no models, files or command line
    "errors": 0, "stats": 0, "selectors": 0, "loss": 0, "metrics": 0, "diagnostics": 0,
    "problems": 0, "options": 0, "profiling": 0, "significance": 0,
    # 1: data, rewards, rollouts, models, checkpoints, reporting: each stands alone
    "hub": 1, "extraction": 1, "gold": 1, "verify": 1, "grading": 1, "data": 1, "benchmarks": 1,
    "rewards": 1, "rollout": 1, "forward": 1, "models": 1, "eval_records": 1, "eval_results": 1, "checkpoint": 1, "reporting": 1, "plots": 1,
    # 2: what wires them: the training configuration and loop, the evaluation
    "config": 2, "trainer": 2, "evaluate": 2, "compare": 2, "inspect_tokens": 2, "integrations": 2,
    # 3: the command line only parses and calls the library
    "cli": 3, "__init__": 3, "__main__": 3,
}


def module_name(path: Path) -> str:
    relative = path.relative_to(PACKAGE).with_suffix("")
    return relative.parts[0]


def imported_ict_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "ict" and len(parts) > 1 and parts[1] in LAYERS:
                found.add(parts[1])
    return found


def test_every_module_has_a_layer():
    missing = sorted({module_name(path) for path in PACKAGE.rglob("*.py")} - set(LAYERS))
    assert not missing, f"add these modules to LAYERS in {__file__} (and to the README layout): {missing}"


def test_imports_point_downward_only():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        own = module_name(path)
        for imported in imported_ict_modules(path):
            if LAYERS[imported] > LAYERS[own]:
                upward.append(f"{path.relative_to(PACKAGE.parent)} (layer {LAYERS[own]}) imports "
                              f"ict.{imported} (layer {LAYERS[imported]})")
    assert not upward, "\n".join(upward)

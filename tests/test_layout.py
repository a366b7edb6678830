"""The tree shows the layers: each subpackage of ``ict`` imports only the subpackages it is allowed
to (the README's "Layout" section shows the same tree), and the old module paths still import."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ict"

# subpackage -> the ict subpackages it may import (itself always allowed).
ALLOWED = {
    "core": set(),
    "answers": {"core"},
    "data": {"core", "answers"},
    "models": {"core", "data"},  # data's hub check only (loading a hub id offline)
    "runs": {"core"},
    "training": {"core", "answers", "data", "models", "runs"},
    "evaluation": {"core", "answers", "data", "models", "runs"},
    "integrations": {"core", "models"},
    # reads run directories and draws them; scores the tokens of a rollout (ict inspect)
    "analysis": {"core", "models", "runs"},
    # ict compare trains and evaluates every method x seed, then writes analysis's report
    "experiments": {"core", "answers", "data", "models", "runs", "training", "evaluation",
                    "analysis"},
    "cli": {"core", "answers", "data", "models", "runs", "training", "evaluation", "analysis",
            "experiments", "integrations"},
    # the package root re-exports the core API and maps the old module paths
    "__init__": {"core"},
    "__main__": {"cli"},
}


def subpackage(path: Path) -> str:
    relative = path.relative_to(PACKAGE).with_suffix("")
    return relative.parts[0]


def imported_subpackages(path: Path) -> set[str]:
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
            if parts[0] == "ict" and len(parts) > 1 and parts[1] in ALLOWED:
                found.add(parts[1])
    return found


def test_every_module_sits_in_a_known_subpackage():
    unknown = sorted({str(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")
                      if subpackage(path) not in ALLOWED})
    assert not unknown, f"add these to ALLOWED in {__file__} (and to the README layout): {unknown}"


def test_imports_point_downward_only():
    upward = []
    for path in PACKAGE.rglob("*.py"):
        own = subpackage(path)
        for imported in imported_subpackages(path) - {own}:
            if imported not in ALLOWED[own]:
                upward.append(f"{path.relative_to(PACKAGE.parent)} ({own}) imports ict.{imported}")
    assert not upward, "\n".join(upward)


def test_core_is_pure_math():
    """The core knows nothing of models, files or the command line."""
    banned = {"transformers", "datasets", "argparse", "safetensors", "trl", "verl"}
    offenders = []
    for path in (PACKAGE / "core").rglob("*.py"):
        roots = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots.add(node.module.split(".")[0])
        offenders += [f"{path.name} imports {name}" for name in sorted(roots & banned)]
    assert not offenders, offenders


@pytest.mark.parametrize("old, new", [("ict.stats", "ict.core.stats"),
                                      ("ict.selectors", "ict.core.selectors"),
                                      ("ict.trainer", "ict.training.trainer"),
                                      ("ict.inspect_tokens", "ict.analysis.token_view")])
def test_old_module_paths_resolve_to_the_moved_modules(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_every_old_module_path_imports():
    import ict

    for old, new in ict.MOVED_MODULES.items():
        assert importlib.import_module(old) is importlib.import_module(new), old
    from ict.stats import token_statistics

    from ict.data import PromptSampler  # the old ict.data module's names, from the package

    assert PromptSampler.__module__ == "ict.data.training_data"
    assert token_statistics is ict.token_statistics


def test_names_moved_out_of_the_training_config_module_still_resolve_with_a_warning():
    from ict.training import config, config_loading, config_text

    with pytest.warns(DeprecationWarning, match="moved to ict.training.config_loading.build_config"):
        assert config.build_config is config_loading.build_config
    with pytest.warns(DeprecationWarning, match="moved to ict.training.config_text.load_yaml"):
        assert config.load_yaml is config_text.load_yaml
    with pytest.raises(AttributeError):
        config.no_such_name  # noqa: B018


def test_no_file_of_the_repository_imports_a_moved_name_from_the_training_config_module():
    from ict.training.config import _MOVED_TO_LOADING

    stale = []
    for path in sorted(path for folder in ("ict", "tests", "benchmarks", "examples")
                       for path in (PACKAGE.parent / folder).glob("**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "ict.training.config":
                stale += [f"{path.name}: {alias.name}" for alias in node.names if alias.name in _MOVED_TO_LOADING]
    assert not stale, stale

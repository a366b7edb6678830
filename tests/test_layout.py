"""The tree shows the layers: each subpackage of ``ict`` imports only the subpackages it is allowed
to (the README's "Layout" section shows the same tree), and the old module paths still import."""

from __future__ import annotations

import ast
import importlib
import re
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


VLLM_NAMES_ONCE_IN_ROLLOUT = ("VLLM_CPU_KVCACHE_GIB", "VLLM_DEVICES", "VLLM_INSTALL", "vllm_installed",
                              "VLLM_PROMPT_ROOM", "VLLM_MIN_TEMPERATURE", "VLLM_MAX_TEMPERATURE",
                              "check_vllm_sampling", "vllm_model_length", "reload_vllm_weights",
                              "vllm_weight_reload_supported", "VLLMBackend")
"""Every public name of the vLLM backend that ict.models.rollout defined before c05d99f."""


@pytest.mark.parametrize("old_module", ["ict.models.rollout", "ict.rollout", "ict.training.rollout"])
def test_the_vllm_names_moved_out_of_the_rollout_module_still_resolve_with_a_warning(old_module):
    import warnings

    from ict.models import vllm_backend

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the old module path's own warning
        rollout = importlib.import_module(old_module)
    for name in VLLM_NAMES_ONCE_IN_ROLLOUT:
        with pytest.warns(DeprecationWarning, match=rf"ict.models.rollout.{name} moved to "
                                                    rf"ict.models.vllm_backend.{name}; .* ict 0.3.0"):
            assert getattr(rollout, name) is getattr(vllm_backend, name), name
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(AttributeError, match="ict.models.rollout"):
            rollout.no_such_name  # noqa: B018
    assert not caught  # a name that never lived here is no moved name
    with pytest.raises(AttributeError):
        rollout._encode_prompt  # noqa: B018 (private before the move: not kept)


def test_no_file_of_the_repository_imports_a_moved_name_from_the_rollout_module():
    stale = []
    for path in sorted(path for folder in ("ict", "tests", "benchmarks", "examples")
                       for path in (PACKAGE.parent / folder).glob("**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module in ("ict.models.rollout", "ict.rollout",
                                                                    "ict.training.rollout"):
                stale += [f"{path.name}: {alias.name}" for alias in node.names
                          if alias.name in VLLM_NAMES_ONCE_IN_ROLLOUT]
    assert not stale, stale


def test_no_file_of_the_repository_imports_a_moved_name_from_the_training_config_module():
    from ict.training.config import _MOVED_TO_LOADING

    stale = []
    for path in sorted(path for folder in ("ict", "tests", "benchmarks", "examples")
                       for path in (PACKAGE.parent / folder).glob("**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "ict.training.config":
                stale += [f"{path.name}: {alias.name}" for alias in node.names if alias.name in _MOVED_TO_LOADING]
    assert not stale, stale


def _readme_layout_rows() -> dict[str, tuple[str, str]]:
    """The README's Layout block: top-level folder -> (what it holds, what it may import), each
    column's continuation lines joined."""
    readme = (PACKAGE.parent / "README.md").read_text()
    block = re.search(r"## Layout\n.*?```\n(ict/ +holds +may import[^\n]*)\n(.*?)```", readme, flags=re.S)
    assert block, "the README's Layout block changed: update this test"
    column = block[1].index("may import")
    rows: dict[str, tuple[str, str]] = {}
    folder = ""
    for line in block[2].splitlines():
        holds, imports = line[:column].strip(), line[column:].strip()
        if named := re.match(r"(\w+)/ +(.*)", holds):
            folder, holds = named[1], named[2]
            rows[folder] = ("", "")
        rows[folder] = tuple(" ".join(filter(None, pair)) for pair in zip(rows[folder], (holds, imports)))
    return rows


def test_the_readme_layout_names_every_package_folder_and_its_imports():
    """Every package folder under ict/ (a folder with an __init__.py) is named in the README's
    Layout block: a top-level one as a row, in the order of ALLOWED, a nested one (``core/stats/``)
    in its parent's row; each row's "may import" is ALLOWED's (``nothing``; ``everything above``:
    the rows above it; ``all above but X``; a note in parentheses ignored)."""
    rows = _readme_layout_rows()
    packages = sorted(path.parent.relative_to(PACKAGE) for path in PACKAGE.rglob("__init__.py")
                      if path.parent != PACKAGE)
    top = [name for name in ALLOWED if not name.startswith("__")]
    assert list(rows) == top  # the layers, in ALLOWED's order
    assert {package.parts[0] for package in packages} == set(top)
    for package in packages:
        if len(package.parts) > 1:
            assert f"{'/'.join(package.parts[1:])}/" in rows[package.parts[0]][0], package
    for index, (folder, (_, imports)) in enumerate(rows.items()):
        above = set(top[:index])
        words = re.sub(r" *\([^)]*\)", "", imports)
        if words == "nothing":
            named = set()
        elif words == "everything above":
            named = above
        elif words.startswith("all above but "):
            named = above - {name.strip() for name in words.removeprefix("all above but ").split(",")}
        else:
            named = {name.strip() for name in words.split(",")}
        assert named == ALLOWED[folder], (folder, imports)

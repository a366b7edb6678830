"""The front door stays short and its links, snippets and layout stay true: every relative link of
README.md and docs/*.md resolves, the README is at most 220 lines, its library-API snippets run,
and its layout section names every subpackage that ``ls ict/`` shows; every `ict.` name the docs
give exists, and so does every repository path they, the configs and the scripts name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ict.core.selectors import SELECTORS

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
README_MAX_LINES = 220


def relative_links(path: Path) -> list[str]:
    """Link targets of a markdown file that point into the repository (no URL, no bare anchor);
    code blocks are skipped."""
    text = re.sub(r"```.*?```", "", path.read_text(), flags=re.S)
    targets = [match.group(1) for match in LINK.finditer(text)]
    return [target for target in targets
            if not re.match(r"[a-z][a-z0-9+.-]*:", target) and not target.startswith("#")]


@pytest.mark.parametrize("path", DOCS, ids=lambda path: str(path.relative_to(ROOT)))
def test_relative_links_resolve(path: Path):
    broken = [target for target in relative_links(path)
              if not (path.parent / target.split("#")[0]).exists()]
    assert not broken, f"{path.relative_to(ROOT)}: links to missing files: {broken}"


def test_link_pattern_finds_links_and_images():
    sample = "see [a](docs/a.md#x), ![b](../b.png) and [c](https://e.org) or [d](#top)"
    assert [match.group(1) for match in LINK.finditer(sample)] == [
        "docs/a.md#x", "../b.png", "https://e.org", "#top"]


def test_readme_is_short():
    lines = len((ROOT / "README.md").read_text().splitlines())
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), flags=re.S)


@pytest.mark.parametrize("index", range(len(python_blocks(ROOT / "README.md"))))
def test_readme_library_snippets_run(index: int):
    """Each README Python block runs as written, except the peer quick starts (they need the
    hub and a peer trainer; tests/test_integration_trl.py covers that path)."""
    block = python_blocks(ROOT / "README.md")[index]
    if "ict.integrations" in block:
        pytest.skip("peer quick start: needs a model from the hub")
    registry = dict(SELECTORS)  # a snippet may register a selector: keep it out of other tests
    try:
        exec(compile(block, f"README.md python block {index}", "exec"), {"__name__": "readme_snippet"})
    finally:
        SELECTORS.clear()
        SELECTORS.update(registry)


def test_readme_layout_names_every_subpackage():
    readme = (ROOT / "README.md").read_text()
    layout = readme.split("## Layout", 1)[1]
    subpackages = sorted(path.parent.name for path in (ROOT / "ict").glob("*/__init__.py"))
    missing = [name for name in subpackages if not re.search(rf"^\s+{name}/", layout, flags=re.M)]
    assert not missing, f"README layout lacks {missing}"


DOTTED_NAME = re.compile(r"`(ict(?:\.[A-Za-z_]\w*)+)")


def resolves(dotted: str) -> bool:
    """Whether ``ict.a.b.C`` names a module of this package or an attribute of one. A module
    whose own import needs a package this environment lacks (e.g. verl) counts as resolved."""
    import importlib
    import warnings

    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)  # old paths still resolve
                found = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError as error:
            if error.name and not error.name.startswith("ict"):
                return True
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


def test_every_name_the_docs_give_exists():
    """A name in backticks such as `ict.core.selectors.select_ict` is a module or an attribute the
    package has (the docs once named an `ict.select` it did not export)."""
    stale = sorted({(str(path.relative_to(ROOT)), match.group(1)) for path in DOCS
                    for match in DOTTED_NAME.finditer(path.read_text())
                    if not resolves(match.group(1))})
    assert not stale, stale


def test_the_name_check_catches_a_stale_name():
    assert resolves("ict.core.selectors.select_ict") and resolves("ict.experiments.compare")
    assert not resolves("ict.select_all_tokens") and not resolves("ict.core.selectors.no_such_selector")
    assert not resolves("ict.no_such_module.thing")


# paths the docs name that are not in the repository, on purpose
NOT_HERE = {"results/gpu-batch256": "docs/results.md: the GPU repetition's report, owed until a GPU is lent",
            "examples/data_preprocess/gsm8k.py": "verl's own script (examples/verl/run_gsm8k.sh's data)"}
REPOSITORY_PATH = re.compile(r"(?<![\w/.$~-])((?:docs|results|benchmarks|configs|examples|tests)/[\w./=+-]*"
                             r"|ict/[\w/]*(?:\.py|/))(?![\w./=+*<{$-])")


def test_every_repository_path_the_docs_and_configs_name_exists():
    """A file or directory of this repository named in the README, docs/*.md, the configs'
    comments, examples/, the benchmark scripts or the Makefile (`results/cpu-v3/report.md`,
    `benchmarks/stats_profile.py`, `ict/core/stats/`) exists: a renamed or deleted file leaves
    no pointer to nothing (markdown links are test_relative_links_resolve's; a glob or a
    placeholder, `v36-*`, `runs/<label>/`, is not a path)."""
    sources = [*DOCS, *sorted((ROOT / "configs").glob("*.yaml")), *sorted((ROOT / "benchmarks").glob("*.py")),
               *sorted(path for path in (ROOT / "examples").rglob("*") if path.suffix in {".sh", ".py"}),
               ROOT / "Makefile"]
    named = [(source.name, match.group(1).rstrip(".")) for source in sources
             for match in REPOSITORY_PATH.finditer(source.read_text())]
    missing = sorted({(source, path) for source, path in named
                      if not (ROOT / path).exists() and path.rstrip("/") not in NOT_HERE
                      and not any(path.startswith(other + "/") for other in NOT_HERE)})
    assert not missing, missing
    assert len(named) >= 300


def test_the_path_scan_takes_paths_and_leaves_globs_and_placeholders():
    text = ("see `results/cpu-v3/report.md`, results/demo-2026-11-25/v36-* and results/cpu-v2/runs/<label>/seed0, "
            "ict/core/stats/ and ict/entropy_selected; /path/to/verl/examples/x.py")
    assert [match.group(1) for match in REPOSITORY_PATH.finditer(text)] == [
        "results/cpu-v3/report.md", "ict/core/stats/"]

"""The front door stays short and its links, snippets and layout stay true: every relative link of
README.md and docs/*.md resolves, the README is at most 220 lines, its library-API snippets run,
and its layout section names every subpackage that ``ls ict/`` shows; every `ict.` name the docs
give exists."""

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

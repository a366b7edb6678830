"""What pyproject.toml declares holds for the code that ships: the dependency floors admit no
version the code cannot run with."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]


def declared_floor(name: str) -> Version:
    """The ``>=`` floor of dependency ``name`` in pyproject.toml's ``[project] dependencies``."""
    text = (ROOT / "pyproject.toml").read_text()
    dependencies = text.split("dependencies = [", 1)[1].split("]", 1)[0]
    match = re.search(rf'"{re.escape(name)}(?:\[[^\]]*\])?>=([0-9.]+)', dependencies)
    assert match, f"{name} has no >= floor in pyproject.toml"
    return Version(match.group(1))


def test_transformers_floor_takes_the_dtype_keyword():
    """ict.models.loading calls ``from_pretrained(..., dtype=...)``: transformers 4.56 is the first
    release that reads it (4.55 and the declared 4.46 hand it to the model class, TypeError:
    LlamaForCausalLM.__init__() got an unexpected keyword argument 'dtype')."""
    loading = (ROOT / "ict" / "models" / "loading.py").read_text()
    assert re.search(r"from_pretrained\([^)]*\bdtype=", loading)
    assert declared_floor("transformers") >= Version("4.56")

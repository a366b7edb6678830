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
    dependencies = text.split("\ndependencies = [", 1)[1].split("\n]", 1)[0]
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


def test_math_verify_floor_takes_no_timeout():
    """The math-verify worker bounds a check by killing the process, so it calls ``parse`` and
    ``verify`` with their own timeouts off (``None``): math-verify 0.8 is the first release that
    reads None as no timeout. 0.7.0 hands it to ``signal.alarm(None)``, a TypeError that the worker
    takes for an unreadable gold, so every math answer was graded wrong."""
    verify = (ROOT / "ict" / "answers" / "verify.py").read_text()
    assert "parsing_timeout=None" in verify and "timeout_seconds=None" in verify
    assert declared_floor("math-verify") >= Version("0.8")


def test_transformers_floor_builds_a_hybrid_models_cache_layers():
    """ict.models.rollout.prompt_cache_shareable tells a hybrid model (LFM2, Qwen3-Next, ...) by the
    layer types of ``DynamicCache(config=model.config)``: transformers 5.5 is the first that builds
    their convolution / linear-attention layers there. Up to 5.4 it builds attention layers only,
    so LFM2 read as shareable and the shared-prompt forward failed ('Lfm2HybridConvCache' object
    has no attribute 'batch_select_indices')."""
    rollout = (ROOT / "ict" / "models" / "rollout.py").read_text()
    assert "DynamicCache(config=model.config).layers" in rollout
    assert declared_floor("transformers") >= Version("5.5")


def test_transformers_floor_saves_the_gguf_tokenizer_it_reads():
    """The offline default is converted from its GGUF (``gguf_file=``) and saved with its tokenizer.
    With transformers 5.5.0 (and 5.5.4) the saved tokenizer encodes "\\n" and " " as id 0
    (``<|endoftext|>``) and the GGUF one prepends ``<|im_start|>``: the converted SmolLM2 answered
    "What is 2+3?" with unrelated words; 5.6.0 saves one that round-trips (checked 2026-11-29,
    docs/training.md's "Dependency floors")."""
    loading = (ROOT / "ict" / "models" / "loading.py").read_text()
    assert "gguf_file=gguf_file" in loading and "tokenizer.save_pretrained" in loading
    assert declared_floor("transformers") >= Version("5.6")


def test_the_floors_install_together_and_import():
    """Each floor, installed with the others at theirs, resolves and imports: pyarrow 26 (through
    datasets) imports only with NumPy 2 without declaring it, matplotlib admits NumPy 2 from 3.8.4,
    gguf 0.10 imports sentencepiece undeclared and 0.11 calls NumPy 1's ndarray.newbyteorder on
    every read, tensorboard's event reader (``tensorboard --logdir``) imports with NumPy 2 from
    2.17.1 (np.string_); reasoning-gym 0.1.20 requires pyyaml 6.0.2 and transformers 5.6
    safetensors 0.4.3."""
    floors = {"numpy": "2.0", "matplotlib": "3.8.4", "gguf": "0.13", "tensorboard": "2.17.1",
              "pyyaml": "6.0.2", "safetensors": "0.4.3"}
    for name, floor in floors.items():
        assert declared_floor(name) >= Version(floor), name


def test_the_license_pyproject_declares_is_the_license_file_shipped():
    """pyproject says Apache-2.0 (an SPDX expression) and ships LICENSE (in the wheel's
    dist-info/licenses), which is that license's text."""
    root = Path(__file__).resolve().parents[1]
    text = (root / "LICENSE").read_text()
    pyproject = (root / "pyproject.toml").read_text()
    assert re.search(r'^license = "Apache-2.0"$', pyproject, re.M)
    assert re.search(r'^license-files = \["LICENSE"\]$', pyproject, re.M)
    assert text.split()[:3] == ["Apache", "License", "Version"] and "2.0, January 2004" in text

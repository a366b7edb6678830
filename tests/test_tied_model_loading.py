"""Models with tied input and output embeddings (SmolLM2, Qwen2.5-0.5B, GPT-2) load through the
refusal of weights that lack tensors of their config.json (`ict.models.loading.check_loaded_weights`):
their weights files hold the shared tensor once, under either name, and that is no missing tensor."""

from __future__ import annotations

import pytest
import torch
from conftest import build_tiny_tokenizer

from ict.models.loading import load_model_and_tokenizer


def _tied_model(kind: str, vocab_size: int):
    from transformers import GPT2Config, GPT2LMHeadModel, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    if kind == "gpt2":
        return GPT2LMHeadModel(GPT2Config(vocab_size=vocab_size, n_embd=32, n_layer=1, n_head=4, n_positions=64))
    return Qwen2ForCausalLM(Qwen2Config(vocab_size=vocab_size, hidden_size=32, intermediate_size=64,
                                        num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                                        tie_word_embeddings=True))


@pytest.mark.parametrize("kind", ["qwen2", "gpt2"])
@pytest.mark.parametrize("writer", ["save_pretrained", "save_checkpoint"])
def test_a_model_with_tied_embeddings_loads_with_its_weights_and_its_tie(kind, writer, tmp_path):
    """``save_pretrained`` stores the shared tensor as the input embedding; a full fine-tuning
    checkpoint (`ict.runs.checkpoint.save_checkpoint`: safetensors' ``save_model`` and the config)
    as ``lm_head.weight``. Either loads with every tensor as saved, the head still the embedding."""
    from safetensors import safe_open
    from safetensors.torch import save_model

    tokenizer = build_tiny_tokenizer()
    model = _tied_model(kind, len(tokenizer))
    if writer == "save_pretrained":
        model.save_pretrained(tmp_path)
    else:
        save_model(model, str(tmp_path / "model.safetensors"))
        model.config.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / "model.safetensors"), "pt") as weights:
        stored = set(weights.keys())
    assert len(stored) == len(model.state_dict()) - 1  # the shared tensor once

    loaded, _ = load_model_and_tokenizer(str(tmp_path), dtype="fp32", device="cpu")
    expected = model.state_dict()
    assert loaded.state_dict().keys() == expected.keys()
    for name, tensor in loaded.state_dict().items():
        assert torch.equal(tensor, expected[name]), name
    assert loaded.get_output_embeddings().weight is loaded.get_input_embeddings().weight

"""The shared-prompt forward equals the plain per-row forward: log-probs and parameter gradients
within 1e-5 (float32, CPU), with left-padded prompts, ragged completions and split groups."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ict.core.stats import token_statistics
from ict.models.forward import (
    plain_response_outputs,
    prompt_runs,
    response_logits,
    shared_prompt_response_outputs,
)
from ict.models.rollout import RolloutBatch, output_cache


def grouped_batch(vocab: int, group_sizes=(3, 1, 4), seed: int = 0) -> RolloutBatch:
    """Groups of rows with one prompt each (prompts of different lengths: left padding) and
    ragged right-padded responses (some of length 1)."""
    generator = torch.Generator().manual_seed(seed)
    rows = sum(group_sizes)
    prompt_width, response_width = 6, 7
    input_ids = torch.zeros(rows, prompt_width + response_width, dtype=torch.long)
    mask = torch.zeros_like(input_ids)
    response_ids = torch.zeros(rows, response_width, dtype=torch.long)
    response_mask = torch.zeros(rows, response_width, dtype=torch.bool)
    row = 0
    for index, size in enumerate(group_sizes):
        prompt_length = 2 + (index * 3) % 5
        prompt = torch.randint(4, vocab, (prompt_length,), generator=generator)
        for _ in range(size):
            length = 1 + int(torch.randint(0, response_width, (1,), generator=generator))
            response = torch.randint(4, vocab, (length,), generator=generator)
            input_ids[row, prompt_width - prompt_length: prompt_width] = prompt
            input_ids[row, prompt_width: prompt_width + length] = response
            mask[row, prompt_width - prompt_length: prompt_width + length] = 1
            response_ids[row, :length] = response
            response_mask[row, :length] = True
            row += 1
    return RolloutBatch(input_ids, mask, response_ids, response_mask, prompt_width)


def log_probs_and_grads(model, batch, forward):
    model.zero_grad(set_to_none=True)
    logits = forward(model, batch)
    stats = token_statistics(logits, batch.response_ids, batch.response_mask, temperature=1.0)
    weights = torch.linspace(-1.0, 1.0, stats.log_probs.numel()).view_as(stats.log_probs)
    (stats.log_probs * weights).sum().backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    return stats.log_probs.detach(), grads


@pytest.mark.parametrize("group_sizes", [(3, 1, 4), (4, 4), (2, 5, 1, 2)])
def test_shared_prompt_forward_equals_the_plain_forward(group_sizes, tiny_tokenizer):
    from conftest import build_tiny_model

    model = build_tiny_model(len(tiny_tokenizer), seed=2)
    batch = grouped_batch(len(tiny_tokenizer), group_sizes)
    assert int(prompt_runs(batch)[-1]) + 1 == len(group_sizes)
    plain_lp, plain_grads = log_probs_and_grads(model, batch, plain_response_outputs)
    shared_lp, shared_grads = log_probs_and_grads(model, batch, shared_prompt_response_outputs)
    torch.testing.assert_close(shared_lp, plain_lp, rtol=0, atol=1e-5)
    assert plain_grads.keys() == shared_grads.keys()
    for name, grad in plain_grads.items():
        torch.testing.assert_close(shared_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_a_split_group_and_distinct_prompts(tiny_tokenizer):
    """A micro-batch holding part of a group, and rows that share no prompt, both work."""
    from conftest import build_tiny_model

    model = build_tiny_model(len(tiny_tokenizer), seed=3)
    batch = grouped_batch(len(tiny_tokenizer), (4, 3), seed=1)
    part = batch.select(slice(2, 6))  # the end of group 0 and most of group 1
    for sub in (part, grouped_batch(len(tiny_tokenizer), (1, 1, 1), seed=2)):
        expected = plain_response_outputs(model, sub)
        torch.testing.assert_close(response_logits(model, sub), expected, rtol=0, atol=1e-5)
    assert torch.equal(response_logits(model, part, shared_prompt=False), plain_response_outputs(model, part))


def tiny_hybrid_model(vocab: int):
    """LFM2 with a convolution layer and an attention layer (a hybrid: its cache holds a
    convolution state), random weights."""
    from transformers import Lfm2Config, Lfm2ForCausalLM

    torch.manual_seed(0)
    config = Lfm2Config(vocab_size=vocab, pad_token_id=0, bos_token_id=2, eos_token_id=1, hidden_size=32,
                        intermediate_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
                        layer_types=["conv", "full_attention"])
    return Lfm2ForCausalLM(config).eval()


def test_a_hybrid_model_runs_each_row_whole_in_the_forward_and_the_generation(tiny_tokenizer):
    """The shared-prompt forward and the shared prefill expanded every layer of the prompt's cache
    to its rows; a convolution state has no such method (AttributeError on LFM2, Qwen3-Next,
    Bamba, Jamba; Falcon-H1 a size mismatch), so `ict train` failed on them by default. They run
    each row whole: the log-probs equal each sequence run alone, in float64."""
    from ict.models.rollout import generate_rows, prompt_cache_shareable

    model = tiny_hybrid_model(len(tiny_tokenizer)).double()
    assert not prompt_cache_shareable(model)
    batch = grouped_batch(len(tiny_tokenizer), (3, 2), seed=4)
    with torch.no_grad():
        log_probs = torch.log_softmax(response_logits(model, batch), -1)
        for row in range(batch.input_ids.shape[0]):
            tokens = batch.input_ids[row][batch.attention_mask[row].bool()]
            length = int(batch.response_mask[row].sum())
            alone = torch.log_softmax(model(input_ids=tokens[None]).logits[0, -length - 1:-1], -1)
            mine = log_probs[row, :length].gather(-1, batch.response_ids[row, :length, None])
            torch.testing.assert_close(mine, alone.gather(-1, batch.response_ids[row, :length, None]),
                                       rtol=0, atol=1e-9)
        rows = generate_rows(model, [[5, 6, 7], [8, 9]], [0, 0, 1], pad_id=0, eos_ids=[1], max_new_tokens=4,
                             sampling={"do_sample": False})
    assert [len(row) for row in rows] == [4, 4, 4] and rows[0] == rows[1]


def test_prompts_of_equal_ids_but_unequal_padding_are_two_prompts(tiny_tokenizer):
    """A prompt whose first real token is the pad id (0 here; a tokenizer whose pad is its EOS
    or BOS) packs to the same ids as a shorter prompt left-padded by one: [0, 5, 6] and
    [pad, 5, 6]. They are two prompts (the masks differ); taken for one, the second row read the
    first's cache, which attends to the real 0. Each row equals its unpadded sequence run alone."""
    from conftest import build_tiny_model

    model = build_tiny_model(len(tiny_tokenizer), seed=2)
    prompts, responses = [[0, 5, 6], [5, 6], [5, 6]], [[7, 8], [9], [7, 8]]
    input_ids = torch.tensor([[0, 5, 6, 7, 8], [0, 5, 6, 9, 0], [0, 5, 6, 7, 8]])
    mask = torch.tensor([[1, 1, 1, 1, 1], [0, 1, 1, 1, 0], [0, 1, 1, 1, 1]])
    response_ids = torch.tensor([[7, 8], [9, 0], [7, 8]])
    batch = RolloutBatch(input_ids, mask, response_ids, response_ids != 0, 3)
    assert prompt_runs(batch).tolist() == [0, 1, 1]
    logits = response_logits(model, batch)
    with torch.no_grad():
        for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
            alone = model(input_ids=torch.tensor([prompt + response])).logits[0, len(prompt) - 1: -1]
            torch.testing.assert_close(logits[row, : len(response)], alone, rtol=0, atol=1e-5)


def test_gradient_checkpointing_runs_each_row_whole_with_the_same_gradients(tiny_tokenizer):
    """Under gradient checkpointing the model returns no cache (transformers turns use_cache
    off), so the shared-prompt forward cannot run: `response_logits` takes the plain path, with
    the log-probs and gradients of a model without checkpointing (not an AttributeError)."""
    from conftest import build_tiny_model

    batch = grouped_batch(len(tiny_tokenizer), (3, 2), seed=4)
    model = build_tiny_model(len(tiny_tokenizer), seed=5).train()
    expected_lp, expected_grads = log_probs_and_grads(model, batch, plain_response_outputs)
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    lp, grads = log_probs_and_grads(model, batch, response_logits)
    torch.testing.assert_close(lp, expected_lp, rtol=0, atol=1e-6)
    for name, grad in expected_grads.items():
        torch.testing.assert_close(grads[name], grad, rtol=1e-5, atol=1e-6, msg=name)


@pytest.mark.parametrize("hidden", [False, True])
def test_a_forward_that_keeps_no_cache_reads_no_deprecated_cache_name(hidden, tiny_tokenizer, monkeypatch):
    """The plain path runs with ``use_cache=False``: its output's ``cache`` is None, and reading
    ``past_key_values`` in its place (the deprecated alias of transformers 5.24, to be removed)
    logged transformers' "`past_key_values`/`cache_params` are deprecated" on ict train's stderr
    (gradient checkpointing, distinct prompts). The warnings transformers logs are recorded."""
    import logging

    from conftest import build_tiny_model

    logged: list[str] = []
    monkeypatch.setattr(logging.Logger, "warning_once", lambda self, message, *args, **kwargs: logged.append(message))
    model = build_tiny_model(len(tiny_tokenizer), seed=3)
    batch = grouped_batch(len(tiny_tokenizer), (1, 1, 1), seed=2)
    with torch.no_grad():
        outputs = plain_response_outputs(model, batch, hidden=hidden)
    assert outputs.shape[:2] == batch.response_ids.shape
    assert not [message for message in logged if "deprecated" in message]
    older = SimpleNamespace(past_key_values="kv")  # an output of transformers before the rename
    assert output_cache(older) == "kv"

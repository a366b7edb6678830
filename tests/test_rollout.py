"""The shared-prompt prefill of rollouts: each prompt's prefix runs once per `generate` call and
its KV cache is shared by its rows; the tokens equal the previous path's (one prefill per row)."""

from __future__ import annotations

import pytest
import torch
from conftest import build_tiny_model

from ict.models.rollout import (
    SamplingSettings,
    _left_pad,
    cache_argument,
    encode_prompt,
    generate_completions,
    render_prompt,
    shared_prefill_cache,
)

# Ragged lengths (left padding); batch_size 5 with 3 samples splits groups across calls.
PROMPTS = ["what is 3 ?", "the sum of 1 and 2 and 3 and 4 and 5 ?", "what is 9 + 8 ?"]


@pytest.fixture(scope="module")
def model(tiny_tokenizer):
    return build_tiny_model(len(tiny_tokenizer), seed=3).eval()


def _rollouts(model, tokenizer, temperature=1.0, greedy=False, **options):
    sampling = SamplingSettings(temperature, max_new_tokens=10, greedy=greedy)
    return [generate_completions(model, tokenizer, PROMPTS, sampling, num_samples=3,
                                 shared_prefill=shared, **options) for shared in (False, True)]


@pytest.mark.parametrize("batch_size", [5, 9, 32])
def test_shared_prefill_greedy_gives_the_tokens_of_the_plain_path(model, tiny_tokenizer,
                                                                  one_thread, batch_size):
    plain, shared = _rollouts(model, tiny_tokenizer, batch_size=batch_size, greedy=True)
    assert shared.completion_ids == plain.completion_ids
    assert shared.finished == plain.finished
    assert len({len(ids) for ids in plain.prompt_ids}) == 3  # the prompts really are ragged


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shared_prefill_sampling_gives_the_tokens_of_the_plain_path(model, tiny_tokenizer,
                                                                    one_thread, seed):
    """Same batches, same sampler, same RNG draws: on CPU in float32 the tokens are identical."""
    plain, shared = _rollouts(model, tiny_tokenizer, batch_size=5, temperature=1.0, seed=seed)
    assert shared.completion_ids == plain.completion_ids
    assert len({tuple(ids) for group in plain.completion_ids for ids in group}) > 3  # sampled


def test_shared_prefill_cache_gives_the_logits_of_a_full_prefill(model, tiny_tokenizer,
                                                                 one_thread):
    """The expanded cache of the prompt prefixes, then the last prompt column and two decoding
    steps, give the logits of running every row in full (within 1e-5)."""
    prompt_ids = [encode_prompt(tiny_tokenizer, render_prompt(tiny_tokenizer, prompt))
                  for prompt in PROMPTS]
    rows = [0, 0, 1, 2, 2, 2, 1]
    input_ids, mask = _left_pad([prompt_ids[index] for index in rows], 0)
    unique_ids, unique_mask = _left_pad(prompt_ids, 0)
    continuation = torch.tensor([[5, 6]] * len(rows))  # two tokens after the prompt
    full_ids = torch.cat([input_ids, continuation], 1)
    full_mask = torch.cat([mask, torch.ones(len(rows), 2, dtype=torch.long)], 1)
    position_ids = (full_mask.cumsum(-1) - 1).masked_fill(full_mask == 0, 0)
    with torch.no_grad():
        expected = model(input_ids=full_ids, attention_mask=full_mask,
                         position_ids=position_ids).logits[:, -3:]
        cache = shared_prefill_cache(model, unique_ids, unique_mask, torch.tensor(rows))
        width = input_ids.shape[1]
        got = model(input_ids=full_ids[:, width - 1:], attention_mask=full_mask,
                    position_ids=position_ids[:, width - 1:], **{cache_argument(model): cache}).logits
    assert cache.get_seq_length() == width + 2
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_the_cache_keyword_is_the_one_the_installed_transformers_takes(model, tiny_tokenizer,
                                                                       one_thread):
    """The name is read from the decoder's forward (a peft wrapper's forward takes **kwargs, so it
    must agree with its base model's), and the shared paths raise no deprecation warning: once a
    release removes the old keyword, a model's **kwargs would swallow it and silently drop the
    cache."""
    import inspect
    import warnings

    import peft

    name = cache_argument(model)
    assert name in inspect.signature(type(model.get_decoder()).forward).parameters
    wrapped = peft.get_peft_model(build_tiny_model(len(tiny_tokenizer), seed=3),
                                  peft.LoraConfig(r=2, target_modules=["q_proj"]))
    assert cache_argument(wrapped) == name
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values.*", category=FutureWarning)
        _rollouts(model, tiny_tokenizer, batch_size=5, greedy=True)


def test_rollouts_ignore_the_models_own_logits_processors(tiny_tokenizer):
    """A checkpoint's generation_config.json may set a repetition penalty (Qwen2.5-Instruct ships
    1.1) or n-gram bans; ``generate`` applied them, so greedy rollouts were not argmax (3 of 4
    rows differed here) and sampled ones not drawn from softmax(logits / T). Greedy rollouts equal
    an independent argmax decode, and the model's config is left as it was."""
    model = build_tiny_model(len(tiny_tokenizer), seed=5).eval()
    model.generation_config.repetition_penalty = 1.3
    model.generation_config.no_repeat_ngram_size = 2
    own = model.generation_config
    rollout = generate_completions(model, tiny_tokenizer, PROMPTS, SamplingSettings(0.0, 12, greedy=True))
    assert model.generation_config is own and own.repetition_penalty == 1.3
    eos = tiny_tokenizer.eos_token_id
    for prompt_ids, (completion,) in zip(rollout.prompt_ids, rollout.completion_ids, strict=True):
        ids, expected = list(prompt_ids), []
        while len(expected) < 12 and (not expected or expected[-1] != eos):
            with torch.no_grad():
                token = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            expected.append(token)
            ids.append(token)
        assert completion == expected


def test_an_unfinished_row_keeps_sampled_tokens_equal_to_the_pad_id():
    """``generate`` pads only rows that ended; a row that ran to the cap was sampled whole, so a
    trailing pad id is a token of it (it was stripped: 4 of 300 rows here lost one)."""
    from ict.models.rollout import truncate_at_eos

    assert truncate_at_eos([25, 7, 0], [1]) == ([25, 7, 0], False)
    assert truncate_at_eos([25, 1, 0, 0], [1]) == ([25, 1], True)


@pytest.mark.parametrize("cache", ["static", "dynamic", "hybrid"])
def test_a_cache_the_models_generation_config_chooses_is_not_given_a_shared_prefill(tiny_tokenizer, one_thread,
                                                                                    cache):
    """generate refuses a cache object beside a cache_implementation: with the model's own
    generation_config choosing one (a user's static cache), the shared prefill (on by default,
    with several samples a prompt) failed with a ValueError at the first step. It is skipped
    then, and the tokens are those of the plain path."""
    model = build_tiny_model(len(tiny_tokenizer), seed=3).eval()
    plain = _rollouts(model, tiny_tokenizer, batch_size=5, seed=0)[0]
    model.generation_config.cache_implementation = cache
    for shared in _rollouts(model, tiny_tokenizer, batch_size=5, seed=0):
        assert shared.completion_ids == plain.completion_ids


def test_one_token_prompts_of_several_rows_are_generated_without_a_shared_prefill(model, one_thread):
    """A shared prefill runs the first W - 1 prompt columns; prompts one token wide have none, so
    it is skipped there: the rows of a one-token prompt (a raw prompt, no chat template) give the
    greedy tokens of an unbatched argmax decode."""
    from conftest import greedy_reference

    from ict.models.rollout import generate_rows

    rows = generate_rows(model, [[5], [9]], [0, 0, 1, 1], pad_id=0, eos_ids=[1], max_new_tokens=5,
                         sampling={"do_sample": False}, shared_prefill=True)
    assert rows == [greedy_reference(model, [5], 5, eos_id=1)] * 2 + [greedy_reference(model, [9], 5, eos_id=1)] * 2


def test_a_lora_models_rollouts_ignore_its_base_models_logits_processors(tiny_tokenizer, one_thread):
    """Through a peft wrapper ``generate`` reads the base model's generation_config: its repetition
    penalty is set aside there too (greedy rollouts are argmax decodes of the adapted model), and
    the base model keeps its own config object afterwards (a checkpoint saves it unchanged)."""
    from conftest import greedy_reference

    from ict.models.loading import LoraOptions, apply_lora

    base = build_tiny_model(len(tiny_tokenizer), seed=5).eval()
    base.generation_config.repetition_penalty = 1.3
    own = base.generation_config
    model = apply_lora(base, LoraOptions(rank=4)).eval()
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.3, generator=torch.Generator().manual_seed(1))
    rollout = generate_completions(model, tiny_tokenizer, PROMPTS, SamplingSettings(0.0, 12, greedy=True))
    assert base.generation_config is own and own.repetition_penalty == 1.3
    eos = tiny_tokenizer.eos_token_id
    for prompt_ids, (completion,) in zip(rollout.prompt_ids, rollout.completion_ids, strict=True):
        assert completion == greedy_reference(model, prompt_ids, 12, eos_id=eos)

"""What `generate_completions` returns besides the tokens' distribution: where a completion stops
(every EOS id of the model's generation config), how a prompt is rendered and encoded (system
prompt first, special tokens once), the seed, the model's train/eval mode, the generated-token
count, and the vLLM backend's bookkeeping (finish reasons, one seed per prompt), the engine stood
in for (vLLM is not installable here)."""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace

import pytest
from conftest import build_tiny_model, build_tiny_tokenizer, greedy_reference

from ict.core.seeding import request_seed
from ict.models.rollout import (
    SamplingSettings,
    _eos_ids,
    encode_prompt,
    generate_completions,
    render_prompt,
)
from ict.models.vllm_backend import VLLMBackend

PROMPT = "what is 3 + 4 ?"


def test_a_completion_stops_at_an_eos_id_only_the_generation_config_lists(tiny_tokenizer):
    """Qwen2.5-Instruct's generation_config lists two EOS ids (<|im_end|>, <|endoftext|>), its
    tokenizer one: a completion ends at either, as in `generate` with the model's own config."""
    model = build_tiny_model(len(tiny_tokenizer), seed=5).eval()
    eos = tiny_tokenizer.eos_token_id
    rollout = generate_completions(model, tiny_tokenizer, [PROMPT], SamplingSettings(0.0, 12, greedy=True))
    free = greedy_reference(model, rollout.prompt_ids[0], 12)
    stop = next(token for token in free[2:] if token != eos and token not in free[:2])
    model.generation_config.eos_token_id = [eos, stop]
    assert _eos_ids(model, tiny_tokenizer) == [eos, stop]
    rollout = generate_completions(model, tiny_tokenizer, [PROMPT], SamplingSettings(0.0, 12, greedy=True))
    expected = free[: free.index(stop) + 1]
    assert eos not in expected
    assert rollout.completion_ids[0][0] == expected and rollout.finished[0][0]


def test_a_system_prompt_comes_first_and_only_when_the_prompt_has_none(tiny_tokenizer):
    plain = build_tiny_tokenizer()
    plain.chat_template = None
    assert render_prompt(plain, PROMPT, "be brief") == f"be brief\n{PROMPT}"
    templated = render_prompt(tiny_tokenizer, PROMPT, "be brief")
    assert templated.index("be brief") < templated.index(PROMPT)
    own = [{"role": "system", "content": "mine"}, {"role": "user", "content": PROMPT}]
    assert "be brief" not in render_prompt(tiny_tokenizer, own, "be brief")
    # the template's text, written out, ends with the assistant's turn opened (the generation prompt)
    assert templated == f"<|im_start|>system be brief<|im_end|> <|im_start|>user {PROMPT}<|im_end|> <|im_start|>assistant "


def test_a_chat_template_that_refuses_a_system_message_is_a_one_line_usage_error(tiny_tokenizer):
    """Gemma 2's template raises on a system message: with a system prompt (ict eval
    --system-prompt, ict train's system_prompt) that was jinja2's TemplateError, the CLI's exit 1
    for an unexpected error; it is bad input (exit 2), and says what to leave out."""
    from conftest import CHAT_TEMPLATE

    from ict.core.errors import UsageError

    gemma = build_tiny_tokenizer()
    gemma.chat_template = ("{% if messages[0]['role'] == 'system' %}"
                           "{{ raise_exception('System role not supported') }}{% endif %}" + CHAT_TEMPLATE)
    assert render_prompt(gemma, PROMPT) == render_prompt(tiny_tokenizer, PROMPT)
    with pytest.raises(UsageError) as error:
        render_prompt(gemma, PROMPT, "be brief")
    assert str(error.value) == ("the model's chat template refused the prompt (System role not supported): "
                                "try without the system prompt")
    own = [{"role": "system", "content": "mine"}, {"role": "user", "content": PROMPT}]
    with pytest.raises(UsageError) as error:  # the prompt's own system message: no system prompt to leave out
        render_prompt(gemma, own, "be brief")
    assert str(error.value) == "the model's chat template refused the prompt (System role not supported)"


def test_special_tokens_are_added_to_a_raw_prompt_and_not_to_a_chat_template():
    """The chat template writes its special tokens itself; a raw prompt gets the tokenizer's (a
    BOS here): added to a templated prompt they were doubled, left off a raw one they were lost."""
    from tokenizers.processors import TemplateProcessing

    tokenizer = build_tiny_tokenizer()
    bos = tokenizer.bos_token_id
    tokenizer.backend_tokenizer.post_processor = TemplateProcessing(
        single="<|im_start|> $A", special_tokens=[("<|im_start|>", bos)])
    text = render_prompt(tokenizer, PROMPT)
    ids = encode_prompt(tokenizer, text)
    assert ids == tokenizer(text, add_special_tokens=False)["input_ids"] and ids[1] != bos
    tokenizer.chat_template = None
    raw = encode_prompt(tokenizer, PROMPT)
    assert raw[0] == bos and raw[1:] == tokenizer(PROMPT, add_special_tokens=False)["input_ids"]


def test_the_seed_chooses_the_samples_and_the_counts_and_mode_are_kept(tiny_tokenizer):
    """Two seeds give different samples (the seed was once not applied: every call drew the
    caller's random numbers); the generated-token count is the completions' total length
    (tokens_per_second divides it); a model in train mode is left in train mode."""
    model = build_tiny_model(len(tiny_tokenizer), seed=5).train()
    sampling = SamplingSettings(1.0, 10)
    runs = [generate_completions(model, tiny_tokenizer, [PROMPT, "what is 9 ?"], sampling, num_samples=4,
                                 seed=seed) for seed in (7, 8)]
    assert model.training
    assert runs[0].completion_ids != runs[1].completion_ids
    for run in runs:
        assert run.num_generated_tokens == sum(len(ids) for group in run.completion_ids for ids in group)
        assert run.num_generated_tokens > sum(len(group) for group in run.completion_ids)
    model.eval()
    generate_completions(model, tiny_tokenizer, [PROMPT], sampling, seed=7)
    assert not model.training


def test_unseeded_calls_draw_afresh_from_the_global_rng(tiny_tokenizer):
    """seed=None (the default): each call samples from the global RNG and advances it. Inside the
    forked scope every unseeded call reused the caller's unchanged state, so two calls returned
    the same 'random' completions (8 samples of a 10-token cap, identical); with the global RNG
    reset between them they are the same again."""
    import torch

    model = build_tiny_model(len(tiny_tokenizer), seed=5).eval()
    sampling = SamplingSettings(1.0, 10)
    torch.manual_seed(3)
    first, second = (generate_completions(model, tiny_tokenizer, [PROMPT, "what is 9 ?"], sampling,
                                          num_samples=4).completion_ids for _ in range(2))
    assert first != second
    torch.manual_seed(3)
    assert generate_completions(model, tiny_tokenizer, [PROMPT, "what is 9 ?"], sampling,
                                num_samples=4).completion_ids == first


class _Params:
    """`vllm.SamplingParams`, recorded, with its check of greedy requests (vLLM's
    ``_verify_greedy_sampling``)."""

    def __init__(self, **options) -> None:
        self.__dict__.update(options)
        if self.temperature < 1e-5 and self.n > 1:
            raise ValueError(f"n must be 1 when using greedy sampling, got {self.n}.")


class _LLM:
    """`vllm.LLM.generate`, returning given samples (token ids, finish reason) for every prompt."""

    def __init__(self, samples: list[tuple[list[int], str]]) -> None:
        self.samples = samples
        self.params: list[_Params] = []

    def generate(self, prompts, params, use_tqdm=False):
        self.params = list(params)
        return [SimpleNamespace(outputs=[SimpleNamespace(token_ids=ids, finish_reason=reason)
                                         for ids, reason in self.samples[: request.n]])
                for _, request in zip(prompts, self.params, strict=True)]


def test_the_vllm_backend_keeps_its_finish_reasons_and_seeds_each_prompt(tiny_tokenizer, monkeypatch):
    """A sample vLLM stopped on a stop id of the model's generation config (not the tokenizer's
    EOS) is finished; one cut at the length cap is not; one with the EOS ends at it. Every prompt
    gets its own seed (vLLM seeds a request's j-th sample with seed + j: one seed for all prompts
    gave each prompt the same random numbers)."""
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=_Params))
    eos = tiny_tokenizer.eos_token_id
    samples = [([5, 6, 9], "stop"), ([5, 6, 7, 8], "length"), ([5, eos], "stop")]
    backend = VLLMBackend.__new__(VLLMBackend)
    backend.llm, backend.max_model_len = _LLM(samples), 4096
    rollout = backend.generate_completions(tiny_tokenizer, [PROMPT, "what is 9 ?"], 3,
                                           SamplingSettings(0.9, 4), 11, None)
    assert rollout.finished == [[True, False, True]] * 2
    assert rollout.completion_ids == [[[5, 6, 9], [5, 6, 7, 8], [5, eos]]] * 2
    assert rollout.num_generated_tokens == 2 * 9
    seeds = [params.seed for params in backend.llm.params]
    assert seeds == [request_seed(11, 0), request_seed(11, 1)] and seeds[0] != seeds[1]
    assert [(params.n, params.temperature, params.max_tokens) for params in backend.llm.params] == [(3, 0.9, 4)] * 2
    backend.generate_completions(tiny_tokenizer, [PROMPT], 2, SamplingSettings(0.9, 4, top_p=0.8), 11, None)
    assert backend.llm.params[0].top_p == 0.8  # the nucleus is vLLM's too
    backend.generate_completions(tiny_tokenizer, [PROMPT], 1, SamplingSettings(0.9, 4, greedy=True), None, None)
    assert (backend.llm.params[0].temperature, backend.llm.params[0].seed) == (0.0, None)


@pytest.mark.parametrize("bad", [{"num_samples": 0}, {"batch_size": 0}, {"max_new_tokens": 0}])
def test_counts_below_one_are_refused_in_one_line(bad, tiny_tokenizer):
    from ict.core.errors import UsageError

    model = build_tiny_model(len(tiny_tokenizer), seed=5)
    sampling = SamplingSettings(1.0, bad.pop("max_new_tokens", 4))
    with pytest.raises(UsageError, match="must be >= 1"):
        generate_completions(model, tiny_tokenizer, [PROMPT], sampling, **bad)


def test_greedy_vllm_rollouts_of_several_samples_repeat_one(tiny_tokenizer, monkeypatch):
    """vLLM refuses ``n > 1`` at temperature 0 ('n must be 1 when using greedy sampling'): `ict eval
    --backend vllm --temperature 0 --num-samples 3` stopped on that traceback, where the hf backend
    gives three copies of the argmax decode. One greedy sample a prompt is requested, and repeated."""
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=_Params))
    eos = tiny_tokenizer.eos_token_id
    backend = VLLMBackend.__new__(VLLMBackend)
    backend.llm, backend.max_model_len = _LLM([([5, 6, eos], "stop"), ([7], "length")]), 4096
    rollout = backend.generate_completions(tiny_tokenizer, [PROMPT, "what is 9 ?"], 3,
                                           SamplingSettings(0.0, 4), 11, None)
    assert [params.n for params in backend.llm.params] == [1, 1]
    assert rollout.completion_ids == [[[5, 6, eos]] * 3] * 2 and rollout.finished == [[True] * 3] * 2
    assert rollout.num_generated_tokens == 2 * 3 * 3


def test_the_vllm_length_check_admits_a_prompt_that_fills_the_engine_exactly(tiny_tokenizer, monkeypatch):
    """``max_model_len`` counts prompt + completion tokens: a P-token prompt with max_new_tokens
    ``max_model_len - P`` fits exactly (vLLM samples all of them); one token more is refused."""
    from ict.core.errors import UsageError

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=_Params))
    prompt_length = len(encode_prompt(tiny_tokenizer, render_prompt(tiny_tokenizer, PROMPT)))
    backend = VLLMBackend.__new__(VLLMBackend)
    backend.llm, backend.max_model_len = _LLM([([5, 6, 7, 8], "length")]), prompt_length + 4
    rollout = backend.generate_completions(tiny_tokenizer, [PROMPT], 1, SamplingSettings(0.9, 4), 0, None)
    assert rollout.completion_ids == [[[5, 6, 7, 8]]]
    with pytest.raises(UsageError, match=rf"a prompt of {prompt_length} tokens \+ max_new_tokens 5 exceeds"):
        backend.generate_completions(tiny_tokenizer, [PROMPT], 1, SamplingSettings(0.9, 5), 0, None)


def test_a_vllm_sample_ending_at_the_cap_on_a_generation_config_eos_is_finished(tiny_tokenizer, tiny_model_dir,
                                                                                 tmp_path, monkeypatch):
    """vLLM checks the length cap before the stop ids: a sample whose last allowed token is an EOS
    id only the generation config lists (Qwen2.5-Instruct's <|endoftext|>) is finish_reason
    'length'. The backend looked for the tokenizer's EOS alone and called it unfinished, where the
    hf backend (every EOS id of the generation config) ends it there. The backend reads the model's
    generation config (config.json's without a generation_config.json), as vLLM does."""
    import json
    import shutil

    from transformers import GenerationConfig

    eos = tiny_tokenizer.eos_token_id
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=_Params))
    backend = VLLMBackend.__new__(VLLMBackend)
    backend.llm, backend.max_model_len = _LLM([([5, 6, 9], "length"), ([5, 6, 7], "length"),
                                                ([5, eos, 0], "length")]), 4096
    backend.generation_config = GenerationConfig(eos_token_id=[eos, 9])
    rollout = backend.generate_completions(tiny_tokenizer, [PROMPT], 3, SamplingSettings(0.9, 3), 0, None)
    assert rollout.finished == [[True, False, True]]
    assert rollout.completion_ids == [[[5, 6, 9], [5, 6, 7], [5, eos]]]

    class _Engine:
        def __init__(self, **options) -> None:
            pass

    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=_Params, LLM=_Engine))
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # what __init__ sets, restored after
    directory = tmp_path / "model"
    shutil.copytree(tiny_model_dir, directory)
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [eos, 9]}))
    assert VLLMBackend(str(directory)).generation_config.eos_token_id == [eos, 9]
    (directory / "generation_config.json").unlink()
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "eos_token_id": 7}))
    assert VLLMBackend(str(directory)).generation_config.eos_token_id == 7

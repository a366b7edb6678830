"""Helpers of ``benchmarks/ict_cost.py``: the random Qwen2.5-shaped models and their word-level
tokenizer, the versions and device for the record, memory meters, the interleaved run plan with
its time budget, and one training run of each section (b) (TRL: ``GRPOTrainer`` /
``ICTGRPOTrainer``) and (c) (our trainer, GRPO / ICT). Nothing here downloads anything."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import re
import statistics
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

QWEN_VOCAB = 151_936


@dataclass(frozen=True)
class ModelShape:
    """The sizes of a Qwen2.5 model (random weights; tied input/output embeddings)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int = QWEN_VOCAB


SHAPES = {
    "0.5b": ModelShape(896, 4864, 24, 14, 2),     # Qwen2.5-0.5B(-Instruct)
    "1.5b": ModelShape(1536, 8960, 28, 12, 2),    # Qwen2.5-1.5B(-Instruct)
    "tiny": ModelShape(32, 64, 2, 4, 2, 1000),    # CPU smoke tests
}
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<unk>")  # ids 0..3: pad, bos, eos, unk
ROLE_WORDS = ("system", "user", "assistant")
PAD_ID, BOS_ID, EOS_ID = 0, 1, 2
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }} {{ message['content'] }}"
    "<|im_end|> {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)
PROMPT_WORDS = 16
VARIANTS = {"b": ("trl", "ict"), "c": ("grpo", "ict")}


# ------------------------------------------------------------------ the model and the tokenizer

def build_tokenizer(vocab_size: int) -> Any:
    """Word-level tokenizer over ``vocab_size`` ids: 4 specials, the 3 chat roles, then ``w<i>``;
    whitespace-split words; a ChatML-like chat template; EOS ``<|im_end|>`` (id 2)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = [*SPECIAL_TOKENS, *ROLE_WORDS]
    vocab = {token: index for index, token in
             enumerate(words + [f"w{i}" for i in range(vocab_size - len(words))])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<|endoftext|>",
                                        bos_token="<|im_start|>", eos_token="<|im_end|>",
                                        unk_token="<unk>", padding_side="left")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def ensure_model(path: Path, shape_name: str, device: str) -> Path:
    """Build the random ``shape_name`` model and its tokenizer into ``path`` once (bf16 on disk;
    runs load it in fp32). Its generation config forbids EOS before ``min_new_tokens`` (set per
    run): with random weights EOS has probability ~1/V per token anyway."""
    if (path / "done").exists():
        return path
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    shape = SHAPES[shape_name]
    config = Qwen2Config(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads, max_position_embeddings=32768, rms_norm_eps=1e-6,
        tie_word_embeddings=True, pad_token_id=PAD_ID, bos_token_id=BOS_ID, eos_token_id=EOS_ID)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = PAD_ID, EOS_ID
    model.generation_config.bos_token_id = BOS_ID
    model.to(torch.bfloat16).save_pretrained(path)
    build_tokenizer(shape.vocab).save_pretrained(path)
    del model
    (path / "done").write_text(shape_name)
    return path


def prompt_texts(count: int, vocab_size: int) -> list[str]:
    """``count`` prompts of ``PROMPT_WORDS`` random words ``w<i>``."""
    import random

    rng = random.Random(0)
    words = vocab_size - len(SPECIAL_TOKENS) - len(ROLE_WORDS)
    return [" ".join(f"w{rng.randrange(words)}" for _ in range(PROMPT_WORDS)) for _ in range(count)]


def hash_reward(text: str) -> float:
    """A verifiable-looking reward with spread (so the advantages are not all zero)."""
    return float(zlib.crc32(text.encode()) % 5)


# ------------------------------------------------------------------ memory meters

def _proc_kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))


def environment(device: str) -> dict[str, Any]:
    """Versions and the device, for the record."""
    import platform
    from importlib import metadata

    import torch

    versions = {"python": platform.python_version(), "torch": torch.__version__}
    for name in ("transformers", "trl", "peft", "triton", "datasets"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    versions["device"] = (torch.cuda.get_device_name() if device.startswith("cuda")
                          else f"cpu ({os.cpu_count()} cores)")
    versions["load_average_1min"] = round(os.getloadavg()[0], 2)  # other work on the machine
    return versions


class MemoryMeter:
    """Peak memory of a region above what was held at its start, in MiB. CUDA:
    ``max_memory_allocated`` after ``reset_peak_memory_stats`` minus ``memory_allocated`` at the
    start. CPU: the peak resident set (VmHWM, reset through /proc/self/clear_refs) minus the
    resident set at the start (an estimate: freed memory the allocator keeps counts as held)."""

    def __init__(self, device: str) -> None:
        self.cuda = device.startswith("cuda")

    def start(self) -> None:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            try:
                Path("/proc/self/clear_refs").write_text("5")
                self.base = _proc_kib("VmRSS") * 1024
            except OSError:
                self.base = None

    def alloc_retries(self) -> int | None:
        """CUDA: how often the caching allocator has freed its cache and retried a ``cudaMalloc``
        in this process so far (each one synchronises the device; a run's count is the difference
        across it); None on a CPU."""
        import torch

        return int(torch.cuda.memory_stats().get("num_alloc_retries", 0)) if self.cuda else None

    def peak_mib(self) -> float:
        import torch

        if self.cuda:
            torch.cuda.synchronize()
            return (torch.cuda.max_memory_allocated() - self.base) / 2**20
        if self.base is None:
            return float("nan")
        return max(0, _proc_kib("VmHWM") * 1024 - self.base) / 2**20


def synchronize(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


@contextlib.contextmanager
def synchronized_training_step(device: str) -> Iterator[None]:
    """TRL's ``step_time`` (``GRPOTrainer.training_step``) times ``super().training_step``, whose
    backward only queues its kernels on a GPU (the first synchronisation after it is the Trainer's
    isnan check of the loss, outside that timing), so it counted the backward's launches, not its
    GPU work. While this runs on CUDA, ``transformers.Trainer.training_step`` synchronises the
    device before it returns, inside TRL's timing, so that ``step_time`` includes the backward's
    GPU work; elsewhere (a CPU computes as it goes) nothing changes."""
    if not device.startswith("cuda"):
        yield
        return
    from transformers import Trainer

    original = Trainer.training_step

    def training_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        loss = original(self, *args, **kwargs)
        synchronize(device)
        return loss

    Trainer.training_step = training_step
    try:
        yield
    finally:
        Trainer.training_step = original


def free_memory(device: str) -> float:
    """Collect garbage and empty the CUDA cache; returns the MiB still allocated (CUDA) or 0."""
    import torch

    gc.collect()
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
        return torch.cuda.memory_allocated() / 2**20
    return 0.0


class TritonCompiles:
    """Triton's in-process kernel-cache misses within a ``with`` block: ``count`` misses and
    ``seconds`` spent from each miss to its kernel being ready (compiled, or loaded from Triton's
    disk cache). After a run's first step a miss means a kernel met arguments that specialise it
    anew. Counts nothing where Triton is missing or has no ``knobs.runtime`` hooks."""

    def __init__(self) -> None:
        self.count, self.seconds, self._started = 0, 0.0, 0.0

    def __enter__(self) -> TritonCompiles:
        try:
            from triton import knobs
            self._runtime: Any = knobs.runtime
            self._previous = (self._runtime.jit_cache_hook, self._runtime.jit_post_compile_hook)
        except (ImportError, AttributeError):
            self._runtime = None
            return self

        def missed(**kwargs: Any) -> Any:
            self.count, self._started = self.count + 1, time.perf_counter()
            return self._previous[0](**kwargs) if self._previous[0] else None

        def ready(**kwargs: Any) -> Any:
            self.seconds += time.perf_counter() - self._started
            return self._previous[1](**kwargs) if self._previous[1] else None

        self._runtime.jit_cache_hook, self._runtime.jit_post_compile_hook = missed, ready
        return self

    def __exit__(self, *exc: object) -> None:
        if self._runtime is not None:
            self._runtime.jit_cache_hook, self._runtime.jit_post_compile_hook = self._previous


# ------------------------------------------------------------------ interleaved plan with a budget

def plan_pairs(configs: list[str], rounds: int, section: str) -> list[tuple[str, int, tuple[str, ...]]]:
    """(configuration, round, variant order): every round runs both variants of each
    configuration, in the opposite order to the round before."""
    first = VARIANTS[section]
    return [(config, index, first if index % 2 == 0 else first[::-1])
            for index in range(rounds) for config in configs]


def _cost(results: list[dict[str, Any]], config: str) -> tuple[float, float] | None:
    """(seconds per timed step, seconds per run besides its timed steps) of the finished runs of
    ``config`` (else of any), or None before the first: the median step after each run's first,
    and the median of run time minus the steps after its first. So a run of ``n`` steps is
    estimated to take ``overhead + (n - 1) * per_step``: its first step (compiles, warm-up; often
    several times a later one) is counted in the overhead, not as one more timed step."""
    finished = [r for r in results if "seconds" in r and "error" not in r]
    finished = [r for r in finished if r["config"] == config] or finished
    if not finished:
        return None
    steps = [r.get("wall") or r["step_times"] for r in finished]
    per_step = statistics.median([t for run in steps for t in (run[1:] or run)])
    overhead = statistics.median([r["seconds"] - sum(run[1:]) for r, run in zip(finished, steps, strict=True)])
    return per_step, max(0.0, overhead)


def run_pairs(pairs: list[tuple[str, int, tuple[str, ...]]], steps: int, deadline: float | None,
              run_one: Callable[[str, str, int, int], dict[str, Any]],
              on_result: Callable[[list[dict[str, Any]]], None] | None = None) -> list[dict[str, Any]]:
    """Run each pair of variants in turn, ``steps`` steps a run. With a ``deadline`` (epoch
    seconds), coverage comes first: once a run has been timed, each pair gets the steps (at most
    ``steps``, at least 2: one timed) that let the remaining pairs share the time left; a pair
    that cannot end by the deadline even with 2 steps is skipped and recorded as
    ``{"skipped": ...}``, so the runs that are kept come in whole pairs. A run that raises is
    recorded as ``{"error": ...}`` (its pair is then left out of the summary) and the next one
    runs; ``on_result`` gets the list after every run (to save it as it grows)."""
    import traceback

    results: list[dict[str, Any]] = []
    for position, (config, index, order) in enumerate(pairs):
        cost = _cost(results, config)
        count = steps
        if deadline is not None and cost is not None:
            per_step, overhead = cost
            share = (deadline - time.time()) / (2 * (len(pairs) - position))  # per run
            count = min(steps, max(2, 1 + int((share - overhead) / max(per_step, 1e-9))))
            pair_seconds = 2 * (overhead + (count - 1) * per_step)
            if time.time() + pair_seconds > deadline:
                print(f"  skipped {config} round {index}: ~{pair_seconds:.0f} s would pass the time budget",
                      flush=True)
                results.append({"config": config, "round": index, "skipped": "time budget"})
                continue
            if count < steps:
                print(f"  {config} round {index}: {count} steps a run (the time budget)", flush=True)
        for variant in order:
            start = time.time()
            try:
                result = run_one(variant, config, index, count)
            except Exception as error:  # noqa: BLE001 - recorded, and the other runs go on
                traceback.print_exc()
                result = {"error": f"{type(error).__name__}: {str(error)[:300]}"}
            result.update(variant=variant, config=config, round=index, seconds=time.time() - start)
            print(f"  {config} round {index} {variant}: {json.dumps(brief(result))}", flush=True)
            results.append(result)
            if on_result is not None:
                on_result(results)
    return results


def brief(result: dict[str, Any]) -> dict[str, Any]:
    """A run's figures rounded for the progress line."""
    return {key: ([round(v, 3) for v in value] if isinstance(value, list) else
                  round(value, 3) if isinstance(value, float) else value)
            for key, value in result.items() if key not in ("variant", "config", "round")}


# ------------------------------------------------------------------ (b) one TRL run

def trl_run(model_dir: str, variant: str, config_name: str, steps: int, prompts: int,
            completions: int, length: int, device: str, work: Path,
            stats_tile_size: str = "auto") -> dict[str, Any]:
    """One TRL training run: ``trl`` (``trl.GRPOTrainer``) or ``ict`` (``ICTGRPOTrainer`` with
    ``token_selector="ict:ratio=0.1"``, no full-token warm-up and ``stats_tile_size``), ``full``
    fine-tuning or ``lora`` (r=16 on all linear layers), the same generation settings for both."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, PrinterCallback, TrainerCallback
    from transformers.utils import logging as hf_logging
    from trl import GRPOConfig, GRPOTrainer

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer

    gpu = device.startswith("cuda")
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    free_memory(device)
    meter = MemoryMeter(device)
    meter.start()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    peft_config = None
    if config_name == "lora":
        from peft import LoraConfig

        peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    common: dict[str, Any] = dict(
        output_dir=str(work / f"trl-{variant}-{config_name}"), per_device_train_batch_size=prompts * completions,
        num_generations=completions, max_completion_length=length, max_steps=steps,
        steps_per_generation=1, gradient_accumulation_steps=1, report_to="none", use_cpu=not gpu,
        bf16=gpu, logging_steps=1, save_strategy="no", seed=0, temperature=1.0, loss_type="grpo",
        learning_rate=1e-6, generation_kwargs={"min_new_tokens": length}, disable_tqdm=True)
    if variant == "ict":
        args, trainer_class = ICTGRPOConfig(token_selector="ict:ratio=0.1", full_token_warmup_steps=0,
                                            stats_tile_size=stats_tile_size, **common), ICTGRPOTrainer
    else:
        args, trainer_class = GRPOConfig(**common), GRPOTrainer
    wall: list[float] = []
    compiles, compile_seconds = TritonCompiles(), []

    class Wall(TrainerCallback):
        """Wall seconds of each optimizer step (generation + loss + backward + update), and the
        seconds Triton spent on kernel-cache misses within it."""

        def on_step_begin(self, args, state, control, **kwargs):
            synchronize(device)
            self.start, self.compiled = time.perf_counter(), compiles.seconds

        def on_step_end(self, args, state, control, **kwargs):
            synchronize(device)
            wall.append(time.perf_counter() - self.start)
            compile_seconds.append(compiles.seconds - self.compiled)

    data = Dataset.from_dict({"prompt": [[{"role": "user", "content": text}]
                                         for text in prompt_texts(64, len(tokenizer))]})
    trainer = trainer_class(model=model, processing_class=tokenizer, args=args, train_dataset=data,
                            reward_funcs=lambda completions, **kw: [hash_reward(str(c)) for c in completions],
                            peft_config=peft_config, callbacks=[Wall()])
    trainer.remove_callback(PrinterCallback)  # its per-step dicts; the figures are read below
    retries = meter.alloc_retries()
    # the first optimizer step's forward, loss and backward, without the generation
    syncs = FirstCallCensus(trainer, "training_step", device, paused=((trainer, "_generate_and_score_completions"),))
    try:
        with compiles, synchronized_training_step(device):
            trainer.train()
    finally:
        syncs.restore()
    history = trainer.state.log_history
    result = {"step_times": [e["step_time"] for e in history if "step_time" in e], "wall": wall,
              "lengths": [e["completions/mean_length"] for e in history if "completions/mean_length" in e],
              "triton_compile_seconds": compile_seconds, "first_step_syncs": syncs.counts(),
              "peak_mib": meter.peak_mib()}
    if retries is not None:
        result["alloc_retries"] = meter.alloc_retries() - retries
    if variant == "ict":
        result["stats_tile_size"] = args.stats_tile_size  # as the trainer read it
    if hasattr(trainer, "ict_head_statistics"):  # micro-batches scored on TRL's log Z / recomputed
        result["head_statistics"] = dict(trainer.ict_head_statistics)
        print(f"    ict head statistics: {result['head_statistics']}", flush=True)
    trainer.accelerator.free_memory()  # drops its references to the model and the optimizer
    trainer.model = trainer.model_wrapped = trainer.optimizer = trainer.lr_scheduler = None
    del trainer, model
    result["left_allocated_mib"] = free_memory(device)
    return result


# ------------------------------------------------------------------ (c) one run of our trainer

class FirstCallCensus:
    """Counts the synchronisations of the first call of ``owner.name`` (a module's function or an
    instance's method) with :class:`sync_census.SyncCensus` (``.census``), by wrapping it; the
    calls of each ``paused`` ``(owner, name)`` inside it are left out. ``restore()`` puts every
    wrapped attribute back. Used on each run's first step, the warm-up left out of the timings,
    so the census's own cost on every operator times nothing."""

    def __init__(self, owner: Any, name: str, device: str, paused: tuple[tuple[Any, str], ...] = ()) -> None:
        from sync_census import SyncCensus, harness

        self.census = census = SyncCensus(device_only=device.startswith("cuda"))
        self._saved = [(owner, name, getattr(owner, name))] + [(o, n, getattr(o, n)) for o, n in paused]
        original, calls = getattr(owner, name), []

        @harness
        def counted(*args: Any, **kwargs: Any) -> Any:
            calls.append(None)
            if len(calls) > 1:
                return original(*args, **kwargs)
            with census:
                return original(*args, **kwargs)

        setattr(owner, name, counted)
        for paused_owner, paused_name, paused_original in self._saved[1:]:
            setattr(paused_owner, paused_name, self._pausing(paused_original))

    def _pausing(self, function: Callable[..., Any]) -> Callable[..., Any]:
        from sync_census import harness

        @harness
        def paused(*args: Any, **kwargs: Any) -> Any:
            before, self.census.paused = self.census.paused, True
            try:
                return function(*args, **kwargs)
            finally:
                self.census.paused = before

        return paused

    def counts(self) -> dict[str, int]:
        return {f"{kind} @ {where}": count for (kind, where), count in self.census.counts.most_common()}

    def restore(self) -> None:
        for owner, name, original in self._saved:
            setattr(owner, name, original)


def ours_run(model_dir: str, variant: str, steps: int, prompts: int, completions: int, length: int,
             device: str, work: Path, statistics_from: str, stats_tile_size: str = "auto") -> dict[str, Any]:
    """``steps`` steps of our trainer's ``train_step`` (rollouts with Hugging Face generate,
    rewards, statistics, selection, loss, update): ``grpo`` or ``ict`` (no full-token warm-up), the
    statistics in tiles of ``stats_tile_size``."""
    import ict.training.train_step as train_step_module
    from ict.answers.rewards import Reward
    from ict.data.training_data import PromptSampler, load_training_data
    from ict.models.loading import load_model_and_tokenizer
    from ict.training.config_loading import build_config
    from ict.training.step import statistics_source
    from ict.training.train_step import loss_config_of, method_of, train_step
    from ict.training.trainer import build_optimizer, weights_dtype

    data_path = work / "prompts.jsonl"
    if not data_path.exists():  # words w0..w992 exist in every vocabulary here
        rows = [{"question": text, "answer": "1"} for text in prompt_texts(64, SHAPES["tiny"].vocab)]
        data_path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    config = build_config(None, {
        "model": model_dir, "method": variant, "full_token_warmup_steps": 0, "dataset": str(data_path),
        "prompts_per_step": prompts, "num_generations": completions, "max_new_tokens": length,
        "generation_batch_size": prompts * completions, "device": device, "rollout_backend": "hf",
        "statistics_from": statistics_from, "stats_tile_size": stats_tile_size, "learning_rate": 1e-6,
        "temperature": 1.0, "tensorboard": False, "progress": False}, {})
    free_memory(device)
    meter = MemoryMeter(device)
    meter.start()
    data = load_training_data(config.dataset, eval_size=0, seed=config.seed)
    reward = Reward(["hash"], [1.0], [lambda completion, problem: hash_reward(completion)])
    model, tokenizer = load_model_and_tokenizer(config.model, dtype=weights_dtype(config), device=device)
    model.generation_config.min_new_tokens = length  # both variants run every completion to the cap
    model.get_input_embeddings().weight.requires_grad_(not config.freeze_embeddings)
    model.train()
    optimizer = build_optimizer(model, config)
    sampler = PromptSampler(data.train, config.prompts_per_step, config.seed)
    method, loss_config = method_of(config), loss_config_of(config)
    lines = []
    retries = meter.alloc_retries()
    compile_seconds = []
    syncs = FirstCallCensus(train_step_module, "update_on_batch", device)  # the policy updates
    try:
        for step in range(steps):
            synchronize(device)
            with TritonCompiles() as compiles:
                lines.append(train_step(step, config, model, tokenizer, optimizer, sampler, reward, method,
                                        loss_config, None))
            compile_seconds.append(compiles.seconds)
    finally:
        syncs.restore()
    result = {"statistics_from": statistics_source(config.statistics_from, model, next(model.parameters()).device,
                                                   method.js_references),
              "step_times": [line["step_seconds"] for line in lines],
              "generation_seconds": [line["generation_seconds"] for line in lines],
              "training_seconds": [line["training_seconds"] for line in lines],
              "lengths": [line["response_length_mean"] for line in lines],
              "selected": [line.get("selected_fraction") for line in lines],
              "triton_compile_seconds": compile_seconds,
              "first_step_syncs": syncs.counts(),
              "stats_tile_size": config.stats_tile_size,
              "peak_mib": meter.peak_mib()}
    if retries is not None:
        result["alloc_retries"] = meter.alloc_retries() - retries
    del model, optimizer
    result["left_allocated_mib"] = free_memory(device)
    return result

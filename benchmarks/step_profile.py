"""Where a training step of the offline default goes, and what one trainer option changes.

Two trainers, identical but for one option, run their steps alternately in one process (same
prompts, same seeds), each with its own model copy. `--compare` picks the option:

- `shared_prompt` (default): `shared_prompt_forward` on (each prompt runs once for its G
  completions) vs off (one forward per row, the previous behaviour);
- `statistics_from`: the token statistics from the `[B, T, V]` logits vs from the final hidden
  states and the LM-head weight (`ict.core.stats.token_statistics_from_hidden`, no `[B, T, V]` tensor).

Printed: the per-phase table of each (seconds per step, share, peak memory), the ratios of their
step and training times (generation is identical code in both), and the largest growth of the
process's memory within a step (CPU: resident set size above its value at the step's start;
CUDA: peak allocated above the allocated memory at the step's start). Run::

    python benchmarks/step_profile.py                  # offline default, 3 steps each after a warm-up
    python benchmarks/step_profile.py --compare statistics_from --steps 2
    python benchmarks/step_profile.py --steps 1 prompts_per_step=2 max_new_tokens=8  # a smoke test
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ict.answers.rewards import build_reward  # noqa: E402
from ict.core.profiling import StepProfiler, resident_bytes  # noqa: E402
from ict.data.training_data import PromptSampler, load_training_data  # noqa: E402
from ict.models.loading import load_model_and_tokenizer  # noqa: E402
from ict.training.config_loading import build_config  # noqa: E402
from ict.training.train_step import loss_config_of, method_of, train_step  # noqa: E402
from ict.training.trainer import build_optimizer  # noqa: E402

# --compare -> the two variants: (name, TrainConfig field, value); the first is the default.
COMPARISONS = {
    "shared_prompt": (("shared prompt", "shared_prompt_forward", True),
                      ("per-row forward", "shared_prompt_forward", False)),
    "statistics_from": (("from logits", "statistics_from", "logits"),
                        ("from hidden states", "statistics_from", "hidden")),
}


def step_memory_growth(device: torch.device):
    """Context manager factory: yields a dict whose "bytes" is set to the largest growth of the
    process's memory during the block (see the module docstring)."""
    import contextlib

    @contextlib.contextmanager
    def measure():
        result = {"bytes": 0}
        if device.type == "cuda":
            torch.cuda.synchronize()
            start = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            yield result
            torch.cuda.synchronize()
            result["bytes"] = torch.cuda.max_memory_allocated() - start
            return
        sampler = StepProfiler(True)
        start = resident_bytes()
        with sampler.phase("block"):
            yield result
        sampler.close()
        result["bytes"] = sampler.peak.get("block", start) - start

    return measure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/offline-default.yaml")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--compare", choices=sorted(COMPARISONS), default="shared_prompt",
                        help="the option the two trainers differ in (default: shared_prompt)")
    parser.add_argument("overrides", nargs="*", help="key=value TrainConfig overrides")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = dict(item.split("=", 1) for item in args.overrides)
    config = build_config(args.config, {}, overrides)
    data = load_training_data(config.dataset, dataset_config=config.dataset_config, dataset_size=config.dataset_size,
                              eval_size=0, seed=config.seed)
    reward = build_reward(config.reward, data.train[0].kind, config.answer_extraction, config.format_reward,
                          config.verify_timeout)
    base_model, tokenizer = load_model_and_tokenizer(config.model, dtype=config.dtype, device=config.device)
    if config.freeze_embeddings:
        base_model.get_input_embeddings().weight.requires_grad_(False)
    variants = {}
    device = next(base_model.parameters()).device
    for name, option, value in COMPARISONS[args.compare]:
        variant = copy.deepcopy(config)
        setattr(variant, option, value)
        model = copy.deepcopy(base_model).train()
        variants[name] = dict(config=variant, model=model, optimizer=build_optimizer(model, variant),
                              sampler=PromptSampler(data.train, config.prompts_per_step, config.seed),
                              profiler=StepProfiler(True, device), step_seconds=[],
                              training_seconds=[], growth=[])
    method, loss_config = method_of(config), loss_config_of(config)
    measure = step_memory_growth(device)
    for step in range(args.steps + 1):
        for name, v in variants.items():
            profiler = v["profiler"] if step else StepProfiler(False)
            with measure() as growth, profiler.phase("step"):
                metrics = train_step(step, v["config"], v["model"], tokenizer, v["optimizer"], v["sampler"], reward,
                                     method, loss_config, None, profiler=profiler)
            if step:
                v["step_seconds"].append(metrics["step_seconds"])
                v["training_seconds"].append(metrics["training_seconds"])
                v["growth"].append(growth["bytes"])
            print(f"  {name} step {step}: {metrics['step_seconds']:.1f} s (training {metrics['training_seconds']:.1f} s)"
                  f" reward {metrics['reward_mean']:.3f} loss {metrics['loss']:.6f}"
                  f" memory growth {growth['bytes'] / 2**20:.0f} MiB", flush=True)
    print(f"\n{config.model}: {config.prompts_per_step} prompts x {config.num_generations} completions, "
          f"<= {config.max_new_tokens} new tokens, method {config.method}, {torch.get_num_threads()} threads")
    for name, v in variants.items():
        v["profiler"].close()
        print(f"\n**{name}** (mean of {args.steps} steps; largest memory growth within a step: "
              f"{max(v['growth']) / 2**20:.0f} MiB)\n")
        print(v["profiler"].table(args.steps))
    (first_name, first), (second_name, second) = variants.items()
    step_ratio = statistics.median(a / b for a, b in zip(second["step_seconds"], first["step_seconds"]))
    training_ratio = statistics.median(a / b for a, b in zip(second["training_seconds"], first["training_seconds"]))
    print(f"\n{second_name} / {first_name}, median over steps: step time {step_ratio:.3f}, training (all "
          f"but generation and rewards) {training_ratio:.3f}")

if __name__ == "__main__":
    main()

"""Where a training step of the offline default goes, and what the shared-prompt forward saves.

Two trainers, identical but for `shared_prompt_forward` (on: each prompt runs once for its G
completions; off: one forward per row, the previous behaviour), run their steps alternately in
one process (same prompts, same seeds), each with its own model copy. Printed: the per-phase
table of each (seconds per step, share, peak memory) and the ratios of their step and training
times (generation is identical code in both). Run::

    python benchmarks/step_profile.py                  # offline default, 3 steps each after a warm-up
    python benchmarks/step_profile.py --steps 1 --tiny # a smoke test with a random tiny model
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ict.config import build_config  # noqa: E402
from ict.data import PromptSampler, load_training_data  # noqa: E402
from ict.models import load_model_and_tokenizer  # noqa: E402
from ict.profiling import StepProfiler  # noqa: E402
from ict.rewards import build_reward  # noqa: E402
from ict.trainer import build_optimizer, loss_config_of, method_of, train_step  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default="configs/offline-default.yaml")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant (after 1 warm-up)")
    parser.add_argument("--threads", type=int, default=None)
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
    for name, shared in (("shared prompt", True), ("per-row forward", False)):
        variant = copy.deepcopy(config)
        variant.shared_prompt_forward = shared
        model = copy.deepcopy(base_model).train()
        variants[name] = dict(config=variant, model=model, optimizer=build_optimizer(model, variant),
                              sampler=PromptSampler(data.train, config.prompts_per_step, config.seed),
                              profiler=StepProfiler(True, next(model.parameters()).device), step_seconds=[],
                              training_seconds=[])
    method, loss_config = method_of(config), loss_config_of(config)
    for step in range(args.steps + 1):
        for name, v in variants.items():
            profiler = v["profiler"] if step else StepProfiler(False)
            with profiler.phase("step"):
                metrics = train_step(step, v["config"], v["model"], tokenizer, v["optimizer"], v["sampler"], reward,
                                     method, loss_config, None, profiler=profiler)
            if step:
                v["step_seconds"].append(metrics["step_seconds"])
                v["training_seconds"].append(metrics["training_seconds"])
            print(f"  {name} step {step}: {metrics['step_seconds']:.1f} s (training {metrics['training_seconds']:.1f} s)"
                  f" reward {metrics['reward_mean']:.3f}", flush=True)
    print(f"\n{config.model}: {config.prompts_per_step} prompts x {config.num_generations} completions, "
          f"<= {config.max_new_tokens} new tokens, method {config.method}, {torch.get_num_threads()} threads")
    for name, v in variants.items():
        v["profiler"].close()
        print(f"\n**{name}** (mean of {args.steps} steps)\n")
        print(v["profiler"].table(args.steps))
    shared, plain = variants["shared prompt"], variants["per-row forward"]
    step_ratio = statistics.median(a / b for a, b in zip(shared["step_seconds"], plain["step_seconds"]))
    training_ratio = statistics.median(a / b for a, b in zip(shared["training_seconds"], plain["training_seconds"]))
    print(f"\nshared / per-row, median over steps: step time {step_ratio:.3f}, training (all but "
          f"generation and rewards) {training_ratio:.3f}")


if __name__ == "__main__":
    main()

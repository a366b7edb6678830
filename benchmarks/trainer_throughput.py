"""Our trainer against TRL's GRPOTrainer on the offline default, identical settings, one run.

Both train SmolLM2-135M-Instruct (the converted safetensors of the offline default) on
reasoning-gym chain_sum with 8 prompts x 8 completions per step, at most 32 new tokens,
temperature 0.7, lr 2e-5, one optimizer update per rollout batch, every token updated (our
method `all`; TRL's defaults: DAPO loss, no KL), all weights trained (our `--no-freeze-embeddings`),
the same reward (the last number of the completion equals the answer). Each variant runs in its
own process (peak resident memory from `ru_maxrss`); the step time is the median over the steps
after a warm-up step. TRL runs twice: with its default gradient checkpointing, and without (as
ours). Printed: a table and the ratios ours / TRL. Run::

    python benchmarks/trainer_throughput.py --steps 4          # ~15-25 min on 2 CPU cores
    python benchmarks/trainer_throughput.py --steps 2 --small  # a smoke test (2 prompts x 4)
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = ("ours", "trl (gradient checkpointing, its default)", "trl (no gradient checkpointing)")


def settings(small: bool) -> dict:
    return dict(prompts=2 if small else 8, generations=4 if small else 8, max_new_tokens=8 if small else 32,
                temperature=0.7, learning_rate=2e-5, seed=0)


def run_ours(steps: int, small: bool) -> list[float]:
    from ict.answers.rewards import build_reward
    from ict.data.training_data import PromptSampler, load_training_data
    from ict.models.loading import load_model_and_tokenizer
    from ict.training.config_loading import build_config
    from ict.training.train_step import loss_config_of, method_of, train_step
    from ict.training.trainer import build_optimizer

    s = settings(small)
    config = build_config(None, {"method": "all", "prompts_per_step": s["prompts"], "num_generations": s["generations"],
                                 "max_new_tokens": s["max_new_tokens"], "temperature": s["temperature"],
                                 "learning_rate": s["learning_rate"], "freeze_embeddings": False,
                                 "seed": s["seed"], "generation_batch_size": 64}, {})
    data = load_training_data(config.dataset, dataset_config=config.dataset_config, eval_size=0, seed=config.seed)
    reward = build_reward(config.reward, "reasoning_gym", config.answer_extraction)
    model, tokenizer = load_model_and_tokenizer(config.model)
    model.train()
    optimizer = build_optimizer(model, config)
    sampler = PromptSampler(data.train, config.prompts_per_step, config.seed)
    method, loss_config = method_of(config), loss_config_of(config)
    times = []
    for step in range(steps + 1):
        metrics = train_step(step, config, model, tokenizer, optimizer, sampler, reward, method, loss_config, None)
        times.append(metrics["step_seconds"])
        print(f"  ours step {step}: {times[-1]:.1f} s", file=sys.stderr, flush=True)
    return times[1:]


def run_trl(steps: int, small: bool, checkpointing: bool) -> list[float]:
    import tempfile

    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from ict.answers.extraction import extract_last_number
    from ict.data.training_data import load_training_data
    from ict.models.loading import offline_default_path

    s = settings(small)
    data = load_training_data("chain_sum", dataset_config={"min_terms": 2, "max_terms": 2, "min_digits": 1,
                                                           "max_digits": 1}, eval_size=0, seed=s["seed"])
    rows = [{"prompt": [{"role": "user", "content": problem.prompt}], "answer": problem.answer}
            for problem in data.train[: 64 * (steps + 1) * s["prompts"]]]

    def last_number_reward(completions, answer, **kwargs):
        texts = [completion[0]["content"] for completion in completions]
        return [float(extract_last_number(text) == gold) for text, gold in zip(texts, answer, strict=True)]

    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            times.append(time.perf_counter() - self.start)
            print(f"  trl step {len(times) - 1}: {times[-1]:.1f} s", file=sys.stderr, flush=True)

    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(), per_device_train_batch_size=s["prompts"] * s["generations"],
        num_generations=s["generations"], max_completion_length=s["max_new_tokens"],
        temperature=s["temperature"], learning_rate=s["learning_rate"], max_steps=steps + 1,
        gradient_checkpointing=checkpointing, use_cpu=True, report_to="none", save_strategy="no",
        logging_steps=1, seed=s["seed"], bf16=False, epsilon_high=0.28, shuffle_dataset=False)
    trainer = GRPOTrainer(model=str(offline_default_path()), reward_funcs=last_number_reward, args=config,
                          train_dataset=Dataset.from_list(rows), callbacks=[StepTimer()])
    trainer.train()
    return times[1:]


def worker(variant: str, steps: int, small: bool) -> None:
    import torch

    torch.manual_seed(0)
    if variant == "ours":
        times = run_ours(steps, small)
    else:
        times = run_trl(steps, small, checkpointing="no gradient" not in variant)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"variant": variant, "seconds": times, "peak_mib": peak}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=4, help="timed steps per variant (after 1 warm-up)")
    parser.add_argument("--small", action="store_true", help="2 prompts x 4 completions of 8 tokens")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.worker, args.steps, args.small)
        return
    results = {}
    for variant in VARIANTS:
        command = [sys.executable, __file__, "--worker", variant, "--steps", str(args.steps)]
        command += ["--small"] if args.small else []
        done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode or not lines:
            print(f"{variant}: failed ({done.returncode}): {done.stderr.strip().splitlines()[-3:]}")
            continue
        results[variant] = json.loads(lines[-1])
        print(f"{variant}: median {statistics.median(results[variant]['seconds']):.1f} s/step, "
              f"peak {results[variant]['peak_mib']:.0f} MiB", flush=True)
    s = settings(args.small)
    print(f"\n{s['prompts']} prompts x {s['generations']} completions, <= {s['max_new_tokens']} new tokens, "
          f"median of {args.steps} steps after a warm-up\n")
    print("| trainer | step (s) | peak memory (MiB) | ours / this: time | ours / this: memory |")
    print("|---|---|---|---|---|")
    ours = results.get("ours")
    for variant, result in results.items():
        median = statistics.median(result["seconds"])
        time_ratio = statistics.median(ours["seconds"]) / median if ours else float("nan")
        memory_ratio = ours["peak_mib"] / result["peak_mib"] if ours else float("nan")
        print(f"| {variant} | {median:.1f} | {result['peak_mib']:.0f} | {time_ratio:.2f} | {memory_ratio:.2f} |")


if __name__ == "__main__":
    main()

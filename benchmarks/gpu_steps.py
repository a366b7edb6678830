# Legacy (2026-11-23; docs/scaling.md cites its findings): its ICT / GRPO ratio is not a target: the profiler synchronises at every phase, completions may end at EOS (no min_new_tokens) and the variants run in a fixed order; benchmarks/ict_cost.py (c) is the side-by-side comparison.
"""Our trainer on a GPU: step time and peak GPU memory of GRPO and ICT on the offline default.

SmolLM2-135M-Instruct on reasoning-gym chain_sum, Hugging Face rollouts, 32 prompts x 8
completions per step (256 sequences), at most 128 new tokens, micro-batches of 64 rows, one
optimizer update per rollout batch. Variants (each in its own process, so each peak is its own):

- ``grpo`` / ``ict`` / ``ict logits``: mixed precision, the default on a GPU (fp32 weights and
  AdamW states, bf16 autocast); ICT with the paper's reference ``group_mean`` at ratio 0.1,
  its statistics from the hidden states (``statistics_from: auto``, the default, on a GPU) or
  (``logits``) from the logits;
- ``grpo bf16`` / ``ict bf16``: bf16 weights (``--dtype bf16 --autocast off``).

Step time: the median of the steps after one warm-up step (generation + rewards + statistics +
selection + loss + backward + update). Memory: the largest per-phase peak of
``torch.cuda.max_memory_allocated`` over the timed steps (the profiler resets the peak at each
phase, so the counter read at the end would only cover the last phase).
Printed: a markdown table, the ratios ICT / GRPO, and the phase profile of each variant::

    PYTHONPATH=$PWD python benchmarks/gpu_steps.py --steps 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

VARIANTS = {
    "grpo": {"method": "grpo"},
    "ict": {"method": "ict"},  # statistics_from auto: hidden states on a GPU
    "ict logits": {"method": "ict", "statistics_from": "logits"},
    "grpo bf16": {"method": "grpo", "dtype": "bf16", "autocast": "off"},
    "ict bf16": {"method": "ict", "dtype": "bf16", "autocast": "off"},
}


def child(variant: str, steps: int, prompts: int, generations: int, length: int, out: str,
          device: str) -> None:
    import torch

    from ict.answers.rewards import build_reward
    from ict.core.profiling import StepProfiler
    from ict.data.training_data import PromptSampler, load_training_data
    from ict.models.loading import load_model_and_tokenizer
    from ict.training.config_loading import build_config
    from ict.training.train_step import loss_config_of, method_of, train_step
    from ict.training.trainer import build_optimizer, weights_dtype

    overrides = {"prompts_per_step": prompts, "num_generations": generations,
                 "max_new_tokens": length, "micro_batch_size": 64,
                 "generation_batch_size": prompts * generations, "device": device,
                 **VARIANTS[variant]}
    config = build_config(None, overrides, {})  # the defaults: configs/offline-default.yaml
    from ict.core.selectors import ICT_DEFAULT_REFERENCE

    assert config.method != "ict" or config.selector["reference"] == ICT_DEFAULT_REFERENCE
    data = load_training_data(config.dataset, dataset_config=config.dataset_config, eval_size=0,
                              seed=config.seed)
    reward = build_reward(config.reward, "reasoning_gym", config.answer_extraction)
    model, tokenizer = load_model_and_tokenizer(config.model, dtype=weights_dtype(config), device=device)
    model.get_input_embeddings().weight.requires_grad_(not config.freeze_embeddings)
    model.train()
    optimizer = build_optimizer(model, config)
    sampler = PromptSampler(data.train, config.prompts_per_step, config.seed)
    method, loss_config = method_of(config), loss_config_of(config)
    profiler = StepProfiler(True, torch.device(device))
    lines = []
    for step in range(steps + 1):
        if step == 1:
            profiler = StepProfiler(True, torch.device(device))  # the profile skips the warm-up
        with profiler.phase("step"):
            lines.append(train_step(step, config, model, tokenizer, optimizer, sampler, reward,
                                    method, loss_config, None, profiler=profiler))
    profiler.close()
    Path(out).write_text(json.dumps({
        "step_seconds": [line["step_seconds"] for line in lines],
        "peak_mib": max(profiler.peak.values(), default=0) / 2**20 if device == "cuda" else 0.0,
        "tokens": [line["response_length_mean"] for line in lines],
        "reward": [line["reward_mean"] for line in lines],
        "profile": profiler.table(steps),
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu (a smoke test)",
    }))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per variant (after 1 warm-up)")
    parser.add_argument("--prompts", type=int, default=32)
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--length", type=int, default=128, help="max new tokens")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--device", default="cuda", help="cuda (cpu: a smoke test of the script)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.prompts, args.generations, args.length, args.out, args.device)
        return
    results = {}
    for variant in args.variants.split(","):
        out = Path(tempfile.mkdtemp()) / "result.json"
        subprocess.run([sys.executable, __file__, "--child", variant, "--out", str(out),
                        "--steps", str(args.steps), "--prompts", str(args.prompts),
                        "--generations", str(args.generations), "--length", str(args.length),
                        "--device", args.device],
                       check=True)
        results[variant] = json.loads(out.read_text())
        print(f"{variant}: {json.dumps({k: v for k, v in results[variant].items() if k != 'profile'})}",
              flush=True)
    device = next(iter(results.values()))["device"]
    print(f"\n{device}; {args.prompts} prompts x {args.generations} completions, <= {args.length} "
          f"new tokens, median of {args.steps} steps after a warm-up\n")
    print("| variant | median step (s) | mean response length | peak GPU memory (MiB) |\n|---|---|---|---|")
    for variant, result in results.items():
        timed = result["step_seconds"][1:]
        lengths = [t for t in result["tokens"][1:] if t is not None]
        length = f"{statistics.mean(lengths):.1f}" if lengths else "-"
        print(f"| {variant} | {statistics.median(timed):.2f} | {length} | {result['peak_mib']:.0f} |")
    for pair in (("ict", "grpo"), ("ict logits", "grpo"), ("ict bf16", "grpo bf16")):
        if all(name in results for name in pair):
            a, b = (results[name] for name in pair)
            print(f"| {pair[0]} / {pair[1]} | {statistics.median(a['step_seconds'][1:]) / statistics.median(b['step_seconds'][1:]):.3f} "
                  f"| | {a['peak_mib'] / max(b['peak_mib'], 1e-9):.3f} |")
    for variant, result in results.items():
        print(f"\n{variant} (seconds per step, mean over the timed steps):\n{result['profile']}")


if __name__ == "__main__":
    main()

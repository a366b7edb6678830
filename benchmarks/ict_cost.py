"""What ICT costs, in one run, on random Qwen2.5-0.5B- and 1.5B-shaped models (no download).

Models: ``Qwen2ForCausalLM`` from a ``Qwen2Config`` with the real sizes (0.5B: d=896,
intermediate 4864, 24 layers, 14 heads, 2 KV heads; 1.5B: d=1536, 8960, 28, 12, 2; both tied
embeddings, V=151,936) and random weights, with a word-level tokenizer over the same 151,936 ids
(``<|endoftext|>`` pad, ``<|im_start|>``, ``<|im_end|>`` EOS, ``<unk>``, the chat roles, then
``w0``, ``w1``, ...) and a ChatML-like chat template. With random weights EOS has probability
~1/V per token, and every run also sets ``min_new_tokens`` = the cap, so every completion runs to
the cap and both variants of a comparison generate the same number of tokens (the tables print
the mean completion length to show it).

(a) The statistics of the LM head, forward + backward, on ``[B, T, d]`` hidden states (GPU:
2 prompts x 8 completions x 1,024 positions = 16,384 tokens, bf16 autocast over fp32 inputs as
in mixed-precision training; CPU: 2 x 8 x 64 = 1,024 tokens, fp32, ``--threads`` threads), rows:

- TRL 1.16's fused head, ``trl.kernels.chunked_logprob.ChunkedLogProbFunction`` with the
  arguments its ``GRPOTrainer`` passes (vocabulary chunks of 32,768, outputs log-probs and
  entropy), backward of ``sum(log_probs * advantage)``. On a GPU its Triton kernels; on a CPU
  the same function folds each tile with torch ops (``_forward_tile``/``_backward_tile``): that
  is what TRL 1.16's GRPOTrainer runs on a CPU (its fused head has no other CPU path), so it is
  "TRL's head" on both;
- naive: ``hidden @ W.T`` (bf16 under autocast), fp32 ``log_softmax`` over ``[B, T, V]``,
  gathered log-probs, entropy (no grad), backward;
- ours, GRPO / ICT, from hidden states (``ict.core.stats.token_statistics_from_hidden``) and
  from logits (``token_statistics`` on ``hidden @ W.T`` computed under autocast, the matmul
  timed): GRPO: log-probs only, given the positions its loss differentiates
  (``ict.core.loss.loss_gradient_mask``, as our trainer's GRPO step: the backward reads nothing
  back), backward of ``sum(log_probs * advantage)``; ICT: plus the JS
  reference ``ict`` needs (``group_mean_absorbing``, groups of G=8), the registry's selector
  (``select("ict", ..., ratio=0.1)``) and ``ict.core.loss.policy_loss`` (ICT's aggregation).
  These and TRL's row are ``benchmarks/head_step.py``'s, the step ``stats_profile.py`` and
  ``stats_speed.py --step`` time too.

Seconds: the median of ``--repeats`` timed calls (GPU 9; CPU 1, where one call of a row takes
10-100 s at this shape on 2 cores) after one warm-up call of every row (rows interleaved call by
call, each round in its own seeded shuffled order, so that no row always follows the same row,
whose heat or memory it would inherit; the timed rounds stop early, after at least one,
when the longest round so far would pass the time budget: the warm-up's own time, Triton's
compiles and cuBLAS's first calls included, says nothing of a round's). Memory: the peak above
what was held just before the call (the inputs: hidden states, weight, ids, mask, advantages), so
it includes the gradients of the hidden states and the weight; CUDA: ``max_memory_allocated``
after ``reset_peak_memory_stats`` minus ``memory_allocated``; CPU: the peak resident set (reset
through /proc/self/clear_refs) minus the resident set, an estimate.

(b) ICT inside TRL (``ICTGRPOTrainer``, ``token_selector="ict:ratio=0.1"``, no full-token
warm-up) against plain ``trl.GRPOTrainer``, same settings otherwise (``loss_type="grpo"``,
TRL's defaults incl. gradient checkpointing, bf16 mixed precision over fp32 weights on a GPU),
full fine-tuning and LoRA (r=16, all linear layers); GPU: 8 prompts x 8 completions x 256
tokens. Per run: TRL's ``step_time`` metric (generation + loss + backward; on a GPU the
Trainer's ``training_step`` synchronises the device before it returns, inside TRL's timing, so
that the backward's GPU work counts and not only its launches: ``runs.synchronized_training_step``),
the wall time of each optimizer step (synchronised at both ends), the mean completion length, the
peak memory of the run (model load included); the first step of each run is a warm-up and not
counted.

(c) Our trainer (``ict.training.train_step.train_step``: HF rollouts, rewards, statistics,
selection, loss, update), ICT (no warm-up) against GRPO, same settings, full fine-tuning
(``freeze_embeddings``: the tied embeddings stay frozen), ``--statistics-from`` auto, the
trainer's default (hidden states on a GPU, the logits on a CPU; each run records which). Per
run: each step's seconds, and its generation and training (statistics, selection, loss,
backward, update) seconds from the trainer's metrics line, so a gap between the variants can be
placed, and the step time with the generation pooled: both variants generate the same tokens,
so the median generation of all their steps plus each variant's median rest of the step
(``pooled_ratio``; an estimate net of generation's jitter, beside the target's direct ratio).
(c) also lists the synchronisations of each variant's first (untimed) step's updates by the line
that caused them (``benchmarks/sync_census.py``). On a GPU, (b) and (c) also count the caching
allocator's retries of ``cudaMalloc`` (``num_alloc_retries``), which synchronise the device, and
the seconds Triton spent compiling (or loading) kernels in each step.

(b) and (c): each variant runs ``--steps`` steps per round, ``--rounds`` rounds, the order of
the variants reversed every round; all runs of one model and section share one process
(``--isolation model``: starting TRL costs ~15 s a process) and each run loads its model anew
and measures its own peak; ``--isolation run`` gives every run its own process. Rewards: a hash
of the completion (so the advantages are not all zero).

Time budget (``--budget`` seconds, default 420 on a GPU, none on a CPU): (a) gets a quarter, or
all of it when it runs alone (fewer timed calls, at least one, when its warm-up says so), (b) two
thirds of the rest and (c) the remainder, shared among the models. Within (b) and (c) coverage
comes first: once a run has been timed, each pair of runs gets the steps (at most ``--steps``, at
least 2) that let the remaining pairs share the time left, and a pair that cannot end in time is
skipped (said so, and left out); the first pair always runs in full. The tables say how many runs and timed steps each
figure rests on. At 8 x 8 x 256 tokens both rounds of both configurations need roughly 6 minutes
for (b) alone (estimated, not measured: HF generation dominates); ``--length 128`` or ``--steps 3``
buys coverage inside the budget. A SIGTERM (a time limit: ``timeout`` signals the script's
process group) ends the child running and starts no other: the tables of what the children had
written (each model of (a), each run of (b) and (c), as it ended) are printed and saved, and the
script exits 1.

Commands (the repository root)::

    PYTHONPATH=$PWD python benchmarks/ict_cost.py                      # GPU: both models, all
    PYTHONPATH=$PWD python benchmarks/ict_cost.py --sections a --models 0.5b --json a.json
    PYTHONPATH=$PWD python benchmarks/ict_cost.py --sections a --tile-size 4096x8192
    PYTHONPATH=$PWD python benchmarks/ict_cost.py --device cpu --sections a  # CPU line, minutes
    PYTHONPATH=$PWD python benchmarks/ict_cost.py --tiny                # seconds-long smoke test
    bash benchmarks/gpu_run.sh                                          # on the lent GPU machine
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # an installed ict or PYTHONPATH wins; the checkout is the fallback

import ict_cost_runs as runs  # noqa: E402
from ict_cost_head import A_TITLE, head_rows, number, parse_tile, print_a  # noqa: E402

A_BUDGET_SHARE = 0.25  # of --budget beside (b), (c): (a)'s timed calls stop by then (the warm-up always runs)
SECTION_TITLES = {"a": A_TITLE, "b": "(b) ICT in TRL vs plain TRL",
                  "c": "(c) our trainer, ICT vs GRPO"}
MEMORY_NOT_JUDGED = ("peak memory not judged (CPU runs sharing one process: the resident set a run "
                     "frees stays held, so later runs read ~0; --isolation run measures each alone)")


def write_json(path: Path, data: Any) -> None:
    """``data`` into ``path`` whole or not at all (a child killed mid-write leaves the file before):
    ict's `write_atomically`, imported here, in the children (the parent imports no torch)."""
    from ict.runs.checkpoint import write_atomically

    write_atomically(path, json.dumps(data))


# ------------------------------------------------------------------ (a) the statistics table

def child_a(settings: dict[str, Any], out: Path, deadline: float | None) -> None:
    import torch

    if settings["device"] == "cpu":
        torch.set_num_threads(settings["threads"])
    results = {}
    models = settings["models"]
    for position, model in enumerate(models):
        width = runs.SHAPES[model].hidden
        print(f"(a) {model}: d={width}, V={settings['a_vocab']:,}, {settings['a_shape']}", flush=True)
        mine = None if deadline is None else time.time() + (deadline - time.time()) / (len(models) - position)
        results[model] = head_rows(width, settings["a_vocab"], tuple(settings["a_shape"]), settings["device"],
                                   settings["repeats"], parse_tile(settings["tile_size"]), mine,
                                   tuple(parse_tile(text) for text in settings["ict_tiles"]),
                                   settings["backward_ab"], settings["gradient_mask_ab"])
        write_json(out, results)


# ------------------------------------------------------------------ (b), (c) children and tables

def child_train(section: str, settings: dict[str, Any], model: str, out: Path, deadline: float | None,
                only: str | None) -> None:
    """All runs of ``section`` for ``model`` in this process (or the one run ``only``)."""
    import torch

    if settings["device"] == "cpu":
        torch.set_num_threads(settings["threads"])
    work = Path(settings["work_dir"])
    model_dir = str(runs.ensure_model(work / f"model-{model}", model, settings["device"]))
    common = (settings["prompts"], settings["completions"], settings["length"], settings["device"], work)

    def run_one(variant: str, config: str, index: int, steps: int) -> dict[str, Any]:
        tile = settings["tile_size"] or "auto"
        if section == "b":
            return runs.trl_run(model_dir, variant, config, steps, *common, stats_tile_size=tile)
        return runs.ours_run(model_dir, variant, steps, *common, settings["statistics_from"], stats_tile_size=tile)

    if only is not None:
        variant, config, index, steps = only.split(":")
        result = run_one(variant, config, int(index), int(steps))
        write_json(out, [result])
        return
    configs = settings["configs"] if section == "b" else ["full"]
    runs.run_pairs(runs.plan_pairs(configs, settings["rounds"], section), settings["steps"], deadline,
                   run_one, lambda results: write_json(out, results))


def summarize(results: list[dict[str, Any]], section: str) -> dict[str, dict[str, Any]]:
    """Per configuration and variant: the medians over the timed steps (each run's first step
    dropped), the mean completion length, the largest peak, the number of runs; and the ratios."""
    summary: dict[str, dict[str, Any]] = {}
    good = [r for r in results if "skipped" not in r and "error" not in r]
    pairs = {(r["config"], r["round"]) for r in good
             if sum(o["config"] == r["config"] and o["round"] == r["round"] for o in good) == 2}
    done = [r for r in good if (r["config"], r["round"]) in pairs]  # whole pairs only
    for config in dict.fromkeys(r["config"] for r in done):
        summary[config] = {}
        for variant in runs.VARIANTS[section]:
            mine = [r for r in done if r["config"] == config and r["variant"] == variant]
            if not mine:
                continue
            timed = [t for r in mine for t in r["step_times"][1:]] or [t for r in mine for t in r["step_times"]]
            walls = [t for r in mine for t in r.get("wall", [])[1:]]
            lengths = [t for r in mine for t in r["lengths"][1:] if t is not None] or [math.nan]
            parts = {part: [t for r in mine for t in r.get(f"{part}_seconds", [])[1:]]
                     for part in ("generation", "training")}
            rest = [step - generation for r in mine
                    for step, generation in zip(r["step_times"][1:], r.get("generation_seconds", [])[1:])]
            summary[config][variant] = {
                "step_time": statistics.median(timed), "wall": statistics.median(walls) if walls else math.nan,
                "generation_all": parts["generation"], "rest": statistics.median(rest) if rest else math.nan,
                **{part: statistics.median(times) if times else math.nan for part, times in parts.items()},
                "length": statistics.mean(lengths), "peak_mib": max(r["peak_mib"] for r in mine),
                "alloc_retries": sum(r.get("alloc_retries") or 0 for r in mine),
                "triton_compile_seconds": sum(t for r in mine for t in r.get("triton_compile_seconds", [])[1:]),
                "runs": len(mine), "timed_steps": len(timed),
                **({"statistics_from": mine[0]["statistics_from"]} if "statistics_from" in mine[0] else {}),
                "first_step_syncs": next((r["first_step_syncs"] for r in mine if "first_step_syncs" in r), None)}
    return summary


def print_first_step_syncs(section: str, config: str, variants: dict[str, dict[str, Any]]) -> None:
    """The synchronisations of each variant's first step (its first run's census,
    ``sync_census.py``), side by side by the line that caused them: (b) TRL's ``training_step``
    without the generation, (c) our trainer's updates."""
    censuses = {variant: row["first_step_syncs"] for variant, row in variants.items()
                if row.get("first_step_syncs") is not None}
    if not censuses:
        return
    places = list(dict.fromkeys(place for census in censuses.values() for place in census))
    totals = " / ".join(f"{variant} {sum(census.values())}" for variant, census in censuses.items())
    what = ("TRL's training_step (forward, loss, backward; the generation left out)" if section == "b" else
            "updates (statistics, selection, loss, backward, optimizer; all micro-batches)")
    print(f"\n{config}: synchronisations in the first step's {what}: {totals}\n\n"
          f"| kind @ where | {' | '.join(censuses)} |\n"
          f"|---|{'---|' * len(censuses)}")
    for place in places:
        print(f"| {place} | {' | '.join(str(census.get(place, 0)) for census in censuses.values())} |")


def pooled_ratio(new: dict[str, Any], old: dict[str, Any]) -> float:
    """``(G + R_new) / (G + R_old)``: ``G`` the median generation seconds of both variants' timed
    steps together, ``R`` a variant's median of (step - generation) seconds; NaN without
    generation times. When both variants generate the same tokens, generation's step-to-step
    jitter (seconds on a GPU, Hugging Face generate being bound by the host) is common to both,
    and this ratio keeps only what the variant changes: training, rewards and diagnostics."""
    generation = new.get("generation_all", []) + old.get("generation_all", [])
    if not generation or new["rest"] != new["rest"] or old["rest"] != old["rest"]:
        return math.nan
    pooled = statistics.median(generation)
    return (pooled + new["rest"]) / (pooled + old["rest"])


def print_train(section: str, model: str, summary: dict[str, dict[str, Any]],
                settings: dict[str, Any]) -> list[str]:
    """The markdown table of (b) or (c) for one model; returns the target verdicts."""
    old, new = runs.VARIANTS[section]
    what = "TRL's step_time" if section == "b" else "step seconds"
    precision = "bf16 mixed precision" if settings["device"].startswith("cuda") else "fp32"
    if section == "c":  # what the runs computed the statistics from (statistics_from resolved)
        precision += ", statistics from " + "/".join(sorted({row.get("statistics_from", "?") for rows in
                                                              summary.values() for row in rows.values()}))
    precision += f", our tiles {settings['tile_size'] or 'the default'}"
    print(f"\n### {SECTION_TITLES[section]}, {model} model: {settings['prompts']} prompts x "
          f"{settings['completions']} completions, cap {settings['length']} tokens, {precision}, "
          f"{settings['rounds']} rounds x {settings['steps'] - 1} timed steps (each run's first step dropped; "
          "fewer where the time budget says so: see the last column)\n")
    memory = ("peak memory (MiB)" if settings["device"].startswith("cuda")
              else "peak RSS above the start (MiB, an estimate)")
    # (c): the step's parts, from the trainer's metrics line: generation (Hugging Face generate)
    # and training (statistics, selection, loss, backward, update); the rest is rewards and
    # diagnostics
    print(f"| configuration | variant | median {what} (s) | median wall per step (s) | median generation (s) "
          f"| median training (s) | mean completion length | {memory} | runs / timed steps |\n"
          "|---|---|---|---|---|---|---|---|---|")
    verdicts = []
    for config, variants in summary.items():
        for variant, row in variants.items():
            print(f"| {config} | {variant} | {row['step_time']:.3f} | {number(row['wall'], 3)} | "
                  f"{number(row['generation'], 3)} | {number(row['training'], 3)} | "
                  f"{row['length']:.1f} | {row['peak_mib']:.0f} | {row['runs']} / {row['timed_steps']} |")
        if new in variants and old in variants:
            a, b = variants[new], variants[old]
            time_ratio, memory_ratio = a["step_time"] / b["step_time"], a["peak_mib"] / max(b["peak_mib"], 1e-9)
            wall_ratio, generation_ratio, training_ratio = (
                a[key] / b[key] if b[key] == b[key] else math.nan for key in ("wall", "generation", "training"))
            # CPU runs sharing one process: the resident set a run frees stays held, so later runs
            # read ~0 (e.g. 248 against 0 MiB): their ratio is no measurement, and shows as "-"
            shared_process = not settings["device"].startswith("cuda") and settings["isolation"] != "run"
            print(f"| {config} | {new} / {old} | {time_ratio:.3f} | {number(wall_ratio, 3)} | "
                  f"{number(generation_ratio, 3)} | {number(training_ratio, 3)} | "
                  f"{a['length'] / b['length']:.3f} | {'-' if shared_process else f'{memory_ratio:.3f}'} | |")
            verdict = (f"{model} {config}: {new}/{old} step time {time_ratio:.3f} (target <= 1.05, "
                       f"{'met' if time_ratio <= 1.05 else 'NOT met'})")
            if shared_process and section == "b":
                verdict += f", {MEMORY_NOT_JUDGED}"
            elif shared_process:  # (c) has no memory target: said under its table
                print(f"{config}: {MEMORY_NOT_JUDGED}")
            elif section == "b":  # the difference too: a ratio printed as 1.000 can still be above 1
                verdict += (f", peak memory {memory_ratio:.3f} ({a['peak_mib'] - b['peak_mib']:+.4f} MiB; "
                            f"target <= 1.00, {'met' if memory_ratio <= 1.0 else 'NOT met'})")
            verdicts.append(verdict)
            pooled = pooled_ratio(a, b)
            if pooled == pooled:
                print(f"{config}: {new}/{old} step time with the generation pooled {pooled:.3f} (both variants "
                      f"generate the same tokens, so the median generation of all their steps, "
                      f"{statistics.median(a['generation_all'] + b['generation_all']):.3f} s, plus each variant's "
                      f"median rest of the step: {a['rest']:.3f} s against {b['rest']:.3f} s)")
                verdicts.append(f"{model} {config}: {new}/{old} step time with the generation pooled {pooled:.3f} "
                                "(an estimate net of generation's jitter; the target is judged on the line above)")
            if a["triton_compile_seconds"] or b["triton_compile_seconds"]:
                print(f"{config}: Triton compiled or loaded kernels in the timed steps for "
                      f"{a['triton_compile_seconds']:.2f} s in {new}'s runs, {b['triton_compile_seconds']:.2f} s in {old}'s")
            if a["alloc_retries"] or b["alloc_retries"]:
                print(f"{config}: the CUDA caching allocator freed its cache and retried cudaMalloc "
                      f"{a['alloc_retries']} times in {new}'s runs, {b['alloc_retries']} in {old}'s "
                      "(each one synchronises the device and slows its step)")
        print_first_step_syncs(section, config, variants)
        for variant, row in variants.items():
            if not abs(row["length"] - settings["length"]) < 1e-6:
                print(f"WARNING: {config} {variant}: mean completion length {row['length']:.2f} is not the "
                      f"cap {settings['length']}: the variants may not generate the same work")
    print()
    for verdict in verdicts:
        print(verdict)
    return verdicts


# ------------------------------------------------------------------ the parent

def resolve(args: argparse.Namespace) -> dict[str, Any]:
    """Every setting, from the options and the device (the children resolve the same)."""
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    gpu, tiny = device.startswith("cuda"), args.tiny
    models = args.models or ("tiny" if tiny else "0.5b,1.5b" if gpu else "0.5b")
    train_models = args.train_models or ("tiny" if tiny or not gpu else models)
    a_shape = args.a_shape or ("2x4x16" if tiny else "2x8x1024" if gpu else "2x8x64")
    defaults = (2, 4, 8, 2) if tiny else (8, 8, 256, 4) if gpu else (2, 4, 32, 3)
    return {
        "device": device, "sections": args.sections.split(","), "models": models.split(","),
        "train_models": train_models.split(","), "a_shape": [int(v) for v in a_shape.split("x")],
        "a_vocab": args.a_vocab or (1000 if tiny else runs.QWEN_VOCAB),
        "repeats": args.repeats or (9 if gpu and not tiny else 1), "tile_size": args.tile_size,
        "ict_tiles": [text for text in (args.ict_tiles or "").split(",") if text],
        "backward_ab": args.backward_ab,
        "gradient_mask_ab": args.gradient_mask_ab,
        "prompts": args.prompts or defaults[0], "completions": args.completions or defaults[1],
        "length": args.length or defaults[2], "steps": args.steps or defaults[3], "rounds": args.rounds,
        "configs": args.configs.split(","), "threads": args.threads or (1 if tiny else 2), "statistics_from": args.statistics_from,
        "budget": args.budget if args.budget is not None else (420.0 if gpu else 0.0),
        "isolation": args.isolation, "work_dir": args.work_dir,
    }


def a_deadline(start: float, settings: dict[str, Any]) -> float | None:
    """When (a)'s timed calls stop (epoch seconds; None without a budget): a quarter of the
    budget beside (b) or (c), all of it when (a) runs alone (gpu_tile_sweep.sh)."""
    if not settings["budget"]:
        return None
    share = A_BUDGET_SHARE if {"b", "c"} & set(settings["sections"]) else 1.0
    return start + share * settings["budget"]


FAILURES: list[str] = []  # what failed (a child, a run): the script then exits 1, after its tables
STOP: list[str] = []  # set by SIGTERM (a time limit): no child starts after it
CHILD: list[subprocess.Popen] = []  # the child running, for SIGTERM to end


class Stopped(BaseException):
    """A child asked for after SIGTERM (not an ``Exception``: ``run_pairs`` records those as a
    run's error and goes on to the next run)."""


def on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (``timeout`` sends it to the script's process group, the child included): end the
    child running and start no other; the tables of what the children wrote are then printed and
    saved as usual, and the script exits 1. Nothing is raised here, so no table is cut short."""
    if not STOP:  # no print here: the main thread may be inside one
        STOP.append(f"stopped by signal {signum} (a time limit?): no child started after it")
    for child in CHILD:
        with contextlib.suppress(ProcessLookupError):
            os.kill(child.pid, signal.SIGTERM)


def run_child(section: str, settings: dict[str, Any], extra: list[str], out: Path) -> tuple[Any, int]:
    """Run this script as a child (same options); returns what it wrote to ``out`` (None if
    nothing) and its exit status. ``out`` is removed first, so that a file an earlier child left
    there (one of this run's, or of a run before in the same --work-dir) is never read as this
    child's: a child that dies before writing gives None, never an earlier run's figures.
    Raises :class:`Stopped` after SIGTERM instead of starting the child."""
    if STOP:
        raise Stopped
    out.unlink(missing_ok=True)
    command = [sys.executable, __file__, *sys.argv[1:], "--child", section, "--out", str(out),
               "--work-dir", settings["work_dir"], *extra]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false"}
    with subprocess.Popen(command, env=env) as child:
        CHILD[:] = [child]
        try:
            status = child.wait()
        finally:
            CHILD.clear()
    if STOP:
        print(f"\n{STOP[0]}; the tables below hold what the children wrote before it", flush=True)
    if status:
        print(f"section {section} {extra}: the child failed (exit {status})", flush=True)
        FAILURES.append(f"section {section} {' '.join(extra)}: exit {status}")
    return (json.loads(out.read_text()) if out.exists() else None), status


def train_section(section: str, settings: dict[str, Any], section_end: float | None,
                  output: dict[str, Any], save: Any) -> None:
    """(b) or (c) for every model: interleaved runs, then the table of each model (into
    ``output``, saved after each model)."""
    models = settings["train_models"]
    for position, model in enumerate(models):
        if STOP:
            break
        deadline = (None if section_end is None else
                    time.time() + (section_end - time.time()) / (len(models) - position))
        out = Path(settings["work_dir"]) / f"{section}-{model}.json"
        print(f"\n{SECTION_TITLES[section]}, {model}: runs (seconds, per-step figures)", flush=True)
        if settings["isolation"] == "model":
            extra = ["--child-model", model] + ([] if deadline is None else ["--deadline", str(deadline)])
            # the runs this child finished before any failure: each was written after it ended
            results = run_child(section, settings, extra, out)[0] or []
        else:
            def one(variant: str, config: str, index: int, steps: int, model: str = model,
                    out: Path = out) -> dict[str, Any]:
                got, status = run_child(section, settings, ["--child-model", model, "--only",
                                                            f"{variant}:{config}:{index}:{steps}"], out)
                if status or not got:  # an error, never figures: run_pairs records it as the run's
                    raise RuntimeError(f"the run's process failed (exit {status}; its output is above)")
                return got[0]
            configs = settings["configs"] if section == "b" else ["full"]
            results = []

            def keep(done: list[dict[str, Any]], kept: list[dict[str, Any]] = results) -> None:
                kept[:] = done

            with contextlib.suppress(Stopped):  # SIGTERM: the runs so far, kept after each
                runs.run_pairs(runs.plan_pairs(configs, settings["rounds"], section), settings["steps"],
                               deadline, one, keep)
        FAILURES.extend(f"section {section} {model} {r.get('variant')} {r.get('config')} round {r.get('round')}: "
                        f"{r['error']}" for r in results if "error" in r)
        summary = summarize(results, section)
        output[model] = {"runs": results, "summary": summary,
                         "verdicts": print_train(section, model, summary, settings)}
        save()


def check_options(args: argparse.Namespace) -> str | None:
    """What is wrong with the options (None: nothing): counts below their least (``--steps`` 2:
    each run's first step is a warm-up, never timed, so one step would time the warm-up),
    a malformed ``--a-shape``, a section, configuration or model that does not exist, a malformed
    ``--tile-size`` or ``--ict-tiles`` (each named as itself)."""
    least = {"repeats": 1, "rounds": 1, "steps": 2, "prompts": 1, "completions": 1, "length": 1, "threads": 1,
             "a_vocab": 2}
    for name, low in least.items():
        if getattr(args, name) is not None and getattr(args, name) < low:
            return f"--{name.replace('_', '-')}: at least {low}, not {getattr(args, name)}"
    if args.budget is not None and not args.budget >= 0:
        return f"--budget: seconds >= 0, not {args.budget}"
    if args.a_shape is not None:
        cells = args.a_shape.split("x")
        if len(cells) != 3 or not all(cell.isdigit() and int(cell) > 0 for cell in cells):
            return f"--a-shape: PROMPTSxCOMPLETIONSxPOSITIONS, three positive integers, not {args.a_shape!r}"
    for option, given, known in (("--sections", args.sections, SECTION_TITLES), ("--configs", args.configs,
                                                                                ("full", "lora")),
                                 ("--models", args.models, runs.SHAPES), ("--train-models", args.train_models,
                                                                          runs.SHAPES)):
        unknown = [name for name in given.split(",") if name not in known] if given is not None else []
        if unknown:
            return f"{option}: {', '.join(unknown)} unknown (known: {', '.join(known)})"
    from ict.core.stats import parse_tile_size

    for option, texts in (("--tile-size", [args.tile_size]),
                          ("--ict-tiles", [text for text in (args.ict_tiles or "").split(",") if text])):
        for text in texts:
            try:
                tile = parse_tile_size(text)
            except ValueError as error:
                return f"{option}: {error}"
            if tile is None and option == "--ict-tiles":  # a row's tile is a size; 'auto' is the ICT row
                return f"--ict-tiles: TOKENSxVOCAB tiles (comma-separated), not {text!r}"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", default="a,b,c", help="which sections: a, b, c (comma-separated)")
    parser.add_argument("--models", default=None, help="0.5b, 1.5b (tiny) for (a) and, on a GPU, (b), (c); "
                        "default: 0.5b,1.5b on a GPU, 0.5b on a CPU")
    parser.add_argument("--train-models", default=None, help="models of (b) and (c); default: --models on a "
                        "GPU, tiny on a CPU")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--tiny", action="store_true", help="a seconds-long run (the test)")
    parser.add_argument("--a-shape", default=None, help="(a) PROMPTSxCOMPLETIONSxPOSITIONS (GPU 2x8x1024, CPU 2x8x64)")
    parser.add_argument("--a-vocab", type=int, default=None, help="(a) vocabulary (default 151936)")
    parser.add_argument("--repeats", type=int, default=None, help="(a) timed calls per row (GPU 9, CPU 1)")
    parser.add_argument("--tile-size", default=None, help="TOKENSxVOCAB of our statistics' tiles: (a) tile_size= "
                        "of ours, (b) ICT's stats_tile_size, (c) both variants' stats_tile_size (default: the device's)")
    parser.add_argument("--ict-tiles", default=None, help="(a) extra rows: ICT from hidden states at each "
                        "TOKENSxVOCAB tile (comma-separated), e.g. 883x151936 (whole-vocabulary tiles)")
    parser.add_argument("--backward-ab", action="store_true", help="(a) an extra row: our GRPO path from "
                        "hidden states with its backward in the forward's tiles (as before backward_tile)")
    parser.add_argument("--gradient-mask-ab", action="store_true", help="(a) an extra row: our GRPO path from "
                        "hidden states without its gradient mask (its backward reads its rows' count back)")
    parser.add_argument("--prompts", type=int, default=None, help="(b, c) prompts per step (GPU 8)")
    parser.add_argument("--completions", type=int, default=None, help="(b, c) completions per prompt (GPU 8)")
    parser.add_argument("--length", type=int, default=None, help="(b, c) completion length cap (GPU 256)")
    parser.add_argument("--steps", type=int, default=None, help="(b, c) steps per run, first dropped (GPU 4)")
    parser.add_argument("--rounds", type=int, default=2, help="(b, c) rounds (variant order alternates)")
    parser.add_argument("--configs", default="full,lora", help="(b) full, lora")
    parser.add_argument("--statistics-from", default="auto", choices=("auto", "logits", "hidden"),
                        help="(c) the trainer's statistics_from (auto: its default)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default 2; --tiny: 1)")
    parser.add_argument("--budget", type=float, default=None, help="seconds for everything; rounds of (b), "
                        "(c) that would pass it are skipped (default: 420 on a GPU, none on a CPU)")
    parser.add_argument("--isolation", choices=("model", "run"), default="model",
                        help="(b, c) one process per model and section, or per run")
    parser.add_argument("--json", default=None, help="write every figure to this JSON file")
    parser.add_argument("--work-dir", default=None, help="models and scratch (default: a temporary folder)")
    for hidden in ("--child", "--child-model", "--out", "--deadline", "--only"):
        parser.add_argument(hidden, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    problem = check_options(args)
    if problem:
        parser.error(problem)
    settings = resolve(args)
    if args.child == "a":
        child_a(settings, Path(args.out), None if args.deadline is None else float(args.deadline))
        return
    if args.child:
        child_train(args.child, settings, args.child_model, Path(args.out),
                    None if args.deadline is None else float(args.deadline), args.only)
        return
    start = time.time()
    temporary = settings["work_dir"] is None
    settings["work_dir"] = settings["work_dir"] or tempfile.mkdtemp(prefix="ict_cost_")
    Path(settings["work_dir"]).mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"settings": settings, "environment": runs.environment(settings["device"])}
    print(f"settings: {json.dumps(settings)}\nenvironment: {json.dumps(report['environment'])}", flush=True)

    def save() -> None:
        report["seconds"] = round(time.time() - start, 1)
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1, default=str))

    verdicts: list[str] = []
    budget_end = start + settings["budget"] if settings["budget"] else None
    signal.signal(signal.SIGTERM, on_sigterm)
    for section in ("a", "b", "c"):
        if section not in settings["sections"] or STOP:
            continue
        section_start = time.time()
        if section == "a":
            print(f"\n{SECTION_TITLES['a']}", flush=True)
            deadline = a_deadline(start, settings)
            extra = [] if deadline is None else ["--deadline", str(deadline)]
            results = run_child("a", settings, extra, Path(settings["work_dir"]) / "a.json")[0] or {}
            verdicts += print_a(results, settings)
            report["a"] = results
        else:
            share = 2 / 3 if section == "b" and "c" in settings["sections"] else 1.0
            section_end = None if budget_end is None else time.time() + (budget_end - time.time()) * share
            report[section] = {}
            train_section(section, settings, section_end, report[section], save)
            verdicts += [v for model in report[section].values() for v in model["verdicts"]]
        report.setdefault("section_seconds", {})[section] = round(time.time() - section_start, 1)
        print(f"\n{SECTION_TITLES[section]}: {time.time() - section_start:.0f} s", flush=True)
        save()
    report["verdicts"] = verdicts
    save()
    print("\nall targets:\n" + "\n".join(verdicts) + f"\n\ntotal {time.time() - start:.0f} s", flush=True)
    if temporary:
        shutil.rmtree(settings["work_dir"], ignore_errors=True)
    FAILURES.extend(STOP)
    if FAILURES:
        report["failures"] = FAILURES
        save()
        sys.exit("failed:\n" + "\n".join(FAILURES))


if __name__ == "__main__":
    main()

"""Section (a) of ``benchmarks/ict_cost.py``: the LM head's statistics, forward + backward, each
path of :data:`A_ROWS` timed in interleaved rounds (each in its own shuffled order) with its peak
memory (:func:`head_rows`; the module doc of ``ict_cost.py`` says how), and their table and target
verdicts (:func:`print_a`)."""

from __future__ import annotations

import contextlib
import math
import random
import statistics
import time
from typing import Any
from unittest import mock

import head_step  # beside this file
import ict_cost_runs as runs

A_TITLE = "(a) LM-head statistics"
A_ROWS = {
    "trl": "TRL 1.16 fused head (ChunkedLogProbFunction)",
    "naive": "naive: logits (bf16 on GPU), fp32 log_softmax, gather, entropy",
    "grpo_hidden": "ours GRPO from hidden states",
    "ict_hidden": "ours ICT from hidden states (+ JS, selection, loss)",
    "grpo_logits": "ours GRPO from logits (+ the logits matmul)",
    "ict_logits": "ours ICT from logits (+ matmul, JS, selection, loss)",
}


def parse_tile(text: str | None) -> tuple[int, int] | None:
    """``--tile-size`` through the library's parser (``"4096x8192"`` -> ``(4096, 8192)``)."""
    from ict.core.stats import parse_tile_size

    try:
        return parse_tile_size(text)
    except ValueError as error:
        raise SystemExit(f"--tile-size: {error}") from None


def forward_tiles_in_backward() -> Any:
    """The backward of our statistics in the forward's tiles, as before ``backward_tile`` (every
    token tile adds its share into the head's gradient): a context in which the library's
    ``LinearHead.backward_tile`` is replaced, for an A/B of that change in one process."""
    from ict.core.stats.heads import LinearHead

    return mock.patch.object(LinearHead, "backward_tile", staticmethod(lambda num_rows, tokens, vocab: (tokens, vocab)))


def head_rows(width: int, vocab: int, shape: tuple[int, int, int], device: str, repeats: int,
              tile_size: tuple[int, int] | None, deadline: float | None = None,
              ict_tiles: tuple[tuple[int, int], ...] = (), backward_ab: bool = False,
              gradient_mask_ab: bool = False) -> dict[str, Any]:
    """Time and peak memory of every row of :data:`A_ROWS` at one shape (see the module doc),
    plus ICT from hidden states at each of ``ict_tiles``, with ``backward_ab`` our GRPO path
    from hidden states with its backward in the forward's tiles (:func:`forward_tiles_in_backward`)
    and with ``gradient_mask_ab`` the same path without its gradient mask (its backward finds the
    rows with a gradient by reading their count back, a device sync);
    fewer timed calls than ``repeats`` (at least 1) where another round, as long as the longest
    so far, would end after ``deadline``."""
    import torch

    prompts, completions, length = shape
    gpu = device.startswith("cuda")
    extra: dict[str, Any] = {} if tile_size is None else {"tile_size": tile_size}
    batch = head_step.head_batch(prompts * completions, length, width, vocab, device, group_size=completions)

    def naive() -> Any:
        log_probs = torch.log_softmax((batch.hidden @ batch.weight.T).float(), dim=-1)
        with torch.no_grad():
            (log_probs.exp() * log_probs).sum(-1).neg()  # the entropy, as a logging path computes it
        return (log_probs.gather(-1, batch.token_ids.unsqueeze(-1)).squeeze(-1) * batch.advantages[:, None]).sum()

    functions: dict[str, Any] = {"trl": lambda: head_step.trl_head(batch), "naive": naive}
    for name in ("grpo_hidden", "ict_hidden", "grpo_logits", "ict_logits"):
        method, source = name.split("_")
        functions[name] = lambda method=method, source=source: head_step.ours(batch, method, source, **extra)
    labels = dict(A_ROWS)
    for tile in ict_tiles:
        name = f"ict_hidden_{tile[0]}x{tile[1]}"
        functions[name] = lambda tile=tile: head_step.ours(batch, "ict", "hidden", tile_size=tile)
        labels[name] = f"ours ICT from hidden states, tile {tile[0]}x{tile[1]}"
    contexts = {}
    if backward_ab:
        functions["grpo_hidden_forward_tiles"] = functions["grpo_hidden"]
        labels["grpo_hidden_forward_tiles"] = "ours GRPO from hidden states, backward in the forward's tiles"
        contexts["grpo_hidden_forward_tiles"] = forward_tiles_in_backward
    if gradient_mask_ab:
        functions["grpo_hidden_unmasked"] = lambda: head_step.ours(batch, "grpo", "hidden", gradient_mask=False, **extra)
        labels["grpo_hidden_unmasked"] = "ours GRPO from hidden states, no gradient mask (the backward reads back)"
    autocast = (torch.autocast("cuda", dtype=torch.bfloat16) if gpu else contextlib.nullcontext())
    meter = runs.MemoryMeter(device)
    results: dict[str, dict[str, Any]] = {name: {"label": label, "seconds": [], "peak_mib": [], "started": []}
                                          for name, label in labels.items()}
    origin, origin_epoch = time.perf_counter(), time.time()  # "started" counts from here

    def call(name: str, warm_up: bool) -> None:
        batch.clear_grads()
        if warm_up:
            runs.free_memory(device)
        meter.start()
        start = time.perf_counter()
        try:
            with contexts.get(name, contextlib.nullcontext)():
                with autocast:
                    loss = functions[name]()
                loss.backward()
            runs.synchronize(device)
        except (torch.OutOfMemoryError, MemoryError):
            results[name]["error"] = "out of memory"
            runs.free_memory(device)
            print(f"    {name}: out of memory", flush=True)
            return
        results[name]["seconds"].append(time.perf_counter() - start)
        results[name]["started"].append(round(start - origin, 4))  # seconds into the timing: the call order
        results[name]["peak_mib"].append(meter.peak_mib())
        del loss

    for name in functions:  # a warm-up call of every row
        call(name, True)
    warm_up = sum(sum(results[name]["seconds"]) for name in functions)
    for name in functions:
        results[name]["seconds"], results[name]["peak_mib"], results[name]["started"] = [], [], []
    print(f"    warm-up done ({warm_up:.1f} s for all rows, compiles included)", flush=True)
    longest, done = 0.0, 0
    names = list(functions)
    for round_index in range(repeats):  # the timed calls, rows interleaved
        if done and deadline is not None and time.time() + longest > deadline:
            print(f"    {done} timed call(s) per row instead of {repeats}: the time budget", flush=True)
            break
        round_start = time.perf_counter()
        order = list(names)  # each round its own order: no row always follows the same one (a rotation
        random.Random(round_index).shuffle(order)  # would keep every row's predecessor)
        for name in order:
            if "error" not in results[name]:
                call(name, False)
        longest, done = max(longest, time.perf_counter() - round_start), done + 1
    repeats = done
    for result in results.values():
        if result["seconds"]:
            result["median"] = statistics.median(result["seconds"])
            result["peak"] = max(result["peak_mib"])
    return {"rows": results, "origin_epoch": origin_epoch, "tokens": prompts * completions * length, "d": width,
            "V": vocab, "repeats": repeats, "shape": list(shape), "dtype": "bf16 autocast" if gpu else "fp32"}


def ratio(rows: dict[str, Any], name: str, key: str) -> float:
    """Row ``name``'s ``key`` (``median`` seconds or ``peak`` MiB) over TRL's head's."""
    row, base = rows[name], rows["trl"]
    return row[key] / base[key] if key in row and base.get(key) else math.nan


def round_ratios(rows: dict[str, Any], name: str) -> list[float]:
    """Row ``name``'s seconds over TRL's head's in each timed round (the two calls of a round ran
    seconds apart, so a slow drift of the machine moves both): the spread a median ratio's verdict
    should be read against."""
    return [mine / base for mine, base in zip(rows[name].get("seconds", []), rows["trl"].get("seconds", []))
            if base > 0]


def print_a(results: dict[str, Any], settings: dict[str, Any]) -> list[str]:
    """The markdown tables of (a) and the target lines; returns the target verdicts."""
    verdicts = []
    gpu = settings["device"].startswith("cuda")
    for model, result in results.items():
        prompts, completions, length = result["shape"]
        rows = result["rows"]
        print(f"\n### {A_TITLE}, {model} shape: {prompts} prompts x {completions} completions x "
              f"{length} positions = {result['tokens']:,} tokens, d={result['d']}, V={result['V']:,}, "
              f"{result['dtype']}, forward + backward, median of {result['repeats']} after a warm-up, "
              f"our tiles {settings['tile_size'] or 'the default'}\n")
        print("| path | seconds | x TRL's head | peak memory above the inputs (MiB) | x TRL's head |\n"
              "|---|---|---|---|---|")
        for name, row in rows.items():
            if "median" not in row:
                print(f"| {row['label']} | {row.get('error', 'not run')} | | | |")
                continue
            seconds = f"{row['median']:.4f}"
            if "error" in row:  # a timed call failed after others had run: a median of fewer calls
                seconds += f" (median of {len(row['seconds'])}, then {row['error']})"
            print(f"| {row['label']} | {seconds} | {number(ratio(rows, name, 'median'), 2)} | "
                  f"{row['peak']:.1f} | {number(ratio(rows, name, 'peak'), 2)} |")
        checks = ([("ICT from hidden time <= 1.5x TRL's head", ratio(rows, "ict_hidden", "median"), 1.5, "ict_hidden"),
                   ("ICT from hidden memory <= 1.0x TRL's head", ratio(rows, "ict_hidden", "peak"), 1.0, None),
                   ("GRPO from hidden time <= 1.0x TRL's head", ratio(rows, "grpo_hidden", "median"), 1.0,
                    "grpo_hidden")]
                  if gpu else
                  [(f"CPU: ICT <= 1.0x TRL's head at V={result['V']:,} from hidden states "
                    f"({completions * prompts} x {length} tokens, {settings['threads']} threads)",
                    ratio(rows, "ict_hidden", "median"), 1.0, "ict_hidden")])
        print()
        for text, value, limit, timed in checks:
            verdict = f"target {text}: {value:.3f}x ({'met' if value <= limit else 'NOT met'})"
            print(verdict)
            verdicts.append(f"{model}: {verdict}")
            per_round = round_ratios(rows, timed) if timed else []
            if len(per_round) > 1:
                print(f"  the same in each of the {len(per_round)} rounds: median {statistics.median(per_round):.3f}, "
                      f"from {min(per_round):.3f} to {max(per_round):.3f}")
    return verdicts


def number(value: float, digits: int) -> str:
    """``value`` with ``digits`` decimals, or ``-`` when it is NaN."""
    return "-" if value != value else f"{value:.{digits}f}"

"""Peak memory and time of the token statistics: from hidden states vs from materialised logits.

Both variants start from the same inputs, ``hidden [N, d]`` (as ``B=8`` completions of one
prompt, ``T = N / 8``) and an LM head ``weight [V, d]``, both requiring gradients, and run
forward + backward of ``sum(log_probs)`` with a group JS score (``--reference``, default ICT's
default reference; one group of 8, the last quarter of positions alive in half of the rows so
that the absorbing variants have finished rows):

- ``logits``: ``logits = hidden @ W.T`` (what a model's LM head builds), then
  :func:`ict.core.stats.token_statistics`;
- ``hidden``: :func:`ict.core.stats.token_statistics_from_hidden` (no ``[N, V]`` tensor).

Each (variant, V) runs alone in a fresh process; its peak resident set size (``ru_maxrss``)
minus the one after the inputs were built is the extra memory (gradients of the inputs
included: ``grad_weight`` is ``[V, d]`` in both). Large blocks are served by mmap
(``MALLOC_MMAP_THRESHOLD_``) so that freed memory is returned and the peak is that of live
memory. Default sizes: Qwen2.5's V=151,936, N=4096, d=896, and V=32,768 / 65,536 to show how
the extra memory scales with V.

    PYTHONPATH=$PWD python benchmarks/stats_memory.py [--tiny] [--reference group_mean_loo]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import torch

from ict.core.selectors import ICT_DEFAULT_REFERENCE
from ict.core.stats import GROUP_MEAN_VARIANTS, token_statistics, token_statistics_from_hidden

GROUP_SIZE = 8
VARIANTS = ("hidden", "logits")


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def worker(variant: str, vocab: int, positions: int, width: int, reference: str) -> dict:
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(0)
    length = positions // GROUP_SIZE
    hidden = torch.randn(GROUP_SIZE, length, width, generator=generator).requires_grad_()
    weight = torch.randn(vocab, width, generator=generator).mul_(width**-0.5).requires_grad_()
    token_ids = torch.randint(0, vocab, (GROUP_SIZE, length), generator=generator)
    mask = torch.ones(GROUP_SIZE, length, dtype=torch.bool)
    mask[GROUP_SIZE // 2:, length - length // 4:] = False  # half the rows finish early
    group_ids = torch.zeros(GROUP_SIZE, dtype=torch.long)
    before = peak_rss_bytes()
    start = time.perf_counter()
    if variant == "hidden":
        stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, (reference,), group_ids)
    else:
        logits = hidden @ weight.T
        stats = token_statistics(logits, token_ids, mask, 1.0, (reference,), group_ids=group_ids)
        del logits
    stats.log_probs.sum().backward()
    seconds = time.perf_counter() - start
    return {"peak_bytes": peak_rss_bytes(), "extra_bytes": peak_rss_bytes() - before, "seconds": seconds}


def spawn(variant: str, vocab: int, positions: int, width: int, reference: str) -> dict:
    command = [sys.executable, __file__, "--worker", variant, "--vocab", str(vocab),
               "--positions", str(positions), "--width", str(width), "--reference", reference]
    environment = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "131072", "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=environment)
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines()
        return {"error": lines[-1] if lines else f"exit code {result.returncode}"}
    return json.loads(result.stdout.strip().splitlines()[-1])


def extra_ratio(hidden_extra: int, logits_extra: int) -> str:
    """``hidden_extra / logits_extra`` to 3 decimals; ``"n/a (logits extra 0)"`` when the logits
    run raised no peak above its inputs' (``ru_maxrss`` is a high-water mark: tiny sizes may
    stay under the import's peak), where the ratio is undefined."""
    if logits_extra <= 0:
        return "n/a (logits extra 0)"
    return f"{hidden_extra / logits_extra:.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    parser.add_argument("--vocab", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--positions", type=int, default=4096, help="N response positions (default 4096)")
    parser.add_argument("--width", type=int, default=896, help="hidden size d (default 896, Qwen2.5-0.5B)")
    parser.add_argument("--vocabs", default="32768,65536,151936", help="comma-separated vocabulary sizes")
    parser.add_argument("--reference", default=ICT_DEFAULT_REFERENCE, choices=tuple(GROUP_MEAN_VARIANTS),
                        help=f"the group JS reference (default {ICT_DEFAULT_REFERENCE})")
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker, args.vocab, args.positions, args.width, args.reference)))
        return
    positions, width = (64, 16) if args.tiny else (args.positions, args.width)
    vocabs = [500, 1000, 2000] if args.tiny else [int(v) for v in args.vocabs.split(",")]
    print(f"Token statistics forward + backward, {args.reference} JS, N={positions}, d={width}, float32, "
          "CPU 1 thread")
    print()
    print("| V | variant | time (s) | peak (MiB) | extra (MiB) | extra beyond input grads (MiB) | hidden/logits extra |")
    print("|---|---|---|---|---|---|---|")
    for vocab in vocabs:
        results = {variant: spawn(variant, vocab, positions, width, args.reference) for variant in VARIANTS}
        inputs = (vocab + positions) * width * 4
        for variant in VARIANTS:
            row = results[variant]
            if "error" in row:
                print(f"| {vocab:,} | {variant} | failed: {row['error']} |")
                continue
            ratio = "-"
            if variant == "hidden" and "error" not in results["logits"]:
                ratio = extra_ratio(row["extra_bytes"], results["logits"]["extra_bytes"])
            print(
                f"| {vocab:,} | {variant} | {row['seconds']:.1f} | {row['peak_bytes'] / 2**20:.0f} | "
                f"{row['extra_bytes'] / 2**20:.0f} | {(row['extra_bytes'] - inputs) / 2**20:.0f} | {ratio} |",
                flush=True,
            )
    print()
    print("extra = peak RSS during forward + backward minus RSS after building hidden and W "
          "(includes grad_hidden and grad_weight [V, d]); extra beyond input grads = extra - (V + N) * d * 4 bytes; "
          "n/a: the logits run's peak stayed at or under the one before it (ru_maxrss is a high-water mark)")


if __name__ == "__main__":
    main()

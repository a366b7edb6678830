"""Time of the token statistics per JS reference, against the same statistics without a JS score.

No-grad statistics of a batch shaped like the CPU comparison's (64 completions x 32 positions,
V = 49,152 and d = 576 as in SmolLM2-135M), from the logits (`token_statistics`) and from the
hidden states (`token_statistics_from_hidden`, the TRL integration's path). Cases run
interleaved round by round; printed: the median seconds per case and its ratio to the case
without a JS score (the cost of the score on top of log-probs, entropy and Renyi-2)::

    PYTHONPATH=$PWD python benchmarks/stats_speed.py --rounds 5 --threads 1
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ict.core.stats import token_statistics, token_statistics_from_hidden  # noqa: E402

REFERENCES = {"none": (), "group_mean": ("group_mean",), "seq_mean": ("seq_mean",), "prev": ("prev",)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=64, help="completions (groups of 8)")
    parser.add_argument("--length", type=int, default=32)
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--width", type=int, default=576)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    generator = torch.Generator().manual_seed(0)
    hidden = torch.randn(args.rows, args.length, args.width, generator=generator)
    weight = torch.randn(args.vocab, args.width, generator=generator) / args.width ** 0.5
    logits = hidden @ weight.T
    tokens = torch.randint(0, args.vocab, (args.rows, args.length), generator=generator)
    mask = torch.ones(args.rows, args.length, dtype=torch.bool)
    groups = torch.arange(args.rows) // 8

    def run(path: str, references: tuple[str, ...]) -> None:
        with torch.no_grad():
            if path == "logits":
                token_statistics(logits, tokens, mask, 1.0, references, group_ids=groups)
            else:
                token_statistics_from_hidden(hidden, weight, tokens, mask, 1.0, references, group_ids=groups)

    cases = [(path, name) for path in ("logits", "hidden") for name in REFERENCES]
    times: dict[tuple[str, str], list[float]] = {case: [] for case in cases}
    run("logits", ())  # warm-up
    for _ in range(args.rounds):
        for path, name in cases:
            start = time.perf_counter()
            run(path, REFERENCES[name])
            times[(path, name)].append(time.perf_counter() - start)
    print(f"{args.rows} x {args.length} positions, V = {args.vocab}, d = {args.width}, "
          f"{args.threads} thread(s), median of {args.rounds} rounds\n")
    print("| path | JS reference | seconds | ratio to no JS score |\n|---|---|---|---|")
    for path, name in cases:
        median = statistics.median(times[(path, name)])
        base = statistics.median(times[(path, "none")])
        print(f"| {path} | {name} | {median:.3f} | {median / base:.2f} |")


if __name__ == "__main__":
    main()

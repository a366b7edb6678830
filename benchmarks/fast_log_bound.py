"""How far the group kernel's fast logarithm can move a score: a worst-case bound, in float64.

On an NVIDIA GPU ``_group_kernel`` (``ict/core/stats/triton_tiles.py``) takes its logarithms with
``lg2.approx.f32`` (libdevice's ``fast_log2f``). CUDA documents its error as at most 2^-22
absolute for x in [0.5, 2] and 2 ulp elsewhere; this script takes the looser reading
``delta(x) = 2^-22 max(1, |log2 x|)`` (2 ulp of ``log2 x`` is at most ``2^-22 |log2 x|``) and
lets every logarithm err by it in the same direction. The kernel's sums, and so the scores
(``ict.core.stats.scores.scores_from_partials``), then move by at most

- JS (``H(m) - H(p)/2 - H(q)/2``, ``H(m)`` and ``H(q)`` from the kernel, ``H(p)`` from the
  statistics pass, which takes no logarithm on the GPU):
  ``ln 2 (sum_v m_v delta(m_v) + 1/2 sum_v q_v delta(q_v))``;
- KL (``-H(p) - sum_v p_v log max(q_v, TINY)``): ``ln 2 sum_v p_v delta(max(q_v, TINY))``.

Each row is scored against its group's mean (``group_mean``), the mean with one absorbed point
mass on token 0 (``group_mean_absorbing``, a finished row's end token) and the leave-one-out
means (``group_mean_loo``, ``group_mean_loo_absorbing``; the kernel computes no leave-one-out
KL). Logits are N(0, s^2), ``--group`` rows per scale. Printed: the largest bound and the
largest score of each reference and metric; exit status 3 when a bound exceeds the agreement
target (1e-5 nats; ``stats_agreement.py`` measures the real error on a GPU)::

    python benchmarks/fast_log_bound.py                 # V = 151,936, s = 0.1, 1, 4, 16
"""

from __future__ import annotations

import argparse
import json
import math
import sys

import torch

MISSED = 3
TARGET = 1e-5
ERROR = 2.0 ** -22
TINY = torch.finfo(torch.float32).tiny


def log2_error(x: torch.Tensor) -> torch.Tensor:
    """The worst-case error of ``lg2.approx.f32(x)``, as read above (float64, elementwise)."""
    return ERROR * torch.clamp(torch.log2(x).abs(), min=1.0)


def references(p: torch.Tensor) -> dict[str, torch.Tensor]:
    """Each group reference ``q [G, V]`` for the rows ``p [G, V]`` (float64); the absorbing ones
    add one finished row's point mass on token 0 to the group."""
    rows = p.shape[0]
    point = torch.zeros_like(p[0])
    point[0] = 1.0
    total, absorbed = p.sum(0), p.sum(0) + point
    return {
        "group_mean": (total / rows).expand_as(p),
        "group_mean_absorbing": (absorbed / (rows + 1)).expand_as(p),
        "group_mean_loo": (total - p) / (rows - 1),
        "group_mean_loo_absorbing": (absorbed - p) / rows,
    }


def bounds(p: torch.Tensor, q: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """``metric -> (bound [G], score [G])`` for rows ``p`` against references ``q`` (float64)."""
    m = 0.5 * (p + q)

    def entropy(x: torch.Tensor) -> torch.Tensor:
        return -torch.where(x > 0, x * x.log(), torch.zeros_like(x)).sum(-1)

    q_floor = q.clamp(min=TINY)
    js = entropy(m) - 0.5 * entropy(p) - 0.5 * entropy(q)
    kl = -entropy(p) - (p * q_floor.log()).sum(-1)
    return {
        "js": (math.log(2) * ((m * log2_error(m.clamp(min=TINY))).sum(-1)
                              + 0.5 * (q * log2_error(q_floor)).sum(-1)), js),
        "kl": (math.log(2) * (p * log2_error(q_floor)).sum(-1), kl),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=151_936)
    parser.add_argument("--group", type=int, default=8, help="rows of a group (at least 2)")
    parser.add_argument("--scales", default="0.1,1,4,16", help="standard deviations s of the logits")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    if args.group < 2 or args.vocab < 2:
        parser.error("--group and --vocab must be at least 2")
    try:
        scales = [float(value) for value in args.scales.split(",")]
    except ValueError:
        parser.error(f"--scales must be numbers separated by commas, got {args.scales!r}")
    generator = torch.Generator().manual_seed(args.seed)
    worst: dict[str, dict[str, dict[str, float]]] = {}
    print(f"V = {args.vocab:,}, {args.group} rows a group; lg2.approx error read as 2^-22 max(1, |log2 x|), "
          "every logarithm erring the same way\n")
    print("| reference | metric | s | largest bound (nats) | largest score (nats) |")
    print("|---|---|---|---|---|")
    for scale in scales:
        logits = torch.randn(args.group, args.vocab, generator=generator, dtype=torch.float64) * scale
        p = torch.softmax(logits, dim=-1)
        for reference, q in references(p).items():
            for metric, (bound, score) in bounds(p, q).items():
                if metric == "kl" and "loo" in reference:
                    continue  # no kernel: folded in torch, with exact logarithms
                print(f"| {reference} | {metric} | {scale:g} | {bound.max().item():.2e} | {score.max().item():.3g} |")
                entry = worst.setdefault(reference, {}).setdefault(metric, {"bound": 0.0, "score": 0.0})
                entry["bound"] = max(entry["bound"], bound.max().item())
                entry["score"] = max(entry["score"], score.max().item())
    largest = max(entry["bound"] for metrics in worst.values() for entry in metrics.values())
    met = largest <= TARGET
    print(f"\nlargest bound {largest:.2e} nats; target <= {TARGET:g}: {'met' if met else 'NOT MET'}")
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"settings": vars(args), "worst": worst, "largest": largest, "met": met}, handle, indent=1)
    return 0 if met else MISSED


if __name__ == "__main__":
    sys.exit(main())

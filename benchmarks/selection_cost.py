"""Host cost of ICT's selection + loss + backward on given statistics (no model, no statistics
pass), with and without ties at the threshold: the part of a step that the top-fraction ranking
and its tie rule change. Median milliseconds over ``--repeats`` calls after 3 warm-up calls, a
fresh generator per call (``seed = i``), at 64 x 32 and 16 x 1,024 response tokens, sequence and
group scope (groups of 8). ``ties``: the group-mean JS scores on 4 levels, so nearly every
population draws; ``no ties``: uniform scores.

For an A/B of the code, run it under both checkouts, alternating::

    for i in 1 2 3; do PYTHONPATH=$NEW python benchmarks/selection_cost.py;
                       PYTHONPATH=$OLD python benchmarks/selection_cost.py; done
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from ict.core.loss import PolicyLossConfig, policy_loss
from ict.core.selectors import SelectionInputs, method_train_options, resolve_options, select
from ict.core.stats import TokenStatistics


def milliseconds(rows: int, length: int, scope: str, ties: bool, repeats: int) -> float:
    generator = torch.Generator().manual_seed(0)
    log_probs = torch.randn(rows, length, generator=generator).requires_grad_()
    scores = torch.rand(rows, length, generator=generator)
    if ties:
        scores = (scores * 4).floor() / 4
    stats = TokenStatistics(log_probs, torch.rand(rows, length, generator=generator),
                            torch.rand(rows, length, generator=generator),
                            {"group_mean": scores, "group_mean_absorbing": scores})
    mask = torch.ones(rows, length, dtype=torch.bool)
    advantages, group_ids = torch.randn(rows, generator=generator), torch.arange(rows) // 8
    options = resolve_options("ict", {"scope": scope})
    config = PolicyLossConfig(aggregation=method_train_options("ict")["aggregation"])
    times = []
    for call in range(repeats + 3):
        log_probs.grad = None
        start = time.perf_counter()
        inputs = SelectionInputs(stats=stats, response_mask=mask, advantages=advantages, group_ids=group_ids,
                                 generator=torch.Generator().manual_seed(call))
        selection = select("ict", inputs, **options)
        policy_loss(stats, log_probs.detach(), advantages, mask, selection.mask, config)[0].backward()
        times.append(time.perf_counter() - start)
    return statistics.median(times[3:]) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print("| tokens | scope | no ties (ms) | ties (ms) |\n|---|---|---|---|")
    for rows, length in ((64, 32), (16, 1024)):
        for scope in ("sequence", "group"):
            plain, tied = (milliseconds(rows, length, scope, ties, args.repeats) for ties in (False, True))
            print(f"| {rows} x {length} | {scope} | {plain:.3f} | {tied:.3f} |", flush=True)


if __name__ == "__main__":
    main()

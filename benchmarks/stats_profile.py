"""Where the time of ICT's statistics goes: the torch profiler over one forward + backward of
TRL 1.16's fused head and of ours from hidden states (GRPO: statistics and loss; ICT: statistics,
selection and loss), at the statistics table's shape of benchmarks/ict_cost.py (2 x 8 x 1,024
tokens, d = 896, V = 151,936, bf16 autocast on a GPU; ``--length`` shortens it). Prints each
one's kernels by their own device time (CPU time where there is no GPU)::

    PYTHONPATH=$PWD python benchmarks/stats_profile.py --rows 20
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ict.core.loss import PolicyLossConfig, policy_loss  # noqa: E402
from ict.core.selectors import (  # noqa: E402
    SelectionInputs,
    method_train_options,
    required_js_references,
    resolve_options,
    select,
)
from ict.core.stats import token_statistics_from_hidden  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--width", type=int, default=896)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--rows", type=int, default=15, help="kernels printed per profile")
    args = parser.parse_args()
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    torch.manual_seed(0)
    batch = 16
    hidden = torch.randn(batch, args.length, args.width, device=device).requires_grad_()
    weight = (torch.randn(args.vocab, args.width, device=device) * 0.02).requires_grad_()
    ids = torch.randint(0, args.vocab, (batch, args.length), device=device)
    mask = torch.ones(batch, args.length, dtype=torch.bool, device=device)
    advantages = torch.randn(batch, device=device)
    group_ids = torch.arange(batch, device=device) // 8
    options = resolve_options("ict", {"ratio": 0.1})
    references = required_js_references("ict", options)
    loss_config = PolicyLossConfig(aggregation=method_train_options("ict")["aggregation"])

    def ours() -> None:
        stats = token_statistics_from_hidden(hidden, weight, ids, mask, 1.0, references, group_ids)
        selection = select("ict", SelectionInputs(stats, mask, advantages=advantages, token_ids=ids,
                                                  group_ids=group_ids), **options)
        policy_loss(stats, stats.log_probs.detach(), advantages, mask, selection.mask, loss_config)[0].backward()

    def grpo() -> None:
        stats = token_statistics_from_hidden(hidden, weight, ids, mask, 1.0, (), group_ids)
        policy_loss(stats, stats.log_probs.detach(), advantages, mask, mask, loss_config)[0].backward()

    def trl() -> None:
        from trl.kernels.chunked_logprob import ChunkedLogProbFunction

        log_probs, *_ = ChunkedLogProbFunction.apply(hidden.reshape(-1, args.width), weight, None, ids.reshape(-1),
                                                     1.0, 32768, None, 1.0, ("log_probs", "entropy"))
        (log_probs * advantages.repeat_interleave(args.length)).sum().backward()

    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    for name, function in (("TRL 1.16 fused head", trl), ("ours, GRPO from hidden states", grpo),
                           ("ours, ICT from hidden states", ours)):
        with autocast:
            function()  # warm-up: Triton compiles, the allocator fills
        if cuda:
            torch.cuda.synchronize()
        with profile(activities=activities) as profiler, autocast:
            function()
            if cuda:
                torch.cuda.synchronize()
        print(f"\n## {name}\n", flush=True)
        print(profiler.key_averages().table(sort_by=sort, row_limit=args.rows), flush=True)
        hidden.grad = weight.grad = None


if __name__ == "__main__":
    main()

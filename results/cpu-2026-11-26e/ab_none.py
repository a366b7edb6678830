"""Median and minimum of 15 calls of token_statistics from logits, no JS reference (64 x 32,
V = 49,152, no grad, 2 threads), in this process's checkout of ict (PYTHONPATH)."""

import statistics
import sys
import time

import torch

from ict.core.stats import token_statistics

torch.set_num_threads(2)
generator = torch.Generator().manual_seed(0)
batch, length, vocab = 64, 32, 49152
logits = torch.randn(batch, length, vocab, generator=generator)
ids = torch.randint(0, vocab, (batch, length), generator=generator)
mask = torch.ones(batch, length, dtype=torch.bool)
times = []
with torch.no_grad():
    token_statistics(logits, ids, mask, 1.0)
    for _ in range(15):
        start = time.perf_counter()
        token_statistics(logits, ids, mask, 1.0)
        times.append(time.perf_counter() - start)
print(sys.argv[1], f"{statistics.median(times):.4f}", f"{min(times):.4f}")

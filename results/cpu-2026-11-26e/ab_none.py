import sys, time, statistics, torch
torch.set_num_threads(2)
from ict.core.stats import token_statistics
g = torch.Generator().manual_seed(0)
B, T, V = 64, 32, 49152
logits = torch.randn(B, T, V, generator=g)
ids = torch.randint(0, V, (B, T), generator=g)
mask = torch.ones(B, T, dtype=torch.bool)
times = []
with torch.no_grad():
    token_statistics(logits, ids, mask, 1.0)
    for _ in range(15):
        t = time.perf_counter(); token_statistics(logits, ids, mask, 1.0); times.append(time.perf_counter() - t)
print(sys.argv[1], f"{statistics.median(times):.4f}", f"{min(times):.4f}")

"""Seeds of a run's random streams: one formula for every backend (our trainer, TRL, verl)."""

from __future__ import annotations


def step_seed(seed: int, step: int, stream: int) -> int:
    """Seed of random stream `stream` (0: sampling, 1: mini-batch order, 2: selection) at `step`."""
    return (seed * 1_000_003 + step * 9_973 + stream * 7_919) % (2**63 - 1)

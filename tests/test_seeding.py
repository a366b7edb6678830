"""Seeds of random streams (`ict.core.seeding`)."""

from __future__ import annotations

from ict.core.seeding import request_seed, step_seed


def test_request_seeds_give_every_sample_of_every_request_its_own_stream():
    """vLLM seeds sample j of a request seeded s with s + j: for 1,000 requests of 64 samples the
    64,000 stream seeds are all distinct, fit in 63 bits and repeat for the same inputs."""
    seeds = [request_seed(step_seed(7, 3, 0), index) for index in range(1000)]
    streams = {seed + sample for seed in seeds for sample in range(64)}
    assert len(streams) == 64_000
    assert all(0 <= seed < 2**63 - 64 for seed in seeds)
    assert seeds == [request_seed(step_seed(7, 3, 0), index) for index in range(1000)]
    assert request_seed(1, 0) != request_seed(0, 1) and request_seed(10, 1) != request_seed(1, 10)

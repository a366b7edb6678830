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


def test_step_seed_is_the_documented_linear_formula():
    """seed * 1_000_003 + step * 9_973 + stream * 7_919 (mod 2^63 - 1), worked by hand: every
    backend (our trainer, TRL, verl) draws a step's streams from these numbers, so a resumed or
    ported run repeats them; each step and each stream its own seed."""
    assert step_seed(7, 3, 2) == 7_000_021 + 29_919 + 15_838 == 7_045_778
    assert step_seed(7, 4, 0) - step_seed(7, 3, 0) == 9_973  # the next step: another stream
    assert step_seed(7, 3, 1) - step_seed(7, 3, 0) == 7_919  # mini-batch order != sampling
    assert step_seed(3_000, 0, 0) == 3_000_009_000  # above 2^31: not folded into 31 bits
    assert step_seed(0, -1, 0) == 2**63 - 1 - 9_973  # the evaluation's step -1, made non-negative


def test_request_seeds_of_digit_strings_that_concatenate_alike_differ():
    """(seed 1, request 23) and (seed 12, request 3) hash different texts ("1:23", "12:3")."""
    assert request_seed(1, 23) != request_seed(12, 3)

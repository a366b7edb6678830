"""Seeds of a run's random streams: one formula for every backend (our trainer, TRL, verl)."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

RUN_SEED_LIMIT = 2**32
"""A training run's seed lies in [0, 2^32): numpy's range (`transformers.set_seed` seeds numpy too)."""


def selection_base_seed(selector_options: Mapping[str, Any], run_seed: int) -> int:
    """The base seed of a selection's generator: the selector's own ``seed`` option when set
    (``random``), else the run's seed (our trainer's --seed, TRL's args.seed, verl's ict_seed)."""
    own = selector_options.get("seed")
    return run_seed if own is None else int(own)


def step_seed(seed: int, step: int, stream: int) -> int:
    """Seed of random stream `stream` (0: sampling, 1: mini-batch order, 2: selection) at `step`."""
    return (seed * 1_000_003 + step * 9_973 + stream * 7_919) % (2**63 - 1)


def request_seed(seed: int, index: int) -> int:
    """Seed of the `index`-th request of a call seeded with `seed`, for engines that seed each
    request (vLLM): a hash of both, so requests draw independent streams. vLLM gives the j-th of a
    request's n samples ``seed + j``: one seed for every prompt of a call would make prompt i's
    j-th sample reuse prompt k's random numbers; hashed seeds 63 bits apart make an overlap
    (``|seed_i - seed_k| < n``) vanishingly unlikely."""
    digest = hashlib.blake2b(f"{seed}:{index}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1

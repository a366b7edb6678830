"""The Triton group kernel's leave-one-out branch against float64 loops.

A group variant asked with its ``kl`` metric is scored by the torch folds for every metric of that
variant (the kernel computes every group score but the leave-one-out KL:
``triton_tiles.supports_group``), and ``test_tiles.py`` asks each variant with all three metrics:
there the kernel's leave-one-out reference ``q_i = (S - p_i) / (n - 1)`` was never compared with an
independent value (a kernel that left ``p_i`` in ``S`` passed). Here the leave-one-out variants are
asked with ``js`` and ``wasserstein`` only, so the kernel computes them. Runs under Triton's
interpreter on the CPU (conftest.py), on the GPU where there is one.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch
from stats_references import loop_reference_scores, variant_batch

from ict.core.stats import token_statistics

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="triton is not installed")

DEVICE = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def test_the_group_kernels_leave_one_out_scores_match_float64_loops() -> None:
    """JS and total variation of each row to the mean of the *other* rows of its group (plus the
    absorbed point masses for ``group_mean_loo_absorbing``), temperature 0.9, ragged groups of 4,
    2 and 1 rows, against :func:`stats_references.loop_reference_scores` in float64."""
    from ict.core.stats import triton_tiles

    assert triton_tiles.supports_group(True, ("js", "wasserstein"))  # so the kernel scores them
    logits, token_ids, mask, group_ids, _ = variant_batch(4)
    keys = ("group_mean_loo", "group_mean_loo:wasserstein", "group_mean_loo_absorbing",
            "group_mean_loo_absorbing:wasserstein")
    stats = token_statistics(logits.to(DEVICE), token_ids.to(DEVICE), mask.to(DEVICE), 0.9, keys,
                             group_ids=group_ids.to(DEVICE), backend="triton", tile_size=(16, 11))
    for key in keys:
        reference, _, metric = key.partition(":")
        want = loop_reference_scores(logits, token_ids, mask, group_ids, 0.9, reference, metric or "js")
        torch.testing.assert_close(stats.js_scores[key].cpu().double(), want, atol=2e-5, rtol=1e-6,
                                   msg=lambda text, key=key: f"{key}: {text}")

"""Per-step diagnostics against hand computations on hand-built distributions."""

from __future__ import annotations

import math

import pytest
import torch

from ict.core.diagnostics import DIAGNOSTIC_KEYS, jaccard, token_diagnostics
from ict.core.selectors import ICT_DEFAULT_REFERENCE
from ict.core.stats import token_statistics


def test_regime_fractions_on_hand_built_distributions():
    # Row 0: p = (0.7, 0.2, 0.1): beta = 0.49 + 0.04 + 0.01 = 0.54.
    # Row 1: p = (0.25, 0.25, 0.5): beta = 0.0625 * 2 + 0.25 = 0.375.
    probabilities = torch.tensor([[[0.7, 0.2, 0.1]] * 3, [[0.25, 0.25, 0.5]] * 3])
    logits = probabilities.log()
    tokens = torch.tensor([[0, 1, 2], [2, 0, 1]])  # sampled: 0.7, 0.2, 0.1 | 0.5, 0.25, 0.25
    response = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    selected = torch.tensor([[1, 0, 0], [0, 1, 0]], dtype=torch.bool)
    stats = token_statistics(logits, tokens, response)
    out = token_diagnostics(stats, response, selected, advantages=torch.tensor([1.0, -1.0]))
    sampled = [(0.7, 0.54), (0.2, 0.54), (0.1, 0.54), (0.5, 0.375), (0.25, 0.375)]
    assert out["above_beta_fraction"] == pytest.approx(2 / 5)  # 0.7 > 0.54 and 0.5 > 0.375
    assert out["above_beta_fraction_selected"] == pytest.approx(1 / 2)  # (0, 0) yes, (1, 1) no
    assert out["log_p_over_beta"] == pytest.approx(sum(math.log(p / b) for p, b in sampled) / 5, abs=1e-5)
    assert out["log_p_over_beta_selected"] == pytest.approx(
        (math.log(0.7 / 0.54) + math.log(0.25 / 0.375)) / 2, abs=1e-5)
    assert out["selected_positive_advantage_fraction"] == pytest.approx(1 / 2)
    assert set(out) == set(DIAGNOSTIC_KEYS)


def test_entropy_split_against_the_median():
    entropy = torch.tensor([[0.1, 0.9, 0.5, 0.3], [0.8, 0.2, 0.7, 0.4]])
    stats = token_statistics(torch.zeros(2, 4, 3), torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool))
    stats.entropy = entropy
    response = torch.ones(2, 4, dtype=torch.bool)
    selected = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    # torch.median of 8 values is the lower middle: sorted 0.1 .2 .3 .4 .5 .7 .8 .9 -> 0.4
    out = token_diagnostics(stats, response, selected, torch.tensor([0.0, 0.0]))
    assert out["selected_high_entropy_fraction"] == pytest.approx(3 / 4)  # 0.9, 0.5, 0.8 above 0.4; 0.2 not
    assert out["selected_positive_advantage_fraction"] == 0.0


def test_jaccard_with_the_reference_selections():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 10, 7, generator=generator) * 2
    tokens = torch.randint(0, 7, (4, 10), generator=generator)
    response = torch.ones(4, 10, dtype=torch.bool)
    stats = token_statistics(logits, tokens, response, js_references=(ICT_DEFAULT_REFERENCE,),
                             group_ids=torch.tensor([0, 0, 1, 1]))
    entropy_order = sorted(range(40), key=lambda i: (-float(stats.entropy.flatten()[i]), i))
    top_entropy = torch.zeros(40, dtype=torch.bool)
    top_entropy[entropy_order[:8]] = True  # ceil(0.2 * 40)
    out = token_diagnostics(stats, response, top_entropy.view(4, 10), torch.ones(4))
    assert out["jaccard_entropy20"] == 1.0
    js_order = sorted(range(40), key=lambda i: (-float(stats.js_scores[ICT_DEFAULT_REFERENCE].flatten()[i]), i))
    top_js = torch.zeros(40, dtype=torch.bool)
    top_js[js_order[:4]] = True
    expected = len(set(js_order[:4]) & set(entropy_order[:8])) / len(set(js_order[:4]) | set(entropy_order[:8]))
    assert out["jaccard_ict10"] == pytest.approx(expected)
    assert jaccard(torch.zeros(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool)) != jaccard(
        torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool))  # NaN vs 1.0
    none_selected = token_diagnostics(stats, response, torch.zeros(4, 10, dtype=torch.bool), torch.ones(4))
    assert math.isnan(none_selected["above_beta_fraction_selected"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (masks on CPU, statistics on the GPU)")
def test_masks_on_cpu_with_statistics_on_the_gpu():
    # The trainer keeps the masks and advantages on the CPU; on a GPU the statistics live there.
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 6, 5, generator=generator)
    tokens = torch.randint(0, 5, (4, 6), generator=generator)
    response = torch.ones(4, 6, dtype=torch.bool)
    selected = torch.rand(4, 6, generator=generator) > 0.5
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    group_ids = torch.tensor([0, 0, 1, 1])
    on_cpu = token_diagnostics(token_statistics(logits, tokens, response, js_references=("group_mean",),
                                                group_ids=group_ids), response, selected, advantages)
    on_gpu = token_diagnostics(token_statistics(logits.cuda(), tokens.cuda(), response.cuda(),
                                                js_references=("group_mean",), group_ids=group_ids.cuda()),
                               response, selected, advantages)
    assert on_gpu == pytest.approx(on_cpu, abs=1e-5, nan_ok=True)


def test_selection_anatomy_on_hand_built_masks():
    from ict.core.diagnostics import ANATOMY_KEYS, selection_anatomy

    # Group 0: rows 0 (length 2, finished) and 1 (length 5 = T, truncated); group 1: row 2
    # (length 3, finished) alone. T = 5.
    response = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    groups = torch.tensor([4, 4, 9])
    selected = torch.tensor([[0, 1, 0, 0, 0], [1, 0, 1, 0, 1], [0, 0, 1, 0, 0]], dtype=torch.bool)
    tie = torch.tensor([[0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 1, 0, 0]], dtype=torch.bool)
    out = selection_anatomy(selected, response, groups, tie_decided=tie)
    assert set(out) == set(ANATOMY_KEYS)
    # Fewer than G alive: row 1 at t = 2, 3, 4 (row 0 ended); a group of one never.
    # Selected: (0,1) no, (1,0) no, (1,2) yes, (1,4) yes, (2,2) no -> 2 / 5.
    assert out["selected_partial_group_fraction"] == pytest.approx(2 / 5)
    assert out["all_partial_group_fraction"] == pytest.approx(3 / 10)
    # t / L: 1/2, 0/5, 2/5, 4/5, 2/3.
    assert out["selected_relative_position"] == pytest.approx((1 / 2 + 0 + 2 / 5 + 4 / 5 + 2 / 3) / 5)
    every = (0 + 1 / 2) + (0 + 1 + 2 + 3 + 4) / 5 + (0 + 1 + 2) / 3
    assert out["all_relative_position"] == pytest.approx(every / 10)
    # End tokens: (0, 1) and (2, 2) (finished rows); row 1 is truncated. Both selected.
    assert out["selected_end_token_fraction"] == pytest.approx(2 / 5)
    assert out["all_end_token_fraction"] == pytest.approx(2 / 10)
    assert out["selected_tie_fraction"] == pytest.approx(2 / 5)
    # Declared: row 2 not finished -> one end token.
    out = selection_anatomy(selected, response, groups, finished=torch.tensor([True, False, False]))
    assert out["selected_end_token_fraction"] == pytest.approx(1 / 5)
    assert math.isnan(out["selected_tie_fraction"])
    empty = selection_anatomy(torch.zeros_like(selected), response, groups)
    assert math.isnan(empty["selected_relative_position"]) and empty["all_relative_position"] > 0

"""Selectors: counts, subsets, ties, edge cases, and agreement with the peers' rules."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ict.selectors import (
    SELECTORS,
    SelectionInputs,
    register_selector,
    required_js_references,
    select_tokens,
)
from ict.stats import TokenStatistics


def make_inputs(seed: int = 0, batch: int = 4, length: int = 16, vocab: int = 11, mask_rate: float = 0.3):
    generator = torch.Generator().manual_seed(seed)
    mask = torch.rand(batch, length, generator=generator) > mask_rate
    stats = TokenStatistics(
        log_probs=-torch.rand(batch, length, generator=generator) * 8,
        entropy=torch.rand(batch, length, generator=generator) * 3,
        renyi2=torch.rand(batch, length, generator=generator),
        js_scores={
            name: torch.rand(batch, length, generator=generator) * math.log(2) for name in ("seq_mean", "prev", "ref")
        },
    )
    return SelectionInputs(
        stats=stats,
        response_mask=mask,
        advantages=torch.randn(batch, generator=generator),
        token_ids=torch.randint(0, vocab, (batch, length), generator=generator),
        generator=torch.Generator().manual_seed(seed + 1),
    )


def exact_count(ratio: float, n: int) -> int:
    return math.ceil(Fraction(str(ratio)) * n)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 1000),
    ratio=st.sampled_from([0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.999, 1.0]),
    name=st.sampled_from(["entropy", "ict", "random"]),
    batch=st.integers(1, 5),
    length=st.integers(1, 30),
)
def test_top_fraction_selectors_select_exactly_ceil_ratio_n(seed, ratio, name, batch, length):
    inputs = make_inputs(seed, batch, length)
    mask = select_tokens(name, inputs, ratio=ratio)
    n = int(inputs.response_mask.sum())
    assert mask.dtype == torch.bool
    assert not (mask & ~inputs.response_mask).any()
    assert int(mask.sum()) == exact_count(ratio, n)


def test_ratio_edge_cases():
    inputs = make_inputs(length=10, mask_rate=-1.0)  # every token is a response token: N = 40
    assert int(select_tokens("ict", inputs, ratio=1.0).sum()) == 40
    assert int(select_tokens("ict", inputs, ratio=0.001).sum()) == 1  # fewer tokens than 1/ratio: one
    assert int(select_tokens("entropy", inputs, ratio=0.1).sum()) == 4  # 0.1 * 40 is 4, not 5
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"ratio must be in \(0, 1\]"):
            select_tokens("ict", inputs, ratio=bad)
    empty = make_inputs()
    empty.response_mask = torch.zeros_like(empty.response_mask)
    for name in SELECTORS:
        assert not select_tokens(name, empty).any()


def test_ties_go_to_the_earlier_position():
    inputs = make_inputs(length=6, batch=2, mask_rate=-1.0)
    inputs.stats.entropy = torch.ones(2, 6)
    mask = select_tokens("entropy", inputs, ratio=0.25)  # k = 3 of 12, all tied
    assert mask.flatten().tolist() == [True] * 3 + [False] * 9


def reference_20_entropy_mask(entropy: torch.Tensor, response_mask: torch.Tensor, top_ratio: float) -> torch.Tensor:
    """The 20-Entropy reference rule, restated: batch-global top-k over response tokens, k = ceil."""
    values = entropy.flatten()[response_mask.flatten()]
    out = torch.zeros(entropy.numel(), dtype=torch.bool)
    if values.numel() == 0:
        return out.view_as(entropy)
    k = max(1, int(values.numel() * top_ratio + 0.9999))
    positions = response_mask.flatten().nonzero().squeeze(1)
    out[positions[torch.topk(values, k).indices]] = True
    return out.view_as(entropy)


def trl_quantile_mask(entropy: torch.Tensor, response_mask: torch.Tensor, quantile: float) -> torch.Tensor:
    """TRL's get_high_entropy_mask rule, restated: entropy >= quantile over the non-pad entropies."""
    threshold = torch.quantile(entropy[response_mask].float(), quantile)
    return (entropy >= threshold) & response_mask


@pytest.mark.parametrize("seed", range(20))
def test_entropy_selector_equals_the_20_entropy_reference(seed):
    inputs = make_inputs(seed, batch=3, length=int(5 + seed * 3))
    ours = select_tokens("entropy", inputs, ratio=0.2)
    assert torch.equal(ours, reference_20_entropy_mask(inputs.stats.entropy, inputs.response_mask, 0.2))
    # TRL's quantile rule picks the same tokens when entropies are distinct ...
    assert torch.equal(ours, trl_quantile_mask(inputs.stats.entropy, inputs.response_mask, 0.8))


def test_trl_quantile_rule_differs_by_ties_and_normaliser():
    inputs = make_inputs(0, batch=1, length=10, mask_rate=-1.0)
    inputs.stats.entropy = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.9, 0.9, 0.9]])
    ours = select_tokens("entropy", inputs, ratio=0.2)
    theirs = trl_quantile_mask(inputs.stats.entropy, inputs.response_mask, 0.8)
    # ... but a tie at the threshold: we keep exactly k = 2 (earliest first), TRL keeps all 3 tied.
    assert int(ours.sum()) == 2 and int(theirs.sum()) == 3
    assert ours[0].tolist()[-3:] == [True, True, False]
    # Normaliser: our token_mean divides by the selected count, TRL's by all response tokens.
    per_token = torch.arange(10.0).view(1, 10)
    ours_loss = (per_token * ours).sum() / ours.sum()
    trl_loss = (per_token * ours).sum() / inputs.response_mask.sum()
    assert ours_loss / trl_loss == pytest.approx(10 / 2)


def test_stapo_rule_on_hand_built_cases():
    # One sequence with positive advantage, one with negative.
    log_probs = torch.log(
        torch.tensor(
            [
                [0.001, 0.001, 0.001, 0.001, 0.5, 0.0015],
                [0.001, 0.001, 0.5, 0.9, 0.9, 0.9],
            ]
        )
    )
    entropy = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.05, 2.0], [0.1, 0.1, 0.1, 0.1, 0.1, 0.1]])
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, 3] = False  # not a response token: never a candidate
    inputs = SelectionInputs(
        stats=TokenStatistics(log_probs, entropy, entropy.clone()),
        response_mask=mask,
        advantages=torch.tensor([1.0, -1.0]),
    )
    kept = select_tokens("stapo", inputs)
    # Candidates: row 0 positions 0, 1, 2, 5 (A > 0, p < 0.002); entropies 0.1, 0.2, 0.3, 2.0.
    threshold = torch.quantile(torch.tensor([0.1, 0.2, 0.3, 2.0], dtype=torch.float64), 0.75).item()
    assert threshold == pytest.approx(0.3 + 0.25 * 1.7)
    silenced = {(0, 0), (0, 1), (0, 2)}  # entropies below the threshold; position 5 (2.0) is kept
    expected = mask.clone()
    for position in silenced:
        expected[position] = False
    assert torch.equal(kept, expected)
    # No candidates (all advantages negative): nothing silenced.
    inputs.advantages = torch.tensor([-1.0, -1.0])
    assert torch.equal(select_tokens("stapo", inputs), mask)
    # tau_p raised above every probability makes every positive-advantage response token a candidate.
    inputs.advantages = torch.tensor([1.0, -1.0])
    assert int((mask & ~select_tokens("stapo", inputs, tau_p=1.0)).sum()) == 3


def test_ict_uses_the_requested_reference():
    inputs = make_inputs(3)
    for reference in ("seq_mean", "prev", "ref"):
        mask = select_tokens("ict", inputs, reference=reference)
        expected = reference_20_entropy_mask(inputs.stats.js_scores[reference], inputs.response_mask, 0.1)
        assert torch.equal(mask, expected)
    assert required_js_references("ict", {"reference": "prev"}) == ("prev",)
    assert required_js_references("ict") == ("seq_mean",)
    assert required_js_references("entropy") == ()
    del inputs.stats.js_scores["prev"]
    with pytest.raises(ValueError, match="not computed"):
        select_tokens("ict", inputs, reference="prev")


def test_ict_sequence_scope_ranks_each_sequence():
    inputs = make_inputs(4, batch=5, length=20)
    mask = select_tokens("ict", inputs, ratio=0.2, scope="sequence")
    for row in range(5):
        n = int(inputs.response_mask[row].sum())
        assert int(mask[row].sum()) == exact_count(0.2, n)
        scores = inputs.stats.js_scores["seq_mean"][row]
        if 0 < mask[row].sum() < n:
            assert scores[mask[row]].min() >= scores[inputs.response_mask[row] & ~mask[row]].max()


def test_ict_token_id_unit_selects_top_unique_ids_by_mean_score():
    inputs = make_inputs(5, batch=3, length=25, vocab=9)
    mask = select_tokens("ict", inputs, ratio=0.3, unit="token_id")
    ids = inputs.token_ids[inputs.response_mask]
    scores = inputs.stats.js_scores["seq_mean"][inputs.response_mask]
    means = {int(i): scores[ids == i].double().mean().item() for i in ids.unique()}
    chosen = sorted(means, key=lambda i: -means[i])[: exact_count(0.3, len(means))]
    expected = inputs.response_mask & torch.isin(inputs.token_ids, torch.tensor(chosen))
    assert torch.equal(mask, expected)


def test_random_selector_is_seeded():
    inputs = make_inputs(6)
    inputs.generator = None
    first = select_tokens("random", inputs, seed=7)
    assert torch.equal(first, select_tokens("random", inputs, seed=7))
    assert not torch.equal(first, select_tokens("random", inputs, seed=8, ratio=0.1))


def test_unknown_names_and_options_are_errors():
    inputs = make_inputs()
    with pytest.raises(ValueError, match="unknown selector"):
        select_tokens("nope", inputs)
    with pytest.raises(ValueError, match="has no option"):
        select_tokens("entropy", inputs, reference="prev")


def test_users_can_register_a_selector():
    @register_selector("first_token_test", defaults={})
    def select_first_token(inputs):
        mask = torch.zeros_like(inputs.response_mask)
        mask[:, 0] = inputs.response_mask[:, 0]
        return mask

    try:
        inputs = make_inputs()
        assert torch.equal(select_tokens("first_token_test", inputs)[:, 0], inputs.response_mask[:, 0])

        @register_selector("outside_test")
        def select_outside(inputs):
            return torch.ones_like(inputs.response_mask)

        with pytest.raises(ValueError, match="outside the response mask"):
            select_tokens("outside_test", inputs)
    finally:
        SELECTORS.pop("first_token_test", None)
        SELECTORS.pop("outside_test", None)

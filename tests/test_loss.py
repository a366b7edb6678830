"""Group advantages and the masked clipped loss, against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from ict.loss import PolicyLossConfig, group_advantages, policy_loss
from ict.selectors import SelectionInputs, select_tokens
from ict.stats import TokenStatistics, token_statistics


def test_group_advantages_match_hand_values():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, 0.5])
    advantages = group_advantages(rewards, group_size=4)
    first = [0.5, -0.5, -0.5, 0.5]
    std = math.sqrt(sum(x * x for x in first) / 3)
    expected_first = [x / (std + 1e-6) for x in first]
    second = [1.0, 1.0, 0.0, 0.5]
    mean = sum(second) / 4
    std2 = math.sqrt(sum((x - mean) ** 2 for x in second) / 3)
    expected_second = [(x - mean) / (std2 + 1e-6) for x in second]
    assert advantages.tolist() == pytest.approx(expected_first + expected_second, abs=1e-6)
    assert group_advantages(rewards, 4, normalize_std=False).tolist() == pytest.approx(
        [0.5, -0.5, -0.5, 0.5, 0.375, 0.375, -0.625, -0.125]
    )
    assert group_advantages(torch.ones(6), 3).abs().max() == 0  # equal rewards: zero advantage
    with pytest.raises(ValueError):
        group_advantages(torch.ones(5), 2)
    with pytest.raises(ValueError):
        group_advantages(torch.ones(4), 1)


def fixed_stats(log_probs: torch.Tensor) -> TokenStatistics:
    return TokenStatistics(log_probs, torch.ones_like(log_probs), torch.ones_like(log_probs) * 0.5)


def test_clipped_surrogate_and_aggregations_match_hand_computation():
    ratios = torch.tensor([[1.5, 0.5, 1.0, 1.1], [0.7, 1.3, 0.9, 2.0]])
    old = torch.zeros(2, 4)
    advantages = torch.tensor([1.0, -2.0])
    response = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
    selected = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 1]], dtype=torch.bool)

    def token_loss(rho: float, a: float) -> float:
        clipped = min(max(rho, 0.8), 1.28)
        return -min(rho * a, clipped * a)

    losses = [[token_loss(r, a) for r in row] for row, a in zip(ratios.tolist(), advantages.tolist())]
    chosen = [(b, t) for b in range(2) for t in range(4) if selected[b, t]]
    token_mean = sum(losses[b][t] for b, t in chosen) / len(chosen)
    seq0 = (losses[0][0] + losses[0][1]) / 2
    seq1 = (losses[1][0] + losses[1][2] + losses[1][3]) / 3
    dr_grpo = sum(losses[b][t] for b, t in chosen) / (2 * 10)
    for aggregation, expected, max_length in (
        ("token_mean", token_mean, None),
        ("seq_mean_token_mean", (seq0 + seq1) / 2, None),
        ("seq_mean_token_sum_norm", dr_grpo, 10),
    ):
        config = PolicyLossConfig(aggregation=aggregation, max_response_length=max_length)
        loss, metrics = policy_loss(fixed_stats(ratios.log()), old, advantages, response, selected, config)
        assert loss.item() == pytest.approx(expected, rel=1e-6)
    # clipped term active: (0,0) rho 1.5 > 1.28 with A > 0; (1,0) rho 0.7 < 0.8 with A < 0;
    # (1,3) rho 2.0 with A < 0 is not clipped (min picks the unclipped, more negative term).
    assert metrics["clip_fraction"] == pytest.approx(2 / 5)
    assert metrics["selected_fraction"] == pytest.approx(5 / 7)


def test_gradient_is_zero_exactly_at_unselected_positions():
    torch.manual_seed(0)
    logits = torch.randn(3, 8, 20, requires_grad=True)
    token_ids = torch.randint(0, 20, (3, 8))
    response = torch.ones(3, 8, dtype=torch.bool)
    response[2, 5:] = False
    stats = token_statistics(logits, token_ids, response, 1.0, ("seq_mean",))
    advantages = torch.tensor([1.0, -0.5, 2.0])
    selected = select_tokens(
        "ict", SelectionInputs(stats=stats, response_mask=response, advantages=advantages), ratio=0.3
    )
    loss, _ = policy_loss(stats, stats.log_probs.detach(), advantages, response, selected)
    loss.backward()
    per_position = logits.grad.abs().sum(-1)
    assert (per_position[~selected] == 0).all()
    assert (per_position[selected] > 0).all()


def test_kl_and_entropy_terms():
    torch.manual_seed(1)
    logits = torch.randn(2, 5, 7, requires_grad=True)
    token_ids = torch.randint(0, 7, (2, 5))
    response = torch.ones(2, 5, dtype=torch.bool)
    stats = token_statistics(logits, token_ids, response, differentiable_entropy=True)
    reference = stats.log_probs.detach() + 0.3
    expected_k3 = math.exp(0.3) - 0.3 - 1
    config = PolicyLossConfig(kl_coef=0.5, entropy_coef=0.1)
    advantages = torch.zeros(2)
    loss, metrics = policy_loss(stats, stats.log_probs.detach(), advantages, response, response, config, reference)
    assert metrics["kl"] == pytest.approx(expected_k3, rel=1e-5)
    assert loss.item() == pytest.approx(0.5 * expected_k3 - 0.1 * stats.entropy.mean().item(), rel=1e-5)
    plain = token_statistics(logits, token_ids, response)
    with pytest.raises(ValueError, match="differentiable_entropy"):
        policy_loss(plain, plain.log_probs.detach(), advantages, response, response, PolicyLossConfig(entropy_coef=0.1))
    with pytest.raises(ValueError, match="reference_log_probs"):
        policy_loss(plain, plain.log_probs.detach(), advantages, response, response, PolicyLossConfig(kl_coef=0.1))


def test_metrics_over_all_and_selected_tokens():
    entropy = torch.tensor([[1.0, 2.0, 3.0, 4.0]])
    renyi2 = entropy / 2
    js = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    stats = TokenStatistics(torch.zeros(1, 4), entropy, renyi2, {"prev": js})
    response = torch.tensor([[1, 1, 1, 0]], dtype=torch.bool)
    selected = torch.tensor([[0, 1, 1, 0]], dtype=torch.bool)
    _, metrics = policy_loss(stats, torch.zeros(1, 4), torch.ones(1), response, selected)
    assert metrics["entropy"] == pytest.approx(2.0)
    assert metrics["entropy_selected"] == pytest.approx(2.5)
    assert metrics["renyi2_selected"] == pytest.approx(1.25)
    assert metrics["js_score"] == pytest.approx(0.2) and metrics["js_prev_selected"] == pytest.approx(0.25)
    assert math.isnan(metrics["kl"]) and metrics["kl_old"] == 0


def test_bad_config_is_an_error():
    with pytest.raises(ValueError, match="aggregation"):
        PolicyLossConfig(aggregation="sum")

"""Group advantages and the masked clipped loss, against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from ict.core.loss import (
    PolicyLossConfig,
    group_advantages,
    kl_penalty_term,
    masked_means,
    masked_sums,
    policy_loss,
)
from ict.core.selectors import SelectionInputs, select_tokens
from ict.core.stats import TokenStatistics, token_statistics


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
    # partial rewards too: the float mean of 8 equal values can miss the value by an ulp, which the
    # division by std + eps (std 0) made ~0.03 for the whole group (0.3 gave +0.029 each)
    for value in [0.3, 0.01, 1.01, *[i / 997 for i in range(1, 997, 7)]]:
        for size in (6, 8, 16):
            assert group_advantages(torch.full((2 * size,), value), size).abs().max() == 0, (value, size)
    assert not group_advantages(torch.tensor([0.3] * 7 + [0.31]), 8).eq(0).any()  # one differs: all move
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
        "ict", SelectionInputs(stats=stats, response_mask=response, advantages=advantages), ratio=0.3,
        reference="seq_mean",
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
    stats = token_statistics(logits, token_ids, response, differentiable_entropy=True, temperature=1.0)
    reference = stats.log_probs.detach() + 0.3
    expected_k3 = math.exp(0.3) - 0.3 - 1
    config = PolicyLossConfig(kl_coef=0.5, entropy_coef=0.1)
    advantages = torch.zeros(2)
    loss, metrics = policy_loss(stats, stats.log_probs.detach(), advantages, response, response, config, reference)
    assert metrics["kl"] == pytest.approx(expected_k3, rel=1e-5)
    assert loss.item() == pytest.approx(0.5 * expected_k3 - 0.1 * stats.entropy.mean().item(), rel=1e-5)
    plain = token_statistics(logits, token_ids, response, temperature=1.0)
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


def test_masked_sums_are_each_pairs_float64_sum_over_its_mask_then_the_counts_and_scalars():
    """masked_sums: each pair's sum over its mask in float64, then each mask's count, then the
    scalars, for pairs of one shape (stacked, a few kernels for all of them) and of several
    shapes, values of every dtype a loss metric has (bool, bfloat16, float32, float64); and
    masked_means' means of them, NaN for an empty mask. References: Python floats over the
    values' lists."""
    generator = torch.Generator().manual_seed(0)
    shape = (3, 5)
    values = [torch.rand(shape, generator=generator) > 0.5, torch.randn(shape, generator=generator).bfloat16(),
              torch.randn(shape, generator=generator) * 1e3, torch.randn(shape, generator=generator).double()]
    masks = [torch.rand(shape, generator=generator) > 0.3 for _ in values]
    masks[1] = torch.zeros(shape, dtype=torch.bool)  # an empty mask
    scalar = torch.tensor(2.5)

    def reference(pairs):
        sums = [sum(float(v) for v, m in zip(values.flatten().tolist(), mask.flatten().tolist()) if m)
                for values, mask in pairs]
        counts = [float(mask.sum()) for _, mask in pairs]
        return sums, counts

    mixed = [(torch.randn(2, 7, generator=generator), torch.rand(2, 7, generator=generator) > 0.5)]
    for pairs in (list(zip(values, masks)), list(zip(values, masks)) + mixed):
        sums, counts = reference(pairs)
        result = masked_sums(pairs, (scalar,))
        assert result.dtype == torch.float64 and result.shape == (2 * len(pairs) + 1,)
        assert result.tolist() == pytest.approx([*sums, *counts, 2.5], rel=1e-12, abs=1e-12)
        means = masked_means(pairs, (scalar,))
        assert math.isnan(means[1]) and means[-1] == 2.5
        expected = [total / count for total, count in zip(sums, counts) if count]
        assert [mean for mean in means[:-1] if not math.isnan(mean)] == pytest.approx(expected, rel=1e-12)
    assert masked_sums([], (scalar, torch.tensor(-1.0))).tolist() == [2.5, -1.0]


def test_bad_config_is_an_error():
    with pytest.raises(ValueError, match="aggregation"):
        PolicyLossConfig(aggregation="sum")


# ---------------------------------------------------------------------------------------------
# The peers' loss options: dual-clip, the denominator, the regulariser's tokens, KL-Cov's penalty

from ict.core.loss import aggregation_weight  # noqa: E402

RATIOS = torch.tensor([[1.5, 0.5, 1.0, 1.1], [0.7, 1.3, 0.9, 6.0]])
ADVANTAGES = torch.tensor([1.0, -2.0])
RESPONSE = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]], dtype=torch.bool)
SELECTED = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 1]], dtype=torch.bool)


def hand_losses(clip_c=None):
    out = []
    for row, a in zip(RATIOS.tolist(), ADVANTAGES.tolist()):
        values = []
        for rho in row:
            value = max(-rho * a, -min(max(rho, 0.8), 1.28) * a)
            if clip_c is not None and a < 0:
                value = min(value, -a * clip_c)
            values.append(value)
        out.append(values)
    return out


def test_dual_clip_bounds_negative_advantage_tokens():
    losses = hand_losses(clip_c=3.0)
    assert losses[1][3] == pytest.approx(6.0)  # -A * 3 = 6 instead of 12
    chosen = [(b, t) for b in range(2) for t in range(4) if SELECTED[b, t]]
    config = PolicyLossConfig(clip_ratio_c=3.0)
    loss, _ = policy_loss(fixed_stats(RATIOS.log()), torch.zeros(2, 4), ADVANTAGES, RESPONSE, SELECTED, config)
    assert loss.item() == pytest.approx(sum(losses[b][t] for b, t in chosen) / len(chosen), rel=1e-6)
    plain, _ = policy_loss(fixed_stats(RATIOS.log()), torch.zeros(2, 4), ADVANTAGES, RESPONSE, SELECTED)
    assert plain.item() > loss.item()
    with pytest.raises(ValueError, match="clip_ratio_c"):
        PolicyLossConfig(clip_ratio_c=0.5)


def test_denominator_all_is_trls_top_entropy_quantile_normalisation():
    losses = hand_losses()
    chosen = [(b, t) for b in range(2) for t in range(4) if SELECTED[b, t]]
    total = sum(losses[b][t] for b, t in chosen)
    config = PolicyLossConfig(denominator="all")
    loss, _ = policy_loss(fixed_stats(RATIOS.log()), torch.zeros(2, 4), ADVANTAGES, RESPONSE, SELECTED, config)
    # TRL: (per_token_loss * entropy_mask * completion_mask).sum() / completion_mask.sum()
    assert loss.item() == pytest.approx(total / int(RESPONSE.sum()), rel=1e-6)
    config = PolicyLossConfig(denominator="all", aggregation="seq_mean_token_mean")
    loss, _ = policy_loss(fixed_stats(RATIOS.log()), torch.zeros(2, 4), ADVANTAGES, RESPONSE, SELECTED, config)
    seq0 = (losses[0][0] + losses[0][1]) / 3
    seq1 = (losses[1][0] + losses[1][2] + losses[1][3]) / 4
    assert loss.item() == pytest.approx((seq0 + seq1) / 2, rel=1e-6)
    assert aggregation_weight(SELECTED, RESPONSE, config) == 2.0
    assert aggregation_weight(SELECTED, RESPONSE, PolicyLossConfig(denominator="all")) == 7.0
    assert aggregation_weight(SELECTED, RESPONSE, PolicyLossConfig()) == 5.0


def test_regularizer_tokens_all_covers_every_response_token():
    log_probs = torch.tensor([[-1.0, -2.0, -0.5, -3.0], [-0.1, -0.7, -1.2, -2.2]])
    reference = log_probs + torch.tensor([[0.3, -0.2, 0.5, 0.0], [0.1, 0.4, -0.6, 0.2]])
    stats = fixed_stats(log_probs)

    def k3(b, t):
        delta = float(reference[b, t] - log_probs[b, t])
        return math.exp(delta) - delta - 1

    for tokens, mask in (("selected", SELECTED), ("all", RESPONSE)):
        config = PolicyLossConfig(kl_coef=0.5, regularizer_tokens=tokens)
        loss, _ = policy_loss(stats, log_probs, ADVANTAGES, RESPONSE, SELECTED, config, reference_log_probs=reference)
        base, _ = policy_loss(stats, log_probs, ADVANTAGES, RESPONSE, SELECTED, PolicyLossConfig())
        cells = [(b, t) for b in range(2) for t in range(4) if mask[b, t]]
        expected_kl = sum(k3(b, t) for b, t in cells) / len(cells)
        assert (loss - base).item() == pytest.approx(0.5 * expected_kl, rel=1e-5)


def test_kl_penalty_adds_absolute_log_ratio_on_its_tokens():
    old = torch.zeros(2, 4)
    penalty = torch.zeros(2, 4)
    penalty[1, 3] = 2.0
    loss, _ = policy_loss(fixed_stats(RATIOS.log()), old, ADVANTAGES, RESPONSE, SELECTED, kl_penalty=penalty)
    base, _ = policy_loss(fixed_stats(RATIOS.log()), old, ADVANTAGES, RESPONSE, SELECTED)
    assert (loss - base).item() == pytest.approx(2.0 * math.log(6.0) / 5, rel=1e-5)


def test_kl_penalty_is_the_absolute_log_ratio_below_a_ratio_of_one() -> None:
    """KL-Cov's ``kl_penalty * |log p - log p_old|`` on a token whose ratio is 0.5 (log-ratio
    -ln 2): the loss grows by ``2 ln 2 / 5`` (token mean over the 5 selected tokens), not
    shrinks, and its gradient on that log-prob is ``-2 / 5`` (hand values: d|x|/dx = -1 below 0)."""
    penalty = torch.zeros(2, 4)
    penalty[0, 1] = 2.0  # RATIOS[0, 1] = 0.5, a selected token
    log_probs = RATIOS.log().requires_grad_(True)
    loss, _ = policy_loss(fixed_stats(log_probs), torch.zeros(2, 4), ADVANTAGES, RESPONSE, SELECTED,
                          kl_penalty=penalty)
    base, _ = policy_loss(fixed_stats(RATIOS.log()), torch.zeros(2, 4), ADVANTAGES, RESPONSE, SELECTED)
    assert (loss - base).item() == pytest.approx(2.0 * math.log(2.0) / 5, rel=1e-5)
    loss.backward()
    # surrogate at (0, 1): A = 1, min(r A, clip(r) A) = min(0.5, 0.8) is the unclipped term, whose
    # gradient is -r A / 5 = -0.1; the penalty adds 2 * d|x|/dx / 5 = -2 / 5
    assert log_probs.grad[0, 1].item() == pytest.approx(-0.5 / 5 - 2.0 / 5, rel=1e-5)


@pytest.mark.parametrize("aggregation,tokens,expected", [
    ("token_mean", "selected", (1 + 2 + 5 + 7 + 8) / 5),
    ("token_mean", "all", (1 + 2 + 3 + 5 + 6 + 7 + 8) / 7),
    ("seq_mean_token_mean", "selected", ((1 + 2) / 2 + (5 + 7 + 8) / 3) / 2),
    ("seq_mean_token_mean", "all", ((1 + 2 + 3) / 3 + (5 + 6 + 7 + 8) / 4) / 2),
])
def test_entropy_bonus_averages_the_entropy_over_its_tokens_only(aggregation: str, tokens: str,
                                                                 expected: float) -> None:
    """The entropy bonus is ``-entropy_coef * mean(H)`` over the regularized tokens (the selected
    ones, or every response token with ``regularizer_tokens="all"``): hand means of entropies
    1..8 whose padding entry (100) and, for ``selected``, unselected entries must not count."""
    entropy = torch.tensor([[1.0, 2.0, 3.0, 100.0], [5.0, 6.0, 7.0, 8.0]], requires_grad=True)
    stats = TokenStatistics(RATIOS.log(), entropy, torch.zeros(2, 4))
    base_config = PolicyLossConfig(aggregation=aggregation, regularizer_tokens=tokens)
    config = PolicyLossConfig(aggregation=aggregation, regularizer_tokens=tokens, entropy_coef=0.1)
    base, _ = policy_loss(stats, torch.zeros(2, 4), ADVANTAGES, RESPONSE, SELECTED, base_config)
    loss, _ = policy_loss(stats, torch.zeros(2, 4), ADVANTAGES, RESPONSE, SELECTED, config)
    assert (loss - base).item() == pytest.approx(-0.1 * expected, rel=1e-6)


def test_old_log_probs_get_no_gradient() -> None:
    """The old log-probs are constants of the surrogate: an ``old_log_probs`` tensor that requires
    grad (e.g. computed by the same model outside ``no_grad``) receives none, whatever the terms."""
    old = torch.full((2, 4), -0.1, requires_grad=True)
    log_probs = RATIOS.log().requires_grad_(True)
    penalty = torch.ones(2, 4)
    config = PolicyLossConfig(clip_ratio_c=3.0)
    loss, _ = policy_loss(fixed_stats(log_probs), old, ADVANTAGES, RESPONSE, SELECTED, config, kl_penalty=penalty)
    loss.backward()
    assert old.grad is None and log_probs.grad is not None
    kl_penalty_term(log_probs, old, penalty).sum().backward()  # alone, as the TRL integration calls it
    assert old.grad is None


def test_inputs_outside_the_selected_tokens_never_reach_the_loss_or_its_gradient():
    """NaN in old log-probs, advantages or KL-Cov penalties where the surrogate has weight 0 (a
    padding position, an unselected response token) leaves the loss and the gradient those of
    finite inputs there, instead of NaN * 0 = NaN."""
    torch.manual_seed(0)
    log_probs = torch.randn(3, 5) - 1.0
    old = log_probs.detach() + 0.1 * torch.randn(3, 5)
    advantages = torch.randn(3, 5)
    penalty = torch.rand(3, 5)
    response = torch.ones(3, 5, dtype=torch.bool)
    response[0, 3:] = False
    selected = response.clone()
    selected[1, 1] = selected[2, 4] = False
    config = PolicyLossConfig(aggregation="seq_mean_token_mean")

    def loss_and_grad(old, advantages, penalty):
        leaf = log_probs.clone().requires_grad_()
        loss, _ = policy_loss(fixed_stats(leaf), old, advantages, response, selected, config, kl_penalty=penalty)
        loss.backward()
        return loss.detach(), leaf.grad

    clean = loss_and_grad(old, advantages, penalty)
    outside = ~selected
    poisoned = [torch.where(outside, torch.full_like(value, math.nan), value) for value in (old, advantages, penalty)]
    dirty = loss_and_grad(*poisoned)
    assert torch.isfinite(clean[0]) and torch.equal(clean[0], dirty[0]) and torch.equal(clean[1], dirty[1])
    assert bool((clean[1][outside] == 0).all())


@pytest.mark.parametrize("tokens", ["selected", "all"])
def test_nan_reference_log_probs_where_the_kl_term_has_no_weight_reach_neither_loss_nor_gradient(tokens):
    """NaN reference log-probs at a padding position (and, with ``regularizer_tokens="selected"``,
    at an unselected response token) leave the loss and its gradient those of finite values there;
    the ``kl`` metric (over the response tokens) is NaN only where the response holds the NaN."""
    torch.manual_seed(1)
    log_probs = torch.randn(3, 5) - 1.0
    reference = log_probs + 0.2 * torch.randn(3, 5)
    response = torch.ones(3, 5, dtype=torch.bool)
    response[0, 3:] = False
    selected = response.clone()
    selected[1, 1] = False
    config = PolicyLossConfig(kl_coef=0.1, regularizer_tokens=tokens)
    outside = ~response if tokens == "all" else ~selected

    def loss_and_grad(reference):
        leaf = log_probs.clone().requires_grad_()
        loss, metrics = policy_loss(fixed_stats(leaf), log_probs, torch.ones(3), response, selected, config,
                                    reference_log_probs=reference)
        loss.backward()
        return loss.detach(), leaf.grad, metrics["kl"]

    clean = loss_and_grad(reference)
    dirty = loss_and_grad(torch.where(outside, math.nan, reference))
    assert torch.isfinite(clean[0]) and torch.equal(clean[0], dirty[0]) and torch.equal(clean[1], dirty[1])
    assert math.isfinite(clean[2]) and math.isnan(dirty[2]) == (tokens == "selected")


@pytest.mark.parametrize("shape", [(0, 4), (3, 0)])
@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
def test_an_empty_batch_has_a_zero_loss(shape, aggregation):
    zeros, mask = torch.zeros(shape), torch.zeros(shape, dtype=torch.bool)
    loss, _ = policy_loss(fixed_stats(zeros), zeros, torch.zeros(shape[0]), mask, mask,
                          PolicyLossConfig(aggregation=aggregation))
    assert loss.item() == 0.0


@pytest.mark.parametrize("aggregation,denominator", [
    ("token_mean", "selected"), ("token_mean", "all"), ("seq_mean_token_mean", "selected"),
    ("seq_mean_token_mean", "all"), ("seq_mean_token_sum_norm", "selected")])
def test_micro_batch_losses_weighted_by_aggregation_weight_are_the_whole_batchs_loss(aggregation, denominator):
    """``sum_m w_m loss_m / sum_m w_m`` over one-row micro-batches is the loss of the whole batch,
    a micro-batch without a selected token included (with ``denominator="all"`` its response
    tokens, and for ``seq_mean_token_mean`` its row, still count in the mean: TRL's normalisation)."""
    log_ratio = RATIOS.log()
    selected = SELECTED.clone()
    selected[1] = False  # row 1: response tokens, none selected
    config = PolicyLossConfig(aggregation=aggregation, denominator=denominator)
    whole, _ = policy_loss(fixed_stats(log_ratio), torch.zeros(2, 4), ADVANTAGES, RESPONSE, selected, config)
    parts = [(policy_loss(fixed_stats(log_ratio[row:row + 1]), torch.zeros(1, 4), ADVANTAGES[row:row + 1],
                          RESPONSE[row:row + 1], selected[row:row + 1], config)[0].item(),
              aggregation_weight(selected[row:row + 1], RESPONSE[row:row + 1], config)) for row in range(2)]
    combined = sum(loss * weight for loss, weight in parts) / sum(weight for _, weight in parts)
    losses = hand_losses()
    chosen = sum(losses[0][t] for t in range(4) if selected[0, t])
    expected = {("token_mean", "selected"): chosen / 2, ("token_mean", "all"): chosen / 7,
                ("seq_mean_token_mean", "selected"): chosen / 2, ("seq_mean_token_mean", "all"): chosen / 3 / 2,
                ("seq_mean_token_sum_norm", "selected"): chosen / (2 * 4)}[aggregation, denominator]
    assert whole.item() == pytest.approx(expected, rel=1e-6)
    assert combined == pytest.approx(expected, rel=1e-6)


def test_denominator_all_averages_seq_mean_token_mean_over_every_row_as_trls_grpo():
    """With ``denominator="all"``, ``seq_mean_token_mean`` is TRL's grpo loss under its
    ``top_entropy_quantile`` mask, ``((loss * mask * selected).sum(-1) / mask.sum(-1)).mean()``:
    the mean over every row, one with response tokens but none selected and one with no response
    token (cut by ``mask_truncated_completions``) included; it was the mean over the rows with a
    selected token (3x TRL's here). One-row micro-batches weighted by `aggregation_weight` give the
    same; the default, ``selected``, keeps the mean over the rows with a selected token."""
    log_ratio = torch.cat([RATIOS.log(), torch.zeros(1, 4)])
    advantages = torch.tensor([1.0, -2.0, 0.5])
    response = torch.cat([RESPONSE, torch.zeros(1, 4, dtype=torch.bool)])
    selected = torch.cat([SELECTED[:1], torch.zeros(2, 4, dtype=torch.bool)])  # row 0 alone has a selection
    losses = hand_losses()
    row0 = losses[0][0] + losses[0][1]  # its selected tokens (0 and 1)
    for denominator, expected in (("all", row0 / 3 / 3), ("selected", row0 / 2)):
        config = PolicyLossConfig(aggregation="seq_mean_token_mean", denominator=denominator)
        whole, _ = policy_loss(fixed_stats(log_ratio), torch.zeros(3, 4), advantages, response, selected, config)
        parts = [(policy_loss(fixed_stats(log_ratio[row:row + 1]), torch.zeros(1, 4), advantages[row:row + 1],
                              response[row:row + 1], selected[row:row + 1], config)[0].item(),
                  aggregation_weight(selected[row:row + 1], response[row:row + 1], config)) for row in range(3)]
        assert whole.item() == pytest.approx(expected, rel=1e-6)
        assert sum(loss * weight for loss, weight in parts) / sum(weight for _, weight in parts) == pytest.approx(
            expected, rel=1e-6)
    # the regularizer over all response tokens: the same mean over every row (TRL adds beta * k3 to the loss)
    config = PolicyLossConfig(aggregation="seq_mean_token_mean", regularizer_tokens="all", entropy_coef=1.0)
    entropy = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 4.0, 1.0, 1.0], [7.0, 7.0, 7.0, 7.0]], requires_grad=True)
    stats = fixed_stats(log_ratio)
    stats.entropy = entropy
    loss, _ = policy_loss(stats, torch.zeros(3, 4), advantages, response, selected, config)
    assert loss.item() == pytest.approx(row0 / 2 - (2.0 + 2.5 + 0.0) / 3, rel=1e-6)


@pytest.mark.parametrize("name,value", [
    ("old_log_probs", torch.zeros(5)), ("old_log_probs", torch.zeros(3, 1)), ("advantages", torch.ones(1)),
    ("advantages", torch.ones(())), ("advantages", torch.ones(4)), ("selected_mask", torch.ones(3, 1, dtype=torch.bool)),
    ("response_mask", torch.ones(5, dtype=torch.bool)), ("kl_penalty", torch.ones(3)),
])
def test_policy_loss_refuses_inputs_it_would_broadcast(name, value):
    """Every [B, T] input must have the log-probs' shape and the advantages [B] or [B, T]: a shape
    torch would broadcast (or fail on five frames down) is one ValueError naming the input."""
    inputs = {"old_log_probs": torch.zeros(3, 5), "advantages": torch.ones(3),
              "response_mask": torch.ones(3, 5, dtype=torch.bool), "selected_mask": torch.ones(3, 5, dtype=torch.bool),
              "kl_penalty": None, name: value}
    with pytest.raises(ValueError, match=f"^{name} must be "):
        policy_loss(fixed_stats(torch.zeros(3, 5)), **inputs)


@pytest.mark.parametrize("options,message", [
    ({"max_response_length": 0}, "max_response_length must be >= 1"),
    ({"max_response_length": -5}, "max_response_length must be >= 1"),
    ({"clip_high": math.nan}, "clip_high must be finite"),
    ({"kl_coef": math.nan}, "kl_coef must be finite"),
    ({"entropy_coef": math.inf}, "entropy_coef must be finite"),
    ({"clip_ratio_c": math.inf}, "clip_ratio_c must be finite"),
])
def test_policy_loss_config_refuses_values_that_change_the_loss_silently(options, message):
    with pytest.raises(ValueError, match=message):
        PolicyLossConfig(**options)


@pytest.mark.parametrize("group_size", [3.0, True, 1])
def test_group_advantages_refuse_a_group_size_that_is_not_an_integer_of_two_or_more(group_size):
    with pytest.raises(ValueError, match="group_size must be an integer >= 2"):
        group_advantages(torch.zeros(6), group_size)

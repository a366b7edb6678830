"""Properties of the policy loss (``ict.core.loss``) against a reference written token by token
in plain Python floats from the module's docstring (the clipped surrogate, dual-clip, KL-Cov's
penalty, the k3 KL and entropy terms, the three aggregations and both denominators): its value
and its gradient with respect to the log-probs, on drawn masks, selections and advantages; the
micro-batch weights; the gradient mask; GRPO's group advantages against numpy."""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from ict.core.loss import (
    PolicyLossConfig,
    aggregation_weight,
    group_advantages,
    loss_gradient_mask,
    policy_loss,
)
from ict.core.stats import TokenStatistics

AGGREGATIONS = st.sampled_from(["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])


def clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


def reference_aggregate(values, derivatives, weights, counted, config, every_row):
    """``(value, gradient)`` of one per-token term (``values``/``derivatives``: dicts over the
    ``weights`` positions) aggregated as the docstring says; ``counted``: the denominator's tokens;
    ``every_row``: seq_mean_token_mean's mean over all rows (the response tokens' normalisation)."""
    batch, length = len(weights), len(weights[0])
    gradient = [[0.0] * length for _ in range(batch)]
    if config.aggregation == "seq_mean_token_mean":  # mean over rows (with a token) of each row's mean
        rows = [b for b in range(batch) if every_row or any(weights[b])]
        total = 0.0
        for b in rows:
            scale = 1.0 / max(1, sum(counted[b])) / len(rows)
            total += sum(values[b, t] for t in range(length) if weights[b][t]) * scale
            for t in range(length):
                if weights[b][t]:
                    gradient[b][t] = derivatives.get((b, t), 0.0) * scale
        return total, gradient
    if config.aggregation == "token_mean":
        scale = 1.0 / max(1, sum(map(sum, counted)))
    else:  # seq_mean_token_sum_norm: the constant B * L
        scale = 1.0 / max(1, batch * (config.max_response_length or length))
    for (b, t), derivative in derivatives.items():
        gradient[b][t] = derivative * scale
    return sum(values.values()) * scale, gradient


def reference_loss(case):
    """The loss and its gradient w.r.t. each log-prob, token by token."""
    log_probs, old, advantages, response, selected, penalty, reference, entropy, config = case
    batch, length = len(log_probs), len(log_probs[0])
    chosen = [[response[b][t] and selected[b][t] for t in range(length)] for b in range(batch)]
    values, derivatives = {}, {}
    for b, t in [(b, t) for b in range(batch) for t in range(length) if chosen[b][t]]:
        a, delta = advantages[b][t], log_probs[b][t] - old[b][t]
        inside = -20.0 < delta < 20.0  # the log-ratio's clamp passes a gradient strictly inside
        rho = math.exp(clamp(delta, -20.0, 20.0))
        low, high = 1.0 - config.clip_low, 1.0 + config.clip_high
        if rho * a <= clamp(rho, low, high) * a:  # -min(rho A, clip(rho) A): the unclipped term
            value, derivative = -rho * a, -a * rho * inside
        else:
            value, derivative = -clamp(rho, low, high) * a, -a * rho * inside * (low <= rho <= high)
        if config.clip_ratio_c is not None and a < 0 and -a * config.clip_ratio_c < value:
            value, derivative = -a * config.clip_ratio_c, 0.0
        if penalty is not None and penalty[b][t]:  # KL-Cov: penalty * |log-ratio|
            value += penalty[b][t] * abs(clamp(delta, -20.0, 20.0))
            derivative += penalty[b][t] * (delta > 0) - penalty[b][t] * (delta < 0) if inside else 0.0
        values[b, t], derivatives[b, t] = value, derivative
    counted = response if config.denominator == "all" else chosen
    loss, gradient = reference_aggregate(values, derivatives, chosen, counted, config, config.denominator == "all")
    every_row = "all" in (config.regularizer_tokens, config.denominator)
    covered = response if config.regularizer_tokens == "all" else chosen
    counted = response if config.regularizer_tokens == "all" else counted
    spots = [(b, t) for b in range(batch) for t in range(length) if covered[b][t]]
    if config.kl_coef > 0:  # k3 = exp(x) - x - 1, x = ref - lp clamped at 20 nats
        deltas = {(b, t): reference[b][t] - log_probs[b][t] for b, t in spots}
        kl, kl_gradient = reference_aggregate(
            {p: math.exp(clamp(x, -20, 20)) - clamp(x, -20, 20) - 1.0 for p, x in deltas.items()},
            {p: (1.0 - math.exp(clamp(x, -20, 20))) * (-20 < x < 20) for p, x in deltas.items()},
            covered, counted, config, every_row)
        loss += config.kl_coef * kl
        gradient = [[gradient[b][t] + config.kl_coef * kl_gradient[b][t] for t in range(length)]
                    for b in range(batch)]
    if config.entropy_coef > 0:
        bonus, _ = reference_aggregate({p: entropy[p[0]][p[1]] for p in spots}, {}, covered, counted, config, every_row)
        loss -= config.entropy_coef * bonus
    return loss, gradient


@st.composite
def loss_cases(draw):
    batch, length = draw(st.integers(1, 4)), draw(st.integers(1, 6))

    def table(strategy):
        return [[draw(strategy) for _ in range(length)] for _ in range(batch)]

    log_probs = table(st.floats(-3.0, 0.0))
    shifts = table(st.sampled_from([0.0, 0.1, -0.1, 0.3, -0.3, 0.5, -0.5, 25.0, -25.0]))
    old = [[lp + shift for lp, shift in zip(*rows)] for rows in zip(log_probs, shifts)]
    if draw(st.booleans()):
        advantages = table(st.floats(-2.0, 2.0))
    else:
        advantages = [[value] * length for value in [draw(st.floats(-2.0, 2.0)) for _ in range(batch)]]
    response, selected = table(st.booleans()), table(st.booleans())
    penalty = table(st.sampled_from([0.0, 0.0, 0.5, 1.0])) if draw(st.booleans()) else None
    reference = [[lp + shift for lp, shift in zip(*rows)] for rows in zip(
        log_probs, table(st.sampled_from([0.0, 0.2, -0.7, 30.0])))]
    entropy = table(st.floats(0.0, 3.0))
    config = PolicyLossConfig(
        clip_low=draw(st.sampled_from([0.0, 0.2])), clip_high=draw(st.sampled_from([0.0, 0.28])),
        aggregation=draw(AGGREGATIONS), max_response_length=draw(st.sampled_from([None, 7])),
        clip_ratio_c=draw(st.sampled_from([None, 1.5, 3.0])), denominator=draw(st.sampled_from(["selected", "all"])),
        kl_coef=draw(st.sampled_from([0.0, 0.1])), entropy_coef=draw(st.sampled_from([0.0, 0.01])),
        regularizer_tokens=draw(st.sampled_from(["selected", "all"])))
    return log_probs, old, advantages, response, selected, penalty, reference, entropy, config


def run_loss(case, per_row_advantages: bool = False):
    log_probs, old, advantages, response, selected, penalty, reference, entropy, config = case
    x = torch.tensor(log_probs, dtype=torch.float64, requires_grad=True)
    h = torch.tensor(entropy, dtype=torch.float64, requires_grad=True)
    a = torch.tensor(advantages, dtype=torch.float64)
    loss, metrics = policy_loss(
        TokenStatistics(x, h, torch.zeros_like(h), {}), torch.tensor(old, dtype=torch.float64),
        a[:, 0] if per_row_advantages else a, torch.tensor(response), torch.tensor(selected), config,
        reference_log_probs=torch.tensor(reference, dtype=torch.float64),
        kl_penalty=None if penalty is None else torch.tensor(penalty, dtype=torch.float32))
    loss.backward()
    return loss, x.grad, metrics


@given(case=loss_cases())
def test_the_loss_and_its_gradient_are_the_documented_formulas_token_by_token(case):
    rows_share = all(len(set(row)) == 1 for row in case[2])
    loss, gradient, metrics = run_loss(case, per_row_advantages=rows_share)
    expected, expected_gradient = reference_loss(case)
    assert math.isclose(loss.item(), expected, rel_tol=1e-9, abs_tol=1e-12)
    assert np.allclose(gradient.numpy(), np.array(expected_gradient), rtol=1e-9, atol=1e-12)
    # outside the selected response tokens only the regularizers over "all" reach a log-prob
    log_probs, old, advantages, response, selected, penalty, reference, entropy, config = case
    for b, row in enumerate(response):
        for t, in_response in enumerate(row):
            if not in_response or (not selected[b][t] and not (config.regularizer_tokens == "all"
                                                               and config.kl_coef > 0)):
                assert gradient[b, t] == 0.0


@given(case=loss_cases(), scale=st.sampled_from([0.5, 2.0, 3.0]))
def test_scaling_the_advantages_scales_the_surrogates_value_and_gradient(case, scale):
    log_probs, old, advantages, response, selected, penalty, reference, entropy, config = case
    config = PolicyLossConfig(config.clip_low, config.clip_high, config.aggregation, config.max_response_length,
                              denominator=config.denominator)  # no penalty or regularizer: the surrogate alone
    plain = (log_probs, old, advantages, response, selected, None, reference, entropy, config)
    scaled = (log_probs, old, [[a * scale for a in row] for row in advantages], response, selected, None, reference,
              entropy, config)
    loss, gradient, _ = run_loss(plain)
    scaled_loss, scaled_gradient, _ = run_loss(scaled)
    assert math.isclose(scaled_loss.item(), scale * loss.item(), rel_tol=1e-9, abs_tol=1e-12)
    assert torch.allclose(scaled_gradient, scale * gradient, rtol=1e-9, atol=1e-12)


@given(batch=st.integers(0, 3), length=st.integers(0, 4), aggregation=AGGREGATIONS,
       denominator=st.sampled_from(["selected", "all"]), response_rate=st.sampled_from([0.0, 0.5, 1.0]))
def test_an_empty_selection_has_a_zero_loss_zero_gradient_and_nan_clip_fraction(
        batch, length, aggregation, denominator, response_rate):
    generator = torch.Generator().manual_seed(batch * 10 + length)
    x = (-torch.rand(batch, length, generator=generator, dtype=torch.float64)).requires_grad_()
    response = torch.rand(batch, length, generator=generator) < response_rate
    config = PolicyLossConfig(aggregation=aggregation, denominator=denominator)
    loss, metrics = policy_loss(TokenStatistics(x, x.detach(), x.detach(), {}), x.detach() - 0.3,
                                torch.randn(batch, generator=generator, dtype=torch.float64), response,
                                torch.zeros(batch, length, dtype=torch.bool), config)
    loss.backward()
    assert loss.item() == 0.0 and not x.grad.any()
    assert math.isnan(metrics["clip_fraction"])
    if response.any():  # the metrics' means are NaN over an empty set (the docstring), 0 selected of some
        assert metrics["selected_fraction"] == 0.0
    else:
        assert math.isnan(metrics["selected_fraction"])


@given(case=loss_cases(), cuts=st.sets(st.integers(1, 3)))
def test_micro_batch_losses_weighted_by_aggregation_weight_are_the_batchs(case, cuts):
    log_probs, old, advantages, response, selected, _, reference, entropy, config = case
    config = PolicyLossConfig(config.clip_low, config.clip_high, config.aggregation, config.max_response_length,
                              clip_ratio_c=config.clip_ratio_c, denominator=config.denominator)
    whole, _ = reference_loss((log_probs, old, advantages, response, selected, None, reference, entropy, config))
    bounds = [0, *sorted(cut for cut in cuts if cut < len(log_probs)), len(log_probs)]
    total = weights = 0.0
    for start, stop in zip(bounds, bounds[1:]):
        part = tuple(rows[start:stop] for rows in (log_probs, old, advantages, response, selected))
        loss, _, _ = run_loss((*part, None, reference[start:stop], entropy[start:stop], config))
        weight = aggregation_weight(torch.tensor(part[4]), torch.tensor(part[3]), config)
        total, weights = total + weight * loss.item(), weights + weight
    assert math.isclose(total / weights if weights else 0.0, whole, rel_tol=1e-9, abs_tol=1e-12)


@given(case=loss_cases())
def test_the_gradient_mask_holds_every_position_with_a_gradient(case):
    log_probs, old, advantages, response, selected, penalty, reference, entropy, config = case
    config = PolicyLossConfig(config.clip_low, config.clip_high, config.aggregation, config.max_response_length,
                              clip_ratio_c=config.clip_ratio_c, denominator=config.denominator)
    advantages = [[a if a > 0.5 or a < -0.5 else 0.0 for a in row] for row in advantages]  # some zeros
    _, gradient, _ = run_loss((log_probs, old, advantages, response, selected, penalty, reference, entropy, config))
    mask = loss_gradient_mask(torch.tensor(response), torch.tensor(advantages, dtype=torch.float64), config,
                              torch.tensor(selected), None if penalty is None else torch.tensor(penalty))
    assert not gradient[~mask].any()


@given(group_size=st.integers(2, 5), groups=st.integers(1, 4), normalize_std=st.booleans(), data=st.data())
def test_group_advantages_are_numpys_centred_and_scaled_rewards(group_size, groups, normalize_std, data):
    rewards = data.draw(st.lists(st.sampled_from([0.0, 1.0, 0.5, -1.0, 1e-3, 3.7]),
                                 min_size=group_size * groups, max_size=group_size * groups))
    ours = group_advantages(torch.tensor(rewards), group_size, normalize_std=normalize_std).numpy()
    for group in range(groups):
        values = np.array(rewards[group * group_size:(group + 1) * group_size], dtype=np.float32).astype(np.float64)
        expected = np.zeros(group_size) if (values == values[0]).all() else values - values.mean()
        if normalize_std and not (values == values[0]).all():
            expected /= values.std(ddof=1) + 1e-6
        assert np.allclose(ours[group * group_size:(group + 1) * group_size], expected, rtol=1e-5, atol=1e-6)

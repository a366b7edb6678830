"""The policy loss at the edges of its formulas, against float64 hand values: the +-20 nat clamp
of the log-ratio (surrogate, k3, KL-Cov's penalty), a non-finite log-prob at an unselected token,
bf16 log-probs, the micro-batch weight of a selected mask that reaches past the response, the
metrics ``kl_old`` (its direction) and ``js_score`` (the first reference), ``masked_means`` with
several scalars and the config's refusal of clip ranges and coefficients out of their ranges. Each test pins a
detail that ``test_loss.py``'s broader tests leave free."""

from __future__ import annotations

import math

import pytest
import torch

from ict.core.loss import (
    PolicyLossConfig,
    aggregation_weight,
    k3_kl,
    kl_penalty_term,
    masked_means,
    policy_loss,
)
from ict.core.stats import TokenStatistics


def _stats(log_probs: torch.Tensor, js_scores: dict[str, torch.Tensor] | None = None) -> TokenStatistics:
    ones = torch.ones(log_probs.shape, dtype=torch.float64)
    return TokenStatistics(log_probs, ones, ones * 0.5, js_scores or {})


def _one(value: float) -> torch.Tensor:
    return torch.tensor([[value]], dtype=torch.float64)


def test_the_log_ratio_is_clamped_at_20_nats_in_the_surrogate_the_k3_kl_and_the_kl_penalty() -> None:
    """``exp`` of a log-ratio beyond +-20 nats is taken at +-20: below it the values are the
    formulas' own (a bound of 5 would turn e^8 into e^5)."""
    assert k3_kl(_one(0.0), _one(10.0)).item() == pytest.approx(math.exp(10) - 10 - 1, rel=1e-12)
    assert k3_kl(_one(0.0), _one(25.0)).item() == pytest.approx(math.exp(20) - 20 - 1, rel=1e-12)
    assert k3_kl(_one(0.0), _one(-25.0)).item() == pytest.approx(math.exp(-20) + 20 - 1, rel=1e-12)
    assert kl_penalty_term(_one(0.0), _one(-8.0), _one(1.5)).item() == 12.0
    assert kl_penalty_term(_one(0.0), _one(-30.0), _one(1.0)).item() == 20.0
    selected = torch.ones(1, 1, dtype=torch.bool)
    advantage = torch.tensor([-1.0], dtype=torch.float64)
    # A < 0: min(rho A, clip(rho) A) = rho A, the loss is rho = exp(log-ratio) (no dual clip)
    for log_ratio, expected in ((8.0, math.exp(8)), (30.0, math.exp(20)), (-30.0, 0.8)):
        loss, _ = policy_loss(_stats(_one(log_ratio)), _one(0.0), advantage, selected, selected)
        assert loss.item() == pytest.approx(expected, rel=1e-12), log_ratio


def test_a_non_finite_log_prob_at_an_unselected_token_reaches_neither_loss_nor_gradient() -> None:
    """-inf and NaN log-probs at unselected response tokens: the loss and the gradient are those
    of a float64 loop over the selected tokens (the per-token loss there, NaN, is left out of the
    sum, not multiplied by 0), the gradient there exactly 0."""
    old = torch.tensor([[-0.6, -1.0, -1.0], [-0.2, -0.9, -1.5]], dtype=torch.float64)
    finite = torch.tensor([[-0.5, -1.0, -2.0], [-0.3, -0.7, -1.5]], dtype=torch.float64)
    advantages = torch.tensor([1.0, -0.5], dtype=torch.float64)
    response = torch.ones(2, 3, dtype=torch.bool)
    selected = torch.tensor([[1, 0, 1], [1, 1, 0]], dtype=torch.bool)

    def token_loss(b: int, t: int) -> float:
        rho, a = math.exp(float(finite[b, t] - old[b, t])), float(advantages[b])
        return -min(rho * a, min(max(rho, 0.8), 1.28) * a)

    cells = [(0, 0), (0, 2), (1, 0), (1, 1)]
    for aggregation, expected in (("token_mean", sum(token_loss(*c) for c in cells) / 4),
                                  ("seq_mean_token_sum_norm", sum(token_loss(*c) for c in cells) / 6)):
        log_probs = finite.clone()
        log_probs[0, 1], log_probs[1, 2] = -math.inf, math.nan
        log_probs.requires_grad_()
        loss, _ = policy_loss(_stats(log_probs), old, advantages, response, selected,
                              PolicyLossConfig(aggregation=aggregation))
        loss.backward()
        assert loss.item() == pytest.approx(expected, rel=1e-12), aggregation
        assert log_probs.grad[0, 1] == 0 and log_probs.grad[1, 2] == 0 and log_probs.grad.isfinite().all()


def test_bf16_log_probs_give_the_float64_loss_of_their_values() -> None:
    """bf16 log-probs (verl's) are promoted before the surrogate: the loss is the float64 value of
    the bf16 inputs to float32 precision, not rounded to bf16 with the advantages (1/3 -> 0.334)."""
    log_probs = torch.tensor([[-0.5, -1.25, -2.0]], dtype=torch.bfloat16)
    old = torch.tensor([[-0.55, -1.2, -2.1]])
    advantages = torch.tensor([1.0 / 3.0])
    selected = torch.ones(1, 3, dtype=torch.bool)
    loss, _ = policy_loss(_stats(log_probs), old, advantages, selected, selected)
    a = 1.0 / 3.0
    terms = []
    for lp, o in zip(log_probs.double()[0].tolist(), old.double()[0].tolist()):
        rho = math.exp(lp - o)
        terms.append(-min(rho * a, min(max(rho, 0.8), 1.28) * a))
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(sum(terms) / 3, rel=1e-6)


def test_the_micro_batch_weight_counts_only_selected_response_tokens() -> None:
    """A selected mask that is True at padding weighs what ``policy_loss`` counts: the selected
    response tokens, the sequences with one, the rows, or (``denominator="all"``) the response
    tokens."""
    selected = torch.ones(3, 4, dtype=torch.bool)
    response = torch.tensor([[1, 1, 0, 0], [1, 0, 0, 0], [0, 0, 0, 0]], dtype=torch.bool)
    weights = {aggregation: aggregation_weight(selected, response, PolicyLossConfig(aggregation=aggregation))
               for aggregation in ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")}
    assert weights == {"token_mean": 3.0, "seq_mean_token_mean": 2.0, "seq_mean_token_sum_norm": 3.0}
    assert aggregation_weight(selected, response, PolicyLossConfig(denominator="all")) == 3.0
    partly = torch.tensor([[0, 1, 1, 1], [0, 1, 1, 1], [1, 1, 1, 1]], dtype=torch.bool)
    assert aggregation_weight(partly, response, PolicyLossConfig()) == 1.0
    assert aggregation_weight(partly, response, PolicyLossConfig(denominator="all")) == 3.0


def test_kl_old_is_the_k3_of_the_old_policy_and_js_score_the_first_references() -> None:
    """``kl_old`` = mean over response tokens of ``exp(old - lp) - (old - lp) - 1`` (the k3 of
    KL(pi || old), as ``kl`` to the reference): at p = 1/2, old 1/4 it is ln 2 - 1/2, not the
    reverse direction's 1 - ln 2; ``js_score`` is the first computed reference's."""
    log_probs = torch.tensor([[math.log(0.5), math.log(0.5), 0.0]], dtype=torch.float64)
    old = torch.tensor([[math.log(0.25), math.log(0.5), math.nan]], dtype=torch.float64)
    response = torch.tensor([[1, 1, 0]], dtype=torch.bool)
    js = {"prev": torch.tensor([[0.1, 0.3, 0.0]]), "seq_mean": torch.tensor([[0.5, 0.6, 0.0]])}
    _, metrics = policy_loss(_stats(log_probs, js), old, torch.ones(1), response, response,
                             reference_log_probs=old)
    assert metrics["kl_old"] == pytest.approx((math.log(2) - 0.5) / 2, rel=1e-12)
    assert metrics["kl"] == pytest.approx((math.log(2) - 0.5) / 2, rel=1e-12)
    assert metrics["js_score"] == pytest.approx(0.2) and metrics["js_score_selected"] == pytest.approx(0.2)
    assert metrics["js_seq_mean"] == pytest.approx(0.55)


def test_masked_means_returns_every_scalar_after_the_means() -> None:
    values = torch.tensor([[1.0, 2.0, 4.0]], dtype=torch.float64)
    mask = torch.tensor([[True, False, True]])
    assert masked_means([(values, mask)], (torch.tensor(7.0), torch.tensor(-1.5))) == [2.5, 7.0, -1.5]


@pytest.mark.parametrize("options", [{"clip_low": 1.0}, {"clip_low": -0.1}, {"clip_high": -0.1},
                                     {"kl_coef": -0.1}, {"entropy_coef": -0.1}, {"clip_ratio_c": 1.0}])
def test_policy_loss_config_refuses_clip_ranges_and_coefficients_out_of_range(options) -> None:
    """``0 <= clip_low < 1`` (at 1 the lower bound of the ratio, 0, clips nothing), ``clip_high >= 0``
    (below 0 every ratio above 1 - |clip_high| would be clipped), coefficients >= 0 (a negative
    entropy coefficient is an entropy penalty), ``clip_ratio_c > 1``."""
    with pytest.raises(ValueError):
        PolicyLossConfig(**options)

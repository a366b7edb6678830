"""Selection never depends on micro_batch_size: every registered selector selects the same
tokens, and the step's gradient is the whole batch's, at every micro-batch size (ties, NaN tokens,
token means over no token and the first update of a reused batch included)."""

from __future__ import annotations

import math

import pytest
import torch
from train_helpers import accumulate, grouped_batch_and_advantages

from ict.core.loss import PolicyLossConfig
from ict.training.step import Method, StepContext, accumulate_gradients

SELECTOR_CASES = [
    ("all", {}), ("entropy", {}), ("stapo", {"tau_p": 0.05}), ("random", {}),
    ("ict", {}), ("ict", {"scope": "group"}), ("ict", {"scope": "batch"}),
    ("ict", {"reference": "seq_mean"}), ("ict", {"reference": "prev", "unit": "token_id"}),
    ("ict", {"reference": "group_mean"}), ("ict", {"reference": "group_mean_loo"}),
    ("ict", {"reference": "group_mean_loo_absorbing", "scope": "sequence"}),
    ("clip_cov", {"ratio": 0.05, "cov_low": 0.0, "cov_high": 100.0}), ("kl_cov", {"ratio": 0.05}),
]


def test_every_registered_selector_is_covered_by_the_invariance_cases():
    from ict.core.selectors import SELECTORS

    assert {name for name, _ in SELECTOR_CASES} == set(SELECTORS)


@pytest.mark.parametrize("selector,options", SELECTOR_CASES)
def test_selection_is_identical_for_every_micro_batch_size(selector, options, tiny_tokenizer):
    """The mask (and the gradient) of a mini-batch do not depend on micro_batch_size 1, 2, 8, 64:
    a selector always ranks its whole population (sequence, group or batch)."""
    from conftest import build_tiny_model

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    masks, gradients = [], []
    for micro in (1, 2, 8, 64):
        model.zero_grad(set_to_none=True)
        result = accumulate(model, batch, advantages, selector, options, micro, group_size=4,
                             selection_seed=11)
        masks.append(result.selected_mask)
        gradients.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    for mask, gradient in zip(masks[1:], gradients[1:]):
        assert torch.equal(mask, masks[0])
        torch.testing.assert_close(gradient, gradients[0], rtol=1e-4, atol=1e-6)
    assert masks[0].any()


def test_denominator_all_gives_every_micro_batch_size_the_whole_batchs_gradient(tiny_tokenizer):
    """With ``denominator="all"`` (TRL's normalisation) a micro-batch without a selected token still
    counts its response tokens in the mean: its weight was 0, so a split into micro-batches scaled
    the gradient by (all response tokens) / (those of micro-batches with a selection)."""
    from conftest import build_tiny_model

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    gradients, masks = [], []
    for micro in (1, 4, 64):
        model.zero_grad(set_to_none=True)
        result = accumulate_gradients(model, batch, advantages, None, Method.of("entropy", {"ratio": 0.05}),
                                      StepContext(PolicyLossConfig(denominator="all"), 1.0),
                                      micro_batch_size=micro, group_size=4, selection_seed=11)
        masks.append(result.selected_mask)
        gradients.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert not masks[0].any(dim=1).all()  # some one-row micro-batches select nothing
    for mask, gradient in zip(masks[1:], gradients[1:]):
        assert torch.equal(mask, masks[0])
        torch.testing.assert_close(gradient, gradients[0], rtol=1e-4, atol=1e-7)


def test_a_nan_token_makes_the_step_metrics_nan_at_every_micro_batch_size(tiny_tokenizer):
    """NaN logits in one row (a NaN embedding): a micro-batch's NaN metric was left out of the
    step's token-weighted mean with its finite tokens, so the logged entropy moved with the
    micro-batch size (2.894 at 1 row, 2.901 at 8, NaN at 16) and matched neither the whole batch's
    mean (NaN) nor the finite tokens' (2.894)."""
    from conftest import build_tiny_model

    from ict.training.step import BatchUpdates
    from ict.training.step_metrics import update_metrics

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    with torch.no_grad():
        model.model.embed_tokens.weight[3] = float("nan")  # an id the batch does not hold otherwise
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    position = int(batch.response_mask[5].sum()) - 2
    batch.response_ids[5, position] = 3
    batch.input_ids[5, batch.prompt_length + position] = 3  # row 5's later logits are NaN
    for micro in (1, 4, 16):
        model.zero_grad(set_to_none=True)
        result = accumulate_gradients(model, batch, advantages, None, Method.of("all", {}),
                                      StepContext(PolicyLossConfig(), 1.0), micro_batch_size=micro, group_size=4)
        updates = BatchUpdates()
        updates.totals.merge(result.totals)
        updates.losses.append(result.loss)
        metrics = update_metrics(updates)
        assert result.stats.entropy[5].isnan().any() and result.stats.entropy[0].isfinite().all()
        for name in ("entropy", "renyi2", "entropy_selected", "js_score", "kl_old"):
            assert math.isnan(metrics[name]), (micro, name, metrics[name])


def test_token_means_over_no_token_are_null_not_zero():
    """clip_fraction (over selected tokens) and kl_old (over response tokens) were logged as 0.0 in
    a step with none (every completion truncated and masked, or nothing selected), where every
    other token mean is null."""
    from ict.training.step import BatchUpdates
    from ict.training.step_metrics import update_metrics

    updates = BatchUpdates()
    updates.totals.add({"entropy": 1.0, "clip_fraction": 0.5, "kl_old": 0.1}, 0.0, 0.0)
    metrics = update_metrics(updates)
    assert all(math.isnan(metrics[name]) for name in ("entropy", "clip_fraction", "kl_old", "selected_fraction"))
    updates.totals.add({"entropy": 1.0, "clip_fraction": 0.5, "kl_old": 0.1}, 4.0, 2.0)
    metrics = update_metrics(updates)
    assert (metrics["clip_fraction"], metrics["kl_old"], metrics["selected_fraction"]) == (0.5, 0.1, 0.5)


def test_tie_decisions_survive_the_split_into_micro_batches(tiny_tokenizer):
    """A batch population selected once, then split into micro-batches, keeps which tokens a tie
    decided (the step's `selected_tie_fraction` comes from them)."""
    from conftest import build_tiny_model

    from ict.core.selectors import SELECTORS, Selection, register_selector

    @register_selector("tie_all_test", population="batch")
    def tie_all(inputs):
        """Every response token, each decided by a tie (test only)."""
        mask = inputs.response_mask.bool()
        return Selection(mask=mask, tie_decided=mask.clone())

    try:
        model = build_tiny_model(len(tiny_tokenizer), seed=4)
        batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
        for micro in (2, 64):
            result = accumulate(model, batch, advantages, "tie_all_test", {}, micro, group_size=4,
                                 selection_seed=11)
            assert result.tie_decided is not None
            assert torch.equal(result.tie_decided, result.selected_mask) and result.selected_mask.any()
    finally:
        SELECTORS.pop("tie_all_test")


def test_the_first_update_of_a_reused_batch_does_not_depend_on_micro_batch_size(tiny_tokenizer):
    """With a batch feeding several updates, the first took its old log-probs from the separate
    scoring pass of the same weights: equal up to float noise, which KL-Cov's |log p - old| turned
    into a +-kl_coef gradient whose sign moved with micro_batch_size (parameters 7e-2 apart after
    the first update at micro 1 against the whole mini-batch). GRPO rides along as a control."""
    from conftest import build_tiny_model

    from ict.training.config import TrainConfig
    from ict.training.step import update_on_batch

    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer), groups=3, seed=21)
    for selector, options in (("kl_cov", {"ratio": 0.05}), ("all", {})):
        finals = []
        for micro in (None, 1, 3):
            config = TrainConfig(prompts_per_step=3, num_generations=4, mini_batch_size=8, micro_batch_size=micro,
                                 updates_per_batch=2, max_grad_norm=0.0, seed=3, method=selector, max_new_tokens=8)
            model = build_tiny_model(len(tiny_tokenizer), seed=5)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            update_on_batch(model, optimizer, batch, advantages, Method.of(selector, options),
                            StepContext(PolicyLossConfig(aggregation="seq_mean_token_mean"), 1.0), config, step=2,
                            state={})
            finals.append(torch.cat([p.detach().flatten() for p in model.parameters()]).double())
        start = torch.cat([p.detach().flatten() for p in build_tiny_model(len(tiny_tokenizer), seed=5).parameters()])
        moved = float((finals[0] - start.double()).norm())
        for final in finals[1:]:
            assert float((final - finals[0]).norm()) <= 1e-4 * moved, selector


def test_clip_cov_spares_the_tokens_the_ratio_clip_clips_at_every_micro_batch_size(tiny_tokenizer):
    """Clip-Cov cuts a random share of its candidates but never a token whose ratio the surrogate
    already clips (``-A clip(rho) > -A rho``, rho against the given old log-probs). Its population is
    the batch, so micro-batches of 1 row select on a scoring pass: there too rho must be taken
    against the given old log-probs (the scoring pass's own log-probs give rho = 1, clipping
    nothing, so clipped tokens were cut). Old = current + noise of 0.5: many ratios leave the range."""
    from conftest import build_tiny_model

    from ict.training.step import score_batch

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    response = batch.response_mask.bool()
    context = StepContext(PolicyLossConfig(), 1.0)
    current = score_batch(model, batch, torch.arange(16) // 4, (), context, 16, 4).log_probs.double()
    old = torch.where(response, current + 0.5 * torch.randn(response.shape, generator=torch.Generator().manual_seed(2),
                                                             dtype=torch.float64), 0.0)
    ratio = (current - old).exp()
    clipped = -advantages.double()[:, None] * ratio.clamp(0.8, 1.28) > -advantages.double()[:, None] * ratio
    assert int((response & clipped).sum()) > 10
    method = Method.of("clip_cov", {"ratio": 0.3, "cov_low": -100.0, "cov_high": 100.0})
    masks = []
    for micro in (16, 1):
        model.zero_grad(set_to_none=True)
        result = accumulate_gradients(model, batch, advantages, old.float(), method, context, micro_batch_size=micro,
                                      group_size=4, selection_seed=11)
        cut = response & ~result.selected_mask
        assert int(cut.sum()) == int(0.3 * int(response.sum()))
        assert not (cut & clipped).any(), micro
        masks.append(result.selected_mask)
    assert torch.equal(masks[0], masks[1])


@pytest.mark.parametrize("micro", [4, 1])
def test_in_bf16_the_first_updates_ratio_is_exactly_1_and_whole_group_micro_batches_select_on_its_log_probs(
        tiny_tokenizer, monkeypatch, micro):
    """bf16 weights at temperature 0.7, a rollout batch feeding 2 updates (so a no-grad scoring pass
    gives the old log-probs of the second) and clip_cov, whose population (the batch) spans the
    micro-batches: the first update's loss takes its own detached log-probs as old, so its ratio is
    exactly 1 (kl_old and clip_fraction 0), also at micro 1, where a one-row micro-batch runs its
    prompt in full and the scoring pass (whole groups, each prompt run once for its group) may read
    log-probs bf16 rounding apart (a CPU with AMX's bf16 products gave none). With micro-batches of whole groups both passes run the same
    forward: the selection reads the loss's log-probs to the bit."""
    from conftest import build_tiny_model

    import ict.training.step as step
    from ict.training.config import TrainConfig

    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer), groups=4, seed=3)
    response = batch.response_mask.bool()
    losses = []
    micro_batch_step = step.micro_batch_step

    def keep(*args, **kwargs):  # the log-probs of each micro-batch's loss
        result = micro_batch_step(*args, **kwargs)
        losses.append(result.stats.log_probs)
        return result

    monkeypatch.setattr(step, "micro_batch_step", keep)
    config = TrainConfig(prompts_per_step=4, num_generations=4, micro_batch_size=micro, updates_per_batch=2,
                         max_grad_norm=0.0, seed=3, method="clip_cov", max_new_tokens=8)
    model = build_tiny_model(len(tiny_tokenizer), seed=5).to(torch.bfloat16)
    updates = step.update_on_batch(model, torch.optim.SGD(model.parameters(), lr=0.1), batch, advantages,
                                   Method.of("clip_cov", {"ratio": 0.2, "cov_low": -100.0, "cov_high": 100.0}),
                                   StepContext(PolicyLossConfig(), 0.7), config, step=1, state={})
    (_, first), = updates.first_pass
    assert first.totals.mean("kl_old") == 0.0 and first.totals.mean("clip_fraction") == 0.0
    loss_log_probs = torch.cat(losses[: 16 // micro])
    apart = float((first.stats.log_probs - loss_log_probs)[response].abs().max())
    if micro == 1:  # bf16 rounding apart (~1e-2 on a CPU without bf16 instructions; 0 on one with AMX)
        assert apart < 0.1
    else:
        assert apart == 0.0
    assert math.isfinite(updates.losses[1]) and updates.totals.mean("kl_old") > 0  # the second update is off-policy

"""The optimizer updates of one rollout batch (`ict.training.step.apply_update`,
`update_on_batch`) against float64 references worked out here: gradient clipping (0: none), the
skip of a non-finite update and its count, and the old log-probs of a later mini-batch (the
rollout policy's, so its ratio is current / rollout)."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from conftest import build_tiny_model
from train_helpers import grouped_batch_and_advantages

from ict.core.loss import PolicyLossConfig
from ict.core.profiling import StepProfiler
from ict.training.config import TrainConfig
from ict.training.step import Method, StepContext, apply_update, update_on_batch


def _linear_with_grad(grad: list[float]) -> torch.nn.Linear:
    layer = torch.nn.Linear(len(grad), 1, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([[1.0] * len(grad)]))
    layer.weight.grad = torch.tensor([grad])
    return layer


@pytest.mark.parametrize("max_grad_norm,scale", [(0.0, 1.0), (-1.0, 1.0), (1.25, 0.25), (10.0, 1.0)])
def test_the_gradient_is_clipped_to_max_grad_norm_and_zero_means_no_clipping(max_grad_norm, scale):
    """Gradient (3, 4), norm 5, SGD at lr 1: the step is -g scaled by min(1, max / 5); 0 (or
    less) is no clipping (`--help`: '<= 0: no clipping'), not a clip to a zero gradient."""
    layer = _linear_with_grad([3.0, 4.0])
    norm, applied = apply_update(layer, torch.optim.SGD(layer.parameters(), lr=1.0), 0.5, max_grad_norm,
                                 StepProfiler())
    assert (norm, applied) == (pytest.approx(5.0), True)
    expected = torch.tensor([[1.0 - 3.0 * scale, 1.0 - 4.0 * scale]])
    torch.testing.assert_close(layer.weight.detach(), expected)
    assert layer.weight.grad is None


@pytest.mark.parametrize("loss,grad", [(float("nan"), [3.0, 4.0]), (0.5, [float("inf"), 1.0])])
def test_a_non_finite_update_leaves_the_weights(loss, grad):
    layer = _linear_with_grad(grad)
    optimizer = torch.optim.Adam(layer.parameters(), lr=1.0)
    _, applied = apply_update(layer, optimizer, loss, 1.0, StepProfiler())
    assert not applied and not optimizer.state
    assert torch.equal(layer.weight.detach(), torch.ones(1, 2)) and layer.weight.grad is None


def _config(**overrides) -> TrainConfig:
    options = {"prompts_per_step": 4, "num_generations": 4, "mini_batch_size": 8, "seed": 3,
               "method": "grpo", "max_new_tokens": 8, **overrides}
    return TrainConfig(**options)


def test_skipped_updates_are_counted_in_a_row_and_a_good_one_resets_the_count(tiny_tokenizer):
    """Two mini-batches: NaN advantages skip both (the count goes on from the state's 3 to 5); a
    finite step then resets it to 0 (without the reset, skips far apart stopped a run)."""
    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    state = {"consecutive_skips": 3}
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    updates = update_on_batch(model, optimizer, batch, torch.full_like(advantages, float("nan")),
                              Method.of("all", {}), StepContext(PolicyLossConfig(), 1.0), _config(), 0, state)
    assert (updates.skipped, state["consecutive_skips"], updates.grad_norms) == (2, 5, [])
    updates = update_on_batch(model, optimizer, batch, advantages, Method.of("all", {}),
                              StepContext(PolicyLossConfig(), 1.0), _config(), 0, state)
    assert (updates.skipped, state["consecutive_skips"], len(updates.grad_norms)) == (0, 0, 2)


def _log_probs(model, batch, rows, temperature: float = 1.0) -> torch.Tensor:
    """float64 ``[len(rows), T]`` log-probs of the response tokens at `temperature`, each row run
    alone, unpadded."""
    out = torch.zeros(len(rows), batch.response_ids.shape[1], dtype=torch.float64)
    with torch.no_grad():
        for place, row in enumerate(rows.tolist()):
            ids = batch.input_ids[row][batch.attention_mask[row].bool()]
            prompt = int(batch.attention_mask[row, : batch.prompt_length].sum())
            log_probs = torch.log_softmax(model(input_ids=ids[None]).logits[0].double() / temperature, -1)
            for t in range(int(batch.response_mask[row].sum())):
                out[place, t] = log_probs[prompt - 1 + t, batch.response_ids[row, t]]
    return out


class _Recording(torch.optim.SGD):
    """SGD that keeps a copy of the model after each step."""

    def __init__(self, model, lr: float) -> None:
        super().__init__(model.parameters(), lr=lr)
        self.model, self.after = model, []

    def step(self, closure=None):
        result = super().step(closure)
        self.after.append(copy.deepcopy(self.model))
        return result


def test_the_second_mini_batch_is_corrected_by_the_rollout_policys_log_probs(tiny_tokenizer):
    """One pass in two mini-batches: the second is scored after the first update, so its ratio is
    p_after_first_update / p_rollout (the rollout policy's log-probs, taken before any update):
    its loss is the clipped token mean at that ratio, by hand in float64 (it was computed at ratio
    1 when no scoring pass was made for a single pass)."""
    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    rollout_model = copy.deepcopy(model)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    optimizer = _Recording(model, lr=2.0)
    config = _config(updates_per_batch=1, max_grad_norm=0.0)
    loss_config = PolicyLossConfig()
    updates = update_on_batch(model, optimizer, batch, advantages, Method.of("all", {}),
                              StepContext(loss_config, 1.0), config, 0, {})
    assert len(updates.losses) == 2 and updates.skipped == 0
    rows = updates.first_pass[1][0].cpu()
    ratio = torch.exp(_log_probs(optimizer.after[0], batch, rows) - _log_probs(rollout_model, batch, rows))
    mask = batch.response_mask[rows].double()
    assert float(((ratio - 1).abs() * mask).max()) > 0.05  # the first update moved these rows
    adv = advantages[rows].double()[:, None]
    per_token = -torch.minimum(ratio * adv, ratio.clamp(1 - loss_config.clip_low, 1 + loss_config.clip_high) * adv)
    expected = float((per_token * mask).sum() / mask.sum())
    assert updates.losses[1] == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_the_kl_over_all_tokens_reaches_micro_batches_that_select_nothing(tiny_tokenizer):
    """Dr. GRPO's aggregation (a constant B * L normaliser) with the KL term over all response
    tokens: a micro-batch without a selected token still has the KL of its tokens, so the gradient
    is the whole batch's at every micro-batch size (one row a micro-batch included)."""
    from ict.training.step import ReferencePolicy, accumulate_gradients

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    reference = ReferencePolicy(build_tiny_model(len(tiny_tokenizer), seed=9))
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    loss_config = PolicyLossConfig(aggregation="seq_mean_token_sum_norm", kl_coef=0.5, regularizer_tokens="all")
    gradients, masks = [], []
    for micro in (16, 1):
        model.zero_grad(set_to_none=True)
        result = accumulate_gradients(model, batch, advantages, None, Method.of("entropy", {"ratio": 0.05}),
                                      StepContext(loss_config, 1.0, reference=reference),
                                      micro_batch_size=micro, group_size=4, selection_seed=11)
        masks.append(result.selected_mask)
        gradients.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
    assert not masks[0].any(dim=1).all() and torch.equal(masks[0], masks[1])
    # float32 sums taken in another order differ by ~1e-6 of the gradient's scale (0.66 here); a
    # micro-batch that lost its rows' KL would move it by ~0.1 (12 of the 16 rows select nothing)
    scale = float(gradients[0].abs().max())
    torch.testing.assert_close(gradients[1], gradients[0], rtol=1e-4, atol=1e-5 * scale)


def test_the_kl_to_the_reference_is_taken_at_the_sampling_temperature(tiny_tokenizer):
    """The ``kl`` metric is the k3 estimate ``exp(r - p) - (r - p) - 1`` over the response tokens,
    both log-probs at the rollout's temperature (0.7 here), by hand in float64."""
    from ict.training.step import ReferencePolicy, accumulate_gradients

    model, other = build_tiny_model(len(tiny_tokenizer), seed=4), build_tiny_model(len(tiny_tokenizer), seed=9)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    result = accumulate_gradients(model, batch, advantages, None, Method.of("all", {}),
                                  StepContext(PolicyLossConfig(kl_coef=0.1), 0.7, reference=ReferencePolicy(other)),
                                  micro_batch_size=8, group_size=4)
    rows = torch.arange(16)
    delta = _log_probs(other, batch, rows, 0.7) - _log_probs(model, batch, rows, 0.7)
    mask = batch.response_mask
    expected = float(((delta.exp() - delta - 1)[mask]).mean())
    assert result.totals.mean("kl") == pytest.approx(expected, rel=1e-4)



@pytest.mark.parametrize(("own_seed", "run_seed"), [(11, 3), (None, 11)])
def test_randoms_own_seed_takes_the_runs_place_in_the_selection_seed(tiny_tokenizer, own_seed, run_seed):
    """`random:seed=11` in a run seeded 3 draws, at step 5, what a run seeded 11 draws without the
    option: the top ceil(0.1 N) response tokens of torch.rand seeded step_seed(11, 5, 2), by hand
    (the option was ignored, so the first case drew the run seed's mask), as TRL's and verl's
    integrations take it."""
    from ict.core.seeding import step_seed
    from ict.core.selector_registry import resolve_options

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    rows = batch.input_ids.shape[0]
    method = Method.of("random", resolve_options("random", {"seed": own_seed}))
    updates = update_on_batch(model, torch.optim.SGD(model.parameters(), lr=0.0), batch, advantages,
                              method, StepContext(PolicyLossConfig(), 1.0),
                              _config(seed=run_seed, mini_batch_size=rows), 5, {})
    [(index, result)] = updates.first_pass
    mask = batch.response_mask[index].bool()
    scores = torch.rand(mask.shape, generator=torch.Generator().manual_seed(step_seed(11, 5, 2)))
    count = math.ceil(0.1 * int(mask.sum()))
    expected = torch.zeros_like(mask).flatten()
    expected[scores.masked_fill(~mask, -1.0).flatten().topk(count).indices] = True
    assert torch.equal(result.selected_mask.bool(), expected.view_as(mask))


def test_the_entropy_bonus_gradient_is_the_token_mean_entropys_at_any_micro_batch_size(tiny_tokenizer):
    """With every advantage 0 the surrogate has no gradient, so GRPO's step with ``entropy_coef = c``
    leaves in ``.grad`` the gradient of ``-c * mean_t H_t`` over all response tokens (token_mean):
    here against that mean's float64 gradient from one unpadded forward per row, at micro-batches
    of 1 row and of the whole batch (the step's statistics once had no entropy gradient: a
    ValueError)."""
    from ict.training.step import accumulate_gradients

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    reference = build_tiny_model(len(tiny_tokenizer), seed=4).double()
    entropies = []
    for row in range(batch.input_ids.shape[0]):
        tokens = batch.input_ids[row][batch.attention_mask[row].bool()]
        length = int(batch.response_mask[row].sum())
        log_probs = reference(input_ids=tokens.unsqueeze(0)).logits[0, -length - 1:-1].log_softmax(-1)
        entropies.append(-(log_probs.exp() * log_probs).sum(-1))
    (-0.5 * torch.cat(entropies).mean()).backward()
    expected = torch.cat([p.grad.flatten() for p in reference.parameters() if p.grad is not None]).float()
    assert float(expected.abs().max()) > 1e-3
    for micro in (1, 16):
        model.zero_grad(set_to_none=True)
        accumulate_gradients(model, batch, torch.zeros_like(advantages), None, Method.of("all", {}),
                             StepContext(PolicyLossConfig(entropy_coef=0.5), 1.0), micro_batch_size=micro,
                             group_size=4)
        got = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("poisoned", [{1}, {1, 2}])
def test_an_update_skipped_for_a_non_finite_gradient_is_left_out_of_the_logged_loss(tiny_tokenizer, poisoned):
    """A finite loss whose gradient is infinite (a hook on the LM head's gradient at the backward
    passes in `poisoned`; one per mini-batch here) skips the update. The step's logged `loss` was
    the mean over every update's finite loss, the skipped one's included, while `grad_norm` left
    it out. Now both are over the applied updates: with the first skipped (weights untouched), the
    second mini-batch's GRPO loss at ratio 1, -sum_i A_i |y_i| / sum_i |y_i| over its rows; with
    both skipped, NaN (null) like `grad_norm`."""
    from ict.training.step_metrics import update_metrics

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    backward = {"count": 0}

    def poison(grad: torch.Tensor) -> torch.Tensor:
        backward["count"] += 1
        return grad + math.inf if backward["count"] in poisoned else grad

    model.lm_head.weight.register_hook(poison)
    updates = update_on_batch(model, torch.optim.SGD(model.parameters(), lr=0.1), batch, advantages,
                              Method.of("all", {}), StepContext(PolicyLossConfig(), 1.0), _config(), 0, {})
    metrics = update_metrics(updates)
    assert backward["count"] == 2 and updates.skipped == len(poisoned)
    if len(poisoned) == 2:
        assert math.isnan(metrics["loss"]) and math.isnan(metrics["grad_norm"])
        return
    second = updates.first_pass[1][0]
    lengths = batch.response_mask[second].sum(dim=1).double()
    expected = float(-(advantages[second].double() * lengths).sum() / lengths.sum())
    assert metrics["loss"] == pytest.approx(expected, rel=1e-5, abs=1e-7)
    assert math.isfinite(metrics["grad_norm"])

"""The statistics' ``gradient_mask``: the positions a loss can differentiate, given before it, so the
backward recomputes only their tiles and reads nothing back from the device. Gradients against
float64 autograd on both backends, from logits and from hidden states, in sequence and group
order; ``loss_gradient_mask`` against the loss's own gradient; and the trainer's GRPO and
population-selected steps against the same steps without a mask."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from stats_references import hidden_batch
from test_tiles import BACKENDS, TileRows, run

from ict.core.loss import PolicyLossConfig, loss_gradient_mask, policy_loss
from ict.core.stats import TokenStatistics, token_statistics, token_statistics_from_hidden

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
try:  # the one definition of which operators synchronise (values read back, copies)
    from sync_census import SyncCensus
finally:
    sys.path.pop(0)

TILE = (4, 7)  # uneven cuts of V = 29


def reach_of(mask: torch.Tensor, kind: str) -> torch.Tensor:
    """Which response positions the loss reaches: every third from the fourth, none or all."""
    reach = torch.zeros(mask.shape, dtype=torch.bool)
    positions = mask.nonzero()
    if kind == "some":
        reach[positions[3::3, 0], positions[3::3, 1]] = True
    elif kind == "all":
        reach = mask.clone()
    return reach


def float64_grads(inputs, source, token_ids, weights, temperature=0.9):
    """d/d inputs of ``sum weights * log p(token)`` in float64 autograd."""
    exact = [tensor.double().requires_grad_() for tensor in inputs]
    logits = exact[0] @ exact[1].T + exact[2] if source == "hidden" else exact[0]
    token_log_p = torch.log_softmax(logits / temperature, dim=-1).gather(-1, token_ids[..., None])[..., 0]
    (token_log_p * weights.double()).sum().backward()
    return [tensor.grad for tensor in exact]


def statistics_with_mask(backend, source, inputs, token_ids, mask, references, groups, gradient_mask):
    """The statistics of ``inputs`` (hidden states, head, bias; or logits) with ``gradient_mask``,
    their leaves returned beside them."""
    leaves = [tensor.clone().requires_grad_() for tensor in inputs]
    if source == "hidden":
        stats = run(token_statistics_from_hidden, backend, leaves[0], leaves[1], token_ids, mask, 0.9, references,
                    groups, leaves[2], tile_size=TILE, gradient_mask=gradient_mask)
    else:
        stats = run(token_statistics, backend, leaves[0], token_ids, mask, 0.9, references, tile_size=TILE,
                    group_ids=groups, gradient_mask=gradient_mask)
    return stats, leaves


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("source", ["hidden", "logits"])
@pytest.mark.parametrize("order", ["sequence", "group"])
@pytest.mark.parametrize("reached", ["some", "none", "all"])
def test_a_gradient_mask_gives_float64_gradients_over_its_rows_alone_and_no_read_in_the_backward(
        backend, source, order, reached, monkeypatch):
    """With the loss's rows as its gradient mask, the backward recomputes only their tiles (as when
    it finds them itself), reads nothing back (it read their count), and its gradients to hidden
    states, head and bias (or logits) equal float64 autograd's."""
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(13, batch=6)
    groups = torch.tensor([0, 0, 0, 1, 1, 1])
    references = ("group_mean_absorbing",) if order == "group" else ()
    reach = reach_of(mask, reached)
    weights = torch.where(reach, torch.randn(mask.shape, generator=torch.Generator().manual_seed(5)), 0.0)
    inputs = (hidden, weight, lm_bias) if source == "hidden" else (hidden @ weight.T + lm_bias,)
    stats, leaves = statistics_with_mask(backend, source, inputs, token_ids, mask, references, groups, reach)
    counter, census = TileRows(monkeypatch), SyncCensus()
    loss = (stats.log_probs * weights).sum()
    with census:
        loss.backward()
    assert census.total() == 0, census.counts
    rows, vocab = int(reach.sum()), weight.shape[0]
    if source == "hidden" and reached == "some":  # 5 rows: one token tile, each 7-id slice cut in two
        assert rows == 5 and counter.rows == [5] * 9
    else:  # the forward's tiles
        assert sum(counter.rows) == -(-vocab // TILE[1]) * rows and all(size <= TILE[0] for size in counter.rows)
    for mine, theirs in zip(leaves, float64_grads(inputs, source, token_ids, weights)):
        torch.testing.assert_close(mine.grad.double(), theirs, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("source", ["hidden", "logits"])
def test_a_gradient_outside_the_gradient_mask_is_dropped(backend, source):
    """The mask is the caller's word: a loss that reaches every row, with half of them masked,
    gets the gradient of its masked rows alone (float64 of the loss over them)."""
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(7, batch=5)
    inputs = (hidden, weight, lm_bias) if source == "hidden" else (hidden @ weight.T + lm_bias,)
    kept = mask & (torch.arange(mask.shape[1]) % 2 == 0)
    weights = torch.randn(mask.shape, generator=torch.Generator().manual_seed(2)) * mask
    stats, leaves = statistics_with_mask(backend, source, inputs, token_ids, mask, (), None, kept)
    (stats.log_probs * weights).sum().backward()
    for mine, theirs in zip(leaves, float64_grads(inputs, source, token_ids, weights * kept)):
        torch.testing.assert_close(mine.grad.double(), theirs, atol=2e-5, rtol=1e-5)


def test_a_gradient_mask_beside_the_values_changes_no_statistic():
    """The mask touches the backward alone: every value and score is bit-equal to the call without."""
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(3, batch=6)
    groups = torch.tensor([0, 0, 1, 1, 2, 2])
    keys = ("group_mean_absorbing", "seq_mean", "prev")
    plain = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, keys, groups, lm_bias, tile_size=TILE)
    masked = token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, keys, groups, lm_bias, tile_size=TILE,
                                          gradient_mask=reach_of(mask, "some"))
    for name in ("log_probs", "entropy", "renyi2"):
        assert torch.equal(getattr(plain, name), getattr(masked, name)), name
    for key in keys:
        assert torch.equal(plain.js_scores[key], masked.js_scores[key]), key


@pytest.mark.parametrize("bad,message", [
    (torch.ones(2, 3, dtype=torch.bool), r"gradient_mask must be \[B, T\] = \[3, 4\], got \[2, 3\]"),
    ([[True] * 4] * 3, "gradient_mask must be a tensor, got list"),
])
def test_a_bad_gradient_mask_is_one_line(bad, message):
    logits = torch.randn(3, 4, 5)
    token_ids, mask = torch.zeros(3, 4, dtype=torch.long), torch.ones(3, 4, dtype=torch.bool)
    for call in (lambda: token_statistics(logits, token_ids, mask, 1.0, gradient_mask=bad),
                 lambda: token_statistics_from_hidden(torch.randn(3, 4, 2), torch.randn(5, 2), token_ids, mask, 1.0,
                                                      gradient_mask=bad)):
        with pytest.raises(ValueError, match=message) as error:
            call()
        assert "\n" not in str(error.value)


# ---------------------------------------------------------------------------------------------
# loss_gradient_mask: a superset of the positions policy_loss differentiates

@pytest.mark.parametrize("aggregation", ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"])
@pytest.mark.parametrize("denominator", ["selected", "all"])
@pytest.mark.parametrize("clip_ratio_c", [None, 3.0])
def test_the_loss_gradient_mask_covers_every_position_the_policy_loss_differentiates(aggregation, denominator,
                                                                                     clip_ratio_c):
    """Advantages with zeros (whole sequences, and single positions of [B, T] advantages), ratios
    off 1 (so the clip and dual-clip are active), a selection and KL-Cov's penalty on some
    unselected-advantage positions: the loss's gradient to the log-probs is exactly zero outside
    the mask, and the mask holds no position the selection leaves out."""
    generator = torch.Generator().manual_seed(11)
    batch, length = 6, 9
    response = torch.rand(batch, length, generator=generator) < 0.85
    selected = response & (torch.rand(batch, length, generator=generator) < 0.6)
    config = PolicyLossConfig(aggregation=aggregation, denominator=denominator, clip_ratio_c=clip_ratio_c)
    for advantages in (torch.tensor([1.5, 0.0, -0.7, 0.0, 2.0, -1.0]),
                       torch.randn(batch, length, generator=generator) * (torch.rand(batch, length) < 0.7)):
        penalty = (torch.rand(batch, length, generator=generator) < 0.2).float() * 0.5
        for kl_penalty in (None, penalty):
            log_probs = (torch.randn(batch, length, generator=generator) - 2.0).requires_grad_()
            old = log_probs.detach() + torch.randn(batch, length, generator=generator) * 0.5
            stats = TokenStatistics(log_probs, torch.zeros(batch, length), torch.zeros(batch, length), {})
            loss, _ = policy_loss(stats, old, advantages, response, selected, config, kl_penalty=kl_penalty)
            (grad,) = torch.autograd.grad(loss, log_probs)
            gradient_mask = loss_gradient_mask(response, advantages, config, selected, kl_penalty)
            assert grad[~gradient_mask].eq(0).all()
            assert grad[gradient_mask].ne(0).any() and (response & ~gradient_mask).any()  # nor a mask of everything
            assert not (gradient_mask & ~selected).any()


def test_the_loss_gradient_mask_is_every_position_with_a_regularizer_and_keeps_nan_advantages():
    response = torch.tensor([[True, True, False], [True, True, True]])
    advantages = torch.tensor([0.0, float("nan")])
    assert loss_gradient_mask(response, advantages, PolicyLossConfig(kl_coef=0.1)) is None
    assert loss_gradient_mask(response, advantages, PolicyLossConfig(entropy_coef=0.01)) is None
    assert loss_gradient_mask(response, advantages, PolicyLossConfig()).tolist() == [[False] * 3, [True] * 3]
    penalty = torch.tensor([[0.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    assert loss_gradient_mask(response, advantages, PolicyLossConfig(), kl_penalty=penalty).tolist() == [
        [False, True, False], [True] * 3]


# ---------------------------------------------------------------------------------------------
# The trainer passes it where the selection is known before the statistics

@pytest.mark.parametrize("selector,options,micro", [
    ("all", {}, 4),  # GRPO: every response token, known before the statistics
    ("kl_cov", {"ratio": 0.2, "kl_coef": 1.0}, 4),  # a batch population: selected on a scoring pass first
    ("ict", {"ratio": 0.2}, 8),  # selected on the statistics: no mask
])
def test_the_trainer_passes_a_gradient_mask_where_the_selection_is_known_and_its_gradients_do_not_change(
        selector, options, micro, tiny_tokenizer, monkeypatch):
    """Advantages with a zero group and old log-probs off the current ones (KL-Cov's penalty
    moves its tokens whatever their advantage): the parameters' gradients equal the step's without
    a mask (the backward then finds its rows itself), to float32 rounding."""
    from conftest import build_tiny_model
    from train_helpers import grouped_batch_and_advantages

    import ict.training.step as step

    model = build_tiny_model(len(tiny_tokenizer), seed=4)
    batch, advantages = grouped_batch_and_advantages(len(tiny_tokenizer))
    advantages[4:8] = 0.0
    old = torch.randn(batch.response_mask.shape, generator=torch.Generator().manual_seed(3)) * 0.3 - 3.0
    given: list[bool] = []
    original = step.statistics_of

    def spied(*args, gradient_mask=None, **kwargs):
        if torch.is_grad_enabled():  # not the scoring pass
            given.append(gradient_mask is not None)
        return original(*args, gradient_mask=gradient_mask, **kwargs)

    monkeypatch.setattr(step, "statistics_of", spied)
    gradients = []
    for use_mask in (True, False):
        if not use_mask:
            monkeypatch.setattr(step, "loss_gradient_mask", lambda *args, **kwargs: None)
        model.zero_grad(set_to_none=True)
        given.clear()
        step.accumulate_gradients(model, batch, advantages, old, step.Method.of(selector, options),
                                  step.StepContext(PolicyLossConfig(), 1.0), micro_batch_size=micro, group_size=4,
                                  selection_seed=2)
        gradients.append(torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None]))
        if use_mask:
            assert given and all(given) == (selector != "ict") and any(given) == (selector != "ict"), given
    assert gradients[0].abs().max() > 0
    torch.testing.assert_close(gradients[0], gradients[1], rtol=1e-5, atol=1e-8)

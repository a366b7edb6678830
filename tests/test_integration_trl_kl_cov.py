"""KL-Cov through TRL 1.16: the penalty ICTGRPOTrainer adds after TRL's loss equals
ict.core.loss.policy_loss's penalty part (tensors, and through TRL's own _compute_loss), normalised
as TRL's loss in training and evaluation, with TRL's off-policy mask and vLLM importance ratio; a
2-iteration run differs from a kl_coef=0 one by exactly that term."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from trl_helpers import DRIVER, head_grad, loss_inputs, loss_trainer_for, run_driver, trl_own_loss

pytest.importorskip("trl")


# KL-Cov: the penalty ICTGRPOTrainer adds after TRL's loss, against ict.core.loss.policy_loss.
# TRL 1.16 loss_type -> (our aggregation, its max_response_length); dapo/cispo/vespo normalise by
# the generation batch's tokens, a token mean when that batch is the micro-batch.
TRL_AGGREGATIONS = {
    "grpo": ("seq_mean_token_mean", None), "sapo": ("seq_mean_token_mean", None),
    "bnpo": ("token_mean", None), "dr_grpo": ("seq_mean_token_sum_norm", 9),
    "luspo": ("seq_mean_token_sum_norm", 1), "dapo": ("token_mean", None),
    "cispo": ("token_mean", None), "vespo": ("token_mean", None),
}


def _penalty_reference(log_probs, old_log_probs, mask, kl_penalty, loss_type):
    """policy_loss with the KL-Cov penalty minus policy_loss without it (every token selected)."""
    from ict.core.loss import PolicyLossConfig, policy_loss
    from ict.core.stats import TokenStatistics

    aggregation, length = TRL_AGGREGATIONS[loss_type]
    config = PolicyLossConfig(aggregation=aggregation, max_response_length=length)
    stats = TokenStatistics(log_probs, torch.zeros_like(log_probs), torch.zeros_like(log_probs))
    advantages = torch.linspace(-1.0, 1.0, log_probs.shape[0], dtype=log_probs.dtype)
    with_penalty, _ = policy_loss(stats, old_log_probs, advantages, mask, mask, config, kl_penalty=kl_penalty)
    without, _ = policy_loss(stats, old_log_probs, advantages, mask, mask, config)
    return with_penalty - without

def test_kl_cov_is_accepted_and_checked_at_configuration():
    from ict.integrations.trl import ICTGRPOConfig

    common = dict(output_dir="unused", report_to="none", use_cpu=True, bf16=False)
    assert ICTGRPOConfig(token_selector="kl_cov:ratio=0.002,kl_coef=0.5", **common).token_selector
    with pytest.raises(ValueError, match="ratio"):
        ICTGRPOConfig(token_selector="kl_cov:ratio=2", **common)

@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_kl_penalty_loss_normalises_as_trl_in_training_and_evaluation(loss_type, training):
    """ICTGRPOTrainer.kl_penalty_loss on a stand-in trainer (4 accumulation steps, 2 steps per
    generation) equals TRL's own _compute_loss with the same per-token term as its loss: in
    training TRL divides by the accumulation steps (dapo: times steps_per_generation), in
    evaluation by neither."""
    from collections import defaultdict
    from types import SimpleNamespace

    from ict.core.loss import kl_penalty_term
    from ict.integrations.trl import ICTGRPOTrainer

    generator = torch.Generator().manual_seed(3)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 3, 5, 2])[:, None]
    log_probs = -3 * torch.rand(4, 6, generator=generator, dtype=torch.float64)
    old = log_probs + 0.5 * torch.randn(4, 6, generator=generator, dtype=torch.float64)
    penalty = (torch.rand(4, 6, generator=generator) < 0.5) * mask * 1.5
    weights = mask * torch.tensor([1.0, 2.0, 0.5, 3.0])[:, None]
    trainer = SimpleNamespace(
        _kl_penalty=(penalty, weights, mask), model=SimpleNamespace(training=training),
        current_gradient_accumulation_steps=4, loss_type=loss_type, max_completion_length=9,
        accelerator=SimpleNamespace(num_processes=1, gather=lambda x: x),
        args=SimpleNamespace(steps_per_generation=2), _metrics=defaultdict(lambda: defaultdict(list)))
    ours = ICTGRPOTrainer.kl_penalty_loss(trainer, log_probs, old, {"num_items_in_batch": torch.tensor(37.0)})
    term = kl_penalty_term(log_probs, old, penalty) * weights
    expected = trl_own_loss(loss_type, -term, mask, training=training, processes=1, accumulation=4,
                             steps_per_generation=2)
    assert abs(float(expected)) > 1e-3
    torch.testing.assert_close(ours.double(), expected, atol=1e-12, rtol=1e-6)

@pytest.mark.parametrize("loss_type", sorted(TRL_AGGREGATIONS))
@pytest.mark.parametrize("denominator", ["ours", "trl"])
def test_kl_penalty_term_equals_policy_loss_part(loss_type, denominator):
    """The term added to TRL's loss (per-token penalty times the mask weight, TRL's aggregation)
    equals policy_loss(kl_penalty) - policy_loss(): value and gradient w.r.t. the log-probs."""
    from ict.core.loss import kl_penalty_term
    from ict.integrations.trl import OURS_AGGREGATION, ours_weights, trl_aggregate

    generator = torch.Generator().manual_seed(0)
    lengths = torch.tensor([6, 3, 5, 1])
    mask = torch.arange(6)[None, :] < lengths[:, None]
    log_probs = (-3 * torch.rand(4, 6, generator=generator, dtype=torch.float64)).requires_grad_(True)
    old = log_probs.detach() + 0.5 * torch.randn(4, 6, generator=generator, dtype=torch.float64)
    old[0, 1] = log_probs[0, 1].detach()  # a penalised token with log-ratio 0 (zero gradient)
    kl_penalty = torch.zeros(4, 6)
    for b, t in [(0, 1), (0, 4), (1, 2), (2, 0), (3, 0)]:
        kl_penalty[b, t] = 1.5
    # KL-Cov selects every response token: the mask weight is 1 under both denominators
    if denominator == "ours" and loss_type not in OURS_AGGREGATION:
        pytest.skip(f"selection_denominator='ours' is refused for {loss_type}")
    weights = ours_weights(mask, mask, loss_type) if denominator == "ours" else mask.float()
    assert torch.equal(weights, mask.float())
    ours = trl_aggregate(kl_penalty_term(log_probs, old, kl_penalty) * weights, mask, loss_type,
                         max_completion_length=9, num_items_in_batch=mask.sum())
    reference = _penalty_reference(log_probs, old, mask, kl_penalty, loss_type)
    assert float(reference.detach()) > 0.05
    torch.testing.assert_close(ours, reference, atol=1e-6, rtol=0)
    (grad_ours,) = torch.autograd.grad(ours, log_probs)
    (grad_reference,) = torch.autograd.grad(reference, log_probs)
    torch.testing.assert_close(grad_ours, grad_reference, atol=1e-6, rtol=0)
    assert grad_ours[0, 1] == 0 and grad_ours[0, 4] != 0
    # TRL's gradient-accumulation normaliser: the window's sum is the batch's loss
    halves = [trl_aggregate(kl_penalty_term(log_probs, old, kl_penalty)[rows] * weights[rows], mask[rows],
                            loss_type, max_completion_length=9, num_items_in_batch=mask.sum(),
                            accumulation_steps=2, steps_per_generation=2)
              for rows in (slice(0, 2), slice(2, 4))]
    if loss_type in ("dapo", "cispo", "vespo"):  # normalised by the generation batch's tokens
        torch.testing.assert_close(halves[0] + halves[1], reference, atol=1e-6, rtol=0)
    else:  # each micro-batch's own aggregate, divided by the accumulation steps
        for half, rows in zip(halves, (slice(0, 2), slice(2, 4))):
            part = _penalty_reference(log_probs[rows], old[rows], mask[rows], kl_penalty[rows], loss_type)
            torch.testing.assert_close(half, part / 2, atol=1e-6, rtol=0)

@pytest.fixture(scope="module")
def kl_cov_trainer(tiny_model_dir, tmp_path_factory):
    return loss_trainer_for(tiny_model_dir, tmp_path_factory)

@pytest.mark.parametrize("loss_type", sorted(TRL_AGGREGATIONS))
def test_trl_compute_loss_adds_kl_penalty(kl_cov_trainer, loss_type):
    """Through TRL's own _compute_loss (zero advantages: TRL's policy loss is 0, so the returned
    loss is our term alone): value and LM-head gradient equal policy_loss's penalty part / GA,
    with TRL's log-probs, the old log-probs given and the selection's max(1, int(0.2 N)) tokens.
    With advantages and old == current the term is 0 and the loss is TRL's aggregation of -A."""
    from ict.integrations.trl import OURS_AGGREGATION, trl_aggregate

    trainer = kl_cov_trainer
    trainer.loss_type = loss_type
    trainer.selection_denominator = "ours" if loss_type in OURS_AGGREGATION else "trl"
    records = []
    trainer.on_selection = records.append
    inputs = loss_inputs(trainer, torch.zeros(4), perturb=0.5)
    loss = trainer._compute_loss(trainer.model, inputs)
    kl_penalty = records[-1]["kl_penalty"]
    mask = inputs["completion_mask"].bool()
    assert int((kl_penalty > 0).sum()) == max(1, int(0.2 * int(mask.sum()))) == 3
    assert torch.all(kl_penalty[kl_penalty > 0] == 1.5)
    log_probs, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
        torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), 7)
    reference = _penalty_reference(log_probs, inputs["old_per_token_logps"], mask, kl_penalty, loss_type) / 2
    assert float(reference.detach()) > 0.01
    torch.testing.assert_close(loss, reference, atol=1e-6, rtol=0)
    torch.testing.assert_close(head_grad(trainer, loss), head_grad(trainer, reference), atol=1e-6, rtol=0)
    if loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):  # ratio 1: TRL's per-token loss is -A
        advantages = torch.tensor([1.0, -0.5, 0.25, -2.0])
        loss = trainer._compute_loss(trainer.model, loss_inputs(trainer, advantages, perturb=0.0))
        expected = trl_aggregate(-advantages[:, None].expand(4, 7), mask, loss_type, max_completion_length=9,
                                 num_items_in_batch=mask.sum(), accumulation_steps=2)
        torch.testing.assert_close(loss, expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_trl_kl_penalty_gets_trls_off_policy_mask_and_vllm_ratio(kl_cov_trainer, loss_type):
    """TRL multiplies its per-token loss by the off-policy sequence mask and vLLM's
    importance-sampling ratio; KL-Cov's penalty, a term of that per-token loss, gets both too.
    Through TRL's _compute_loss: the loss at kl_coef=1.5 minus the loss at kl_coef=0 (the same
    selection) equals 1.5 * |log p - old| at the penalised tokens times the ratio and the mask
    computed here (keep a row if A >= 0 or its mean of sampler - current log-probs <= 0.05),
    aggregated as TRL's loss / 2 accumulation steps."""
    from ict.integrations.trl import trl_aggregate

    trainer = kl_cov_trainer
    trainer.loss_type, trainer.selection_denominator = loss_type, "ours"
    records = []
    trainer.on_selection = records.append
    advantages = torch.tensor([-1.0, -0.5, 0.25, -2.0])
    inputs = loss_inputs(trainer, advantages, perturb=0.5)
    mask = inputs["completion_mask"].bool()
    generator = torch.Generator().manual_seed(5)
    ratio = (0.5 + torch.rand(4, 7, generator=generator)) * mask
    sampling = inputs["old_per_token_logps"] + torch.tensor([0.2, 0.0, 0.0, 0.0])[:, None]
    inputs.update(importance_sampling_ratio=ratio, sampling_per_token_logps=sampling)
    trainer.use_vllm, trainer.vllm_importance_sampling_correction = True, True
    trainer.off_policy_mask_threshold = 0.05
    losses = []
    try:
        for kl_coef in (1.5, 0.0):
            trainer.selector_options = {"ratio": 0.2, "kl_coef": kl_coef}
            losses.append(trainer._compute_loss(trainer.model, inputs))
    finally:
        trainer.use_vllm, trainer.vllm_importance_sampling_correction = False, False
        trainer.off_policy_mask_threshold = None
        trainer.selector_options = {"ratio": 0.2, "kl_coef": 1.5}
    penalised = records[0]["kl_penalty"] > 0
    assert int(penalised.sum()) == 3 and not records[1]["kl_penalty"].any()
    log_probs, _, _ = trainer._get_per_token_logps_and_entropies(
        trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
        torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), 7)
    log_probs = log_probs.detach().double()
    drift = ((sampling.double() - log_probs) * mask).sum(-1) / mask.sum(-1)
    keep = ((advantages >= 0) | (drift <= 0.05)).double()
    assert keep.tolist() == [0.0, 0.0, 1.0, 1.0] and penalised[0].any()  # a penalised row is dropped
    per_token = 1.5 * penalised * (log_probs - inputs["old_per_token_logps"].double()).abs() * ratio * keep[:, None]
    expected = trl_aggregate(per_token, mask, loss_type, max_completion_length=9,
                             num_items_in_batch=mask.sum(), accumulation_steps=2)
    assert float(expected) > 1e-3
    torch.testing.assert_close((losses[0] - losses[1]).double().detach(), expected, atol=1e-6, rtol=1e-5)


def _kl_cov_runs(model_dir: Path, out_dir: Path, kl_coefs: tuple[float, ...]) -> list[dict]:
    """One driver process, one 2-iteration run per coefficient (OUT/i/)."""
    runs = ";".join(f"kl_cov:ratio=0.2,kl_coef={kl_coef}" for kl_coef in kl_coefs)
    run_driver([sys.executable, str(DRIVER), str(model_dir), str(out_dir), runs, "2"], out_dir)
    results = []
    for index in range(len(kl_coefs)):
        run_dir = out_dir / str(index)
        log = torch.load(run_dir / "log.pt")["log"]
        results.append({"loss": [entry["loss"] for entry in log if "loss" in entry],
                        "penalties": [torch.load(run_dir / f"rank0_penalty{call}.pt") for call in range(2)],
                        "calls": [torch.load(run_dir / f"rank0_call{call}.pt") for call in range(2)]})
    return results


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_trl_kl_cov_one_process(tiny_model_dir, tmp_path):
    """KL-Cov trains through TRL (2 steps on one generation batch, num_iterations=2): each micro-batch
    penalises the max(1, int(0.2 N)) tokens of largest covariance; on step 1 (old == current log-probs)
    the loss equals a kl_coef=0 run's, on step 2 it exceeds it by exactly the term we added, which
    equals policy_loss's penalty part on the dumped log-probs."""
    penalised, plain = _kl_cov_runs(tiny_model_dir, tmp_path, (1.0, 0.0))
    assert len(penalised["loss"]) == len(plain["loss"]) == 2
    for call, dump in zip(penalised["calls"], penalised["penalties"]):
        mask = call["mask"].bool()
        assert torch.equal(call["selected"], mask)  # every response token is in the policy loss
        count = max(1, int(0.2 * int(mask.sum())))
        chosen = call["kl_penalty"] > 0
        assert int(chosen.sum()) == count and torch.all(call["kl_penalty"][chosen] == 1.0)
        log_p, advantages = call["log_probs"].double()[mask], call["advantages"].double()[:, None].expand_as(mask)[mask]
        covariance = torch.zeros(mask.shape, dtype=torch.float64)
        covariance[mask] = (log_p - log_p.mean()) * (advantages - advantages.mean())
        assert covariance[chosen].min() > covariance[mask & ~chosen].max()
        assert dump["old_given"] and dump["requires_grad"]
        reference = _penalty_reference(dump["log_probs"].double(), dump["old_log_probs"].double(),
                                       dump["mask"].bool(), dump["kl_penalty"], "dapo")
        torch.testing.assert_close(dump["term"].double(), reference, atol=1e-6, rtol=0)
    assert penalised["penalties"][0]["term"] == 0  # same policy as the rollout's: no penalty
    assert torch.equal(penalised["penalties"][0]["log_probs"], penalised["penalties"][0]["old_log_probs"])
    assert penalised["loss"][0] == plain["loss"][0]
    term = float(penalised["penalties"][1]["term"])
    assert term > 1e-3
    assert penalised["loss"][1] == pytest.approx(plain["loss"][1] + term, abs=1e-6)

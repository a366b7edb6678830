"""ICTGRPOTrainer's loss through TRL 1.16's own code: for every loss_type the "ours" denominator
gives ict.core.loss.policy_loss's loss and LM-head gradient; KL-Cov's penalty, added after TRL's
loss, equals policy_loss's penalty part (tensors, and through TRL's own _compute_loss), and a
2-iteration run differs from a kl_coef=0 one by exactly that term; Clip-Cov gets the old log-probs
and TRL's clip range."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch
from trl_helpers import DRIVER, run_driver

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


def test_bad_config_values_are_refused_in_one_line_naming_the_option():
    """Each of ICTGRPOConfig's own options, given a bad value, is refused in one line that names
    it (stats_tile_size's said only 'tile size must be ...', not which option; a token_selector that
    is not a string raised an AttributeError)."""
    from ict.integrations.trl import ICTGRPOConfig

    common = dict(output_dir="unused", report_to="none", use_cpu=True, bf16=False)
    for options, message in [
        (dict(selection_denominator="mine"), r"^selection_denominator must be 'ours' or 'trl', got 'mine'$"),
        (dict(stats_tile_size="big"), r"^stats_tile_size: tile size must be 'auto' or TOKENSxVOCAB"),
        (dict(stats_tile_size="0x10"), r"^stats_tile_size: "),
        (dict(token_selector="ict:ratio"), r"^token_selector option 'ratio' must be key=value"),
        (dict(token_selector=None), r"^token_selector must be a string 'name:key=value,...' .*, got None$"),
        (dict(token_selector=0.1), r"^token_selector must be a string .*, got 0.1$"),
        (dict(token_selector="ict:ratio=0.1, ratio=0.2"), r"^token_selector option 'ratio' is given twice"),
        (dict(full_token_warmup_steps=-1), r"^full_token_warmup_steps must be None or an integer >= 0, got -1$"),
    ]:
        with pytest.raises(ValueError, match=message) as error:
            ICTGRPOConfig(**options, **common)
        assert "\n" not in str(error.value)
    assert ICTGRPOConfig(stats_tile_size="8x300", **common).stats_tile_size == "8x300"


@pytest.mark.parametrize("denominator", ["ours", "trl"])
def test_an_unknown_loss_type_is_refused_by_the_config(denominator):
    """TRL 1.16 checks loss_type only in its first step's loss (after a generation); the config
    refuses a misspelt one in one line, and every loss type TRL's _compute_loss knows is accepted."""
    from ict.integrations.trl import TRL_LOSS_TYPES, ICTGRPOConfig

    common = dict(output_dir="unused", report_to="none", use_cpu=True, bf16=False, selection_denominator=denominator)
    for typo in ("drgrpo", "DAPO", ""):
        with pytest.raises(ValueError, match=r"^loss_type must be one of grpo, .*, got ") as error:
            ICTGRPOConfig(loss_type=typo, **common)
        assert "\n" not in str(error.value)
    for loss_type in TRL_LOSS_TYPES:
        assert ICTGRPOConfig(loss_type=loss_type, **common).loss_type == loss_type


def _trl_own_loss(loss_type, advantages, mask, *, training, processes, accumulation, steps_per_generation):
    """TRL 1.16's own GRPOTrainer._compute_loss run on a stand-in trainer whose forward returns
    fixed log-probs equal to the old ones (ratio 1, so its per-token loss is ``-A``): its loss
    aggregation and normalisers, with ``processes`` processes (gathers are the identity)."""
    from collections import defaultdict
    from types import SimpleNamespace

    from trl import GRPOTrainer

    rows, length = mask.shape
    log_probs = torch.full((rows, length), -1.25, dtype=torch.float64)
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (log_probs, torch.zeros_like(log_probs), None),
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level="token", beta=0.0, loss_type=loss_type, epsilon_low=0.2, epsilon_high=0.28,
        args=SimpleNamespace(delta=None, steps_per_generation=steps_per_generation), use_vllm=False,
        model=SimpleNamespace(training=training), current_gradient_accumulation_steps=accumulation,
        accelerator=SimpleNamespace(num_processes=processes, gather=lambda x: x, reduce=lambda x, reduction: x),
        max_completion_length=9, _entropy_bonus_enabled=False, _metrics=defaultdict(lambda: defaultdict(list)))
    inputs = {"prompt_ids": torch.ones(rows, 2, dtype=torch.long), "prompt_mask": torch.ones(rows, 2, dtype=torch.long),
              "completion_ids": torch.ones(rows, length, dtype=torch.long), "completion_mask": mask.long(),
              "advantages": advantages, "old_per_token_logps": log_probs.clone(),
              "num_items_in_batch": torch.tensor(37.0, dtype=torch.float64)}
    return GRPOTrainer._compute_loss(trainer, None, inputs)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "luspo"])
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
def test_trl_aggregate_is_trls_own_aggregation(loss_type, training):
    """trl_aggregate (the KL-Cov term's aggregation) against TRL's own _compute_loss on the same
    per-token loss, with 2 processes, 4 accumulation steps and 2 steps per generation (in
    evaluation TRL neither accumulates nor splits) and a completion masked whole (TRL's
    mask_truncated_completions): the same value."""
    from ict.integrations.trl import trl_aggregate

    advantages = torch.tensor([1.0, -0.5, 0.25, -2.0, 0.75], dtype=torch.float64)
    mask = torch.arange(6)[None, :] < torch.tensor([6, 3, 0, 5, 1])[:, None]
    expected = _trl_own_loss(loss_type, advantages, mask, training=training, processes=2, accumulation=4,
                             steps_per_generation=2)
    ours = trl_aggregate(-advantages[:, None].expand(mask.shape), mask, loss_type, max_completion_length=9,
                         num_items_in_batch=torch.tensor(37.0), num_processes=2,
                         accumulation_steps=4 if training else 1, steps_per_generation=2 if training else 1)
    assert math.isfinite(float(expected)) and abs(float(expected)) > 1e-3
    torch.testing.assert_close(ours.double(), expected, atol=1e-12, rtol=1e-6)


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
    expected = _trl_own_loss(loss_type, -term, mask, training=training, processes=1, accumulation=4,
                             steps_per_generation=2)
    assert abs(float(expected)) > 1e-3
    torch.testing.assert_close(ours.double(), expected, atol=1e-12, rtol=1e-6)


def test_ours_weights_take_the_processes_counts_except_bnpo():
    """ours_weights with selection_counts summed over processes (here this micro-batch's plus
    another process's): grpo/sapo weight n_b / n_sel_b * B / S and dapo/cispo N / N_sel with the
    global B, S, N, N_sel; bnpo keeps this micro-batch's N / N_sel (TRL's bnpo normalises by the
    process's tokens), whatever counts it is given. A selected position outside the response
    mask gets weight 0 and counts in no n_sel_b."""
    from ict.integrations.trl import ours_weights, selection_counts

    mask = torch.arange(5)[None, :] < torch.tensor([5, 4, 2])[:, None]
    selected = torch.zeros(3, 5, dtype=torch.bool)
    selected[0, [1, 3]] = selected[1, 0] = True  # row 2 has none
    selected[1, 4] = True  # outside row 1's response: neither weighted nor counted
    other = torch.tensor([7.0, 3.0, 2.0, 2.0])  # another process: 7 tokens, 3 selected, 2 rows, both with some
    counts = selection_counts(selected, mask) + other
    assert counts.tolist() == [18.0, 6.0, 5.0, 4.0]
    expected = {"grpo": {(0, 1): 5 / 2 * 5 / 4, (0, 3): 5 / 2 * 5 / 4, (1, 0): 4 / 1 * 5 / 4},
                "dapo": {(0, 1): 18 / 6, (0, 3): 18 / 6, (1, 0): 18 / 6},
                "bnpo": {(0, 1): 11 / 3, (0, 3): 11 / 3, (1, 0): 11 / 3}}
    for loss_type, values in expected.items():
        reference = torch.zeros(3, 5)
        for (b, t), value in values.items():
            reference[b, t] = value
        for aliased in {"grpo": ("grpo", "sapo"), "dapo": ("dapo", "cispo"), "bnpo": ("bnpo",)}[loss_type]:
            torch.testing.assert_close(ours_weights(selected, mask, aliased, counts), reference)


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


def _loss_trainer(model_dir, out_dir):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer

    torch.manual_seed(0)
    args = ICTGRPOConfig(output_dir=str(out_dir), token_selector="kl_cov:ratio=0.2,kl_coef=1.5",
                         per_device_train_batch_size=4, num_generations=4, max_completion_length=9,
                         steps_per_generation=1, report_to="none", use_cpu=True, bf16=False, temperature=0.7)
    trainer = ICTGRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=lambda completions, **kwargs: [0.0] * len(completions), args=args,
        train_dataset=Dataset.from_dict({"prompt": ["what is 1 + 1 ?"] * 4}))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 2
    return trainer


def _trainer_fixture(tiny_model_dir, tmp_path_factory):
    """A constructed ICTGRPOTrainer for calls into TRL's _compute_loss. Module-scoped users are
    built when first used: after a test constructs another trainer, accelerate's shared state
    is re-initialised, so each group of tests gets its own."""
    return _loss_trainer(tiny_model_dir, tmp_path_factory.mktemp("trl-trainer"))


@pytest.fixture(scope="module")
def kl_cov_trainer(tiny_model_dir, tmp_path_factory):
    return _trainer_fixture(tiny_model_dir, tmp_path_factory)


@pytest.fixture(scope="module")
def loss_trainer(tiny_model_dir, tmp_path_factory):
    return _trainer_fixture(tiny_model_dir, tmp_path_factory)


def _loss_inputs(trainer, advantages, perturb):
    generator = torch.Generator().manual_seed(1)
    vocab = trainer.model.config.vocab_size
    prompt_ids = torch.randint(3, vocab, (4, 3), generator=generator)
    prompt_mask = torch.ones(4, 3, dtype=torch.long)
    prompt_mask[1, 0] = 0
    completion_ids = torch.randint(3, vocab, (4, 7), generator=generator)
    completion_mask = (torch.arange(7)[None, :] < torch.tensor([7, 4, 6, 2])[:, None]).long()
    with torch.no_grad():
        current, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([prompt_ids, completion_ids], 1),
            torch.cat([prompt_mask, completion_mask], 1), 7)
    old = current + perturb * torch.randn(4, 7, generator=generator) * completion_mask
    return {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
            "completion_mask": completion_mask, "advantages": advantages, "old_per_token_logps": old,
            "num_items_in_batch": completion_mask.sum()}


def _head_grad(trainer, loss):
    trainer.model.zero_grad()
    loss.backward()
    return trainer.model.get_output_embeddings().weight.grad.clone()


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
    inputs = _loss_inputs(trainer, torch.zeros(4), perturb=0.5)
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
    torch.testing.assert_close(_head_grad(trainer, loss), _head_grad(trainer, reference), atol=1e-6, rtol=0)
    if loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):  # ratio 1: TRL's per-token loss is -A
        advantages = torch.tensor([1.0, -0.5, 0.25, -2.0])
        loss = trainer._compute_loss(trainer.model, _loss_inputs(trainer, advantages, perturb=0.0))
        expected = trl_aggregate(-advantages[:, None].expand(4, 7), mask, loss_type, max_completion_length=9,
                                 num_items_in_batch=mask.sum(), accumulation_steps=2)
        torch.testing.assert_close(loss, expected, atol=1e-6, rtol=0)


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


def _reference_loss(trainer, loss_type, log_probs, old, advantages, mask, selected, denominator):
    """ict's policy_loss (grpo/bnpo/dr_grpo/dapo) or ict's aggregation of the loss type's own
    per-token loss written out here (sapo/cispo/luspo), on the selected tokens."""
    from ict.core.loss import PolicyLossConfig, aggregate, policy_loss
    from ict.core.stats import TokenStatistics
    from ict.integrations.trl import OURS_AGGREGATION

    aggregation = OURS_AGGREGATION[loss_type]
    length = {"dr_grpo": trainer.max_completion_length, "luspo": 1}.get(loss_type)
    low, high = trainer.epsilon_low, trainer.epsilon_high
    counted = selected if denominator == "selected" else mask
    a = advantages.double()[:, None].expand_as(log_probs)
    ratio = (log_probs.double() - old.double()).exp()
    if loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        config = PolicyLossConfig(clip_low=low, clip_high=high, aggregation=aggregation, max_response_length=length,
                                  denominator=denominator)
        stats = TokenStatistics(log_probs.double(), torch.zeros_like(a), torch.zeros_like(a))
        return policy_loss(stats, old.double(), advantages.double(), mask, selected, config)[0]
    if loss_type == "sapo":
        tau = torch.where(a > 0, trainer.args.sapo_temperature_pos, trainer.args.sapo_temperature_neg)
        per_token = -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * a
    elif loss_type == "cispo":
        per_token = -ratio.clamp(max=high).detach() * a * log_probs.double()
    else:  # luspo: one sequence-level ratio, the mean log-ratio over the completion
        m = mask.double()
        sequence = (((log_probs.double() - old.double()) * m).sum(-1) / m.sum(-1)).exp()[:, None].expand_as(a)
        per_token = -torch.minimum(sequence * a, sequence.clamp(1 - low, 1 + high) * a)
    return aggregate(per_token, selected, aggregation, length, counted)


@pytest.mark.parametrize("loss_type", ["grpo", "sapo", "bnpo", "dr_grpo", "luspo", "dapo", "cispo"])
def test_trl_ours_denominator_equals_policy_loss(loss_trainer, loss_type):
    """Through TRL's _compute_loss (old != current log-probs, so ratios and clipping are live), with
    20-Entropy's mask: selection_denominator='ours' gives the loss and LM-head gradient of ict's
    policy_loss (denominator='selected'); 'trl' gives TRL's completion-token denominators
    (policy_loss denominator='all', times the share of sequences with a selected token for grpo/sapo,
    whose mean TRL takes over every sequence; dr_grpo/luspo have constant denominators)."""
    trainer = loss_trainer
    trainer.selector_name, trainer.selector_options = "entropy", {"ratio": 0.3}
    trainer.js_references, trainer.population = (), "batch"
    trainer.loss_type = loss_type
    trainer.importance_sampling_level = "sequence" if loss_type == "luspo" else "token"
    trainer.current_gradient_accumulation_steps = 1
    records = []
    trainer.on_selection = records.append
    advantages = torch.tensor([1.0, -0.5, 0.25, -2.0])
    inputs = _loss_inputs(trainer, advantages, perturb=0.3)
    mask = inputs["completion_mask"].bool()
    try:
        for denominator in ("ours", "trl"):
            trainer.selection_denominator = denominator
            loss = trainer._compute_loss(trainer.model, inputs)
            selected = records[-1]["selected"]
            assert 0 < int(selected.sum()) < int(mask.sum()) and not selected[3].any()  # row 3: 2 low-entropy tokens
            log_probs, _, _ = trainer._get_per_token_logps_and_entropies(
                trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
                torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), 7)
            reference = _reference_loss(trainer, loss_type, log_probs, inputs["old_per_token_logps"], advantages,
                                        mask, selected, "selected" if denominator == "ours" else "all")
            if denominator == "trl" and loss_type in ("grpo", "sapo"):  # TRL's mean is over every sequence,
                rows = selected.any(-1)  # policy_loss's over the sequences with a selected token
                reference = reference * rows.sum() / rows.numel()
            torch.testing.assert_close(loss.double(), reference, atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(_head_grad(trainer, loss).double(), _head_grad(trainer, reference).double(),
                                       atol=1e-6, rtol=1e-5)
    finally:
        trainer.importance_sampling_level, trainer.current_gradient_accumulation_steps = "token", 2
        trainer.selection_denominator = "ours"
        trainer.selector_name, trainer.selector_options = "kl_cov", {"ratio": 0.2, "kl_coef": 1.5}
        trainer.js_references, trainer.population = (), "batch"


def test_trl_clip_cov_gets_old_log_probs_and_clip_range(loss_trainer, monkeypatch):
    """Clip-Cov sees TRL's old log-probs and (epsilon_low, epsilon_high), and draws from the shared
    generator: two calls at the same (step, call) choose the same tokens."""
    import ict.integrations.trl as integration

    trainer = loss_trainer
    seen = []
    original = integration.select

    def spy(name, inputs, **options):
        seen.append(inputs)
        return original(name, inputs, **options)

    monkeypatch.setattr(integration, "select", spy)
    monkeypatch.setattr(trainer, "selector_name", "clip_cov")
    monkeypatch.setattr(trainer, "selector_options", {"ratio": 0.5, "cov_low": -10.0, "cov_high": 10.0})
    monkeypatch.setattr(trainer, "loss_type", "dapo")
    monkeypatch.setattr(trainer, "epsilon_high", 0.28)  # TRL's default equals epsilon_low
    records = []
    trainer.on_selection = records.append
    inputs = _loss_inputs(trainer, torch.tensor([1.0, -0.5, 0.25, -2.0]), perturb=0.3)
    for _ in range(2):
        trainer._call_key = None  # the same (step, call) again, as after a resume
        trainer._compute_loss(trainer.model, inputs)
    assert torch.equal(seen[0].old_log_probs, inputs["old_per_token_logps"])
    assert seen[0].clip_range == (trainer.epsilon_low, trainer.epsilon_high)
    assert torch.equal(records[0]["selected"], records[1]["selected"])
    assert not torch.equal(records[0]["selected"], records[0]["mask"].bool())  # some tokens were cut


def test_scores_take_the_heads_log_z_only_where_it_is_this_heads(loss_trainer, monkeypatch):
    """_statistics with TRL's fused-head (log Z, entropy, log-probs): the right log Z is reused
    (one score pass); a log Z off by 0.5 (another head's) gives probabilities that do not sum to 1,
    so the full statistics are computed instead, equal to float64 softmax(h W^T / T), and the head's
    log Z is not tried again."""
    trainer = loss_trainer
    monkeypatch.setattr(trainer, "js_references", ("group_mean",))
    monkeypatch.setattr(trainer, "ict_head_deviation", None)
    monkeypatch.setattr(trainer, "ict_head_statistics", {"reused": 0, "recomputed": 0})
    weight = trainer.model.get_output_embeddings().weight.detach()
    generator = torch.Generator().manual_seed(3)
    hidden = torch.randn(4, 5, weight.shape[1], generator=generator)
    ids = torch.randint(0, weight.shape[0], (4, 5), generator=generator)
    response = torch.arange(5)[None, :] < torch.tensor([5, 3, 4, 2])[:, None]
    groups, finished = torch.tensor([0, 0, 1, 1]), torch.tensor([False, True, True, True])
    log_p = torch.log_softmax(hidden.double() @ weight.double().T / trainer.temperature, dim=-1)
    log_z = torch.logsumexp(hidden.double() @ weight.double().T / trainer.temperature, dim=-1).float()
    entropy = -(log_p.exp() * log_p).sum(-1)
    chosen = log_p.gather(-1, ids[..., None])[..., 0]
    reference = _group_mean_reference(log_p.exp(), response, groups)
    for shift, path in [(0.0, "reused"), (0.5, "recomputed"), (0.0, "recomputed")]:
        before = dict(trainer.ict_head_statistics)
        stats = trainer._statistics(hidden, ids, response, groups, finished,
                                    (log_z + shift, entropy.float(), chosen.float()))
        assert trainer.ict_head_statistics[path] == before[path] + 1, (shift, path)
        torch.testing.assert_close(stats.js_scores["group_mean"].double()[response], reference[response],
                                   atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(stats.entropy.double()[response], entropy[response], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(stats.log_probs.double()[response], chosen[response], atol=1e-5, rtol=1e-5)
    assert trainer.ict_head_deviation > 1e-2
    # a log Z off by 3e-5 (probabilities summing to 1 - 3e-5) is past the 1e-5 tolerance
    monkeypatch.setattr(trainer, "ict_head_deviation", None)
    before = trainer.ict_head_statistics["recomputed"]
    trainer._statistics(hidden, ids, response, groups, finished, (log_z + 3e-5, entropy.float(), chosen.float()))
    assert trainer.ict_head_statistics["recomputed"] == before + 1
    assert trainer.ict_head_deviation == pytest.approx(3e-5, rel=0.05)


def _group_mean_reference(probs, mask, groups):
    """float64 JS of each token's distribution to its group's mean at t (rows with a token at t)."""
    def entropy(p):
        return -(p * torch.log(p.clamp_min(1e-300))).sum(-1)

    result = torch.zeros(mask.shape, dtype=torch.float64)
    for b, t in mask.nonzero().tolist():
        rows = [r for r in range(mask.shape[0]) if groups[r] == groups[b] and mask[r, t]]
        mean = probs[rows, t].mean(0)
        result[b, t] = entropy(0.5 * (probs[b, t] + mean)) - 0.5 * (entropy(probs[b, t]) + entropy(mean))
    return result


def test_the_entropy_bonus_is_refused_where_trl_would_weigh_it_by_our_grpo_weights():
    """TRL's entropy bonus (entropy_coef, use_adaptive_entropy) is documented as the mean entropy of
    the tokens the loss acts on, sum(H * mask * w) / sum(mask * w) with w our weight. Under 'ours'
    grpo/sapo (ict's default) w = n_b / n_sel_b * B / S varies by completion, so the bonus was a
    weighted mean; ICTGRPOConfig refuses that in one line, and accepts the combinations whose w is
    0/1 ('trl') or one constant (dapo, bnpo)."""
    from ict.integrations.trl import ICTGRPOConfig

    common = dict(output_dir="unused", report_to="none", use_cpu=True, bf16=False)
    for options in (dict(entropy_coef=0.01), dict(use_adaptive_entropy=True), dict(entropy_coef=0.01, loss_type="sapo"),
                    dict(entropy_coef=0.01, token_selector="entropy:ratio=0.2", loss_type="grpo")):
        with pytest.raises(ValueError, match=r"^entropy_coef / use_adaptive_entropy with loss_type='(grpo|sapo)' and "
                                             r"selection_denominator='ours'") as error:
            ICTGRPOConfig(**options, **common)
        assert "\n" not in str(error.value)
    for options in (dict(entropy_coef=0.01, selection_denominator="trl"), dict(entropy_coef=0.01, loss_type="dapo"),
                    dict(use_adaptive_entropy=True, loss_type="bnpo"), dict()):
        ICTGRPOConfig(**options, **common)


@pytest.fixture(scope="module")
def entropy_trainer(tiny_model_dir, tmp_path_factory):  # after the configs above re-initialised accelerate
    return _trainer_fixture(tiny_model_dir, tmp_path_factory)


def test_trls_entropy_bonus_is_the_selected_tokens_mean_entropy(entropy_trainer):
    """Through TRL's _compute_loss with zero advantages (the policy loss is 0), entropy_coef c:
    the loss is -c times the mean of TRL's entropies over the selected tokens (float64) for the
    accepted combinations; under 'ours' grpo it is another number (why the config refuses it)."""
    trainer = entropy_trainer
    trainer.selector_name, trainer.selector_options = "entropy", {"ratio": 0.3}
    trainer.js_references, trainer.population = (), "batch"
    trainer.current_gradient_accumulation_steps = 1
    trainer.entropy_coef, trainer._entropy_bonus_enabled = 0.5, True
    records = []
    trainer.on_selection = records.append
    inputs = _loss_inputs(trainer, torch.zeros(4), perturb=0.0)
    with torch.no_grad():
        _, entropies, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), 7, compute_entropy=True)
    try:
        for loss_type, denominator, accepted in [("dapo", "ours", True), ("bnpo", "ours", True),
                                                 ("grpo", "trl", True), ("grpo", "ours", False)]:
            trainer.loss_type, trainer.selection_denominator = loss_type, denominator
            loss = trainer._compute_loss(trainer.model, inputs)
            selected = records[-1]["selected"].bool() & inputs["completion_mask"].bool()
            assert 0 < int(selected.sum()) and len(set(selected.sum(-1).tolist())) > 1
            expected = -0.5 * entropies.double()[selected].mean()
            if accepted:
                assert float(loss) == pytest.approx(float(expected), abs=1e-6), (loss_type, denominator)
            else:
                assert abs(float(loss) - float(expected)) > 1e-3
    finally:
        trainer.entropy_coef, trainer._entropy_bonus_enabled = 0.0, False
        trainer.current_gradient_accumulation_steps, trainer.loss_type = 2, "dapo"
        trainer.selection_denominator = "ours"
        trainer.selector_name, trainer.selector_options = "kl_cov", {"ratio": 0.2, "kl_coef": 1.5}

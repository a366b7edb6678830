"""ICTGRPOTrainer's loss through TRL 1.16's own code: for every loss_type the "ours" denominator
gives ict.core.loss.policy_loss's loss and LM-head gradient; trl_aggregate is TRL's own
aggregation; the config refuses bad values in one line; Clip-Cov gets the old log-probs and TRL's
clip range; the scores take the fused head's log Z only where it is this head's; TRL's entropy
bonus is the selected tokens' mean entropy. KL-Cov's penalty: tests/test_integration_trl_kl_cov.py."""

from __future__ import annotations

import math

import pytest
import torch
from trl_helpers import head_grad, loss_inputs, loss_trainer_for, trl_own_loss

pytest.importorskip("trl")



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
    refuses a misspelt one in one line, and every loss type TRL's _compute_loss knows is accepted
    (but vespo under "ours")."""
    from ict.integrations.trl import TRL_LOSS_TYPES, ICTGRPOConfig

    common = dict(output_dir="unused", report_to="none", use_cpu=True, bf16=False, selection_denominator=denominator)
    for typo in ("drgrpo", "DAPO", ""):
        with pytest.raises(ValueError, match=r"^loss_type must be one of grpo, .*, got ") as error:
            ICTGRPOConfig(loss_type=typo, **common)
        assert "\n" not in str(error.value)
    for loss_type in TRL_LOSS_TYPES:
        if denominator == "ours" and loss_type == "vespo":  # refused: not a per-token loss
            with pytest.raises(ValueError, match="^selection_denominator='ours' is not defined for loss_type='vespo'"):
                ICTGRPOConfig(loss_type=loss_type, **common)
            continue
        assert ICTGRPOConfig(loss_type=loss_type, **common).loss_type == loss_type


def test_misspelt_importance_sampling_level_and_scale_rewards_are_refused_by_the_config():
    """TRL 1.16 checks importance_sampling_level only in its first loss and scale_rewards only
    after its first generation and rewards ("Unknown importance sampling level: Sequence" from
    TRL's _compute_loss in step 1, after the model generated); the config refuses them in one line
    naming the option, and the trainer again for a value set after the config's checks. TRL's
    values are accepted (scale_rewards True / False as TRL's group / none)."""
    from ict.integrations.trl import ICTGRPOConfig, trainer_refusal

    common = dict(output_dir="unused", report_to="none", use_cpu=True, bf16=False)
    for options, message in [
        (dict(importance_sampling_level="Sequence"), r"^importance_sampling_level must be 'token' or 'sequence', "
                                                     r"got 'Sequence'$"),
        (dict(importance_sampling_level="seq"), r"^importance_sampling_level must be .*, got 'seq'$"),
        (dict(scale_rewards="grouped"), r"^scale_rewards must be one of group, batch, none \(or True / False\), "
                                        r"got 'grouped'$"),
        (dict(scale_rewards="std"), r"^scale_rewards must be one of group, batch, none .*, got 'std'$"),
    ]:
        with pytest.raises(ValueError, match=message) as error:
            ICTGRPOConfig(**options, **common)
        assert "\n" not in str(error.value)
    for level in ("token", "sequence"):
        assert ICTGRPOConfig(importance_sampling_level=level, **common).importance_sampling_level == level
    for given, taken in (("group", "group"), ("batch", "batch"), ("none", "none"), (True, "group"), (False, "none")):
        assert ICTGRPOConfig(scale_rewards=given, **common).scale_rewards == taken
    changed = ICTGRPOConfig(**common)
    changed.importance_sampling_level = "Token"
    assert trainer_refusal(changed) == "importance_sampling_level must be 'token' or 'sequence', got 'Token'"


def test_the_whole_groups_refusal_names_generation_batch_size_and_keeps_accumulation():
    """A group selector with generation_batch_size=8 of 4-row micro-batches (steps_per_generation
    2) was told 'set steps_per_generation=1 (and gradient_accumulation_steps=1)': doing so beside
    generation_batch_size failed in TRL ('generation_batch_size' and 'steps_per_generation' can not
    be both configured), and gradient accumulation need not go (steps_per_generation=1 with
    gradient_accumulation_steps=2 trains whole groups). The message says both; its advice is
    accepted."""
    from ict.integrations.trl import ICTGRPOConfig

    common = dict(output_dir="unused", report_to="none", use_cpu=True, bf16=False, per_device_train_batch_size=4,
                  num_generations=4)
    message = (r"^token_selector 'ict' needs whole groups in each micro-batch \(TRL shuffles a group over "
               r"micro-batches\): set steps_per_generation=1 and leave generation_batch_size unset \(it sets "
               r"steps_per_generation\); gradient_accumulation_steps may stay$")
    for options in (dict(generation_batch_size=8), dict(gradient_accumulation_steps=2)):
        with pytest.raises(ValueError, match=message):
            ICTGRPOConfig(**options, **common)
    advised = ICTGRPOConfig(steps_per_generation=1, gradient_accumulation_steps=2, **common)
    assert (advised.steps_per_generation, advised.generation_batch_size) == (1, 4)


def test_a_group_scoped_random_control_needs_whole_groups_as_ict_does():
    """'random:scope=group' ranks each prompt's G completions together, but random declares the
    batch population, so with 2 steps per generation TRL's shuffle handed it fragments of groups,
    each ranked as a group: a group of 4 rows of 5 tokens at ratio 0.1 had ceil(0.5) = 1 token
    of each one-row fragment selected, 4 in all, where the whole group has ceil(2) = 2. Refused
    as ict's scope=group is (docs/scaling.md); its other scopes still run so."""
    from ict.integrations.trl import ICTGRPOConfig

    common = dict(output_dir="unused", report_to="none", use_cpu=True, bf16=False, per_device_train_batch_size=4,
                  num_generations=4, gradient_accumulation_steps=2)
    for spec in ("random:scope=group", "ict:scope=group,reference=seq_mean"):
        name = spec.split(":")[0]
        with pytest.raises(ValueError, match=rf"^token_selector '{name}' needs whole groups in each micro-batch "):
            ICTGRPOConfig(token_selector=spec, **common)
    for spec in ("random:scope=sequence", "random:scope=batch", "ict:scope=sequence,reference=seq_mean"):
        assert ICTGRPOConfig(token_selector=spec, **common).steps_per_generation == 2
    assert ICTGRPOConfig(token_selector="random:scope=group", steps_per_generation=1, **common).token_selector


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
    expected = trl_own_loss(loss_type, advantages, mask, training=training, processes=2, accumulation=4,
                             steps_per_generation=2)
    ours = trl_aggregate(-advantages[:, None].expand(mask.shape), mask, loss_type, max_completion_length=9,
                         num_items_in_batch=torch.tensor(37.0), num_processes=2,
                         accumulation_steps=4 if training else 1, steps_per_generation=2 if training else 1)
    assert math.isfinite(float(expected)) and abs(float(expected)) > 1e-3
    torch.testing.assert_close(ours.double(), expected, atol=1e-12, rtol=1e-6)

def test_ours_weights_take_the_processes_counts_except_bnpo():
    """ours_weights with loss_counts summed over processes (here this micro-batch's plus
    another process's): grpo/sapo weight n_b / n_sel_b * B / S and dapo/cispo N / N_sel with the
    global B, S, N, N_sel; bnpo keeps this micro-batch's N / N_sel (TRL's bnpo normalises by the
    process's tokens), whatever counts it is given. A selected position outside the response
    mask gets weight 0 and counts in no n_sel_b."""
    from ict.core.loss import loss_counts
    from ict.integrations.trl import ours_weights

    mask = torch.arange(5)[None, :] < torch.tensor([5, 4, 2])[:, None]
    selected = torch.zeros(3, 5, dtype=torch.bool)
    selected[0, [1, 3]] = selected[1, 0] = True  # row 2 has none
    selected[1, 4] = True  # outside row 1's response: neither weighted nor counted
    other = torch.tensor([3, 7, 2, 2])  # another process: 3 selected, 7 tokens, 2 rows with some, 2 rows
    counts = loss_counts(selected, mask) + other
    assert counts.tolist() == [6, 18, 4, 5]
    expected = {"grpo": {(0, 1): 5 / 2 * 5 / 4, (0, 3): 5 / 2 * 5 / 4, (1, 0): 4 / 1 * 5 / 4},
                "dapo": {(0, 1): 18 / 6, (0, 3): 18 / 6, (1, 0): 18 / 6},
                "bnpo": {(0, 1): 11 / 3, (0, 3): 11 / 3, (1, 0): 11 / 3}}
    for loss_type, values in expected.items():
        reference = torch.zeros(3, 5)
        for (b, t), value in values.items():
            reference[b, t] = value
        for aliased in {"grpo": ("grpo", "sapo"), "dapo": ("dapo", "cispo"), "bnpo": ("bnpo",)}[loss_type]:
            torch.testing.assert_close(ours_weights(selected, mask, aliased, counts), reference)

@pytest.fixture(scope="module")
def loss_trainer(tiny_model_dir, tmp_path_factory):
    return loss_trainer_for(tiny_model_dir, tmp_path_factory)

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
    return aggregate(per_token, selected, aggregation, length, counted, every_row=denominator == "all")


@pytest.mark.parametrize("loss_type", ["grpo", "sapo", "bnpo", "dr_grpo", "luspo", "dapo", "cispo"])
def test_trl_ours_denominator_equals_policy_loss(loss_trainer, loss_type):
    """Through TRL's _compute_loss (old != current log-probs, so ratios and clipping are live), with
    20-Entropy's mask: selection_denominator='ours' gives the loss and LM-head gradient of ict's
    policy_loss (denominator='selected'); 'trl' gives TRL's completion-token denominators
    (policy_loss denominator='all', whose grpo/sapo mean is over every sequence, as TRL's;
    dr_grpo/luspo have constant denominators)."""
    trainer = loss_trainer
    trainer.selector_name, trainer.selector_options = "entropy", {"ratio": 0.3}
    trainer.js_references, trainer.population = (), "batch"
    trainer.loss_type = loss_type
    trainer.importance_sampling_level = "sequence" if loss_type == "luspo" else "token"
    trainer.current_gradient_accumulation_steps = 1
    records = []
    trainer.on_selection = records.append
    advantages = torch.tensor([1.0, -0.5, 0.25, -2.0])
    inputs = loss_inputs(trainer, advantages, perturb=0.3)
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
            torch.testing.assert_close(loss.double(), reference, atol=1e-6, rtol=1e-5)
            torch.testing.assert_close(head_grad(trainer, loss).double(), head_grad(trainer, reference).double(),
                                       atol=1e-6, rtol=1e-5)
    finally:
        trainer.importance_sampling_level, trainer.current_gradient_accumulation_steps = "token", 2
        trainer.selection_denominator = "ours"
        trainer.selector_name, trainer.selector_options = "kl_cov", {"ratio": 0.2, "kl_coef": 1.5}
        trainer.js_references, trainer.population = (), "batch"


def test_trl_denominator_averages_over_a_row_without_completion_tokens_as_trls_grpo(loss_trainer):
    """TRL's grpo loss is the mean over every row, one whose completion mask is all zero (as TRL's
    mask_truncated_completions leaves a cut completion) included: through TRL's _compute_loss with
    selection_denominator='trl', it equals policy_loss with denominator='all' on the same rows
    (whose mean left such a row out before, 4/3 of TRL's here)."""
    trainer = loss_trainer
    trainer.selector_name, trainer.selector_options = "entropy", {"ratio": 0.3}
    trainer.js_references, trainer.population = (), "batch"
    trainer.loss_type, trainer.current_gradient_accumulation_steps = "grpo", 1
    records = []
    trainer.on_selection = records.append
    advantages = torch.tensor([1.0, -0.5, 0.25, -2.0])
    inputs = loss_inputs(trainer, advantages, perturb=0.3)
    inputs["completion_mask"][3] = 0  # row 3: cut, no completion token counts
    inputs["num_items_in_batch"] = inputs["completion_mask"].sum()
    try:
        trainer.selection_denominator = "trl"
        loss = trainer._compute_loss(trainer.model, inputs)
        selected, mask = records[-1]["selected"], inputs["completion_mask"].bool()
        assert selected[:3].any(-1).all() and not selected[3].any()
        log_probs, _, _ = trainer._get_per_token_logps_and_entropies(
            trainer.model, torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1),
            torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1), 7)
        reference = _reference_loss(trainer, "grpo", log_probs, inputs["old_per_token_logps"], advantages, mask,
                                    selected, "all")
        torch.testing.assert_close(loss.double(), reference, atol=1e-6, rtol=1e-5)
    finally:
        trainer.current_gradient_accumulation_steps, trainer.selection_denominator = 2, "ours"
        trainer.selector_name, trainer.selector_options = "kl_cov", {"ratio": 0.2, "kl_coef": 1.5}
        trainer.js_references, trainer.population = (), "batch"


def _clip_cov_selections(trainer, monkeypatch, options: dict, loss_type: str) -> list:
    """Set the trainer to Clip-Cov with ``options`` under ``loss_type`` (epsilon_high 0.28; TRL's
    default equals epsilon_low) and return the list that collects the SelectionInputs each
    ``select`` call gets."""
    import ict.integrations.trl as integration

    seen = []
    original = integration.select

    def spy(name, inputs, **selector_options):
        seen.append(inputs)
        return original(name, inputs, **selector_options)

    monkeypatch.setattr(integration, "select", spy)
    monkeypatch.setattr(trainer, "selector_name", "clip_cov")
    monkeypatch.setattr(trainer, "selector_options", options)
    monkeypatch.setattr(trainer, "loss_type", loss_type)
    monkeypatch.setattr(trainer, "epsilon_high", 0.28)
    return seen


def test_trl_clip_cov_gets_old_log_probs_and_clip_range(loss_trainer, monkeypatch):
    """Clip-Cov sees TRL's old log-probs and (epsilon_low, epsilon_high), and draws from the shared
    generator: two calls at the same (step, call) choose the same tokens."""
    trainer = loss_trainer
    seen = _clip_cov_selections(trainer, monkeypatch, {"ratio": 0.5, "cov_low": -10.0, "cov_high": 10.0}, "dapo")
    records = []
    trainer.on_selection = records.append
    inputs = loss_inputs(trainer, torch.tensor([1.0, -0.5, 0.25, -2.0]), perturb=0.3)
    for _ in range(2):
        trainer._call_key = None  # the same (step, call) again, as after a resume
        trainer._compute_loss(trainer.model, inputs)
    assert torch.equal(seen[0].old_log_probs, inputs["old_per_token_logps"])
    assert seen[0].clip_range == (trainer.epsilon_low, trainer.epsilon_high)
    assert torch.equal(records[0]["selected"], records[1]["selected"])
    assert not torch.equal(records[0]["selected"], records[0]["mask"].bool())  # some tokens were cut


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo", "luspo", "cispo", "sapo"])
def test_trl_clip_cov_spares_exactly_the_tokens_the_loss_type_clips(loss_trainer, monkeypatch, loss_type):
    """Clip-Cov cutting every candidate (ratio 1, band wide open) keeps only the tokens whose
    gradient the ratio clip already cuts: through TRL's _compute_loss with old != current
    log-probs, the kept tokens are those where d(per-token loss)/d(log p) of the loss type (its
    TRL formula written out, float64) is 0. cispo's clamp is a detached weight and sapo's gate is
    soft: no token is clipped (before, the PPO clip range spared 6 of 19 tokens there)."""
    trainer = loss_trainer
    seen = _clip_cov_selections(trainer, monkeypatch, {"ratio": 1.0, "cov_low": -1e9, "cov_high": 1e9}, loss_type)
    records = []
    trainer.on_selection = records.append
    inputs = loss_inputs(trainer, torch.tensor([1.0, -0.5, 0.25, -2.0]), perturb=0.3)
    trainer._compute_loss(trainer.model, inputs)
    mask = records[0]["mask"].bool()
    log_probs = seen[0].stats.log_probs.double().requires_grad_(True)
    ratio = (log_probs - inputs["old_per_token_logps"].double()).exp()
    a = inputs["advantages"].double()[:, None].expand_as(ratio)
    if loss_type == "cispo":
        per_token = -ratio.clamp(max=0.28).detach() * a * log_probs
    elif loss_type == "sapo":
        tau = torch.where(a > 0, trainer.args.sapo_temperature_pos, trainer.args.sapo_temperature_neg)
        per_token = -torch.sigmoid(tau * (ratio - 1)) * 4 / tau * a
    else:
        per_token = -torch.minimum(ratio * a, ratio.clamp(1 - trainer.epsilon_low, 1.28) * a)
    (gradient,) = torch.autograd.grad(per_token[mask].sum(), log_probs)
    clipped = mask & (gradient == 0)
    assert torch.equal(records[0]["selected"].bool(), clipped)
    assert int(clipped.sum()) == (0 if loss_type in ("cispo", "sapo") else 6)


def test_clip_cov_under_trls_two_sided_clip_delta_is_refused(loss_trainer, monkeypatch):
    """TRL's ``delta`` clamps the ratio at ``delta`` before the PPO min, which also cuts the
    gradient of the tokens with ratio > delta and a negative advantage; Clip-Cov spared only the
    token-level clip's, so it spent its cuts on tokens TRL already cut. Shown through TRL's
    _compute_loss (delta 1.3, every candidate cut): TRL's per-token loss (written out, float64)
    has 9 zero-gradient tokens, Clip-Cov spared 8; the token of ratio 1.40, A = -0.5 was "cut".
    Refused in one line by the config (and the trainer) under the PPO-clipped loss types; accepted
    without delta, under cispo/sapo (no ratio clip to spare) and for other selectors."""
    from ict.integrations.trl import ICTGRPOConfig, trainer_refusal

    trainer = loss_trainer
    seen = _clip_cov_selections(trainer, monkeypatch, {"ratio": 1.0, "cov_low": -1e9, "cov_high": 1e9}, "dapo")
    monkeypatch.setattr(trainer.args, "delta", 1.3)
    records = []
    trainer.on_selection = records.append
    inputs = loss_inputs(trainer, torch.tensor([1.0, -0.5, 0.25, -2.0]), perturb=0.6)
    trainer._compute_loss(trainer.model, inputs)
    mask = records[0]["mask"].bool()
    log_probs = seen[0].stats.log_probs.double().requires_grad_(True)
    ratio = (log_probs - inputs["old_per_token_logps"].double()).exp()
    a = inputs["advantages"].double()[:, None].expand_as(ratio)
    per_token = -torch.minimum(ratio.clamp(max=1.3) * a, ratio.clamp(1 - trainer.epsilon_low, 1.28) * a)
    (gradient,) = torch.autograd.grad(per_token[mask].sum(), log_probs)
    cut_by_trl, spared = mask & (gradient == 0), records[0]["selected"].bool()
    assert (int(cut_by_trl.sum()), int(spared.sum())) == (9, 8)
    assert ratio[cut_by_trl & ~spared].tolist() == pytest.approx([1.4], abs=0.01)  # cut by delta alone

    common = dict(output_dir="unused", report_to="none", use_cpu=True, bf16=False)
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        with pytest.raises(ValueError, match=r"^token_selector 'clip_cov' spares the tokens PPO's ratio clip cuts, "
                                             r"but delta=1\.3 also cuts those of ratio > delta") as error:
            ICTGRPOConfig(token_selector="clip_cov", delta=1.3, loss_type=loss_type, **common)
        assert "\n" not in str(error.value)
    changed = ICTGRPOConfig(token_selector="clip_cov", loss_type="dapo", **common)
    changed.delta = 2.0  # set after the config's checks: the trainer's
    assert trainer_refusal(changed).startswith("token_selector 'clip_cov' spares the tokens PPO's ratio clip cuts, "
                                               "but delta=2.0 also")
    changed.delta = 0.0  # TRL clamps whenever delta is not None
    assert trainer_refusal(changed).startswith("token_selector 'clip_cov' spares")
    for options in (dict(token_selector="clip_cov", loss_type="grpo"),
                    dict(token_selector="clip_cov", delta=1.3, loss_type="cispo"),
                    dict(token_selector="clip_cov", delta=1.3, loss_type="sapo"),
                    dict(token_selector="kl_cov", delta=1.3, loss_type="grpo")):
        ICTGRPOConfig(**options, **common)


def test_clip_cov_under_gspos_sequence_clip_is_refused():
    """Clip-Cov spares the tokens PPO's token-level ratio clip cuts; GSPO
    (importance_sampling_level='sequence') clips whole sequences, so with a PPO-clipped loss type
    the spared tokens were not the clipped ones (7 spared, 4 clipped on the batch of loss_inputs):
    refused in one line by the config. Accepted: token level, cispo and sapo (no clip to spare),
    and other selectors at sequence level."""
    from ict.integrations.trl import ICTGRPOConfig

    common = dict(output_dir="unused", report_to="none", use_cpu=True, bf16=False)
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo", "luspo"):
        with pytest.raises(ValueError, match=r"^token_selector 'clip_cov' spares the tokens PPO's token-level "
                                             r"ratio clip cuts, but importance_sampling_level='sequence'") as error:
            ICTGRPOConfig(token_selector="clip_cov", importance_sampling_level="sequence", loss_type=loss_type,
                          **common)
        assert "\n" not in str(error.value)
    for options in (dict(token_selector="clip_cov", importance_sampling_level="token", loss_type="grpo"),
                    dict(token_selector="clip_cov", importance_sampling_level="sequence", loss_type="cispo"),
                    dict(token_selector="clip_cov", importance_sampling_level="sequence", loss_type="sapo"),
                    dict(token_selector="kl_cov", importance_sampling_level="sequence", loss_type="grpo"),
                    dict(token_selector="ict", importance_sampling_level="sequence")):
        ICTGRPOConfig(**options, **common)


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
    return loss_trainer_for(tiny_model_dir, tmp_path_factory)


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
    inputs = loss_inputs(trainer, torch.zeros(4), perturb=0.0)
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

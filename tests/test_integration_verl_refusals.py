"""ict.integrations.verl's refusals inside verl 0.9's own data path, on CPU, each in one line:
a mini-batch of partial groups, a badly typed option, rows sampled at several temperatures, a
micro-batch other than the scored one, verl's own PolicyLossConfig, fused kernels, Ulysses and
rollout importance weights. The batch and the toy LM: tests/verl_helpers.py."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from verl_helpers import (
    GROUP,
    RESPONSE,
    FSDPActorConfig,
    ToyLM,
    actor_config,
    engine,
    get_policy_loss_fn,
    ict_verl,
    make_batch,
    micro_batch,
    ppo_loss,
    verl_loss,
)

from ict.core.errors import UsageError


def test_a_group_scoped_ranking_refuses_a_mini_batch_of_partial_groups() -> None:
    """Rows 0, 1 of one prompt and 3, 4 of the other (actor.shuffle=True, or the v0 trainer's
    balance_batch): a scope=group ranking ranked each fragment as a group; it is refused in one
    line, as the group references already were; so is random's scope=group (its population is the
    batch, but it ranks each uid's rows together)."""
    rows = [0, 1, 3, 4]
    for spec in ("ict:reference=seq_mean,scope=group,ratio=0.3", "ict:reference=group_mean,ratio=0.3",
                 "random:scope=group,ratio=0.3"):
        batch, model = make_batch(), ToyLM()
        data, fsdp = micro_batch(batch, True, global_batch_size=len(rows), rows=rows), engine()
        inputs, output_args = fsdp.prepare_model_inputs(data)
        with pytest.raises(UsageError, match=r"need whole groups \(3 rows per uid\)") as error:
            fsdp.prepare_model_outputs(model(**inputs), output_args, data, partial(ppo_loss, config=actor_config(spec)))
        assert "\n" not in str(error.value)
    ict_verl._pending.clear()


@pytest.mark.parametrize(("option", "value"), [
    ("ict_seed", 1.5), ("ict_seed", "abc"), ("ict_seed", None), ("ict_seed", True),
    ("ict_dual_clip", "no"), ("ict_dual_clip", 1),
    ("ict_full_token_warmup_steps", 2.5), ("ict_full_token_warmup_steps", True),
    ("ict_full_token_warmup_steps", "abc"), ("ict_full_token_warmup_steps", -1),
    ("ict_denominator", "tokens"), ("ict_aggregation", "token-mean"),
    ("ict_selector", None), ("ict_selector", 5), ("ict_selector", ["ict"]),
    ("ict_stats_tile_size", "0x5"), ("ict_stats_tile_size", "fast"), ("ict_stats_tile_size", 5),
])
def test_a_badly_typed_option_is_refused_in_one_line(option: str, value: object) -> None:
    """hydra passes an override's value as typed: ict_seed=1.5 trained with seed 1, ict_dual_clip=no
    turned the dual clip on (a true string), a warm-up of 2.5 steps ran 3 and 'abc' raised a
    TypeError at the first selection; ict_selector=null (or 5) raised an AttributeError and a list
    a TypeError (unhashable) from the selector parser."""
    with pytest.raises(UsageError, match=option) as error:
        ict_verl.ICTPolicyLossConfig(loss_mode="ict", **{option: value})
    assert "\n" not in str(error.value)
    ict_verl.ICTPolicyLossConfig(loss_mode="ict", ict_seed=3, ict_dual_clip=True, ict_full_token_warmup_steps=None)


def test_clip_cov_is_refused_beside_the_dual_clip_in_one_line() -> None:
    """Clip-Cov spared only the tokens the (clip_low, clip_high) clip cuts: with ict_dual_clip it
    also cut tokens of negative advantage and ratio > clip_ratio_c, whose gradient the dual clip
    already zeroes (as TRL's delta; refused there too). Without the dual clip, and the dual clip
    beside another selector, are accepted."""
    with pytest.raises(UsageError, match=r"^ict_selector 'clip_cov' spares the tokens PPO's ratio clip cuts, but "
                       r"ict_dual_clip \(clip_ratio_c=3.0\) also cuts those of ratio > 3.0 with a negative "
                       r"advantage; leave ict_dual_clip false$") as error:
        ict_verl.loss_config_of(actor_config("clip_cov:ratio=0.01", ict_dual_clip=True), "token-mean")
    assert "\n" not in str(error.value)
    assert ict_verl.loss_config_of(actor_config("clip_cov"), "token-mean").clip_ratio_c is None
    assert ict_verl.loss_config_of(actor_config("kl_cov", ict_dual_clip=True), "token-mean").clip_ratio_c == 3.0


def test_one_temperature_and_the_scored_micro_batches() -> None:
    """Refused in one line: rows sampled at different temperatures (one temperature scales the
    statistics); a training micro-batch whose rows differ from the scoring pass's selection."""
    from ict.core.selectors import Selection
    from ict.integrations.verl_selection import _temperature

    assert _temperature({"temperature": torch.tensor([0.7, 0.7])}) == pytest.approx(0.7)
    assert _temperature({"temperature": 0.9}) == 0.9
    with pytest.raises(UsageError, match="one sampling temperature"):
        _temperature({"temperature": torch.tensor([0.7, 0.8])})
    batch, model = make_batch(), ToyLM()
    data, fsdp = micro_batch(batch, True), engine()
    inputs, output_args = fsdp.prepare_model_inputs(data)
    two_rows = torch.zeros(2, RESPONSE, dtype=torch.bool)
    ict_verl._queue.append(ict_verl.MicroBatchSelection(Selection(two_rows, None), None, 1.0))
    try:
        with pytest.raises(RuntimeError, match="differ from the scoring pass's"):
            fsdp.prepare_model_outputs(model(**inputs), output_args, data, partial(ppo_loss, config=actor_config("all")))
    finally:
        ict_verl._queue.clear()
        ict_verl._pending.clear()


def test_refusals() -> None:
    with pytest.raises(UsageError, match="FSDP engine"):
        get_policy_loss_fn("ict")(torch.zeros(1, 2), torch.zeros(1, 2), torch.zeros(1, 2),
                                  torch.ones(1, 2, dtype=torch.bool), "token-mean", actor_config("all"))
    with pytest.raises(UsageError, match="loss_agg_mode"):
        verl_loss("all", True, "token-sum")
    with pytest.raises(ValueError, match="no option"):
        ict_verl.ICTPolicyLossConfig(loss_mode="ict", ict_selector="entropy:ratoi=0.2")
    with pytest.raises(UsageError, match="'ref'"):
        ict_verl.ICTPolicyLossConfig(loss_mode="ict", ict_selector="ict:reference=ref")
    # a micro-batch that is not the whole mini-batch reaching the one-pass path
    batch, model = make_batch(), ToyLM()
    data, fsdp = micro_batch(batch, True, global_batch_size=12), engine()
    inputs, output_args = fsdp.prepare_model_inputs(data)
    loss_function = partial(ppo_loss, config=actor_config("entropy"))
    with pytest.raises(RuntimeError, match="6 rows of a 12-row mini-batch"):
        fsdp.prepare_model_outputs(model(**inputs), output_args, data, loss_function)
    # group_mean with a group split over ranks (here: rollout.n says 4 rows per uid)
    config = FSDPActorConfig(strategy="fsdp", rollout_n=4, ppo_micro_batch_size_per_gpu=6,
                             policy_loss=ict_verl.ICTPolicyLossConfig(loss_mode="ict"))
    data = micro_batch(batch, True)
    with pytest.raises(UsageError, match="whole groups .4 rows per uid. in each micro-batch"):
        fsdp.prepare_model_outputs(model(**inputs), output_args, data, partial(ppo_loss, config=config))


def test_loss_mode_ict_without_our_config_class_is_refused_in_one_line() -> None:
    """loss_mode=ict with verl's own PolicyLossConfig (the _target_ override forgotten, so no
    ict_* fields) is refused in one line naming the override, not an AttributeError later."""
    from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig

    batch, model = make_batch(), ToyLM()
    data, fsdp = micro_batch(batch, True), engine()
    inputs, output_args = fsdp.prepare_model_inputs(data)
    config = FSDPActorConfig(strategy="fsdp", rollout_n=GROUP, ppo_micro_batch_size_per_gpu=6,
                             policy_loss=VerlPolicyLossConfig(loss_mode="ict"))
    with pytest.raises(UsageError, match=r"policy_loss._target_=ict.integrations.verl.ICTPolicyLossConfig") as error:
        fsdp.prepare_model_outputs(model(**inputs), output_args, data, partial(ppo_loss, config=config))
    assert "\n" not in str(error.value) and ict_verl._pending == []


def test_fused_kernels_and_ulysses_are_refused_in_one_line(monkeypatch) -> None:
    """The statistics need the actor's materialised logits of whole sequences: verl's fused
    kernels (no logits, or none to trust) and Ulysses sequence parallelism (each rank holds a slice
    of the packed sequence) are refused in one line naming the setting. verl's own output path is
    stubbed: its fused and Ulysses branches need the fused model output and a process group."""
    from types import SimpleNamespace

    from verl_helpers import tu

    monkeypatch.setattr(ict_verl, "_original_prepare_model_outputs", lambda *args: {})
    batch, model = make_batch(), ToyLM()
    data, fsdp = micro_batch(batch, True), engine()
    inputs, output_args = fsdp.prepare_model_inputs(data)
    output, loss_function = model(**inputs), partial(ppo_loss, config=actor_config("all"))
    cases = [("use_fused_kernels", True, output, "use_fused_kernels=False"),
             ("use_fused_kernels", False, SimpleNamespace(logits=None), "use_fused_kernels=False"),
             ("use_ulysses_sp", True, output, "ulysses_sequence_parallel_size=1")]
    for setting, value, model_output, message in cases:
        fsdp.use_ulysses_sp = setting == "use_ulysses_sp" and value
        tu.assign_non_tensor(data, use_fused_kernels=setting == "use_fused_kernels" and value)
        with pytest.raises(UsageError, match=message) as error:
            fsdp.prepare_model_outputs(model_output, output_args, data, loss_function)
        assert "\n" not in str(error.value)
    assert ict_verl._pending == []


def test_rollout_importance_weights_are_refused_in_one_line() -> None:
    """verl hands rollout_is_weights (algorithm.rollout_correction) to the policy loss; ict's loss
    does not apply them, so it refuses them rather than train without them."""
    ones = torch.ones(1, 2)
    with pytest.raises(UsageError, match="rollout importance weights") as error:
        get_policy_loss_fn("ict")(-ones, -ones, ones, ones.bool(), "token-mean", actor_config("all"),
                                  rollout_is_weights=ones)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(("field", "value", "message"), [
    ("kl_cov_ratio", 0.001, "kl_cov_ratio (0.001; verl's own kl_cov loss): set the selector's option instead, "
                            "ict_selector='kl_cov:ratio=0.001'"),
    ("ppo_kl_coef", 1.0, "ppo_kl_coef (1.0; verl's own kl_cov loss): set the selector's option instead, "
                         "ict_selector='kl_cov:kl_coef=1.0'"),
    ("clip_cov_ratio", 0.001, "clip_cov_ratio (0.001; verl's own clip_cov loss): set the selector's option "
                              "instead, ict_selector='clip_cov:ratio=0.001'"),
    ("clip_cov_lb", 0.5, "clip_cov_lb (0.5; verl's own clip_cov loss): set the selector's option instead, "
                         "ict_selector='clip_cov:cov_low=0.5'"),
    ("clip_cov_ub", 9.0, "clip_cov_ub (9.0; verl's own clip_cov loss): set the selector's option instead, "
                         "ict_selector='clip_cov:cov_high=9.0'"),
    ("dro_beta", 0.5, "dro_beta (0.5; verl's own dro loss): ict's loss has no dro term; leave it null"),
])
def test_a_field_of_verls_own_losses_is_refused_not_ignored(field: str, value: float, message: str) -> None:
    """verl's kl_cov / clip_cov / dro fields are read only by verl's own losses: under
    loss_mode=ict, policy_loss.kl_cov_ratio=0.001 with ict_selector=kl_cov trained with the
    selector's ratio 2e-3 without a word. Refused in one line naming the selector option; verl's
    default values (what its config holds when the user sets nothing) and verl's own loss modes
    are accepted."""
    with pytest.raises(UsageError) as error:
        ict_verl.ICTPolicyLossConfig(loss_mode="ict", ict_selector="kl_cov", **{field: value})
    assert str(error.value) == f"loss_mode=ict does not read policy_loss.{message}"
    defaults = {"kl_cov_ratio": 0.0002, "ppo_kl_coef": 0.1, "clip_cov_ratio": 0.0002, "clip_cov_lb": 1.0,
                "clip_cov_ub": 5.0, "dro_beta": None}  # verl 0.9.1's actor.yaml
    ict_verl.ICTPolicyLossConfig(loss_mode="ict", **{field: defaults[field]})
    ict_verl.ICTPolicyLossConfig(loss_mode="kl_cov", **{field: value})

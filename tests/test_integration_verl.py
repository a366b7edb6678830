"""ict.integrations.verl inside verl 0.9's own data path, on CPU.

A tiny batch (2 prompts x 3 completions, left-padded prompts of different lengths, ragged
responses) goes through verl's ``DataProto.to_tensordict`` and ``left_right_2_no_padding``, verl's
FSDP engine's ``prepare_model_inputs`` / ``prepare_model_outputs`` (with and without remove-padding)
and verl's unchanged ``ppo_loss``, which fetches our loss with ``get_policy_loss_fn("ict")``. The
reference takes the logits of the *padded* batch directly (column ``P + t - 1`` predicts response
token ``t``), runs ``ict.core.selectors.select`` and ``ict.core.loss.policy_loss``: loss and gradient must
agree to 1e-6. The batch, the toy LM and both losses: tests/verl_helpers.py. Several micro-batches
and two ranks: tests/test_integration_verl_batches.py; verl's v1 trainer balancing and the example
launch script: tests/test_integration_verl_launch.py; the refusals:
tests/test_integration_verl_refusals.py; the metrics verl reports:
tests/test_integration_verl_metrics.py.
"""

from __future__ import annotations

import math
from functools import partial
from types import SimpleNamespace

import pytest
import torch
from verl_helpers import (
    AGGREGATIONS,
    GROUP,
    PROMPT,
    RESPONSE,
    RESPONSE_LENGTHS,
    TEMPERATURE,
    FSDPActorConfig,
    ToyLM,
    actor_config,
    config_loss,
    engine,
    get_policy_loss_fn,
    ict_verl,
    make_batch,
    micro_batch,
    ppo_loss,
    reference_loss,
    verl_loss,
)

SELECTORS = [
    "ict:ratio=0.3",  # the default reference, group_mean_absorbing
    "ict:reference=group_mean,ratio=0.3",
    "ict:reference=group_mean,ratio=0.25,scope=sequence",
    "ict:reference=group_mean,ratio=0.3,scope=group",  # ranked within each uid's rows
    "ict:reference=group_mean,ratio=0.3,unit=token_id",  # ranks the token ids verl hands over
    "ict:preset=batch,ratio=0.3",  # the batch-ranked recipe before the paper's
    "entropy:ratio=0.2",
    "stapo:tau_p=0.1,quantile=0.75",
    "kl_cov:ratio=0.2,kl_coef=1.0",
    "all",
]


@pytest.mark.parametrize(("remove_padding", "v1"), [(True, False), (False, False), (True, True), (False, True)],
                         ids=["v0-rmpad", "v0-padded", "v1-rmpad", "v1-padded"])
@pytest.mark.parametrize("spec", SELECTORS)
def test_verl_loss_equals_ict_policy_loss(spec: str, remove_padding: bool, v1: bool) -> None:
    loss, grad, metrics = verl_loss(spec, remove_padding, v1=v1)
    expected, expected_grad, selection = reference_loss(spec)
    assert torch.allclose(loss, expected, atol=1e-6, rtol=0), (float(loss), float(expected))
    assert torch.allclose(grad, expected_grad, atol=1e-6, rtol=0)
    fraction = float(selection.mask.sum()) / float(make_batch()["response_mask"].sum())
    assert metrics["actor/ict_selected_fraction"].values == pytest.approx([fraction])
    # ict's paper diagnostics reach verl's metrics (ict.core.diagnostics, on the same selection)
    for key in ("above_beta_fraction", "above_beta_fraction_selected", "selected_token_prob_mean",
                "all_token_prob_mean"):
        assert 0.0 <= metrics[f"actor/ict_{key}"].values[0] <= 1.0, key
    if spec.startswith("kl_cov"):  # the penalty is applied: the loss differs from the plain one
        assert selection.kl_penalty is not None and bool(selection.kl_penalty.any())
        plain, _, _ = reference_loss("all")
        assert not torch.allclose(expected, plain, atol=1e-4)
    if spec.startswith(("ict", "entropy")):  # a real subset was selected
        assert 0 < selection.mask.sum() < make_batch()["response_mask"].sum()


@pytest.mark.parametrize("v1", [False, True], ids=["v0", "v1"])
def test_the_method_defaults_reach_verl(v1: bool) -> None:
    """ict's defaults (the paper's recipe) inside verl: with ``ict_selector`` left at "ict" and
    no ``ict_*`` loss options, the loss is Sparse-GRPO (seq-mean-token-mean whatever verl's
    ``loss_agg_mode``) and the first 10 training steps (the actor's LR-scheduler step) update
    every response token; from step 10 the mask is the per-response top 10%."""
    defaults = ict_verl.ICTPolicyLossConfig(loss_mode="ict")
    assert defaults.ict_selector == "ict"
    unset = {"ict_aggregation": None, "ict_full_token_warmup_steps": None}
    response_tokens = float(make_batch()["response_mask"].sum())
    for step in (0, 9):
        loss, grad, metrics = verl_loss("ict", True, step=step, v1=v1, **unset)
        expected, expected_grad, _ = reference_loss("all", "seq-mean-token-mean")
        assert torch.allclose(loss, expected, atol=1e-6, rtol=0), step
        assert torch.allclose(grad, expected_grad, atol=1e-6, rtol=0)
        assert metrics["actor/ict_selected_fraction"].values == pytest.approx([1.0])
    loss, grad, metrics = verl_loss("ict", True, step=10, v1=v1, **unset)
    expected, expected_grad, selection = reference_loss("ict:scope=sequence,ratio=0.1", "seq-mean-token-mean")
    assert torch.allclose(loss, expected, atol=1e-6, rtol=0)
    assert torch.allclose(grad, expected_grad, atol=1e-6, rtol=0)
    lengths = make_batch()["response_mask"].sum(-1)
    assert int(selection.mask.sum()) == sum(math.ceil(round(0.1 * int(n), 9)) for n in lengths if n > 0)
    assert metrics["actor/ict_selected_fraction"].values == pytest.approx([float(selection.mask.sum()) / response_tokens])


@pytest.mark.parametrize("spec", ["random:ratio=0.3", "clip_cov:ratio=0.2,cov_low=-100,cov_high=100"])
def test_randomised_selectors_use_the_documented_seed(spec: str, monkeypatch) -> None:
    """The n-th selection of training step s (the LR scheduler's step count, which a resume
    restores) draws with selection_seed(ict_seed, s, n): a resumed process draws what the
    original run drew at that step, and no two steps share a draw."""
    monkeypatch.setitem(ict_verl._selections, "step", -1)  # the counter of verl_selection, in place
    monkeypatch.setitem(ict_verl._selections, "index", 0)
    for step, index in [(5, 0), (5, 1), (6, 0)]:
        seed = ict_verl.selection_seed(7, step, index)
        loss, grad, _ = verl_loss(spec, True, ict_seed=7, step=step, v1=True)
        expected, expected_grad, selection = reference_loss(spec, generator=torch.Generator().manual_seed(seed))
        assert torch.allclose(loss, expected, atol=1e-6, rtol=0), (step, index)
        assert torch.allclose(grad, expected_grad, atol=1e-6, rtol=0)
        assert 0 < selection.mask.sum() < make_batch()["response_mask"].sum()
    # a resumed process (fresh module state) at step 5 draws step 5's first mask again
    monkeypatch.setitem(ict_verl._selections, "step", -1)  # the counter of verl_selection, in place
    monkeypatch.setitem(ict_verl._selections, "index", 0)
    loss, _, _ = verl_loss(spec, True, ict_seed=7, step=5)
    expected, _, _ = reference_loss(spec, generator=torch.Generator().manual_seed(ict_verl.selection_seed(7, 5, 0)))
    assert torch.allclose(loss, expected, atol=1e-6, rtol=0)
    seeds = {ict_verl.selection_seed(7, step, index) for step in range(50) for index in range(50)}
    assert len(seeds) == 2500


def test_a_selectors_own_seed_takes_ict_seeds_place(monkeypatch) -> None:
    """ict_selector='random:seed=11' draws with selection_seed(11, s, n), whatever ict_seed is (the
    option was ignored: every seed=N drew ict_seed's mask), as TRL's and ict train's do."""
    monkeypatch.setitem(ict_verl._selections, "step", -1)
    monkeypatch.setitem(ict_verl._selections, "index", 0)
    loss, grad, _ = verl_loss("random:ratio=0.3,seed=11", True, ict_seed=7, step=5, v1=True)
    expected, expected_grad, _ = reference_loss(
        "random:ratio=0.3", generator=torch.Generator().manual_seed(ict_verl.selection_seed(11, 5, 0)))
    assert torch.allclose(loss, expected, atol=1e-6, rtol=0)
    assert torch.allclose(grad, expected_grad, atol=1e-6, rtol=0)
    other, _, _ = reference_loss(
        "random:ratio=0.3", generator=torch.Generator().manual_seed(ict_verl.selection_seed(7, 5, 0)))
    assert not torch.allclose(other, expected, atol=1e-6, rtol=0)


def test_selection_seed_is_ict_trains_seed_of_the_update() -> None:
    """selection_seed(seed, step, n) is the selection seed ict train gives the n-th update of a
    step (ict.training.step: step_seed(seed, step, 2) + 1000 * n), so a verl run and ict train
    draw alike."""
    from ict.core.seeding import step_seed

    for seed, step, index in [(7, 5, 0), (7, 5, 3), (0, 12, 1)]:
        assert ict_verl.selection_seed(seed, step, index) == step_seed(seed, step, 2) + 1000 * index


def test_pad_to_length_strips_the_packed_padding() -> None:
    """verl's pad_to_length appends tokens to the packed sequence (bucket 16: 43 -> 48 rows)."""
    for spec in ["ict:reference=group_mean,ratio=0.3", "entropy:ratio=0.2"]:
        loss, grad, _ = verl_loss(spec, True, pad_to_length=16, v1=True)
        expected, expected_grad, _ = reference_loss(spec)
        assert torch.allclose(loss, expected, atol=1e-6, rtol=0)
        assert torch.allclose(grad, expected_grad, atol=1e-6, rtol=0)


# verl's multi-turn layout (its agent loop's docstring): tool results are in the response and the
# attention mask, 0 in response_mask. Row 0 is cut by the length cap (RESPONSE) inside a tool
# result, its last model token at 1; row 4 has a tool result between model tokens and reaches the cap
TOOL_RESULTS = {0: range(2, 6), 4: range(1, 3)}


def verl_scores(spec: str, remove_padding: bool, v1: bool, tool_results: dict[int, range] | None):
    """The [B, T] statistics ict's hook computed from verl's logits (verl's own data path)."""
    batch, model = make_batch(tool_results=tool_results), ToyLM()
    data, fsdp = micro_batch(batch, remove_padding, v1=v1), engine()
    inputs, output_args = fsdp.prepare_model_inputs(data)
    fsdp.prepare_model_outputs(model(**inputs), output_args, data, partial(ppo_loss, config=actor_config(spec)))
    stats = ict_verl._pending[-1].stats
    ict_verl._pending.clear()
    return stats


@pytest.mark.parametrize("tool_results", [TOOL_RESULTS, None], ids=["tool-results", "single-turn"])
@pytest.mark.parametrize(("remove_padding", "v1"), [(True, False), (False, False), (True, True), (False, True)],
                         ids=["v0-rmpad", "v0-padded", "v1-rmpad", "v1-padded"])
def test_absorbing_reference_reads_a_row_cut_in_a_tool_result_as_truncated(remove_padding, v1, tool_results) -> None:
    """ICT's default reference (group_mean_absorbing) and its leave-one-out twin in verl's
    multi-turn layout: a row cut by the length cap inside a tool result is truncated (no point
    mass after its end), which verl's response_mask alone (0 on tool results) does not say. Its
    finished flag comes from verl's response (attention mask / nested lengths, tool results
    included) against the cap. Against float64 loops with finished = the response ends before
    the cap; a single-turn batch is scored as before (finished = ends before the last column)."""
    from stats_references import loop_reference_variant

    batch = make_batch(tool_results=tool_results)
    logits = ToyLM()(batch["input_ids"], batch["position_ids"]).logits[:, PROMPT - 1: PROMPT + RESPONSE - 1].detach()
    mask, group_ids = batch["response_mask"].bool(), torch.tensor([0, 0, 0, 1, 1, 1])
    finished = [length < RESPONSE for length in RESPONSE_LENGTHS]  # the whole response, tool results included
    for reference in ("group_mean_absorbing", "group_mean_loo_absorbing"):
        stats = verl_scores(f"ict:reference={reference},ratio=0.3", remove_padding, v1, tool_results)
        expected = loop_reference_variant(logits, batch["responses"], mask, group_ids, TEMPERATURE, True,
                                          reference == "group_mean_loo_absorbing", finished=finished)
        scores = stats.js_scores[reference].double()
        torch.testing.assert_close(scores, expected[:, :scores.shape[1]], atol=1e-6, rtol=0)
        by_mask = loop_reference_variant(logits, batch["responses"], mask, group_ids, TEMPERATURE, True,
                                         reference == "group_mean_loo_absorbing")  # finished read from response_mask
        if tool_results is None:
            torch.testing.assert_close(by_mask, expected, atol=0, rtol=0)
        else:  # row 0's last model token would enter rows 1-2's references at 2-4
            assert float((by_mask - expected).abs().max()) > 1e-2


@pytest.mark.parametrize("loss_agg_mode", list(AGGREGATIONS))
def test_aggregations_denominator_and_dual_clip(loss_agg_mode: str) -> None:
    """Each against the reference with the same setting, on selections where the setting changes the
    loss (ICT's 30% at group_mean has no token the dual clip bounds: GRPO's every token has)."""
    for spec, policy, reference in [("ict:reference=group_mean,ratio=0.3", {}, {}),
                                    ("ict:reference=group_mean,ratio=0.3", {"ict_denominator": "all"},
                                     {"denominator": "all"}),
                                    ("all", {"ict_dual_clip": True}, {"clip_ratio_c": 3.0})]:
        loss, grad, _ = verl_loss(spec, True, loss_agg_mode, **policy)
        expected, expected_grad, _ = reference_loss(spec, loss_agg_mode, **reference)
        assert torch.allclose(loss, expected, atol=1e-6, rtol=0), (policy, float(loss), float(expected))
        assert torch.allclose(grad, expected_grad, atol=1e-6, rtol=0)
        if policy and not (policy.get("ict_denominator") and loss_agg_mode == "seq-mean-token-sum-norm"):
            # it matters (the denominator does not to Dr. GRPO's constant one)
            assert abs(float(loss) - float(reference_loss(spec, loss_agg_mode)[0])) > 1e-3, policy


@pytest.mark.parametrize("loss_agg_mode", list(AGGREGATIONS))
def test_every_token_is_verls_vanilla_loss_with_its_scale_factor_and_dual_clip(loss_agg_mode: str) -> None:
    """The "all" selector with ict_dual_clip against verl's own vanilla loss (its dual clip at
    clip_ratio_c=3, which bounds some tokens here) under the same actor config, loss_scale_factor=16
    (Dr. GRPO's constant, not the padded width 6): the same loss and gradient."""
    from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig

    common = dict(strategy="fsdp", rollout_n=GROUP, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=6,
                  clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=3.0, loss_agg_mode=loss_agg_mode,
                  loss_scale_factor=16)
    ours = FSDPActorConfig(**common, policy_loss=ict_verl.ICTPolicyLossConfig(
        loss_mode="ict", ict_selector="all", ict_aggregation="loss_agg_mode", ict_full_token_warmup_steps=0,
        ict_dual_clip=True))
    vanilla = FSDPActorConfig(**common, policy_loss=VerlPolicyLossConfig(loss_mode="vanilla"))
    (loss, grad, _), (expected, expected_grad, _) = (config_loss(config, ToyLM()) for config in (ours, vanilla))
    assert abs(float(loss - expected)) <= 1e-6, (float(loss), float(expected))
    torch.testing.assert_close(grad, expected_grad, atol=1e-6, rtol=0)
    unbounded, _, _ = verl_loss("all", True, loss_agg_mode)  # without the dual clip: another loss
    assert abs(float(unbounded) - float(loss)) > 1e-3


class HalfPrecisionLM(ToyLM):
    """ToyLM with bf16 logits (a bf16 model without flash-attn's cross-entropy: verl's log-probs bf16)."""

    def forward(self, input_ids, position_ids, **unused):
        output = super().forward(input_ids, position_ids)
        output.logits = output.logits.to(torch.bfloat16)
        return output


def test_bf16_log_probs_leave_the_advantages_in_float32_as_verls_vanilla_loss_does() -> None:
    """GRPO's selection and token-mean against verl's own vanilla loss (its dual clip out of reach),
    both on verl's bf16 log-probs: equal. ict's loss cast the float32 advantages to the log-probs'
    bf16 (0.2% off: 4e-4 in the loss, 1.2e-4 in the gradient)."""
    from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig

    vanilla = FSDPActorConfig(strategy="fsdp", rollout_n=GROUP, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=6,
                              clip_ratio_low=0.2, clip_ratio_high=0.28, clip_ratio_c=1e9, loss_agg_mode="token-mean",
                              policy_loss=VerlPolicyLossConfig(loss_mode="vanilla"))
    (loss, grad, dtype), (expected, expected_grad, expected_dtype) = (
        config_loss(config, HalfPrecisionLM()) for config in (actor_config("all"), vanilla))
    assert dtype == expected_dtype == torch.bfloat16
    assert abs(float(loss - expected)) <= 1e-7, (float(loss), float(expected))
    torch.testing.assert_close(grad, expected_grad, atol=1e-7, rtol=0)


def test_unset_clip_ratios_fall_back_to_clip_ratio_as_in_verl() -> None:
    """verl's vanilla loss reads clip_ratio_low / clip_ratio_high, each falling back to clip_ratio
    when null: so does ict's clip range."""
    def clip_range(**clip: float | None) -> tuple[float, float]:
        config = FSDPActorConfig(strategy="fsdp", rollout_n=GROUP, ppo_mini_batch_size=2,
                                 ppo_micro_batch_size_per_gpu=6, clip_ratio=0.15, **clip,
                                 policy_loss=ict_verl.ICTPolicyLossConfig(loss_mode="ict", ict_selector="all"))
        loss_config = ict_verl.loss_config_of(config, "token-mean")
        return loss_config.clip_low, loss_config.clip_high

    assert clip_range(clip_ratio_low=None, clip_ratio_high=None) == (0.15, 0.15)
    assert clip_range(clip_ratio_low=None, clip_ratio_high=0.3) == (0.15, 0.3)
    assert clip_range(clip_ratio_low=0.1, clip_ratio_high=None) == (0.1, 0.15)


def test_registered_in_verl_and_other_losses_untouched() -> None:
    assert get_policy_loss_fn("ict") is ict_verl.compute_policy_loss_ict
    batch, model = make_batch(), ToyLM()
    data, fsdp = micro_batch(batch, True), engine()
    inputs, output_args = fsdp.prepare_model_inputs(data)
    config = FSDPActorConfig(strategy="fsdp", rollout_n=GROUP, ppo_micro_batch_size_per_gpu=6)
    fsdp.prepare_model_outputs(model(**inputs), output_args, data, partial(ppo_loss, config=config))
    assert ict_verl._pending == []  # vanilla loss: the hook did nothing


def _policy_log_probs(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """ToyLM's log-probs of the response tokens at the rollout temperature, ``[B, T]``."""
    logits = ToyLM()(batch["input_ids"], batch["position_ids"]).logits[:, PROMPT - 1: PROMPT + RESPONSE - 1].detach()
    return torch.log_softmax(logits / TEMPERATURE, -1).gather(-1, batch["responses"][..., None])[..., 0]


def _near_policy_batch() -> dict[str, torch.Tensor]:
    """make_batch with old log-probs within 0.1 of the policy's own: every ratio inside the clip
    range (0.8, 1.28)."""
    batch = make_batch()
    noise = (torch.rand(RESPONSE_SHAPE, generator=torch.Generator().manual_seed(3)) - 0.5) * 0.2
    batch["old_log_probs"] = (_policy_log_probs(batch) + noise) * batch["response_mask"]
    return batch


RESPONSE_SHAPE = (len(RESPONSE_LENGTHS), RESPONSE)


@pytest.mark.parametrize("loss_agg_mode", list(AGGREGATIONS))
def test_kl_cov_and_clip_cov_equal_verls_own_losses_where_documented(loss_agg_mode: str, monkeypatch) -> None:
    """Against verl's own ``kl_cov`` and ``clip_cov`` policy losses (core_algos) under the same
    actor config, with old log-probs inside the clip range (verl's KL-Cov has no ratio clip, the
    documented difference): KL-Cov at ratio 0.1 (the 2 of 25 tokens of largest covariance get
    1.0 |log-ratio|), and Clip-Cov with a band above the 3rd largest covariance (its 2 tokens both
    cut, whatever the draw) and ict_denominator=all (verl keeps cut tokens in its normaliser): the
    same loss and gradient, each apart from the plain loss."""
    import verl_helpers
    from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig

    from ict.core.selectors import token_covariance

    monkeypatch.setattr(verl_helpers, "make_batch", lambda *args, **kwargs: _near_policy_batch())
    batch = _near_policy_batch()
    mask = batch["response_mask"].bool()
    covariance = token_covariance(_policy_log_probs(batch), batch["advantages"], mask)[mask].sort(descending=True).values
    low = float(covariance[1] + covariance[2]) / 2  # 2 tokens above, as many as max(1, int(0.1 * 25))
    assert int(mask.sum()) == 25 and float(covariance[2]) < low < float(covariance[1])

    def actor(policy_loss: object) -> FSDPActorConfig:
        return FSDPActorConfig(strategy="fsdp", rollout_n=GROUP, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=6,
                               clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode=loss_agg_mode,
                               policy_loss=policy_loss)

    def ours(spec: str, **policy: object) -> FSDPActorConfig:
        return actor(ict_verl.ICTPolicyLossConfig(loss_mode="ict", ict_selector=spec, ict_aggregation="loss_agg_mode",
                                                  ict_full_token_warmup_steps=0, **policy))

    plain, _, _ = config_loss(ours("all"), ToyLM())
    for mine, theirs in [
        (ours("kl_cov:ratio=0.1,kl_coef=1.0"), VerlPolicyLossConfig(loss_mode="kl_cov", kl_cov_ratio=0.1, ppo_kl_coef=1.0)),
        (ours(f"clip_cov:ratio=0.1,cov_low={low},cov_high=100", ict_denominator="all"),
         VerlPolicyLossConfig(loss_mode="clip_cov", clip_cov_ratio=0.1, clip_cov_lb=low, clip_cov_ub=100.0))]:
        (loss, grad, _), (expected, expected_grad, _) = config_loss(mine, ToyLM()), config_loss(actor(theirs), ToyLM())
        assert abs(float(loss - expected)) <= 1e-6, (theirs.loss_mode, float(loss), float(expected))
        torch.testing.assert_close(grad, expected_grad, atol=1e-6, rtol=0)
        assert abs(float(plain - expected)) > 1e-4, theirs.loss_mode


class Bf16LM(ToyLM):
    """ToyLM's logits times 20, in bfloat16 (the dtype of verl's FSDP mixed-precision logits)."""

    def forward(self, input_ids, position_ids, **unused):
        return SimpleNamespace(logits=(super().forward(input_ids, position_ids).logits * 20).to(torch.bfloat16))


def _verl_outputs(config: FSDPActorConfig, batch: dict[str, torch.Tensor]):
    """verl's path on ``batch`` under ``config`` with Bf16LM: the micro-batch and the model outputs."""
    data, fsdp, model = micro_batch(batch, True), engine(), Bf16LM()
    inputs, output_args = fsdp.prepare_model_inputs(data)
    loss_function = partial(ppo_loss, config=config)
    return data, fsdp.prepare_model_outputs(model(**inputs), output_args, data, loss_function), loss_function


def test_the_selection_reads_the_log_probs_of_verls_loss_with_bf16_logits() -> None:
    """verl scales bf16 logits by the temperature in bf16 and its loss reads those log-probs (its
    old_log_probs come from the same path); ict's statistics divide in float32 (up to 0.36 nats
    apart here). On-policy (old_log_probs = verl's own), verl's ratio is 1 on every token: verl's
    pg_clipfrac is 0, and clip_cov at ratio 1 with a band holding every covariance cuts every
    token (none is clipped already). With ict's float32 log-probs the selection saw ratios of
    0.64 to 1.35 and kept 4 of the 25 tokens as already clipped (selected fraction 0.16)."""
    from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig
    from verl.workers.utils.padding import no_padding_2_padding

    vanilla = FSDPActorConfig(strategy="fsdp", rollout_n=GROUP, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=6,
                              clip_ratio_low=0.2, clip_ratio_high=0.28,
                              policy_loss=VerlPolicyLossConfig(loss_mode="vanilla"))
    batch = make_batch()
    data, output, _ = _verl_outputs(vanilla, batch)
    batch["old_log_probs"] = no_padding_2_padding(output["log_probs"], data).detach().float() * batch["response_mask"]
    data, output, loss_function = _verl_outputs(vanilla, batch)
    assert loss_function(model_output=output, data=data)[1]["actor/pg_clipfrac"].values == [0.0]
    config = actor_config("clip_cov:ratio=1.0,cov_low=-1e9,cov_high=1e9", ict_denominator="all")
    data, output, loss_function = _verl_outputs(config, batch)
    # the selection's log-probs: verl's, by verl's own response slicing, 0 outside the response
    expected = no_padding_2_padding(output["log_probs"], data).detach().float() * batch["response_mask"]
    assert torch.equal(ict_verl._pending[0].stats.log_probs, expected)
    assert loss_function(model_output=output, data=data)[1]["actor/ict_selected_fraction"].values == [0.0]

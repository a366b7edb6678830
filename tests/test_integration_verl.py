"""ict.integrations.verl inside verl 0.9's own data path, on CPU.

A tiny batch (2 prompts x 3 completions, left-padded prompts of different lengths, ragged
responses) goes through verl's ``DataProto.to_tensordict`` and ``left_right_2_no_padding``, verl's
FSDP engine's ``prepare_model_inputs`` / ``prepare_model_outputs`` (with and without remove-padding)
and verl's unchanged ``ppo_loss``, which fetches our loss with ``get_policy_loss_fn("ict")``. The
reference takes the logits of the *padded* batch directly (column ``P + t - 1`` predicts response
token ``t``), runs ``ict.core.selectors.select`` and ``ict.core.loss.policy_loss``: loss and gradient must
agree to 1e-6. The batch, the toy LM and both losses: tests/verl_helpers.py. Several micro-batches
and two ranks: tests/test_integration_verl_batches.py; verl's v1 trainer balancing and the example
launch script: tests/test_integration_verl_launch.py.
"""

from __future__ import annotations

import math
from functools import partial

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

from ict.core.errors import UsageError
from ict.core.stats import TokenStatistics

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


def test_a_group_scoped_ranking_refuses_a_mini_batch_of_partial_groups() -> None:
    """Rows 0, 1 of one prompt and 3, 4 of the other (actor.shuffle=True, or the v0 trainer's
    balance_batch): a scope=group ranking ranked each fragment as a group; it is refused in one
    line, as the group references already were."""
    rows = [0, 1, 3, 4]
    for spec in ("ict:reference=seq_mean,scope=group,ratio=0.3", "ict:reference=group_mean,ratio=0.3"):
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


def _micro_batch_metrics(selected_rows: list[int]) -> dict[str, float]:
    """compute_policy_loss_ict's metrics on a 2 x 4 micro-batch whose selection is the first token
    of ``selected_rows``."""
    from ict.core.selectors import Selection

    rows, width = 2, 4
    mask = torch.ones(rows, width, dtype=torch.bool)
    generator = torch.Generator().manual_seed(len(selected_rows))
    stats = TokenStatistics(-torch.rand(rows, width, generator=generator), torch.rand(rows, width, generator=generator),
                            torch.rand(rows, width, generator=generator),
                            {"group_mean_absorbing": torch.rand(rows, width, generator=generator)})
    chosen = torch.zeros(rows, width, dtype=torch.bool)
    chosen[selected_rows, 0] = True
    ict_verl._pending.append(ict_verl.MicroBatchSelection(Selection(chosen, None), stats, 1.0))
    log_prob = torch.full((rows, width), -1.0, requires_grad=True)
    loss, metrics = ict_verl.compute_policy_loss_ict(
        torch.full((rows, width), -1.2), log_prob, torch.tensor([[1.0], [-1.0]]).expand(rows, width), mask,
        "token-mean", actor_config("all"))
    if not selected_rows:
        assert float(loss) == 0.0
    return metrics


def test_a_micro_batch_without_selected_tokens_reports_every_metric_nan_where_undefined() -> None:
    """A micro-batch of the mini-batch with no selected token (its loss and gradient 0) reports the
    same keys as one with a selection: the selected tokens' means NaN, the fraction 0."""
    with_selection, without = _micro_batch_metrics([0, 1]), _micro_batch_metrics([])
    assert set(without) == set(with_selection)
    assert without["actor/ict_selected_fraction"] == 0.0
    for key in ("entropy_selected", "clip_fraction", "js_score_selected", "above_beta_fraction_selected"):
        assert math.isnan(without[f"actor/ict_{key}"]) and math.isfinite(with_selection[f"actor/ict_{key}"]), key


def test_two_ranks_of_two_micro_batches_aggregate_in_verl_when_one_selects_nothing() -> None:
    """verl 0.9 combines the loss's metrics as engine_workers does: per rank over its micro-batches
    (append_to_dict), then over the ranks (Metric.aggregate_dp, which refuses ranks holding different
    numbers of values). Rank 1's second micro-batch selects nothing; before, its undefined metrics were
    left out and aggregate_dp raised ValueError ([2, 1] values). The fraction is the unweighted mean
    of the four micro-batches' (1/4, 1/8, 1/4, 0)."""
    from verl.utils.metric.utils import AggregationType, Metric
    from verl.utils.py_functional import append_to_dict

    ranks = [[[0, 1], [0]], [[0, 1], []]]
    gathered: dict[str, list] = {}
    for micro_batches in ranks:
        merged: dict = {}
        for selected_rows in micro_batches:
            append_to_dict(merged, Metric.from_dict(_micro_batch_metrics(selected_rows), AggregationType.MEAN))
        for key, value in merged.items():
            gathered.setdefault(key, []).append(value)
    combined = {key: Metric.aggregate_dp(values) for key, values in gathered.items()}
    assert combined["actor/ict_selected_fraction"] == pytest.approx((0.25 + 0.125 + 0.25 + 0.0) / 4)
    assert math.isnan(combined["actor/ict_entropy_selected"])


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


def test_registered_in_verl_and_other_losses_untouched() -> None:
    assert get_policy_loss_fn("ict") is ict_verl.compute_policy_loss_ict
    batch, model = make_batch(), ToyLM()
    data, fsdp = micro_batch(batch, True), engine()
    inputs, output_args = fsdp.prepare_model_inputs(data)
    config = FSDPActorConfig(strategy="fsdp", rollout_n=GROUP, ppo_micro_batch_size_per_gpu=6)
    fsdp.prepare_model_outputs(model(**inputs), output_args, data, partial(ppo_loss, config=config))
    assert ict_verl._pending == []  # vanilla loss: the hook did nothing


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


def test_clip_cov_sees_the_actors_clip_range_and_the_diagnostics_their_advantages(monkeypatch) -> None:
    """The selection gets verl's (clip_ratio_low, clip_ratio_high) (Clip-Cov keeps the tokens the
    ratio clip already clips), and the reported share of selected tokens with a positive advantage
    is that of the selection (float64 from the batch's advantages)."""
    import ict.integrations.verl_selection as verl_selection

    monkeypatch.setitem(ict_verl._selections, "step", -1)  # this selection is step 0's first
    monkeypatch.setitem(ict_verl._selections, "index", 0)
    seen = []
    original = verl_selection.select
    monkeypatch.setattr(verl_selection, "select", lambda name, inputs, **options: (
        seen.append(inputs), original(name, inputs, **options))[1])
    _, _, metrics = verl_loss("clip_cov:ratio=0.2,cov_low=-100,cov_high=100", True)
    assert seen[-1].clip_range == (0.2, 0.28)
    batch = make_batch()
    _, _, selection = reference_loss("clip_cov:ratio=0.2,cov_low=-100,cov_high=100",
                                     generator=torch.Generator().manual_seed(ict_verl.selection_seed(0, 0, 0)))
    selected = selection.mask.bool()
    positive = (batch["advantages"][:, :selected.shape[1]].sum(-1) > 0)[:, None].expand_as(selected)
    expected = float(positive[selected].double().mean())
    assert 0.0 < expected < 1.0
    assert metrics["actor/ict_selected_positive_advantage_fraction"].values == pytest.approx([expected])


@pytest.mark.parametrize("spec", ["ict:ratio=0.3", "ict:reference=group_mean,ratio=0.3",
                                  "ict:reference=group_mean,metric=kl,ratio=0.3"])
def test_js_score_selected_is_the_js_to_icts_default_reference_as_in_ict_train(spec: str) -> None:
    """``actor/ict_js_score_selected`` means what ``ict train``'s ``js_score_selected`` means: the
    JS to ``group_mean_absorbing`` over the selected tokens, absent when the selector does not
    compute it; the selector's own other score is ``actor/ict_js_<key>_selected`` (before, the
    selector's first score took the name: the JS to the alive-only group mean, or a KL in nats).
    Expected values: float64 loops over the softmax at the rollout temperature (trl_helpers)."""
    from trl_helpers import absorbing_js_reference, group_mean_js_reference

    _, _, metrics = verl_loss(spec, True)
    _, _, selection = reference_loss(spec)
    batch = make_batch()
    logits = ToyLM()(batch["input_ids"], batch["position_ids"]).logits[:, PROMPT - 1: PROMPT + RESPONSE - 1]
    hidden, eye = logits.detach().double() / TEMPERATURE, torch.eye(logits.shape[-1], dtype=torch.float64)
    mask, groups = batch["response_mask"].bool(), torch.tensor([0, 0, 0, 1, 1, 1])
    selected = torch.zeros_like(mask)
    selected[:, :selection.mask.shape[1]] = selection.mask
    selected &= mask
    reported = {key for key in metrics if key.startswith("actor/ict_js_")}
    # the diagnostics of ICT's default score: only where the selector computes it
    assert ("actor/ict_jaccard_ict10" in metrics) == (spec == "ict:ratio=0.3")
    assert ("actor/ict_score_knee_share" in metrics) == (spec == "ict:ratio=0.3")
    if spec == "ict:ratio=0.3":
        expected = absorbing_js_reference(hidden, eye, mask, groups, batch["responses"])[selected].mean()
        assert reported == {"actor/ict_js_score_selected"}
        assert metrics["actor/ict_js_score_selected"].values == pytest.approx([float(expected)], rel=1e-5)
    elif "kl" in spec:
        assert reported == {"actor/ict_js_group_mean:kl_selected"}
    else:
        expected = group_mean_js_reference(hidden, eye, mask, groups)[selected].mean()
        assert reported == {"actor/ict_js_group_mean_selected"}
        assert metrics["actor/ict_js_group_mean_selected"].values == pytest.approx([float(expected)], rel=1e-5)


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

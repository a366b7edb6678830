"""The metrics ict.integrations.verl reports to verl 0.9, on CPU: a micro-batch that selects
nothing, verl's aggregation over micro-batches and ranks, Clip-Cov's clip range and the
advantages of its selection, and the JS score of the selected tokens against float64 loops.
The batch and the toy LM: tests/verl_helpers.py."""

from __future__ import annotations

import math

import pytest
import torch
from verl_helpers import (
    PROMPT,
    RESPONSE,
    TEMPERATURE,
    ToyLM,
    actor_config,
    ict_verl,
    make_batch,
    reference_loss,
    verl_loss,
)

from ict.core.stats import TokenStatistics


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

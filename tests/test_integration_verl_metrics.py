"""The metrics ict.integrations.verl reports to verl 0.9, on CPU: a micro-batch that selects
nothing, verl's aggregation over micro-batches and ranks, Clip-Cov's clip range and the
advantages of its selection, and the JS score of the selected tokens against float64 loops.
The batch and the toy LM: tests/verl_helpers.py."""

from __future__ import annotations

import math
from functools import partial

import pytest
import torch
from verl_helpers import (
    GROUP,
    PROMPT,
    RESPONSE,
    TEMPERATURE,
    UIDS,
    ToyLM,
    actor_config,
    ict_verl,
    make_batch,
    micro_batch,
    reference_loss,
    training_engine,
    tu,
    verl_loss,
)


def _verl_metrics(spec: str, micro_batch_size: int, group: object, rows: slice | list[int] = slice(None),
                  response_lengths: list[int] | None = None, v1: bool = False) -> dict:
    """The ``actor/ict_*`` metrics of this rank's ``rows`` through verl's own
    ``forward_backward_batch`` (micro-batches of ``micro_batch_size`` rows): verl's ``Metric`` of
    each key, one value per micro-batch."""
    from verl.workers.utils.losses import ppo_loss

    world = torch.distributed.get_world_size(group)
    data = micro_batch(make_batch(response_lengths=response_lengths), True, rows=rows, dp_size=world, v1=v1)
    if v1:
        data["loss_mask"] = data["response_mask"]  # v1's agent loop writes it
    tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro_batch_size)
    ict_verl._selections.update(step=-1, index=0)
    output = training_engine(ToyLM(), group, world).forward_backward_batch(
        data, partial(ppo_loss, config=actor_config(spec)))
    return {key: value for key, value in output["metrics"].items() if key.startswith("actor/ict_")}


def _expected_figures(spec: str, response_lengths: list[int] | None = None) -> dict[str, float]:
    """Token means of the whole mini-batch, float64 from the toy LM's softmax at the rollout
    temperature and the selection of ``reference_loss`` (independent of verl): the selected
    fraction (of the response tokens), and over the selected tokens their entropy, clip fraction
    (the clipped term active: ``clip(r) A < r A``, clip range (0.2, 0.28)) and probability."""
    _, _, selection = reference_loss(spec, response_lengths=response_lengths)
    batch, width = make_batch(response_lengths=response_lengths), selection.mask.shape[1]
    logits = ToyLM()(batch["input_ids"], batch["position_ids"]).logits[:, PROMPT - 1: PROMPT + width - 1]
    log_p = torch.log_softmax(logits.detach().double() / TEMPERATURE, dim=-1)
    entropy = -(log_p.exp() * log_p).sum(-1)
    token_log_p = log_p.gather(-1, batch["responses"][:, :width, None]).squeeze(-1)
    mask = batch["response_mask"][:, :width].bool()
    selected = selection.mask.bool() & mask
    ratio = (token_log_p - batch["old_log_probs"][:, :width].double()).exp()
    advantages = batch["advantages"][:, :width].double()
    clipped = ratio.clamp(0.8, 1.28) * advantages < ratio * advantages
    return {"selected_fraction": float(selected.sum() / mask.sum()),
            "entropy_selected": float(entropy[selected].mean()),
            "clip_fraction": float(clipped[selected].double().mean()),
            "selected_token_prob_mean": float(token_log_p.exp()[selected].mean()),
            "all_token_prob_mean": float(token_log_p.exp()[mask].mean())}


@pytest.mark.parametrize("spec", ["entropy:ratio=0.04", "ict:preset=batch,ratio=0.04", "entropy:ratio=0.1"])
def test_micro_batches_without_selected_tokens_leave_verls_figure_the_mini_batchs(spec, single_process_group) -> None:
    """A batch-ranked selection of 1 token (or 1 and 2 in the two micro-batches, ratio 0.1) over
    verl's two micro-batches of 3 rows: verl's unweighted mean of the micro-batches' values
    (Metric.aggregate_dp) is the mini-batch's token mean (float64 reference), as with one
    micro-batch. Before, the micro-batch without a selected token reported NaN and verl's figure
    was NaN (entropy_selected [nan, 2.18] -> nan); with both selecting, the unweighted mean of
    the two micro-batches' means."""
    from verl.utils.metric.utils import Metric

    split = {key: Metric.aggregate_dp([value]) for key, value in
             _verl_metrics(spec, 3, single_process_group).items()}
    whole = {key: Metric.aggregate_dp([value]) for key, value in
             _verl_metrics(spec, 6, single_process_group).items()}
    for key, expected in _expected_figures(spec).items():
        assert split[f"actor/ict_{key}"] == pytest.approx(expected, rel=1e-5), key
    assert set(split) == set(whole)
    for key, value in whole.items():
        assert split[key] == pytest.approx(value, rel=1e-6, abs=1e-12), key


def _rank_metrics_main(rank: int, world: int, store: str, out: str) -> None:
    """One data-parallel rank of verl v1 (its whole group, 3 micro-batches of one row): its
    ``actor/ict_*`` Metrics, saved per rank."""
    import verl.utils.seqlen_balancing as balancing
    import verl.workers.engine.fsdp.transformer_impl as fsdp_impl

    torch.set_num_threads(1)
    fsdp_impl.get_device_id = fsdp_impl.get_device_name = balancing.get_device_name = lambda: "cpu"
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        rows = ict_verl.group_balanced_order(UIDS, [6] * len(UIDS), world, GROUP)[rank * 3:(rank + 1) * 3]
        metrics = _verl_metrics("entropy:ratio=0.1", 1, torch.distributed.group.WORLD, rows=rows, v1=True)
        torch.save({key: value.values for key, value in metrics.items()}, f"{out}.{rank}")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_of_three_micro_batches_report_the_mini_batchs_token_means(tmp_path) -> None:
    """2 gloo processes of 3 one-row micro-batches each, 3 of the 6 rows holding a selected token:
    verl combines each rank's values (Metric.aggregate_dp: the mean over ranks, then over
    micro-batches) into the whole mini-batch's token means (float64 reference). Before, 3 of the 6
    values of the selected tokens' means were NaN, and so was verl's figure."""
    from verl.utils.metric.utils import AggregationType, Metric

    out = tmp_path / "metrics.pt"
    torch.multiprocessing.spawn(_rank_metrics_main, args=(2, str(tmp_path / "store"), str(out)), nprocs=2)
    ranks = [torch.load(f"{out}.{rank}") for rank in range(2)]
    assert set(ranks[0]) == set(ranks[1])
    gathered = {key: [Metric(AggregationType.MEAN) for _ in ranks] for key in ranks[0]}
    for key, metrics in gathered.items():
        for metric, rank in zip(metrics, ranks):
            metric.extend(rank[key])
    combined = {key: Metric.aggregate_dp(metrics) for key, metrics in gathered.items()}
    for key, expected in _expected_figures("entropy:ratio=0.1").items():
        assert combined[f"actor/ict_{key}"] == pytest.approx(expected, rel=1e-5), key
    assert all(math.isfinite(value) for key, value in combined.items() if key != "actor/ict_selected_high_low_entropy_ratio")


def test_a_mini_batch_without_selected_tokens_leaves_their_means_out_on_every_micro_batch(
        single_process_group, monkeypatch) -> None:
    """A selection of no token in the whole mini-batch (two micro-batches): the selected tokens'
    means are left out on every micro-batch (none NaN: over the mini-batches of a step verl
    averages those that define them; equal counts on every rank for aggregate_dp), the fraction
    is 0 and the all-token figures are reported."""
    import ict.integrations.verl_selection as verl_selection
    from ict.core.selectors import Selection

    monkeypatch.setattr(verl_selection, "select", lambda name, inputs, **options: Selection(
        torch.zeros_like(inputs.response_mask), None))
    metrics = _verl_metrics("entropy:ratio=0.1", 3, single_process_group)
    assert metrics["actor/ict_selected_fraction"].values == [0.0, 0.0]
    for key in ("entropy_selected", "clip_fraction", "above_beta_fraction_selected", "selected_token_prob_mean"):
        assert f"actor/ict_{key}" not in metrics, key
    assert metrics["actor/ict_all_token_prob_mean"].values == pytest.approx(
        [_expected_figures("entropy:ratio=0.1")["all_token_prob_mean"]] * 2, rel=1e-5)
    assert all(len(value.values) == 2 and not any(math.isnan(v) for v in value.values) for value in metrics.values())


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

"""ict.integrations.verl when verl's own ``forward_backward_batch`` cuts a rank's mini-batch into
micro-batches (fixed size or a token budget; one gloo process): the scoring pass selects once on the
whole mini-batch and the accumulated gradient is the whole mini-batch's loss's; with one
micro-batch, the training forward is the only one. Two gloo ranks of different response widths
(verl v1's whole-group balancing) update like the whole batch. The batch and references:
tests/verl_helpers.py."""

from __future__ import annotations

from functools import partial

import pytest
import torch
from verl_helpers import (
    GROUP,
    PROMPT_LENGTHS,
    UIDS,
    FSDPActorConfig,
    ToyLM,
    actor_config,
    engine,
    ict_verl,
    make_batch,
    micro_batch,
    ppo_loss,
    reference_loss,
    training_engine,
    tu,
    verl_loss,
)


@pytest.mark.parametrize(("spec", "dynamic"), [
    ("ict:reference=group_mean,ratio=0.3", False), ("entropy:ratio=0.2", False),
    ("kl_cov:ratio=0.2,kl_coef=1.0", False), ("stapo:tau_p=0.1,quantile=0.75", True),
    ("ict:reference=seq_mean,ratio=0.3", True)])
def test_several_micro_batches_select_on_the_whole_mini_batch(spec, dynamic, single_process_group) -> None:
    """verl's own forward_backward_batch cuts the mini-batch into micro-batches (2 of 3 rows, or by
    a token budget): the scoring pass selects once on all 6 rows, and the accumulated gradient is
    that of the whole mini-batch's loss."""
    batch, model, config = make_batch(), ToyLM(), actor_config(spec)
    data, fsdp = micro_batch(batch, True), engine()
    fsdp.module, fsdp._autocast_dtype, fsdp.scaler = model, torch.float32, None
    fsdp.get_data_parallel_group = lambda: single_process_group
    fsdp.get_data_parallel_size = lambda: 1
    fsdp.engine_config.use_no_sync_for_gradient_accumulation = False
    if dynamic:
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=22)
    else:
        tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=3)
    forwards = []
    model.register_forward_hook(lambda module, args, output: forwards.append(1))
    ict_verl._selections.update(step=-1, index=0)
    fsdp.forward_backward_batch(data, partial(ppo_loss, config=config))
    generator = torch.Generator().manual_seed(ict_verl.selection_seed(0, 0, 0))
    _, expected_grad, _ = reference_loss(spec, generator=generator)
    assert torch.allclose(model.token.grad, expected_grad, atol=1e-6, rtol=0)
    assert len(forwards) >= 4 and len(forwards) % 2 == 0  # scoring pass + training pass


@pytest.mark.parametrize("v1", [False, True])
@pytest.mark.parametrize("spec", ["random:ratio=0.3", "random:ratio=0.3,scope=group",
                                  "clip_cov:ratio=0.2,cov_low=-100,cov_high=100",
                                  "ict:reference=seq_mean,ratio=0.3,unit=token_id"])
def test_dynamic_batch_sizes_draw_the_selection_of_the_rows_in_order(spec, v1, single_process_group) -> None:
    """Under use_dynamic_bsz verl's forward_backward_batch reorders the rows into micro-batches by
    token count ([1, 2, 5] and [0, 3, 4] here): a selection drawn from the generator (random,
    clip_cov, the tie keys of a ranking: one per token id with unit=token_id) is the one of the
    mini-batch in its own row order, with its groups, as with fixed-size micro-batches or ict
    train, not of the reordered rows (0.18 off in the gradient for random, before)."""
    from verl.workers.engine.utils import prepare_micro_batches

    batch, model, config = make_batch(), ToyLM(), actor_config(spec)
    data, fsdp = micro_batch(batch, True, v1=v1), training_engine(model, single_process_group)
    if v1:
        data["loss_mask"] = data["response_mask"]  # v1's agent loop writes it
    tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=22)
    _, rows = prepare_micro_batches(data, dp_group=single_process_group)
    assert rows == [[1, 2, 5], [0, 3, 4]]  # verl's token-balanced split reorders the rows
    ict_verl._selections.update(step=-1, index=0)
    fsdp.forward_backward_batch(data, partial(ppo_loss, config=config))
    assert "ict_row" not in data.keys()  # the scoring pass's row tag is removed again
    generator = torch.Generator().manual_seed(ict_verl.selection_seed(0, 0, 0))
    _, expected_grad, _ = reference_loss(spec, generator=generator)
    assert torch.allclose(model.token.grad, expected_grad, atol=1e-6, rtol=0)


TWO_RANK_SPECS = [("ict:ratio=0.3", "token-mean"), ("ict:reference=group_mean,ratio=0.3", "token-mean"),
                  ("stapo:tau_p=0.1,quantile=0.75", "token-mean"), ("random:ratio=0.3", "token-mean"),
                  ("all", "seq-mean-token-sum-norm")]  # Dr. GRPO's L: the widest rank's, 5, on both
# responses of prompt p0 are at most 5 tokens long, those of p1 at most 4: under v1 each rank's
# micro-batch is padded to its own longest response, so the two ranks hold [3, 5] and [3, 4]
TWO_RANK_LENGTHS = [5, 3, 5, 1, 4, 4]


def v1_rank_rows(world: int) -> list[list[int]]:
    """Each rank's rows in verl v1's dispatch after ict's whole-group balancing (verl's
    ``get_seqlen_balanced_partitions`` over the groups' ``calculate_workload``)."""
    seq_lens = [p + r for p, r in zip(PROMPT_LENGTHS, TWO_RANK_LENGTHS)]
    order = ict_verl.group_balanced_order(UIDS, seq_lens, world, GROUP)
    share = len(order) // world
    return [order[rank * share:(rank + 1) * share] for rank in range(world)]


def _rank_main(rank: int, world: int, store: str, out: str) -> None:
    """One data-parallel rank: its rows of the v1-balanced batch (one whole group, its own
    response width), verl's loss per spec, gradients averaged over the ranks as FSDP does."""
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        rows, grads = v1_rank_rows(world)[rank], []
        for spec, loss_agg_mode in TWO_RANK_SPECS:
            _, grad, _ = verl_loss(spec, True, loss_agg_mode, rows=rows, dp_group=torch.distributed.group.WORLD,
                                   response_lengths=TWO_RANK_LENGTHS, v1=True)
            torch.distributed.all_reduce(grad)
            grads.append(grad / world)
        if rank == 0:
            torch.save(grads, out)
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_of_different_widths_update_like_the_whole_batch(tmp_path) -> None:
    """2 gloo processes with response widths 5 and 4: the scores are padded to the all-reduced
    widest response before the gather, and the FSDP-averaged gradient is the whole mini-batch's,
    for a group_mean, a batch-quantile and a random selection (both ranks draw the same mask), and
    for seq-mean-token-sum-norm without loss_scale_factor (L = 5 on both ranks)."""
    widths = sorted(max(TWO_RANK_LENGTHS[row] for row in rows) for rows in v1_rank_rows(2))
    assert widths == [4, 5]
    out = tmp_path / "grads.pt"
    torch.multiprocessing.spawn(_rank_main, args=(2, str(tmp_path / "store"), str(out)), nprocs=2)
    for index, ((spec, loss_agg_mode), grad) in enumerate(zip(TWO_RANK_SPECS, torch.load(out), strict=True)):
        generator = torch.Generator().manual_seed(ict_verl.selection_seed(0, 0, index))
        _, expected_grad, _ = reference_loss(spec, loss_agg_mode, generator=generator, response_lengths=TWO_RANK_LENGTHS)
        assert torch.allclose(grad, expected_grad, atol=1e-6, rtol=0), spec


@pytest.mark.parametrize(("size", "force_group_size"), [(6, 1), (3, 2)])
def test_one_micro_batch_per_mini_batch_has_no_scoring_pass(size, force_group_size, single_process_group) -> None:
    """When the rank's mini-batch share is one micro-batch (ppo_micro_batch_size_per_gpu = 6 of 6
    rows, or 3 with verl's force_group_size 2: micro-batches of size x force_group_size rows) the
    statistics come from the training forward itself: one forward, no scoring pass, and the
    gradient of the whole mini-batch's loss."""
    batch, model, config = make_batch(), ToyLM(), actor_config("ict:reference=group_mean,ratio=0.3")
    data, fsdp = micro_batch(batch, True), engine()
    fsdp.module, fsdp._autocast_dtype, fsdp.scaler = model, torch.float32, None
    fsdp.get_data_parallel_group = lambda: single_process_group
    fsdp.get_data_parallel_size = lambda: 1
    fsdp.engine_config.use_no_sync_for_gradient_accumulation = False
    tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=size, force_group_size=force_group_size)
    forwards = []
    model.register_forward_hook(lambda module, args, output: forwards.append(1))
    fsdp.forward_backward_batch(data, partial(ppo_loss, config=config))
    _, expected_grad, _ = reference_loss("ict:reference=group_mean,ratio=0.3")
    assert torch.allclose(model.token.grad, expected_grad, atol=1e-6, rtol=0)
    assert len(forwards) == 1


@pytest.mark.parametrize("micro_batch_size", [3, 6])
@pytest.mark.parametrize("spec", ["all", "ict:reference=group_mean,ratio=0.3"])
def test_dr_grpos_length_is_the_mini_batchs_width_however_v1_splits_it(spec, micro_batch_size,
                                                                        single_process_group) -> None:
    """seq-mean-token-sum-norm without loss_scale_factor, v1's nested rows (each micro-batch padded
    to its own longest response: widths 5 and 4 for micro-batches of 3): L is the mini-batch's
    widest response, 5, as in one micro-batch of 6. It was each micro-batch's own width (as verl's
    vanilla loss does), so the second micro-batch's rows weighed 5/4 more and the update depended
    on ppo_micro_batch_size_per_gpu (2.8e-3 off in the gradient)."""
    batch, model = make_batch(response_lengths=TWO_RANK_LENGTHS), ToyLM()
    config = actor_config(spec, "seq-mean-token-sum-norm")
    data, fsdp = micro_batch(batch, True, v1=True), engine()
    data["loss_mask"] = data["response_mask"]  # v1's agent loop writes it (verl's forward_backward_batch reads it)
    fsdp.module, fsdp._autocast_dtype, fsdp.scaler = model, torch.float32, None
    fsdp.get_data_parallel_group = lambda: single_process_group
    fsdp.get_data_parallel_size = lambda: 1
    fsdp.engine_config.use_no_sync_for_gradient_accumulation = False
    tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=micro_batch_size)
    ict_verl._selections.update(step=-1, index=0)
    fsdp.forward_backward_batch(data, partial(ppo_loss, config=config))
    # the reference pads the responses to the longest of all six, 5: its L
    _, expected_grad, _ = reference_loss(spec, "seq-mean-token-sum-norm", response_lengths=TWO_RANK_LENGTHS)
    assert torch.allclose(model.token.grad, expected_grad, atol=1e-6, rtol=0)


def _dynamic_rank_main(rank: int, world: int, store: str, out: str) -> None:
    """One data-parallel rank of verl v1 (its whole group, its own response width) training on
    micro-batches cut by verl's token budget, which reorders its rows; gradients averaged over the
    ranks as FSDP does. Saves each rank's micro-batch rows and rank 0 the gradient."""
    import verl.utils.seqlen_balancing as balancing
    import verl.workers.engine.fsdp.transformer_impl as fsdp_impl
    from verl.workers.engine.utils import prepare_micro_batches

    torch.set_num_threads(1)
    fsdp_impl.get_device_id = fsdp_impl.get_device_name = balancing.get_device_name = lambda: "cpu"
    torch.distributed.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    try:
        group, model = torch.distributed.group.WORLD, ToyLM()
        batch = make_batch(response_lengths=TWO_RANK_LENGTHS)
        data = micro_batch(batch, True, rows=v1_rank_rows(world)[rank], dp_size=world, v1=True)
        data["loss_mask"] = data["response_mask"]  # v1's agent loop writes it
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=12)
        split = prepare_micro_batches(data, dp_group=group)[1]
        ict_verl._selections.update(step=-1, index=0)
        training_engine(model, group, world).forward_backward_batch(
            data, partial(ppo_loss, config=actor_config("random:ratio=0.3")))
        torch.distributed.all_reduce(model.token.grad)
        torch.save((split, model.token.grad / world), f"{out}.{rank}")
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_two_ranks_with_dynamic_batch_sizes_draw_the_selection_of_the_rows_in_order(tmp_path) -> None:
    """2 gloo processes, v1's whole-group shares, use_dynamic_bsz: each rank's rows go back to
    their share's order before the gather, so the random mask is the whole mini-batch's in order
    and the FSDP-averaged gradient is its loss's (a budget of 12 tokens: 3 micro-batches a rank)."""
    out = tmp_path / "dynamic.pt"
    torch.multiprocessing.spawn(_dynamic_rank_main, args=(2, str(tmp_path / "store"), str(out)), nprocs=2)
    (split0, grad), (split1, _) = torch.load(f"{out}.0"), torch.load(f"{out}.1")
    assert (split0, split1) == ([[1], [2], [0]], [[0], [2], [1]])  # verl's split reorders both shares
    generator = torch.Generator().manual_seed(ict_verl.selection_seed(0, 0, 0))
    _, expected_grad, _ = reference_loss("random:ratio=0.3", generator=generator, response_lengths=TWO_RANK_LENGTHS)
    assert torch.allclose(grad, expected_grad, atol=1e-6, rtol=0)


@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean"])
def test_verls_entropy_bonus_and_kl_loss_are_its_own_under_ict(loss_agg_mode, single_process_group) -> None:
    """verl's ppo_loss adds its entropy bonus (entropy_coeff) and KL loss (use_kl_loss) over all
    response tokens with its loss_agg_mode, whatever ict selects (the module docstring): their part
    of the gradient (with them minus without) is the one of verl's own vanilla loss, here with an
    entropy:ratio=0.2 selection over two token-budget micro-batches."""
    from verl.workers.config import PolicyLossConfig as VerlPolicyLossConfig

    def regularisers_grad(policy: object) -> torch.Tensor:
        grads = []
        for on in (True, False):
            config = FSDPActorConfig(
                strategy="fsdp", rollout_n=GROUP, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=6,
                clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode=loss_agg_mode, policy_loss=policy,
                entropy_coeff=0.05 if on else 0.0, use_kl_loss=on, kl_loss_coef=0.3, kl_loss_type="low_var_kl")
            model = ToyLM()
            data = micro_batch(make_batch(), True)
            data["ref_log_prob"] = data["old_log_probs"] - 0.3
            tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=22)
            ict_verl._selections.update(step=-1, index=0)
            training_engine(model, single_process_group).forward_backward_batch(data, partial(ppo_loss, config=config))
            grads.append(model.token.grad.clone())
        return grads[0] - grads[1]

    expected = regularisers_grad(VerlPolicyLossConfig(loss_mode="vanilla"))
    ours = regularisers_grad(ict_verl.ICTPolicyLossConfig(loss_mode="ict", ict_selector="entropy:ratio=0.2",
                                                          ict_full_token_warmup_steps=0))
    assert float(expected.abs().max()) > 0.1
    torch.testing.assert_close(ours, expected, atol=1e-6, rtol=0)


def _scores(parts: int, rows: int = 4, length: int = 6) -> list:
    """``parts`` micro-batches of random statistics, 2 rows per uid; some rows end early."""
    from ict.core.stats import TokenStatistics

    generator, scores = torch.Generator().manual_seed(parts), []
    for part in range(parts):
        def draw() -> torch.Tensor:
            return torch.rand(rows, length, generator=generator)
        mask = torch.ones(rows, length, dtype=torch.bool)
        mask[0, length // 2:] = mask[2, 1:] = False
        scores.append(ict_verl.MicroBatchScores(
            stats=TokenStatistics(-draw(), draw(), draw(), {}), response_mask=mask,
            advantages=torch.randn(rows, length, generator=generator), old_log_probs=-draw(),
            token_ids=torch.randint(0, 50, (rows, length), generator=generator),
            uids=[f"p{part}_{row // 2}" for row in range(rows)], global_batch_size=None))
    return scores


@pytest.mark.parametrize(("loss_agg_mode", "denominator"), [
    ("token-mean", "selected"), ("token-mean", "all"), ("seq-mean-token-mean", "selected"),
    ("seq-mean-token-mean", "all"), ("seq-mean-token-sum-norm", "selected")])
def test_the_micro_batches_loss_scales_cost_one_read_back_a_mini_batch(loss_agg_mode, denominator) -> None:
    """Each micro-batch's scale ``dp * w_micro / W`` (ict.core.loss.aggregation_weight of its rows
    and of the mini-batch's), with the device read back as often for 1, 2 or 4 micro-batches: each
    ``w_micro`` was read back alone, one sync a micro-batch."""
    import sys
    from pathlib import Path

    from ict.core.loss import PolicyLossConfig, aggregation_weight

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from sync_census import SyncCensus
    finally:
        sys.path.pop(0)
    config = actor_config("entropy:ratio=0.3", loss_agg_mode, ict_aggregation="loss_agg_mode",
                          ict_denominator=denominator)
    loss_config = PolicyLossConfig(aggregation=ict_verl.AGGREGATIONS[loss_agg_mode], denominator=denominator)
    syncs = set()
    for parts in (1, 2, 4):
        scores, census = _scores(parts), SyncCensus()
        with census:
            results = ict_verl.select_mini_batch(scores, config)
        syncs.add(census.total())
        weights = [aggregation_weight(result.selection.mask, part.response_mask, loss_config)
                   for result, part in zip(results, scores)]
        assert [result.scale for result in results] == pytest.approx([weight / sum(weights) for weight in weights])
        if loss_agg_mode == "seq-mean-token-mean" and denominator == "selected" and parts == 4:
            assert len(set(weights)) > 1  # rows without a selected token count apart
    assert len(syncs) == 1, syncs


@pytest.mark.parametrize("denominator", ["selected", "all"])
@pytest.mark.parametrize("loss_agg_mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"])
def test_the_micro_batches_loss_scales_and_shares_are_the_hand_counts(loss_agg_mode, denominator) -> None:
    """Each of 4 micro-batches' scale ``w_micro / W`` and token shares ``(K n_sel / N_sel,
    K n / N)`` from its selected and response tokens counted by hand: ``w`` the selected tokens
    (token-mean; response tokens with ``"all"``), the rows with a selected token
    (seq-mean-token-mean; all rows with ``"all"``), the rows (seq-mean-token-sum-norm)."""
    config = actor_config("entropy:ratio=0.3", loss_agg_mode, ict_aggregation="loss_agg_mode",
                          ict_denominator=denominator)
    scores = _scores(4)
    for part, score in enumerate(scores):  # micro-batches of 18, 17, 16 and 15 response tokens
        score.response_mask[3, 6 - part:] = False
    results = ict_verl.select_mini_batch(scores, config)
    counts = []  # per micro-batch: selected tokens, response tokens, rows with a selected token, rows
    for result, part in zip(results, scores):
        picked = [[bool(s and m) for s, m in zip(srow, mrow)]
                  for srow, mrow in zip(result.selection.mask.tolist(), part.response_mask.tolist())]
        counts.append((sum(map(sum, picked)), sum(map(sum, part.response_mask.tolist())),
                       sum(map(any, picked)), len(picked)))
    index = {("token-mean", "selected"): 0, ("token-mean", "all"): 1, ("seq-mean-token-mean", "selected"): 2,
             ("seq-mean-token-mean", "all"): 3}.get((loss_agg_mode, denominator), 3)
    weights = [count[index] for count in counts]
    assert [result.scale for result in results] == [weight / sum(weights) for weight in weights]
    selected, response = sum(count[0] for count in counts), sum(count[1] for count in counts)
    assert [result.shares for result in results] == [(4 * count[0] / selected, 4 * count[1] / response)
                                                      for count in counts]
    assert (len(set(weights)) > 1) == (index != 3)  # each count but the rows tells the parts apart


@pytest.mark.parametrize("v1", [False, True], ids=["v0", "v1"])
@pytest.mark.parametrize("lengths", [[6, 3, 5, 1, 6, 4], [1, 2, 3, 4, 5, 5], [6] * 6])
def test_the_response_row_map_is_verls_slicing_without_a_read_back_a_row(v1: bool, lengths: list[int]) -> None:
    """ict's ``[B, T]`` map of each response position to its packed logits row, and the rows that
    end before ``T``, equal verl's own ``no_padding_2_padding`` applied to the row numbers (what
    ict called, reading back three values a row: 20 reads for 6 rows); now at most one read, the
    width of a nested batch."""
    import sys
    from pathlib import Path

    from verl.workers.utils.padding import no_padding_2_padding

    from ict.integrations.verl_selection import response_rows

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    try:
        from sync_census import SyncCensus
    finally:
        sys.path.pop(0)
    data = micro_batch(make_batch(response_lengths=lengths), True, v1=v1)
    packed = sum(PROMPT_LENGTHS) + sum(lengths)
    shifted = no_padding_2_padding(torch.arange(1, packed + 1), data)
    census = SyncCensus()
    with census:
        index, finished = response_rows(data, packed, torch.device("cpu"))
    assert torch.equal(index, (shifted - 1).clamp(min=0))
    assert torch.equal(finished, (shifted > 0).sum(dim=1) < shifted.shape[1])
    assert finished.tolist() == [length < shifted.shape[1] for length in lengths]
    assert census.total() == int(v1)

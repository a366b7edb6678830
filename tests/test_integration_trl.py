"""ICTGRPOTrainer (ict.integrations.trl) through TRL's real GRPOTrainer on a tiny random model, run
by a driver script in one process and under ``accelerate launch`` with 2 CPU processes (gloo), and
the integration's parts (selection draws, group ids, logged metrics, the fused head's log Z). Checked
against the references of tests/trl_helpers.py: the mask is the top ceil(ratio * N) of the scores of
all processes, the group_mean JS equals a float64 full-softmax computation from the captured hidden
states (groups spanning processes), groups are TRL's G completions (advantages sum to 0 per group),
and `random` draws the same mask on both ranks. In-process training (full fine-tuning, LoRA, bf16,
tool masks, refusals) is tests/test_integration_trl_trainer.py; the loss (every loss_type,
Clip-Cov) is tests/test_integration_trl_loss.py, KL-Cov's penalty tests/test_integration_trl_kl_cov.py."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from trl_helpers import (
    DRIVER,
    free_port,
    group_mean_js_reference,
    run_driver,
    top_fraction_reference,
)

pytest.importorskip("trl")


def _check(out_dir: Path, processes: int, ratio: float, score_key: str | None) -> None:
    dumps = sorted(out_dir.glob("rank*_call*.pt"))
    calls = len(dumps) // processes
    assert calls == 2 and len(dumps) == 2 * processes
    for call in range(calls):
        records = [torch.load(out_dir / f"rank{rank}_call{call}.pt") for rank in range(processes)]
        first = records[0]
        mask, selected = first["mask"].bool(), first["selected"]
        assert mask.shape[0] == 4 * processes  # the micro-batches of all processes, gathered
        for record in records[1:]:  # every process ranks the same gathered population
            assert torch.equal(record["selected"], selected)
            assert torch.equal(record["mask"], first["mask"])
        starts = sorted(record["own"] for record in records)
        assert starts == [(4 * rank, 4 * rank + 4) for rank in range(processes)]
        total = int(mask.sum())
        assert int(selected.sum()) == math.ceil(round(ratio * total, 9))
        if score_key == "group_mean":
            group_ids = first["group_ids"]
            # TRL's own grouping: G = 4 consecutive global rows, whose advantages sum to 0
            assert sorted(torch.bincount(group_ids).tolist()) == [4] * (len(group_ids) // 4)
            for group in group_ids.unique():
                assert abs(float(first["advantages"][group_ids == group].sum())) < 1e-4
            scores = torch.zeros(mask.shape, dtype=torch.float64)
            for record in records:  # each process scored its own rows from its own hidden states
                own = slice(*record["own"])
                # the driver keeps TRL's default bf16 mixed precision: the scores are of the head's bf16 logits
                reference = group_mean_js_reference(record["hidden"], record["weight"], mask[own], group_ids[own],
                                                     bf16=True)
                torch.testing.assert_close(record["js"]["group_mean"][own].double(), reference, atol=1e-5, rtol=1e-4)
                scores[own] = reference
        else:
            scores = first["entropy"]
        assert torch.equal(selected, top_fraction_reference(scores, mask, ratio))
    log = torch.load(out_dir / "log.pt")
    assert len(log["fractions"]) == 2
    assert all(ratio <= fraction < ratio + 1 / 8 for fraction in log["fractions"])  # ceil over >= 8 tokens
    assert any("loss" in entry for entry in log["log"])


CASES = [("ict:reference=group_mean,ratio=0.1,scope=batch", 0.1, "group_mean"),
         ("entropy:ratio=0.2", 0.2, None)]


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_trl_one_process(tiny_model_dir, tmp_path):
    run_driver([sys.executable, str(DRIVER), str(tiny_model_dir), str(tmp_path), ";".join(case[0] for case in CASES)],
         tmp_path)
    for index, (_, ratio, score) in enumerate(CASES):
        _check(tmp_path / str(index), 1, ratio, score)


def _check_random_equal_on_ranks(out_dir: Path, ratio: float) -> None:
    """`random` under 2 processes: the same gathered mask on both ranks, ceil(ratio * N) tokens,
    a different draw on each step."""
    calls = [[torch.load(out_dir / f"rank{rank}_call{call}.pt") for rank in range(2)] for call in range(2)]
    for first, second in calls:
        assert first["mask"].shape[0] == 8 and torch.equal(first["selected"], second["selected"])
        assert int(first["selected"].sum()) == math.ceil(round(ratio * int(first["mask"].sum()), 9))
        assert first["own"] == (0, 4) and second["own"] == (4, 8)
    assert not torch.equal(calls[0][0]["selected"], calls[1][0]["selected"])


def _check_straddling_groups(out_dir: Path) -> None:
    """G=4 over 2 rows per process: the group spans both processes, each process receives the
    other's 2 rows of the group (hidden states, ids, mask, finished flag; never its own rows back)
    and its JS equals the float64 reference over the whole group."""
    before = [{}, {}]
    for call in range(2):
        records = [torch.load(out_dir / f"rank{rank}_call{call}.pt") for rank in range(2)]
        width = max(record["hidden"].shape[1] for record in records)
        for rank, record in enumerate(records):
            received = record["received"].get("group_rows", 0) - before[rank].get("group_rows", 0)
            assert received == 2 * width * (record["hidden"].shape[2] * 4 + 8 + 8) + 2 * 8
            before[rank] = record["received"]
        hidden = torch.cat([torch.nn.functional.pad(record["hidden"], (0, 0, 0, width - record["hidden"].shape[1]))
                            for record in records])
        first = records[0]
        mask, group_ids = first["mask"].bool(), first["group_ids"]
        assert group_ids.tolist() == [0, 0, 0, 0] and mask.shape == (4, width)
        reference = group_mean_js_reference(hidden, first["weight"], mask, group_ids, bf16=True)
        for record in records:
            torch.testing.assert_close(record["js"]["group_mean"].double(), reference, atol=1e-5, rtol=1e-4)
            assert torch.equal(record["selected"], first["selected"])


def _own_rows(records: list[dict], key: str) -> torch.Tensor:
    """``key`` of each process's own rows of the population, processes in order."""
    return torch.cat([record[key][slice(*record["own"])] for record in records])


def _check_grpo_loss_is_the_whole_batchs(out_dir: Path) -> None:
    """loss_type grpo, selection_denominator 'ours', 2 processes whose rows with a selected token
    differ in number: DDP's mean of the two processes' losses equals Sparse-GRPO over the whole
    batch in float64, ``-(1/S) sum A_b`` over the S rows with a selected token (one update per
    generation: ratio 1, per-token loss -A). Each process had used its own B/S: a process with
    fewer selected rows weighed more."""
    unequal = False
    for call in range(2):
        records = [torch.load(out_dir / f"rank{rank}_call{call}.pt") for rank in range(2)]
        losses = [float(torch.load(out_dir / f"rank{rank}_loss{call}.pt")) for rank in range(2)]
        selected = _own_rows(records, "selected").bool() & _own_rows(records, "mask").bool()
        rows = selected.any(-1)
        unequal |= int(rows[:4].sum()) != int(rows[4:].sum())
        reference = -_own_rows(records, "advantages").double()[rows].sum() / rows.sum()
        assert sum(losses) / 2 == pytest.approx(float(reference), abs=1e-6)
    assert unequal, "the processes had as many rows with a selected token: the test cannot tell"


def _check_dapo_loss_is_the_whole_batchs(out_dir: Path) -> None:
    """loss_type dapo, selection_denominator 'ours', a batch-ranked selection over 2 processes whose
    shares of selected tokens differ: DDP's mean of the two processes' losses equals the token mean
    of -A over the whole batch's selected tokens in float64 (ratio 1). Each process's own N / N_sel
    weighed the process with the smaller share more."""
    unequal = False
    for call in range(2):
        records = [torch.load(out_dir / f"rank{rank}_call{call}.pt") for rank in range(2)]
        losses = [float(torch.load(out_dir / f"rank{rank}_loss{call}.pt")) for rank in range(2)]
        selected = _own_rows(records, "selected").bool() & _own_rows(records, "mask").bool()
        mask = _own_rows(records, "mask").bool()
        shares = [float(selected[rows].sum() / mask[rows].sum()) for rows in (slice(0, 4), slice(4, 8))]
        unequal |= abs(shares[0] - shares[1]) > 1e-3
        advantages = _own_rows(records, "advantages").double()[:, None].expand(mask.shape)
        reference = -advantages[selected].sum() / selected.sum()
        assert sum(losses) / 2 == pytest.approx(float(reference), abs=1e-6)
    assert unequal, "the processes had equal shares of selected tokens: the test cannot tell"


def _check_group_ranking_sees_whole_groups(out_dir: Path, ratio: float) -> None:
    """scope=group with G=4 over 2 rows per process: the ranking population is each whole group
    (the rows of both processes, gathered): ceil(ratio * n_g) tokens of each group, its highest
    scores, equal on both processes (a process's own 2 rows had been ranked as a group)."""
    for call in range(2):
        records = [torch.load(out_dir / f"rank{rank}_call{call}.pt") for rank in range(2)]
        first = records[0]
        mask, selected, scores = first["mask"].bool(), first["selected"].bool(), first["js"]["seq_mean"]
        assert mask.shape[0] == 4 and torch.equal(records[1]["selected"], first["selected"])
        for group in first["group_ids"].unique():
            rows = first["group_ids"] == group
            tokens = mask & rows[:, None]
            assert int((selected & tokens).sum()) == math.ceil(round(ratio * int(tokens.sum()), 9))
            assert float(scores[selected & tokens].min()) >= float(scores[tokens & ~selected].max())


def _check_metrics_are_of_both_processes(out_dir: Path) -> None:
    """A local population (scope=group, groups on one process): the logged ict/* metrics are of
    both processes' rows, float64 from the dumped entropies and masks (they had been rank 0's)."""
    log = [entry for entry in torch.load(out_dir / "log.pt")["log"] if "ict/selected_fraction" in entry]
    assert len(log) == 2
    differs = False
    for call, entry in enumerate(log):
        records = [torch.load(out_dir / f"rank{rank}_call{call}.pt") for rank in range(2)]
        assert [record["mask"].shape[0] for record in records] == [4, 4]  # local, not gathered
        mask = _own_rows(records, "mask").bool()
        selected = _own_rows(records, "selected").bool() & mask
        entropy = _own_rows(records, "entropy").double()
        expected = {"ict/selected_fraction": float(selected.sum() / mask.sum()),
                    "ict/entropy_selected": float(entropy[selected].mean()),
                    "ict/entropy_unselected": float(entropy[mask & ~selected].mean())}
        for key, value in expected.items():
            assert entry[key] == pytest.approx(value, abs=1e-6), key
        rank0 = records[0]["selected"].bool() & records[0]["mask"].bool()
        differs |= abs(float(rank0.sum() / records[0]["mask"].sum()) - expected["ict/selected_fraction"]) > 1e-3
    assert differs, "rank 0's fraction equals both processes': the test cannot tell"


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_trl_two_processes(tiny_model_dir, tmp_path):
    """One `accelerate launch` of 2 CPU processes (gloo), five runs: ICT group_mean (groups on one
    process; its dapo loss is the whole batch's), `random` (equal masks on both ranks), ICT with
    groups spanning the processes, ICT scope=group with loss_type grpo (the loss and the ict/*
    metrics of the whole batch), ICT scope=group with groups spanning the processes (ranked whole)."""
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    if accelerate is None:
        pytest.skip("accelerate CLI not installed next to this Python")
    runs = ("ict:reference=group_mean,ratio=0.1,scope=batch;random:ratio=0.2;"
            "ict:reference=group_mean,ratio=0.25,scope=batch@2;ict:reference=group_mean,ratio=0.1,scope=group@4@grpo;"
            "ict:reference=seq_mean,ratio=0.25,scope=group@2")
    # accelerate 1.15's `launch --cpu --num_processes 2` starts ONE process; `--multi_gpu` with
    # ACCELERATE_USE_CPU=1 starts two CPU processes (gloo), as verified by the gathered shapes below.
    run_driver([accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                "--main_process_port", str(free_port()), "--mixed_precision", "no", "--dynamo_backend", "no",
                str(DRIVER), str(tiny_model_dir), str(tmp_path), runs], tmp_path, ACCELERATE_USE_CPU="1")
    _check(tmp_path / "0", 2, 0.1, "group_mean")
    _check_random_equal_on_ranks(tmp_path / "1", 0.2)
    _check_straddling_groups(tmp_path / "2")
    _check_grpo_loss_is_the_whole_batchs(tmp_path / "3")
    _check_metrics_are_of_both_processes(tmp_path / "3")
    _check_dapo_loss_is_the_whole_batchs(tmp_path / "0")
    _check_group_ranking_sees_whole_groups(tmp_path / "4", 0.25)



def test_selection_generator_is_shared_and_resumable():
    """Same (seed, step, call) -> same draws (every process, after a resume); any change -> others."""
    from ict.integrations.trl import selection_generator

    def draw(*key):
        return torch.rand(8, generator=selection_generator(*key, device=torch.device("cpu")))

    assert torch.equal(draw(0, 5, 1, "train"), draw(0, 5, 1, "train"))
    for other in [(1, 5, 1, "train"), (0, 6, 1, "train"), (0, 5, 2, "train"), (0, 5, 1, "eval")]:
        assert not torch.equal(draw(0, 5, 1, "train"), draw(*other))


def test_group_ids_follow_trls_process_slices():
    """Process r's rows are TRL's global rows [r * B, (r + 1) * B) (its process_slice) and a group
    is G consecutive global rows (its rewards.view(-1, G)): a group may span processes."""
    from ict.integrations.trl import group_ids_of_rows

    processes, local_rows, generations = 3, 4, 6
    groups_of_global_rows = torch.arange(processes * local_rows).view(-1, generations)
    expected = torch.zeros(processes * local_rows, dtype=torch.long)
    for group, rows in enumerate(groups_of_global_rows):
        expected[rows] = group
    for process in range(processes):
        own = expected[process * local_rows:(process + 1) * local_rows]
        assert torch.equal(group_ids_of_rows(process, local_rows, generations, torch.device("cpu")), own)
    assert group_ids_of_rows(1, 4, 6, torch.device("cpu")).tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize("processes", [1, 2])
def test_logged_selection_metrics_are_the_batchs_means(processes):
    """ict/selected_fraction = N_sel / N and ict/entropy_selected / _unselected = the mean entropy
    over the selected / other response tokens; with 2 processes and a local population they are
    the means over both processes' tokens (the sums are reduced, not the means averaged)."""
    from collections import defaultdict

    from ict.core.loss import masked_sums
    from ict.integrations.trl import ICTGRPOTrainer

    generator = torch.Generator().manual_seed(5)
    entropy = [torch.rand(3, 5, generator=generator, dtype=torch.float64) * 4 for _ in range(2)]
    mask = [torch.arange(5)[None, :] < torch.tensor(lengths)[:, None] for lengths in ([5, 2, 4], [1, 5, 3])]
    selected = [(torch.rand(3, 5, generator=generator) < 0.3) & m for m in mask]
    selected[0][0, 0] = selected[1][1, 4] = True  # a selected token in each, even by chance of the draw
    other = masked_sums([(selected[1], mask[1]), (entropy[1], selected[1]), (entropy[1], mask[1] & ~selected[1])])
    trainer = SimpleNamespace(
        model=SimpleNamespace(training=True), _metrics=defaultdict(lambda: defaultdict(list)),
        in_full_token_warmup=lambda: False, _ict_selection_sums={},
        accelerator=SimpleNamespace(num_processes=processes, reduce=lambda sums, reduction: sums + other))
    ICTGRPOTrainer._log_selection(trainer, entropy[0], mask[0], selected[0], True)
    ICTGRPOTrainer._selection_metrics(trainer, "train")
    used = range(processes)
    tokens = sum(int(mask[p].sum()) for p in used)
    chosen = sum(int(selected[p].sum()) for p in used)
    chosen_entropy = sum(float(entropy[p][selected[p]].sum()) for p in used)
    other_entropy = sum(float(entropy[p][mask[p] & ~selected[p]].sum()) for p in used)
    metrics = trainer._metrics["train"]
    assert metrics["ict/selected_fraction"] == [pytest.approx(chosen / tokens, rel=1e-12)]
    assert metrics["ict/entropy_selected"] == [pytest.approx(chosen_entropy / chosen, rel=1e-12)]
    assert metrics["ict/entropy_unselected"] == [pytest.approx(other_entropy / (tokens - chosen), rel=1e-12)]
    assert metrics["ict/full_token_warmup"] == [0.0]


def test_logged_selection_metrics_are_token_means_over_the_micro_batches_of_a_log(tiny_model_dir, tmp_path):
    """Under gradient accumulation TRL logs the mean of each metric's per-micro-batch values; the
    ict/ selection metrics are token means over every micro-batch since the last log, as ict
    train's (before, a micro-batch of 3 one-token rows weighed as much as one of 3 x 8 tokens:
    0.417 for N_sel / N = 13/27). Expected values: numpy over the two micro-batches' tokens."""
    import numpy as np
    from trl_helpers import build_loss_trainer

    trainer = build_loss_trainer(tiny_model_dir, tmp_path)
    entropy = [torch.full((3, 8), 2.0, dtype=torch.float64), torch.full((3, 1), 0.5, dtype=torch.float64)]
    entropy[0][:, :4] = 3.0
    mask = [torch.ones(3, 8, dtype=torch.bool), torch.ones(3, 1, dtype=torch.bool)]
    selected = [torch.arange(8).expand(3, 8) < 4, torch.tensor([[True], [False], [False]])]
    for values, response, chosen in zip(entropy, mask, selected):
        trainer._log_selection(values, response, chosen, True)
    trainer.log({})
    logged = trainer.state.log_history[-1]
    tokens = np.concatenate([values[response].numpy() for values, response in zip(entropy, mask)])
    chosen = np.concatenate([chosen[response].numpy() for chosen, response in zip(selected, mask)])
    assert logged["ict/selected_fraction"] == pytest.approx(chosen.mean(), rel=1e-12)  # 13 / 27
    assert logged["ict/entropy_selected"] == pytest.approx(tokens[chosen].mean(), rel=1e-12)
    assert logged["ict/entropy_unselected"] == pytest.approx(tokens[~chosen].mean(), rel=1e-12)
    assert logged["ict/full_token_warmup"] == 0.0
    trainer.log({})  # the sums start again after a log
    assert "ict/selected_fraction" not in trainer.state.log_history[-1]
    trainer.model.eval()  # evaluation's own sums, logged by TRL with the eval_ prefix
    trainer._log_selection(entropy[1], mask[1], selected[1], True)
    trainer.log({})
    assert trainer.state.log_history[-1]["eval_ict/selected_fraction"] == pytest.approx(1 / 3, rel=1e-12)


def test_selection_draws_are_keyed_by_mode_step_and_call():
    """The trainer's generator for its n-th selection of a global step is selection_generator(seed,
    step, n, mode), mode "train" or "eval" (an evaluation never replays a training draw); the
    count restarts at each step and mode; a selector's own seed replaces args.seed."""
    from ict.integrations.trl import ICTGRPOTrainer, selection_generator

    def draws(generator):
        return torch.rand(6, generator=generator)

    trainer = SimpleNamespace(model=SimpleNamespace(training=True), state=SimpleNamespace(global_step=4),
                              _call_key=None, _call_index=0, selector_options={}, args=SimpleNamespace(seed=11))
    cpu = torch.device("cpu")
    expected = [(11, 4, 0, "train"), (11, 4, 1, "train"), (11, 4, 0, "eval"), (11, 5, 0, "eval"), (3, 5, 1, "eval")]
    for index, key in enumerate(expected):
        if index == 2:
            trainer.model.training = False
        if index == 3:
            trainer.state.global_step = 5
        if index == 4:
            trainer.selector_options = {"seed": 3}
        generator = ICTGRPOTrainer._generator(trainer, cpu)
        assert torch.equal(draws(generator), draws(selection_generator(*key, device=cpu))), key


def test_evaluation_groups_are_num_generations_eval_rows(monkeypatch):
    """The group tags of a generated batch follow TRL's grouping of its advantages: num_generations
    rows per prompt in training, num_generations_eval in evaluation (process 1 of 2, 6 rows)."""
    from trl import GRPOTrainer

    from ict.integrations.trl import GROUP_KEY, ICTGRPOTrainer

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions",
                        lambda self, inputs: {"completion_ids": torch.zeros(6, 3, dtype=torch.long)})
    trainer = object.__new__(ICTGRPOTrainer)
    trainer.num_generations, trainer.num_generations_eval = 4, 3
    trainer.accelerator = SimpleNamespace(process_index=1)
    for training, expected in [(True, [1, 1, 2, 2, 2, 2]), (False, [2, 2, 2, 3, 3, 3])]:
        trainer.model = SimpleNamespace(training=training)
        assert ICTGRPOTrainer._generate_and_score_completions(trainer, None)[GROUP_KEY].tolist() == expected


def test_evaluation_scores_whole_groups_of_num_generations_eval_rows():
    """A group reference needs each row's whole group: with 2 processes of 2 rows, an evaluation's
    groups (num_generations_eval 4) span both processes, so the rows of this process's groups are
    fetched from the other one before scoring, although the training groups (num_generations 2)
    would each fit in one process."""
    from ict.core.stats import TokenStatistics
    from ict.integrations.trl import GROUP_KEY, ICTGRPOTrainer

    exchanged = []

    def rows_of_own_groups(group_ids, tensors):
        exchanged.append(group_ids.tolist())
        return tensors, group_ids

    def statistics(hidden, ids, response, group_ids, finished, head=None):
        zeros = torch.zeros(ids.shape)
        return TokenStatistics(zeros, zeros, zeros, {"group_mean": zeros})

    ids = torch.tensor([[5, 2], [6, 7]])
    trainer = SimpleNamespace(
        _loss_inputs={"completion_ids": ids, "completion_mask": torch.ones(2, 2, dtype=torch.long),
                      "advantages": torch.zeros(2), GROUP_KEY: torch.tensor([0, 0])},
        _needs_groups=lambda: True, js_references=("group_mean",), population="token",
        num_generations=2, num_generations_eval=4, model=SimpleNamespace(training=True),
        accelerator=SimpleNamespace(num_processes=2, process_index=0), _generator=lambda device: None,
        loss_type="dapo", epsilon_low=0.2, epsilon_high=0.2, _tokenizer=SimpleNamespace(pad_token_id=0), eos_token_ids=[2],
        _rows_of_own_groups=rows_of_own_groups, _statistics=statistics, _head_statistics=lambda length: None)
    hidden, response = torch.zeros(2, 2, 3), torch.ones(2, 2, dtype=torch.bool)
    for training, fetched in [(True, []), (False, [[0, 0]])]:
        trainer.model.training = training
        exchanged.clear()
        ICTGRPOTrainer._population(trainer, hidden, response)
        assert exchanged == fetched, training


class ChunkedLogProbFunction(torch.autograd.Function):
    """Stand-in for TRL 1.16's fused-head autograd function (its node is named
    ChunkedLogProbFunctionBackward): saves (hidden, weight, bias, targets, log_z, entropy)."""

    @staticmethod
    def forward(ctx, log_probs, log_z):
        ctx.save_for_backward(log_probs, log_probs, log_probs, log_probs, log_z, log_z)
        return log_probs.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad, None


def test_fused_head_normalisers_read_both_layouts_of_log_z():
    """log Z saved for every position ([B * L], the torch path) or only for the label positions
    (the Triton path scores the valid ones): both give [B, L] with 0 outside the labels; no
    fused head node, or a log Z of another size, gives None."""
    from ict.integrations.trl import fused_head_normalisers

    mask = torch.tensor([[True, True, False], [False, True, True]])
    log_z = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    expected = torch.tensor([[1.0, 2.0, 0.0], [0.0, 5.0, 6.0]])
    base = torch.zeros(2, 3, requires_grad=True)
    for saved in (log_z.flatten(), log_z[mask]):
        log_probs = ChunkedLogProbFunction.apply(base * 1.0, saved)[:, :] * 1.0  # a few nodes below the output
        output = SimpleNamespace(log_probs=log_probs, label_mask=mask)
        assert torch.equal(fused_head_normalisers(output), expected)
    output = SimpleNamespace(log_probs=ChunkedLogProbFunction.apply(base * 1.0, torch.ones(5)), label_mask=mask)
    assert fused_head_normalisers(output) is None
    assert fused_head_normalisers(SimpleNamespace(log_probs=base * 2.0, label_mask=mask)) is None


def test_finished_rows_are_those_whose_last_completion_id_ends_them():
    """A row is finished when the id at the last position of its completion mask is EOS or pad;
    a row with no completion token (TRL's mask_truncated_completions zeroes a truncated row's
    mask) is not, whatever id its first column holds."""
    from ict.integrations.trl import finished_rows

    eos, pad = 2, 0
    ids = torch.tensor([[5, eos, pad], [5, 6, 7], [eos, pad, pad], [pad, pad, pad], [5, 6, pad]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0], [0, 0, 0], [1, 1, 1]])
    assert finished_rows(ids, mask, [eos, pad]).tolist() == [True, False, False, False, True]
    assert finished_rows(ids, mask, [eos]).tolist() == [True, False, False, False, False]


def test_full_token_warmup_counts_training_steps_only():
    """The first full_token_warmup_steps optimizer steps (global_step 0 .. N - 1) update every
    token; an evaluation (no update) uses the selector at any step."""
    from ict.integrations.trl import ICTGRPOTrainer

    trainer = SimpleNamespace(model=SimpleNamespace(training=True), state=SimpleNamespace(global_step=0),
                              full_token_warmup_steps=2)
    seen = []
    for training, step in [(True, 0), (True, 1), (True, 2), (False, 0)]:
        trainer.model.training, trainer.state.global_step = training, step
        seen.append(ICTGRPOTrainer.in_full_token_warmup(trainer))
    assert seen == [True, True, False, False]

"""ICTGRPOTrainer (ict.integrations.trl) through TRL's real GRPOTrainer on a tiny random model, in
one process and under ``accelerate launch`` with 2 CPU processes (gloo). Checked against references
written here: the mask is the top ceil(ratio * N) of the scores of all processes, the group_mean JS
equals a float64 full-softmax computation from the captured hidden states (full fine-tuning, LoRA,
bf16 weights with an fp32 head, groups spanning processes), groups are TRL's G completions (duplicate
prompts included; advantages sum to 0 per group), and `random` draws the same mask on both ranks.
Refusals (FSDP, ZeRO-3, TRL version, vespo + "ours") are one line. The loss (every loss_type,
KL-Cov, Clip-Cov) is tests/test_integration_trl_loss.py."""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from trl_helpers import DRIVER, free_port, run_driver

from ict.core.selectors import SelectionInputs

pytest.importorskip("trl")

def _top_fraction_reference(scores: torch.Tensor, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """Top ceil(ratio * N) of the response tokens by score, ties to the earlier row-major position."""
    flat = [(-float(scores[b, t]), b * mask.shape[1] + t, b, t)
            for b in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[b, t]]
    flat.sort()
    count = math.ceil(round(ratio * len(flat), 9))
    reference = torch.zeros_like(mask, dtype=torch.bool)
    for _, _, b, t in flat[:count]:
        reference[b, t] = True
    return reference


def _group_mean_js_reference(hidden, weight, mask, group_ids, bf16: bool = False) -> torch.Tensor:
    """float64 JS between each row's softmax and the mean softmax at t of its group's rows that
    have a token at t, the row itself included (ict.core.stats' group_mean definition); ``bf16``:
    of the bf16 product's logits, as TRL's fused head computes them under bf16 mixed precision."""
    logits = (hidden.bfloat16() @ weight.bfloat16().T) if bf16 else hidden.double() @ weight.double().T
    probs = torch.softmax(logits.double(), dim=-1)
    result = torch.zeros(mask.shape, dtype=torch.float64)

    def entropy(p):
        return -(p * torch.log(p.clamp_min(1e-300))).sum(-1)

    for b in range(mask.shape[0]):
        for t in range(mask.shape[1]):
            if not mask[b, t]:
                continue
            rows = [r for r in range(mask.shape[0]) if group_ids[r] == group_ids[b] and mask[r, t]]
            q = probs[rows, t].mean(0)
            m = 0.5 * (probs[b, t] + q)
            result[b, t] = entropy(m) - 0.5 * (entropy(probs[b, t]) + entropy(q))
    return result


def _absorbing_js_reference(hidden, weight, mask, group_ids, token_ids, finished=None) -> torch.Tensor:
    """float64 JS to the mean over all G rows of the group at t, where a finished row (``finished``;
    None: it ends before the last column) contributes a point mass on its last response token
    (EOS, the end token) at every later position; a truncated row contributes nothing after its
    end (ict.core.stats' group_mean_absorbing definition)."""
    probs = torch.softmax(hidden.double() @ weight.double().T, dim=-1)
    rows, length = mask.shape
    ends = [int(mask[r].nonzero().max()) if mask[r].any() else -1 for r in range(rows)]
    if finished is None:
        finished = [ends[r] < length - 1 for r in range(rows)]
    result = torch.zeros(mask.shape, dtype=torch.float64)

    def entropy(p):
        return -(p * torch.log(p.clamp_min(1e-300))).sum(-1)

    for b in range(rows):
        for t in range(length):
            if not mask[b, t]:
                continue
            parts = []
            for r in range(rows):
                if group_ids[r] != group_ids[b]:
                    continue
                if mask[r, t]:
                    parts.append(probs[r, t])
                elif 0 <= ends[r] < t and finished[r]:
                    parts.append(torch.nn.functional.one_hot(token_ids[r, ends[r]], probs.shape[-1]).double())
            q = torch.stack(parts).mean(0)
            m = 0.5 * (probs[b, t] + q)
            result[b, t] = entropy(m) - 0.5 * (entropy(probs[b, t]) + entropy(q))
    return result


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
                reference = _group_mean_js_reference(record["hidden"], record["weight"], mask[own], group_ids[own],
                                                     bf16=True)
                torch.testing.assert_close(record["js"]["group_mean"][own].double(), reference, atol=1e-5, rtol=1e-4)
                scores[own] = reference
        else:
            scores = first["entropy"]
        assert torch.equal(selected, _top_fraction_reference(scores, mask, ratio))
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
        reference = _group_mean_js_reference(hidden, first["weight"], mask, group_ids, bf16=True)
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


# ---- issue 23: configurations researchers run, in-process through TRL's real GRPOTrainer.train() ----

def _reward(completions, **kwargs):
    return [float(sum(map(ord, str(completion))) % 7) for completion in completions]


def _train_in_process(model_dir, out_dir, selector, model=None, prompts=None, steps=1, **overrides):
    """One ICTGRPOTrainer run of ``steps`` steps; returns (trainer, selection records)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer

    torch.manual_seed(0)
    options = dict(per_device_train_batch_size=4, num_generations=4, max_completion_length=8, max_steps=steps,
                   steps_per_generation=1, learning_rate=1e-2, report_to="none", use_cpu=True, bf16=False,
                   logging_steps=1, save_strategy="no", temperature=1.0, seed=0, full_token_warmup_steps=0)
    options.update(overrides)
    args = ICTGRPOConfig(output_dir=str(out_dir), token_selector=selector, **options)
    prompts = prompts or [f"what is {a} + {b} ?" for a in range(4) for b in range(2)]
    records = []
    trainer = ICTGRPOTrainer(model=model or AutoModelForCausalLM.from_pretrained(model_dir),
                             processing_class=AutoTokenizer.from_pretrained(model_dir), reward_funcs=_reward,
                             args=args, train_dataset=Dataset.from_dict({"prompt": prompts}))
    def keep(record):  # with the LM head as the statistics saw it (before this step's update)
        head = trainer.accelerator.unwrap_model(trainer.model).get_output_embeddings().weight
        records.append({**record, "weight": head.detach().clone()})

    trainer.on_selection = keep
    trainer.train()
    return trainer, records


def _check_group_mean_js(record, atol=1e-5, temperature=1.0):
    """The dumped group_mean JS equals the float64 reference from the captured hidden states
    (logits / ``temperature``)."""
    weight = record["weight"]
    mask, groups, own = record["mask"].bool(), record["group_ids"], slice(record["start"], None)
    reference = _group_mean_js_reference(record["hidden"].double() / temperature, weight.double(), mask[own],
                                         groups[own])
    torch.testing.assert_close(record["stats"].js_scores["group_mean"][own].double(), reference, atol=atol, rtol=1e-3)


def _check_head_values(record: dict, temperature: float = 1.0) -> None:
    """The log-probs, entropy and Renyi-2 the selector saw (TRL's fused head's) equal a float64
    computation from the captured hidden states and the head (logits / ``temperature``)."""
    own = slice(record["start"], None)
    mask = record["mask"].bool()[own]
    logits = record["hidden"].double() @ record["weight"].double().T / temperature
    log_p = torch.log_softmax(logits, dim=-1)
    expected = {
        "log_probs": log_p.gather(-1, record["ids"][own][..., None])[..., 0],
        "entropy": -(log_p.exp() * log_p).sum(-1),
        "renyi2": -torch.log((log_p.exp() ** 2).sum(-1)),
    }
    for name, values in expected.items():
        ours = getattr(record["stats"], name)[own].double()
        torch.testing.assert_close(ours[mask], values[mask], atol=1e-5, rtol=1e-5)
        assert (ours[~mask] == 0).all()


def test_trl_full_fine_tuning_updates_weights(tiny_model_dir, tmp_path):
    trainer, records = _train_in_process(tiny_model_dir, tmp_path, "ict:reference=group_mean,ratio=0.25")
    assert len(records) == 1
    record = records[0]
    _check_group_mean_js(record)
    mask = record["mask"].bool()
    assert int(record["selected"].sum()) == math.ceil(0.25 * int(mask.sum()))
    assert trainer.state.log_history[0]["grad_norm"] > 0
    # the scores took TRL's fused head's log Z and entropy (one vocabulary pass), and its values
    assert trainer.ict_head_statistics == {"reused": 1, "recomputed": 0}
    _check_head_values(record)


@pytest.mark.parametrize(("selector", "path"), [("ict:reference=group_mean,ratio=0.25", "reused"),
                                              ("entropy:ratio=0.25", "recomputed")])
def test_trl_statistics_are_at_the_sampling_temperature(tiny_model_dir, tmp_path, selector, path):
    """At temperature 0.7 the statistics the selector sees are of softmax(logits / 0.7), TRL's
    fused head's distribution, on both paths: scores from the head's log Z (JS: group_mean) and
    the statistics' own pass (no JS reference: entropy)."""
    trainer, records = _train_in_process(tiny_model_dir, tmp_path, selector, temperature=0.7)
    assert trainer.ict_head_statistics[path] == 1
    _check_head_values(records[0], temperature=0.7)
    if "group_mean" in selector:
        _check_group_mean_js(records[0], temperature=0.7)


def test_trl_default_ict_uses_the_absorbing_group_reference(tiny_model_dir, tmp_path):
    """ICT with default options scores against group_mean_absorbing (float64 reference from the
    captured hidden states) and selects, per completion, its top ceil(0.25 L) by that score."""
    trainer, records = _train_in_process(tiny_model_dir, tmp_path, "ict:ratio=0.25")
    record = records[0]
    mask, groups, own = record["mask"].bool(), record["group_ids"], slice(record["start"], None)
    lengths = mask[own].sum(dim=1)
    assert bool((lengths < mask.shape[1]).any()), "no completion ended early: absorption untested"
    reference = _absorbing_js_reference(record["hidden"].double(), record["weight"].double(),
                                        mask[own], groups[own], record["ids"][own])
    torch.testing.assert_close(record["stats"].js_scores["group_mean_absorbing"][own].double(),
                               reference, atol=1e-5, rtol=1e-3)
    # the default scope is per response: ceil(0.25 L) of each completion, its highest scores
    selected = record["selected"][own]
    assert selected.sum(dim=1).tolist() == [math.ceil(round(0.25 * int(n), 9)) for n in lengths]
    for row in range(selected.shape[0]):
        chosen = reference[row][selected[row]]
        others = reference[row][mask[own][row] & ~selected[row]]
        if others.numel():
            assert float(chosen.min()) >= float(others.max()) - 1e-5


def test_trl_absorbing_reference_keeps_truncated_tool_completions_truncated(tiny_model_dir, tmp_path):
    """TRL's tool loop: a completion cut at max_completion_length right after a tool result ends
    in tool tokens (tool mask 0) without EOS, so its last model token is before the last column.
    It is truncated (TRL's test: its last completion id is not EOS or pad) and contributes nothing
    after its end; it had been read as finished, its last model token's point mass absorbed into
    the group mean. Both statistics paths (on the fused head's log Z, and the full pass) against
    the float64 reference with finished = ends on EOS."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer

    torch.manual_seed(0)
    args = ICTGRPOConfig(output_dir=str(tmp_path), token_selector="ict:ratio=0.5", full_token_warmup_steps=0,
                         per_device_train_batch_size=4, num_generations=4, max_completion_length=7,
                         report_to="none", use_cpu=True, bf16=False, temperature=1.0)
    trainer = ICTGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                             processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), reward_funcs=_reward,
                             args=args, train_dataset=Dataset.from_dict({"prompt": ["a"] * 4}))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = 1
    eos, pad = trainer.eos_token_ids[0], trainer._tokenizer.pad_token_id
    generator = torch.Generator().manual_seed(1)
    lengths = torch.tensor([7, 4, 6, 2])
    completion_mask = (torch.arange(7)[None, :] < lengths[:, None]).long()
    vocab = trainer.model.config.vocab_size
    ids = torch.randint(3, vocab, (4, 7), generator=generator)
    ids = torch.where(completion_mask.bool(), ids, pad)
    ids[torch.arange(1, 4), lengths[1:] - 1] = eos  # rows 1-3 end on EOS; row 0 is cut at the cap
    tool_mask = torch.ones_like(completion_mask)
    tool_mask[0, 5:] = 0  # row 0's last 2 tokens are a tool result
    mask = (completion_mask * tool_mask).bool()
    inputs = {"prompt_ids": torch.randint(3, vocab, (4, 3), generator=generator),
              "prompt_mask": torch.ones(4, 3, dtype=torch.long), "completion_ids": ids,
              "completion_mask": completion_mask, "tool_mask": tool_mask,
              "advantages": torch.tensor([1.0, -0.5, 0.25, -2.0]), "num_items_in_batch": mask.sum(),
              "ict_group_ids": torch.zeros(4, dtype=torch.long)}
    records = []
    trainer.on_selection = records.append
    for deviation in (None, 1.0):  # None: scored on the fused head's log Z; 1.0: the full statistics pass
        trainer.ict_head_deviation = deviation
        trainer._compute_loss(trainer.model, dict(inputs))
        record = records[-1]
        assert torch.equal(record["mask"].bool(), mask)
        weight = trainer.model.get_output_embeddings().weight
        reference = _absorbing_js_reference(record["hidden"], weight, mask, inputs["ict_group_ids"], ids,
                                            finished=[False, True, True, True])
        torch.testing.assert_close(record["stats"].js_scores["group_mean_absorbing"].double(), reference,
                                   atol=1e-5, rtol=1e-4)
        inferred = _absorbing_js_reference(record["hidden"], weight, mask, inputs["ict_group_ids"], ids)
        assert float((inferred - reference).abs().max()) > 1e-2  # the case tells the two readings apart
    assert trainer.ict_head_statistics == {"reused": 1, "recomputed": 1}


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_trl_truncated_tool_completion_stays_truncated_across_processes(tiny_model_dir, tmp_path):
    """The same group of tool-use completions (row 0 cut after a tool result) over 2 processes
    (gloo), rank 1's batch a column narrower: each process receives the other's rows with their
    finished flags, and its scores equal the float64 reference over the whole group with
    finished = ends on EOS (rank 0's rows had been read as finished after the padding)."""
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    if accelerate is None:
        pytest.skip("accelerate CLI not installed next to this Python")
    run_driver([accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
                "--main_process_port", str(free_port()), "--mixed_precision", "no", "--dynamo_backend", "no",
                str(Path(DRIVER).parent / "trl_tool_rows_run.py"), str(tiny_model_dir), str(tmp_path)],
               tmp_path, ACCELERATE_USE_CPU="1")
    records = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(2)]
    assert [record["hidden"].shape[1] for record in records] == [7, 6]
    hidden = torch.cat([torch.nn.functional.pad(record["hidden"], (0, 0, 0, 7 - record["hidden"].shape[1]))
                        for record in records])
    first = records[0]
    reference = _absorbing_js_reference(hidden, first["weight"], first["mask"], torch.zeros(4, dtype=torch.long),
                                        first["ids"], finished=[False, True, True, True])
    for record in records:
        own = slice(*record["own"])
        width = record["js"].shape[1]
        torch.testing.assert_close(record["js"].double(), reference[own, :width], atol=1e-5, rtol=1e-4)
        assert not reference[own, width:].any()


def test_trl_default_ict_is_the_papers_recipe(tiny_model_dir, tmp_path):
    """`token_selector="ict"` is the paper's recipe in TRL: loss_type grpo (with
    selection_denominator='ours', ict's seq_mean_token_mean: Sparse-GRPO) and a full-token
    warm-up by TRL's global step; other methods keep TRL's dapo and no warm-up; explicit values win."""
    from ict.core.selectors import select
    from ict.integrations.trl import ICTGRPOConfig

    common = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False)
    default = ICTGRPOConfig(token_selector="ict", **common)
    assert (default.loss_type, default.full_token_warmup_steps) == ("grpo", 10)
    assert (ICTGRPOConfig(**common).loss_type, ICTGRPOConfig(**common).token_selector) == ("grpo", "ict")
    for spec in ("entropy", "all", "ict:preset=batch"):
        config = ICTGRPOConfig(token_selector=spec, **common)
        assert (config.loss_type, config.full_token_warmup_steps) == ("dapo", 0), spec
    explicit = ICTGRPOConfig(token_selector="ict", loss_type="bnpo", full_token_warmup_steps=3, **common)
    assert (explicit.loss_type, explicit.full_token_warmup_steps) == ("bnpo", 3)
    with pytest.raises(ValueError, match="is not a bool"):
        ICTGRPOConfig(token_selector="ict:complement=flase", **common)
    # one warm-up step (every token), then the library's selection on the same statistics
    trainer, records = _train_in_process(tiny_model_dir, tmp_path / "run", "ict", steps=2,
                                         full_token_warmup_steps=1)
    assert trainer.loss_type == "grpo" and len(records) == 2
    assert torch.equal(records[0]["selected"].bool(), records[0]["mask"].bool())
    record = records[1]
    inputs = SelectionInputs(stats=record["stats"], response_mask=record["mask"].bool(),
                             advantages=record["advantages"], token_ids=record["ids"],
                             group_ids=record["group_ids"])
    expected = select("ict", inputs).mask
    assert torch.equal(record["selected"].bool(), expected)
    assert bool((expected.sum(dim=1) < record["mask"].sum(dim=1)).any())
    fractions = [entry["ict/full_token_warmup"] for entry in trainer.state.log_history
                 if "ict/full_token_warmup" in entry]
    assert fractions == [1.0, 0.0]


def test_trl_warmup_steps_must_be_a_non_negative_integer(tmp_path):
    """full_token_warmup_steps: 2.5, True, 0.9 and NaN passed the config and the trainer cut them
    with int() (2, 1, 0; NaN failed at the first step); each is now the config's one-line error."""
    from ict.integrations.trl import ICTGRPOConfig

    common = dict(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False, token_selector="ict")
    for value in (2.5, True, 0.9, float("nan"), -1, "3"):
        with pytest.raises(ValueError, match=r"^full_token_warmup_steps must be None or an integer >= 0, got ") as error:
            ICTGRPOConfig(full_token_warmup_steps=value, **common)
        assert "\n" not in str(error.value)
    for value in (0, 3):
        assert ICTGRPOConfig(full_token_warmup_steps=value, **common).full_token_warmup_steps == value


def test_trl_lora_hooks_the_backbone_trl_uses(tiny_model_dir, tmp_path):
    """PEFT: TRL patches get_base_model(); the hidden states of its backbone are captured, the
    statistics use the frozen LM head, and only the adapter weights move."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    trainer, records = _train_in_process(tiny_model_dir, tmp_path, "ict:reference=group_mean,ratio=0.25",
                                         model=model)
    assert len(records) == 1
    _check_group_mean_js(records[0])
    moved = {name for name, p in trainer.model.named_parameters() if not torch.equal(p.detach(), before[name])}
    assert moved and all("lora_" in name for name in moved)
    assert trainer.ict_head_statistics == {"reused": 1, "recomputed": 0}
    _check_head_values(records[0])


def test_trl_bf16_weights_with_fp32_head(tiny_model_dir, tmp_path):
    """bf16 weights, cast_lm_head_to_fp32: the bf16 hidden states are cast to the float32 head."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.bfloat16)
    trainer, records = _train_in_process(tiny_model_dir, tmp_path, "ict:reference=group_mean,ratio=0.25",
                                         model=model, cast_lm_head_to_fp32=True)
    head = trainer.model.get_output_embeddings().weight
    assert head.dtype == torch.float32 and records[0]["hidden"].dtype == torch.bfloat16
    _check_group_mean_js(records[0], atol=1e-4)
    assert math.isfinite(trainer.state.log_history[0]["loss"])
    assert trainer.ict_head_statistics == {"reused": 1, "recomputed": 0}


def test_trl_mixed_precision_scores_on_the_fused_heads_log_z(tiny_model_dir, tmp_path):
    """bf16 mixed precision (TRL's bf16=True; on the CPU, bf16 autocast around the model's forward):
    the statistics run in the head's autocast dtype, so the fused head's log Z fits their tiles
    (probabilities sum to 1 within 1e-5) and every micro-batch is scored on it; the scores equal
    the full statistics computed in that dtype."""
    from ict.core.stats import token_statistics_from_hidden

    trainer, records = _train_in_process(tiny_model_dir, tmp_path, "ict:reference=group_mean,ratio=0.25",
                                         bf16=True, steps=2)
    assert trainer._head_autocast == torch.bfloat16
    assert trainer.ict_head_statistics == {"reused": 2, "recomputed": 0} and trainer.ict_head_deviation < 1e-5
    record = records[-1]
    own = slice(record["start"], None)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        full = token_statistics_from_hidden(record["hidden"], record["weight"], record["ids"][own],
                                            record["mask"].bool()[own], 1.0, ("group_mean",),
                                            record["group_ids"][own])
    torch.testing.assert_close(record["stats"].js_scores["group_mean"][own], full.js_scores["group_mean"],
                               atol=1e-5, rtol=0)


def test_trl_scope_group_and_duplicate_prompts(tiny_model_dir, tmp_path):
    """16 copies of one prompt, G=4, 8 rows: two groups of 4 (TRL's grouping, whose advantages
    sum to 0 per group), not one group of 8; scope=group selects ceil(ratio * N_g) per group."""
    trainer, records = _train_in_process(tiny_model_dir, tmp_path, "ict:reference=group_mean,ratio=0.25,scope=group",
                                         prompts=["what is 1 + 1 ?"] * 16, per_device_train_batch_size=8)
    record = records[0]
    groups, mask, selected = record["group_ids"], record["mask"].bool(), record["selected"]
    assert sorted(torch.bincount(groups).tolist()) == [4, 4]
    for group in groups.unique():
        rows = groups == group
        assert abs(float(record["advantages"][rows].sum())) < 1e-4
        assert int(selected[rows].sum()) == math.ceil(0.25 * int(mask[rows].sum()))
    _check_group_mean_js(record)


def test_trl_refusals_are_one_line(tiny_model_dir, tmp_path, monkeypatch):
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer, sharded_head_refusal

    def construct(**options):
        args = ICTGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False,
                             per_device_train_batch_size=4, num_generations=4, **options)
        return ICTGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                              processing_class=AutoTokenizer.from_pretrained(tiny_model_dir),
                              reward_funcs=_reward, args=args, train_dataset=Dataset.from_dict({"prompt": ["a"] * 4}))

    cases = [
        (dict(loss_type="vespo"), "selection_denominator='ours' is not defined for loss_type='vespo'"),
        (dict(token_selector="ict:scope=group,reference=seq_mean", steps_per_generation=2,
              gradient_accumulation_steps=2), "needs whole groups"),
        # FSDP: refused before TRL builds anything (on CPU accelerate would run plain DDP instead of
        # FSDP2, and FSDP1 finds no device, so neither can be tested here)
        (dict(fsdp=True, fsdp_config={"fsdp_version": 2}), r"does not support FSDP \(fsdp_version=2\)"),
        (dict(fsdp=True, fsdp_config={"fsdp_version": 1}), r"does not support FSDP \(fsdp_version=1\)"),
    ]
    for options, message in cases:
        with pytest.raises(ValueError, match=message) as error:
            construct(**options)
        assert "\n" not in str(error.value)
    construct(loss_type="vespo", selection_denominator="trl")  # accepted with TRL's denominators
    # TRL's own GRPOConfig (or none) built, then failed at the first loss (no stats_tile_size)
    for plain in (trl.GRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False), None):
        with pytest.raises(ValueError, match=r"^ICTGRPOTrainer needs args=ICTGRPOConfig\(\.\.\.\), got "):
            ICTGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), reward_funcs=_reward, args=plain,
                           train_dataset=Dataset.from_dict({"prompt": ["a"] * 4}))
    # random's seed was not checked: int('x') failed at the first loss, 1.5 became 1, 2^64 overflowed
    for seed in ("x", "1.5", str(2**64)):
        with pytest.raises(ValueError, match=r"random's seed must be an integer in \[-2\^63, 2\^64\) or none"):
            ICTGRPOConfig(output_dir=str(tmp_path), token_selector=f"random:ratio=0.2,seed={seed}")
    zero3 = sharded_head_refusal(None, deepspeed_plugin=SimpleNamespace(zero_stage=3))  # deepspeed not installed
    assert zero3.startswith("ict.integrations.trl does not support DeepSpeed ZeRO-3")
    assert sharded_head_refusal(None, deepspeed_plugin=SimpleNamespace(zero_stage=2)) is None
    # FSDP asked for through accelerate's environment (accelerate launch --use_fsdp), not the config
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setenv("FSDP_VERSION", "2")
    assert "does not support FSDP (fsdp_version=2)" in sharded_head_refusal(SimpleNamespace(fsdp="", fsdp_config={}))
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "false")
    assert sharded_head_refusal(SimpleNamespace(fsdp="", fsdp_config={})) is None
    monkeypatch.setattr(trl, "__version__", "1.17.0")
    with pytest.raises(ValueError, match=r"tested with TRL >=1\.16\.0,<1\.17; installed TRL 1\.17\.0"):
        construct()


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
        in_full_token_warmup=lambda: False,
        accelerator=SimpleNamespace(num_processes=processes, reduce=lambda sums, reduction: sums + other))
    ICTGRPOTrainer._log_selection(trainer, entropy[0], mask[0], selected[0], True)
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

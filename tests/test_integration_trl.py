"""ICTGRPOTrainer (ict.integrations.trl) through TRL's real GRPOTrainer on a tiny random model, in
one process and under ``accelerate launch`` with 2 CPU processes (gloo). Checked against references
written here: the mask is the top ceil(ratio * N) of the scores of all processes, the group_mean JS
equals a float64 full-softmax computation from the captured hidden states (full fine-tuning, LoRA,
bf16 weights with an fp32 head, groups spanning processes), groups are TRL's G completions (duplicate
prompts included; advantages sum to 0 per group), `random` draws the same mask on both ranks, and for
every loss_type the "ours" denominator gives ict.core.loss.policy_loss's loss and LM-head gradient.
KL-Cov: the penalty added after TRL's loss equals policy_loss's penalty part for every TRL loss_type
(tensors, and through TRL's own _compute_loss), and a 2-iteration run differs from a kl_coef=0 one
by exactly that term. Refusals (FSDP, ZeRO-3, TRL version, vespo + "ours") are one line."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from ict.core.selectors import SelectionInputs

pytest.importorskip("trl")

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "trl_integration_run.py"


def _run(command: list[str], out_dir: Path, **extra_env: str) -> None:
    env = {**os.environ, **extra_env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, env=env, cwd=out_dir, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


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


def _absorbing_js_reference(hidden, weight, mask, group_ids, token_ids) -> torch.Tensor:
    """float64 JS to the mean over all G rows of the group at t, where a row that finished before
    the last column (its last response token, EOS, is the end token) contributes a point mass on
    that token at every later position; a truncated row (reaching the last column) contributes
    nothing after its end (ict.core.stats' group_mean_absorbing definition)."""
    probs = torch.softmax(hidden.double() @ weight.double().T, dim=-1)
    rows, length = mask.shape
    ends = [int(mask[r].nonzero().max()) if mask[r].any() else -1 for r in range(rows)]
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
                elif 0 <= ends[r] < t and ends[r] < length - 1:
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
    _run([sys.executable, str(DRIVER), str(tiny_model_dir), str(tmp_path), ";".join(case[0] for case in CASES)],
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
    other's 2 rows of the group (hidden states, ids, mask; never its own rows back) and its JS
    equals the float64 reference over the whole group."""
    before = [{}, {}]
    for call in range(2):
        records = [torch.load(out_dir / f"rank{rank}_call{call}.pt") for rank in range(2)]
        width = max(record["hidden"].shape[1] for record in records)
        for rank, record in enumerate(records):
            received = record["received"].get("group_rows", 0) - before[rank].get("group_rows", 0)
            assert received == 2 * width * (record["hidden"].shape[2] * 4 + 8 + 8)
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


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
def test_trl_two_processes(tiny_model_dir, tmp_path):
    """One `accelerate launch` of 2 CPU processes (gloo), three runs: ICT group_mean (groups on one
    process), `random` (equal masks on both ranks), ICT with groups spanning the processes."""
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    if accelerate is None:
        pytest.skip("accelerate CLI not installed next to this Python")
    runs = "ict:reference=group_mean,ratio=0.1,scope=batch;random:ratio=0.2;ict:reference=group_mean,ratio=0.25,scope=batch@2"
    # accelerate 1.15's `launch --cpu --num_processes 2` starts ONE process; `--multi_gpu` with
    # ACCELERATE_USE_CPU=1 starts two CPU processes (gloo), as verified by the gathered shapes below.
    _run([accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
          "--mixed_precision", "no", "--dynamo_backend", "no", str(DRIVER), str(tiny_model_dir),
          str(tmp_path), runs], tmp_path, ACCELERATE_USE_CPU="1")
    _check(tmp_path / "0", 2, 0.1, "group_mean")
    _check_random_equal_on_ranks(tmp_path / "1", 0.2)
    _check_straddling_groups(tmp_path / "2")


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
    _run([sys.executable, str(DRIVER), str(model_dir), str(out_dir), runs, "2"], out_dir)
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


def _check_group_mean_js(record, atol=1e-5):
    """The dumped group_mean JS equals the float64 reference from the captured hidden states."""
    weight = record["weight"]
    mask, groups, own = record["mask"].bool(), record["group_ids"], slice(record["start"], None)
    reference = _group_mean_js_reference(record["hidden"].double(), weight.double(), mask[own], groups[own])
    torch.testing.assert_close(record["stats"].js_scores["group_mean"][own].double(), reference, atol=atol, rtol=1e-3)


def _check_head_values(record: dict) -> None:
    """The log-probs, entropy and Renyi-2 the selector saw (TRL's fused head's) equal a float64
    computation from the captured hidden states and the head."""
    own = slice(record["start"], None)
    mask = record["mask"].bool()[own]
    logits = record["hidden"].double() @ record["weight"].double().T
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
    zero3 = sharded_head_refusal(None, deepspeed_plugin=SimpleNamespace(zero_stage=3))  # deepspeed not installed
    assert zero3.startswith("ict.integrations.trl does not support DeepSpeed ZeRO-3")
    assert sharded_head_refusal(None, deepspeed_plugin=SimpleNamespace(zero_stage=2)) is None
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

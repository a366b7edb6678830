"""ICTGRPOTrainer (ict.integrations.trl) trained in-process through TRL's real GRPOTrainer.train()
on a tiny random model, in the configurations researchers run: full fine-tuning, LoRA, bf16 weights
with an fp32 head, the sampling temperature, the absorbing group reference with truncated tool
completions (in one process and across 2), duplicate prompts. The group_mean JS and the head's
log-probs, entropy and Renyi-2 equal float64 computations from the captured hidden states (the
references of tests/trl_helpers.py). Refusals (FSDP, ZeRO-3, TRL version, vespo + "ours") are one
line."""

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
    absorbing_js_reference,
    free_port,
    group_mean_js_reference,
    run_driver,
)

from ict.core.selectors import SelectionInputs

pytest.importorskip("trl")


def _reward(completions, **kwargs):
    return [float(sum(map(ord, str(completion))) % 7) for completion in completions]


def _train_in_process(model_dir, out_dir, selector, model=None, prompts=None, steps=1, resume=None, **overrides):
    """One ICTGRPOTrainer run of ``steps`` steps (from TRL checkpoint ``resume``, if given);
    returns (trainer, selection records)."""
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
        length = record["mask"].shape[1]  # TRL's per_token_logps (its loss's) and old_per_token_logps
        loss_log_probs = torch.cat(trainer._log_probs, dim=0)[:, -length:].detach()
        records.append({**record, "weight": head.detach().clone(), "loss_log_probs": loss_log_probs,
                        "old_log_probs": trainer._loss_inputs.get("old_per_token_logps")})

    trainer.on_selection = keep
    trainer.train(resume_from_checkpoint=resume)
    return trainer, records


def _check_group_mean_js(record, atol=1e-5, temperature=1.0):
    """The dumped group_mean JS equals the float64 reference from the captured hidden states
    (logits / ``temperature``)."""
    weight = record["weight"]
    mask, groups, own = record["mask"].bool(), record["group_ids"], slice(record["start"], None)
    reference = group_mean_js_reference(record["hidden"].double() / temperature, weight.double(), mask[own],
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


@pytest.mark.parametrize(("selector", "drawn"), [("random:ratio=0.3", "selected"),
                                                 pytest.param("kl_cov", "kl_penalty", marks=pytest.mark.slow)])
def test_trl_resumed_from_a_checkpoint_makes_the_uninterrupted_runs_selections(tiny_model_dir, tmp_path,
                                                                               selector, drawn, one_thread):
    """`selection_generator` is seeded by (seed, global step, call): a run resumed from TRL's
    checkpoint-1 (`resume_from_checkpoint`) draws the uninterrupted run's selections in steps 2 and
    3 (2 micro-batches each: the call index restarts per step; KL-Cov's tie draw too) and ends with
    its weights."""
    options = dict(steps=3, save_strategy="steps", save_steps=1, gradient_accumulation_steps=2,
                   steps_per_generation=2)
    whole, records = _train_in_process(tiny_model_dir, tmp_path / "whole", selector, **options)
    resumed, tail = _train_in_process(tiny_model_dir, tmp_path / "resumed", selector,
                                      resume=str(tmp_path / "whole" / "checkpoint-1"), **options)
    assert len(records) == 6 and len(tail) == 4
    for ours, theirs in zip(tail, records[2:], strict=True):
        assert 0 < int((ours[drawn] != 0).sum()) < int(ours["mask"].sum())  # a real draw: not all, not none
        for key in ("ids", "mask", "advantages", "selected", drawn):
            assert torch.equal(ours[key], theirs[key]), key
    for mine, theirs in zip(resumed.model.parameters(), whole.model.parameters(), strict=True):
        assert torch.equal(mine, theirs)


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


@pytest.mark.parametrize(("selector", "path", "weights"), [("clip_cov", "recomputed", "float32"),
                                                         ("clip_cov", "recomputed", "bfloat16"),
                                                         ("ict:reference=group_mean,ratio=0.25", "reused", "float32")])
def test_trl_selectors_read_the_log_probs_of_trls_loss_under_bf16_at_temperature(tiny_model_dir, tmp_path,
                                                                                  selector, path, weights):
    """bf16 at temperature 0.7 (float32 weights under TRL's bf16 mixed precision, or bf16 weights;
    the class of verl's bug: bf16 logits scaled by the temperature in bf16 there, 0.1 nats from
    float32), num_iterations=2 so that TRL computes old_per_token_logps: the log-probs the selector
    reads (clip_cov's ratio test and covariances, STAPO's p) are those of TRL's loss to float32
    rounding, on both paths (ict's own statistics pass, and the fused head's log Z). On-policy (the
    first micro-batch) TRL's old log-probs are its loss's to the bit and its clip_ratio metric is 0:
    the ratio the selector reads is 1."""
    from transformers import AutoModelForCausalLM

    mixed = weights == "float32"
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=getattr(torch, weights))
    trainer, records = _train_in_process(tiny_model_dir, tmp_path, selector, model=model, temperature=0.7,
                                         bf16=mixed, num_iterations=2, steps=2)
    assert trainer._head_autocast == (torch.bfloat16 if mixed else None)
    assert trainer.ict_head_statistics[path] == 2
    assert len(records) == 2 and trainer.state.log_history[0]["clip_ratio/region_mean"] == 0
    for index, record in enumerate(records):
        mask, loss = record["mask"].bool(), record["loss_log_probs"].float()
        selected = record["stats"].log_probs.float()
        torch.testing.assert_close(selected[mask], loss[mask], atol=1e-5, rtol=0)
        assert (selected[~mask] == 0).all()
        old = record["old_log_probs"]
        assert old is not None
        if index == 0:  # before the first update
            assert torch.equal(old[mask], loss[mask])
            ratio = (selected - old.float())[mask].exp()
            torch.testing.assert_close(ratio, torch.ones_like(ratio), atol=1e-5, rtol=0)
        else:  # after one update: TRL's own ratio moved, and the selector reads the same one
            assert float((loss - old.float())[mask].abs().max()) > 1e-2


def test_trl_default_ict_uses_the_absorbing_group_reference(tiny_model_dir, tmp_path):
    """ICT with default options scores against group_mean_absorbing (float64 reference from the
    captured hidden states) and selects, per completion, its top ceil(0.25 L) by that score."""
    trainer, records = _train_in_process(tiny_model_dir, tmp_path, "ict:ratio=0.25")
    record = records[0]
    mask, groups, own = record["mask"].bool(), record["group_ids"], slice(record["start"], None)
    lengths = mask[own].sum(dim=1)
    assert bool((lengths < mask.shape[1]).any()), "no completion ended early: absorption untested"
    reference = absorbing_js_reference(record["hidden"].double(), record["weight"].double(),
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
        reference = absorbing_js_reference(record["hidden"], weight, mask, inputs["ict_group_ids"], ids,
                                            finished=[False, True, True, True])
        torch.testing.assert_close(record["stats"].js_scores["group_mean_absorbing"].double(), reference,
                                   atol=1e-5, rtol=1e-4)
        inferred = absorbing_js_reference(record["hidden"], weight, mask, inputs["ict_group_ids"], ids)
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
    reference = absorbing_js_reference(hidden, first["weight"], first["mask"], torch.zeros(4, dtype=torch.long),
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


def test_trl_fp32_head_under_mixed_precision_scores_in_float32(tiny_model_dir, tmp_path):
    """bf16 mixed precision with cast_lm_head_to_fp32: TRL's fused head runs in float32 outside the
    autocast, so the statistics do too (not in the forward's bf16): the head's log Z fits them and
    is reused, and the group_mean JS equals the float64 reference to float32 rounding."""
    trainer, records = _train_in_process(tiny_model_dir, tmp_path, "ict:reference=group_mean,ratio=0.25",
                                         bf16=True, cast_lm_head_to_fp32=True)
    assert trainer._head_autocast == torch.bfloat16  # the forward ran under bf16 autocast
    assert trainer.ict_head_statistics == {"reused": 1, "recomputed": 0} and trainer.ict_head_deviation < 1e-5
    _check_group_mean_js(records[0])


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

    selection_cases = [
        (dict(loss_type="vespo"), "selection_denominator='ours' is not defined for loss_type='vespo'"),
        (dict(token_selector="ict:reference=ref"), r"^the 'ref' JS reference is not supported inside TRL"),
        (dict(token_selector="ict:scope=group,reference=seq_mean", steps_per_generation=2,
              gradient_accumulation_steps=2), "needs whole groups"),
        (dict(top_entropy_quantile=0.2), "^top_entropy_quantile and token_selector both pick tokens"),
    ]
    for options, message in selection_cases:  # refused by the config, before a model is loaded
        with pytest.raises(ValueError, match=message) as error:
            ICTGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False, **options)
        assert "\n" not in str(error.value)
    # and again by the trainer, for a config changed after its checks
    changed = ICTGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False,
                            per_device_train_batch_size=4, num_generations=4, loss_type="vespo",
                            selection_denominator="trl")
    changed.selection_denominator = "ours"
    with pytest.raises(ValueError, match="selection_denominator='ours' is not defined for loss_type='vespo'"):
        ICTGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                       processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), reward_funcs=_reward,
                       args=changed, train_dataset=Dataset.from_dict({"prompt": ["a"] * 4}))
    # the entropy bonus under 'ours' grpo, an unknown denominator or loss type set after the config's
    # checks: the trainer took them before (a weighted bonus; 'Trl' ran as 'ours'; 'drgrpo' failed
    # in TRL's first loss, after a generation)
    changed_cases = [
        (dict(entropy_coef=0.01), r"^entropy_coef / use_adaptive_entropy with loss_type='grpo' and "),
        (dict(use_adaptive_entropy=True), r"^entropy_coef / use_adaptive_entropy with loss_type='grpo' and "),
        (dict(selection_denominator="Trl"), r"^selection_denominator must be 'ours' or 'trl', got 'Trl'$"),
        (dict(loss_type="drgrpo", selection_denominator="trl"), r"^loss_type must be one of grpo, .*got 'drgrpo'$"),
    ]
    for change, message in changed_cases:
        changed = ICTGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, bf16=False,
                                per_device_train_batch_size=4, num_generations=4)
        for key, value in change.items():
            setattr(changed, key, value)
        with pytest.raises(ValueError, match=message):
            ICTGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir),
                           processing_class=AutoTokenizer.from_pretrained(tiny_model_dir), reward_funcs=_reward,
                           args=changed, train_dataset=Dataset.from_dict({"prompt": ["a"] * 4}))
    cases = [
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

"""Statistics from the final hidden states equal those from the logits: `response_hidden` @ W.T is
`response_logits` on both forward paths, and a training micro-batch with
``statistics_from="hidden"`` gives the loss and parameter gradients of ``"logits"`` (float32, CPU),
including the KL to a reference policy; models whose LM head is not plain linear are refused."""

from __future__ import annotations

import pytest
import torch
from test_forward import grouped_batch

from ict.core.errors import UsageError
from ict.core.loss import PolicyLossConfig
from ict.models.forward import (
    plain_response_outputs,
    response_hidden,
    response_logits,
    shared_prompt_response_outputs,
)
from ict.models.loading import linear_lm_head
from ict.training.config import TrainConfig
from ict.training.step import (
    Method,
    ReferencePolicy,
    StepContext,
    accumulate_gradients,
    statistics_source,
)


def tiny_model(vocab: int, seed: int, bias: bool = False):
    from conftest import build_tiny_model

    model = build_tiny_model(vocab, seed=seed)
    if bias:  # a head with a bias, as some models have
        head = model.get_output_embeddings()
        new = torch.nn.Linear(head.in_features, head.out_features, bias=True)
        with torch.no_grad():
            new.weight.copy_(head.weight)
            new.bias.normal_(0.0, 0.5)
        model.set_output_embeddings(new)
    return model


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("group_sizes", [(3, 1, 4), (2, 5, 1, 2)])
def test_hidden_times_the_head_is_the_logits_on_both_paths(group_sizes, bias, tiny_tokenizer):
    vocab = len(tiny_tokenizer)
    model = tiny_model(vocab, seed=2, bias=bias)
    batch = grouped_batch(vocab, group_sizes)  # left-padded prompts, ragged responses
    weight, head_bias = linear_lm_head(model)
    with torch.no_grad():
        for path in (plain_response_outputs, shared_prompt_response_outputs):
            hidden = path(model, batch, hidden=True)
            assert hidden.shape == (*batch.response_ids.shape, model.config.hidden_size)
            logits = hidden @ weight.T + (0 if head_bias is None else head_bias)
            torch.testing.assert_close(logits, path(model, batch), rtol=0, atol=1e-5)
        for shared in (True, False):
            logits = response_hidden(model, batch, shared) @ weight.T
            if head_bias is not None:
                logits = logits + head_bias
            torch.testing.assert_close(logits, response_logits(model, batch, shared), rtol=0, atol=1e-5)


def _step(model, batch, advantages, statistics_from, **kwargs):
    model.zero_grad(set_to_none=True)
    context = StepContext(kwargs.pop("loss_config", PolicyLossConfig()), 0.7,
                          reference=kwargs.pop("reference", None),
                          shared_prompt=kwargs.pop("shared_prompt", True),
                          statistics_from=statistics_from)
    method = Method.of("ict", {"reference": "group_mean", "ratio": 0.3, "scope": "batch"})
    result = accumulate_gradients(model, batch, advantages, None, method, context, group_size=4,
                                  **kwargs)
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters() if p.grad is not None}
    return result, grads


@pytest.mark.parametrize("case", ["shared prompt", "per-row, two micro-batches", "kl + entropy"])
def test_a_training_step_from_hidden_equals_the_one_from_logits(case, tiny_tokenizer, monkeypatch):
    vocab = len(tiny_tokenizer)
    model = tiny_model(vocab, seed=5)
    batch = grouped_batch(vocab, (4, 4, 4), seed=3)
    advantages = torch.linspace(-1.0, 1.5, batch.input_ids.shape[0])
    kwargs: dict = {"micro_batch_size": 12}
    if case == "per-row, two micro-batches":
        kwargs = {"micro_batch_size": 8, "shared_prompt": False}  # scoring pass + 2 micro-batches
    elif case == "kl + entropy":
        reference = tiny_model(vocab, seed=6)  # a different policy: the KL is not 0
        kwargs["reference"] = ReferencePolicy(reference)
        kwargs["loss_config"] = PolicyLossConfig(kl_coef=0.1, entropy_coef=0.01)
    logits_result, logits_grads = _step(model, batch, advantages, "logits", **dict(kwargs))

    def no_logits(*args, **kwargs):
        raise AssertionError("statistics_from='hidden' built the [B, T, V] logits")

    monkeypatch.setattr("ict.training.step.response_logits", no_logits)
    monkeypatch.setattr("ict.training.step.token_statistics", no_logits)
    hidden_result, hidden_grads = _step(model, batch, advantages, "hidden", **dict(kwargs))
    assert torch.equal(hidden_result.selected_mask, logits_result.selected_mask)
    assert logits_result.selected_mask.any()
    assert abs(hidden_result.loss - logits_result.loss) <= 1e-5
    if case == "kl + entropy":
        assert hidden_result.totals.mean("kl") > 0
        assert abs(hidden_result.totals.mean("kl") - logits_result.totals.mean("kl")) <= 1e-5
    torch.testing.assert_close(hidden_result.stats.js_scores["group_mean"],
                               logits_result.stats.js_scores["group_mean"], rtol=0, atol=1e-5)
    assert logits_grads.keys() == hidden_grads.keys()
    assert "lm_head.weight" in hidden_grads
    for name, grad in logits_grads.items():
        torch.testing.assert_close(hidden_grads[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def test_a_head_that_is_not_plain_linear_is_refused(tiny_tokenizer):
    vocab = len(tiny_tokenizer)
    model = tiny_model(vocab, seed=1)
    batch = grouped_batch(vocab, (2, 2))
    model.config.final_logit_softcapping = 30.0
    with pytest.raises(UsageError, match="final_logit_softcapping=30.0"):
        response_hidden(model, batch)
    model.config.final_logit_softcapping = None
    model.config.logit_scale = 0.5
    with pytest.raises(UsageError, match="logit_scale"):
        linear_lm_head(model)
    model.config.logit_scale = None
    # RecurrentGemma's and xLSTM's soft caps and Inkling's muP width divisor were not refused:
    # Inkling's statistics came from 24x sharper logits over the padded vocabulary
    for name, value in (("logits_soft_cap", 30.0), ("output_logit_soft_cap", 15.0),
                        ("logits_mup_width_multiplier", 24.0), ("unpadded_vocab_size", vocab - 8)):
        setattr(model.config, name, value)
        with pytest.raises(UsageError, match=name) as error:
            linear_lm_head(model)
        assert "\n" not in str(error.value)
        setattr(model.config, name, None)
    linear_lm_head(model)
    from ict.models.loading import LoraOptions, apply_lora

    adapted = apply_lora(model, LoraOptions(rank=2, target_modules=["q_proj", "lm_head"]))
    with pytest.raises(UsageError, match="plain torch.nn.Linear"):
        response_hidden(adapted, batch)


def test_hidden_through_a_peft_wrapper_and_the_ref_reference_is_refused(tiny_tokenizer):
    from ict.models.loading import LoraOptions, apply_lora

    vocab = len(tiny_tokenizer)
    model = apply_lora(tiny_model(vocab, seed=1), LoraOptions(rank=2))
    with torch.no_grad():  # a non-zero adapter, so that disabling it changes the outputs
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.5)
    batch = grouped_batch(vocab, (3, 2))
    weight, _ = linear_lm_head(model)
    with torch.no_grad():
        torch.testing.assert_close(response_hidden(model, batch) @ weight.T, response_logits(model, batch),
                                   rtol=0, atol=1e-5)
        reference = ReferencePolicy(model)
        torch.testing.assert_close(reference.outputs(batch, hidden=True) @ weight.T, reference.logits(batch),
                                   rtol=0, atol=1e-5)
        assert not torch.allclose(reference.logits(batch), response_logits(model, batch))
    with pytest.raises(UsageError, match="'ref' JS reference"):
        TrainConfig(method="ict", selector={"reference": "ref"}, statistics_from="hidden").validate()
    with pytest.raises(UsageError, match="statistics_from"):
        TrainConfig(statistics_from="both").validate()
    TrainConfig(method="ict", statistics_from="hidden").validate()


def test_auto_computes_from_hidden_states_on_a_gpu_where_it_applies(tiny_tokenizer):
    """``statistics_from: auto`` (the default): hidden states on a CUDA device when the head is
    plain linear and no score compares two models' logits; the logits on a CPU, for a soft-capped
    head, a LoRA-adapted head and the ``ref`` reference; an explicit choice is kept."""
    from ict.models.loading import LoraOptions, apply_lora

    model = tiny_model(len(tiny_tokenizer), seed=1)
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    ict_scores = ("group_mean_absorbing",)
    assert statistics_source("auto", model, cuda, ict_scores) == "hidden"
    assert statistics_source("auto", model, cpu, ict_scores) == "logits"
    assert statistics_source("auto", model, cuda, ("group_mean_absorbing", "ref:kl")) == "logits"
    assert statistics_source("hidden", model, cpu, ict_scores) == "hidden"
    assert statistics_source("logits", model, cuda, ict_scores) == "logits"
    model.config.final_logit_softcapping = 30.0
    assert statistics_source("auto", model, cuda, ict_scores) == "logits"
    model.config.final_logit_softcapping = None
    adapted = apply_lora(model, LoraOptions(rank=2, target_modules=["q_proj", "lm_head"]))
    assert statistics_source("auto", adapted, cuda, ict_scores) == "logits"
    assert TrainConfig().statistics_from == "auto"
    TrainConfig(method="ict", selector={"reference": "ref"}).validate()  # auto takes the logits there


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (auto's GPU choice)")
def test_on_a_gpu_auto_takes_the_hidden_states_and_gives_the_logits_step(tiny_tokenizer):
    """On a CUDA device ``auto`` resolves to ``hidden``, and that step (Triton tiles) gives the
    loss, selection and gradients of the step from the logits there."""
    device = torch.device("cuda")
    model = tiny_model(len(tiny_tokenizer), seed=5).to(device)
    batch = grouped_batch(len(tiny_tokenizer), (4, 4, 4), seed=3).to(device)
    advantages = torch.linspace(-1.0, 1.5, batch.input_ids.shape[0], device=device)
    assert statistics_source("auto", model, device, ("group_mean",)) == "hidden"
    logits_result, logits_grads = _step(model, batch, advantages, "logits", micro_batch_size=12)
    hidden_result, hidden_grads = _step(model, batch, advantages, "hidden", micro_batch_size=12)
    assert torch.equal(hidden_result.selected_mask, logits_result.selected_mask)
    assert abs(hidden_result.loss - logits_result.loss) <= 1e-4
    for name, grad in logits_grads.items():
        torch.testing.assert_close(hidden_grads[name], grad, rtol=1e-3, atol=1e-4, msg=name)


def test_train_with_statistics_from_hidden_repeats_the_logits_run(tiny_model_dir, arithmetic_task, tmp_path,
                                                                  one_thread):
    """`ict train --statistics-from hidden` end to end (with a KL reference): the same metrics."""
    from train_helpers import tiny_config

    from ict.training.trainer import train

    runs = {}
    for source in ("logits", "hidden"):
        runs[source] = train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / source, num_steps=2,
                                         kl_coef=0.05, statistics_from=source)).metrics
    for logits_line, hidden_line in zip(runs["logits"], runs["hidden"]):
        assert logits_line["selected_fraction"] == hidden_line["selected_fraction"]
        for name in ("loss", "grad_norm", "entropy", "js_score", "kl", "reward_mean"):
            assert hidden_line[name] == pytest.approx(logits_line[name], rel=1e-4, abs=1e-6), name


@pytest.mark.parametrize("source", ["logits", "hidden"])
def test_train_under_bf16_autocast_keeps_fp32_weights(tiny_model_dir, arithmetic_task, tmp_path,
                                                      one_thread, source):
    """Mixed precision (what `autocast: auto` does on a GPU), here on CPU: the forward passes
    run in bf16, the weights and their update stay fp32, and the first step's statistics
    match the fp32 run's within bf16 rounding (the same rollouts: generation is in bf16 too,
    so only the first step is compared)."""
    from train_helpers import tiny_config

    from ict.training.trainer import train

    lines = {}
    for autocast in ("off", "bf16"):
        result = train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / autocast, num_steps=1,
                                   statistics_from=source, autocast=autocast, eval_size=0))
        lines[autocast] = result.metrics[0]
        from safetensors.torch import load_file
        weights = load_file(str(next(result.checkpoint.glob("*.safetensors"))))
        assert {tensor.dtype for tensor in weights.values()} == {torch.float32}
    assert lines["bf16"]["entropy"] == pytest.approx(lines["off"]["entropy"], rel=0.05)
    assert lines["bf16"]["entropy"] != lines["off"]["entropy"]  # bf16 compute did happen


def test_head_fields_at_their_identity_values_are_accepted(tiny_tokenizer):
    """A scale or multiplier of 1 (Granite's default logits_scaling=1.0) and an unpadded vocabulary
    as large as the head's change no logit: accepted, and hidden @ W.T is the logits (float64)."""
    vocab = len(tiny_tokenizer)
    model = tiny_model(vocab, seed=1).double()
    for name in ("logits_scaling", "logit_scale", "output_multiplier", "lm_head_multiplier"):
        setattr(model.config, name, 1.0)
    model.config.unpadded_vocab_size = vocab
    weight, bias = linear_lm_head(model)
    assert bias is None
    batch = grouped_batch(vocab, (2, 2))
    with torch.no_grad():
        torch.testing.assert_close(response_hidden(model, batch) @ weight.T, response_logits(model, batch),
                                   rtol=0, atol=1e-12)

"""The three engines compute one formula. On small random batches (left-padded prompts, ragged
responses, tool results masked anywhere in a completion, finished or cut rows, random advantages
and old log-probs), for ICT's variants and the baselines, each aggregation and denominator: verl's
registered policy loss "ict" (through its FSDP engine's data path, one micro-batch or verl's own
cut into several), ICTGRPOTrainer's loss (TRL 1.16's own ``_compute_loss``) and ``ict train``'s
step (``accumulate_gradients`` at every micro-batch size) give the selection, loss and gradient of
``ict.core.selectors.select`` + ``ict.core.loss.policy_loss`` on the same statistics.

A random draw (``random``, ``clip_cov``, ties) takes one key per position of the padded batch,
so it is equal across engines only on the same layout: verl v0 pads to the response cap, v1 and
``ict train`` to the longest response, and verl's token budget (``use_dynamic_bsz``) reorders rows."""

from __future__ import annotations

from functools import partial
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from verl_helpers import (
    GROUP,
    PROMPT,
    RESPONSE,
    TEMPERATURE,
    UIDS,
    ToyLM,
    actor_config,
    engine,
    ict_verl,
    micro_batch,
    ppo_loss,
    tu,
)

from ict.core.loss import PolicyLossConfig, policy_loss
from ict.core.selectors import SelectionInputs, required_js_references, select
from ict.core.stats import token_statistics
from ict.integrations import parse_token_selector

AGGREGATIONS = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean_token_mean",
                "seq-mean-token-sum-norm": "seq_mean_token_sum_norm"}
SPECS = ["ict", "ict:preset=batch", "ict:reference=group_mean,ratio=0.3", "ict:scope=group,ratio=0.2",
         "ict:reference=seq_mean,ratio=0.3", "entropy:ratio=0.2", "stapo:tau_p=0.1,quantile=0.75",
         "kl_cov:ratio=0.2,kl_coef=1.0", "random:ratio=0.3", "all", "ict:reference=prev,unit=token_id,ratio=0.3",
         "ict:reference=group_mean_loo_absorbing,metric=kl,scope=group,ratio=0.3", "ict:complement=true,ratio=0.5",
         "ict:reference=group_mean_loo,metric=wasserstein,scope=batch,ratio=0.2",
         "clip_cov:ratio=0.2,cov_low=-100,cov_high=100"]
ROWS = len(UIDS)


@st.composite
def batches(draw):
    """A verl batch of 2 prompts x 3 completions: prompt lengths per prompt, response lengths
    1..RESPONSE, an optional tool result (a hole in response_mask) per row, advantages (equal
    within a row, as verl's GRPO gives) and old log-probs."""
    prompt_lengths = [draw(st.integers(1, PROMPT)) for _ in range(ROWS // GROUP)]
    lengths = [draw(st.integers(1, RESPONSE)) for _ in range(ROWS)]
    holes = {}
    for row, length in enumerate(lengths):
        if draw(st.booleans()):  # anywhere: at the start, the end, or the whole response
            start = draw(st.integers(0, length - 1))
            holes[row] = range(start, draw(st.integers(start + 1, length)))
    advantages = [draw(st.sampled_from([0.0, 1.0, -1.0, 0.5, -2.0, 0.7071])) for _ in range(ROWS)]
    seed = draw(st.integers(0, 2**16))
    return prompt_lengths, lengths, holes, advantages, seed


def make_batch(prompt_lengths, lengths, holes, advantages, seed):
    """verl's rollout layout (tests/verl_helpers.py's make_batch, with the drawn shapes)."""
    generator = torch.Generator().manual_seed(seed)
    prompts = torch.zeros(ROWS, PROMPT, dtype=torch.long)
    responses = torch.zeros(ROWS, RESPONSE, dtype=torch.long)
    attention = torch.zeros(ROWS, PROMPT + RESPONSE, dtype=torch.long)
    tokens = {uid: torch.randint(1, 13, (PROMPT,), generator=generator) for uid in dict.fromkeys(UIDS)}
    for row, (uid, length) in enumerate(zip(UIDS, lengths)):
        p_len = prompt_lengths[row // GROUP]
        prompts[row, PROMPT - p_len:] = tokens[uid][:p_len]
        responses[row, :length] = torch.randint(1, 13, (length,), generator=generator)
        attention[row, PROMPT - p_len: PROMPT + length] = 1
    response_mask = attention[:, PROMPT:].clone()
    for row, positions in holes.items():
        response_mask[row, list(positions)] = 0
    old = -torch.rand(ROWS, RESPONSE, generator=generator) * 3.0
    return {"prompts": prompts, "responses": responses, "input_ids": torch.cat([prompts, responses], 1),
            "attention_mask": attention, "position_ids": (attention.cumsum(-1) - 1).clamp(min=0),
            "response_mask": response_mask,
            "advantages": torch.tensor(advantages)[:, None] * response_mask, "old_log_probs": old * response_mask}


def reference(batch, spec, loss_agg_mode, generator=None, width=None, **config):
    """select + policy_loss on the padded logits (column P + t - 1 predicts response token t),
    the responses cut to ``width`` (None: the longest response; the tie-breaking draw is one key
    per position of the padded batch, so it depends on the width: verl v0 pads to the response
    cap, v1 and ``ict train`` to the longest response); a row is finished when its response (tool
    results included) ends before that width. Returns (loss, token-table gradient, selection)."""
    model = ToyLM()
    lengths = batch["attention_mask"][:, PROMPT:].sum(-1)
    width = int(lengths.max()) if width is None else width
    logits = model(batch["input_ids"], batch["position_ids"]).logits[:, PROMPT - 1: PROMPT + width - 1]
    cut = {key: batch[key][:, :width] for key in ("responses", "response_mask", "advantages", "old_log_probs")}
    name, options = parse_token_selector(spec)
    mask = cut["response_mask"].bool()
    group_ids = torch.tensor([index // GROUP for index in range(ROWS)])
    stats = token_statistics(logits, cut["responses"], mask, temperature=TEMPERATURE,
                             js_references=required_js_references(name, options), group_ids=group_ids,
                             finished=lengths < width)
    selection = select(name, SelectionInputs(
        stats=stats.detached(), response_mask=mask, advantages=cut["advantages"], token_ids=cut["responses"],
        group_ids=group_ids, old_log_probs=cut["old_log_probs"], clip_range=(0.2, 0.28), generator=generator),
        **options)
    loss_config = PolicyLossConfig(clip_low=0.2, clip_high=0.28, aggregation=AGGREGATIONS[loss_agg_mode],
                                   **config)
    loss, _ = policy_loss(stats, cut["old_log_probs"], cut["advantages"], mask, selection.mask, loss_config,
                          kl_penalty=selection.kl_penalty)
    loss.backward()
    return loss.detach(), model.token.grad, selection


def verl_path(batch, spec, loss_agg_mode, remove_padding, v1, **policy):
    """verl's path on one micro-batch: prepare inputs -> model -> prepare outputs (ict's hook) ->
    ppo_loss -> "ict". Returns (loss, token-table gradient)."""
    model, config = ToyLM(), actor_config(spec, loss_agg_mode, **policy)
    data, fsdp = micro_batch(batch, remove_padding, v1=v1), engine()
    inputs, output_args = fsdp.prepare_model_inputs(data)
    loss_function = partial(ppo_loss, config=config)
    output = fsdp.prepare_model_outputs(model(**inputs), output_args, data, loss_function)
    loss, _ = loss_function(model_output=output, data=data, dp_group=None)
    loss.backward()
    return loss.detach(), model.token.grad


SETTINGS = settings(max_examples=25, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


@SETTINGS
@given(drawn=batches(), spec=st.sampled_from(SPECS), loss_agg_mode=st.sampled_from(sorted(AGGREGATIONS)),
       remove_padding=st.booleans(), v1=st.booleans(), denominator=st.sampled_from(["selected", "all"]),
       dual_clip=st.booleans())
# row 0 cut at the cap inside a tool result: truncated (its attention reaches the cap), not finished
@example(drawn=([4, 2], [6, 2, 4, 1, 6, 3], {0: range(2, 6)}, [1.0, -1.0, 0.5, 0.0, 1.0, -2.0], 3), spec="ict",
         loss_agg_mode="token-mean", remove_padding=True, v1=False, denominator="selected", dual_clip=False)
# every score 0 (one-token responses): the top token is drawn among ties, by keys over v0's cap width
@example(drawn=([1, 1], [1] * 6, {}, [0.0, 0.0, 0.0, 1.0, 0.0, 0.0], 0), spec="ict:preset=batch",
         loss_agg_mode="seq-mean-token-mean", remove_padding=False, v1=False, denominator="selected", dual_clip=False)
def test_verls_loss_is_select_and_policy_loss_on_one_micro_batch(drawn, spec, loss_agg_mode, remove_padding, v1,
                                                                 denominator, dual_clip):
    """verl's registered loss "ict" on one micro-batch (v0 or v1 layout, packed or padded, dual
    clip on or off): select + policy_loss on the padded logits, in value and gradient."""
    batch = make_batch(*drawn)
    dual_clip &= not spec.startswith("clip_cov")  # refused beside Clip-Cov (loss_config_of)
    ict_verl._selections.update(step=-1, index=0)
    loss, grad = verl_path(batch, spec, loss_agg_mode, remove_padding, v1, ict_denominator=denominator,
                           ict_dual_clip=dual_clip)
    generator = torch.Generator().manual_seed(ict_verl.selection_seed(0, 0, 0))
    # v0 pads to the response cap (also seq-mean-token-sum-norm's L), v1 to the longest response
    clip_ratio_c = actor_config("all").clip_ratio_c if dual_clip else None
    expected, expected_grad, _ = reference(batch, spec, loss_agg_mode, generator, None if v1 else RESPONSE,
                                           denominator=denominator, clip_ratio_c=clip_ratio_c)
    torch.testing.assert_close(loss, expected, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-4)


class ToyCausalLM(torch.nn.Module):
    """ToyLM behind the interface ``ict train``'s forward calls (a Hugging Face causal LM's)."""

    def __init__(self) -> None:
        super().__init__()
        self.toy = ToyLM()

    def forward(self, input_ids, position_ids, logits_to_keep=0, **unused):
        logits = self.toy(input_ids, position_ids).logits
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits,
                               past_key_values=None)


def ict_train_gradient(batch, spec, loss_agg_mode, micro_batch_size, seed, **config):
    """``ict train``'s step (accumulate_gradients) on the batch cut to its longest response, in
    micro-batches of ``micro_batch_size`` rows: the token-table gradient."""
    from ict.models.rollout import RolloutBatch
    from ict.training.step import Method, StepContext, accumulate_gradients

    width = int(batch["attention_mask"][:, PROMPT:].sum(-1).max())
    rollout = RolloutBatch(batch["input_ids"][:, :PROMPT + width], batch["attention_mask"][:, :PROMPT + width],
                           batch["responses"][:, :width], batch["response_mask"][:, :width].bool(), PROMPT)
    model = ToyCausalLM()
    name, options = parse_token_selector(spec)
    context = StepContext(PolicyLossConfig(clip_low=0.2, clip_high=0.28, aggregation=AGGREGATIONS[loss_agg_mode],
                                           **config), TEMPERATURE, shared_prompt=False)
    advantages = batch["advantages"].sum(-1) / batch["response_mask"].sum(-1).clamp(min=1)
    old = batch["old_log_probs"][:, :width].clone()
    accumulate_gradients(model, rollout, advantages, old, Method.of(name, options), context,
                         micro_batch_size=micro_batch_size, group_size=GROUP, selection_seed=seed)
    return model.toy.token.grad


@SETTINGS
@given(drawn=batches(), spec=st.sampled_from(SPECS), loss_agg_mode=st.sampled_from(sorted(AGGREGATIONS)),
       micro_batch_size=st.sampled_from([1, 2, 3, 6]), denominator=st.sampled_from(["selected", "all"]))
def test_ict_trains_step_is_verls_loss(drawn, spec, loss_agg_mode, micro_batch_size, denominator):
    """``ict train``'s step on the same batch (no tool results: ict's rollouts have none), at every
    micro-batch size, gives the gradient of verl v1's loss (padded to the longest response too)."""
    prompt_lengths, lengths, _, advantages, seed = drawn
    batch = make_batch(prompt_lengths, lengths, {}, advantages, seed)  # no tool results
    selection_seed = ict_verl.selection_seed(0, 0, 0)
    grad = ict_train_gradient(batch, spec, loss_agg_mode, micro_batch_size, selection_seed, denominator=denominator)
    ict_verl._selections.update(step=-1, index=0)
    _, verl_grad = verl_path(batch, spec, loss_agg_mode, True, True, ict_denominator=denominator)
    torch.testing.assert_close(grad, verl_grad, atol=1e-5, rtol=1e-4)


def verl_micro_batches(batch, spec, loss_agg_mode, group, v1, split, **policy):
    """verl's own forward_backward_batch over the mini-batch cut by ``split``: an int is
    ``ppo_micro_batch_size_per_gpu``, a string ``"tokens=N"`` a dynamic token budget. Returns
    the token-table gradient."""
    model, config = ToyLM(), actor_config(spec, loss_agg_mode, **policy)
    data, fsdp = micro_batch(batch, True, v1=v1), engine()
    if v1:
        data["loss_mask"] = data["response_mask"]  # v1's agent loop writes it (forward_backward_batch reads it)
    fsdp.module, fsdp._autocast_dtype, fsdp.scaler = model, torch.float32, None
    fsdp.get_data_parallel_group = lambda: group
    fsdp.get_data_parallel_size = lambda: 1
    fsdp.engine_config.use_no_sync_for_gradient_accumulation = False
    if isinstance(split, str):
        tu.assign_non_tensor(data, use_dynamic_bsz=True, max_token_len_per_gpu=int(split.split("=")[1]))
    else:
        tu.assign_non_tensor(data, use_dynamic_bsz=False, micro_batch_size_per_gpu=split)
    fsdp.forward_backward_batch(data, partial(ppo_loss, config=config))
    return model.token.grad


@SETTINGS
@given(drawn=batches(), spec=st.sampled_from(SPECS), loss_agg_mode=st.sampled_from(sorted(AGGREGATIONS)),
       v1=st.booleans(), split=st.sampled_from([1, 2, 3, 6, "tokens=12", "tokens=22"]),
       denominator=st.sampled_from(["selected", "all"]))
# v1: micro-batches of widths 5 and 4, whose Dr. GRPO L is the mini-batch's 5
@example(drawn=([4, 2], [5, 3, 5, 1, 4, 4], {}, [1.0, -1.0, 0.5, 0.0, 1.0, -2.0], 0), spec="all",
         loss_agg_mode="seq-mean-token-sum-norm", v1=True, split=3, denominator="selected")
def test_verls_micro_batches_give_the_whole_mini_batchs_gradient(drawn, spec, loss_agg_mode, v1, split,
                                                                 denominator, single_process_group):
    """However verl cuts the mini-batch (fixed size or a token budget), the gradient is the whole
    mini-batch's; a cut through a prompt's completions is refused in one line where the scores
    need the whole group (the group_mean references). Under v1 each micro-batch is padded to its
    own longest response (seq-mean-token-sum-norm's L is still the mini-batch's widest)."""
    from ict.core.errors import UsageError
    from ict.core.stats import needs_groups

    batch = make_batch(*drawn)
    ict_verl._selections.update(step=-1, index=0)
    name, options = parse_token_selector(spec)
    try:
        grad = verl_micro_batches(batch, spec, loss_agg_mode, single_process_group, v1, split,
                                  ict_denominator=denominator)
    except UsageError as error:
        assert needs_groups(required_js_references(name, options)), str(error)
        assert "\n" not in str(error) and "whole groups" in str(error)
        return
    generator = torch.Generator().manual_seed(ict_verl.selection_seed(0, 0, 0))
    _, expected_grad, selection = reference(batch, spec, loss_agg_mode, generator, None if v1 else RESPONSE,
                                            denominator=denominator)
    if isinstance(split, str) and (spec.startswith(("random", "clip_cov")) or bool(selection.tie_decided.any())):
        return  # a token budget reorders the rows: another draw (keys per position), as likely
    torch.testing.assert_close(grad, expected_grad, atol=1e-5, rtol=1e-4)


# ---------------------------------------------------------------------------------------------
# TRL 1.16: ICTGRPOTrainer's loss through TRL's own _compute_loss

TRL_SPECS = ["ict", "ict:preset=batch", "ict:reference=group_mean,ratio=0.3", "ict:scope=group,ratio=0.2",
             "entropy:ratio=0.2", "stapo:tau_p=0.1,quantile=0.75", "all"]
TRL_ROWS, TRL_PROMPT, TRL_COMPLETION = 4, 3, 7


@pytest.fixture(scope="module")
def trl_trainer(tiny_model_dir, tmp_path_factory):
    from trl_helpers import loss_trainer_for

    trainer = loss_trainer_for(tiny_model_dir, tmp_path_factory)
    trainer.current_gradient_accumulation_steps = 1
    return trainer


@st.composite
def trl_inputs(draw):
    """4 completions of 2 prompts (left-padded), lengths 1..7, an optional tool result each (TRL's
    ``tool_mask``), each ending in EOS or pad (finished) or not (cut at the cap), advantages, the old
    log-probs' perturbation and a seed."""
    lengths = [draw(st.integers(1, TRL_COMPLETION)) for _ in range(TRL_ROWS)]
    holes = {row: draw(st.integers(0, length - 1)) for row, length in enumerate(lengths) if draw(st.booleans())}
    ends = [draw(st.sampled_from([None, 1, 0])) for _ in range(TRL_ROWS)]  # cut, EOS, pad
    advantages = [draw(st.sampled_from([0.0, 1.0, -1.0, 0.5, -2.0])) for _ in range(TRL_ROWS)]
    return lengths, holes, ends, advantages, draw(st.sampled_from([0.0, 0.3])), draw(st.integers(0, 2**16))


def make_trl_inputs(trainer, lengths, holes, ends, advantages, perturb, seed):
    from ict.integrations.trl import GROUP_KEY

    generator = torch.Generator().manual_seed(seed)
    vocab = trainer.model.config.vocab_size
    prompt_ids = torch.randint(3, vocab, (TRL_ROWS, TRL_PROMPT), generator=generator)
    prompt_ids[1], prompt_ids[3] = prompt_ids[0], prompt_ids[2]
    prompt_mask = torch.ones(TRL_ROWS, TRL_PROMPT, dtype=torch.long)
    prompt_mask[2:, 0] = 0
    completion_ids = torch.randint(3, vocab, (TRL_ROWS, TRL_COMPLETION), generator=generator)
    completion_mask = (torch.arange(TRL_COMPLETION)[None, :] < torch.tensor(lengths)[:, None]).long()
    tool_mask = torch.ones_like(completion_mask)
    for row, length in enumerate(lengths):
        completion_ids[row, length:] = 0  # pad
        if ends[row] is not None:
            completion_ids[row, length - 1] = ends[row]  # EOS (1) or pad (0): finished, by TRL's test
        if row in holes:
            tool_mask[row, holes[row]] = 0
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": completion_mask, "tool_mask": tool_mask, "advantages": torch.tensor(advantages),
              GROUP_KEY: torch.tensor([0, 0, 1, 1])}
    logits = logits_of(trainer, inputs)
    current = torch.log_softmax(logits / trainer.temperature, -1).gather(-1, completion_ids[..., None])[..., 0]
    old = current.detach() + perturb * torch.randn(current.shape, generator=generator)
    inputs["old_per_token_logps"] = old * completion_mask
    inputs["num_items_in_batch"] = (completion_mask * tool_mask).sum()
    return inputs


def logits_of(trainer, inputs):
    """The model's logits at the completion positions ``[B, C, V]`` (with gradient)."""
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], 1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], 1)
    return trainer.model(input_ids=ids, attention_mask=attention).logits[:, TRL_PROMPT - 1:-1].float()


@settings(max_examples=25, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(drawn=trl_inputs(), spec=st.sampled_from(TRL_SPECS), loss_type=st.sampled_from(["grpo", "bnpo", "dr_grpo",
                                                                                       "dapo"]))
def test_trls_loss_is_select_and_policy_loss(trl_trainer, drawn, spec, loss_type):
    """Through TRL's _compute_loss with selection_denominator="ours": the selection is the one
    select makes on the statistics of the same logits (group tags, tool results out of the
    response, finished = the last completion id is EOS or pad), and the loss and LM-head gradient
    are policy_loss's in the loss type's aggregation (OURS_AGGREGATION)."""
    from trl_helpers import head_grad

    from ict.core.seeding import selection_base_seed
    from ict.core.selectors import ranking_population
    from ict.integrations.trl import OURS_AGGREGATION, selection_generator

    trainer = trl_trainer
    name, options = parse_token_selector(spec)
    references = required_js_references(name, options)
    trainer.selector_name, trainer.selector_options = name, options
    trainer.js_references, trainer.population = references, ranking_population(name, options)
    trainer.loss_type, trainer.selection_denominator = loss_type, "ours"
    records = []
    trainer.on_selection = records.append
    inputs = make_trl_inputs(trainer, *drawn)
    try:
        loss = trainer._compute_loss(trainer.model, inputs)
    finally:
        trainer.selector_name, trainer.selector_options = "kl_cov", {"ratio": 0.2, "kl_coef": 1.5}
        trainer.js_references, trainer.population = (), "batch"
        del trainer.on_selection
    generator = selection_generator(selection_base_seed(options, trainer.args.seed), trainer.state.global_step,
                                    trainer._call_index - 1, "train", torch.device("cpu"))
    mask = (inputs["completion_mask"] * inputs["tool_mask"]).bool()
    logits = logits_of(trainer, inputs)
    lengths = inputs["completion_mask"].sum(-1)
    finished = torch.tensor([int(inputs["completion_ids"][row, lengths[row] - 1]) in (0, 1)
                             for row in range(TRL_ROWS)])
    stats = token_statistics(logits, inputs["completion_ids"], mask, temperature=trainer.temperature,
                             js_references=references, group_ids=inputs["ict_group_ids"],
                             finished=finished)
    selection = select(name, SelectionInputs(
        stats=stats.detached(), response_mask=mask, advantages=inputs["advantages"],
        token_ids=inputs["completion_ids"], group_ids=inputs["ict_group_ids"],
        old_log_probs=inputs["old_per_token_logps"], clip_range=(0.2, 0.28), generator=generator), **options)
    assert torch.equal(records[-1]["selected"].bool() & mask, selection.mask & mask)
    config = PolicyLossConfig(clip_low=trainer.epsilon_low, clip_high=trainer.epsilon_high,
                              aggregation=OURS_AGGREGATION[loss_type],
                              max_response_length=trainer.max_completion_length if loss_type == "dr_grpo" else None)
    expected, _ = policy_loss(stats, inputs["old_per_token_logps"], inputs["advantages"], mask, selection.mask, config)
    torch.testing.assert_close(loss.double(), expected.double(), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(head_grad(trainer, loss), head_grad(trainer, expected), atol=1e-5, rtol=1e-4)

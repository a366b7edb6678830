"""What the verl integration tests share: verl 0.9's own functions (skipped where verl is not
importable), a tiny batch (2 prompts x 3 completions, left-padded prompts, ragged responses), a toy
LM, verl's loss through its FSDP engine's data path (``verl_loss``), the reference independent
of verl (``reference_loss``: the padded logits, ``ict.core.selectors.select`` and
``ict.core.loss.policy_loss``), and verl's config as the example launch script composes it
(``launch_config``)."""

from __future__ import annotations

import os
import subprocess
import warnings
from functools import partial
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip("verl.workers.engine.fsdp.transformer_impl",
                        reason="verl 0.9 is not importable here (it needs its own environment; "
                               "see docs/scaling.md, section verl)")
    import verl
    from verl import DataProto
    from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: F401 (for the tests)
    from verl.utils import tensordict_utils as tu
    from verl.utils import torch_functional as verl_F
    from verl.workers.config import FSDPActorConfig
    from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead
    from verl.workers.utils.losses import ppo_loss
    from verl.workers.utils.padding import left_right_2_no_padding, response_to_nested

    from ict.integrations import verl as ict_verl

from ict.core.loss import PolicyLossConfig, policy_loss
from ict.core.selectors import SelectionInputs, required_js_references, select
from ict.core.stats import token_statistics
from ict.integrations import parse_token_selector

VOCAB, PROMPT, RESPONSE, GROUP = 13, 4, 6, 3
TEMPERATURE = 0.8
PROMPT_LENGTHS = [4, 4, 4, 2, 2, 2]  # two prompts, 3 completions each
RESPONSE_LENGTHS = [6, 3, 5, 1, 6, 4]
UIDS = ["p0", "p0", "p0", "p1", "p1", "p1"]
LAUNCH_SCRIPT = Path(__file__).resolve().parents[1] / "examples" / "verl" / "run_gsm8k.sh"
AGGREGATIONS = {"token-mean": "token_mean", "seq-mean-token-mean": "seq_mean_token_mean",
                "seq-mean-token-sum-norm": "seq_mean_token_sum_norm"}


def make_batch(seed: int = 0, response_lengths: list[int] | None = None,
               tool_results: dict[int, range] | None = None) -> dict[str, torch.Tensor]:
    """Left-padded prompts, right-padded responses, as verl's rollout hands them over;
    ``tool_results``: row -> response positions of tool results (in the attention mask, 0 in
    ``response_mask``: verl's multi-turn agent loop layout)."""
    response_lengths = RESPONSE_LENGTHS if response_lengths is None else response_lengths
    generator = torch.Generator().manual_seed(seed)
    rows = len(UIDS)
    prompts = torch.zeros(rows, PROMPT, dtype=torch.long)
    responses = torch.zeros(rows, RESPONSE, dtype=torch.long)
    attention = torch.zeros(rows, PROMPT + RESPONSE, dtype=torch.long)
    # uids in first-appearance order: a set's order follows the process's string-hash seed, so the
    # spawned ranks of the two-rank test would draw other prompts than the reference's process
    prompt_tokens = {uid: torch.randint(1, VOCAB, (PROMPT,), generator=generator) for uid in dict.fromkeys(UIDS)}
    for row, (uid, p_len, r_len) in enumerate(zip(UIDS, PROMPT_LENGTHS, response_lengths)):
        prompts[row, PROMPT - p_len:] = prompt_tokens[uid][:p_len]
        responses[row, :r_len] = torch.randint(1, VOCAB, (r_len,), generator=generator)
        attention[row, PROMPT - p_len: PROMPT + r_len] = 1
    response_mask = attention[:, PROMPT:].clone()
    for row, positions in (tool_results or {}).items():
        response_mask[row, list(positions)] = 0
    position_ids = (attention.cumsum(-1) - 1).clamp(min=0)
    rewards = torch.tensor([1.0, 0.0, 1.0, 0.0, 0.0, 1.0])
    grouped = rewards.view(-1, GROUP)
    advantages = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-6)).view(-1)
    old_log_probs = -torch.rand(rows, RESPONSE, generator=generator) * 3.0
    return {
        "prompts": prompts, "responses": responses,
        "input_ids": torch.cat([prompts, responses], dim=1), "attention_mask": attention,
        "position_ids": position_ids, "response_mask": response_mask,
        "advantages": advantages[:, None] * response_mask, "old_log_probs": old_log_probs * response_mask,
    }


class ToyLM(torch.nn.Module):
    """logits = token embedding + position embedding (any differentiable map of the inputs)."""

    def __init__(self) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(1)
        self.token = torch.nn.Parameter(torch.randn(VOCAB, VOCAB, generator=generator) * 2.0)
        self.position = torch.nn.Parameter(torch.randn(PROMPT + RESPONSE, VOCAB, generator=generator))

    def forward(self, input_ids, position_ids, **unused):
        return SimpleNamespace(logits=self.token[input_ids] + self.position[position_ids])


def actor_config(spec: str, loss_agg_mode: str = "token-mean", **policy: object) -> FSDPActorConfig:
    """verl's actor config with the policy loss "ict"; the loss follows verl's ``loss_agg_mode``
    and has no full-token warm-up unless ``policy`` says otherwise (the method's defaults are
    tested in test_the_method_defaults_reach_verl)."""
    policy = {"ict_aggregation": "loss_agg_mode", "ict_full_token_warmup_steps": 0, **policy}
    return FSDPActorConfig(
        strategy="fsdp", rollout_n=GROUP, ppo_mini_batch_size=2, ppo_micro_batch_size_per_gpu=6,
        clip_ratio_low=0.2, clip_ratio_high=0.28, loss_agg_mode=loss_agg_mode,
        policy_loss=ict_verl.ICTPolicyLossConfig(loss_mode="ict", ict_selector=spec, **policy))


def engine(step: int | None = None) -> FSDPEngineWithLMHead:
    """verl's FSDP engine object without a model or process group (its tensor methods only);
    ``step``: its LR scheduler's step count (the training step)."""
    instance = object.__new__(FSDPEngineWithLMHead)
    instance.lr_scheduler = None if step is None else SimpleNamespace(last_epoch=step)
    instance.engine_config = SimpleNamespace(entropy_checkpointing=False, entropy_from_logits_with_chunking=False)
    instance.compute_entropy_from_logits = verl_F.entropy_from_logits
    instance.use_ulysses_sp = False
    instance.ulysses_sequence_parallel_size = 1
    instance.pad_to_length = False
    instance.get_data_parallel_group = lambda: None
    return instance


def training_engine(model: torch.nn.Module, group: object, dp_size: int = 1) -> FSDPEngineWithLMHead:
    """verl's FSDP engine object training ``model`` on ``group``'s ranks (no FSDP wrapping: the
    caller averages the gradients); its ``forward_backward_batch`` cuts the micro-batches."""
    fsdp = engine()
    fsdp.module, fsdp._autocast_dtype, fsdp.scaler = model, torch.float32, None
    fsdp.get_data_parallel_group = lambda: group
    fsdp.get_data_parallel_size = lambda: dp_size
    fsdp.engine_config.use_no_sync_for_gradient_accumulation = False
    return fsdp


def micro_batch(batch: dict[str, torch.Tensor], remove_padding: bool, global_batch_size: int = 6,
                rows: slice | list[int] = slice(None), dp_size: int = 1, v1: bool = False):
    """The batch as verl's trainer hands it to the actor worker (``rows``: this rank's share).
    ``v1=False``: the v0 trainer's padded ``DataProto`` through ``left_right_2_no_padding``;
    ``v1=True``: the v1 trainer's format (:func:`v1_batch`)."""
    if v1:
        data = v1_batch(batch, rows)
    else:
        tensors = {key: value[rows] for key, value in batch.items()}
        uids = np.array(UIDS, dtype=object)[rows]
        proto = DataProto.from_dict(tensors=tensors, non_tensors={"uid": uids},
                                    meta_info={"temperature": TEMPERATURE})
        data = left_right_2_no_padding(proto.to_tensordict())
    tu.assign_non_tensor(data, use_remove_padding=remove_padding, calculate_entropy=True,
                         global_batch_size=global_batch_size, dp_size=dp_size,
                         batch_num_tokens=int(batch["response_mask"].sum()))
    return data


def v1_batch(batch: dict[str, torch.Tensor], rows: slice | list[int]):
    """verl v1's worker input: each sample's unpadded fields as its agent loop puts them into
    TransferQueue (verl's ``list_of_dict_to_tensordict``, jagged nested tensors), advantages and
    old log-probs as its trainer writes them back (``response_to_nested``), the temperature as
    its ``extra_info``."""
    rows = list(range(len(UIDS)))[rows] if isinstance(rows, slice) else list(rows)
    samples = []
    for row in rows:
        attended = batch["attention_mask"][row].bool()
        prompt = batch["prompts"][row][attended[:PROMPT]]
        response = batch["responses"][row][attended[PROMPT:]]
        input_ids = torch.cat([prompt, response])
        samples.append({"prompts": prompt, "responses": response, "input_ids": input_ids,
                        "attention_mask": torch.ones_like(input_ids), "position_ids": torch.arange(len(input_ids)),
                        "response_mask": batch["response_mask"][row][attended[PROMPT:]], "uid": UIDS[row]})
    data = tu.list_of_dict_to_tensordict(samples)
    for key in ("prompts", "responses", "input_ids", "attention_mask", "position_ids", "response_mask"):
        data[key] = torch.nested.as_nested_tensor([sample[key] for sample in samples], layout=torch.jagged)
    for key in ("advantages", "old_log_probs"):
        data[key] = response_to_nested(batch[key][rows], data["response_mask"])
    tu.assign_non_tensor(data, temperature=TEMPERATURE)
    return data


def verl_loss(spec: str, remove_padding: bool, loss_agg_mode: str = "token-mean",
              rows: slice | list[int] = slice(None), dp_group: object = None, step: int | None = None,
              response_lengths: list[int] | None = None, pad_to_length: int = 0, v1: bool = False,
              **policy: object):
    """verl's path: prepare inputs -> model -> prepare outputs (our hook) -> ppo_loss -> "ict"."""
    batch, model, config = make_batch(response_lengths=response_lengths), ToyLM(), actor_config(spec, loss_agg_mode, **policy)
    dp_size = 1 if dp_group is None else torch.distributed.get_world_size(dp_group)
    data, fsdp = micro_batch(batch, remove_padding, rows=rows, dp_size=dp_size, v1=v1), engine(step)
    fsdp.pad_to_length, fsdp.pad_to_length_bucket = bool(pad_to_length), pad_to_length
    fsdp.get_data_parallel_group = lambda: dp_group
    inputs, output_args = fsdp.prepare_model_inputs(data)
    output = model(**inputs)
    loss_function = partial(ppo_loss, config=config)
    model_output = fsdp.prepare_model_outputs(output, output_args, data, loss_function)
    loss, metrics = loss_function(model_output=model_output, data=data, dp_group=None)
    loss.backward()
    return loss.detach(), model.token.grad, metrics


def config_loss(config: FSDPActorConfig, model: ToyLM) -> tuple[torch.Tensor, torch.Tensor, torch.dtype]:
    """verl's path (remove-padding) under a ready actor config: the loss and the gradient to
    `model`'s token table, in float64, and the dtype of the log-probs the loss was given."""
    data, fsdp = micro_batch(make_batch(), True), engine()
    inputs, output_args = fsdp.prepare_model_inputs(data)
    loss_function = partial(ppo_loss, config=config)
    model_output = fsdp.prepare_model_outputs(model(**inputs), output_args, data, loss_function)
    loss, _ = loss_function(model_output=model_output, data=data, dp_group=None)
    loss.backward()
    return loss.detach().double(), model.token.grad.double(), model_output["log_probs"].values().dtype


def reference_loss(spec: str, loss_agg_mode: str = "token-mean", denominator: str = "selected",
                   clip_ratio_c: float | None = None, generator: torch.Generator | None = None,
                   response_lengths: list[int] | None = None):
    """Independent of verl: padded logits, column P + t - 1 predicts response token t; the
    responses padded to the longest one (a random draw depends on the padded width)."""
    batch, model = make_batch(response_lengths=response_lengths), ToyLM()
    width = max(RESPONSE_LENGTHS if response_lengths is None else response_lengths)
    logits = model(batch["input_ids"], batch["position_ids"]).logits[:, PROMPT - 1: PROMPT + width - 1]
    batch = {key: value[:, :width] if key in ("responses", "response_mask", "advantages", "old_log_probs")
             else value for key, value in batch.items()}
    name, options = parse_token_selector(spec)
    mask = batch["response_mask"].bool()
    group_ids = torch.tensor([0, 0, 0, 1, 1, 1])
    stats = token_statistics(logits, batch["responses"], mask, temperature=TEMPERATURE,
                             js_references=required_js_references(name, options), group_ids=group_ids)
    config = PolicyLossConfig(clip_low=0.2, clip_high=0.28, aggregation=AGGREGATIONS[loss_agg_mode],
                              denominator=denominator, clip_ratio_c=clip_ratio_c)
    selection = select(name, SelectionInputs(
        stats=stats.detached(), response_mask=mask, advantages=batch["advantages"],
        token_ids=batch["responses"], group_ids=group_ids, old_log_probs=batch["old_log_probs"],
        clip_range=(0.2, 0.28), generator=generator), **options)
    loss, _ = policy_loss(stats, batch["old_log_probs"], batch["advantages"], mask, selection.mask,
                          config, kl_penalty=selection.kl_penalty)
    loss.backward()
    return loss.detach(), model.token.grad, selection


def launch_config(method: str = "ict", *extra: str):
    """verl's own ``ppo_trainer`` config composed with the example launch script's overrides
    (``METHOD=method``) and ``extra``, as ``python -m verl.trainer.main_ppo`` composes it."""
    from hydra import compose, initialize_config_dir

    environment = {"PATH": os.environ.get("PATH", ""), "METHOD": method, "DRY_RUN": "1", "DATA": "/data"}
    overrides = subprocess.run(["bash", str(LAUNCH_SCRIPT)], env=environment, capture_output=True, text=True,
                               check=True).stdout.splitlines()
    config_dir = Path(verl.__file__).parent / "trainer" / "config"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with initialize_config_dir(config_dir=str(config_dir), version_base=None):
            return compose("ppo_trainer", overrides=[*overrides, *extra])

"""What the TRL integration tests share: the driver script that trains through TRL's real
GRPOTrainer in a process of its own, how to run it, the float64 references the selections and
scores are checked against (written here, independent of ict.core), and for the loss tests TRL's
own _compute_loss on a stand-in trainer, a constructed ICTGRPOTrainer to call it on, and its
inputs."""

from __future__ import annotations

import math
import os
import socket
import subprocess
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DRIVER = ROOT / "tests" / "trl_integration_run.py"


def run_driver(command: list[str], out_dir: Path, **extra_env: str) -> None:
    """Run ``command`` in ``out_dir`` with this checkout on PYTHONPATH, offline, one thread; the
    output's tail is the assertion message when it fails."""
    env = {**os.environ, **extra_env, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    result = subprocess.run(command, env=env, cwd=out_dir, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


def free_port() -> int:
    """A TCP port free on this machine now, for a 2-process launch's rendezvous
    (``--main_process_port``): accelerate's default 29500 is shared by every test or session
    launching at the same time, and a rank that reaches another job's store aborts."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def top_fraction_reference(scores: torch.Tensor, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """Top ceil(ratio * N) of the response tokens by score, ties to the earlier row-major position."""
    flat = [(-float(scores[b, t]), b * mask.shape[1] + t, b, t)
            for b in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[b, t]]
    flat.sort()
    count = math.ceil(round(ratio * len(flat), 9))
    reference = torch.zeros_like(mask, dtype=torch.bool)
    for _, _, b, t in flat[:count]:
        reference[b, t] = True
    return reference


def group_mean_js_reference(hidden, weight, mask, group_ids, bf16: bool = False) -> torch.Tensor:
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


def absorbing_js_reference(hidden, weight, mask, group_ids, token_ids, finished=None) -> torch.Tensor:
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


def trl_own_loss(loss_type, advantages, mask, *, training, processes, accumulation, steps_per_generation):
    """TRL 1.16's own GRPOTrainer._compute_loss run on a stand-in trainer whose forward returns
    fixed log-probs equal to the old ones (ratio 1, so its per-token loss is ``-A``): its loss
    aggregation and normalisers, with ``processes`` processes (gathers are the identity)."""
    from collections import defaultdict
    from types import SimpleNamespace

    from trl import GRPOTrainer

    rows, length = mask.shape
    log_probs = torch.full((rows, length), -1.25, dtype=torch.float64)
    trainer = SimpleNamespace(
        _get_per_token_logps_and_entropies=lambda *args, **kwargs: (log_probs, torch.zeros_like(log_probs), None),
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        importance_sampling_level="token", beta=0.0, loss_type=loss_type, epsilon_low=0.2, epsilon_high=0.28,
        args=SimpleNamespace(delta=None, steps_per_generation=steps_per_generation), use_vllm=False,
        model=SimpleNamespace(training=training), current_gradient_accumulation_steps=accumulation,
        accelerator=SimpleNamespace(num_processes=processes, gather=lambda x: x, reduce=lambda x, reduction: x),
        max_completion_length=9, _entropy_bonus_enabled=False, _metrics=defaultdict(lambda: defaultdict(list)))
    inputs = {"prompt_ids": torch.ones(rows, 2, dtype=torch.long), "prompt_mask": torch.ones(rows, 2, dtype=torch.long),
              "completion_ids": torch.ones(rows, length, dtype=torch.long), "completion_mask": mask.long(),
              "advantages": advantages, "old_per_token_logps": log_probs.clone(),
              "num_items_in_batch": torch.tensor(37.0, dtype=torch.float64)}
    return GRPOTrainer._compute_loss(trainer, None, inputs)


def build_loss_trainer(model_dir, out_dir):
    """An ICTGRPOTrainer (KL-Cov, ratio 0.2, kl_coef 1.5; 4 rows, 2 accumulation steps) on the
    tiny model in ``model_dir``, in training mode."""
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


def loss_trainer_for(tiny_model_dir, tmp_path_factory):
    """A constructed ICTGRPOTrainer for calls into TRL's _compute_loss. Module-scoped users are
    built when first used: after a test constructs another trainer, accelerate's shared state
    is re-initialised, so each group of tests gets its own."""
    return build_loss_trainer(tiny_model_dir, tmp_path_factory.mktemp("trl-trainer"))


def loss_inputs(trainer, advantages, perturb):
    """TRL's loss inputs for 4 rows (prompt 3, completion 7, ragged masks): old log-probs are the
    current ones plus ``perturb`` times Gaussian noise on the completion."""
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


def head_grad(trainer, loss):
    """The LM head's gradient of ``loss`` (the model's gradients zeroed first)."""
    trainer.model.zero_grad()
    loss.backward()
    return trainer.model.get_output_embeddings().weight.grad.clone()

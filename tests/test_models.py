"""Model loading, batched generation (left padding, EOS, seeds) and the training-batch layout."""

from __future__ import annotations

import os
import re
import warnings

import pytest
import torch
from conftest import greedy_reference

from ict.core.errors import UsageError
from ict.models.forward import response_logits
from ict.models.loading import load_model_and_tokenizer, resolve_dtype
from ict.models.rollout import SamplingSettings, generate_completions, pack_rollout


def test_load_local_directory(tiny_model_dir):
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), dtype="fp32", device="cpu")
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
    assert next(model.parameters()).dtype == torch.float32
    assert resolve_dtype("auto", torch.device("cpu")) == torch.float32
    assert resolve_dtype("auto", torch.device("cuda")) == torch.bfloat16
    with pytest.raises(UsageError, match="unknown dtype"):
        resolve_dtype("int3", torch.device("cpu"))


def test_lora_wraps_and_freezes_the_base(tiny_model_dir):
    from ict.models.loading import LoraOptions

    model, _ = load_model_and_tokenizer(str(tiny_model_dir), device="cpu",
                                        lora=LoraOptions(rank=4))
    trainable = [name for name, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    assert hasattr(model, "disable_adapter")


def test_a_lora_rank_above_the_target_modules_full_rank_is_refused_in_one_line():
    """A LoRA update B @ A of a module has rank at most min(in, out): a higher --lora-rank only
    adds r x (in + out) parameters (rank 4096 on this 32-wide model took 4,194,304; 100000 hung). It
    is refused above the widest target's min(in, out); at it, it wraps. The tiny Llama: hidden 32,
    MLP 64, k_proj and v_proj 32 -> 16 (2 key-value heads of 8), 2 layers."""
    from conftest import build_tiny_model

    from ict.models.loading import LoraOptions, apply_lora

    def trainable(model) -> int:
        return sum(p.numel() for p in model.parameters() if p.requires_grad)

    with pytest.raises(UsageError, match=r"^lora_rank 33 is above the full rank of the model's LoRA target modules "
                       r"\(q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj: at most 32\); give at most 32$"):
        apply_lora(build_tiny_model(64), LoraOptions(rank=33))
    # per layer, r x (in + out): q 64, k 48, v 48, o 64, gate 96, up 96, down 96 = 512 r
    assert trainable(apply_lora(build_tiny_model(64), LoraOptions(rank=32))) == 2 * 512 * 32
    with pytest.raises(UsageError, match=r"\(k_proj: at most 16\); give at most 16$"):
        apply_lora(build_tiny_model(64), LoraOptions(rank=17, target_modules=["k_proj", "absent"]))
    assert trainable(apply_lora(build_tiny_model(64), LoraOptions(rank=16, target_modules=["k_proj"]))) == 2 * 48 * 16


def test_a_hub_id_with_the_hub_unreachable_fails_at_once(monkeypatch, caplog, capfd):
    """An unreachable hub (here: HF_ENDPOINT on a closed local port, so `hub_reachable` is False)
    makes a hub id that is not in the cache a one-line UsageError without huggingface_hub's five
    retries a file (about 45 s of "Retrying in 8s" lines on an offline machine)."""
    import datasets.config
    import huggingface_hub.constants

    for module, name in ((huggingface_hub.constants, "HF_HUB_OFFLINE"), (datasets.config, "HF_HUB_OFFLINE"),
                         (datasets.config, "HF_DATASETS_OFFLINE")):
        monkeypatch.setattr(module, name, getattr(module, name))  # restored after the test
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    with pytest.raises(UsageError, match="cannot load model 'nobody/no-such-model'") as raised:
        load_model_and_tokenizer("nobody/no-such-model", device="cpu")
    assert "\n" not in str(raised.value)
    printed = caplog.text + "".join(capfd.readouterr())
    assert "Retrying" not in printed and "thrown while requesting" not in printed


def test_missing_local_model_directory():
    with pytest.raises(UsageError, match="not found"):
        load_model_and_tokenizer("./no/such/model", device="cpu")


def test_a_model_directory_under_home_loads_with_a_tilde(tiny_model_dir, monkeypatch):
    # `model: ~/models/x` in a config file, or --model=~/models/x, reaches ict unexpanded
    monkeypatch.setenv("HOME", str(tiny_model_dir.parent))
    model, tokenizer = load_model_and_tokenizer(f"~/{tiny_model_dir.name}", device="cpu")
    assert model.config.vocab_size == len(tokenizer)


def test_batched_greedy_generation_matches_unbatched_reference(tiny_model_dir):
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), device="cpu")
    prompts = ["what is 3 + 4 ?", "sum of 1 and 2 ?", [{"role": "user", "content": "what is 9 ?"}]]
    rollout = generate_completions(model, tokenizer, prompts, SamplingSettings(1.0, 8, greedy=True),
                                   num_samples=1, batch_size=3)
    assert rollout.num_prompts == 3 and rollout.num_samples == 1
    for index in range(3):
        expected = greedy_reference(model, rollout.prompt_ids[index], 8, tokenizer.eos_token_id)
        assert rollout.completion_ids[index][0] == expected
        assert rollout.finished[index][0] == (expected[-1] == tokenizer.eos_token_id)
    assert rollout.prompt_texts[0].startswith("<|im_start|>user")  # chat template applied


def test_sampling_is_seeded_and_stops_at_eos(tiny_model_dir):
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), device="cpu")
    state = torch.get_rng_state()
    first = generate_completions(model, tokenizer, ["what is 1 + 1 ?"] * 2, SamplingSettings(1.0, 12),
                                 num_samples=4, batch_size=3, seed=7)
    assert torch.equal(state, torch.get_rng_state())  # the caller's RNG is untouched
    again = generate_completions(model, tokenizer, ["what is 1 + 1 ?"] * 2, SamplingSettings(1.0, 12),
                                 num_samples=4, batch_size=3, seed=7)
    assert first.completion_ids == again.completion_ids
    eos = tokenizer.eos_token_id
    for group, done_group in zip(first.completion_ids, first.finished, strict=True):
        for ids, done in zip(group, done_group, strict=True):
            assert eos not in ids[:-1]
            assert done == (bool(ids) and ids[-1] == eos)
            assert len(ids) <= 12


def test_packed_batch_gives_the_log_probs_of_unpadded_sequences(tiny_model_dir):
    """Left-padded prompts + right-padded responses (with position ids from the mask) give the
    same response log-probs as each sequence run alone."""
    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), device="cpu")
    rollout = generate_completions(model, tokenizer, ["what is 3 ?", "the sum of 1 and 2 and 3 ?"],
                                   SamplingSettings(1.0, 6), num_samples=2, seed=1)
    batch = pack_rollout(rollout, tokenizer.pad_token_id)
    with torch.no_grad():
        logits = response_logits(model, batch)
    log_probs = torch.log_softmax(logits, -1).gather(-1, batch.response_ids.unsqueeze(-1))[..., 0]
    row = 0
    for prompt_index in range(2):
        for sample in range(2):
            prompt = rollout.prompt_ids[prompt_index]
            response = rollout.completion_ids[prompt_index][sample]
            with torch.no_grad():
                alone = model(input_ids=torch.tensor([prompt + response])).logits[0]
            expected = torch.log_softmax(alone[len(prompt) - 1: -1], -1).gather(
                -1, torch.tensor(response).unsqueeze(-1))[:, 0]
            assert int(batch.response_mask[row].sum()) == len(response)
            torch.testing.assert_close(log_probs[row, : len(response)], expected, rtol=1e-4,
                                       atol=1e-5)
            row += 1


def test_one_dtype_resolver_for_train_eval_and_vllm():
    from ict.models.loading import dtype_name

    assert dtype_name("fp16", "cuda") == "float16"  # the trainer's vLLM map once sent fp16 to fp32
    assert dtype_name("auto", "cpu") == "float32" and dtype_name("auto", "cuda") == "bfloat16"
    assert dtype_name("bf16", "cpu") == "bfloat16"


@pytest.mark.parametrize("device", ["meta", "mps", "xpu"])
def test_a_device_other_than_cpu_or_cuda_is_refused_in_one_line(device, tiny_model_dir):
    # it reached from_pretrained / generate and ended in a RuntimeError traceback (exit 1)
    from ict.cli import main

    with pytest.raises(UsageError, match=f"unsupported device '{device}'"):
        load_model_and_tokenizer(str(tiny_model_dir), device=device)
    assert main(["eval", "--model", str(tiny_model_dir), "--benchmarks", "rg:chain_sum:size=1",
                 "--device", device, "--output-dir", str(tiny_model_dir.parent / "no-eval")]) == 2


def test_a_cuda_index_the_machine_lacks_is_refused(monkeypatch):
    from ict.models.loading import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert resolve_device("cuda:1") == torch.device("cuda:1")
    assert resolve_device("cuda") == torch.device("cuda")
    with pytest.raises(UsageError, match="has 2 CUDA device"):
        resolve_device("cuda:2")


def test_mixed_precision_resolution():
    from ict.models.loading import compute_context, resolve_autocast
    from ict.training.config import TrainConfig
    from ict.training.trainer import weights_dtype

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_autocast("auto", cpu) is None and resolve_autocast("auto", cuda) == torch.bfloat16
    assert resolve_autocast("off", cuda) is None and resolve_autocast("bf16", cpu) == torch.bfloat16
    with pytest.raises(UsageError, match="unknown autocast"):
        resolve_autocast("fp8", cpu)
    assert weights_dtype(TrainConfig()) == "fp32"  # auto: fp32 weights on every device
    assert weights_dtype(TrainConfig(dtype="bf16")) == "bf16"
    weight = torch.randn(4, 4)
    with compute_context(cpu, torch.bfloat16):
        assert (weight @ weight).dtype == torch.bfloat16
    with compute_context(cpu, None):
        assert (weight @ weight).dtype == torch.float32


def test_bf16_weights_lose_small_adam_steps_that_fp32_weights_keep():
    """Why `dtype: auto` trains fp32 weights: one AdamW step of lr 2e-5 moves every weight by
    ~2e-5, below half the bf16 spacing of weights of magnitude >= 0.01, so they do not move."""
    torch.manual_seed(0)
    start = torch.randn(10_000) * 0.05
    moved = {}
    for dtype in (torch.float32, torch.bfloat16):
        weight = torch.nn.Parameter(start.to(dtype))
        optimizer = torch.optim.AdamW([weight], lr=2e-5, weight_decay=0.0)
        weight.grad = torch.randn_like(weight)
        before = weight.detach().clone()
        optimizer.step()
        moved[dtype] = float((weight.detach() != before).float().mean())
    assert moved[torch.float32] == 1.0
    assert moved[torch.bfloat16] < 0.3


@pytest.mark.parametrize("family", ["llama attention dropout + LoRA dropout", "gpt2 dropout layers"])
def test_disable_dropout_makes_a_train_mode_forward_the_policys(family):
    """With a model's dropout on (GPT-2's 0.1 defaults, a config's attention_dropout, lora_dropout)
    each train-mode forward was a random draw: the scoring pass's old log-probs and the selector's
    statistics were not the sampling policy's (ratios up to 16.8 before any update in a review's
    run). After `disable_dropout` a train-mode forward equals the eval-mode one."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    from ict.models.loading import LoraOptions, apply_lora, disable_dropout

    torch.manual_seed(0)
    if family.startswith("llama"):
        model = LlamaForCausalLM(LlamaConfig(vocab_size=40, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                             num_attention_heads=4, num_key_value_heads=2, attention_dropout=0.5,
                                             attn_implementation="eager"))
        model = apply_lora(model, LoraOptions(rank=2, dropout=0.5))
    else:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=40, n_embd=32, n_layer=2, n_head=4, n_positions=16))
    ids = torch.randint(0, 40, (2, 9))

    def forward(train: bool) -> torch.Tensor:
        model.train(train)
        with torch.no_grad():
            return model(input_ids=ids).logits

    assert not torch.allclose(forward(True), forward(False))
    assert disable_dropout(model) > 0
    torch.testing.assert_close(forward(True), forward(False), rtol=0, atol=0)
    assert disable_dropout(model) == 0


def test_lora_dropout_needs_dropout_left_on():
    from ict.training.config import TrainConfig

    with pytest.raises(UsageError, match="lora_dropout 0.1 needs disable_dropout: false"):
        TrainConfig(lora_rank=4, lora_dropout=0.1).validate()
    TrainConfig(lora_rank=4, lora_dropout=0.1, disable_dropout=False).validate()
    assert TrainConfig().disable_dropout


@pytest.mark.parametrize("disable", [True, False])
def test_the_trainer_loads_its_policy_with_dropout_off_unless_told(disable, tiny_model_dir, arithmetic_task, tmp_path):
    """`ict train`'s policy, from a checkpoint whose config has attention dropout: in train mode its
    forward is the eval-mode one (`disable_dropout`), unless `disable_dropout: false`."""
    import json
    import shutil

    from train_helpers import tiny_config

    from ict.training.step import ALL_TOKENS
    from ict.training.trainer import _load_policy

    model_dir = tmp_path / "model"
    shutil.copytree(tiny_model_dir, model_dir)
    config_json = json.loads((model_dir / "config.json").read_text())
    (model_dir / "config.json").write_text(json.dumps({**config_json, "attention_dropout": 0.5,
                                                       "attn_implementation": "eager"}))
    config = tiny_config(model_dir, arithmetic_task, tmp_path / "run", disable_dropout=disable, device="cpu")
    model, _ = _load_policy(config, ALL_TOKENS)
    ids = torch.randint(4, 20, (2, 7))
    with torch.no_grad():
        train_logits = model(input_ids=ids).logits
        model.eval()
        eval_logits = model(input_ids=ids).logits
    assert torch.equal(train_logits, eval_logits) == disable


def test_the_cache_directory_expands_a_tilde_and_an_empty_load_error_is_one_line(monkeypatch, tmp_path):
    """ICT_CACHE=~/cache (a tilde no shell expanded, e.g. from a .env file) converted the offline
    default into a directory literally named '~' under the working directory; and a load error
    without a message raised IndexError instead of the one-line refusal."""
    from ict.models import loading

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ICT_CACHE", "~/cache")
    assert loading.cache_root() == tmp_path / "cache"
    error = loading._load_error("org/model", "org/model", OSError())
    assert str(error).startswith("cannot load model 'org/model': OSError (offline?")


def test_lora_scales_its_update_by_alpha_over_rank_and_keeps_its_dropout(tiny_tokenizer):
    """The adapted q_proj computes W x + (alpha / r) B A x (float64, by hand from its weights), with
    the given alpha (not the rank) and the given dropout probability."""
    from conftest import build_tiny_model

    from ict.models.loading import LoraOptions, apply_lora

    model = apply_lora(build_tiny_model(len(tiny_tokenizer)).double(), LoraOptions(rank=2, alpha=6.0, dropout=0.25))
    layer = model.get_base_model().model.layers[0].self_attn.q_proj
    assert layer.lora_dropout["default"].p == 0.25
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        layer.lora_B["default"].weight.copy_(torch.randn(layer.lora_B["default"].weight.shape, generator=generator,
                                                         dtype=torch.float64))
        x = torch.randn(3, layer.in_features, generator=generator, dtype=torch.float64)
        a, b, w = layer.lora_A["default"].weight, layer.lora_B["default"].weight, layer.base_layer.weight
        expected = x @ w.T + 3.0 * (x @ a.T @ b.T)  # alpha / r = 6 / 2
        torch.testing.assert_close(layer.eval()(x), expected, rtol=0, atol=1e-12)


def test_a_missing_relative_path_of_several_directories_is_no_hub_id(monkeypatch):
    """``runs/demo/checkpoints/step-00000020`` mistyped (or run from another directory) is a path:
    a hub id is ``namespace/name``. It was looked up on the hub: "cannot load model ...: Repo id
    must be in the form 'repo_name' or 'namespace/repo_name' ... (offline? pass a local
    directory ...)", after the hub check's wait. A hub id still goes to the hub."""
    import ict.models.loading as loading

    monkeypatch.setattr(loading, "hub_reachable", lambda: True)
    with pytest.raises(UsageError) as error:
        loading.model_source("runs/demo/checkpoints/step-00000020")
    assert str(error.value) == "model directory not found: runs/demo/checkpoints/step-00000020"
    with pytest.raises(UsageError, match="^model directory not found: models/qwen/merged$"):
        loading.model_source("models/qwen/merged")
    assert loading.model_source("Qwen/Qwen2.5-0.5B-Instruct") == "Qwen/Qwen2.5-0.5B-Instruct"


@pytest.mark.parametrize(("kind", "name"), [("file", "merged"), ("file", "./runs/model.safetensors"), ("pipe", "pipe")])
def test_a_model_path_that_is_a_file_or_a_pipe_is_refused_as_no_directory(monkeypatch, tmp_path, capsys, kind, name):
    """``--model merged`` naming a file was read by transformers as a config.json ("cannot load model
    'merged': It looks like the config file at 'merged' is not a valid JSON file. (offline? ...)"), a
    pipe as a hub id ("We couldn't connect to 'https://huggingface.co'"), and ``./FILE`` was
    "model directory not found" though it is there."""
    from ict.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path) if kind == "pipe" else path.write_text("{}")
    assert main(["eval", "--model", name, "--benchmarks", "rg:chain_sum:size=2", "--output-dir", "out", "--quiet"]) == 2
    assert capsys.readouterr().err == (f"error: model {name} is not a directory: pass a model directory (with "
                                       "config.json), or a hub id\n")
    assert not (tmp_path / "out").exists()


def test_a_missing_model_directory_under_home_is_refused_in_one_line(monkeypatch, tmp_path):
    """``~/no-such-model`` (e.g. from a config file) is a path, not a hub id: "model directory not
    found", not a hub lookup of the id '~/no-such-model'."""
    from ict.models.loading import model_source

    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(UsageError, match="model directory not found: ~/no-such-model"):
        model_source("~/no-such-model")


def test_a_cut_short_weights_file_is_refused_in_one_line(tiny_model_dir, tmp_path, capsys):
    """A model.safetensors cut short (an interrupted copy or save) raised safetensors'
    SafetensorError through every command: a traceback (exit 1) instead of exit 2 and one line."""
    import shutil

    from ict.cli import main

    directory = tmp_path / "cut"
    shutil.copytree(tiny_model_dir, directory)
    weights = directory / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(UsageError, match="a weights file is damaged or incomplete") as raised:
        load_model_and_tokenizer(str(directory), device="cpu")
    assert "\n" not in str(raised.value)
    assert main(["eval", "--model", str(directory), "--benchmarks", "rg:chain_sum:size=2", "--limit", "1",
                 "--output-dir", str(tmp_path / "eval")]) == 2
    assert "damaged or incomplete" in capsys.readouterr().err


def test_a_tokenizer_without_pad_and_eos_tokens_is_refused_in_one_line(tiny_model_dir, tmp_path, capsys):
    """With neither a pad nor an EOS token the pad id was None: ``ict inspect --samples`` (which
    generates nothing, so no EOS check ran) failed packing the batch with a TypeError, exit 1."""
    import json
    import shutil

    from ict.cli import main

    directory = tmp_path / "no-eos"
    shutil.copytree(tiny_model_dir, directory)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config.pop("eos_token"), config.pop("pad_token")
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"prompt": "what is 1 + 2 ?", "completion": text}) + "\n"
                               for text in ("3", "so 3")))
    assert main(["inspect", "--model", str(directory), "--samples", str(samples)]) == 2
    assert "has neither a pad nor an EOS token" in capsys.readouterr().err


def test_lora_on_a_model_without_the_target_modules_is_refused_in_one_line():
    """GPT-2 names its projections c_attn / c_proj / c_fc: none of the default targets."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from ict.models.loading import LoraOptions, apply_lora

    model = GPT2LMHeadModel(GPT2Config(vocab_size=32, n_embd=16, n_layer=1, n_head=2, n_positions=32))
    with pytest.raises(UsageError, match="none of the LoRA target modules"):
        apply_lora(model, LoraOptions(rank=2))


def test_a_tokenizer_without_a_pad_token_pads_with_its_eos(tiny_model_dir, tmp_path):
    """A tokenizer with an EOS but no pad token (Llama 3's, Qwen's base) gets EOS as its pad
    (the packed batch and `generate` need a pad id) and left padding."""
    import json
    import shutil

    from ict.models.loading import load_tokenizer

    directory = tmp_path / "no-pad"
    shutil.copytree(tiny_model_dir, directory)
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config.pop("pad_token")
    (directory / "tokenizer_config.json").write_text(json.dumps(config))
    tokenizer, _ = load_tokenizer(str(directory))
    assert tokenizer.pad_token == "<|im_end|>" and tokenizer.pad_token_id == tokenizer.eos_token_id == 1
    assert tokenizer.padding_side == "left"


@pytest.mark.parametrize("lora_rank", [0, 4])
def test_gradient_checkpointing_recomputes_each_layer_in_the_backward(lora_rank, tiny_model_dir, monkeypatch):
    """``gradient_checkpointing=True`` (``--gradient-checkpointing``) runs each decoder layer's
    MLP again in the backward pass (4 calls a step for 2 layers, 2 without), and every trainable
    parameter still gets a gradient (a LoRA adapter over frozen base weights included). Counted
    by patching the MLP class: transformers runs the recompute without module hooks."""
    from ict.models.loading import LoraOptions

    calls = []
    for checkpointing in (False, True):
        with warnings.catch_warnings(record=True) as caught:  # not the name transformers 5.24 deprecated
            warnings.simplefilter("always")
            model, _ = load_model_and_tokenizer(str(tiny_model_dir), device="cpu", lora=LoraOptions(rank=lora_rank),
                                                gradient_checkpointing=checkpointing)
        assert not [str(w.message) for w in caught if "`gradient_checkpointing_enable`" in str(w.message)]
        model.train()
        mlp_class = type(model.get_decoder().layers[0].mlp)
        count, forward = [0], mlp_class.forward

        def counted(self, *args, forward=forward, count=count, **kwargs):
            count[0] += 1
            return forward(self, *args, **kwargs)

        monkeypatch.setattr(mlp_class, "forward", counted)
        model(input_ids=torch.tensor([[5, 6, 7, 8]])).logits.sum().backward()
        monkeypatch.undo()
        calls.append(count[0])
        trainable = [p for p in model.parameters() if p.requires_grad]
        assert trainable and all(p.grad is not None for p in trainable)
    assert calls == [2, 4]


def test_a_lora_checkpoint_outside_ict_eval_is_named_as_one(tiny_model_dir, tmp_path):
    """A LoRA run's checkpoint (tokenizer, adapter/, no config.json) given to ict train's --model
    was refused with 'holds no model: pass ... a run's checkpoints/step-N', which is what was
    passed. The refusal names it a LoRA checkpoint, for the directory and its adapter/ (ict eval
    and ict inspect load it: load_inference_model)."""
    import json
    import shutil

    checkpoint = tmp_path / "step-00000001"
    checkpoint.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tiny_model_dir / name, checkpoint / name)
    (checkpoint / "adapter").mkdir()
    (checkpoint / "adapter" / "adapter_config.json").write_text(json.dumps(
        {"peft_type": "LORA", "base_model_name_or_path": str(tiny_model_dir), "r": 4}))
    for directory in (checkpoint, checkpoint / "adapter"):
        with pytest.raises(UsageError) as refusal:
            load_model_and_tokenizer(str(directory), device="cpu")
        error = str(refusal.value)
        assert f"{directory} is a LoRA checkpoint" in error and "ict eval and ict inspect load it" in error
        assert len(error.strip().splitlines()) == 1


def test_a_lora_checkpoint_of_a_model_given_by_a_relative_path_loads_from_any_directory(
        tiny_model_dir, tmp_path, monkeypatch):
    """A LoRA run of --model ./dir recorded './dir' as its adapter's base model (peft keeps the
    name the model was loaded by), so ict eval and ict inspect of the checkpoint, run from another
    directory, failed with 'model directory not found: ./dir'. The model's path is made absolute
    when loaded; a checkpoint written before that is refused in one line naming the adapter's file."""
    import json

    from ict.models.loading import LoraOptions, load_inference_model

    monkeypatch.chdir(tiny_model_dir.parent)
    model, _ = load_model_and_tokenizer(f"./{tiny_model_dir.name}", device="cpu", lora=LoraOptions(rank=2))
    checkpoint = tmp_path / "step-00000001"
    model.save_pretrained(checkpoint / "adapter")  # as ict.runs.checkpoint.save_checkpoint does
    monkeypatch.chdir(tmp_path)
    merged, tokenizer = load_inference_model(str(checkpoint), device="cpu")
    assert tokenizer.padding_side == "left" and not hasattr(merged, "peft_config")
    config = checkpoint / "adapter" / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "base_model_name_or_path": "./tiny-model"}))
    with pytest.raises(UsageError, match=r"adapter_config.json names its base model by the relative path ./tiny-model, "
                                         r"not a directory here: run from the directory it was trained in"):
        load_inference_model(str(checkpoint), device="cpu")


@pytest.mark.parametrize("field, value, expected", [
    ("num_hidden_layers", 3, "9 tensor(s) of its config.json missing from its weights (e.g. "
                             "model.layers.2.input_layernorm.weight)"),
    ("hidden_size", 64, "of another size in its weights than its config.json gives"),
])
def test_weights_that_do_not_fit_the_config_are_refused_in_one_line(field, value, expected, tiny_model_dir,
                                                                    tmp_path, capsys):
    """A config.json that is not the weights' (a third layer the 2-layer weights lack, or another
    width): from_pretrained initialised the missing layer at random with only a warning table, so
    a run trained or evaluated a partly random model; other sizes raised a RuntimeError (exit 1)."""
    import json
    import shutil

    from ict.cli import main

    directory = tmp_path / "mixed"
    shutil.copytree(tiny_model_dir, directory)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, field: value}))
    with pytest.raises(UsageError, match=re.escape(expected)) as raised:
        load_model_and_tokenizer(str(directory), device="cpu")
    assert "\n" not in str(raised.value) and "not of one model" in str(raised.value)
    if field == "hidden_size":  # the missing layer's case ran the evaluation (exit 0)
        assert main(["eval", "--model", str(directory), "--benchmarks", "rg:chain_sum:size=2", "--limit", "1",
                     "--output-dir", str(tmp_path / "eval")]) == 2
        assert "not of one model" in capsys.readouterr().err


@pytest.mark.parametrize("damage, expected", [
    ("tokenizer.json", "cannot load the tokenizer of model '{0}': Expecting value: line 1 column 1 (char 0) "
                       "(is a file of {0} missing or damaged?)"),
    ("model.safetensors", "cannot load model '{0}': Error no file named model.safetensors"),
])
def test_a_local_directory_with_a_damaged_file_is_not_blamed_on_the_network(damage, expected, tiny_model_dir,
                                                                           tmp_path):
    """An empty tokenizer.json, or no weights file, in a model directory was refused as 'cannot load
    model DIR: Expecting value: line 1 column 1 (char 0) (offline? pass a local directory, or use
    smollm2-135m-instruct)': a local directory was given, and the JSON error named no file."""
    import shutil

    directory = tmp_path / "damaged"
    shutil.copytree(tiny_model_dir, directory)
    (directory / damage).write_text("") if damage.endswith(".json") else (directory / damage).unlink()
    with pytest.raises(UsageError) as raised:
        load_model_and_tokenizer(str(directory), device="cpu")
    error = str(raised.value)
    assert error.startswith(expected.format(directory)) and "offline?" not in error and "\n" not in error
    assert error.endswith(f"(is a file of {directory} missing or damaged?)")


@pytest.mark.parametrize("damage, expected", [
    ("config", "adapter/adapter_config.json is damaged (Expecting property name enclosed in double quotes"),
    ("weights", "is a LoRA checkpoint without its adapter's weights"),
    ("cut", "cannot load the LoRA adapter"),
    ("rank", "cannot load the LoRA adapter"),
])
def test_a_damaged_lora_checkpoint_is_refused_in_one_line(damage, expected, tiny_model_dir, tmp_path, capsys):
    """ict eval of a LoRA checkpoint with a damaged adapter_config.json printed json's 'Expecting
    property name ...' naming no file; without its adapter weights peft's 'Repo id must be in the
    form ...'; a cut weights file or an adapter_config.json whose rank is not its weights' was a
    SafetensorError / RuntimeError (exit 1)."""
    import json

    from ict.cli import main
    from ict.models.loading import LoraOptions

    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), device="cpu", lora=LoraOptions(rank=2))
    checkpoint = tmp_path / "step-00000001"
    model.save_pretrained(checkpoint / "adapter")
    tokenizer.save_pretrained(checkpoint)
    config, weights = checkpoint / "adapter" / "adapter_config.json", checkpoint / "adapter" / "adapter_model.safetensors"
    if damage == "config":
        config.write_text("{")
    elif damage == "weights":
        weights.unlink()
    elif damage == "cut":
        weights.write_bytes(weights.read_bytes()[:100])
    else:
        config.write_text(json.dumps({**json.loads(config.read_text()), "r": 4}))
    assert main(["eval", "--model", str(checkpoint), "--backend", "hf", "--benchmarks", "rg:chain_sum:size=2",
                 "--limit", "1", "--output-dir", str(tmp_path / "eval")]) == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]  # after the save's warnings
    assert error.startswith("error: ") and expected in error


@pytest.mark.parametrize("text, shown", [("[]", "a list of 0"), ('"x"', "text ('x')"), ("3", "a number (3)")])
def test_a_config_json_that_is_no_object_is_refused_in_one_line(text, shown, tiny_model_dir, tmp_path, capsys):
    """A model directory's config.json holding JSON that is no object raised transformers' 'TypeError:
    ... argument after ** must be a mapping, not list' (ict eval: exit 1, 'error: TypeError: ...')."""
    import shutil

    from ict.cli import main

    directory = tmp_path / "odd"
    shutil.copytree(tiny_model_dir, directory)
    (directory / "config.json").write_text(text)
    expected = f"cannot load model '{directory}': its config.json holds {shown}, not a JSON object (is a file of {directory} damaged?)"
    with pytest.raises(UsageError) as raised:
        load_model_and_tokenizer(str(directory), device="cpu")
    assert str(raised.value) == expected
    assert main(["eval", "--model", str(directory), "--benchmarks", "rg:chain_sum:size=2", "--limit", "1",
                 "--output-dir", str(tmp_path / "eval")]) == 2
    assert capsys.readouterr().err.strip().endswith(expected)


@pytest.mark.parametrize("layout", ["plain adapter, another model's tokenizer above it", "adapter's own tokenizer",
                                    "ict train's <ckpt>/adapter"])
def test_a_lora_adapter_takes_its_own_or_its_checkpoints_tokenizer_never_anothers(layout, tiny_model_dir, tmp_path):
    """A plain adapter directory took the tokenizer of whatever directory it sat in (its parent's, before its own):
    an adapter kept beside another model's tokenizer encoded with other ids, silently."""
    import json
    import shutil

    from ict.models.loading import LoraOptions, load_inference_model

    model, tokenizer = load_model_and_tokenizer(str(tiny_model_dir), device="cpu", lora=LoraOptions(rank=2))
    swapped = tmp_path / "swapped"  # the tiny tokenizer with the ids of "1" and "2" exchanged
    tokenizer.save_pretrained(swapped)
    data = json.loads((swapped / "tokenizer.json").read_text())
    vocab = data["model"]["vocab"]
    base_ids = [vocab["1"], vocab["2"]]
    vocab["1"], vocab["2"] = vocab["2"], vocab["1"]
    (swapped / "tokenizer.json").write_text(json.dumps(data))
    outer, adapter = (tmp_path / "outer", tmp_path / "outer" / "my-adapter") if layout.startswith("plain") else (
        tmp_path / "step-00000001", tmp_path / "step-00000001" / "adapter")
    model.save_pretrained(adapter)
    shutil.copytree(swapped if layout != "adapter's own tokenizer" else tiny_model_dir, outer, dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("*.safetensors", "config.json", "generation_config.json"))
    if layout == "adapter's own tokenizer":
        shutil.copytree(swapped, adapter, dirs_exist_ok=True)
    expected = base_ids if layout.startswith("plain") else base_ids[::-1]
    _, loaded = load_inference_model(str(adapter), device="cpu")
    assert loaded("1 2", add_special_tokens=False)["input_ids"] == expected


def test_a_model_directory_holding_an_adapter_folder_is_that_model(tiny_model_dir, tmp_path):
    """A full model directory (its own config.json and weights) with an ``adapter/`` folder in it was
    taken for ict train's LoRA checkpoint: ``ict eval --model DIR`` evaluated the adapter's base
    model with the adapter merged, not DIR's weights. Its weights are the directory's own."""
    import shutil

    from safetensors.torch import load_file, save_file

    from ict.models.loading import LoraOptions, load_inference_model, lora_adapter_dir

    directory = tmp_path / "merged"
    shutil.copytree(tiny_model_dir, directory)
    saved = load_file(str(directory / "model.safetensors"))
    name = next(key for key in saved if key.endswith("q_proj.weight"))
    saved[name] = saved[name] + 1.0  # this directory's own weights, unlike the adapter's base model's
    save_file(saved, str(directory / "model.safetensors"), metadata={"format": "pt"})
    lora, _ = load_model_and_tokenizer(str(tiny_model_dir), device="cpu", lora=LoraOptions(rank=2))
    lora.save_pretrained(directory / "adapter")  # base_model_name_or_path: tiny_model_dir
    assert lora_adapter_dir(str(directory)) is None
    assert lora_adapter_dir(str(directory / "adapter")) == directory / "adapter"
    model, _ = load_inference_model(str(directory), device="cpu")
    assert torch.equal(model.state_dict()[name], saved[name])

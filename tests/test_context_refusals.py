"""Sizes a model cannot hold are refused in one line before any token is generated: the hf
backend's prompt + max_new_tokens past the model's context (vLLM's backend refuses the same)."""

from __future__ import annotations

import pytest
from conftest import build_tiny_model, build_tiny_tokenizer

from ict.cli import main
from ict.core.errors import UsageError
from ict.models.rollout import SamplingSettings, context_length, generate_completions

PROMPT = "what is 3 + 4 ?"


def _never_ending_model():
    """The tiny model (256 positions) with an EOS id it does not sample greedily for this prompt:
    `generate` runs to max_new_tokens."""
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer))
    model.generation_config.eos_token_id = None
    tokenizer.eos_token = "<unk>"
    return model, tokenizer


def test_the_hf_backend_refuses_completions_past_the_models_context(one_thread) -> None:
    """`generate` went on past max_position_embeddings with a warning only: 11 prompt tokens and
    max_new_tokens 300 gave 300 tokens through a model of 256 positions. The limit is
    prompt + max_new_tokens <= 256, with the prompt's length counted by the tokenizer here."""
    model, tokenizer = _never_ending_model()
    text = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False,
                                         add_generation_prompt=True)
    prompt = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert prompt == 11 and model.config.max_position_embeddings == 256
    with pytest.raises(UsageError) as error:
        generate_completions(model, tokenizer, [PROMPT], SamplingSettings(0.0, 256 - prompt + 1, greedy=True))
    assert str(error.value) == ("a prompt of 11 tokens + max_new_tokens 246 exceeds the model's context of 256 "
                                "tokens (max_position_embeddings): lower max_new_tokens to at most 245")
    rollout = generate_completions(model, tokenizer, [PROMPT], SamplingSettings(0.0, 256 - prompt, greedy=True))
    assert len(rollout.completion_ids[0][0]) == 245 and not rollout.finished[0][0]  # the whole context, used


def test_context_length_follows_rope_scaling_as_vllm_does() -> None:
    """max_position_embeddings, GPT-2's n_positions, and a linear/dynamic/YaRN RoPE scaling's
    factor x original_max_position_embeddings (Qwen2.5's YaRN recipe: 4 x 32768); llama3's and
    longrope's configs already give the stretched length."""
    from transformers import GPT2Config, LlamaConfig, Qwen2Config

    assert context_length(LlamaConfig(max_position_embeddings=2048)) == 2048
    assert context_length(GPT2Config(n_positions=1024)) == 1024
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}
    assert context_length(Qwen2Config(max_position_embeddings=32768, rope_scaling=yarn)) == 131072
    linear = {"rope_type": "linear", "factor": 2.0}
    assert context_length(LlamaConfig(max_position_embeddings=4096, rope_scaling=linear)) == 8192
    llama3 = {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
              "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    assert context_length(LlamaConfig(max_position_embeddings=131072, rope_scaling=llama3)) == 131072
    assert context_length(None) is None


def test_ict_eval_refuses_max_new_tokens_past_the_context_in_one_line(tiny_model_dir, tmp_path, capsys) -> None:
    """`ict eval --backend hf --max-new-tokens 1000` on a model of 256 positions: exit 2 and one
    line, before any completion is generated or written."""
    out = tmp_path / "out"
    code = main(["eval", "--model", str(tiny_model_dir), "--benchmarks", "rg:chain_sum:size=2", "--n", "1",
                 "--k", "1", "--max-new-tokens", "1000", "--backend", "hf", "--device", "cpu",
                 "--output-dir", str(out), "--quiet"])
    error = capsys.readouterr().err.strip()
    assert code == 2
    assert "max_new_tokens 1000 exceeds the model's context of 256 tokens" in error and "\n" not in error
    assert not (out / "samples.jsonl").is_file() or not (out / "samples.jsonl").read_text().strip()


def test_ict_train_refuses_a_training_prompt_past_the_context_before_step_one(tiny_model_dir, tmp_path,
                                                                                 capsys) -> None:
    """One training question of 300 words among 40 short ones, on a model of 256 positions: refused
    before step 1 (a step that did not draw it trained; the run died at the step that did), its
    length counted by the tokenizer here (the chat template, as generation renders it)."""
    import json

    tokenizer = build_tiny_tokenizer()
    long_question = " ".join(["1 + 2"] * 100)
    rows = [{"question": f"what is {n % 5} + {n % 3} ?", "answer": str(n % 5 + n % 3)} for n in range(40)]
    data = tmp_path / "task.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in [*rows, {"question": long_question, "answer": "3"}]))
    text = tokenizer.apply_chat_template([{"role": "user", "content": long_question}], tokenize=False,
                                         add_generation_prompt=True)
    length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    assert length > 256
    code = main(["train", "--model", str(tiny_model_dir), "--dataset", str(data), "--reward", "last_number",
                 "--num-steps", "1", "--prompts-per-step", "2", "--num-generations", "2", "--max-new-tokens", "4",
                 "--no-progress", "--no-tensorboard", "--device", "cpu", "--run-dir", str(tmp_path / "run")])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in error
    assert error.endswith(f"a prompt of {length} tokens + max_new_tokens 4 exceeds the model's context of 256 tokens "
                          "(max_position_embeddings): lower max_new_tokens to at most 0")
    assert not (tmp_path / "run" / "metrics.jsonl").is_file()


def test_ict_eval_checks_every_benchmarks_prompts_before_the_first_generation(tiny_model_dir, tmp_path,
                                                                              capsys) -> None:
    """gsm8k's short question, then math500's of 300 words past the model's 256 positions: the run
    generated and wrote gsm8k's samples, then refused at math500; now before any generation."""
    import json

    from ict.data.benchmarks import load_benchmark

    tokenizer = build_tiny_tokenizer()
    long_question = " ".join(["1 + 2"] * 100)
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text(json.dumps({"question": PROMPT, "answer": "#### 7"}) + "\n")
    (data / "math500.jsonl").write_text(json.dumps({"problem": long_question, "answer": "3"}) + "\n")
    text = tokenizer.apply_chat_template([{"role": "user", "content": load_benchmark("math500", data).problems[0].prompt}],
                                         tokenize=False, add_generation_prompt=True)
    length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    out = tmp_path / "out"
    code = main(["eval", "--model", str(tiny_model_dir), "--benchmarks", "gsm8k,math500", "--data-dir", str(data),
                 "--n", "1", "--k", "1", "--max-new-tokens", "8", "--backend", "hf", "--device", "cpu",
                 "--output-dir", str(out), "--quiet"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in error
    assert error.endswith(f"a prompt of {length} tokens + max_new_tokens 8 exceeds the model's context of 256 tokens "
                          "(max_position_embeddings): lower max_new_tokens to at most 0")
    assert not (out / "samples.jsonl").is_file() or not (out / "samples.jsonl").read_text().strip()


def test_ict_compare_refuses_eval_max_new_tokens_past_the_context_before_any_run_trains(
        tiny_model_dir, arithmetic_task, tmp_path, capsys, monkeypatch) -> None:
    """`ict compare --eval-max-new-tokens 1000` on a model of 256 positions trained every run, then
    refused at the first evaluation; now exit 2 and one line before the first run trains."""
    import json

    import ict.experiments.compare as compare
    from ict.data.benchmarks import load_benchmark

    def no_training(*args, **kwargs):
        raise AssertionError("a run trained")

    monkeypatch.setattr(compare, "_train", no_training)
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text(json.dumps({"question": PROMPT, "answer": "#### 7"}) + "\n")
    tokenizer = build_tiny_tokenizer()
    text = tokenizer.apply_chat_template([{"role": "user", "content": load_benchmark("gsm8k", data).problems[0].prompt}],
                                         tokenize=False, add_generation_prompt=True)
    length = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    code = main(["compare", "--methods", "grpo", "--seeds", "0", "--output-dir", str(tmp_path / "cmp"),
                 "--eval-benchmarks", "gsm8k", "--eval-data-dir", str(data), "--eval-n", "1",
                 "--eval-max-new-tokens", "1000", f"model={tiny_model_dir}", f"dataset={arithmetic_task}",
                 "reward=last_number", "num_steps=1", "device=cpu"])
    error = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in error
    assert error.endswith(f"--eval-max-new-tokens 1000: a prompt of {length} tokens + max_new_tokens 1000 exceeds the "
                          f"model's context of 256 tokens (max_position_embeddings): lower max_new_tokens to at most "
                          f"{256 - length}")

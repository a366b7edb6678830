"""Shared fixtures: a tiny random Llama-like causal LM and a word-level tokenizer with a chat
template, built from code (no download), and a synthetic verifiable arithmetic task.

Hypothesis profiles (the profile decides every property test's example budget; tests set no
`max_examples` of their own):
- ``ci``: derandomized (examples are a function of the test, not of a random seed), no example
  database, 100 examples a test, failures print a reproduction blob. Selected when ``CI`` is set,
  so ``CI=true make test`` gives the same answer every time.
- ``dev`` (default): randomized, 100 examples a test.
- ``fuzz``: randomized, ``HYPOTHESIS_FUZZ_EXAMPLES`` (default 2000) examples a test; ``make fuzz``.
``HYPOTHESIS_PROFILE=<name>`` picks a profile explicitly.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

# Without a GPU, Triton's kernels run under its interpreter on CPU tensors (tests/test_tiles.py);
# it must be set before triton is first imported.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

PROPERTY_EXAMPLES = 100
FUZZ_EXAMPLES = int(os.environ.get("HYPOTHESIS_FUZZ_EXAMPLES", "2000"))
_QUIET_CHECKS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
settings.register_profile("ci", derandomize=True, database=None, max_examples=PROPERTY_EXAMPLES,
                          deadline=None, print_blob=True, suppress_health_check=_QUIET_CHECKS)
settings.register_profile("dev", max_examples=PROPERTY_EXAMPLES, deadline=None,
                          suppress_health_check=_QUIET_CHECKS)
settings.register_profile("fuzz", max_examples=FUZZ_EXAMPLES, deadline=None, print_blob=True,
                          suppress_health_check=_QUIET_CHECKS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``engines`` (real engines in their own environments, e.g. vLLM through
    .venv-vllm; ~1 min of engine start each) run only when the ``-m`` expression names them
    (``make test-engines``: ``-m engines``); every other run skips them with that reason, so the
    default ``make test`` needs none of those environments."""
    if "engines" in (config.option.markexpr or ""):
        return
    skip = pytest.mark.skip(reason="engine test: run with `make test-engines` (pytest -m engines)")
    for item in items:
        if item.get_closest_marker("engines"):
            item.add_marker(skip)


SPECIAL_TOKENS = ["<pad>", "<|im_end|>", "<|im_start|>", "<unk>"]
WORDS = ["user", "assistant", "system", "what", "is", "the", "answer", "sum", "of", "and", "so",
         "+", "-", "=", "?", ".", ":"]
DIGITS = [str(digit) for digit in range(10)]
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }} {{ message['content'] }}"
    "<|im_end|> {% endfor %}{% if add_generation_prompt %}<|im_start|>assistant {% endif %}"
)


def build_tiny_tokenizer():
    """Word-level tokenizer over ~30 symbols; digits are single tokens; EOS is <|im_end|>."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {token: index for index, token in enumerate(SPECIAL_TOKENS + WORDS + DIGITS)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.Whitespace()])
    backend.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>",
                                        eos_token="<|im_end|>", bos_token="<|im_start|>",
                                        unk_token="<unk>")
    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>"]})
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def greedy_reference(model, prompt_ids: list[int], steps: int, eos_id: int | None = None) -> list[int]:
    """Argmax decoding of up to `steps` tokens by hand, one unbatched forward over the whole
    sequence per token (no cache, no padding); it stops after `eos_id` (None: never)."""
    tokens, generated = list(prompt_ids), []
    for _ in range(steps):
        with torch.no_grad():
            token = int(model(input_ids=torch.tensor([tokens])).logits[0, -1].argmax())
        generated.append(token)
        tokens.append(token)
        if token == eos_id:
            break
    return generated


def build_tiny_model(vocab_size: int, seed: int = 0, hidden_size: int = 32, layers: int = 2):
    """A randomly initialised LlamaForCausalLM from a config (float32)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab_size, hidden_size=hidden_size,
                         intermediate_size=2 * hidden_size, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, initializer_range=0.2, pad_token_id=0, bos_token_id=2,
                         eos_token_id=1, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = 0
    model.generation_config.eos_token_id = 1
    return model


@pytest.fixture(scope="session")
def tiny_tokenizer():
    return build_tiny_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """Directory with a saved tiny random model + tokenizer (loadable with from_pretrained)."""
    path = tmp_path_factory.mktemp("tiny-model")
    tokenizer = build_tiny_tokenizer()
    model = build_tiny_model(len(tokenizer))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def write_arithmetic_task(path: Path, size: int = 64, seed: int = 0) -> Path:
    """JSONL of one-digit additions: {"question": "what is 3 + 4 ?", "answer": "7"}."""
    rng = random.Random(seed)
    with path.open("w") as handle:
        for _ in range(size):
            left, right = rng.randint(0, 4), rng.randint(0, 5)
            handle.write(json.dumps({"question": f"what is {left} + {right} ?",
                                     "answer": str(left + right)}) + "\n")
    return path


@pytest.fixture(scope="session")
def arithmetic_task(tmp_path_factory) -> Path:
    return write_arithmetic_task(tmp_path_factory.mktemp("task") / "sums.jsonl")


@pytest.fixture
def single_process_group(tmp_path, monkeypatch):
    """A gloo group of one process (verl's engine functions in tests/test_integration_verl_batches.py
    and test_engine_agreement.py); verl's device helpers pointed at the CPU."""
    import verl.utils.seqlen_balancing as balancing
    import verl.workers.engine.fsdp.transformer_impl as fsdp_impl

    monkeypatch.setattr(fsdp_impl, "get_device_id", lambda: "cpu")
    monkeypatch.setattr(fsdp_impl, "get_device_name", lambda: "cpu")
    monkeypatch.setattr(balancing, "get_device_name", lambda: "cpu")
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield torch.distributed.group.WORLD
    torch.distributed.destroy_process_group()


@pytest.fixture(scope="module")
def verifier():
    """A math-verify pool of one worker for a test module (test_verify.py and test_adversarial.py
    define their own, of two)."""
    from ict.answers.verify import MathVerifier

    pool = MathVerifier(num_workers=1)
    yield pool
    pool.close()


def assert_graded_in_both_extractions(verifier, completion: str, gold: str, expected: bool) -> None:
    """``completion`` is graded ``expected`` against ``gold`` in each of `MATH_EXTRACTIONS`."""
    from ict.answers.verify import MATH_EXTRACTIONS

    for extraction in MATH_EXTRACTIONS:
        verdict = verifier.check(completion, gold, 10.0, extraction)
        assert verdict.correct is expected, (extraction, verdict)


@pytest.fixture
def one_thread():
    """Tiny models generate much faster with one thread on a shared 2-core machine."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True)
def same_global_random_state_for_every_test():
    """Every test starts from one global RNG state (torch, numpy, `random`), so it draws the same
    numbers when run alone (`pytest -k`) as in the whole suite, in any order."""
    import numpy as np

    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)

"""What the evaluation tests share: the real tiny-model generator that records its prompts, and
the samples an `ict eval` output directory holds (tests/test_evaluate.py, test_eval_seeds.py)."""

from __future__ import annotations

import json
from pathlib import Path

from ict.evaluation.evaluate import EvalConfig, Generator


class CountingGenerator(Generator):
    """The real tiny-model generator, recording which prompts it was asked to complete."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.prompts: list[str] = []

    def generate(self, prompts, num_samples, greedy, seed):
        self.prompts.extend(prompts)
        return super().generate(prompts, num_samples, greedy, seed)


def tiny_generator(config: EvalConfig, tiny_model_dir: Path,
               kind: type[CountingGenerator] = CountingGenerator) -> CountingGenerator:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    return kind(model, tokenizer, config)


def read_samples(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]

"""What the evaluation tests share: the real tiny-model generator that records its prompts, and
the samples an `ict eval` output directory holds (tests/test_evaluate.py, test_eval_seeds.py), a
samples file of given records (test_inspect.py, test_inspect_scores.py), and scripted generators
over a one-problem evaluation (test_eval_records.py, test_eval_results.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ict.data.benchmarks import load_benchmark
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


def samples_file(path: Path, records: list[dict]) -> Path:
    """``records`` written to ``path`` as JSON lines (as `ict eval` writes samples.jsonl); returns
    ``path``."""
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


class ScriptedGenerator(Generator):
    """Returns the SCRIPTED completions of each prompt (no model)."""

    def __init__(self, by_prompt: dict[str, tuple[list[str], str]]) -> None:
        self.by_prompt, self.name = by_prompt, "scripted"

    def generate(self, prompts, num_samples, greedy, seed):
        drawn = [[self.by_prompt[p][1]] if greedy else list(self.by_prompt[p][0]) for p in prompts]
        return drawn, [[1] * len(group) for group in drawn], [[True] * len(group) for group in drawn]


class SeedScriptedGenerator(Generator):
    """Returns the i-th list of SCRIPTED completions on its i-th call (one call per seed here)."""

    def __init__(self, calls: list[list[str]]) -> None:
        self.calls, self.name = list(calls), "scripted"

    def generate(self, prompts, num_samples, greedy, seed):
        drawn = [list(self.calls.pop(0)) for _ in prompts]
        return drawn, [[1] * len(row) for row in drawn], [[True] * len(row) for row in drawn]


def one_gsm8k_problem(tmp_path: Path) -> tuple[Path, str]:
    """A data directory holding one gsm8k problem ("question 3?", gold 3), and its prompt."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text(json.dumps({"question": "question 3?", "answer": "#### 3"}) + "\n")
    return data, load_benchmark("gsm8k", data).problems[0].prompt


def one_problem_eval(tmp_path: Path, **settings: Any) -> tuple[dict[str, Any], str, Path]:
    """(EvalConfig options of a scripted evaluation of `one_gsm8k_problem` into tmp_path/out: n 2,
    k 1, on the CPU, each overridden by ``settings``; the problem's prompt; the output directory)."""
    data, prompt = one_gsm8k_problem(tmp_path)
    out = tmp_path / "out"
    return {"model": "scripted", "benchmarks": "gsm8k", "data_dir": str(data), "output_dir": str(out),
            "num_samples": 2, "ks": (1,), "device": "cpu", **settings}, prompt, out


def generate_another_second_question(monkeypatch: Any) -> None:
    """Make reasoning-gym generate another question #1 than before, as some of its tasks do in
    another process (another PYTHONHASHSEED)."""
    from ict.data import benchmarks

    original = benchmarks.load_reasoning_gym

    def another_process(*args: Any, **kwargs: Any) -> Any:
        benchmark = original(*args, **kwargs)
        benchmark.problems[1].prompt = "Are the strings 'ab' and 'cd' isomorphic?"
        return benchmark

    monkeypatch.setattr(benchmarks, "load_reasoning_gym", another_process)

"""Evaluation: grading per answer type, metrics against independent references, and `ict eval`
end to end on a tiny random model (all outputs, resume, errors)."""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch

from ict.cli import main
from ict.core.metrics import benchmark_metrics, majority_vote_correct
from ict.data.benchmarks import load_benchmark
from ict.evaluation.evaluate import EvalConfig, Generator, evaluate, grade_completions
from ict.evaluation.results import aggregate_results

pytestmark = pytest.mark.usefixtures("one_thread")


def write_data_dir(path: Path) -> Path:
    """Small benchmark files in the published formats (GSM8K, MATH-500, MMLU-STEM)."""
    path.mkdir(parents=True, exist_ok=True)
    gsm = [{"question": f"what is {a} + {b} ?", "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}
           for a, b in [(1, 2), (3, 4), (2, 2), (4, 5)]]
    math500 = [{"problem": "what is 1 + 1 ?", "solution": "so \\boxed{2}", "answer": "2",
                "unique_id": "test/a.json"},
               {"problem": "what is 3 - 1 ?", "solution": "\\boxed{\\frac{4}{2}}", "answer": "2",
                "unique_id": "test/b.json"}]
    mmlu = [{"question": "what is 2 + 2 ?", "type": "x", "choices": ["3", "4", "5", "6"],
             "answer": 1}]
    for name, rows in (("gsm8k", gsm), ("math500", math500), ("mmlu_stem", mmlu)):
        with open(path / f"{name}.jsonl", "w", encoding="utf-8") as handle:
            for row in rows:
                handle.write(json.dumps(row) + "\n")
    return path


# ------------------------------------------------------------------------ grading and metrics


def test_grade_completions_per_answer_type(tmp_path):
    data = write_data_dir(tmp_path / "data")
    gsm = load_benchmark("gsm8k", data)
    p0, p1 = gsm.problems[0], gsm.problems[1]
    items = [(p0, "1 + 2 = 3, so \\boxed{3}"), (p0, "\\boxed{4}"), (p1, "So the answer is 7."),
             (p1, "the sum is 7"), (p1, "")]
    verdicts = grade_completions(gsm, items)  # anchored math extraction
    assert [v.correct for v in verdicts] == [True, False, True, False, False]
    assert verdicts[0].extracted == "3" and verdicts[4].status == "no_answer"
    lenient = grade_completions(gsm, items, math_extraction="lenient")
    assert [v.correct for v in lenient] == [True, False, True, True, False]
    mmlu = load_benchmark("mmlu_stem", data)
    q = mmlu.problems[0]
    verdicts = grade_completions(mmlu, [(q, "The answer is \\boxed{B}"), (q, "\\boxed{A}"),
                                        (q, "I am not sure")])
    assert [(v.correct, v.extracted) for v in verdicts] == [(True, "B"), (False, "A"), (False, None)]
    rg = load_benchmark("rg:chain_sum:max_terms=2:max_digits=1:size=3")
    r = rg.problems[0]
    verdicts = grade_completions(rg, [(r, f"<answer>{r.answer}</answer>"), (r, f"\\boxed{{{r.answer}}}"),
                                      (r, f"The answer is {r.answer}"),
                                      (r, "<answer>999</answer>")])
    assert [v.correct for v in verdicts] == [True, True, False, False]
    assert verdicts[2].status == "no_answer"  # strict: no last-number fallback


def _pass_at_k_reference(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def test_benchmark_metrics_match_reference():
    rng = np.random.default_rng(0)
    correct = rng.random((50, 8)) < 0.3
    majority = list(rng.random(50) < 0.5)
    greedy = list(rng.random(50) < 0.4)
    metrics = benchmark_metrics(correct, [1, 4, 8], majority, greedy)
    counts = correct.sum(axis=1)
    for k in (1, 4, 8):
        expected = sum(_pass_at_k_reference(8, int(c), k) for c in counts) / 50
        assert metrics[f"pass@{k}"] == pytest.approx(expected, abs=1e-12)
    assert metrics["avg@8"] == pytest.approx(counts.sum() / 400)
    assert metrics["pass@1"] == pytest.approx(metrics["avg@8"])
    assert metrics["maj@8"] == pytest.approx(sum(majority) / 50)
    assert metrics["greedy"] == pytest.approx(sum(greedy) / 50)


def test_majority_vote():
    assert majority_vote_correct(["2", "3", "2", None], [True, False, True, False]) is True
    assert majority_vote_correct(["3", "3", "2", "2 "], [False, False, True, True]) is False  # tie
    assert majority_vote_correct(["2", "3", "3", "2"], [True, False, False, True]) is True  # tie
    assert majority_vote_correct([None, None], [False, False]) is False
    assert majority_vote_correct(["\\frac{1}{2}", "\\frac {1}{2}", "1"], [True, True, False]) is True


def test_aggregates_are_macro_means():
    from ict.evaluation.results import BenchmarkResult

    rows = [BenchmarkResult("gsm8k", "math", "", 10, 4, {"pass@1": 0.2}),
            BenchmarkResult("math500", "math", "", 30, 4, {"pass@1": 0.6}),
            BenchmarkResult("aime24", "olympiad", "", 30, 4, {"pass@1": 0.0})]
    aggregates = {row.name: row for row in aggregate_results(rows, ["olympiad"])}
    assert aggregates["group:math"].metrics["pass@1"] == pytest.approx(0.4)
    assert aggregates["all"].metrics["pass@1"] == pytest.approx(0.8 / 3)
    assert "suite:olympiad" not in aggregates  # a single benchmark is not an aggregate


# ------------------------------------------------------------------------ end to end


def _recompute_from_samples(samples: list[dict], n: int, ks: list[int]) -> dict[str, dict]:
    """Independent metric computation from samples.jsonl (math.comb)."""
    by_problem: dict[tuple[str, int], list[dict]] = {}
    for record in samples:
        if not record["greedy"]:
            by_problem.setdefault((record["benchmark"], record["index"]), []).append(record)
    per_benchmark: dict[str, dict] = {}
    for (benchmark, _), records in by_problem.items():
        c = sum(r["correct"] for r in records)
        entry = per_benchmark.setdefault(benchmark, {f"pass@{k}": [] for k in ks} | {"avg": []})
        for k in ks:
            entry[f"pass@{k}"].append(_pass_at_k_reference(n, c, k))
        entry["avg"].append(c / n)
    return {name: {key: sum(values) / len(values) for key, values in entry.items()}
            for name, entry in per_benchmark.items()}


def test_cli_eval_end_to_end(tmp_path, tiny_model_dir, capsys):
    data = write_data_dir(tmp_path / "data")
    out = tmp_path / "out"
    code = main(["eval", "--model", str(tiny_model_dir), "--benchmarks", "gsm8k,math500,mmlu_stem",
                 "--data-dir", str(data), "--n", "3", "--k", "1,2,3", "--max-new-tokens", "6",
                 "--batch-size", "8", "--greedy", "--output-dir", str(out), "--quiet",
                 "--device", "cpu"])
    assert code == 0
    printed = capsys.readouterr().out
    for name in ("gsm8k", "math500", "mmlu_stem", "pass@3", "maj@3", "greedy"):
        assert name in printed
    for name in ("samples.jsonl", "results.json", "results.csv", "results.md"):
        assert (out / name).is_file()
    samples = [json.loads(line) for line in open(out / "samples.jsonl", encoding="utf-8")]
    assert len(samples) == (4 + 2 + 1) * (3 + 1)  # problems x (n sampled + 1 greedy)
    keys = {"benchmark", "index", "problem_id", "sample", "greedy", "prompt", "completion",
            "gold", "extracted", "correct", "status", "num_tokens"}
    assert all(keys <= set(record) for record in samples)
    assert Counter(r["benchmark"] for r in samples) == {"gsm8k": 16, "math500": 8, "mmlu_stem": 4}
    assert all("\\boxed{}" in r["prompt"] for r in samples)
    results = json.loads((out / "results.json").read_text())
    reference = _recompute_from_samples(samples, 3, [1, 2, 3])
    for name, expected in reference.items():
        metrics = results["benchmarks"][name]["metrics"]
        for k in (1, 2, 3):
            assert metrics[f"pass@{k}"] == pytest.approx(expected[f"pass@{k}"])
        assert metrics["avg@3"] == pytest.approx(expected["avg"])
    rows = list(csv.DictReader(open(out / "results.csv", encoding="utf-8")))
    assert [row["benchmark"] for row in rows][:3] == ["gsm8k", "math500", "mmlu_stem"]
    assert float(rows[0]["pass@2"]) == pytest.approx(reference["gsm8k"]["pass@2"], abs=1e-6)
    markdown = (out / "results.md").read_text()
    assert "| benchmark | group | problems | pass@1 | pass@2 | pass@3 |" in markdown


class CountingGenerator(Generator):
    """The real tiny-model generator, recording which prompts it was asked to complete."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.prompts: list[str] = []

    def generate(self, prompts, num_samples, greedy, seed):
        self.prompts.extend(prompts)
        return super().generate(prompts, num_samples, greedy, seed)


def _generator(config: EvalConfig, tiny_model_dir: Path) -> CountingGenerator:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    return CountingGenerator(model, tokenizer, config)


def test_resume_skips_finished_problems(tmp_path, tiny_model_dir):
    data = write_data_dir(tmp_path / "data")
    out = tmp_path / "out"

    def config(limit: int) -> EvalConfig:
        return EvalConfig(model=str(tiny_model_dir), benchmarks="gsm8k", data_dir=str(data),
                          output_dir=str(out), num_samples=2, ks=(1, 2), max_new_tokens=4,
                          batch_size=2, limit=limit)

    first = _generator(config(2), tiny_model_dir)
    evaluate(config(2), generator=first, progress=False, print_table=False)
    assert len(first.prompts) == 2
    before = (out / "samples.jsonl").read_text().splitlines()
    # a torn write: problem 2 has only one of its two samples, and a half line follows
    partial = json.loads(before[0]) | {"index": 2, "problem_id": "2"}
    with open(out / "samples.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(partial) + "\n" + '{"benchmark": "gsm8')
    second = _generator(config(4), tiny_model_dir)
    result = evaluate(config(4), generator=second, progress=False, print_table=False)
    gsm = load_benchmark("gsm8k", data)
    assert second.prompts == [gsm.problems[2].prompt, gsm.problems[3].prompt]
    after = (out / "samples.jsonl").read_text().splitlines()
    assert after[: len(before)] == before  # finished problems untouched
    assert len(after) == 4 * 2
    assert result.benchmarks[0].num_problems == 4
    third = _generator(config(4), tiny_model_dir)
    evaluate(config(4), generator=third, progress=False, print_table=False)
    assert third.prompts == []  # everything finished: nothing generated


def test_changed_grading_regrades_without_generating(tmp_path, tiny_model_dir):
    from ict.answers.verify import check_math_batch

    data = write_data_dir(tmp_path / "data")
    out = tmp_path / "out"

    def config(extraction: str) -> EvalConfig:
        return EvalConfig(model=str(tiny_model_dir), benchmarks="gsm8k,math500", data_dir=str(data),
                          output_dir=str(out), num_samples=2, ks=(1,), max_new_tokens=4,
                          math_extraction=extraction)

    evaluate(config("lenient"), generator=_generator(config("lenient"), tiny_model_dir),
             progress=False, print_table=False)
    # make the stored completions interesting: an anchored answer, a bare number, no number
    samples = [json.loads(line) for line in open(out / "samples.jsonl", encoding="utf-8")]
    texts = ["so the answer is 3", "3", "nothing"]
    for position, record in enumerate(samples):
        record["completion"] = texts[position % 3]
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    generator = _generator(config("anchored"), tiny_model_dir)
    evaluate(config("anchored"), generator=generator, progress=False, print_table=False)
    assert generator.prompts == []
    regraded = [json.loads(line) for line in open(out / "samples.jsonl", encoding="utf-8")]
    expected = check_math_batch([(r["completion"], r["gold"]) for r in regraded],
                                extraction="anchored")
    assert [r["correct"] for r in regraded] == [v.correct for v in expected]
    assert any(r["correct"] for r in regraded)  # "so the answer is 3" for gold 3
    assert not any(r["correct"] for r in regraded if r["completion"] == "3")
    assert json.loads((out / "run.json").read_text())["grading"]["math_extraction"] == "anchored"


def test_cli_errors(tmp_path, tiny_model_dir, capsys):
    data = write_data_dir(tmp_path / "data")
    out = tmp_path / "out"
    base = ["eval", "--model", str(tiny_model_dir), "--data-dir", str(data), "--output-dir",
            str(out), "--quiet", "--max-new-tokens", "2", "--benchmarks", "mmlu_stem"]
    assert main([*base, "--n", "2", "--k", "1,4"]) == 2
    assert "--k values must be in 1..n" in capsys.readouterr().err
    assert main([*base, "--benchmarks", "nope"]) == 2
    assert "unknown benchmark 'nope'" in capsys.readouterr().err
    assert main([*base, "--n", "2", "--k", "1"]) == 0
    capsys.readouterr()
    assert main([*base, "--n", "3", "--k", "1"]) == 2  # same directory, different run
    assert "holds samples of a different run" in capsys.readouterr().err
    assert main([*base, "--n", "3", "--k", "1", "--overwrite"]) == 0
    assert main([*base, "--data-dir", str(tmp_path / "missing")]) == 2
    assert "benchmark file not found" in capsys.readouterr().err


def test_lora_checkpoint_loads(tmp_path, tiny_model_dir):
    """A LoRA checkpoint layout (<ckpt>/adapter + tokenizer files) evaluates as base + adapter."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from ict.evaluation.evaluate import load_generator

    checkpoint = tmp_path / "step-00000001"
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    peft_model = get_peft_model(base, LoraConfig(r=2, target_modules=["q_proj"], init_lora_weights=False))
    peft_model.save_pretrained(checkpoint / "adapter")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(checkpoint)
    prompt = torch.tensor([[2, 5, 6, 7]])
    with torch.no_grad():
        expected = peft_model(prompt).logits
    generator = load_generator(EvalConfig(model=str(checkpoint), device="cpu", backend="hf"))
    with torch.no_grad():
        merged = generator.model(prompt).logits
    torch.testing.assert_close(merged, expected, rtol=1e-4, atol=1e-5)
    assert generator.tokenizer.padding_side == "left"


def test_every_eval_option_comes_from_the_dataclass():
    import argparse
    import dataclasses

    from ict.cli import evaluate as eval_command
    from ict.evaluation.evaluate import EvalConfig

    parser = argparse.ArgumentParser(prog="ict")
    subparsers = parser.add_subparsers()
    eval_parser = eval_command.add_parser(subparsers)
    help_text = " ".join(eval_parser.format_help().split())
    for item in dataclasses.fields(EvalConfig):
        assert "--" + item.name.replace("_", "-") in help_text, item.name
        assert item.metadata.get("help"), item.name
    assert "(default: 1,4)" in help_text and "(default: smollm2-135m-instruct)" in help_text
    args = parser.parse_args(["eval", "--n", "3", "--k", "1,2", "--output-dir", "x"])
    assert (args.num_samples, args.ks, args.output_dir) == ("3", "1,2", "x")

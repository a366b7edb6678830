"""Evaluation: grading per answer type, metrics against independent references, and `ict eval`
end to end on a tiny random model (all outputs, resume, errors)."""

from __future__ import annotations

import csv
import json
import math
import statistics
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


def _generator(config: EvalConfig, tiny_model_dir: Path,
               kind: type[CountingGenerator] = CountingGenerator) -> CountingGenerator:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    return kind(model, tokenizer, config)


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


def test_a_partial_or_interrupted_regrade_leaves_no_stale_verdict(tmp_path, tiny_model_dir, monkeypatch):
    """Each record keeps the grading it was graded with. Before, run.json's grading decided: a
    re-grade limited to 2 of 4 problems (--limit), or one interrupted, recorded the new grading
    for the whole directory, and the other problems kept their old verdicts for good (pass@1 0.5
    where every completion is right under the new rule)."""
    import ict.evaluation.evaluate as evaluation

    data = write_data_dir(tmp_path / "data")
    out = tmp_path / "out"

    def config(extraction: str, limit: int = 4) -> EvalConfig:
        return EvalConfig(model=str(tiny_model_dir), benchmarks="gsm8k", data_dir=str(data), output_dir=str(out),
                          num_samples=2, ks=(1,), max_new_tokens=4, math_extraction=extraction, limit=limit)

    def run(extraction: str, limit: int = 4) -> float:
        result = evaluate(config(extraction, limit), generator=_generator(config(extraction, limit), tiny_model_dir),
                          progress=False, print_table=False)
        return result.benchmarks[0].metrics["pass@1"]

    run("anchored")
    samples = [json.loads(line) for line in open(out / "samples.jsonl", encoding="utf-8")]
    for record in samples:  # right under lenient extraction only: a bare number at the end
        record["completion"] = f"the sum {record['gold']}"
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    assert run("anchored") == 0.0
    assert run("lenient", limit=2) == 1.0
    assert run("lenient") == 1.0  # problems 2 and 3 are re-graded now (they stayed anchored: 0.5)
    real = evaluation.grade_completions
    monkeypatch.setattr(evaluation, "grade_completions", lambda *args, **kwargs: (_ for _ in ()).throw(
        KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):  # a re-grade to anchored, interrupted
        run("anchored")
    monkeypatch.setattr(evaluation, "grade_completions", real)
    assert run("anchored") == 0.0  # every record re-graded, though run.json said anchored already


def test_a_rerun_on_other_questions_is_refused(tmp_path, tiny_model_dir):
    """Another --data-dir (or an edited file) puts other questions at the same indices; their
    stored completions were graded against the new golds (100% on questions never asked)."""
    from ict.core.errors import UsageError

    out = tmp_path / "out"

    def config(data: Path) -> EvalConfig:
        return EvalConfig(model=str(tiny_model_dir), benchmarks="gsm8k", data_dir=str(data), output_dir=str(out),
                          num_samples=2, ks=(1,), max_new_tokens=4)

    first = write_data_dir(tmp_path / "data")
    evaluate(config(first), generator=_generator(config(first), tiny_model_dir), progress=False, print_table=False)
    other = write_data_dir(tmp_path / "other")
    rows = (other / "gsm8k.jsonl").read_text().splitlines()
    (other / "gsm8k.jsonl").write_text("\n".join([rows[1], rows[0], *rows[2:]]) + "\n")
    with pytest.raises(UsageError, match=r"holds samples of another question at gsm8k #0"):
        evaluate(config(other), generator=_generator(config(other), tiny_model_dir), progress=False,
                 print_table=False)


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


# ------------------------------------------------------------------------ several sampling seeds


class SeedRecordingGenerator(CountingGenerator):
    """The tiny-model generator, recording the generation seed and prompts of each sampled call."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sampled_calls: list[tuple[int, list[str]]] = []

    def generate(self, prompts, num_samples, greedy, seed):
        if not greedy:
            self.sampled_calls.append((seed, list(prompts)))
        return super().generate(prompts, num_samples, greedy, seed)


def write_sums(path: Path, size: int = 8) -> Path:
    """GSM8K-format sums with one-digit answers (the tiny model prints digits, so with lenient
    extraction some of its samples are right)."""
    path.mkdir(parents=True, exist_ok=True)
    rows = [{"question": f"what is {a} + {a % 3} ?", "answer": f"#### {a + a % 3}"}
            for a in range(size)]
    (path / "gsm8k.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def seeds_config(data: Path, out: Path, model: Path, **changes) -> EvalConfig:
    settings = dict(model=str(model), benchmarks="gsm8k", data_dir=str(data), output_dir=str(out),
                    num_samples=4, ks=(1, 2, 4), max_new_tokens=4, batch_size=8, temperature=1.0,
                    math_extraction="lenient", device="cpu")
    return EvalConfig(**(settings | changes))


def read_samples(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]


def per_seed_reference(samples: list[dict], n: int, ks: tuple[int, ...]) -> dict[int, dict[str, float]]:
    """Per seed, the mean over problems of 1 - C(n-c, k)/C(n, k), from the records alone."""
    counts: dict[int, dict[int, list[bool]]] = {}
    for record in samples:
        if not record["greedy"]:
            counts.setdefault(record["seed"], {}).setdefault(record["index"], []).append(
                record["correct"])
    reference = {}
    for seed, problems in counts.items():
        assert all(len(verdicts) == n for verdicts in problems.values())  # no seed mixed in
        reference[seed] = {f"pass@{k}": sum(1 - math.comb(n - sum(v), k) / math.comb(n, k)
                                            for v in problems.values()) / len(problems)
                           for k in ks}
    return reference


def test_seeds_average_pass_at_k_over_seeds(tmp_path, tiny_model_dir):
    data = write_sums(tmp_path / "data")
    out = tmp_path / "out"
    config = seeds_config(data, out, tiny_model_dir, seeds=(0, 1, 2))
    generator = _generator(config, tiny_model_dir, SeedRecordingGenerator)
    result = evaluate(config, generator=generator, progress=False, print_table=False)
    samples = read_samples(out)
    assert Counter(r["seed"] for r in samples) == {0: 32, 1: 32, 2: 32}
    assert any(r["correct"] for r in samples)  # not a vacuous all-zero comparison
    assert len({seed for seed, _ in generator.sampled_calls}) == len(generator.sampled_calls)
    reference = per_seed_reference(samples, 4, (1, 2, 4))
    stored = json.loads((out / "results.json").read_text())
    row = stored["benchmarks"]["gsm8k"]
    assert row["seeds"] == [0, 1, 2] and stored["config"]["seeds"] == [0, 1, 2]
    for k in (1, 2, 4):
        values = [reference[seed][f"pass@{k}"] for seed in (0, 1, 2)]
        for seed, value in zip((0, 1, 2), values, strict=True):
            assert row["per_seed"][str(seed)][f"pass@{k}"] == pytest.approx(value, abs=1e-12)
        assert row["metrics"][f"pass@{k}"] == pytest.approx(sum(values) / 3, abs=1e-12)
        assert row["std"][f"pass@{k}"] == pytest.approx(statistics.stdev(values), abs=1e-12)
        assert result.benchmarks[0].metrics[f"pass@{k}"] == pytest.approx(sum(values) / 3)
    # the seed-1 part of the run is what a run with --seed 1 alone samples
    single_out = tmp_path / "seed1"
    single = evaluate(seeds_config(data, single_out, tiny_model_dir, seed=1), generator=generator,
                      progress=False, print_table=False)
    alone = {(r["index"], r["sample"]): r["completion"] for r in read_samples(single_out)}
    assert alone == {(r["index"], r["sample"]): r["completion"] for r in samples if r["seed"] == 1}
    assert single.benchmarks[0].metrics["pass@4"] == pytest.approx(reference[1]["pass@4"])
    assert single.benchmarks[0].std == {}  # one seed: no spread
    markdown = (out / "results.md").read_text()
    assert "seeds 0,1,2" in markdown and "| gsm8k seed=2 | math | 8 |" in markdown
    assert " ± " in markdown.split("| gsm8k |")[1].splitlines()[0]
    rows = list(csv.DictReader(open(out / "results.csv", encoding="utf-8")))
    assert [row["seed"] for row in rows] == ["mean", "0", "1", "2"]
    assert float(rows[1]["pass@2"]) == pytest.approx(reference[0]["pass@2"], abs=1e-6)


def test_resumed_multi_seed_run_does_not_mix_seeds(tmp_path, tiny_model_dir):
    data = write_sums(tmp_path / "data", size=4)
    out = tmp_path / "out"
    first = _generator(seeds_config(data, out, tiny_model_dir), tiny_model_dir,
                       SeedRecordingGenerator)
    evaluate(seeds_config(data, out, tiny_model_dir, seeds=(0, 1)), generator=first,
             progress=False, print_table=False)
    before = read_samples(out)
    assert {r["seed"] for r in before} == {0, 1}
    prompts = [p.prompt for p in load_benchmark("gsm8k", data).problems]
    # adding seed 2: only seed 2 is sampled, the stored seeds stay as they were
    second = SeedRecordingGenerator(first.model, first.tokenizer, first.config)
    result = evaluate(seeds_config(data, out, tiny_model_dir, seeds=(0, 1, 2)), generator=second,
                      progress=False, print_table=False)
    assert [p for _, chunk in second.sampled_calls for p in chunk] == prompts
    after = read_samples(out)
    assert after[: len(before)] == before and {r["seed"] for r in after[len(before):]} == {2}
    reference = per_seed_reference(after, 4, (1, 2, 4))
    assert result.benchmarks[0].metrics["pass@2"] == pytest.approx(
        sum(reference[seed]["pass@2"] for seed in (0, 1, 2)) / 3)
    # an interrupted unit (seed 1 of problem 2 lost a sample) is sampled again, nothing else
    torn = [r for r in after if not (r["seed"] == 1 and r["index"] == 2 and r["sample"] == 3)]
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in torn))
    third = SeedRecordingGenerator(first.model, first.tokenizer, first.config)
    evaluate(seeds_config(data, out, tiny_model_dir, seeds=(0, 1, 2)), generator=third,
             progress=False, print_table=False)
    # its chunk (problems 2 and 3) is drawn whole, as the uninterrupted run drew it
    assert [p for _, chunk in third.sampled_calls for p in chunk] == prompts[2:4]
    final = read_samples(out)
    keys = [(r["index"], r["seed"], r["sample"]) for r in final]
    assert len(keys) == len(set(keys)) == 4 * 3 * 4
    assert [r for r in final if (r["index"], r["seed"]) != (2, 1)] == [
        r for r in torn if (r["index"], r["seed"]) != (2, 1)]
    # ... and gets the samples the uninterrupted run had drawn
    assert [r for r in final if (r["index"], r["seed"]) == (2, 1)] == [
        r for r in after if (r["index"], r["seed"]) == (2, 1)]
    # reporting one seed uses that seed's records only
    fourth = SeedRecordingGenerator(first.model, first.tokenizer, first.config)
    only = evaluate(seeds_config(data, out, tiny_model_dir, seeds=(2,)), generator=fourth,
                    progress=False, print_table=False)
    assert fourth.prompts == []
    reference = per_seed_reference(final, 4, (1, 2, 4))
    for k in (1, 2, 4):
        assert only.benchmarks[0].metrics[f"pass@{k}"] == pytest.approx(reference[2][f"pass@{k}"])


def test_a_larger_limit_resumed_samples_the_later_chunks_as_an_uninterrupted_run(tmp_path,
                                                                                tiny_model_dir):
    """Chunk boundaries are those of the whole benchmark, not of the problems still to do, and a
    chunk partly done is drawn whole: ``--limit 3`` then ``--limit 8`` (2 problems per chunk)
    samples problems 3..7 as ``--limit 8`` at once does (problem 2 was a chunk of its own)."""
    data = write_sums(tmp_path / "data", size=8)

    def run(out: Path, limit: int) -> None:
        config = seeds_config(data, out, tiny_model_dir, limit=limit, max_new_tokens=6)
        evaluate(config, generator=generator, progress=False, print_table=False)

    generator = _generator(seeds_config(data, tmp_path / "once", tiny_model_dir), tiny_model_dir,
                           SeedRecordingGenerator)
    run(tmp_path / "once", 8)
    once_calls = list(generator.sampled_calls)
    run(tmp_path / "twice", 3)
    generator.sampled_calls.clear()
    run(tmp_path / "twice", 8)
    prompts = [p.prompt for p in load_benchmark("gsm8k", data).problems]
    assert generator.sampled_calls == once_calls[1:]  # the chunks [2, 3], [4, 5] and [6, 7]
    assert generator.sampled_calls[0][1] == prompts[2:4]

    def later(out: Path) -> list[tuple[int, int, str]]:
        return [(r["index"], r["sample"], r["completion"]) for r in read_samples(out)
                if r["index"] >= 3]

    assert later(tmp_path / "twice") == later(tmp_path / "once")


def test_records_from_before_the_seed_field_resume_as_their_runs_seed(tmp_path, tiny_model_dir):
    data = write_sums(tmp_path / "data", size=4)
    out = tmp_path / "out"
    config = seeds_config(data, out, tiny_model_dir, seed=3, greedy=True)
    generator = _generator(config, tiny_model_dir)
    first = evaluate(config, generator=generator, progress=False, print_table=False)
    # the layout older versions wrote: no "seed" in the records, the seed in run.json
    old = [{key: value for key, value in record.items() if key != "seed"}
           for record in read_samples(out)]
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    run = json.loads((out / "run.json").read_text()) | {"seed": 3}
    (out / "run.json").write_text(json.dumps(run))
    again = _generator(config, tiny_model_dir)
    second = evaluate(config, generator=again, progress=False, print_table=False)
    assert again.prompts == []
    assert second.benchmarks[0].metrics == first.benchmarks[0].metrics
    assert {r["seed"] for r in read_samples(out) if not r["greedy"]} == {3}


def test_cli_seeds(tmp_path, tiny_model_dir, capsys):
    data = write_sums(tmp_path / "data", size=2)
    out = tmp_path / "out"
    base = ["eval", "--model", str(tiny_model_dir), "--data-dir", str(data), "--output-dir",
            str(out), "--quiet", "--max-new-tokens", "2", "--benchmarks", "gsm8k", "--n", "2",
            "--k", "1,2", "--device", "cpu"]
    assert main([*base, "--seeds", "0,1"]) == 0
    printed = capsys.readouterr().out
    assert "gsm8k seed=0" in printed and "gsm8k seed=1" in printed and "±" in printed
    assert json.loads((out / "results.json").read_text())["config"]["seeds"] == [0, 1]
    assert main([*base, "--seeds", "0,1,0"]) == 2
    assert "--seeds lists a seed more than once: [0]" in capsys.readouterr().err
    assert main([*base, "--seeds", "0,x"]) == 2
    assert "bad value for seeds" in capsys.readouterr().err
    assert main([*base, "--seeds", "none", "--seed", "1"]) == 0  # --seed alone again
    assert "seed=" not in capsys.readouterr().out


class BoxedFour(Generator):
    """Every completion answers 4 (no model)."""

    def generate(self, prompts, num_samples, greedy, seed):
        count = 1 if greedy else num_samples
        return ([["so \\boxed{4}"] * count for _ in prompts], [[3] * count for _ in prompts],
                [[True] * count for _ in prompts])


def test_a_corrected_gold_answer_regrades_the_stored_completions(tmp_path):
    """The question unchanged and its gold corrected in the benchmark file (5 -> 4): a rerun into
    the same directory kept the verdicts graded against the old gold (pass@1 0.0 where every
    completion answers 4); they are graded again, without generating."""
    data, out = tmp_path / "data", tmp_path / "out"
    data.mkdir()

    def run(gold: int) -> float:
        (data / "gsm8k.jsonl").write_text(json.dumps({"question": "what is 2 + 2 ?",
                                                      "answer": f"2 + 2 = 4\n#### {gold}"}) + "\n")
        config = EvalConfig(model="stand-in", benchmarks="gsm8k", data_dir=str(data), output_dir=str(out),
                            num_samples=2, ks=(1,), max_new_tokens=8, verify_workers=1)
        generator = BoxedFour(None, None, config)
        return evaluate(config, generator=generator, progress=False, print_table=False).benchmarks[0].metrics["pass@1"]

    assert run(5) == 0.0
    assert run(4) == 1.0
    assert {record["gold"] for record in read_samples(out)} == {"4"}


def test_a_local_file_in_the_hub_layout_is_filtered_as_the_hub_rows_are(tmp_path):
    """An export of the AIME source (every year) as aime23.jsonl loaded every year as AIME 2023,
    and MMLU in cais/mmlu's layout (every subject) as MMLU-STEM; rows without the filter's field
    (another redistribution's layout) are all kept, each with its line for errors."""
    aime = [{"ID": f"{year}-I-{number}", "Year": year, "Question": f"question {year} {number}", "Answer": str(number)}
            for year in (2021, 2022, 2023) for number in (1, 2)]
    mmlu = [{"question": f"q {subject}", "subject": subject, "choices": ["a", "b", "c", "d"], "answer": 1}
            for subject in ("abstract_algebra", "high_school_us_history", "philosophy", "machine_learning")]
    for name, rows in (("aime23", aime), ("mmlu_stem", mmlu)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert [p.problem_id for p in load_benchmark("aime23", tmp_path).problems] == ["2023-I-1", "2023-I-2"]
    assert [p.question for p in load_benchmark("mmlu_stem", tmp_path).problems] == ["q abstract_algebra",
                                                                                    "q machine_learning"]
    (tmp_path / "aime23.jsonl").write_text("".join(json.dumps({"problem": f"p{n}", "answer": str(n)}) + "\n"
                                                   for n in range(3)))
    assert len(load_benchmark("aime23", tmp_path).problems) == 3
    rows = [*aime[:4], {"ID": "2023-I-9", "Year": 2023, "Answer": "1"}]  # line 5: no question
    (tmp_path / "aime23.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    from ict.core.errors import UsageError

    with pytest.raises(UsageError, match=r"aime23.jsonl:5: row 1 of aime23"):
        load_benchmark("aime23", tmp_path)


@pytest.mark.parametrize(("change", "problem"), [
    (lambda record: record.pop("correct"), "no 'correct'"),
    (lambda record: record.pop("status"), "no 'status'"),
    (lambda record: record.update(sample=0.0), "'sample' is 0.0"),
    (lambda record: record.update(index=True), "'index' is True"),
])
def test_a_malformed_stored_record_is_one_line_with_exit_code_2(change, problem, tmp_path, capsys):
    """A record of samples.jsonl without `correct` or `status`, or with a float sample, ended the
    rerun with a KeyError or IndexError (exit 1)."""
    data, out = write_data_dir(tmp_path / "data"), tmp_path / "out"
    config = EvalConfig(model="stand-in", benchmarks="gsm8k", data_dir=str(data), output_dir=str(out),
                        num_samples=2, ks=(1,), max_new_tokens=8, verify_workers=1, limit=2)
    evaluate(config, generator=BoxedFour(None, None, config), progress=False, print_table=False)
    lines = (out / "samples.jsonl").read_text().splitlines()
    record = json.loads(lines[2])
    change(record)
    (out / "samples.jsonl").write_text("\n".join([*lines[:2], json.dumps(record), *lines[3:]]) + "\n")
    capsys.readouterr()
    assert main(["eval", "--model", "stand-in", "--benchmarks", "gsm8k", "--data-dir", str(data), "--output-dir",
                 str(out), "--n", "2", "--k", "1", "--max-new-tokens", "8", "--limit", "2", "--quiet"]) == 2
    message = capsys.readouterr().err.strip()
    assert "\n" not in message and f"samples.jsonl:3: not an evaluation record ({problem})" in message, message

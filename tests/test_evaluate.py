"""Evaluation: grading per answer type, metrics against independent references, and `ict eval`
end to end on a tiny random model (all outputs, resume, errors). Several sampling seeds:
tests/test_eval_seeds.py."""

from __future__ import annotations

import csv
import json
import math
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from eval_helpers import generate_another_second_question, read_samples, tiny_generator

from ict.cli import main
from ict.core.metrics import benchmark_metrics, majority_vote_correct
from ict.data.benchmarks import load_benchmark
from ict.evaluation.evaluate import EvalConfig, Generator, evaluate, grade_completions
from ict.evaluation.results import aggregate_results
from ict.runs.directory import exclusive_run_dir

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
    # an aggregate counts its members' problems (10 + 30, 10 + 30 + 30), not its first member's
    assert (aggregates["group:math"].num_problems, aggregates["all"].num_problems) == (40, 70)


def test_multi_seed_aggregates_are_the_seeds_macro_means():
    """With seeds, an aggregate is per seed the mean of its members' values of that seed (three
    members, so a median would differ), then the mean and the sample std (ddof=1) over seeds;
    the numbers are worked by hand."""
    from ict.evaluation.results import BenchmarkResult

    def row(name: str, seed0: float, seed1: float) -> BenchmarkResult:
        return BenchmarkResult(name, "math", "", 10, 4, {"pass@1": (seed0 + seed1) / 2}, seeds=[0, 1],
                               per_seed={"0": {"pass@1": seed0}, "1": {"pass@1": seed1}})

    aggregate = aggregate_results([row("a", 0.0, 0.3), row("b", 0.3, 0.3), row("c", 0.9, 0.9)])[0]
    assert aggregate.name == "group:math"
    assert aggregate.per_seed["0"]["pass@1"] == pytest.approx(0.4)  # (0 + 0.3 + 0.9) / 3
    assert aggregate.per_seed["1"]["pass@1"] == pytest.approx(0.5)  # (0.3 + 0.3 + 0.9) / 3
    assert aggregate.metrics["pass@1"] == pytest.approx(0.45)
    assert aggregate.std["pass@1"] == pytest.approx(0.005 ** 0.5)  # ((0.05^2 + 0.05^2) / 1) ** 0.5


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


def test_resume_skips_finished_problems(tmp_path, tiny_model_dir):
    data = write_data_dir(tmp_path / "data")
    out = tmp_path / "out"

    def config(limit: int) -> EvalConfig:
        return EvalConfig(model=str(tiny_model_dir), benchmarks="gsm8k", data_dir=str(data),
                          output_dir=str(out), num_samples=2, ks=(1, 2), max_new_tokens=4,
                          batch_size=2, limit=limit)

    first = tiny_generator(config(2), tiny_model_dir)
    evaluate(config(2), generator=first, progress=False, print_table=False)
    assert len(first.prompts) == 2
    before = (out / "samples.jsonl").read_text().splitlines()
    # a torn write: problem 2 has only one of its two samples, and a half line follows
    partial = json.loads(before[0]) | {"index": 2, "problem_id": "2"}
    with open(out / "samples.jsonl", "a", encoding="utf-8") as handle:
        handle.write(json.dumps(partial) + "\n" + '{"benchmark": "gsm8')
    second = tiny_generator(config(4), tiny_model_dir)
    result = evaluate(config(4), generator=second, progress=False, print_table=False)
    gsm = load_benchmark("gsm8k", data)
    assert second.prompts == [gsm.problems[2].prompt, gsm.problems[3].prompt]
    after = (out / "samples.jsonl").read_text().splitlines()
    assert after[: len(before)] == before  # finished problems untouched
    assert len(after) == 4 * 2
    assert result.benchmarks[0].num_problems == 4
    third = tiny_generator(config(4), tiny_model_dir)
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

    evaluate(config("lenient"), generator=tiny_generator(config("lenient"), tiny_model_dir),
             progress=False, print_table=False)
    # make the stored completions interesting: an anchored answer, a bare number, no number
    samples = [json.loads(line) for line in open(out / "samples.jsonl", encoding="utf-8")]
    texts = ["so the answer is 3", "3", "nothing"]
    for position, record in enumerate(samples):
        record["completion"] = texts[position % 3]
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    generator = tiny_generator(config("anchored"), tiny_model_dir)
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
                          num_samples=2, ks=(1,), max_new_tokens=4, math_extraction=extraction, limit=limit,
                          batch_size=4)  # chunks [0, 1], [2, 3]: --limit 2 cuts none (nothing drawn again)

    def run(extraction: str, limit: int = 4) -> float:
        result = evaluate(config(extraction, limit), generator=tiny_generator(config(extraction, limit), tiny_model_dir),
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
    evaluate(config(first), generator=tiny_generator(config(first), tiny_model_dir), progress=False, print_table=False)
    other = write_data_dir(tmp_path / "other")
    rows = (other / "gsm8k.jsonl").read_text().splitlines()
    (other / "gsm8k.jsonl").write_text("\n".join([rows[1], rows[0], *rows[2:]]) + "\n")
    with pytest.raises(UsageError, match=r"holds samples of another question at gsm8k #0 \(another --data-dir or benchmark "
                                         r"file\?\); pass --overwrite or another --output-dir$"):
        evaluate(config(other), generator=tiny_generator(config(other), tiny_model_dir), progress=False,
                 print_table=False)


def test_a_resume_on_other_reasoning_gym_questions_names_the_cause(tmp_path, tiny_model_dir, monkeypatch):
    """A reasoning-gym task that generated other questions in this process (some vary between
    processes, docs/training.md "Determinism") is refused as another file is, the message naming
    that cause instead of --data-dir; simulated by another question at index 1."""
    from ict.core.errors import UsageError

    out = tmp_path / "out"
    config = EvalConfig(model=str(tiny_model_dir), benchmarks="rg:isomorphic_strings:size=3", output_dir=str(out),
                        num_samples=1, ks=(1,), max_new_tokens=4, limit=2)
    evaluate(config, generator=tiny_generator(config, tiny_model_dir), progress=False, print_table=False)
    generate_another_second_question(monkeypatch)
    expected = (f"{out} holds samples of another question at rg:isomorphic_strings:size=3 #1 (reasoning-gym "
                "generated another one in this process: some tasks vary between processes, e.g. with "
                "PYTHONHASHSEED); pass --overwrite or another --output-dir")
    with pytest.raises(UsageError) as raised:
        evaluate(config, generator=tiny_generator(config, tiny_model_dir), progress=False, print_table=False)
    assert str(raised.value) == expected

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


def test_a_lora_checkpoint_is_refused_by_vllm_and_one_without_a_base_model_is_named(tmp_path, monkeypatch, capsys):
    """--backend vllm with a LoRA checkpoint is one line (vLLM present: its engine would be given a
    directory with no model); an adapter_config.json naming no base model is one line, from ict eval
    and ict inspect alike (the shared loader), not a traceback from loading a model named None."""
    from ict.core.errors import UsageError
    from ict.evaluation import generator as evaluate_module

    adapter = tmp_path / "step-00000001" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    monkeypatch.setattr(evaluate_module, "vllm_installed", lambda: True)
    with pytest.raises(UsageError, match="--backend vllm does not load LoRA checkpoints; use --backend hf"):
        evaluate_module.load_generator(EvalConfig(model=str(adapter.parent), device="cpu", backend="vllm"))
    with pytest.raises(UsageError, match="adapter_config.json names no base model"):
        evaluate_module.load_generator(EvalConfig(model=str(adapter.parent), device="cpu", backend="hf"))
    assert main(["inspect", "--model", str(adapter.parent), "--prompt", "what is 3 ?"]) == 2
    assert "adapter_config.json names no base model" in capsys.readouterr().err


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


def test_an_output_directory_another_evaluation_writes_is_refused_and_left_as_it_was(tmp_path, capsys):
    """Two `ict eval` processes on one output directory would both generate the problems still to
    do and append them to samples.jsonl while rewriting it; the second stops in one line (exit 2)
    before it touches a file."""
    data, out = write_data_dir(tmp_path / "data"), tmp_path / "out"
    config = EvalConfig(model="stand-in", benchmarks="gsm8k", data_dir=str(data), output_dir=str(out),
                        num_samples=2, ks=(1,), max_new_tokens=8, verify_workers=1, limit=2)
    evaluate(config, generator=BoxedFour(None, None, config), progress=False, print_table=False)
    capsys.readouterr()
    with exclusive_run_dir(out, "--output-dir"):
        before = {path.name: path.read_bytes() for path in out.iterdir()}
        code = main(["eval", "--model", "stand-in", "--benchmarks", "gsm8k", "--data-dir", str(data),
                     "--output-dir", str(out), "--n", "2", "--k", "1", "--max-new-tokens", "8",
                     "--limit", "4", "--quiet"])
        after = {path.name: path.read_bytes() for path in out.iterdir()}
    message = capsys.readouterr().err.strip()
    assert code == 2 and after == before
    assert message == (f"error: {out} is in use by another ict process (pid {os.getpid()}): wait for it "
                       "to finish or stop it, or choose another --output-dir")


def test_results_json_records_the_data_directory_read_not_the_path_as_typed(tmp_path, monkeypatch):
    """results.json kept --data-dir as typed ("data"), and `ict compare` resolves it against its
    own working directory: a rerun from elsewhere naming the same directory ("../data") was refused,
    and one whose "data" was another directory reused the evaluation. The resolved directory is
    recorded now."""
    import dataclasses

    from ict.core.errors import UsageError
    from ict.experiments.compare import _check_eval_settings

    write_data_dir(tmp_path / "data")
    write_data_dir(tmp_path / "elsewhere" / "data")
    monkeypatch.chdir(tmp_path)
    config = EvalConfig(model="stand-in", benchmarks="gsm8k", data_dir="data", output_dir=str(tmp_path / "out"),
                        num_samples=2, ks=(1,), max_new_tokens=8, verify_workers=1, limit=2)
    evaluate(config, generator=BoxedFour(None, None, config), progress=False, print_table=False)
    recorded = json.loads((tmp_path / "out" / "results.json").read_text())["config"]["data_dir"]
    assert recorded == str((tmp_path / "data").resolve())
    monkeypatch.chdir(tmp_path / "elsewhere")
    _check_eval_settings(tmp_path / "out", dataclasses.replace(config, data_dir="../data"))
    with pytest.raises(UsageError, match=r"evaluated with other settings \(data_dir "):
        _check_eval_settings(tmp_path / "out", dataclasses.replace(config, data_dir="data"))


def test_the_progress_bar_shows_a_benchmark_name_as_written(tmp_path, tiny_model_dir, capsys):
    """The progress bar's label, the benchmark being evaluated, went through rich's markup: a
    reasoning-gym option holding a closing tag (figlet_font's ``static_word=[/B]``) ended the
    evaluation, its samples drawn, in a MarkupError (no results.json), and ``[b]`` would have been
    taken for bold and not shown. The name shows as typed and the evaluation finishes."""
    name = "rg:figlet_font:static_word=[/B]:size=1"
    out = tmp_path / "out"
    config = EvalConfig(model=str(tiny_model_dir), benchmarks=name, output_dir=str(out), num_samples=1, ks=(1,),
                        max_new_tokens=2)
    capsys.readouterr()
    evaluate(config, generator=tiny_generator(config, tiny_model_dir), progress=True, print_table=False)
    assert (out / "results.json").is_file()
    assert name in capsys.readouterr().out

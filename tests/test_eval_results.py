"""The results files of `ict eval` (`ict.evaluation.results`): results.csv's std columns over
seeds, results.md in percent, results.json as strict JSON, and the aggregates over suites and
groups, and the metrics of an evaluation (pass@k, avg@n, maj@n, greedy) end to end on scripted
completions, against values written out by hand (each case was a surviving hand mutant). Split from
tests/test_eval_records.py (the resumable records)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from eval_helpers import ScriptedGenerator, SeedScriptedGenerator, one_problem_eval

from ict.data.benchmarks import load_benchmark
from ict.evaluation.evaluate import EvalConfig, evaluate
from ict.evaluation.results import BenchmarkResult, EvalResult, print_results_table, write_results


def test_results_csv_has_each_metrics_std_over_seeds(tmp_path: Path):
    """With several seeds, results.csv's ``mean`` row holds the means and the ``<metric>_std``
    columns the sample std over seeds (here 0.2 and 0.4: std 0.141421); seed rows leave them
    empty."""
    row = BenchmarkResult("gsm8k", "math", "", 5, 4, {"pass@1": 0.3}, seeds=[0, 1],
                          per_seed={"0": {"pass@1": 0.2}, "1": {"pass@1": 0.4}},
                          std={"pass@1": 0.02 ** 0.5})
    config = {"seeds": [0, 1], "model": "m", "num_samples": 4, "temperature": 1.0, "top_p": 1.0,
              "max_new_tokens": 8}
    write_results(EvalResult(config, [row], [], tmp_path, {}))
    rows = list(csv.DictReader(open(tmp_path / "results.csv", encoding="utf-8")))
    assert [(r["seed"], r["pass@1"], r["pass@1_std"]) for r in rows] == [
        ("mean", "0.300000", "0.141421"), ("0", "0.200000", ""), ("1", "0.400000", "")]
    assert float(rows[0]["pass@1_std"]) == pytest.approx(0.141421, abs=1e-6)


def test_aggregates_suites_duplicates_mixed_seeds_and_the_table_sections(tmp_path: Path):
    """Mutation tests of ict.evaluation.results: a requested suite present with >= 2 members is
    an aggregate (suite:paper, whose members are all the benchmarks, so 'all' repeats it and is
    left out); members sampled with different seeds have no per-seed macro mean (the mean of
    their means, no std, not a KeyError), and results.csv still has its seed column for the
    rows that have seeds; the benchmarks' section of the table ends at the last benchmark."""
    from ict.evaluation.results import aggregate_results, display_rows

    def row(name: str, group: str, value: float, seeds: tuple[int, ...] = ()) -> BenchmarkResult:
        return BenchmarkResult(name, group, "", 10, 4, {"pass@1": value}, seeds=list(seeds),
                               per_seed={str(seed): {"pass@1": value + seed / 10} for seed in seeds})

    rows = [row("gsm8k", "math", 0.2), row("math500", "math", 0.4), row("mmlu_stem", "commonsense", 0.6),
            row("gpqa_diamond", "commonsense", 0.8), row("aime23", "olympiad", 0.0), row("aime24", "olympiad", 0.0),
            row("aime25", "olympiad", 0.0)]
    aggregates = aggregate_results(rows, ["paper"])
    assert [(a.name, round(a.metrics["pass@1"], 12)) for a in aggregates] == [
        ("suite:paper", round(2 / 7, 12)), ("group:math", 0.3), ("group:commonsense", 0.7), ("group:olympiad", 0.0)]
    assert [a.num_problems for a in aggregates] == [70, 20, 20, 30]  # the members' problems, summed
    mixed = [row("gsm8k", "math", 0.2, (0, 1)), row("math500", "math", 0.4, (0, 2))]
    (aggregate,) = aggregate_results(mixed)
    assert (aggregate.metrics, aggregate.per_seed, aggregate.std) == ({"pass@1": pytest.approx(0.3)}, {}, {})
    config = {"seeds": [0, 1], "model": "m", "num_samples": 4, "temperature": 1.0, "top_p": 1.0,
              "max_new_tokens": 8}
    result = EvalResult(config, mixed, [aggregate], tmp_path, {})
    write_results(result)
    csv_rows = list(csv.DictReader(open(tmp_path / "results.csv", encoding="utf-8")))
    assert [(r["benchmark"], r["seed"]) for r in csv_rows][:3] == [("gsm8k", "mean"), ("gsm8k", "0"), ("gsm8k", "1")]
    assert [(cells[0], end) for cells, end in display_rows(result)] == [
        ("gsm8k", False), ("gsm8k seed=0", False), ("gsm8k seed=1", False), ("math500", False),
        ("math500 seed=0", False), ("math500 seed=2", True), ("group:math", False)]


def test_results_json_is_strict_json_with_a_nan_metric_as_null(tmp_path: Path):
    """results.json was written with json.dumps' default, so a NaN metric (the mean over no
    problem, a std over one seed) became the bare token NaN, which strict JSON readers (jq,
    JavaScript, Go) refuse; it is now null, and the other numbers are unchanged."""
    import json

    row = BenchmarkResult("gsm8k", "math", "", 0, 4, {"pass@1": float("nan"), "pass@4": 0.25})
    config = {"seed": 0, "model": "m", "num_samples": 4, "temperature": 1.0, "top_p": 1.0,
              "max_new_tokens": 8}
    write_results(EvalResult(config, [row], [], tmp_path, {}))

    def refuse(token: str) -> None:
        raise ValueError(f"not strict JSON: {token}")

    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"), parse_constant=refuse)
    assert data["benchmarks"]["gsm8k"]["metrics"] == {"pass@1": None, "pass@4": 0.25}


def test_results_md_shows_percent_and_the_std_over_seeds_in_percent(tmp_path: Path):
    """results.md (and the printed table) are in percent: a mean of 0.3 with seed values 0.2 and
    0.4 (sample std 0.141421) is ``30.0 ± 14.1`` and its seed rows ``20.0`` and ``40.0``; its note
    names the seeds and the --limit."""
    row = BenchmarkResult("gsm8k", "math", "", 5, 4, {"pass@1": 0.3}, seeds=[0, 1],
                          per_seed={"0": {"pass@1": 0.2}, "1": {"pass@1": 0.4}},
                          std={"pass@1": 0.02 ** 0.5})
    config = {"seeds": [0, 1], "model": "m", "num_samples": 4, "temperature": 1.0, "top_p": 1.0,
              "max_new_tokens": 8, "limit": 5}
    write_results(EvalResult(config, [row], [], tmp_path, {}))
    note, table = (tmp_path / "results.md").read_text(encoding="utf-8").split("\n\n")
    assert "seeds 0,1 (mean ± std over seeds, then each seed), first 5 problems per benchmark." in note
    assert table.splitlines()[2:] == ["| gsm8k | math | 5 | 30.0 ± 14.1 |", "| gsm8k seed=0 | math | 5 | 20.0 |",
                                      "| gsm8k seed=1 | math | 5 | 40.0 |"]


def test_results_md_names_the_grading_rules_its_verdicts_follow(tmp_path: Path):
    """results.md (a file read, and pasted, alone) said nothing of the answer-grading rules its
    verdicts follow (results.json's config holds them): its note names them; a result without them
    (written before they were recorded) says nothing of them."""
    row = BenchmarkResult("gsm8k", "math", "", 5, 4, {"pass@1": 0.3})
    config = {"seed": 0, "model": "m", "num_samples": 4, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8,
              "grading_rules": 7}
    write_results(EvalResult(config, [row], [], tmp_path, {}))
    note = (tmp_path / "results.md").read_text(encoding="utf-8").split("\n\n")[0]
    assert note == ("Model `m`, n=4, temperature 1.0, top-p 1.0, max 8 new tokens, seed 0, answers graded by "
                    "grading rules 7. Metrics in percent; aggregates are macro means over benchmarks.")
    del config["grading_rules"]
    write_results(EvalResult(config, [row], [], tmp_path, {}))
    assert "grading rules" not in (tmp_path / "results.md").read_text(encoding="utf-8")



@pytest.mark.parametrize("system_prompt, named", [("Answer | briefly.\nThen stop.", ', system prompt "Answer | briefly.\\nThen stop."'),
                                                  (None, ""), ("", "")])
def test_results_md_names_the_system_prompt_its_completions_followed(tmp_path: Path, system_prompt, named):
    """results.md's note named the model, n, temperature, top-p and length, as if those were every
    setting of its sampling, but not `--system-prompt` (a system message changes every prompt, and
    pass@k with it): it names one given, on one line (JSON-quoted); none, or an empty one (no
    system message either, `render_prompt`), is not named."""
    row = BenchmarkResult("gsm8k", "math", "", 5, 4, {"pass@1": 0.3})
    config = {"seed": 0, "model": "m", "num_samples": 4, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8,
              "system_prompt": system_prompt}
    write_results(EvalResult(config, [row], [], tmp_path, {}))
    note = (tmp_path / "results.md").read_text(encoding="utf-8").split("\n\n")[0]
    assert note == (f"Model `m`, n=4, temperature 1.0, top-p 1.0, max 8 new tokens{named}, seed 0. Metrics in "
                    "percent; aggregates are macro means over benchmarks.")

SCRIPTED = [
    (3, ["\\boxed{5}", "\\boxed{3}", "\\boxed{3}", "no answer"], "\\boxed{3}"),  # c=2; 3 wins 2:1
    (7, ["no answer", "no answer", "no answer", "\\boxed{7}"], "\\boxed{1}"),  # c=1; 7, the only vote
    (4, ["\\boxed{4}", "\\boxed{4}", "\\boxed{1}", "\\boxed{8}"], "\\boxed{4}"),  # c=2; 4 wins
    (6, ["\\boxed{2}", "\\boxed{6}", "\\boxed{6}", "\\boxed{2}"], "none"),  # c=2; tie: 2, seen first
]


def test_metrics_of_an_evaluation_are_the_hand_worked_values_of_its_completions(tmp_path: Path):
    """evaluate() end to end on scripted completions, against hand-worked values: correct counts
    c = 2, 1, 2, 2 of n = 4; pass@1 = mean c/n = 1.75/4; pass@2 = mean(1 - C(4-c,2)/C(4,2)) =
    (3 * 5/6 + 1/2) / 4 = 0.75; pass@4 = 1; maj@4 = the most frequent answer (samples without
    one do not vote), a tie going to the one seen first: right, right, right, wrong = 0.75 (a
    minority answer comes first in problem 0; in problem 1 three samples have no answer; in
    problem 2 a vote read against another sample's verdict is wrong); greedy 2 of 4."""
    data = tmp_path / "data"
    data.mkdir()
    rows = [{"question": f"question {gold}?", "answer": f"#### {gold}"} for gold, _, _ in SCRIPTED]
    (data / "gsm8k.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    problems = load_benchmark("gsm8k", data).problems
    generator = ScriptedGenerator({problem.prompt: (sampled, greedy) for problem, (_, sampled, greedy)
                                   in zip(problems, SCRIPTED, strict=True)})
    config = EvalConfig(model="scripted", benchmarks="gsm8k", data_dir=str(data),
                        output_dir=str(tmp_path / "out"), num_samples=4, ks=(1, 2, 4), greedy=True,
                        device="cpu")
    result = evaluate(config, generator, progress=False, print_table=False)
    assert result.benchmarks[0].metrics == pytest.approx(
        {"pass@1": 0.4375, "pass@2": 0.75, "pass@4": 1.0, "avg@4": 0.4375, "maj@4": 0.75, "greedy": 0.5},
        abs=1e-12)


def test_maj_at_n_votes_numbers_of_equal_value_together(tmp_path: Path):
    """Gold 3, n = 5, seeds 0 and 1. Seed 0: 3.0, 7, 3, 7, 3.00 (math-verify extracts them as
    written): 3.0, 3 and 3.00 are one value with 3 votes to 7's 2, so maj@5 = 1 (a vote on strings
    gave 7: 2 votes to 1 each, 0). Seed 1: 3, 7, 7.0, 8, 9: 7 and 7.0 have 2 votes, 3 has 1:
    maj@5 = 0 (strings: a five-way tie, 3 first: 1). Mean over seeds 0.5, per seed 1 and 0."""
    config, _, _ = one_problem_eval(tmp_path, num_samples=5, seeds=(0, 1))
    boxed = [[f"\\boxed{{{a}}}" for a in answers]
             for answers in (["3.0", "7", "3", "7", "3.00"], ["3", "7", "7.0", "8", "9"])]
    result = evaluate(EvalConfig(**config), SeedScriptedGenerator(boxed), progress=False,
                      print_table=False).benchmarks[0]
    assert [result.per_seed[seed]["maj@5"] for seed in ("0", "1")] == [1.0, 0.0]
    assert [result.per_seed[seed]["avg@5"] for seed in ("0", "1")] == [0.6, 0.2]
    assert result.metrics["maj@5"] == 0.5


def test_a_rerun_that_draws_nothing_names_the_backend_that_drew_the_samples(tmp_path: Path):
    """An evaluation killed after its last sample was written, before results.json: the rerun
    loads no model (nothing to draw) and results.json said ``backend_used`` null where the
    uninterrupted run's names the backend; it is the one run.json holds every stored sample to
    (``auto`` resolved: hf, or vllm where installed)."""
    settings, prompt, out = one_problem_eval(tmp_path)
    drawn = evaluate(EvalConfig(**settings), ScriptedGenerator({prompt: (["\\boxed{3}", "\\boxed{4}"], "")}),
                     progress=False, print_table=False)
    assert drawn.config["backend_used"] == "scripted"  # the generator that drew them
    for name in ("results.json", "results.csv", "results.md"):  # the kill came before them
        (out / name).unlink()
    result = evaluate(EvalConfig(**settings), progress=False, print_table=False)  # no model: none loaded
    backend = json.loads((out / "run.json").read_text())["backend"]
    assert backend in ("hf", "vllm")
    assert result.config["backend_used"] == backend
    assert json.loads((out / "results.json").read_text())["config"]["backend_used"] == backend
    assert result.benchmarks[0].metrics["pass@1"] == 0.5


def test_the_table_rounds_a_percent_as_its_results_csv_figure_not_its_binary_float(tmp_path: Path):
    """20 problems, n = 4: avg@4 of 23, 35 and 5 correct samples is exactly 28.75%, 43.75% and
    6.25%; results.csv says 0.287500, 0.437500, 0.062500, and the table printed 28.7 beside 43.8
    (100 * 0.2875 is 28.749999999999996 in binary). Two seeds of 48 and 46 correct: a mean of
    exactly 58.75% whose float is 0.5874999999999999 (printed 58.7). Each printed figure is now
    the exact value rounded half to even (reference: fractions and decimal, not the code)."""
    from decimal import ROUND_HALF_EVEN, Decimal
    from fractions import Fraction

    import numpy as np

    from ict.core.metrics import benchmark_metrics
    from ict.evaluation.results import markdown_table, mean_over_seeds

    def metrics(correct_samples: int) -> dict[str, float]:
        correct = np.zeros((20, 4), dtype=bool)
        correct.flat[:correct_samples] = True
        return benchmark_metrics(correct, (1,))

    def expected(correct_samples: int) -> str:
        exact = Fraction(correct_samples, 80) * 100
        return str((Decimal(exact.numerator) / exact.denominator).quantize(Decimal("0.1"), ROUND_HALF_EVEN))

    rows = [BenchmarkResult(f"b{total}", "math", "", 20, 4, metrics(total), seeds=[0])
            for total in (23, 35, 5)]
    config = {"seeds": [0], "model": "m", "num_samples": 4, "temperature": 1.0, "top_p": 1.0,
              "max_new_tokens": 8}
    result = EvalResult(config, rows, [], tmp_path, {})
    write_results(result)
    csv_rows = list(csv.DictReader(open(tmp_path / "results.csv", encoding="utf-8")))
    assert [r["avg@4"] for r in csv_rows] == ["0.287500", "0.437500", "0.062500"]
    table = [[cell.strip() for cell in line.strip("|").split("|")] for line in markdown_table(result).splitlines()[2:]]
    assert [cells[3:5] for cells in table] == [[expected(t), expected(t)] for t in (23, 35, 5)]
    assert [expected(t) for t in (23, 35, 5)] == ["28.8", "43.8", "6.2"]

    per_seed = {0: metrics(48), 1: metrics(46)}
    mean, std = mean_over_seeds(per_seed)
    assert mean["avg@4"] != 0.5875  # the float residue this test is about
    row = BenchmarkResult("two", "math", "", 20, 4, mean, seeds=[0, 1],
                          per_seed={str(s): m for s, m in per_seed.items()}, std=std)
    two = EvalResult({**config, "seeds": [0, 1]}, [row], [], tmp_path, {})
    assert markdown_table(two).splitlines()[2].split(" | ")[3] == f"{expected(47)} ± 1.8"


def test_the_printed_table_shows_model_benchmark_and_output_paths_as_written(tmp_path: Path, capsys):
    """`ict eval`'s table and its last line went through rich's markup: an output directory
    'out[/x]' (a closing tag that closes nothing) ended a finished evaluation in a MarkupError,
    and a model 'm[b]' or a benchmark file 'set[i]' lost its brackets. Each is printed as written."""
    output_dir = tmp_path / "out[/x]"
    row = BenchmarkResult("set[i]", "custom", "", 3, 4, {"pass@1": 0.5})
    config = {"seed": 0, "model": "m[b]", "num_samples": 4, "temperature": 1.0, "top_p": 1.0,
              "max_new_tokens": 8}
    timing = {"wall_seconds": 1.0, "generation_seconds": 0.5, "generated_tokens": 10, "grading_seconds": 0.1}
    print_results_table(EvalResult(config, [row], [], output_dir, timing))
    text = capsys.readouterr().out
    assert "ict eval: m[b] (percent)" in text
    assert "set[i]" in text and " 50.0 " in text
    assert f"outputs in {output_dir}/ (" in " ".join(text.split())


def test_the_printed_table_keeps_its_title_style_with_the_title_as_written(tmp_path: Path, capsys, monkeypatch):
    """The title became a rich Text (so a model 'm[b]' keeps its brackets), and rich draws a Text
    title as it is, without the table's title style: on a terminal `ict eval`'s title lost its
    italics (rich draws a str title in 'table.title', italic: SGR 3). Reference: rich's own
    rendering of that title as a plain str."""
    import re

    from rich.console import Console
    from rich.table import Table

    monkeypatch.setenv("FORCE_COLOR", "1")
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    row = BenchmarkResult("gsm8k", "math", "", 3, 4, {"pass@1": 0.5})
    config = {"seed": 0, "model": "m[b]", "num_samples": 4, "temperature": 1.0, "top_p": 1.0,
              "max_new_tokens": 8}
    timing = {"wall_seconds": 1.0, "generation_seconds": 0.5, "generated_tokens": 10, "grading_seconds": 0.1}
    print_results_table(EvalResult(config, [row], [], tmp_path / "out", timing))
    printed = capsys.readouterr().out.splitlines()[0]
    reference = Console(force_terminal=True, width=200)
    with reference.capture() as captured:
        reference.print(Table("a" * 40, title="ict eval: m (percent)"))

    def style_of_title(line: str) -> list[str]:  # the escape codes before the title's text
        return re.findall(r"\x1b\[[0-9;]*m", line[:line.index("ict eval:")])

    assert style_of_title(captured.get().splitlines()[0]) == ["\x1b[3m"]  # rich's: italic
    assert style_of_title(printed) == ["\x1b[3m"]
    assert "ict eval: m[b] (percent)" in printed


def test_the_printed_table_names_the_answers_counted_incorrect_without_a_verdict(tmp_path: Path, capsys):
    """A check that timed out, failed or met an unparsable gold counts as incorrect; the counts were
    only in results.json's statuses, so a table of low figures did not say why. The printed output
    names them per benchmark, and says nothing when every answer was graded."""
    timing = {"wall_seconds": 1.0, "generation_seconds": 0.5, "generated_tokens": 10, "grading_seconds": 0.1}
    config = {"seed": 0, "model": "m", "num_samples": 4, "temperature": 1.0, "top_p": 1.0, "max_new_tokens": 8}
    rows = [BenchmarkResult("gsm8k", "math", "", 3, 4, {"pass@1": 0.5}, {"ok": 12}),
            BenchmarkResult("math500", "math", "", 3, 4, {"pass@1": 0.25},
                            {"ok": 8, "no_answer": 1, "timeout": 2, "bad_gold": 1}),
            BenchmarkResult("aime24", "math", "", 1, 4, {"pass@1": 0.0}, {"error": 4})]
    print_results_table(EvalResult(config, rows, [], tmp_path, timing))
    lines = [line for line in capsys.readouterr().out.splitlines() if "without a verdict" in line]
    assert lines == ["counted incorrect without a verdict: math500 2 timeout, 1 bad_gold; aime24 4 error "
                     "(results.json: each benchmark's statuses)"]
    print_results_table(EvalResult(config, rows[:1], [], tmp_path, timing))
    assert "without a verdict" not in capsys.readouterr().out


def test_an_evaluation_of_a_reasoning_gym_set_with_a_list_option_evaluates_it(tmp_path: Path):
    """``--benchmarks gsm8k,rg:...:operators=["+","-"]`` was cut at the list's comma: "unknown
    benchmark '"-"]:size=1'" before anything ran. Each set is evaluated under the name given and
    the suites are the names given (results.json's aggregates)."""
    name = 'rg:basic_arithmetic:operators=["+","-"]:size=1'
    config, prompt, out = one_problem_eval(tmp_path, benchmarks=f"gsm8k,{name}", num_samples=1, ks=(1,))
    rg_prompt = load_benchmark(name).problems[0].prompt
    generator = ScriptedGenerator({prompt: (["\\boxed{3}"], ""), rg_prompt: (["no answer"], "")})
    result = evaluate(EvalConfig(**config), generator, progress=False, print_table=False)
    assert [(row.name, row.metrics["pass@1"]) for row in result.benchmarks] == [("gsm8k", 1.0), (name, 0.0)]

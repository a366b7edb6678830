"""The pairing of `ict compare`'s report (`ict.analysis.compare`) on comparison directories built by
hand: methods paired by seed and problem index on the cells both evaluated, what a pair over fewer
seeds or problems names, and the paired difference's interval, p-value and printed sign. Split
from tests/test_compare_report.py."""

from __future__ import annotations

import json
import shutil

import pytest
from compare_helpers import finished_run

from ict.analysis.compare import RunRecord
from ict.cli import main

pytestmark = pytest.mark.usefixtures("one_thread")


def test_methods_are_paired_by_problem_index_on_the_problems_both_evaluated(tmp_path):
    """grpo evaluated problems 0-3, ict 1-4: the columns were paired by position (a difference of
    0 over 4 problems) and a method with one problem more had no difference rows at all, silently.
    Now each pair is compared on the problems both evaluated, and the report says so."""
    from ict.analysis.compare import RunRecord, summarize

    grpo = {0: [True] * 4, 1: [False] * 4, 2: [False] * 4, 3: [False] * 4}
    ict = {1: [True] * 4, 2: [False] * 4, 3: [False] * 4, 4: [False] * 4, 5: [True] * 4}
    runs = [RunRecord("grpo", 0, tmp_path, [], {"b": grpo}), RunRecord("ict", 0, tmp_path, [], {"b": ict})]
    summary = summarize(runs, resamples=200)
    (row,) = [row for row in summary["differences"] if row["metric"] == "pass@1"]
    assert (row["method"], row["baseline"], row["problems"]) == ("ict", "grpo", 3)
    assert row["difference"] == pytest.approx(1 / 3)  # problems 1-3: (1 - 0) / 3
    assert summary["pairing"][0] == "ict against grpo on b pass@1: paired on the 3 problems both evaluated (of 5 and 4)"


def test_a_pair_over_fewer_seeds_than_a_side_evaluated_is_named(tmp_path):
    """grpo seeds 0-2, ict seeds 0-1: the table's means (ict 50.0, grpo 55.6: ict 5.6 points
    lower) are over each method's seeds, the paired difference over seeds 0 and 1 only (+16.7),
    and the report said nothing of the seed grpo/seed2 left out. Now the pair is named."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    grpo = [[1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]]
    ict = [[1, 1, 0, 0, 0, 0], [1, 1, 1, 1, 0, 0]]
    for label, rows in (("grpo", grpo), ("ict", ict)):
        for seed, row in enumerate(rows):
            finished_run(output, label, {i: [bool(value)] * 2 for i, value in enumerate(row)}, seed=seed)
    report = write_report(output, ("grpo",), 50).read_text()
    assert "| b | pass@1 | grpo | 3 | 6 | 55.6 |" in report and "| b | pass@1 | ict | 2 | 6 | 50.0 |" in report
    assert "| b | pass@1 | ict | grpo | 16.7 |" in report  # (2/6 + 4/6) / 2 - (1/6 + 3/6) / 2, seeds 0 and 1
    assert "- ict against grpo on b pass@1: paired on the 2 seeds both evaluated (of 2 and 3)" in report
    summary = json.loads((output / "summary.json").read_text())
    assert summary["pairing"] == ["ict against grpo on b pass@1: paired on the 2 seeds both evaluated (of 2 and 3)"]


def test_a_method_with_a_seed_not_evaluated_keeps_its_evaluated_seeds(tmp_path):
    """ict seeds 0 and 1 evaluated, seed 2 trained to its end but not evaluated yet (no eval/, so
    not in progress): ict vanished from the pass@k table and from every difference, and the report
    said nothing. Now its evaluated seeds are averaged and compared, and the seed is named."""

    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    for label, rows in (("grpo", [[1, 0, 0, 0], [1, 1, 0, 0]]), ("ict", [[1, 1, 1, 0], [1, 1, 1, 1], [0] * 4])):
        for seed, row in enumerate(rows):
            finished_run(output, label, {i: [bool(value)] * 2 for i, value in enumerate(row)}, seed=seed)
    shutil.rmtree(output / "runs" / "ict" / "seed2" / "eval")
    report = write_report(output, ("grpo",), 50).read_text()
    assert "Runs: 5 (" in report and "In progress" not in report
    assert "| b | pass@1 | ict | 2 | 4 | 87.5 | 17.7 |" in report  # seeds 0 and 1: 3/4 and 4/4
    assert "| b | pass@1 | ict | grpo | 50.0 |" in report  # 7/8 - 3/8
    assert "- ict on b: the 2 seeds evaluated (no final evaluation of b: ict/seed2)" in report


def test_a_method_left_out_of_a_benchmarks_pass_at_k_is_named(tmp_path):
    """ict seed 1 sampled 2 completions per problem, seed 0 four: ict vanished from pass@4 (its
    seed 1's pass@4 is NaN) with no word in the report; random's seeds evaluated problems 0-1 and
    2-3: random vanished from every table. ict's seeds evaluated problems 0-1 and 0-2: its mean
    is over problems 0-1 only, and nothing said so. Each is now a note."""
    from ict.analysis.compare import RunRecord, summarize

    def run(label: str, seed: int, verdicts: dict[int, list[bool]]) -> RunRecord:
        return RunRecord(label, seed, tmp_path, [], {"b": verdicts}, ks=(1, 4))

    runs = [run("grpo", 0, {0: [True] * 4, 1: [False] * 4}), run("grpo", 1, {0: [True] * 4, 1: [False] * 4}),
            run("ict", 0, {0: [True] * 4, 1: [True] * 4, 2: [False] * 4}), run("ict", 1, {0: [True] * 2, 1: [True] * 2}),
            run("random", 0, {0: [True] * 4, 1: [True] * 4}), run("random", 1, {2: [True] * 4, 3: [True] * 4})]
    summary = summarize(runs, resamples=20, baselines=("grpo",))
    assert [(row["method"], row["metric"], row["problems"]) for row in summary["table"]] == [
        ("grpo", "pass@1", 2), ("ict", "pass@1", 2), ("grpo", "pass@4", 2)]
    assert summary["pairing"] == [
        "ict on b pass@1: the 2 problems all its seeds evaluated (of 3)",
        "random on b pass@1: left out (its seeds evaluated no problem in common)",
        "ict on b pass@4: left out (fewer than 4 samples of a problem: ict/seed1)",
        "random on b pass@4: left out (its seeds evaluated no problem in common)"]


def test_two_directories_of_one_seed_are_refused(tmp_path, capsys):
    """runs/ict/seed1 and runs/ict/seed01 both parse as seed 1: the report listed 'ict/seed1,
    ict/seed1', its table averaged both as 2 seeds, and the pair took seed01's scores (+100.0,
    'paired on the 1 seeds both evaluated (of 2 and 2)') while seed1 scored 0. Now refused."""
    output = tmp_path / "cmp"
    for seed in (0, 1):
        finished_run(output, "grpo", {i: [False] * 2 for i in range(4)}, seed=seed)
    copy = finished_run(output, "ict", {i: [True] * 2 for i in range(4)}, seed=1)
    copy.rename(copy.with_name("seed01"))
    finished_run(output, "ict", {i: [False] * 2 for i in range(4)}, seed=1)
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "20"]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: {output}/runs/ict/seed01 and {output}/runs/ict/seed1 are both seed 1 of ict; keep one of "
        "them, named seed1")
    assert not (output / "report.md").exists()


def test_pairs_over_a_subset_or_no_shared_problem_or_seed(tmp_path):
    """Mutation tests of summarize's pairing: stapo evaluated a subset of grpo's problems (the
    note comes when only one side differs from the common set); ict's problems and random's seed
    share nothing with grpo (no difference row, a note, no ValueError from an empty pair); a
    label with no run of a benchmark gets no 'seeds evaluated' note for it; over 16 problems the
    p-value is the Monte Carlo one with the resamples asked for."""
    from ict.analysis.compare import RunRecord, summarize
    from ict.core.significance import paired_permutation_test

    def run(label: str, seed: int, verdicts: dict[int, list[bool]], benchmark: str = "b") -> RunRecord:
        return RunRecord(label, seed, tmp_path, [], {benchmark: verdicts}, ks=(1,))

    grpo = {i: [i % 3 == 0] * 2 for i in range(20)}
    runs = [run("grpo", 0, grpo), run("stapo", 0, {i: [True] * 2 for i in range(4)}),
            run("ict", 0, {i: [True] * 2 for i in range(20, 22)}), run("random", 1, grpo),
            run("entropy", 0, {i: [True, False] for i in range(20)}), run("kl_cov", 0, {0: [True] * 2}, "c")]
    summary = summarize(runs, resamples=7, baselines=("grpo",))
    assert {(row["method"], row["problems"]) for row in summary["differences"] if row["benchmark"] == "b"} == {
        ("stapo", 4), ("entropy", 20)}
    assert summary["pairing"] == [
        "stapo against grpo on b pass@1: paired on the 4 problems both evaluated (of 4 and 20)",
        "ict against grpo on b pass@1: paired on the 0 problems both evaluated (of 2 and 20)",
        "random against grpo on b pass@1: paired on the 0 seeds both evaluated (of 1 and 1)"]
    (entropy,) = [row for row in summary["differences"] if row["method"] == "entropy"]
    scores = {name: [[float(value) for value in (values if name == "grpo" else [0.5] * 20)]]
              for name, values in (("grpo", [i % 3 == 0 for i in range(20)]), ("entropy", None))}
    expected = paired_permutation_test(scores["entropy"], scores["grpo"], resamples=7, seed=0)
    assert entropy["p_value"] == expected and expected != paired_permutation_test(
        scores["entropy"], scores["grpo"], resamples=10, seed=0)


def test_the_reported_difference_interval_and_p_match_a_hand_computation_on_the_shared_cells(tmp_path):
    """Mutation tests of summarize's pairing and the report's row: grpo evaluated seeds 0, 1, 3 and
    problems 0, 1, 3, 4; ict seeds 1, 2, 3 and problems 1-4. The pair is seeds 1 and 3 x problems
    1, 3 and 4 (neither side's first rows or columns: taking the leading positions of either, or
    printing the interval high first, gives other numbers), against a hand-written bootstrap of
    the documented draw (rows, then columns, numpy's default_rng(0)) and an exact enumeration of
    the 2^3 sign patterns."""
    import itertools

    import numpy as np

    from ict.analysis.compare import write_report

    def score(label: str, seed: int, problem: int) -> float:  # pass@1 of 2 samples: 0, 0.5 or 1
        return 1.0 if label == "ict" and (seed + problem) % 4 else (seed + problem) % 2 / 2

    output = tmp_path / "cmp"
    for label, seeds, problems in (("grpo", (0, 1, 3), (0, 1, 3, 4)), ("ict", (1, 2, 3), (1, 2, 3, 4))):
        for seed in seeds:
            finished_run(output, label, {p: [True] * int(2 * score(label, seed, p))
                                          + [False] * (2 - int(2 * score(label, seed, p))) for p in problems}, seed=seed)
    d = np.array([[score("ict", s, p) - score("grpo", s, p) for p in (1, 3, 4)] for s in (1, 3)])
    draw, means = np.random.default_rng(0), []
    for _ in range(40):
        rows, columns = draw.integers(0, 2, 2), draw.integers(0, 3, 3)
        means.append(sum(d[r, c] for r in rows for c in columns) / 6)
    low, high = np.percentile(means, [2.5, 97.5])
    per_problem = d.mean(axis=0)
    p = sum(abs(np.mean(np.array(signs) * per_problem)) >= abs(per_problem.mean()) - 1e-12
            for signs in itertools.product([-1, 1], repeat=3)) / 8
    assert low < high and p < 1
    report = write_report(output, ("grpo",), 40).read_text()
    assert (f"| b | pass@1 | ict | grpo | {100 * d.mean():.1f} | [{100 * low:.1f}, {100 * high:.1f}] | "
            f"{p:.3g} |") in report
    (row,) = json.loads((output / "summary.json").read_text())["differences"]
    assert (row["seeds"], row["problems"]) == (2, 3)
    assert [row["difference"], row["low"], row["high"], row["p_value"]] == pytest.approx([d.mean(), low, high, p])


def test_an_exactly_zero_difference_prints_0_0_not_minus_0_0(tmp_path):
    """ict and grpo solve 1 and 2 of 3 samples of two problems each, on other problems: pass@1
    (1/3, 2/3, 0, 0) against (0, 0, 1/3, 2/3), an exact difference of 0 whose float mean is
    -2.8e-17. The report printed it as -0.0 (ict looking worse); a value that rounds to zero now
    prints 0.0, and a negative one that does not keeps its sign."""
    from ict.analysis.compare import _fmt, write_report

    output = tmp_path / "cmp"
    counts = {"grpo": (0, 0, 1, 2), "ict": (1, 2, 0, 0)}
    for label, solved in counts.items():
        finished_run(output, label, {p: [True] * c + [False] * (3 - c) for p, c in enumerate(solved)})
    report = write_report(output, ("grpo",), 40).read_text()
    (row,) = json.loads((output / "summary.json").read_text())["differences"]
    assert -1e-15 < row["difference"] < 0  # the float residue this test is about
    (line,) = [line for line in report.splitlines() if line.startswith("| b | pass@1 | ict | grpo |")]
    assert line.split(" | ")[4] == "0.0"
    assert (_fmt(-0.0004), _fmt(-0.004, 2, 1.0), _fmt(-0.001), _fmt(0.0004)) == ("0.0", "0.00", "-0.1", "0.0")


def test_two_methods_of_one_exact_mean_print_the_same_figure(tmp_path):
    """20 problems, n = 4, two seeds: ict solves 48 and 46 of each seed's 80 samples, grpo 47 and
    47: both means are exactly 47/80 = 58.75%, but ict's float is 0.5874999999999999 and the
    report printed 58.7 beside grpo's 58.8, a difference the paired row (0.0) does not have. Both
    now print the exact mean rounded half to even (58.8, by hand)."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"

    def verdicts(total: int) -> dict[int, list[bool]]:
        flat = [True] * total + [False] * (80 - total)
        return {p: flat[4 * p: 4 * p + 4] for p in range(20)}

    for label, totals in {"grpo": (47, 47), "ict": (48, 46)}.items():
        for seed, total in enumerate(totals):
            finished_run(output, label, verdicts(total), seed=seed)
    report = write_report(output, ("grpo",), 40).read_text()
    table = json.loads((output / "summary.json").read_text())["table"]
    assert {row["method"]: row["mean"] for row in table}["ict"] != 0.5875  # the residue
    final = report.split("## Paired differences")[0]
    means = {line.split(" | ")[2]: line.split(" | ")[5] for line in final.splitlines()
             if line.startswith("| b | pass@1 | ")}
    assert means == {"grpo": "58.8", "ict": "58.8"}


def test_a_plugin_named_after_a_built_in_with_options_is_no_baseline_in_a_report_only(tmp_path):
    """A plugin method ``grpo-foo:alpha=1`` has the run label ``grpo-foo-alpha=1``, which is also
    that of ``grpo:foo-alpha=1``; with the plugin not loaded (``--report-only``) the label was read
    as the method grpo: the plugin's run was a default baseline (grpo and ict compared against it)
    and ``--baselines grpo-foo`` was refused. The run's config.yaml names its method. Reference:
    the pairs the methods make by hand (grpo the one baseline)."""
    from ict.experiments.compare import CompareConfig

    output = tmp_path / "cmp"
    for label, method, verdicts in [("grpo", "grpo", [True, False, False]),
                                    ("grpo-foo-alpha=1", "grpo-foo", [True, True, False]),
                                    ("ict", "ict", [True, True, True])]:
        run = finished_run(output, label, {index: [value] for index, value in enumerate(verdicts)}, steps=1)
        (run / "config.yaml").write_text(f"method: {method}\nnum_steps: 1\n")
    assert main(["compare", "--report-only", "--output-dir", str(output), "--bootstrap-resamples", "20"]) == 0
    rows = json.loads((output / "summary.json").read_text())["differences"]
    assert {(row["method"], row["baseline"]) for row in rows} == {("grpo-foo-alpha=1", "grpo"), ("ict", "grpo")}
    config = CompareConfig(baselines=("grpo-foo",), output_dir=output, report_only=True)
    assert config.validate().baselines == ("grpo-foo",)  # was "--baselines 'grpo-foo' is none of the runs"

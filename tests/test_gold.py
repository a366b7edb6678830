"""Gold answers round-trip: a completion that boxes the dataset's gold is judged correct against
``normalize_gold(gold, "auto")``, for every gold of every local benchmark file and for a MATH-style
file of interval, set, tuple, matrix, percent, unit and text answers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ict.answers.gold import list_literal, normalize_gold
from ict.answers.verify import check_math_batch
from ict.data.benchmarks import REGISTRY

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "benchmarks"
MATH_STYLE = Path(__file__).parent / "data" / "math_style_golds.jsonl"


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def boxed_pairs(rows: list[dict], gold_fields) -> list[tuple[str, str, object]]:
    """(completion boxing the gold as written, auto-normalised gold, raw gold) per row.

    A gold in bare LaTeX is boxed as it is; a wrapped one (GSM8K's ``#### x``, OlympiadBench's
    ``['$x$']``, a Minerva solution) is boxed as its declared format reads it."""
    pairs = []
    for row in rows:
        for field, declared in gold_fields:
            if row.get(field) not in (None, ""):
                raw = row[field]
                written = raw if declared == "latex" else normalize_gold(raw, declared)
                pairs.append((f"So the answer is $\\boxed{{{written}}}$.", normalize_gold(raw, "auto"), raw))
                break
    return pairs


def assert_all_correct(pairs) -> int:
    verdicts = check_math_batch([(completion, gold) for completion, gold, _ in pairs], timeout_seconds=20)
    wrong = [(raw, gold, verdict.status) for (_, gold, raw), verdict in zip(pairs, verdicts) if not verdict.correct]
    assert not wrong, wrong[:5]
    return len(pairs)


def test_latex_intervals_and_sets_are_not_python_lists():
    assert normalize_gold("[0, \\infty)") == "[0, \\infty)"
    assert normalize_gold("[-1, 3]") == "[-1, 3]"
    assert normalize_gold("['$2$']") == "2"
    assert normalize_gold("['$a$', '$b$']") == "a, b"
    assert list_literal("[1, 2]") is None  # numbers, not strings: an interval or a list in LaTeX
    assert list_literal("['x'") is None
    assert list_literal("__import__('os')") is None  # literal_eval only: never code


def test_math_style_golds_round_trip():
    rows = rows_of(MATH_STYLE)
    assert len(rows) >= 25
    assert assert_all_correct(boxed_pairs(rows, (("answer", "latex"),))) == len(rows)


@pytest.mark.parametrize("name", ["math500", "gsm8k", "aime24", "amc23", "olympiadbench", "minerva_math"])
def test_every_local_benchmark_gold_round_trips(name):
    path = SHARED / f"{name}.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not present (the shared benchmark files sit beside the checkout)")
    spec = REGISTRY[name]
    rows = rows_of(path)
    pairs = boxed_pairs(rows, spec.gold_fields)
    assert len(pairs) == len(rows)
    assert_all_correct(pairs)


def test_punctuation_after_the_formula_is_not_part_of_the_gold():
    assert normalize_gold(["$(-\\infty, 0) \\cup\\{1\\}$."]) == "(-\\infty, 0) \\cup\\{1\\}"
    assert normalize_gold("['$69$,$84$.']") == "69,84"
    assert normalize_gold("$x$;", "latex") == "x"
    assert normalize_gold("\\(x\\) ,", "latex") == "x"
    assert normalize_gold(["\\$5."]) == "\\$5."  # an escaped dollar is no delimiter


def test_an_escaped_dollar_inside_math_delimiters_is_no_second_formula():
    """``$\\$5$`` (a dollar amount typeset as math) kept its delimiters: the escaped ``\\$`` was
    taken for the closing delimiter of a first formula, as in ``$a$, $b$`` (which stays)."""
    assert normalize_gold("$\\$5$", "latex") == "\\$5"
    assert normalize_gold("$\\$1,000$.", "latex") == "\\$1,000"
    assert normalize_gold("\\$5", "latex") == "\\$5"
    assert normalize_gold("$a$, $b$", "latex") == "$a$, $b$"
    assert normalize_gold("$a\\$ and $b$", "latex") == "$a\\$ and $b$"


def test_olympiadbench_gold_with_a_period_after_the_formula():
    """OlympiadBench id 1970 reads ``['$(-\\infty, 0) \\cup\\{1\\}$.']``; the gold kept the '.', so
    the right answer was graded wrong. Reference: math-verify on the raw delimited gold."""
    from math_verify import parse, verify

    path = SHARED / "olympiadbench.jsonl"
    if not path.is_file():
        pytest.skip(f"{path} not present (the shared benchmark files sit beside the checkout)")
    (row,) = [row for row in rows_of(path) if row["id"] == 1970]
    raw = row["final_answer"][0]
    gold = normalize_gold(row["final_answer"], "auto")
    completions = {"The final answer is $\\boxed{(-\\infty, 0) \\cup\\{1\\}}$.": True,
                   "The final answer is $\\boxed{(-\\infty, 0)}$.": False}
    verdicts = check_math_batch([(completion, gold) for completion in completions], timeout_seconds=20)
    for (completion, expected), verdict in zip(completions.items(), verdicts, strict=True):
        assert bool(verify(parse(raw), parse(completion))) is expected
        assert verdict.correct is expected, (completion, gold, verdict)

"""Benchmark registry: names and suites, local files loaded as they are, hub-format rows, offline
hub errors, reasoning-gym tasks, and the paper's seven benchmarks from small files built here; and
the cost benchmark benchmarks/ict_cost.py, run tiny on the CPU."""

from __future__ import annotations

import hashlib
import importlib
import json
import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest
import torch

from ict.core.errors import UsageError
from ict.core.problems import MATH_INSTRUCTION
from ict.data.benchmarks import (
    REASONING_GYM_EVAL_SEED,
    REGISTRY,
    SUITES,
    expand_benchmark_names,
    group_of,
    load_benchmark,
    load_benchmarks,
    parse_reasoning_gym_name,
    problem_from_row,
)

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "benchmarks"

ISSUE_BENCHMARKS = {"math500", "aime24", "aime25", "amc23", "olympiadbench", "minerva_math",
                    "gsm8k", "mmlu_stem", "mmlu_pro", "gpqa_diamond", "commonsense_qa",
                    "arc_challenge"}


def test_registry_and_suites():
    assert ISSUE_BENCHMARKS <= set(REGISTRY)
    for suite in ("math", "olympiad", "commonsense", "paper"):
        assert suite in SUITES
        assert all(name in REGISTRY for name in SUITES[suite])
    paper = SUITES["paper"]
    assert len(paper) == 7 and len(set(paper)) == 7
    assert {group_of(name) for name in paper} == {"math", "olympiad", "commonsense"}
    assert expand_benchmark_names("gsm8k, paper,gsm8k") == ["gsm8k", *[n for n in paper if n != "gsm8k"]]
    assert expand_benchmark_names(["rg:chain_sum"]) == ["rg:chain_sum"]
    with pytest.raises(UsageError, match="unknown benchmark 'nope'"):
        expand_benchmark_names("gsm8k,nope")
    with pytest.raises(UsageError):
        expand_benchmark_names("rg:not_a_task")
    with pytest.raises(UsageError):
        expand_benchmark_names(" , ")


LOCAL_FILES = {  # name -> (rows, first gold, answer type)
    "math500": (500, "\\left( 3, \\frac{\\pi}{2} \\right)", "math"),
    "aime24": (30, "204", "math"),
    "amc23": (40, "27", "math"),
    "olympiadbench": (675, "2", "math"),
    "minerva_math": (272, "1.6", "math"),
    "gsm8k": (1319, "18", "math"),
    "mmlu_stem": (3018, "C", "choice"),
}


@pytest.mark.parametrize("name", sorted(LOCAL_FILES))
def test_local_files_load_as_they_are(name):
    if not (DATA_DIR / f"{name}.jsonl").is_file():
        pytest.skip(f"{DATA_DIR} is absent: the benchmark copies are not on this machine")
    rows, first_gold, answer_type = LOCAL_FILES[name]
    benchmark = load_benchmark(name, DATA_DIR)
    assert len(benchmark.problems) == rows
    first = benchmark.problems[0]
    assert first.answer == first_gold and first.kind == answer_type
    assert all(problem.answer for problem in benchmark.problems)
    assert [p.index for p in benchmark.problems] == list(range(rows))
    if answer_type == "math":
        assert first.prompt.endswith(MATH_INSTRUCTION) and first.question in first.prompt
    else:
        assert "\nA) " in first.prompt and "\nD) " in first.prompt and "\\boxed{}" in first.prompt
    limited = load_benchmark(name, DATA_DIR, limit=3)
    assert [p.prompt for p in limited.problems] == [p.prompt for p in benchmark.problems[:3]]


def test_local_gold_examples():
    if not DATA_DIR.is_dir():
        pytest.skip(f"{DATA_DIR} is absent")
    olympiad = load_benchmark("olympiadbench", DATA_DIR).problems
    by_id = {p.problem_id: p.answer for p in olympiad}
    raw = {json.loads(line)["id"]: json.loads(line)["final_answer"]
           for line in open(DATA_DIR / "olympiadbench.jsonl", encoding="utf-8")}
    multiple = [row for row in raw.values() if "$,$" in row[0]]
    assert multiple, "expected answers typeset as several formulas"
    for key, value in raw.items():
        if "$,$" in value[0]:
            assert by_id[str(key)] == value[0].replace("$", "").strip()
    assert by_id[str(next(iter(raw)))] == "2"
    gsm = load_benchmark("gsm8k", DATA_DIR).problems
    assert all("," not in p.answer and "#" not in p.answer for p in gsm)
    mmlu = load_benchmark("mmlu_stem", DATA_DIR, limit=50).problems
    rows = [json.loads(line) for line in open(DATA_DIR / "mmlu_stem.jsonl", encoding="utf-8")][:50]
    assert [p.answer for p in mmlu] == ["ABCD"[int(row["answer"])] for row in rows]


def test_hub_format_rows():
    # MMLU with a Python-list string and a string index (the README's format)
    problem = problem_from_row(REGISTRY["mmlu_stem"], {
        "question": "2+2?", "choices": "['3', '4', '5', '6']", "answer": "1"}, 0)
    assert problem.answer == "B" and problem.choices == ["3", "4", "5", "6"]
    assert "A) 3\nB) 4\nC) 5\nD) 6" in problem.prompt
    # MMLU-Pro: ten options, letter or index answer
    row = {"question_id": 7, "question": "q", "options": [str(i) for i in range(10)],
           "answer": "J", "answer_index": 9}
    problem = problem_from_row(REGISTRY["mmlu_pro"], row, 0)
    assert problem.answer == "J" and problem.problem_id == "7" and "J) 9" in problem.prompt
    # CommonsenseQA: labels A-E
    row = {"id": "x", "question": "Where?", "answerKey": "E",
           "choices": {"label": ["A", "B", "C", "D", "E"], "text": ["a", "b", "c", "d", "e"]}}
    assert problem_from_row(REGISTRY["commonsense_qa"], row, 0).answer == "E"
    # ARC: some rows use labels "1"-"4"; the gold is mapped by position to a letter
    row = {"id": "y", "question": "Which?", "answerKey": "3",
           "choices": {"label": ["1", "2", "3", "4"], "text": ["w", "x", "y", "z"]}}
    problem = problem_from_row(REGISTRY["arc_challenge"], row, 0)
    assert problem.answer == "C" and "C) y" in problem.prompt
    # GPQA: options shuffled with a per-question fixed seed, the gold follows the correct answer
    row = {"Question": "What is it?", "Correct Answer": "right", "Incorrect Answer 1": "w1",
           "Incorrect Answer 2": "w2", "Incorrect Answer 3": "w3"}
    first = problem_from_row(REGISTRY["gpqa_diamond"], row, 0)
    again = problem_from_row(REGISTRY["gpqa_diamond"], dict(row), 5)
    assert first.choices == again.choices and sorted(first.choices) == ["right", "w1", "w2", "w3"]
    assert first.choices["ABCD".index(first.answer)] == "right"
    # AIME 2025 on the hub uses question/answer
    problem = problem_from_row(REGISTRY["aime25"], {"question": "Find x.", "answer": "70"}, 0)
    assert problem.answer == "70" and problem.prompt.startswith("Find x.")
    # OlympiadBench context is prepended
    row = {"question": "Find n.", "context": "Let n be 2.", "final_answer": ["$2$"]}
    assert problem_from_row(REGISTRY["olympiadbench"], row, 0).question == "Let n be 2.\n\nFind n."
    with pytest.raises(ValueError):
        problem_from_row(REGISTRY["gsm8k"], {"question": "q"}, 0)


def test_local_file_errors(tmp_path):
    with pytest.raises(UsageError, match="benchmark file not found"):
        load_benchmark("gsm8k", tmp_path)
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "q", "answer": "#### 3"}\nnot json\n')
    with pytest.raises(UsageError, match=r"gsm8k.jsonl:2: not valid JSON"):
        load_benchmark("gsm8k", tmp_path)
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "q", "answer": "no marker"}\n')
    with pytest.raises(UsageError, match="row 1 of gsm8k"):
        load_benchmark("gsm8k", tmp_path)
    (tmp_path / "gsm8k.jsonl").write_text('{"question": "q", "answer": "x\\n#### 1,234"}\n')
    assert load_benchmark("gsm8k", tmp_path).problems[0].answer == "1234"
    with pytest.raises(UsageError, match="--limit"):
        load_benchmark("gsm8k", tmp_path, limit=0)


def test_hub_load_offline_is_one_clear_error(monkeypatch):
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_DATASETS_CACHE", "/nonexistent-ict-test-cache")
    with pytest.raises(UsageError) as caught:
        load_benchmark("math500")
    message = str(caught.value)
    assert "\n" not in message
    assert "HuggingFaceH4/MATH-500" in message and "--data-dir" in message


def test_reasoning_gym_tasks():
    import reasoning_gym

    name = "rg:chain_sum:max_terms=2:max_digits=1:size=6"
    task, config, size, seed = parse_reasoning_gym_name(name)
    assert (task, config, size, seed) == ("chain_sum", {"max_terms": 2, "max_digits": 1}, 6,
                                          REASONING_GYM_EVAL_SEED)
    assert REASONING_GYM_EVAL_SEED >= 1_000_000  # training seeds are below 1_000_000
    benchmark = load_benchmark(name)
    reference = reasoning_gym.create_dataset("chain_sum", size=6, seed=REASONING_GYM_EVAL_SEED,
                                             max_terms=2, max_digits=1)
    assert [p.question for p in benchmark.problems] == [reference[i]["question"] for i in range(6)]
    assert [p.answer for p in benchmark.problems] == [reference[i]["answer"] for i in range(6)]
    assert benchmark.scorer.score_answer(answer=benchmark.problems[0].answer,
                                         entry=benchmark.problems[0].entry) == 1.0
    assert group_of(name) == "reasoning_gym"
    assert len(load_benchmarks([name], limit=2)[0].problems) == 2
    assert parse_reasoning_gym_name("rg:gcd:seed=1000007")[3] == 1_000_007
    for bad in ("rg:", "rg:chain_sum:oops", "rg:chain_sum:size=0"):
        with pytest.raises(UsageError):
            parse_reasoning_gym_name(bad)
    with pytest.raises(UsageError, match="cannot create"):
        load_benchmark("rg:chain_sum:no_such_option=3")


# ------------------------------------------------------------------------ the paper's seven

PAPER_SEVEN = ["gsm8k", "math500", "mmlu_stem", "gpqa_diamond", "aime23", "aime24", "aime25"]
INSTRUCTION_END = "put your final answer within \\boxed{}."


def test_paper_suite_is_the_papers_seven():
    assert expand_benchmark_names("paper") == PAPER_SEVEN
    assert [group_of(name) for name in PAPER_SEVEN] == [
        "math", "math", "commonsense", "commonsense", "olympiad", "olympiad", "olympiad"]
    assert expand_benchmark_names("aime23,paper") == ["aime23", *[n for n in PAPER_SEVEN
                                                                  if n != "aime23"]]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")


# name -> rows in the layouts of the published redistributions, and (question, gold, id) expected
PAPER_FILES: dict[str, tuple[list[dict], list[tuple[str, str, str]]]] = {
    "gsm8k": ([{"question": "Tom has 1,000 apples and buys 234 more. How many?",
                "answer": "1000 + 234 = <<1000+234=1234>>1234\n#### 1,234"}],
              [("Tom has 1,000 apples and buys 234 more. How many?", "1234", "0")]),
    "math500": ([{"problem": "Compute $\\frac{2}{4}$.", "solution": "It is $\\boxed{\\frac12}$.",
                  "answer": "\\frac{1}{2}", "subject": "Algebra", "level": 1,
                  "unique_id": "test/algebra/1.json"},
                 {"problem": "What is $3^2$?", "solution": "So $\\boxed{9}$."}],
                [("Compute $\\frac{2}{4}$.", "\\frac{1}{2}", "test/algebra/1.json"),
                 ("What is $3^2$?", "9", "1")]),
    "aime24": ([{"id": 60, "problem": "Find the number $m+n$.", "solution": "... $\\boxed{204}$",
                 "answer": "204", "url": "https://artofproblemsolving.com/wiki/x", "year": "2024"}],
               [("Find the number $m+n$.", "204", "60")]),
    # aime23: the AIME 1983-2024 CSV layout, AI-MO/aimo-validation-aime, MathArena/aime_2023_I
    "aime23": ([{"ID": "2023-I-1", "Year": 2023, "Problem Number": 1, "Question": "Find $p+q$.",
                 "Answer": 263, "Part": "I"},
                {"id": 7, "problem": "Find the remainder.", "answer": "080",
                 "solution": "so $\\boxed{080}$", "url": "https://artofproblemsolving.com/y"},
                {"problem_idx": 3, "problem": "Find $N$.", "answer": 33}],
               [("Find $p+q$.", "263", "2023-I-1"), ("Find the remainder.", "80", "7"),
                ("Find $N$.", "33", "3")]),
    # aime25: opencompass/AIME2025, yentinglin/aime_2025, math-ai/aime25
    "aime25": ([{"question": "Find the sum of all bases $b$.", "answer": "70"},
                {"id": "II-1", "problem": "Find $x$.", "answer": "588", "solution": "",
                 "url": "https://artofproblemsolving.com/z", "year": 2025},
                {"id": 29, "problem": "Find $k$.", "answer": 240.0}],
               [("Find the sum of all bases $b$.", "70", "0"), ("Find $x$.", "588", "II-1"),
                ("Find $k$.", "240", "29")]),
}


@pytest.mark.parametrize("name", sorted(PAPER_FILES))
def test_paper_math_benchmarks_from_local_files(tmp_path, name):
    rows, expected = PAPER_FILES[name]
    write_jsonl(tmp_path / f"{name}.jsonl", rows)
    benchmark = load_benchmark(name, tmp_path)
    assert benchmark.source == str(tmp_path / f"{name}.jsonl")
    assert len(benchmark.problems) == len(expected)
    for index, (problem, (question, gold, problem_id)) in enumerate(
            zip(benchmark.problems, expected, strict=True)):
        assert problem.kind == "math" and problem.benchmark == name and problem.index == index
        assert problem.question == question
        assert problem.prompt.startswith(question + "\n") and problem.prompt.endswith(INSTRUCTION_END)
        assert problem.answer == gold and problem.problem_id == problem_id


def test_mmlu_stem_from_a_local_file(tmp_path):
    write_jsonl(tmp_path / "mmlu_stem.jsonl", [
        {"question": "Which is a prime?", "subject": "abstract_algebra",
         "choices": ["4", "6", "7", "9"], "answer": 2},
        {"question": "Unit of force?", "type": "college_physics",
         "choices": "['joule', 'newton', 'watt', 'pascal']", "answer": "1"}])
    first, second = load_benchmark("mmlu_stem", tmp_path).problems
    assert (first.answer, first.choices) == ("C", ["4", "6", "7", "9"])
    assert "Which is a prime?\n\nA) 4\nB) 6\nC) 7\nD) 9\n\n" in first.prompt
    assert (second.answer, second.choices) == ("B", ["joule", "newton", "watt", "pascal"])


GPQA_QUESTIONS = [f"GPQA question {number}: which option is right?" for number in range(12)]


def gpqa_rows() -> list[dict]:
    return [{"Record ID": f"rec{number}", "Question": question,
             "Correct Answer": f" right {number} ", "Incorrect Answer 1": f"wrong a{number}",
             "Incorrect Answer 2": f"wrong b{number}", "Incorrect Answer 3": f"wrong c{number}\n",
             "High-level domain": "Physics"}
            for number, question in enumerate(GPQA_QUESTIONS)]


def expected_gpqa(row: dict) -> tuple[list[str], str]:
    """The documented rule, computed here: the answers (correct first) shuffled by
    random.Random(seed), seed = the first 8 bytes (big-endian) of SHA-256(question, UTF-8)."""
    answers = [row[field].strip() for field in ("Correct Answer", "Incorrect Answer 1",
                                                "Incorrect Answer 2", "Incorrect Answer 3")]
    seed = int.from_bytes(hashlib.sha256(row["Question"].encode("utf-8")).digest()[:8], "big")
    shuffled = list(answers)
    random.Random(seed).shuffle(shuffled)
    return shuffled, "ABCD"[shuffled.index(answers[0])]


def test_gpqa_diamond_from_a_local_file_shuffles_per_question(tmp_path):
    rows = gpqa_rows()
    write_jsonl(tmp_path / "gpqa_diamond.jsonl", rows)
    problems = load_benchmark("gpqa_diamond", tmp_path).problems
    letters = []
    for row, problem in zip(rows, problems, strict=True):
        choices, letter = expected_gpqa(row)
        assert problem.kind == "choice" and problem.problem_id == row["Record ID"]
        assert problem.choices == choices and problem.answer == letter
        assert problem.choices["ABCD".index(problem.answer)] == row["Correct Answer"].strip()
        assert problem.question == row["Question"]
        options = "\n".join(f"{'ABCD'[i]}) {text}" for i, text in enumerate(choices))
        assert problem.prompt.startswith(f"{row['Question']}\n\n{options}\n\n")
        letters.append(letter)
    assert len(set(letters)) > 1  # the correct answer is not always A
    # the order follows the question, not the row's position or the run
    write_jsonl(tmp_path / "gpqa_diamond.jsonl", rows[::-1])
    reversed_problems = load_benchmark("gpqa_diamond", tmp_path).problems[::-1]
    assert [(p.choices, p.answer) for p in reversed_problems] == [(p.choices, p.answer)
                                                                   for p in problems]
    # a row without one of the four answers is a one-line error naming the field
    broken = dict(rows[0])
    del broken["Incorrect Answer 2"]
    write_jsonl(tmp_path / "gpqa_diamond.jsonl", [broken])
    with pytest.raises(UsageError, match=r"gpqa_diamond.jsonl:1: row 1 of gpqa_diamond: .*"
                                         r"'Incorrect Answer 2'") as caught:
        load_benchmark("gpqa_diamond", tmp_path)
    assert "\n" not in str(caught.value)


def test_paper_suite_loads_from_one_directory(tmp_path):
    for name, (rows, _) in PAPER_FILES.items():
        write_jsonl(tmp_path / f"{name}.jsonl", rows)
    write_jsonl(tmp_path / "mmlu_stem.jsonl", [{"question": "q", "choices": ["a", "b"], "answer": 0}])
    write_jsonl(tmp_path / "gpqa_diamond.jsonl", gpqa_rows()[:2])
    loaded = load_benchmarks("paper", tmp_path)
    assert [benchmark.name for benchmark in loaded] == PAPER_SEVEN
    assert [len(benchmark.problems) for benchmark in loaded] == [1, 2, 1, 2, 3, 1, 3]
    (tmp_path / "aime23.jsonl").unlink()
    with pytest.raises(UsageError, match=r"benchmark file not found: .*aime23\.jsonl"):
        load_benchmarks("paper", tmp_path)


class FakeHub:
    """`datasets.load_dataset` stand-in: records each (path, config, split) asked for and
    returns the rows given for it."""

    def __init__(self, rows: dict[tuple[str, str | None, str], list[dict]]) -> None:
        self.rows = rows
        self.calls: list[tuple[str, str | None, str]] = []

    def __call__(self, path: str, config: str | None = None, split: str | None = None) -> list:
        self.calls.append((path, config, split))
        return self.rows[(path, config, split)]


def test_new_paper_benchmarks_load_from_their_hub_sources(monkeypatch):
    import datasets

    import ict.data.benchmarks as benchmarks

    csv_rows = [{"ID": f"{year}-{part}-{number}", "Year": year, "Problem Number": number,
                 "Question": f"AIME {year} {part} problem {number}", "Answer": number * 7, "Part": part}
                for year in (2022, 2023, 2024) for part in ("I", "II") for number in (1, 2)]
    gpqa = gpqa_rows()[:3]
    hub = FakeHub({
        ("di-zhang-fdu/AIME_1983_2024", None, "train"): csv_rows,
        ("opencompass/AIME2025", "AIME2025-I", "test"): [{"question": "I-1", "answer": "70"}],
        ("opencompass/AIME2025", "AIME2025-II", "test"): [{"question": "II-1", "answer": "588"}],
        ("Idavidrein/gpqa", "gpqa_diamond", "train"): gpqa,
    })
    monkeypatch.setattr(benchmarks, "hub_reachable", lambda: True)
    monkeypatch.setattr(datasets, "load_dataset", hub)
    aime23 = load_benchmark("aime23")
    assert [p.problem_id for p in aime23.problems] == ["2023-I-1", "2023-I-2", "2023-II-1",
                                                       "2023-II-2"]
    assert [p.answer for p in aime23.problems] == ["7", "14", "7", "14"]
    assert aime23.source == "hub:di-zhang-fdu/AIME_1983_2024:train"
    aime25 = load_benchmark("aime25")
    assert [(p.question, p.answer) for p in aime25.problems] == [("I-1", "70"), ("II-1", "588")]
    gpqa_problems = load_benchmark("gpqa_diamond").problems
    assert [(p.choices, p.answer) for p in gpqa_problems] == [expected_gpqa(row) for row in gpqa]
    assert hub.calls == [("di-zhang-fdu/AIME_1983_2024", None, "train"),
                         ("opencompass/AIME2025", "AIME2025-I", "test"),
                         ("opencompass/AIME2025", "AIME2025-II", "test"),
                         ("Idavidrein/gpqa", "gpqa_diamond", "train")]


def test_gated_gpqa_is_one_clear_error(monkeypatch):
    import datasets

    import ict.data.benchmarks as benchmarks

    def gated(*args, **kwargs):
        raise ConnectionError("Dataset 'Idavidrein/gpqa' is a gated dataset on the Hub. You must "
                              "be authenticated to access it.\nmore detail on a second line")

    monkeypatch.setattr(benchmarks, "hub_reachable", lambda: True)
    monkeypatch.setattr(datasets, "load_dataset", gated)
    with pytest.raises(UsageError) as caught:
        load_benchmark("gpqa_diamond")
    message = str(caught.value)
    assert "\n" not in message and "second line" not in message
    assert "Idavidrein/gpqa/gpqa_diamond, split train" in message and "gated" in message
    assert "--data-dir DIR holding gpqa_diamond.jsonl" in message


@pytest.mark.parametrize("name,hub_id", [("gpqa_diamond", "Idavidrein/gpqa"),
                                         ("aime23", "di-zhang-fdu/AIME_1983_2024"),
                                         ("aime25", "opencompass/AIME2025")])
def test_new_paper_benchmarks_offline_is_one_clear_error(monkeypatch, name, hub_id):
    import datasets.config
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_DATASETS_CACHE", "/nonexistent-ict-test-cache")
    with pytest.raises(UsageError) as caught:
        load_benchmark(name)
    message = str(caught.value)
    assert "\n" not in message and hub_id in message
    assert f"--data-dir DIR holding {name}.jsonl" in message


# ------------------------------------------------------------------ benchmarks/ict_cost.py, tiny

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def benchmark_module(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` imported as a module (its folder on ``sys.path`` only
    while importing)."""
    sys.path.insert(0, str(BENCHMARKS))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCHMARKS))


def environment_with_root() -> dict[str, str]:
    """This process's environment with the repository root added to ``PYTHONPATH`` (for a
    benchmark run as a script)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.environ.get("PYTHONPATH"), str(ROOT)]))}


def table_rows(output: str, first_cells: tuple[str, ...]) -> list[list[str]]:
    """The markdown table lines of ``output`` whose first cells are ``first_cells``."""
    rows = []
    for line in output.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and tuple(cells[:len(first_cells)]) == first_cells:
            rows.append(cells)
    return rows


def finite(cell: str, positive: bool = True) -> bool:
    value = float(cell)
    return math.isfinite(value) and (value > 0 if positive else value >= 0)


def test_ict_cost_a_times_every_round_asked_and_stops_at_the_deadline_after_one():
    """(a)'s timed rounds: all ``repeats`` without a deadline; with one already passed, one round
    (never none), each row timed as often as the result says."""
    pytest.importorskip("trl")
    head_rows = benchmark_module("ict_cost").head_rows
    for deadline, expected in ((None, 3), (time.time() - 1.0, 1)):
        result = head_rows(8, 50, (1, 2, 4), "cpu", 3, None, deadline)
        assert result["repeats"] == expected
        assert {len(row["seconds"]) for row in result["rows"].values()} == {expected}, result["rows"]


@pytest.mark.slow  # a process start per section and model; ~30 s on 2 cores
def test_ict_cost_runs_tiny_on_the_cpu(tmp_path):
    pytest.importorskip("trl")
    A_ROWS = benchmark_module("ict_cost").A_ROWS
    report_path = tmp_path / "cost.json"
    env = environment_with_root()
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ict_cost.py"), "--tiny", "--device", "cpu",
                             "--ict-tiles", "8x1000", "--json", str(report_path)], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    tables = {part[:3]: part for part in result.stdout.split("\n### ")[1:]}  # "(a)", "(b)", "(c)"
    assert set(tables) == {"(a)", "(b)", "(c)"}, result.stdout[-3000:]
    # (a): every path, with finite positive seconds and ratios and a finite memory figure
    for label in [*A_ROWS.values(), "ours ICT from hidden states, tile 8x1000"]:
        (row,) = table_rows(tables["(a)"], (label,))
        assert finite(row[1]) and finite(row[2]) and finite(row[3], positive=False), row
    assert "target CPU: ICT <= 1.0x TRL's head" in tables["(a)"]
    # (b): TRL and ICT in TRL, full fine-tuning and LoRA, and their ratios; (c): ours, GRPO and ICT.
    # Columns: configuration, variant, step time, wall per step, generation, training (both (c)
    # only), mean completion length, memory.
    for config in ("full", "lora"):
        for variant in ("trl", "ict", "ict / trl"):
            (row,) = table_rows(tables["(b)"], (config, variant))
            assert finite(row[2]) and finite(row[3]) and row[4] == row[5] == "-" and finite(row[6]), row
            if "/" not in variant:
                assert float(row[6]) == 8.0  # every completion ran to the cap
    for variant in ("grpo", "ict", "ict / grpo"):
        (row,) = table_rows(tables["(c)"], ("full", variant))
        assert finite(row[2]) and finite(row[4]) and finite(row[5]) and finite(row[6]), row
        if "/" not in variant:
            assert float(row[6]) == 8.0
            assert float(row[4]) + float(row[5]) <= float(row[2])  # parts of the step
    assert "full: ict/grpo step time with the generation pooled" in tables["(c)"]
    report = json.loads(report_path.read_text())
    assert set(report["a"]["tiny"]["rows"]) == {*A_ROWS, "ict_hidden_8x1000"}
    assert {run["variant"] for run in report["b"]["tiny"]["runs"]} == {"trl", "ict"}
    assert {run["variant"] for run in report["c"]["tiny"]["runs"]} == {"grpo", "ict"}
    for run in report["c"]["tiny"]["runs"]:
        assert len(run["generation_seconds"]) == len(run["training_seconds"]) == len(run["step_times"])
    # each run's first-step census (sync_census.py): ICT's group layout syncs, its tie rule does not;
    # in TRL, ICT adds to TRL's own syncs, and the generation is left out
    for section in ("b", "c"):
        assert "synchronisations in the first step's" in tables[f"({section})"]
        for run in report[section]["tiny"]["runs"]:
            places = run["first_step_syncs"]
            assert places and all(count > 0 for count in places.values())
            assert not any("ict/core/ranking.py" in place or "generation" in place for place in places)
            if run["variant"] == "ict":
                assert any("ict/core/stats/rows.py" in place for place in places)
    trl_places = {place for run in report["b"]["tiny"]["runs"] if run["variant"] == "trl"
                  for place in run["first_step_syncs"]}
    ict_places = {place for run in report["b"]["tiny"]["runs"] if run["variant"] == "ict"
                  for place in run["first_step_syncs"]}
    assert trl_places and trl_places <= ict_places
    assert not any("error" in run or "skipped" in run
                   for section in ("b", "c") for run in report[section]["tiny"]["runs"])


def test_pooled_ratio_shares_the_generation_between_the_variants():
    """(c)'s estimate net of generation's jitter, on hand-made runs: generation 4, 6 (new) and 5, 9
    (old) seconds, steps 5, 8 and 6, 10: the pooled generation is the median of 4, 5, 6, 9 = 5.5,
    the rests are 1.5 and 1.0, so (5.5 + 1.5) / (5.5 + 1.0) = 7 / 6.5; the direct ratio of the
    median steps, 6.5 / 8, says the opposite of the rests only because of generation."""
    ict_cost = benchmark_module("ict_cost")
    pooled_ratio, summarize = ict_cost.pooled_ratio, ict_cost.summarize

    def run(variant, steps, generations):
        return {"config": "full", "round": 0, "variant": variant, "step_times": [99.0, *steps],
                "generation_seconds": [90.0, *generations], "training_seconds": [1.0] * 3,
                "lengths": [8.0] * 3, "peak_mib": 1.0}

    summary = summarize([run("ict", [5.0, 8.0], [4.0, 6.0]), run("grpo", [6.0, 10.0], [5.0, 9.0])], "c")
    new, old = summary["full"]["ict"], summary["full"]["grpo"]
    assert (new["step_time"], old["step_time"], new["rest"], old["rest"]) == (6.5, 8.0, 1.5, 1.0)
    assert pooled_ratio(new, old) == pytest.approx(7.0 / 6.5)
    assert math.isnan(pooled_ratio({**new, "generation_all": []}, {**old, "generation_all": []}))


def test_sync_census_names_each_synchronisation_by_its_line():
    """benchmarks/sync_census.py on CPU tensors: each operator that reads a value back, once, at
    the line that ran it (``.tolist()`` too, which a CPU tensor answers without the dispatcher);
    nothing for operators that only launch work, nor, counting the device alone, for a CPU
    tensor's reads; and the copies' kinds, from the devices of their ends (no GPU needed)."""
    import inspect
    from types import SimpleNamespace

    sync_census = benchmark_module("sync_census")
    SyncCensus, _kind = sync_census.SyncCensus, sync_census._kind

    def here() -> str:
        return f"tests/test_benchmarks.py:{inspect.currentframe().f_back.f_lineno} ({NAME})"

    NAME = "test_sync_census_names_each_synchronisation_by_its_line"  # noqa: N806
    x = torch.arange(6.0, requires_grad=True)
    expected = []
    with SyncCensus() as census:
        x.nonzero(); expected.append(here())  # noqa: E702
        x.sum().item(); expected.append(here())  # noqa: E702
        x.tolist(); expected.append(here())  # noqa: E702
        x[x > 2]; expected.append(here())  # noqa: E702
        torch.unique(x); expected.append(here())  # noqa: E702
        torch.tensor([5, 6]).repeat_interleave(torch.tensor([1, 2])); expected.append(here())  # noqa: E702
        (x * 2 + 1).repeat_interleave(2).sum().backward()  # no read: sizes known on the host
    assert census.counts == {("read", place): 1 for place in expected}
    assert census.total() == 6 and x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # tolist restored
    with SyncCensus(device_only=True) as census:
        x.nonzero()
        x.tolist()
    assert not census.counts
    to_copy, copy = torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default
    host, device = torch.zeros(2), SimpleNamespace(device=torch.device("cuda"))
    assert _kind(to_copy, (host,), {"device": torch.device("cuda")}, True) == "copy to device"
    assert _kind(to_copy, (host,), {"device": "cuda", "non_blocking": True}, True) == "copy to device (non_blocking)"
    assert _kind(to_copy, (device,), {"device": torch.device("cpu")}, True) == "copy to host"
    assert _kind(copy, (device, host), {}, True) == "copy to device"
    assert _kind(copy, (device, host, True), {}, True) == "copy to device (non_blocking)"
    assert _kind(copy, (host, device), {}, True) == "copy to host"
    assert _kind(to_copy, (host,), {"dtype": torch.float16}, True) is None


def test_triton_compiles_times_each_miss_and_restores_the_hooks():
    """ict_cost's TritonCompiles: from Triton's cache-miss hook to its post-compile hook, for each
    miss, calling the hooks it found, which it puts back afterwards (Triton calls both hooks
    with keyword arguments; a GPU calls them for real)."""
    knobs = pytest.importorskip("triton").knobs
    TritonCompiles = benchmark_module("ict_cost_runs").TritonCompiles
    seen = []
    before = (lambda **kw: seen.append("miss"), lambda **kw: seen.append("ready"))
    knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = before
    try:
        with TritonCompiles() as compiles:
            for _ in range(2):
                knobs.runtime.jit_cache_hook(key="k", fn=None)
                time.sleep(0.01)
                knobs.runtime.jit_post_compile_hook(key="k", fn=None)
        assert compiles.count == 2 and 0.02 <= compiles.seconds < 5
        assert seen == ["miss", "ready"] * 2
        assert (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook) == before
    finally:
        knobs.runtime.jit_cache_hook = knobs.runtime.jit_post_compile_hook = None


def test_device_idle_charges_each_gap_to_the_innermost_host_operator():
    """stats_profile's idle summary on a hand-made trace (microseconds): kernels at [20, 40],
    [35, 45] (one busy span) and [70, 90]; host operators A [0, 100] holding B [10, 30] and C
    [50, 60], and D [105, 110] on another thread. Gaps [0, 20], [45, 70], [90, 110]; the same idle
    time by the innermost phase marked."""
    stats_profile = benchmark_module("stats_profile")
    BETWEEN_OPERATORS = stats_profile.BETWEEN_OPERATORS
    OUTSIDE_PHASES = stats_profile.OUTSIDE_PHASES
    PHASE = stats_profile.PHASE
    device_idle = stats_profile.device_idle

    def span(category, name, start, end, thread=1):
        return {"ph": "X", "cat": category, "name": name, "ts": start, "dur": end - start, "tid": thread}

    events = [span("kernel", "k1", 20, 40), span("gpu_memcpy", "copy", 35, 45), span("kernel", "k3", 70, 90),
              span("cpu_op", "A", 0, 100), span("cpu_op", "B", 10, 30), span("cpu_op", "C", 50, 60),
              span("cpu_op", "D", 105, 110, thread=2), span("cuda_runtime", "cudaLaunchKernel", 12, 14),
              {"ph": "i", "cat": "cpu_op", "name": "instant", "ts": 55}]
    summary = device_idle(events)
    assert summary["gaps"] == 3
    assert summary["window_ms"] == pytest.approx(0.110) and summary["busy_ms"] == pytest.approx(0.045)
    assert summary["idle_ms"] == pytest.approx(0.065)
    assert summary["charged_ms"] == pytest.approx({"A": 0.035, "B": 0.010, "C": 0.010, "D": 0.005,
                                                    BETWEEN_OPERATORS: 0.005})
    assert list(summary["charged_ms"])[0] == "A"
    assert summary["phases_ms"] == {}  # no phase marked
    # the phases: "outer" [0, 100] holding "inner" [40, 60]; [100, 110] is outside both
    marked = events + [span("user_annotation", PHASE + "outer", 0, 100), span("user_annotation", PHASE + "inner", 40, 60),
                       span("user_annotation", "not a phase", 0, 110)]
    assert device_idle(marked)["phases_ms"] == pytest.approx({"outer": 0.040, "inner": 0.015, OUTSIDE_PHASES: 0.010})
    assert device_idle([span("cpu_op", "A", 0, 1)]) is None


@pytest.mark.slow  # ~9 s on 2 cores
def test_stats_profile_runs_tiny_and_marks_ict_phases(tmp_path):
    """benchmarks/stats_profile.py at a tiny shape on the CPU: the three profiles and their
    synchronisation censuses, and ICT's trace holds one range per phase (which a GPU run charges the
    device's idle time to); the phases' wrappers are gone afterwards."""
    import gzip

    from ict.core.stats import tiles

    before = {name: getattr(tiles._Run, name) for name in ("__init__", "passes", "scores")}
    env = environment_with_root()
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stats_profile.py"), "--rows", "3", "--length", "8",
                             "--vocab", "1000", "--width", "16", "--trace-dir", str(tmp_path)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("synchronisations in ") == 3
    events = json.loads(gzip.open(tmp_path / "ict.json.gz", "rt").read())["traceEvents"]
    phases = sorted(e["name"] for e in events if e.get("cat") == "user_annotation")
    assert phases == sorted(f"phase: {name}" for name in (
        "statistics", "row layout", "statistics and score passes", "scores from their sums", "selection", "loss",
        "backward"))
    marking = benchmark_module("stats_profile").phases
    with marking():
        assert tiles._Run.passes is not before["passes"]
    assert {name: getattr(tiles._Run, name) for name in before} == before


def test_stats_speed_times_the_step_parts_side_by_side_with_a_baseline():
    """benchmarks/stats_speed.py --step at a tiny shape: GRPO's and ICT's forward + backward from
    the hidden states, alone (ICT against GRPO) and against a baseline checkout (here this one)."""
    command = [sys.executable, str(BENCHMARKS / "stats_speed.py"), "--step", "--rows", "16", "--length", "8",
               "--vocab", "1000", "--width", "32", "--rounds", "2"]
    alone = subprocess.run(command, capture_output=True, text=True, env=environment_with_root(), timeout=600)
    assert alone.returncode == 0, alone.stderr[-3000:]
    (grpo,) = table_rows(alone.stdout, ("hidden, forward + backward", "grpo"))
    (ict,) = table_rows(alone.stdout, ("hidden, forward + backward", "ict"))
    assert grpo[3] == "1.00" and finite(grpo[2]) and finite(ict[2]) and finite(ict[3])
    paired = subprocess.run([*command, "--baseline", str(ROOT)], capture_output=True, text=True,
                            env=environment_with_root(), timeout=600)
    assert paired.returncode == 0, paired.stderr[-3000:]
    for method in ("grpo", "ict"):
        (row,) = table_rows(paired.stdout, ("hidden, forward + backward", method))
        assert all(finite(cell) for cell in row[2:5]), row


def test_stats_agreement_runs_tiny_and_agrees(tmp_path):
    """benchmarks/stats_agreement.py at a small shape on the CPU: the torch tiles within 1e-5 of
    its float64 computation and ICT's mask equal to float64's apart from ties."""
    report_path = tmp_path / "agreement.json"
    env = environment_with_root()
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stats_agreement.py"), "--vocab", "211",
                             "--length", "12", "--group", "4", "--json", str(report_path)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["shape"] == [8, 12, 211]
    assert max(report["max_abs"]["cpu/torch - float64"].values()) < 1e-5
    assert {"group_mean:kl", "group_mean_absorbing:kl", "group_mean_loo:kl", "group_mean_loo_absorbing:kl"} <= set(
        report["max_abs"]["cpu/torch - float64"])
    assert report["masks"]["cpu/torch"]["of them not decided by a tie"] == 0
    assert "| cpu/torch - float64 |" in result.stdout


def test_kernel_sass_compiles_the_kernels_for_an_h100_here(tmp_path):
    """benchmarks/kernel_sass.py compiles the Triton kernels for sm_90 without a GPU and counts their
    loops' instructions; the group kernel's logarithms are special-function instructions (an
    exponential and two logarithms an element with the leave-one-out mean), not libdevice's
    ~25-instruction logf."""
    pytest.importorskip("triton")
    report_path = tmp_path / "sass.json"
    env = {key: value for key, value in environment_with_root().items() if key != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernel_sass.py"), "--json", str(report_path)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    ours = json.loads(report_path.read_text())["ours"]
    for label in ("ours: statistics pass", "ours: group kernel, group_mean_absorbing",
                  "ours: group kernel, leave-one-out", "ours: group kernel, group_mean_absorbing, JS + KL",
                  "ours: logit gradient (log-probs)"):
        assert f"| {label} |" in result.stdout
        assert 1 < ours[label]["per_element"] < 200 and ours[label]["registers"] <= 255, (label, ours[label])
        assert ours[label]["spill_bytes"] == 0, (label, ours[label])  # no register spilled to local memory
    assert ours["ours: group kernel, leave-one-out"]["special_per_element"] == pytest.approx(3.0, abs=0.1)
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernel_sass.py"), "--baseline", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode == 2 and "holds no ict/core/stats/triton_tiles.py" in bad.stderr


def test_fast_log_bound_is_within_the_agreement_target(tmp_path, capsys):
    """benchmarks/fast_log_bound.py: at Qwen's vocabulary the group kernel's lg2.approx moves no
    JS or KL score by more than 1e-5 nats; at uniform rows its bound is the closed form
    ln 2 * 2^-22 * log2 V * (1.5 for JS, 1 for KL) against the plain group mean."""
    fast_log_bound = benchmark_module("fast_log_bound")
    vocab = 151_936
    assert fast_log_bound.main(["--scales", "0.1,4", "--json", str(tmp_path / "bound.json")]) == 0
    report = json.loads((tmp_path / "bound.json").read_text())
    assert report["met"] and 1e-7 < report["largest"] <= 1e-5
    assert set(report["worst"]["group_mean_absorbing"]) == {"js", "kl"}
    assert set(report["worst"]["group_mean_loo"]) == {"js"}  # no leave-one-out KL kernel
    assert fast_log_bound.main(["--scales", "0", "--json", str(tmp_path / "uniform.json")]) == 0
    uniform = json.loads((tmp_path / "uniform.json").read_text())["worst"]["group_mean"]
    unit = math.log(2) * 2.0 ** -22 * math.log2(vocab)
    assert uniform["js"]["bound"] == pytest.approx(1.5 * unit, rel=1e-9)
    assert uniform["kl"]["bound"] == pytest.approx(unit, rel=1e-9)
    assert uniform["js"]["score"] == pytest.approx(0.0, abs=1e-12)
    assert fast_log_bound.main(["--group", "4", "--vocab", "1000", "--scales", "0.1", "--json",
                                str(tmp_path / "small.json")]) == 0
    assert "| group_mean_loo | js | 0.1 |" in capsys.readouterr().out

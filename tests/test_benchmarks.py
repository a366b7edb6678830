"""Benchmark registry: names and suites, local files loaded as they are, hub-format rows, offline
hub errors, reasoning-gym tasks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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

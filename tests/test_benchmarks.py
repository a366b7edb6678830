"""Benchmark registry: names and suites, local files loaded as they are, hub-format rows, offline
hub errors, reasoning-gym tasks, and the paper's seven benchmarks from small files built here (the
speed scripts in benchmarks/ are tested in tests/test_benchmark_scripts.py and
test_benchmark_ict_cost.py, the GPU's shell scripts in tests/test_gpu_scripts.py)."""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path

import pytest

from ict.core.errors import UsageError
from ict.core.problems import MATH_INSTRUCTION
from ict.data.benchmark_names import (
    REASONING_GYM_EVAL_SEED,
    parse_reasoning_gym_name,
    split_benchmark_names,
)
from ict.data.benchmarks import (
    REGISTRY,
    SUITES,
    expand_benchmark_names,
    group_of,
    load_benchmark,
    load_benchmarks,
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



def test_suites_are_the_documented_ones():
    """docs/evaluation.md's table of suites, read from the page itself."""
    page = (Path(__file__).resolve().parents[1] / "docs" / "evaluation.md").read_text()
    documented = {match[1]: tuple(match[2].split(", "))
                  for match in re.finditer(r"^\| (\w+) \| ([\w, ]+) \|$", page, re.MULTILINE)
                  if match[1] in ("math", "olympiad", "commonsense", "paper")}
    assert documented == {"math": ("math500", "gsm8k", "minerva_math"),
                          "olympiad": ("aime24", "aime25", "amc23", "olympiadbench"),
                          "commonsense": ("commonsense_qa", "arc_challenge", "mmlu_stem", "mmlu_pro",
                                          "gpqa_diamond"),
                          "paper": ("gsm8k", "math500", "mmlu_stem", "gpqa_diamond", "aime23", "aime24",
                                    "aime25")}
    assert SUITES == documented


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
    for gold in ("BC", "AB", ""):  # without answer_index: "BC" was read as B (a substring match)
        with pytest.raises(ValueError, match="gold letter must be one letter|no gold answer|answer"):
            problem_from_row(REGISTRY["mmlu_pro"], {**row, "answer": gold, "answer_index": None}, 0)
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
    assert REASONING_GYM_EVAL_SEED >= 1_000_000  # --seed 0 trains on draws 0 .. 9,999, others
    benchmark = load_benchmark(name)
    reference = reasoning_gym.create_dataset("chain_sum", size=6, seed=1_000_003,  # the documented seed
                                             max_terms=2, max_digits=1)
    assert [p.question for p in benchmark.problems] == [reference[i]["question"] for i in range(6)]
    assert [p.answer for p in benchmark.problems] == [reference[i]["answer"] for i in range(6)]
    assert benchmark.scorer.score_answer(answer=benchmark.problems[0].answer,
                                         entry=benchmark.problems[0].entry) == 1.0
    assert group_of(name) == "reasoning_gym"
    assert len(load_benchmarks([name], limit=2)[0].problems) == 2
    # the bare question as prompt under last_number, through load_benchmarks too (it dropped it)
    bare = load_benchmarks([name], limit=1, answer_extraction="last_number")[0].problems[0]
    assert bare.prompt == reference[0]["question"] != benchmark.problems[0].prompt
    assert parse_reasoning_gym_name("rg:gcd:seed=1000007")[3] == 1_000_007
    for bad in ("rg:", "rg:chain_sum:oops", "rg:chain_sum:size=0"):
        with pytest.raises(UsageError):
            parse_reasoning_gym_name(bad)
    # these were a TypeError (exit 1) or a ValueError naming neither the option nor the set
    for bad, option in (("rg:chain_sum:size=[1]", "size"), ("rg:chain_sum:seed=None", "seed"),
                        ("rg:chain_sum:size=abc", "size"), ("rg:chain_sum:size=2.5", "size")):
        with pytest.raises(UsageError, match=rf"^reasoning-gym {option} must be an integer in '{re.escape(bad)}'"):
            parse_reasoning_gym_name(bad)
    with pytest.raises(UsageError, match="cannot create"):
        load_benchmark("rg:chain_sum:no_such_option=3")
    # the last of a repeated option was taken in silence: a set of max_terms=3 under a name showing 2
    for twice, option in (("rg:chain_sum:max_terms=2:max_terms=3", "max_terms"), ("rg:chain_sum:size=3: size=4", "size")):
        with pytest.raises(UsageError, match=rf"^reasoning-gym option '{option}' is given twice in '{re.escape(twice)}'$"):
            parse_reasoning_gym_name(twice)


def test_a_reasoning_gym_option_nested_too_deep_to_parse_is_read_as_its_text():
    """`size=---...1` (100,000 signs) was the parser's MemoryError, a traceback; it is text now, as
    any value that spells no Python literal is, and refused as size's text."""
    bad = "rg:chain_sum:size=" + "-" * 100_000 + "1"
    with pytest.raises(UsageError, match=r"^reasoning-gym size must be an integer in 'rg:chain_sum:size=---"):
        parse_reasoning_gym_name(bad)
    assert parse_reasoning_gym_name("rg:chain_sum:size=" + "(" * 50 + "3" + ")" * 50 + ": digits = [1, 2] ")[1:3] == (
        {"digits": [1, 2]}, 3)



def test_a_reasoning_gym_option_whose_value_holds_commas_stays_one_benchmark():
    """A list or tuple value (``operators=["+","-"]``, as the docs' Python literals allow) was cut
    at its comma into two names, the second refused as "unknown benchmark '"-"]:size=2'"; a comma
    inside brackets or quotes belongs to the value, one at the top level still separates names."""
    import reasoning_gym

    listed = 'rg:basic_arithmetic:operators=["+","-"]:size=2'
    quoted = "rg:basic_arithmetic:operators=(',', '-'):size=2"
    assert expand_benchmark_names(f"gsm8k, {listed},{quoted} ,paper") == [
        "gsm8k", listed, quoted, *[name for name in PAPER_SEVEN if name != "gsm8k"]]
    assert expand_benchmark_names("rg:chain_sum:size=2,rg:gcd:size=(1)") == ["rg:chain_sum:size=2", "rg:gcd:size=(1)"]
    assert expand_benchmark_names("rg:chain_sum:sep=', ',gsm8k") == ["rg:chain_sum:sep=', '", "gsm8k"]
    benchmark, = load_benchmarks(listed)
    reference = reasoning_gym.create_dataset("basic_arithmetic", size=2, seed=1_000_003, operators=("+", "-"))
    assert [p.question for p in benchmark.problems] == [reference[i]["question"] for i in range(2)]
    assert benchmark.config["operators"] == ["+", "-"]


@pytest.mark.parametrize("text, left_open", [
    ('rg:basic_arithmetic:size=2:format_style="simple,gsm8k', 'a " quote'),
    ("rg:basic_arithmetic:size=2:whitespace='single", "a ' quote"),
    ("rg:basic_arithmetic:size=2:operators=['+',gsm8k", "an opening bracket ((, [ or {)"),
])
def test_a_quote_or_bracket_left_open_in_the_benchmark_list_is_refused(text, left_open, tmp_path, capsys):
    """An unmatched quote took every later name into the option's value: format_style='"simple,gsm8k'
    generated basic_arithmetic and evaluated no gsm8k, without a word."""
    from ict.cli import main

    expected = (f"{left_open} is not closed in the benchmark list {text!r}: close it (an rg: option's text goes "
                "in matching quotes)")
    with pytest.raises(UsageError) as raised:
        expand_benchmark_names(text)
    assert str(raised.value) == expected
    assert main(["eval", "--benchmarks", text, "--output-dir", str(tmp_path / "eval")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.strip().endswith(expected)
    assert expand_benchmark_names("rg:basic_arithmetic:format_style=\"it's\",gsm8k") == [
        "rg:basic_arithmetic:format_style=\"it's\"", "gsm8k"]
    assert split_benchmark_names("rg:chain_sum:x=2),gsm8k") == ["rg:chain_sum:x=2)", "gsm8k"]  # a stray closer


def test_a_negative_reasoning_gym_seed_is_refused():
    """Python's random takes a seed -s as s, so rg:...:seed=-3:size=6 (draws -3 .. 2) asked two of its
    six questions twice, and counted them twice in every rate, without a word."""
    import reasoning_gym

    assert random.Random(-2).random() == random.Random(2).random()
    reference = reasoning_gym.create_dataset("chain_sum", size=6, seed=-3, min_digits=3, max_digits=3)
    assert reference[1]["question"] == reference[5]["question"]  # draws -2 and 2
    name = "rg:chain_sum:seed=-3:size=6:min_digits=3:max_digits=3"
    with pytest.raises(UsageError) as raised:
        load_benchmark(name)
    assert str(raised.value) == (f"reasoning-gym seed must be >= 0 in {name!r}, got -3 (Python's random takes a "
                                 "seed -s as s: a negative seed asks questions twice)")
    assert parse_reasoning_gym_name("rg:chain_sum:seed=0")[3] == 0


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


def test_row_fields_empty_values_and_gold_bounds():
    """A field holding "" counts as absent (the next named field is read); a letter gold is read
    case-insensitively; an index gold must name one of the options (index 4 of four is none)."""
    math = problem_from_row(REGISTRY["math500"], {"problem": "", "question": "What is 1+1?", "answer": "2"}, 0)
    assert (math.question, math.answer) == ("What is 1+1?", "2")
    pro = REGISTRY["mmlu_pro"]
    row = {"question": "q", "options": "", "choices": ["a", "b", "c"], "answer_index": "", "answer": "c"}
    assert problem_from_row(pro, row, 0).answer == "C"
    stem = REGISTRY["mmlu_stem"]
    assert problem_from_row(stem, {"question": "q", "choices": ["a", "b", "c", "d"], "answer": 3}, 0).answer == "D"
    for bad in (4, -1):
        with pytest.raises(ValueError, match="out of range"):
            problem_from_row(stem, {"question": "q", "choices": ["a", "b", "c", "d"], "answer": bad}, 0)


def test_a_choice_question_has_two_to_twenty_six_options():
    """One option is no question, and option letters stop at Z."""
    stem = REGISTRY["mmlu_stem"]
    letters = [chr(ord("A") + number) for number in range(26)]
    assert problem_from_row(stem, {"question": "q", "choices": letters, "answer": 25}, 0).answer == "Z"
    assert problem_from_row(stem, {"question": "q", "choices": ["a", "b"], "answer": 1}, 0).answer == "B"
    for options in (["a"], [*letters, "27th"]):
        with pytest.raises(ValueError, match="expected 2-26 options"):
            problem_from_row(stem, {"question": "q", "choices": options, "answer": 0}, 0)


@pytest.mark.parametrize("labels", [["A", "A", "B"], ["A", "B"], ["1", "2", "3", "4"]])
def test_labels_that_do_not_pair_one_to_one_with_the_texts_are_refused(labels, tmp_path):
    """A repeated label, or more or fewer labels than texts, leaves the gold's text unknown: such a
    row loaded with a guessed answer (the first "A", the second text for "2" of four labels)."""
    row = {"id": "q1", "question": "q", "choices": {"label": labels, "text": ["x", "y", "z"]},
           "answerKey": labels[1]}
    (tmp_path / "arc_challenge.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(UsageError, match=r"arc_challenge.jsonl:1: row 1 of arc_challenge: .*one distinct "
                                         r"label per text"):
        load_benchmark("arc_challenge", tmp_path)


def test_labels_and_the_gold_label_are_read_without_surrounding_spaces():
    """A label_text row's labels are stripped like its gold label: " A"/"B " pair with "B"."""
    row = {"question": "q", "choices": {"label": [" A", "B "], "text": ["x", "y"]}, "answerKey": "B"}
    problem = problem_from_row(REGISTRY["arc_challenge"], row, 0)
    assert (problem.answer, problem.choices) == ("B", ["x", "y"])


def test_a_row_filtered_local_file_names_the_bad_rows_own_line(tmp_path):
    """aime23 from a file in the hub's layout (every year): rows of other years are left out, and a
    bad 2023 row's error names its own line of the file (3), not the line its position among the
    kept rows would have (2)."""
    rows = [{"ID": "2022-I-1", "Year": 2022, "Question": "old", "Answer": "1"},
            {"ID": "2023-I-1", "Year": 2023, "Question": "q1", "Answer": "2"},
            {"ID": "2023-I-2", "Year": 2023, "Question": "q2", "Answer": None}]
    (tmp_path / "aime23.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(UsageError, match=r"aime23.jsonl:3: row 2 of aime23: row has none of the answer"):
        load_benchmark("aime23", tmp_path)
    rows[2]["Answer"] = "3"
    (tmp_path / "aime23.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert [p.answer for p in load_benchmark("aime23", tmp_path).problems] == ["2", "3"]


@pytest.mark.parametrize(("name", "row", "what"), [
    ("gsm8k", {"question": "what is 1 + \\ud800 ?", "answer": "#### 2"}, "field 'question' is not valid text"),
    ("gsm8k", {"question": "what is 1 + 1 ?", "answer": "#### 2\\ud800"}, "its gold answer is no valid Unicode text"),
    ("gsm8k", {"question": "what is 1 + 1 ?", "answer": "#### 2", "id": "q\\udcff"}, "its id is no valid Unicode text"),
    ("mmlu_stem", {"question": "2 + 2?", "choices": ["3", "4\\ud83d", "5", "6"], "answer": 1},
     "field 'choices: option 2' is not valid text"),
])
def test_a_lone_surrogate_in_a_benchmark_row_is_refused_at_its_line(tmp_path: Path, name: str, row: dict,
                                                                   what: str):
    """JSON's ``\\ud800`` escape is a lone surrogate, which no UTF-8 file and no tokenizer takes
    (half of a split emoji, as \\ud83d). Such a row loaded, and `ict eval` failed when writing
    the problem's first record, after generating its completions, with a line that named no
    file ("'utf-8' codec can't encode character '\\ud800' ... surrogates not allowed"); it is a
    bad row, refused at load with its line (2) and the field."""
    good = {"gsm8k": {"question": "what is 2 + 2 ?", "answer": "#### 4"},
            "mmlu_stem": {"question": "1 + 1?", "choices": ["1", "2", "3", "4"], "answer": 1}}[name]
    (tmp_path / f"{name}.jsonl").write_text(json.dumps(good) + "\n" + json.dumps(row).replace("\\\\u", "\\u") + "\n")
    with pytest.raises(UsageError, match=rf"{name}\.jsonl:2: row 2 of {name}: {what}"):
        load_benchmark(name, tmp_path)


@pytest.mark.parametrize(("name", "row", "message"), [
    ("commonsense_qa", {"question": "q", "choices": {"label": ["A", "B"], "text": ["x", "y"]}, "answerKey": "E"},
     r"commonsense_qa.jsonl:1: row 1 of commonsense_qa: gold label 'E' is not one of the labels A, B$"),
    ("mmlu_stem", {"question": "q", "choices": ["x", "y"], "answer": "B"},
     r"mmlu_stem.jsonl:1: row 1 of mmlu_stem: gold index must be an integer \(0-based\), got 'B'$"),
])
def test_a_gold_that_names_no_option_says_so(tmp_path, name, row, message):
    """A label gold absent from the labels, an index gold that is no integer: the line names the
    gold and what it should be (it was Python's own "'E' is not in list", "invalid literal for
    int() with base 10: 'B'")."""
    (tmp_path / f"{name}.jsonl").write_text(json.dumps(row) + "\n")
    with pytest.raises(UsageError, match=message):
        load_benchmark(name, tmp_path)


def test_an_integral_float_index_gold_is_its_index_and_a_fraction_is_refused(tmp_path, capsys):
    """An index gold written ``1.0`` (a pandas export of an integer column with a gap) was refused
    ('gold index must be an integer (0-based), got 1.0'); it names option B. ``1.5`` names no
    option: one line naming the file and line, exit status 2."""
    from ict.cli import main

    def row(answer):
        return json.dumps({"question": "q", "choices": ["w", "x", "y", "z"], "answer": answer}) + "\n"

    (tmp_path / "mmlu_stem.jsonl").write_text(row(1.0) + row("2.0") + row(3) + row(" 0 "))
    assert [p.answer for p in load_benchmark("mmlu_stem", tmp_path).problems] == ["B", "C", "D", "A"]
    (tmp_path / "mmlu_stem.jsonl").write_text(row(1.0) + row(1.5))
    with pytest.raises(UsageError, match=r"mmlu_stem\.jsonl:2: row 2 of mmlu_stem: gold index must be an "
                                         r"integer \(0-based\), got 1\.5$"):
        load_benchmark("mmlu_stem", tmp_path)
    assert main(["eval", "--model", str(tmp_path / "no_model"), "--benchmarks", "mmlu_stem", "--data-dir",
                 str(tmp_path), "--n", "1", "--k", "1", "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "mmlu_stem.jsonl:2" in err, err

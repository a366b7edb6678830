"""Every kind of bad row in a data file is refused through the command line with the file, the line,
the row and one line on stderr, exit code 2: `ict train --dataset FILE` and `ict eval --data-dir DIR`
share the checks of `ict.data.rows`. What published datasets ship (numeric golds, lists of LaTeX
golds, chat messages) is accepted. Every case fails before a model is loaded."""

from __future__ import annotations

import json
import re

import pytest

from ict.cli import main
from ict.core.errors import UsageError, is_finite_number
from ict.data.rows import read_records
from ict.data.training_data import load_training_data

GOOD = {"question": "what is 1 + 1 ?", "answer": "2"}
GOOD_CHOICE = {"question": "which?", "choices": ["a", "b"], "answer": 1}
MESSAGES = [{"role": "user", "content": "what is 1 + 1 ?"}]

# (bad row as JSON text, fragment of the error line); the row is written on line 3 after a good
# row and a blank line, so the error names line 3 and row 2
QUESTION_ROWS = [
    ('{"question": null, "answer": "2"}', "question"),
    ('{"question": 7, "answer": "2"}', "number"),
    ('{"question": true, "answer": "2"}', "boolean"),
    ('{"question": {"text": "q"}, "answer": "2"}', "object"),
    ('{"question": [null], "answer": null}', "question"),
    ('{"question": [{"content": "q"}], "answer": "2"}', "'role'"),
    ('{"question": [{"role": "user"}], "answer": "2"}', "'content'"),
    ('{"question": [{"role": "user", "content": 5}], "answer": "2"}', "must be text"),
    ('{"question": [{"role": null, "content": "q"}], "answer": "2"}', "must be text"),
    # a lone surrogate (JSON's \\ud800) no tokenizer encodes: a TypeError at the first rollout
    ('{"question": "q\\ud800", "answer": "2"}', "lone surrogate"),
    ('{"question": [{"role": "user", "content": "q\\udc00"}], "answer": "2"}', "lone surrogate"),
]
ANSWER_ROWS = [
    ('{"question": "q", "answer": null}', "answer"),
    ('{"question": "q", "answer": false}', "boolean"),
    ('{"question": "q", "answer": {"value": 2}}', "object"),
    ('{"question": "q", "answer": [null]}', "list"),
    ('{"question": "q", "answer": []}', "answer"),
    ('{"question": "q", "answer": NaN}', "number"),
]
LINE_ROWS = [("3", "expected a JSON object"), ("[1, 2]", "expected a JSON object"),
             ('"text"', "expected a JSON object"), ("null", "expected a JSON object"),
             ('{"question": ', "not valid JSON")]
CHOICE_ROWS = [
    ('{"question": "q", "choices": null, "answer": 0}', "choices"),
    ('{"question": "q", "choices": {"a": 1}, "answer": 0}', "object"),
    ('{"question": "q", "choices": ["a", null], "answer": 0}', "option 2"),
    ('{"question": "q", "choices": ["a", ["b"]], "answer": 0}', "option 2"),
    ('{"question": "q", "choices": 4, "answer": 0}', "number"),
    ('{"question": "q", "choices": ["a", "b"], "answer": true}', "boolean"),
    ('{"question": "q", "choices": ["a", "b\\ud800"], "answer": 0}', "lone surrogate"),
]


def write_rows(path, good: dict, bad: str):
    path.write_text(json.dumps(good) + "\n\n" + bad + "\n")
    return path


def assert_one_line(code: int, err: str, *fragments: str) -> None:
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def train_args(model, dataset, run_dir, *extra: str) -> list[str]:
    return ["train", "--model", str(model), "--dataset", str(dataset), "--reward", "last_number",
            "--num-steps", "1", "--no-progress", "--no-tensorboard", "--run-dir", str(run_dir), *extra]


@pytest.mark.parametrize(("bad", "fragment"), QUESTION_ROWS + ANSWER_ROWS + LINE_ROWS)
def test_train_refuses_a_bad_row_with_file_line_and_row(tmp_path, tiny_model_dir, capsys, bad, fragment):
    data = write_rows(tmp_path / "bad.jsonl", GOOD, bad)
    code = main(train_args(tiny_model_dir, data, tmp_path / "run"))
    where = ("bad.jsonl:3",) if (bad, fragment) in LINE_ROWS else ("bad.jsonl:3: row 2",)
    assert_one_line(code, capsys.readouterr().err, *where, fragment)


@pytest.mark.parametrize(("bad", "fragment"), CHOICE_ROWS)
def test_train_refuses_bad_choices(tmp_path, tiny_model_dir, capsys, bad, fragment):
    data = write_rows(tmp_path / "bad.jsonl", GOOD_CHOICE, bad)
    code = main(train_args(tiny_model_dir, data, tmp_path / "run", "--choices-field", "choices"))
    assert_one_line(code, capsys.readouterr().err, "bad.jsonl:3: row 2", fragment)


def eval_args(model, data_dir, out, benchmark: str) -> list[str]:
    return ["eval", "--model", str(model), "--benchmarks", benchmark, "--data-dir", str(data_dir),
            "--output-dir", str(out), "--quiet", "--max-new-tokens", "2"]


@pytest.mark.parametrize(("bad", "fragment"), QUESTION_ROWS + ANSWER_ROWS + LINE_ROWS)
def test_eval_refuses_a_bad_row_with_file_line_and_row(tmp_path, tiny_model_dir, capsys, bad, fragment):
    data = tmp_path / "data"
    data.mkdir()
    write_rows(data / "math500.jsonl", {"problem": "q", "answer": "2"}, bad)
    code = main(eval_args(tiny_model_dir, data, tmp_path / "out", "math500"))
    where = ("math500.jsonl:3",) if (bad, fragment) in LINE_ROWS else ("math500.jsonl:3: row 2",)
    # a benchmark reads text questions only: a chat-message list is refused as "must be text"
    assert_one_line(code, capsys.readouterr().err, *where)
    assert (tmp_path / "out").exists() is False


@pytest.mark.parametrize(("bad", "fragment"), CHOICE_ROWS)
def test_eval_refuses_bad_choices(tmp_path, tiny_model_dir, capsys, bad, fragment):
    data = tmp_path / "data"
    data.mkdir()
    write_rows(data / "mmlu_stem.jsonl", GOOD_CHOICE, bad)
    code = main(eval_args(tiny_model_dir, data, tmp_path / "out", "mmlu_stem"))
    err = capsys.readouterr().err
    assert_one_line(code, err, "mmlu_stem.jsonl:3: row 2")
    if "null" not in bad.split('"choices": ')[1][:5]:  # a null choices field reads as a missing one
        assert fragment in err


def test_what_published_datasets_ship_is_accepted(tmp_path):
    """Numeric golds (AMC's 27.0, a GSM8K-like 18), OlympiadBench's list of LaTeX golds, chat
    messages: accepted, normalised by hand-known values."""
    rows = [{"question": "a", "answer": 27.0}, {"question": "b", "answer": 18},
            {"question": "c", "answer": ["$2$"]}, {"question": "d", "answer": 4.25},
            {"question": MESSAGES, "answer": "x^2"}]
    path = tmp_path / "ok.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    problems = load_training_data(str(path), seed=0).train
    assert sorted(p.answer for p in problems) == sorted(["27", "18", "2", "4.25", "x^2"])
    assert [p.prompt for p in problems if isinstance(p.prompt, list)] == [MESSAGES]


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_leading_byte_order_mark_is_read_past(tmp_path, suffix):
    """A file that begins with the UTF-8 byte-order mark (as Notepad and PowerShell 5 write it) is
    read as its text: the first row is kept with its line number (it was refused: 'Unexpected
    UTF-8 BOM'); a mark that is not at the start stays a bad row."""
    rows = [GOOD, {"question": "what is 2 + 2 ?", "answer": "4"}]
    text = ("".join(json.dumps(row) + "\n" for row in rows) if suffix == ".jsonl"
            else json.dumps(rows))
    path = tmp_path / f"bom{suffix}"
    path.write_bytes(b"\xef\xbb\xbf" + text.encode())
    problems = load_training_data(str(path), seed=0).train
    assert sorted(p.answer for p in problems) == ["2", "4"]
    assert read_records(path).numbers == [1, 2]
    if suffix == ".jsonl":
        path.write_bytes(text.encode() + b"\xef\xbb\xbf" + json.dumps(GOOD).encode())
        with pytest.raises(UsageError, match=r"bom.jsonl:3: not valid JSON"):
            read_records(path)


def test_a_json_list_names_the_record_and_bad_rows_can_be_skipped(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text(json.dumps([GOOD, 5, {"question": None, "answer": "1"}, GOOD]))
    with pytest.raises(UsageError, match=r"rows.json: record 2: expected a JSON object, got a number"):
        load_training_data(str(path))
    data = load_training_data(str(path), skip_bad_rows=True)
    assert len(data.train) == 2
    assert "2 unusable rows skipped; first: " in data.description and "record 2" in data.description


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_json_nested_too_deeply_is_refused_in_one_line(tmp_path, tiny_model_dir, capsys, suffix):
    """JSON nested deeper than the parser's recursion limit: a one-line error naming the file,
    exit code 2, from a .jsonl line and from a .json file alike (the .json reader let Python's
    RecursionError through: exit code 1, no file named)."""
    path = tmp_path / f"deep{suffix}"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    code = main(train_args(tiny_model_dir, path, tmp_path / "run"))
    assert_one_line(code, capsys.readouterr().err, str(path), "nested too deeply")


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_number_longer_than_python_reads_is_refused_in_one_line(tmp_path, tiny_model_dir, capsys, suffix):
    """An integer of 5,000 digits (Python's int() reads 4,300): the .json reader let json's
    ValueError through, "Exceeds the limit (4300 digits) for integer string conversion ... use
    sys.set_int_max_str_digits()", naming no file; the .jsonl one gave the same advice, no user's
    to follow. Now a one-line error naming the file (and the line), exit code 2; skip_bad_rows
    leaves such a line out."""
    row = '{"question": "q", "answer": ' + "1" * 5000 + "}"
    path = tmp_path / f"long{suffix}"
    path.write_text(f"[{row}]" if suffix == ".json" else f"{json.dumps(GOOD)}\n{row}\n")
    code = main(train_args(tiny_model_dir, path, tmp_path / "run"))
    where = str(path) + (":2" if suffix == ".jsonl" else "")
    assert_one_line(code, capsys.readouterr().err, where, "a number of more than 4300 digits")
    if suffix == ".jsonl":
        data = load_training_data(str(path), skip_bad_rows=True)
        assert [problem.answer for problem in data.train] == ["2"]
        assert "1 unusable rows skipped" in data.description

def test_a_benchmark_question_must_be_text_and_numpy_choices_are_a_list():
    """`ict.data.rows`: a benchmark's question is text only (chat messages are for training files);
    choices that come as a numpy array (hub and parquet rows) are read as their list."""
    import numpy as np

    from ict.data.benchmarks import REGISTRY, problem_from_row
    from ict.data.rows import checked_choices

    with pytest.raises(ValueError, match="field 'problem' must be text, got a list of 1"):
        problem_from_row(REGISTRY["math500"], {"problem": MESSAGES, "answer": "2"}, 0)
    assert checked_choices(np.array(["a", "b"]), "choices") == ["a", "b"]



def test_a_benchmark_gold_stored_as_a_list_is_read_as_one(tmp_path):
    """A math gold stored as a list (a redistribution's ["1", "2"]; OlympiadBench's own format) was
    the list's repr, "['1', '2']", which no answer matched; AIME's [70] a TypeError ('float() argument
    must be ... not list'). Read as OlympiadBench's list: the answers joined with ", "."""
    from ict.answers.verify import check_math
    from ict.data.benchmarks import load_benchmark

    (tmp_path / "math500.jsonl").write_text(json.dumps({"problem": "roots?", "answer": ["1", "$2$"]}) + "\n")
    (tmp_path / "aime24.jsonl").write_text(json.dumps({"problem": "q?", "answer": [70]}) + "\n")
    gold = load_benchmark("math500", tmp_path).problems[0].answer
    assert gold == "1, 2" and load_benchmark("aime24", tmp_path).problems[0].answer == "70"
    assert check_math("so \\boxed{1, 2}", gold).correct


def test_a_benchmark_gold_stored_as_a_list_of_one_is_read_in_its_fields_format(tmp_path):
    """One answer stored as a list is that answer, read as its field says: a solution field's
    ["... \\boxed{3}"] is 3 (read as a list it was the whole solution text), a gsm8k field's
    ["... #### 5"] is 5, a number field's [70.0] is 70."""
    from ict.data.benchmarks import load_benchmark

    (tmp_path / "minerva_math.jsonl").write_text(
        json.dumps({"problem": "q?", "solution": ["Adding, we get $\\boxed{3}$ in all."]}) + "\n")
    (tmp_path / "gsm8k.jsonl").write_text(json.dumps({"question": "q?", "answer": ["2 + 3 = 5\n#### 5"]}) + "\n")
    (tmp_path / "aime24.jsonl").write_text(json.dumps({"problem": "q?", "answer": [70.0]}) + "\n")
    assert [load_benchmark(name, tmp_path).problems[0].answer for name in ("minerva_math", "gsm8k", "aime24")] == [
        "3", "5", "70"]


def test_a_line_of_spaces_is_a_blank_line(tmp_path):
    """A .jsonl line of spaces and tabs is blank, as an empty one: left out, the next row keeps its
    line number (not refused as bad JSON)."""
    path = tmp_path / "spaces.jsonl"
    path.write_text(json.dumps(GOOD) + "\n \t  \n" + json.dumps({"question": "b", "answer": "3"}) + "\n")
    rows = read_records(path)
    assert [row["answer"] for row in rows] == ["2", "3"] and rows.numbers == [1, 3]


def test_a_gold_integer_too_large_for_a_float_is_read_as_its_digits(tmp_path):
    """2^1400 (422 digits) as a JSON number, a gold of ict train's file and of ict eval's benchmark
    file: read as its digits (is_finite_number converted it to a float: OverflowError, exit 1)."""
    from ict.data.benchmarks import load_benchmark

    big = 2**1400
    path = tmp_path / "big.jsonl"
    path.write_text(json.dumps({"question": "2^1400 ?", "answer": big}) + "\n" + json.dumps(GOOD) + "\n")
    assert sorted(p.answer for p in load_training_data(str(path), seed=0).train) == sorted(["2", str(big)])
    (tmp_path / "aime24.jsonl").write_text(json.dumps({"problem": "2^1400 ?", "answer": big}) + "\n")
    assert load_benchmark("aime24", tmp_path).problems[0].answer == str(big)
    assert is_finite_number(big) and is_finite_number(-big) and is_finite_number(2.5)
    assert not any(is_finite_number(value) for value in (True, float("inf"), float("nan"), "3", None))


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r\r\n", b"\r"])
def test_windows_line_endings_keep_each_rows_line_number_as_an_editor_counts_it(tmp_path, ending):
    """Rows on lines 1, 3 and 4 (line 2 blank) are on lines 1, 3 and 4 whatever the line ending,
    as ``grep -n`` and an editor number them; with "\\r\\r\\n" (a CRLF file converted again) each
    line counted twice, so a bad row on line 5 was reported on line 9."""
    good = [json.dumps({"question": f"q{number}", "answer": str(number)}).encode() for number in range(3)]
    path = tmp_path / "rows.jsonl"
    path.write_bytes(ending.join([good[0], b"", good[1], good[2], b'{"question": "q", "answer": null}', b""]))
    rows = read_records(path)
    assert rows[:3] == [{"question": f"q{number}", "answer": str(number)} for number in range(3)]
    assert rows.numbers == [1, 3, 4, 5]
    with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:5: row 4: field 'answer' must be text"):
        load_training_data(str(path), seed=0)
    path.write_bytes(good[0] + b"\r" + good[1] + b"\n" + good[2] + b"\r\n")  # a lone "\r" inside a line: still a break
    assert read_records(path).numbers == [1, 1, 2]

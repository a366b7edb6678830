"""Properties of the run directory's append-only JSON Lines files: any records, written the way a
run writes them and cut at any byte (a torn tail: a kill mid-write), read back as every whole
record and nothing else, by every reader of that file."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from ict.analysis.comparison_runs import read_verdicts
from ict.analysis.plots import read_metrics
from ict.analysis.token_view import rollout_from_samples
from ict.core.errors import UsageError
from ict.evaluation.records import load_sample_records, prepare_output_dir, write_all_records
from ict.runs.checkpoint import truncate_jsonl
from ict.runs.reporting import MetricsLogger

# U+2028, U+2029 and U+0085: line breaks to `str.splitlines`, left raw by json.dumps(ensure_ascii=False)
LINE_BREAKS = ["\u2028", "\u2029", "\x85", "\r", "\n", "\x0b", "\x0c", "\x1c", "é", "\U0001f600"]
texts = st.lists(st.sampled_from(LINE_BREAKS) | st.text(max_size=4), max_size=6).map("".join)


def _sample(number: int, completion: str, correct: bool) -> dict:
    """One sampled `ict eval` record of gsm8k #0 under seed 0 (the fields its readers need)."""
    return {"benchmark": "gsm8k", "index": 0, "seed": 0, "sample": number, "prompt": "what is 1 + 2 ?",
            "completion": completion, "extracted": None, "status": "no_answer", "correct": correct}


def _whole_records(data: bytes, cut: int) -> int:
    """How many records (one a line) lie whole in the first ``cut`` bytes, a last one without
    its newline included."""
    lines = data[:cut].split(b"\n")
    return len(lines) - 1 + (lines[-1] != b"" and data[cut:cut + 1] == b"\n")


@given(completions=st.lists(st.tuples(texts, st.booleans()), min_size=1, max_size=5), cut=st.floats(0, 1))
@example(completions=[("plain", True), ("line\u2028break", False), ("next\x85line", True)], cut=1.0)
def test_samples_jsonl_cut_anywhere_reads_every_whole_record_in_both_readers(tmp_path_factory, completions, cut):
    """`ict eval` (load_sample_records) and `ict compare` (read_verdicts) read the same records:
    those whole before the cut. `ict compare` split lines at U+2028 / U+0085 inside a completion
    (str.splitlines), silently dropping that sample from its pass@k."""
    records = [_sample(number, text, correct) for number, (text, correct) in enumerate(completions)]
    path = tmp_path_factory.mktemp("samples") / "samples.jsonl"
    write_all_records(path, {"gsm8k#0#seed=0": records})
    data = path.read_bytes()
    end = round(cut * len(data))
    path.write_bytes(data[:end])
    whole = records[:_whole_records(data, end)]
    read = load_sample_records(path).get("gsm8k#0#seed=0", [])
    assert [record["completion"] for record in read] == [record["completion"] for record in whole]
    expected = {"gsm8k": {0: [record["correct"] for record in whole]}} if whole else {}
    assert read_verdicts(path) == expected


def test_compare_reads_a_completion_with_a_unicode_line_separator_as_one_sample(tmp_path: Path):
    """Regression: three samples, the second and third with U+2028 and U+0085 in their text;
    `ict compare` read one verdict (the other two lines torn in two and skipped)."""
    path = tmp_path / "samples.jsonl"
    write_all_records(path, {"k": [_sample(0, "7", True), _sample(1, "a\u2028b", False),
                                   _sample(2, "c\x85d", True)]})
    assert read_verdicts(path) == {"gsm8k": {0: [True, False, True]}}


def test_a_whole_last_record_without_its_newline_is_read_by_every_reader(tiny_tokenizer, tmp_path: Path):
    """A file whose last record lacks its newline (copied by hand, written by another tool): the
    record is whole, and `ict eval`, `ict compare` and `ict inspect --samples` all read it."""
    path = tmp_path / "samples.jsonl"
    write_all_records(path, {"k": [_sample(0, "so 3\u2028", True), _sample(1, "it is 3", False)]})
    path.write_bytes(path.read_bytes().removesuffix(b"\n"))
    assert [record["sample"] for record in load_sample_records(path)["gsm8k#0#seed=0"]] == [0, 1]
    assert read_verdicts(path) == {"gsm8k": {0: [True, False]}}
    assert rollout_from_samples(tiny_tokenizer, path).completions == [["so 3\u2028", "it is 3"]]


@pytest.mark.parametrize("end", [b"\r", b"\r\n", b"\r\r\n"])
def test_every_reader_reads_a_file_whose_lines_end_otherwise(tiny_tokenizer, tmp_path: Path, end):
    """A samples.jsonl converted to an old Mac's lone "\\r" line ends was one torn line to every
    reader: `ict compare` and `ict inspect` read no sample, and `ict eval`'s resume rewrote the
    file empty (its samples lost); "\\r\\n" and the "\\r\\r\\n" of a second conversion read
    alike. A last line without its end is read when whole, left out when torn; a bad line before
    it is named by its number, lone "\\r" ends counted."""
    path = tmp_path / "samples.jsonl"
    records = [_sample(0, "so 3\r", True), _sample(1, "it is\r\n3", False), _sample(2, "3", True)]
    lines = [json.dumps(record, ensure_ascii=False).encode() for record in records]
    for tail in (end, b""):
        path.write_bytes(end.join(lines) + tail)
        assert [record["completion"] for record in load_sample_records(path)["gsm8k#0#seed=0"]] == [
            "so 3\r", "it is\r\n3", "3"]
        assert read_verdicts(path) == {"gsm8k": {0: [True, False, True]}}
        assert rollout_from_samples(tiny_tokenizer, path).completions == [["so 3\r", "it is\r\n3", "3"]]
    path.write_bytes(end.join(lines) + end + lines[0][:-5])  # a torn fourth line
    assert read_verdicts(path) == {"gsm8k": {0: [True, False, True]}}
    for tail in (end, b""):
        path.write_bytes(end.join([lines[0], lines[1][:-5], lines[2]]) + tail)
        with pytest.raises(UsageError, match=r"samples.jsonl:2: not an evaluation sample \(no JSON"):
            read_verdicts(path)
    path.write_bytes(end.join([lines[0], lines[1], lines[2][:-5]]) + end)  # ended: not torn
    with pytest.raises(UsageError, match=r"samples.jsonl:3: not an evaluation sample \(no JSON"):
        read_verdicts(path)
    current = {"model": "m", "num_samples": 3, "greedy": False, "temperature": 1.0, "top_p": 1.0,
               "max_new_tokens": 8, "system_prompt": None, "answer_extraction": "tag", "dtype": "fp32",
               "backend": "hf"}
    path.unlink()
    prepare_output_dir(tmp_path, current, {}, 3, False)  # run.json
    path.write_bytes(end.join(lines) + end)
    finished, _ = prepare_output_dir(tmp_path, current, {}, 3, False)  # a resume keeps the three
    assert [record["sample"] for record in finished["gsm8k#0#seed=0"]] == [0, 1, 2]
    assert [json.loads(line)["sample"] for line in path.read_text(encoding="utf-8").splitlines()] == [0, 1, 2]


@pytest.mark.parametrize("torn", ["inside the JSON", "inside a character"])
def test_inspect_reads_the_whole_records_before_a_torn_last_line(tiny_tokenizer, tmp_path: Path, torn):
    """An evaluation killed while appending its third record: `ict eval` and `ict compare` read
    the two whole records; `ict inspect --samples` refused the file (a torn JSON line named as 'not
    a {prompt, completion} JSON record', a torn character as 'not UTF-8 text; re-encode the file')."""
    path = tmp_path / "samples.jsonl"
    write_all_records(path, {"k": [_sample(0, "so 3", False), _sample(1, "it is 3", True), _sample(2, "3 日", True)]})
    data = path.read_bytes()
    path.write_bytes(data[:len(data) - 10] if torn == "inside the JSON" else data[:data.rindex("日".encode()) + 1])
    assert read_verdicts(path) == {"gsm8k": {0: [False, True]}}
    assert rollout_from_samples(tiny_tokenizer, path).completions == [["so 3", "it is 3"]]


@pytest.mark.parametrize(("text", "number"), [
    ('{"prompt": "a", "completion": "b"}\n{"prompt": "a", "completion": "c"}\n{"prompt": "a"}', 3),
    ('{"prompt": "a", "completion": "b"}\n{"prompt": "a", "compl\n{"prompt": "a", "completion": "c"}\n', 2),
])
def test_inspect_still_refuses_a_bad_line_that_is_not_a_torn_last_line(tiny_tokenizer, tmp_path: Path, text, number):
    """Only a torn line (a last line without its newline that is no JSON) is left out: a whole JSON
    last line without 'completion', or a line of no JSON before others, is still the one-line error
    naming it."""
    path = tmp_path / "samples.jsonl"
    path.write_text(text)
    with pytest.raises(UsageError, match=rf"samples.jsonl:{number}: not a \{{prompt, completion\}} JSON record"):
        rollout_from_samples(tiny_tokenizer, path)


@pytest.mark.parametrize("damage", [b'{"benchmark": "gsm8k", "ind', b'{"completion": "caf\xe9"}'],
                         ids=["no JSON", "no UTF-8"])
def test_every_reader_refuses_an_unreadable_line_before_the_last_naming_its_line(tiny_tokenizer, tmp_path: Path,
                                                                                   damage):
    """samples.jsonl is append-only: a crash leaves at most a torn last line. A line of no JSON or
    no UTF-8 before the last (a file edited or concatenated by hand) is a one-line error naming
    file:line in all three readers: `ict eval` skipped it (and its resume rewrote the file without
    it), `ict compare` skipped a line of no JSON (that problem a sample short, pass@k computed on
    2 of 3 samples without a word); a blank line is no record, and all three pass over it."""
    path = tmp_path / "samples.jsonl"
    lines = [json.dumps(_sample(number, "so 3", True)).encode() for number in range(2)]
    path.write_bytes(lines[0] + b"\n\n" + damage + b"\n" + lines[1] + b"\n")
    readers = [load_sample_records, read_verdicts, lambda path: rollout_from_samples(tiny_tokenizer, path)]
    for reader in readers:
        with pytest.raises(UsageError, match=rf"^{re.escape(str(path))}:3: not "):
            reader(path)
    path.write_bytes(lines[0] + b"\n\n" + lines[1] + b"\n\n" + damage)  # torn last line: left out
    assert [record["sample"] for record in load_sample_records(path)["gsm8k#0#seed=0"]] == [0, 1]
    assert read_verdicts(path) == {"gsm8k": {0: [True, True]}}
    assert rollout_from_samples(tiny_tokenizer, path).completions == [["so 3", "so 3"]]


def test_every_reader_reads_the_first_record_after_a_byte_order_mark(tiny_tokenizer, tmp_path: Path):
    """A samples.jsonl saved by a Windows editor starts with a byte-order mark: the first record is
    read like the others (`ict eval` left it out, its line no JSON to it)."""
    path = tmp_path / "samples.jsonl"
    write_all_records(path, {"k": [_sample(0, "so 3", False), _sample(1, "it is 3", True)]})
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert [record["sample"] for record in load_sample_records(path)["gsm8k#0#seed=0"]] == [0, 1]
    assert read_verdicts(path) == {"gsm8k": {0: [False, True]}}
    assert rollout_from_samples(tiny_tokenizer, path).completions == [["so 3", "it is 3"]]


def test_inspect_reads_a_samples_completion_with_a_unicode_line_separator(tiny_tokenizer, tmp_path):
    """`ict inspect --samples` of an evaluation's samples.jsonl: a completion holding U+2028 was
    a 'not a {prompt, completion} JSON record' error at a line `ict eval` wrote itself."""
    path = tmp_path / "samples.jsonl"
    write_all_records(path, {"k": [_sample(0, "so 3\u2028", True), _sample(1, "it is 3", True)]})
    rollout = rollout_from_samples(tiny_tokenizer, path)
    assert rollout.completions == [["so 3\u2028", "it is 3"]]


def _null_if_not_finite(value: float | int | None) -> float | int | None:
    """A metric as strict JSON stores it: NaN and infinities as null."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


metric_values = st.floats(allow_nan=True, allow_infinity=True) | st.none() | st.integers(-10**20, 10**20)


@given(rows=st.lists(st.fixed_dictionaries({"loss": metric_values, "note": texts}), min_size=1, max_size=5),
       cut=st.floats(0, 1), keep=st.integers(0, 6))
def test_metrics_jsonl_cut_anywhere_reads_every_whole_step(tmp_path_factory, rows, cut, keep):
    """metrics.jsonl as MetricsLogger appends it, cut at any byte: `ict plot`'s reader gets the
    steps whole before the cut; a resume to step ``keep`` (truncate_jsonl) keeps those of them up
    to it, each as it was written (NaN and infinities as null)."""
    run_dir = tmp_path_factory.mktemp("run")
    logger = MetricsLogger(run_dir, tensorboard=False)
    for step, row in enumerate(rows, 1):
        logger.log({"step": step, **row})
    path = run_dir / "metrics.jsonl"
    data = path.read_bytes()
    end = round(cut * len(data))
    path.write_bytes(data[:end])
    expected = [{"step": step, "loss": _null_if_not_finite(row["loss"]), "note": row["note"]}
                for step, row in enumerate(rows[:_whole_records(data, end)], 1)]
    assert read_metrics(run_dir) == expected
    truncate_jsonl(path, keep)
    assert [json.loads(line) for line in path.read_text().splitlines()] == expected[:keep]

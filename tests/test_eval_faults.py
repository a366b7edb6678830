"""SIGKILL a real `ict eval` process mid-run and restart it: finished problems are not generated
again, none is counted twice, and the results equal an uninterrupted evaluation's; with one
sampling seed and with several (`--seeds`: no seed's samples mixed into another's). A rerun on a
full disk keeps the directory resumable."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def write_gsm8k(directory: Path, size: int = 24) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"question": f"what is {a} + {a % 5} ?", "answer": f"{a} + {a % 5} = {a + a % 5}\n#### {a + a % 5}"}
            for a in range(size)]
    (directory / "gsm8k.jsonl").write_text("\n".join(json.dumps(row) for row in rows) + "\n")
    return directory


def eval_command(model: Path, data: Path, out: Path, extra: tuple[str, ...] = ()) -> list[str]:
    return [sys.executable, "-m", "ict", "eval", "--model", str(model), "--benchmarks", "gsm8k", "--data-dir",
            str(data), "--n", "2", "--k", "1,2", "--max-new-tokens", "6", "--batch-size", "2", "--device", "cpu",
            "--output-dir", str(out), "--quiet", "--threads", "1", *extra]


def environment() -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "HOME": os.environ.get("HOME", "/tmp")}


def sample_records(out: Path) -> list[dict]:
    """The complete records of samples.jsonl; a line being written (or torn by the kill) is left
    out, as the resume does."""
    path = out / "samples.jsonl"
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
@pytest.mark.parametrize("seeds", [(0,), (0, 1)], ids=["one-seed", "two-seeds"])
def test_killed_evaluation_resumes_without_redoing_or_double_counting(tiny_model_dir, tmp_path, seeds):
    data = write_gsm8k(tmp_path / "data")
    reference = tmp_path / "reference"
    extra = () if len(seeds) == 1 else ("--seeds", ",".join(map(str, seeds)))
    total = 24 * 2 * len(seeds)  # problems x n x seeds
    done = subprocess.run(eval_command(tiny_model_dir, data, reference, extra), env=environment(),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    expected = json.loads((reference / "results.json").read_text())

    out = tmp_path / "killed"
    process = subprocess.Popen(eval_command(tiny_model_dir, data, out, extra), env=environment(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 600
    while len(sample_records(out)) < 8 and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert process.poll() is None, "the evaluation finished before it could be killed"
    process.send_signal(signal.SIGKILL)
    process.wait()
    before = {(r["benchmark"], r["index"], r["seed"], r["sample"]): r["completion"]
              for r in sample_records(out)}
    assert 0 < len(before) < total and not (out / "results.json").exists()

    finish = subprocess.run(eval_command(tiny_model_dir, data, out, extra), env=environment(),
                            capture_output=True, text=True, timeout=600)
    assert finish.returncode == 0, finish.stderr[-2000:]
    records = sample_records(out)
    keys = [(r["benchmark"], r["index"], r["seed"], r["sample"]) for r in records]
    assert len(keys) == len(set(keys)) == total  # every problem once per seed and sample, none twice
    assert {r["seed"] for r in records} == set(seeds)
    after = dict(zip(keys, (r["completion"] for r in records), strict=True))
    finished_before = {key for key in before if sum(k[1:3] == key[1:3] for k in before) == 2}
    assert all(after[key] == before[key] for key in finished_before)  # finished units kept as they were
    resumed = json.loads((out / "results.json").read_text())
    assert resumed["benchmarks"] == expected["benchmarks"]


@contextlib.contextmanager
def file_size_limit(size: int):
    """Writes that would grow a file past ``size`` bytes fail with EFBIG, as on a full disk
    (RLIMIT_FSIZE; Python ignores SIGXFSZ); the limit is lifted on exit."""
    resource = pytest.importorskip("resource")
    previous = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, previous[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, previous)


def test_a_rerun_on_a_full_disk_leaves_run_json_whole(tmp_path):
    """Every rerun rewrites run.json; written in place, a write cut short (disk full, a kill) left
    it torn, and each later rerun refused the directory ('not a JSON object; pass --overwrite'),
    its finished samples with it."""
    from ict.answers.grading import Verdict
    from ict.core.problems import Problem
    from ict.evaluation.records import (
        prepare_output_dir,
        records_for_problem,
        unit_key,
        write_all_records,
    )

    current = {"model": "m", "num_samples": 1, "greedy": False, "temperature": 0.6, "top_p": 0.95,
               "max_new_tokens": 6, "system_prompt": None, "answer_extraction": "tag"}
    grading = {"math_extraction": "anchored", "verify_timeout": 5.0}
    prepare_output_dir(tmp_path, current, grading, num_samples=1, greedy=False)
    problem = Problem(prompt="what is 1 + 1 ?", answer="2", kind="math", benchmark="gsm8k", index=0)
    records = records_for_problem(problem, ["2"], [1], [True], [Verdict(True, "2", "ok", 1.0)], False, 0, grading)
    write_all_records(tmp_path / "samples.jsonl", {unit_key("gsm8k", 0, 0): records})
    with pytest.raises(OSError), file_size_limit(64):
        prepare_output_dir(tmp_path, current, grading, num_samples=1, greedy=False)
    finished, _ = prepare_output_dir(tmp_path, current, grading, num_samples=1, greedy=False)
    assert list(finished) == [unit_key("gsm8k", 0, 0)]


def test_a_rewrite_of_samples_jsonl_on_a_full_disk_leaves_the_old_file_whole(tmp_path):
    """samples.jsonl is rewritten whole on every rerun (units cut short left out) and after a
    re-grade: through a temporary file and a rename, so a write cut short (disk full, a kill)
    leaves the old file as it was. Written in place (a mutant that passed every test), the old
    records were truncated first and the file held 1,000 bytes of a 4,000-byte record: the
    finished unit was lost."""
    from ict.evaluation.records import load_sample_records, unit_key, write_all_records

    record = {"benchmark": "gsm8k", "index": 0, "sample": 0, "completion": "x" * 4000, "correct": True,
              "status": "ok", "extracted": "2", "greedy": False, "seed": 0}
    path = tmp_path / "samples.jsonl"
    write_all_records(path, {unit_key("gsm8k", 0, 0): [record]})
    before = path.read_bytes()
    regraded = {unit_key("gsm8k", 0, 0): [{**record, "correct": False, "status": "timeout"}]}
    with pytest.raises(OSError), file_size_limit(1000):
        write_all_records(path, regraded)
    assert path.read_bytes() == before
    assert load_sample_records(path)[unit_key("gsm8k", 0, 0)][0]["correct"] is True


def test_results_json_is_written_last_and_whole_on_a_full_disk(tmp_path):
    """ict compare takes an evaluation with a results.json for finished and reuses it. It was
    written first and in place: a full disk left a torn results.json (and no results.csv/.md)
    that every rerun of ict compare reused, never repaired."""
    from ict.analysis.compare import complete_verdicts
    from ict.evaluation.results import BenchmarkResult, EvalResult, write_results

    def result(directory: Path) -> EvalResult:
        directory.mkdir()
        (directory / "samples.jsonl").write_text(json.dumps(
            {"benchmark": "gsm8k", "index": 0, "sample": 0, "correct": True, "greedy": False}) + "\n")
        row = BenchmarkResult("gsm8k", "math", "", 1, 1, {"pass@1": 1.0})
        config = {"model": "m", "num_samples": 1, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 6,
                  "seed": 0, "ks": [1]}
        return EvalResult(config, [row], [], directory, {})

    write_results(result(tmp_path / "whole"))
    sizes = {name: (tmp_path / "whole" / name).stat().st_size for name in ("results.json", "results.csv", "results.md")}
    assert sizes["results.json"] > max(sizes["results.csv"], sizes["results.md"]) + 2
    full = tmp_path / "full"
    evaluation = result(full)
    with pytest.raises(OSError), file_size_limit(max(sizes["results.csv"], sizes["results.md"]) + 1):
        write_results(evaluation)
    assert not (full / "results.json").exists()
    assert complete_verdicts(full) is None  # not finished: ict compare evaluates it again
    write_results(evaluation)
    assert json.loads((full / "results.json").read_text())["config"]["ks"] == [1]


def test_a_rerun_cut_short_in_results_csv_or_md_leaves_them_whole(tmp_path):
    """A rerun with nothing to draw rewrites results.csv and results.md beside the old
    results.json, which ict compare takes for a finished evaluation and never rewrites. Written in
    place, a rerun cut short there (a full disk here, a kill likewise) left a torn results.csv
    ('benchmark,group,num_') or results.md beside that results.json for good. Each is replaced
    whole now: cut short, the old file stays as it was."""
    from ict.evaluation.results import BenchmarkResult, EvalResult, write_results

    row = BenchmarkResult("gsm8k", "math", "", 1, 1, {"pass@1": 1.0})
    config = {"model": "m", "num_samples": 1, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 6,
              "seed": 0, "ks": [1]}
    evaluation = EvalResult(config, [row], [], tmp_path, {})
    write_results(evaluation)
    names = ("results.csv", "results.md", "results.json")
    before = {name: (tmp_path / name).read_bytes() for name in names}
    assert before["results.csv"] == b"benchmark,group,num_problems,num_samples,pass@1\r\ngsm8k,math,1,1,1.000000\r\n"
    assert len(before["results.csv"]) < len(before["results.md"])
    for limit in (20, len(before["results.csv"]) + 1):  # cut in results.csv, then in results.md
        with pytest.raises(OSError), file_size_limit(limit):
            write_results(evaluation)
        assert {name: (tmp_path / name).read_bytes() for name in names} == before, limit


def test_results_json_comes_after_results_csv_and_md_and_every_file_is_utf8(tmp_path, monkeypatch):
    """results.json marks a finished evaluation: a first write stopped before results.md leaves
    none (a rerun writes all three). The files are UTF-8 (results.md's '±') in a process whose
    locale encoding is another (Latin-1 here, as `open` without an encoding would use)."""
    import builtins

    import ict.evaluation.results
    import ict.runs.checkpoint
    from ict.evaluation.results import BenchmarkResult, EvalResult, write_results

    real_write = ict.evaluation.results.write_atomically

    def stopped_at_md(path, text):
        if Path(path).name == "results.md":
            raise KeyboardInterrupt
        real_write(path, text)

    row = BenchmarkResult("gsm8k", "math", "", 1, 1, {"pass@1": 0.5}, seeds=[0, 1],
                          per_seed={"0": {"pass@1": 0.0}, "1": {"pass@1": 1.0}}, std={"pass@1": 0.5 ** 0.5})
    config = {"model": "m", "num_samples": 1, "temperature": 0.6, "top_p": 0.95, "max_new_tokens": 6,
              "seeds": [0, 1], "ks": [1]}
    evaluation = EvalResult(config, [row], [], tmp_path, {})
    monkeypatch.setattr(ict.evaluation.results, "write_atomically", stopped_at_md)
    with pytest.raises(KeyboardInterrupt):
        write_results(evaluation)
    assert not (tmp_path / "results.json").exists()
    monkeypatch.undo()
    monkeypatch.setattr(ict.runs.checkpoint, "open", lambda *args, encoding="latin-1", **options: builtins.open(
        *args, encoding=encoding, **options), raising=False)
    write_results(evaluation)
    assert "mean ± std over seeds" in (tmp_path / "results.md").read_bytes().decode("utf-8")


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_interrupted_eval_says_its_samples_are_kept_and_how_to_go_on(tiny_model_dir, tmp_path, monkeypatch,
                                                                        capsys, overwrite):
    """Ctrl-C in `ict eval` printed only "interrupted": nothing said that the samples drawn so far
    are kept and that the same command goes on from them (with --overwrite, that command would
    discard them: rerun it without). The second of three chunks is interrupted; the line names the
    samples file, and the rerun it names draws only what is missing."""
    from eval_helpers import tiny_generator

    import ict.evaluation.evaluate as evaluate_module
    from ict.cli import main

    data, out = write_gsm8k(tmp_path / "data", size=3), tmp_path / "out"
    command = eval_command(tiny_model_dir, data, out, ("--overwrite",) if overwrite else ())[3:]
    calls: list[int] = []
    stopped: list[bool] = []

    def loaded(config, prompts=()):
        generator = tiny_generator(config, tiny_model_dir)
        real = generator.generate

        def generate(prompts, *args, **kwargs):
            calls.append(len(prompts))
            if len(calls) == 2 and not stopped:
                stopped.append(True)
                raise KeyboardInterrupt
            return real(prompts, *args, **kwargs)

        generator.generate = generate
        return generator

    monkeypatch.setattr(evaluate_module, "load_generator", loaded)
    assert main(command) == 130
    again = "rerun it without --overwrite" if overwrite else "rerun the same command"
    assert capsys.readouterr().err.splitlines()[-2:] == [  # after the weights' loading bar, where it is shown
        f"{out / 'samples.jsonl'} keeps the samples drawn so far: {again} to go on from them", "interrupted"]
    assert len(sample_records(out)) == 2  # the first chunk: one problem, n = 2
    calls.clear()
    assert main([word for word in command if word != "--overwrite"]) == 0
    assert calls == [1, 1] and len(sample_records(out)) == 6  # the two problems left, one a chunk

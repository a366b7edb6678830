"""Resume keys and the finished-unit rule of `ict eval`'s records, against values written out by
hand (each case was a surviving hand mutant of ict/evaluation). The results files:
tests/test_eval_results.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from eval_helpers import ScriptedGenerator, one_gsm8k_problem, one_problem_eval

from ict.core.errors import UsageError
from ict.data.benchmarks import load_benchmark
from ict.evaluation.evaluate import EvalConfig, Generator, evaluate
from ict.evaluation.records import (
    RESUME_KEYS,
    is_complete,
    load_sample_records,
    prepare_output_dir,
    unit_key,
    without_repeats,
    write_all_records,
)


def _settings(num_samples: int) -> tuple[dict, dict]:
    """A run's `RESUME_KEYS` values (``current``) and grading settings, as `prepare_output_dir`
    takes them."""
    current = {"model": "m", "num_samples": num_samples, "greedy": False, "temperature": 1.0, "top_p": 1.0,
               "max_new_tokens": 8, "system_prompt": None, "answer_extraction": "tag", "dtype": "fp32",
               "backend": "hf"}
    return current, {"math_extraction": "anchored", "verify_timeout": 5.0}


def test_a_unit_is_finished_when_it_holds_samples_zero_to_n_minus_one():
    """`is_complete`: a sampled unit needs exactly the samples 0..n-1 (a repeated record does not
    stand in for a missing one, nor does an extra index make up for nothing); a greedy unit needs
    its one completion."""
    assert is_complete([{"sample": 0}, {"sample": 1}, {"sample": 2}], 3)
    assert not is_complete([{"sample": 0}, {"sample": 0}, {"sample": 1}], 3)  # sample 2 missing
    assert not is_complete([{"sample": 0}, {"sample": 1}], 3)
    # a sample index outside 0..n-1 (a hand-edited file): _seed_metrics would read the first n by
    # index, and a -1 would set the last column of the problem's row
    assert not is_complete([{"sample": s} for s in range(4)], 3)
    assert not is_complete([{"sample": s} for s in range(-1, 3)], 3)
    assert is_complete([{"sample": -1, "greedy": True}], 3)


def test_unit_keys_keep_seeds_and_problems_apart(tmp_path: Path):
    """The records of one problem under two seeds are two units; a greedy one is a third."""
    assert unit_key("gsm8k", 3, 0) == "gsm8k#3#seed=0"
    assert unit_key("gsm8k", 3, None) == "gsm8k#3#greedy"
    assert len({unit_key("gsm8k", 3, 0), unit_key("gsm8k", 3, 1), unit_key("gsm8k", 4, 0),
                unit_key("math500", 3, 0), unit_key("gsm8k", 3, None)}) == 5

    def record(seed: int | None, sample: int) -> dict:
        return {"benchmark": "gsm8k", "index": 3, "sample": sample, "completion": "c", "correct": False,
                "status": "ok", "extracted": None, "greedy": seed is None, "seed": seed}

    path = tmp_path / "samples.jsonl"
    write_all_records(path, {"x": [record(0, 0), record(0, 1), record(1, 0), record(None, -1)]})
    grouped = load_sample_records(path)
    assert {key: [r["sample"] for r in unit] for key, unit in grouped.items()} == {
        "gsm8k#3#seed=0": [0, 1], "gsm8k#3#seed=1": [0], "gsm8k#3#greedy": [-1]}


def test_a_resumed_directory_keeps_only_whole_units_and_whole_lines(tmp_path: Path):
    """A killed run leaves a unit cut short (2 of 4 samples) and a torn last line (no newline).
    The rerun must rewrite samples.jsonl without both; else the unit's old lines stay beside the
    whole unit appended after them (the next rerun reads samples 0, 0, 1, 1 as its four: 2 and 3
    count as wrong, 0 and 1 vote twice), and the next line is appended to the torn one (lost)."""
    current, grading = _settings(4)
    prepare_output_dir(tmp_path, current, grading, 4, False)

    def line(index: int, sample: int) -> str:
        return json.dumps({"benchmark": "gsm8k", "index": index, "sample": sample, "completion": "c",
                           "correct": False, "status": "ok", "extracted": None, "greedy": False,
                           "seed": 0, "grading": grading}) + "\n"

    whole = "".join(line(0, sample) for sample in range(4))
    path = tmp_path / "samples.jsonl"
    for killed in (whole + line(1, 0) + line(1, 1) + line(2, 0)[:30], whole + line(2, 0)[:30]):
        path.write_text(killed)
        records, _ = prepare_output_dir(tmp_path, current, grading, 4, False)
        assert list(records) == ["gsm8k#0#seed=0"]
        assert path.read_text() == whole


def test_a_last_line_torn_inside_a_character_is_ignored_as_a_torn_line(tmp_path: Path):
    """samples.jsonl keeps completions as UTF-8 (``ensure_ascii=False``): a kill while writing
    "× π" can cut a character in two. That line was read as text and the rerun stopped at it
    ("'utf-8' codec can't decode byte 0xcf ...: unexpected end of data"), every rerun after it
    too, the finished samples kept only by discarding them (--overwrite); it is a torn line
    like any other: the whole unit before it resumes and the rewritten file leaves it out."""
    current, grading = _settings(2)
    prepare_output_dir(tmp_path, current, grading, 2, False)

    def line(index: int, sample: int) -> bytes:
        return (json.dumps({"benchmark": "gsm8k", "index": index, "sample": sample, "completion": "3 × π",
                            "correct": False, "status": "ok", "extracted": None, "greedy": False, "seed": 0,
                            "grading": grading}, ensure_ascii=False) + "\n").encode()

    whole = line(0, 0) + line(0, 1)
    torn = line(1, 0)
    path = tmp_path / "samples.jsonl"
    path.write_bytes(whole + torn[: torn.index("π".encode()) + 1])  # the first of π's two bytes
    records, _ = prepare_output_dir(tmp_path, current, grading, 2, False)
    assert list(records) == ["gsm8k#0#seed=0"]
    assert [record["completion"] for record in records["gsm8k#0#seed=0"]] == ["3 × π", "3 × π"]
    assert path.read_bytes() == whole


@pytest.mark.parametrize("key", RESUME_KEYS)
def test_a_change_of_any_resume_key_refuses_the_directory(tmp_path: Path, key: str):
    """Every `RESUME_KEYS` field must equal the stored run's to reuse its samples (only `--n`
    was checked through the CLI); the refusal names the field and both values."""
    current, grading = _settings(4)
    assert set(current) == set(RESUME_KEYS)
    prepare_output_dir(tmp_path, current, grading, 4, False)
    (tmp_path / "samples.jsonl").write_text("")
    changed = {**current, key: "other"}
    with pytest.raises(UsageError, match=rf"holds samples of a different run \({key}: .* -> 'other'\)"):
        prepare_output_dir(tmp_path, changed, grading, 4, False)
    prepare_output_dir(tmp_path, current, grading, 4, False)  # the same run resumes


def test_an_empty_system_prompt_resumes_a_run_without_one_and_back(tmp_path: Path):
    """``--system-prompt ""`` adds no system message (the prompts of none), but a rerun without it
    was refused ("holds samples of a different run (system_prompt: '' -> None)"), and the reverse;
    another system prompt still is."""
    current, grading = _settings(4)
    for stored, given in (("", None), (None, ""), ("", "")):
        directory = tmp_path / f"{stored!r}-{given!r}"
        directory.mkdir()
        prepare_output_dir(directory, {**current, "system_prompt": stored}, grading, 4, False)
        (directory / "samples.jsonl").write_text("")
        prepare_output_dir(directory, {**current, "system_prompt": given}, grading, 4, False)
    with pytest.raises(UsageError, match=r"different run \(system_prompt: '' -> 'Be brief.'\)"):
        prepare_output_dir(directory, {**current, "system_prompt": "Be brief."}, grading, 4, False)


# Four GSM8K problems (gold, four sampled completions, the greedy one), worked by hand below.
def test_a_longer_verify_timeout_regrades_the_checks_that_timed_out(tmp_path: Path):
    """--verify-timeout is a grading setting (`GRADING_KEYS`): a rerun with another bound grades
    the stored completions again, without generating; a rerun with the same bound keeps them.
    The stored verdicts are set to what a check cut off by its bound records (incorrect,
    ``timeout``): a real bound of 1e-6 s was not one (the pool reads an answer that is already
    there when its bound is checked, so on a loaded machine the check came back ``ok``)."""
    config, prompt, out = one_problem_eval(tmp_path)
    scripted = ScriptedGenerator({prompt: (["\\boxed{3}", "\\boxed{3}"], "")})
    first = evaluate(EvalConfig(**config, verify_timeout=2.0), scripted, progress=False, print_table=False)
    assert first.benchmarks[0].statuses == {"ok": 2}
    stored = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    timed_out = [{**record, "correct": False, "extracted": None, "score": 0.0, "status": "timeout"}
                 for record in stored]
    (out / "samples.jsonl").write_text("".join(json.dumps(record) + "\n" for record in timed_out))
    same = evaluate(EvalConfig(**config, verify_timeout=2.0), ScriptedGenerator({}), progress=False,
                    print_table=False)  # its generator has no completion to give
    assert same.benchmarks[0].statuses == {"timeout": 2}
    assert same.benchmarks[0].metrics["pass@1"] == 0.0
    rerun = evaluate(EvalConfig(**config, verify_timeout=30.0), ScriptedGenerator({}), progress=False,
                     print_table=False)
    assert rerun.benchmarks[0].statuses == {"ok": 2}
    assert rerun.benchmarks[0].metrics["pass@1"] == 1.0


class LengthGenerator(Generator):
    """Completions whose token counts and EOS flags tell the problem apart: problem i's sample j
    has ``10 * i + j`` tokens (greedy: ``10 * i + 9``) and ended with EOS when i is odd."""

    def __init__(self, index_of: dict[str, int]) -> None:
        self.index_of, self.name = index_of, "lengths"

    def generate(self, prompts, num_samples, greedy, seed):
        indices = [self.index_of[prompt] for prompt in prompts]
        width = 1 if greedy else num_samples
        return ([[f"answer {i}.{j}" for j in range(width)] for i in indices],
                [[10 * i + (9 if greedy else j) for j in range(width)] for i in indices],
                [[i % 2 == 1] * width for i in indices])


def test_a_partly_done_chunk_records_each_problem_with_its_own_lengths(tmp_path: Path):
    """--limit 1, then --limit 3 with two problems per chunk (batch 4, n 2): the chunk of
    problems 0 and 1 is generated whole and only problem 1's part is kept. Each record keeps its
    own completion's num_tokens and finished (a slice of the chunk's first entries gave problem
    1 problem 0's); a greedy record has sample -1 and seed null (docs/evaluation.md, Outputs);
    timing's generated_tokens counts every generated token, the dropped part of a chunk too:
    run 1: (0 + 1) + 9 = 10; run 2: chunk 0,1: (0 + 1 + 10 + 11) + (9 + 19) = 50, chunk 2:
    (20 + 21) + 29 = 70, 120 in all."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text("".join(json.dumps({"question": f"question {i}?", "answer": f"#### {i}"})
                                              + "\n" for i in range(3)))
    problems = load_benchmark("gsm8k", data).problems
    generator = LengthGenerator({problem.prompt: problem.index for problem in problems})
    config = dict(model="lengths", benchmarks="gsm8k", data_dir=str(data), output_dir=str(tmp_path / "out"),
                  num_samples=2, ks=(1,), batch_size=4, greedy=True, seed=5, device="cpu")
    first = evaluate(EvalConfig(**config, limit=1), generator, progress=False, print_table=False)
    second = evaluate(EvalConfig(**config, limit=3), generator, progress=False, print_table=False)
    assert (first.timing["generated_tokens"], second.timing["generated_tokens"]) == (10, 120)
    records = [json.loads(line) for line in (tmp_path / "out" / "samples.jsonl").read_text().splitlines()]
    assert sorted((r["index"], r["sample"], r["seed"], r["completion"], r["num_tokens"], r["finished"])
                  for r in records) == [
        (0, -1, None, "answer 0.0", 9, False), (0, 0, 5, "answer 0.0", 0, False), (0, 1, 5, "answer 0.1", 1, False),
        (1, -1, None, "answer 1.0", 19, True), (1, 0, 5, "answer 1.0", 10, True), (1, 1, 5, "answer 1.1", 11, True),
        (2, -1, None, "answer 2.0", 29, False), (2, 0, 5, "answer 2.0", 20, False),
        (2, 1, 5, "answer 2.1", 21, False)]


def test_each_problems_records_are_on_disk_before_the_next_chunk_is_generated(tmp_path: Path):
    """Resume rests on samples.jsonl holding every finished problem: its lines are flushed after
    each problem, so a kill during the next chunk's generation loses that chunk only. Without the
    flush, the first problem's two short records stayed in the file buffer (8 KiB) while the
    second was generated: here the generator of problem 1 finds them on disk (2 lines)."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text("".join(json.dumps({"question": f"question {i}?", "answer": f"#### {i}"})
                                              + "\n" for i in range(2)))
    problems = load_benchmark("gsm8k", data).problems
    samples = tmp_path / "out" / "samples.jsonl"
    seen: list[int] = []

    class Watching(LengthGenerator):
        def generate(self, prompts, num_samples, greedy, seed):
            seen.append(len(samples.read_bytes().splitlines()) if samples.exists() else 0)
            return super().generate(prompts, num_samples, greedy, seed)

    config = EvalConfig(model="lengths", benchmarks="gsm8k", data_dir=str(data), output_dir=str(tmp_path / "out"),
                        num_samples=2, ks=(1,), batch_size=2, device="cpu")
    evaluate(config, Watching({problem.prompt: problem.index for problem in problems}), progress=False,
             print_table=False)
    assert seen == [0, 2]


def test_records_graded_before_the_grading_field_are_regraded_as_lenient_ones(tmp_path: Path):
    """Records and a run.json from before ``grading`` existed were graded with the lenient
    extraction of that time (`LEGACY_GRADING`): under the anchored default they are graded again,
    without generating. "the sum 3" is right under lenient extraction only (pass@1 1.0 as
    stored, 0.0 anchored); taking them for graded with the current rules kept 1.0."""
    config, prompt, out = one_problem_eval(tmp_path, math_extraction="lenient")
    first = evaluate(EvalConfig(**config), ScriptedGenerator({prompt: (["the sum 3", "the sum 3"], "")}),
                     progress=False, print_table=False)
    assert first.benchmarks[0].metrics["pass@1"] == 1.0
    old = [{key: value for key, value in json.loads(line).items() if key not in ("grading", "chunk")}
           for line in (out / "samples.jsonl").read_text().splitlines()]
    (out / "samples.jsonl").write_text("".join(json.dumps(record) + "\n" for record in old))
    run = json.loads((out / "run.json").read_text())
    del run["grading"]
    (out / "run.json").write_text(json.dumps(run))
    again = evaluate(EvalConfig(**{**config, "math_extraction": "anchored"}), ScriptedGenerator({}),
                     progress=False, print_table=False)  # its generator has no completion to give
    assert again.benchmarks[0].metrics["pass@1"] == 0.0
    assert {record["grading"]["math_extraction"] for record in map(
        json.loads, (out / "samples.jsonl").read_text().splitlines())} == {"anchored"}


def test_a_rerun_killed_before_it_rewrote_old_records_keeps_their_run_jsons_seed_and_grading(tmp_path: Path,
                                                                                             monkeypatch):
    """Records and a run.json from before ``seed`` and ``grading`` existed (sampled with seed 3,
    graded lenient), rerun anchored and killed at the rewrite of samples.jsonl, then rerun: the
    old run.json still says what the records were drawn and graded with. It was rewritten first,
    so the second rerun took them for seed 0's (seed 3 drawn again) and graded anchored (never
    re-graded: "the sum 3" kept pass@1 1.0, 0.0 anchored)."""
    import ict.evaluation.records as records_module

    config, prompt, out = one_problem_eval(tmp_path, math_extraction="lenient", seed=3)
    evaluate(EvalConfig(**config), ScriptedGenerator({prompt: (["the sum 3", "the sum 3"], "")}),
             progress=False, print_table=False)
    old = [{key: value for key, value in json.loads(line).items() if key not in ("grading", "chunk", "seed")}
           for line in (out / "samples.jsonl").read_text().splitlines()]
    (out / "samples.jsonl").write_text("".join(json.dumps(record) + "\n" for record in old))
    run = json.loads((out / "run.json").read_text())
    del run["grading"]
    (out / "run.json").write_text(json.dumps({**run, "seed": 3}))

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    anchored = EvalConfig(**{**config, "math_extraction": "anchored"})
    with monkeypatch.context() as patch:
        patch.setattr(records_module, "write_all_records", killed)
        with pytest.raises(KeyboardInterrupt):
            evaluate(anchored, ScriptedGenerator({}), progress=False, print_table=False)
    again = evaluate(anchored, ScriptedGenerator({}),  # its generator has no completion to give
                     progress=False, print_table=False)
    assert again.benchmarks[0].metrics["pass@1"] == 0.0
    stored = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert [(record["seed"], record["grading"]["math_extraction"]) for record in stored] == [(3, "anchored")] * 2


def test_a_rerun_with_another_batch_size_keeps_the_units_drawn_in_its_other_chunks(tmp_path: Path):
    """--batch-size 4 (two problems per chunk, n 2), then --batch-size 2 (one): the stored units
    were drawn in chunks that start elsewhere, not cut by another --limit, and are kept: nothing
    is generated again and the metrics are those stored."""
    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text("".join(json.dumps({"question": f"question {i}?", "answer": f"#### {i}"})
                                              + "\n" for i in range(3)))
    problems = load_benchmark("gsm8k", data).problems
    scripted = ScriptedGenerator({problem.prompt: ([f"\\boxed{{{problem.index}}}", "no"], "")
                                  for problem in problems})
    config = dict(model="scripted", benchmarks="gsm8k", data_dir=str(data), output_dir=str(tmp_path / "out"),
                  num_samples=2, ks=(1,), device="cpu")
    evaluate(EvalConfig(**config, batch_size=4), scripted, progress=False, print_table=False)
    before = (tmp_path / "out" / "samples.jsonl").read_text()
    again = evaluate(EvalConfig(**config, batch_size=2), ScriptedGenerator({}), progress=False, print_table=False)
    assert again.benchmarks[0].metrics["pass@1"] == 0.5
    assert (tmp_path / "out" / "samples.jsonl").read_text() == before


def test_a_resume_keeps_greedy_records_seedless_and_results_json_names_the_one_seed(tmp_path: Path):
    """A rerun rewrites samples.jsonl: a greedy record keeps ``seed`` null (it was read as an old
    record without one and written back with the legacy seed 0). results.json's config names
    the sampling seeds of a one-seed run too (``seeds`` [1]): ict compare reads the records of
    those seeds only, not seed 0's that an earlier ``--seeds 0,1`` left in the directory (with
    ``seeds`` null it read both, 2 samples a problem of n = 1)."""
    from ict.analysis.comparison_runs import complete_verdicts

    config, prompt, out = one_problem_eval(tmp_path, num_samples=1, greedy=True)
    evaluate(EvalConfig(**config, seeds=(0, 1)), ScriptedGenerator({prompt: (["\\boxed{3}"], "\\boxed{3}")}),
             progress=False, print_table=False)
    evaluate(EvalConfig(**config, seed=1), ScriptedGenerator({}), progress=False, print_table=False)
    records = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert sorted((r["sample"], r["seed"]) for r in records if r["greedy"]) == [(-1, None)]
    assert json.loads((out / "results.json").read_text())["config"]["seeds"] == [1]
    correct = complete_verdicts(out)
    assert correct == {"gsm8k": {0: [True]}} and correct["gsm8k"][0].by_seed == {1: [True]}


def test_a_resume_refuses_another_dtype_or_backend_and_accepts_another_device_or_batch_size(tmp_path: Path):
    """--dtype and --backend are resume keys, compared as resolved on the device (``auto`` on a
    CPU is fp32, the HF backend without vLLM): bf16 or vLLM samples come from another
    distribution or sampler, and were pooled silently into one pass@k. --device cpu -> auto (the
    same dtype) and another --batch-size only change the random stream, and resume."""
    data, prompt = one_gsm8k_problem(tmp_path)
    out = tmp_path / "out"
    config = dict(model="scripted", benchmarks="gsm8k", data_dir=str(data), output_dir=str(out),
                  num_samples=2, ks=(1,))
    scripted = ScriptedGenerator({prompt: (["\\boxed{3}", "no"], "")})
    evaluate(EvalConfig(**config, device="cpu", dtype="fp32", backend="hf"), scripted, progress=False,
             print_table=False)
    for change, said in [({"dtype": "bf16"}, "dtype: 'fp32' -> 'bf16'"),
                         ({"backend": "vllm"}, "backend: 'hf' -> 'vllm'")]:
        with pytest.raises(UsageError, match=rf"different run \({said}\); pass the earlier value, --overwrite"):
            evaluate(EvalConfig(**{**config, "device": "cpu", **change}), ScriptedGenerator({}),
                     progress=False, print_table=False)
    again = evaluate(EvalConfig(**config, device="auto", dtype="auto", batch_size=4), ScriptedGenerator({}),
                     progress=False, print_table=False)  # auto resolves to cpu, fp32 and hf here
    assert again.benchmarks[0].metrics["pass@1"] == 0.5


def test_a_run_json_from_before_dtype_and_backend_were_recorded_resumes_with_any(tmp_path: Path):
    """A run.json without ``dtype`` and ``backend`` (an older ict eval) does not say what its
    samples were drawn with: any value resumes (`UNKNOWN_BEFORE`), and is recorded from then on."""
    config, prompt, out = one_problem_eval(tmp_path)
    evaluate(EvalConfig(**config), ScriptedGenerator({prompt: (["\\boxed{3}", "no"], "")}),
             progress=False, print_table=False)
    run = json.loads((out / "run.json").read_text())
    (out / "run.json").write_text(json.dumps({k: v for k, v in run.items() if k not in ("dtype", "backend")}))
    again = evaluate(EvalConfig(**config, dtype="bf16"), ScriptedGenerator({}), progress=False, print_table=False)
    assert again.benchmarks[0].metrics["pass@1"] == 0.5
    assert json.loads((out / "run.json").read_text())["dtype"] == "bf16"
    with pytest.raises(UsageError, match=r"dtype: 'bf16' -> 'fp32'"):
        evaluate(EvalConfig(**config, dtype="fp32"), ScriptedGenerator({}), progress=False, print_table=False)


def test_records_graded_under_other_grading_rules_are_regraded_and_results_json_names_them(tmp_path: Path):
    """Each record keeps the version of the answer-grading rules it was graded under
    (``grading_rules``, `GRADING_RULES_VERSION`): a record graded under other rules, or before the
    version was recorded (older rules), is graded again on the next run, without generating, as
    one graded with another --math-extraction is; the verdicts stored here are what older rules
    said of a right answer (wrong). The parent kept them: pass@1 0.0. results.json names the
    version its verdicts were graded under."""
    from ict.answers.grading import GRADING_RULES_VERSION

    config, prompt, out = one_problem_eval(tmp_path)
    evaluate(EvalConfig(**config), ScriptedGenerator({prompt: (["\\boxed{3}", "\\boxed{3}"], "")}),
             progress=False, print_table=False)
    assert json.loads((out / "results.json").read_text())["config"]["grading_rules"] == GRADING_RULES_VERSION
    stored = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
    assert {record["grading"]["grading_rules"] for record in stored} == {GRADING_RULES_VERSION}
    older = [{"grading_rules": GRADING_RULES_VERSION - 1}, {}]  # another version; none recorded
    for record, rules in zip(stored, older, strict=True):
        grading = {key: value for key, value in record["grading"].items() if key != "grading_rules"}
        record.update(correct=False, extracted=None, score=0.0, status="no_answer", grading={**grading, **rules})
    (out / "samples.jsonl").write_text("".join(json.dumps(record) + "\n" for record in stored))
    again = evaluate(EvalConfig(**config), ScriptedGenerator({}), progress=False, print_table=False)
    assert again.benchmarks[0].metrics["pass@1"] == 1.0
    assert [json.loads(line)["grading"]["grading_rules"] for line in (out / "samples.jsonl").read_text().splitlines()] == [
        GRADING_RULES_VERSION] * 2


def test_auto_backend_is_hf_for_a_lora_checkpoint_and_vllm_where_it_is_installed(tmp_path: Path, monkeypatch):
    """`resolved_backend`, what a resume records and `load_generator` loads with: ``auto`` is vLLM
    where it is installed (on a CPU or a GPU), but a LoRA checkpoint loads with HF (vLLM loads no
    adapter), so its run.json must say hf; ``hf`` / ``vllm`` as given. (Mutation test: the LoRA
    case recorded vllm where vLLM is installed, and a resume with --backend hf was refused.)"""
    import torch

    from ict.evaluation import generator as module

    checkpoint = tmp_path / "ckpt"
    (checkpoint / "adapter").mkdir(parents=True)
    (checkpoint / "adapter" / "adapter_config.json").write_text("{}")
    cpu = torch.device("cpu")
    monkeypatch.setattr(module, "vllm_installed", lambda: True)
    assert module.resolved_backend(EvalConfig(model=str(checkpoint)), cpu) == "hf"
    assert module.resolved_backend(EvalConfig(model=str(tmp_path)), cpu) == "vllm"
    assert module.resolved_backend(EvalConfig(model=str(tmp_path), backend="hf"), cpu) == "hf"
    monkeypatch.setattr(module, "vllm_installed", lambda: False)
    assert module.resolved_backend(EvalConfig(model=str(tmp_path)), cpu) == "hf"
    assert module.resolved_backend(EvalConfig(model=str(checkpoint), backend="vllm"), cpu) == "vllm"


def test_regrade_grades_every_stored_completion_again_and_a_plain_rerun_keeps_them(tmp_path: Path):
    """--regrade grades the stored completions again with the current rules even where their
    grading settings are the run's (e.g. after a verifier update); without it a rerun keeps the
    stored verdicts. The stored verdicts are set wrong by hand (a right "\\\\boxed{3}" as
    incorrect): pass@1 0.0 kept, then 1.0 once re-graded, and the file holds the new verdicts.
    (Mutation test: --regrade ignored survived every test.)"""
    config, prompt, out = one_problem_eval(tmp_path)
    evaluate(EvalConfig(**config), ScriptedGenerator({prompt: (["\\\\boxed{3}", "\\\\boxed{3}"], "")}),
             progress=False, print_table=False)
    stored = [{**json.loads(line), "correct": False, "extracted": None, "score": 0.0, "status": "no_answer"}
              for line in (out / "samples.jsonl").read_text().splitlines()]
    (out / "samples.jsonl").write_text("".join(json.dumps(record) + "\n" for record in stored))
    kept = evaluate(EvalConfig(**config), ScriptedGenerator({}), progress=False, print_table=False)
    assert kept.benchmarks[0].metrics["pass@1"] == 0.0
    regraded = evaluate(EvalConfig(**config, regrade=True), ScriptedGenerator({}), progress=False, print_table=False)
    assert regraded.benchmarks[0].metrics["pass@1"] == 1.0
    assert [json.loads(line)["correct"] for line in (out / "samples.jsonl").read_text().splitlines()] == [True, True]


def test_a_repeated_record_is_counted_once_and_two_draws_of_one_sample_are_drawn_again(tmp_path: Path):
    """One problem, n 4, samples answer 5, 5, 3, 3 (gold 3): pass@1 = 2/4, pass@2 = 1 - C(2,2)/C(4,2)
    = 5/6, maj@4 = the tie's first answer, 5: wrong. samples.jsonl with sample 1's record appended
    twice read samples 0, 1, 1, 2 as the four (pass@1 1/4), and the file concatenated twice read
    0, 0, 1, 1 (pass@1 0); both are the clean figures now, the file back to four lines. Two
    different records of sample 3 (two draws) are no finished unit: drawn again, with a note, and
    results.json (which counted one of them) is deleted before."""
    config, prompt, out = one_problem_eval(tmp_path, num_samples=4, ks=(1, 2, 4))
    clean = {"pass@1": 0.5, "pass@2": 5 / 6, "pass@4": 1.0, "avg@4": 0.5, "maj@4": 0.0}
    first = evaluate(EvalConfig(**config), ScriptedGenerator({prompt: (["\\boxed{5}"] * 2 + ["\\boxed{3}"] * 2, "")}),
                     progress=False, print_table=False)
    assert first.benchmarks[0].metrics == pytest.approx(clean, abs=1e-12)
    path = out / "samples.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    for edited in ("".join(lines[:2] + lines[1:]), "".join(lines + lines)):
        path.write_text(edited)
        again = evaluate(EvalConfig(**config), ScriptedGenerator({}), progress=False, print_table=False)
        assert again.benchmarks[0].metrics == pytest.approx(clean, abs=1e-12)
        assert path.read_text() == "".join(lines)
    other = json.loads(lines[3]) | {"completion": "\\boxed{5}", "extracted": "5", "correct": False}
    path.write_text("".join(lines) + json.dumps(other) + "\n")

    class Killed:
        name = "killed"

        def generate(self, *arguments):
            raise KeyboardInterrupt

    notes: list[str] = []
    with pytest.raises(KeyboardInterrupt):  # results.json counted one of the two: gone before the redraw
        evaluate(EvalConfig(**config), Killed(), progress=False, print_table=False, log=notes.append)
    assert not (out / "results.json").exists()
    redrawn = evaluate(EvalConfig(**config), ScriptedGenerator({prompt: (["\\boxed{3}"] * 4, "")}),
                       progress=False, print_table=False)
    assert redrawn.benchmarks[0].metrics["pass@1"] == 1.0
    assert any("two different records of one sample" in note and "gsm8k#0#seed=0" in note for note in notes)


def test_samples_without_their_run_json_are_refused_and_left_as_they_are(tmp_path: Path):
    """run.json says what drew the samples beside it (`RESUME_KEYS`); with it lost or deleted, a
    rerun resumed them unchecked: model A's samples at temperature 0.6 were counted as model B's
    at 1.5 (pass@1 1.0, nothing generated) and run.json was rewritten to say model B. Now a
    one-line refusal that leaves both files as they were; --overwrite starts afresh."""
    data, prompt = one_gsm8k_problem(tmp_path)
    out = tmp_path / "out"
    config = dict(benchmarks="gsm8k", data_dir=str(data), output_dir=str(out), num_samples=2, ks=(1,),
                  device="cpu")
    evaluate(EvalConfig(model="a", temperature=0.6, **config),
             ScriptedGenerator({prompt: (["\\boxed{3}", "\\boxed{3}"], "")}), progress=False, print_table=False)
    (out / "run.json").unlink()
    samples = (out / "samples.jsonl").read_text()
    with pytest.raises(UsageError, match=rf"^{out} holds samples.jsonl but no run.json \(the settings its "
                       r"samples were drawn with\); pass --overwrite or another --output-dir$"):
        evaluate(EvalConfig(model="b", temperature=1.5, **config), ScriptedGenerator({}), progress=False,
                 print_table=False)
    assert (out / "samples.jsonl").read_text() == samples and not (out / "run.json").exists()
    fresh = evaluate(EvalConfig(model="b", temperature=1.5, overwrite=True, **config),
                     ScriptedGenerator({prompt: (["no", "\\boxed{3}"], "")}), progress=False, print_table=False)
    assert fresh.benchmarks[0].metrics["pass@1"] == 0.5
    assert json.loads((out / "run.json").read_text())["model"] == "b"


def test_a_record_whose_seed_is_true_is_left_out_as_one_of_no_integer_seed(tmp_path: Path):
    """JSON ``true`` is a Python int (1): a record with ``"seed": true`` was read as seed 1's
    (unit gsm8k#0#seed=1) and counted in its metrics; it is left out, as a seed "1" is, and the
    unit of the record with seed 1 keeps that record alone."""
    record = {"benchmark": "gsm8k", "index": 0, "completion": "c", "correct": True, "status": "ok",
              "extracted": "3", "greedy": False}
    path = tmp_path / "samples.jsonl"
    path.write_text("".join(json.dumps({**record, "sample": sample, "seed": seed}) + "\n"
                            for sample, seed in [(0, True), (1, "1"), (2, 1), (3, False)]))
    grouped = load_sample_records(path)
    assert {key: [(r["sample"], r["seed"]) for r in unit] for key, unit in grouped.items()} == {
        "gsm8k#0#seed=1": [(2, 1)]}


def test_one_completion_graded_twice_is_graded_again_not_drawn_again(tmp_path: Path):
    """One problem, n 2, samples answer 3 and 5 (gold 3). A copy of sample 0's record graded under
    older rules (wrong, no answer) appended to samples.jsonl differs from it in its grading
    fields only (`GRADED_FIELDS`): the same completion, one draw. It made the unit two draws, drawn
    again (a generate call); now the first record is kept and graded again (its ``grading`` None
    until then), nothing generated, results.json deleted before samples.jsonl is rewritten; so is
    a copy placed first that timed out under the same grading settings (kept as it was, it read
    pass@1 0.0). A record that differs in any other field (here ``num_tokens``) is another draw."""
    data, prompt = one_gsm8k_problem(tmp_path)
    out = tmp_path / "out"
    config = dict(model="m", benchmarks="gsm8k", data_dir=str(data), output_dir=str(out), num_samples=2,
                  ks=(1,), device="cpu")
    evaluate(EvalConfig(**config), ScriptedGenerator({prompt: (["\\boxed{3}", "\\boxed{5}"], "")}),
             progress=False, print_table=False)
    lines = (out / "samples.jsonl").read_text().splitlines(keepends=True)
    first = json.loads(lines[0])
    older = {**first, "gold": "5", "correct": False, "extracted": None, "score": 0.0, "status": "no_answer",
             "grading": {**first["grading"], "grading_rules": first["grading"]["grading_rules"] - 1}}
    (out / "samples.jsonl").write_text("".join(lines) + json.dumps(older) + "\n")
    current, grading = json.loads((out / "run.json").read_text()), first["grading"]
    del current["grading"]
    records, _ = prepare_output_dir(out, current, grading, 2, False)
    assert [(r["sample"], r["correct"], r["grading"]) for r in records["gsm8k#0#seed=0"]] == [
        (0, True, None), (1, False, grading)]
    assert not (out / "results.json").exists()
    (out / "samples.jsonl").write_text("".join(lines) + json.dumps(older) + "\n")
    again = evaluate(EvalConfig(**config), ScriptedGenerator({}), progress=False, print_table=False)
    assert again.benchmarks[0].metrics["pass@1"] == 0.5
    assert (out / "samples.jsonl").read_text() == "".join(lines)
    timed_out = {**first, "correct": False, "extracted": None, "score": 0.0, "status": "timeout"}
    (out / "samples.jsonl").write_text(json.dumps(timed_out) + "\n" + "".join(lines))  # the same grading, first
    again = evaluate(EvalConfig(**config), ScriptedGenerator({}), progress=False, print_table=False)
    assert again.benchmarks[0].metrics["pass@1"] == 0.5 and again.benchmarks[0].statuses == {"ok": 2}
    assert without_repeats([first, {**older, "num_tokens": first["num_tokens"] + 1}]) is None


@pytest.mark.parametrize("rerun", [{"math_extraction": "lenient"}, {"limit": 2}])
def test_a_rerun_deletes_results_json_before_it_rewrites_samples_jsonl(tmp_path: Path, monkeypatch, rerun):
    """A rerun that re-grades the stored records (another --math-extraction) or drops a unit drawn in
    a chunk another --limit cut otherwise (--limit 1, then 2: chunks of 2 problems) rewrites
    samples.jsonl after deleting results.json (`replace_records`): killed in between, it left the
    old figures beside other records. Each rewrite records whether results.json was there."""
    import ict.evaluation.records as records

    data = tmp_path / "data"
    data.mkdir()
    (data / "gsm8k.jsonl").write_text("".join(json.dumps({"question": f"question {i}?", "answer": f"#### {i}"})
                                              + "\n" for i in range(2)))
    scripted = ScriptedGenerator({problem.prompt: ([f"the answer is {problem.index}"] * 2, "")
                                  for problem in load_benchmark("gsm8k", data).problems})
    out = tmp_path / "out"
    config = dict(model="scripted", benchmarks="gsm8k", data_dir=str(data), output_dir=str(out),
                  num_samples=2, ks=(1,), device="cpu", batch_size=4, limit=1)
    evaluate(EvalConfig(**config), scripted, progress=False, print_table=False)
    assert (out / "results.json").exists()
    results_there: list[bool] = []

    def spied(path: Path, written: dict) -> None:
        results_there.append((out / "results.json").exists())
        write_all_records(path, written)

    monkeypatch.setattr(records, "write_all_records", spied)
    evaluate(EvalConfig(**{**config, **rerun}), scripted, progress=False, print_table=False)
    assert results_there[0] and results_there[-1] is False  # prepare_output_dir's, then the rewrite's

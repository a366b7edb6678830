"""`ict eval` with several sampling seeds (`--seeds`): pass@k averaged over seeds against an
independent per-seed reference, per-chunk generation seeds, and resumes that neither mix seeds nor
move a chunk (a larger `--limit`, records from before the seed field)."""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections import Counter
from pathlib import Path

import pytest
from eval_helpers import CountingGenerator, read_samples, tiny_generator

from ict.cli import main
from ict.data.benchmarks import load_benchmark
from ict.evaluation.evaluate import EvalConfig, evaluate

pytestmark = pytest.mark.usefixtures("one_thread")


class SeedRecordingGenerator(CountingGenerator):
    """The tiny-model generator, recording the generation seed and prompts of each sampled call."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.sampled_calls: list[tuple[int, list[str]]] = []

    def generate(self, prompts, num_samples, greedy, seed):
        if not greedy:
            self.sampled_calls.append((seed, list(prompts)))
        return super().generate(prompts, num_samples, greedy, seed)


def write_sums(path: Path, size: int = 8) -> Path:
    """GSM8K-format sums with one-digit answers (the tiny model prints digits, so with lenient
    extraction some of its samples are right)."""
    path.mkdir(parents=True, exist_ok=True)
    rows = [{"question": f"what is {a} + {a % 3} ?", "answer": f"#### {a + a % 3}"}
            for a in range(size)]
    (path / "gsm8k.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def seeds_config(data: Path, out: Path, model: Path, **changes) -> EvalConfig:
    settings = dict(model=str(model), benchmarks="gsm8k", data_dir=str(data), output_dir=str(out),
                    num_samples=4, ks=(1, 2, 4), max_new_tokens=4, batch_size=8, temperature=1.0,
                    math_extraction="lenient", device="cpu")
    return EvalConfig(**(settings | changes))


def per_seed_reference(samples: list[dict], n: int, ks: tuple[int, ...]) -> dict[int, dict[str, float]]:
    """Per seed, the mean over problems of 1 - C(n-c, k)/C(n, k), from the records alone."""
    counts: dict[int, dict[int, list[bool]]] = {}
    for record in samples:
        if not record["greedy"]:
            counts.setdefault(record["seed"], {}).setdefault(record["index"], []).append(
                record["correct"])
    reference = {}
    for seed, problems in counts.items():
        assert all(len(verdicts) == n for verdicts in problems.values())  # no seed mixed in
        reference[seed] = {f"pass@{k}": sum(1 - math.comb(n - sum(v), k) / math.comb(n, k)
                                            for v in problems.values()) / len(problems)
                           for k in ks}
    return reference


def test_seeds_average_pass_at_k_over_seeds(tmp_path, tiny_model_dir):
    data = write_sums(tmp_path / "data")
    out = tmp_path / "out"
    config = seeds_config(data, out, tiny_model_dir, seeds=(0, 1, 2))
    generator = tiny_generator(config, tiny_model_dir, SeedRecordingGenerator)
    result = evaluate(config, generator=generator, progress=False, print_table=False)
    samples = read_samples(out)
    assert Counter(r["seed"] for r in samples) == {0: 32, 1: 32, 2: 32}
    assert any(r["correct"] for r in samples)  # not a vacuous all-zero comparison
    assert len({seed for seed, _ in generator.sampled_calls}) == len(generator.sampled_calls)
    reference = per_seed_reference(samples, 4, (1, 2, 4))
    stored = json.loads((out / "results.json").read_text())
    row = stored["benchmarks"]["gsm8k"]
    assert row["seeds"] == [0, 1, 2] and stored["config"]["seeds"] == [0, 1, 2]
    for k in (1, 2, 4):
        values = [reference[seed][f"pass@{k}"] for seed in (0, 1, 2)]
        for seed, value in zip((0, 1, 2), values, strict=True):
            assert row["per_seed"][str(seed)][f"pass@{k}"] == pytest.approx(value, abs=1e-12)
        assert row["metrics"][f"pass@{k}"] == pytest.approx(sum(values) / 3, abs=1e-12)
        assert row["std"][f"pass@{k}"] == pytest.approx(statistics.stdev(values), abs=1e-12)
        assert result.benchmarks[0].metrics[f"pass@{k}"] == pytest.approx(sum(values) / 3)
    # the seed-1 part of the run is what a run with --seed 1 alone samples
    single_out = tmp_path / "seed1"
    single = evaluate(seeds_config(data, single_out, tiny_model_dir, seed=1), generator=generator,
                      progress=False, print_table=False)
    alone = {(r["index"], r["sample"]): r["completion"] for r in read_samples(single_out)}
    assert alone == {(r["index"], r["sample"]): r["completion"] for r in samples if r["seed"] == 1}
    assert single.benchmarks[0].metrics["pass@4"] == pytest.approx(reference[1]["pass@4"])
    assert single.benchmarks[0].std == {}  # one seed: no spread
    markdown = (out / "results.md").read_text()
    assert "seeds 0,1,2" in markdown and "| gsm8k seed=2 | math | 8 |" in markdown
    assert " ± " in markdown.split("| gsm8k |")[1].splitlines()[0]
    rows = list(csv.DictReader(open(out / "results.csv", encoding="utf-8")))
    assert [row["seed"] for row in rows] == ["mean", "0", "1", "2"]
    assert float(rows[1]["pass@2"]) == pytest.approx(reference[0]["pass@2"], abs=1e-6)


def test_resumed_multi_seed_run_does_not_mix_seeds(tmp_path, tiny_model_dir):
    data = write_sums(tmp_path / "data", size=4)
    out = tmp_path / "out"
    first = tiny_generator(seeds_config(data, out, tiny_model_dir), tiny_model_dir,
                       SeedRecordingGenerator)
    evaluate(seeds_config(data, out, tiny_model_dir, seeds=(0, 1)), generator=first,
             progress=False, print_table=False)
    before = read_samples(out)
    assert {r["seed"] for r in before} == {0, 1}
    prompts = [p.prompt for p in load_benchmark("gsm8k", data).problems]
    # adding seed 2: only seed 2 is sampled, the stored seeds stay as they were
    second = SeedRecordingGenerator(first.model, first.tokenizer, first.config)
    result = evaluate(seeds_config(data, out, tiny_model_dir, seeds=(0, 1, 2)), generator=second,
                      progress=False, print_table=False)
    assert [p for _, chunk in second.sampled_calls for p in chunk] == prompts
    after = read_samples(out)
    assert after[: len(before)] == before and {r["seed"] for r in after[len(before):]} == {2}
    reference = per_seed_reference(after, 4, (1, 2, 4))
    assert result.benchmarks[0].metrics["pass@2"] == pytest.approx(
        sum(reference[seed]["pass@2"] for seed in (0, 1, 2)) / 3)
    # an interrupted unit (seed 1 of problem 2 lost a sample) is sampled again, nothing else
    torn = [r for r in after if not (r["seed"] == 1 and r["index"] == 2 and r["sample"] == 3)]
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in torn))
    third = SeedRecordingGenerator(first.model, first.tokenizer, first.config)
    evaluate(seeds_config(data, out, tiny_model_dir, seeds=(0, 1, 2)), generator=third,
             progress=False, print_table=False)
    # its chunk (problems 2 and 3) is drawn whole, as the uninterrupted run drew it
    assert [p for _, chunk in third.sampled_calls for p in chunk] == prompts[2:4]
    final = read_samples(out)
    keys = [(r["index"], r["seed"], r["sample"]) for r in final]
    assert len(keys) == len(set(keys)) == 4 * 3 * 4
    assert [r for r in final if (r["index"], r["seed"]) != (2, 1)] == [
        r for r in torn if (r["index"], r["seed"]) != (2, 1)]
    # ... and gets the samples the uninterrupted run had drawn
    assert [r for r in final if (r["index"], r["seed"]) == (2, 1)] == [
        r for r in after if (r["index"], r["seed"]) == (2, 1)]
    # reporting one seed uses that seed's records only
    fourth = SeedRecordingGenerator(first.model, first.tokenizer, first.config)
    only = evaluate(seeds_config(data, out, tiny_model_dir, seeds=(2,)), generator=fourth,
                    progress=False, print_table=False)
    assert fourth.prompts == []
    reference = per_seed_reference(final, 4, (1, 2, 4))
    for k in (1, 2, 4):
        assert only.benchmarks[0].metrics[f"pass@{k}"] == pytest.approx(reference[2][f"pass@{k}"])


def test_a_resume_with_another_limit_samples_every_problem_as_an_uninterrupted_run(tmp_path,
                                                                                  tiny_model_dir):
    """Chunk boundaries are those of the whole benchmark, not of the problems still to do, and a
    chunk partly done is drawn whole: ``--limit 3`` then ``--limit 8`` (2 problems per chunk)
    samples problems 3..7 as ``--limit 8`` at once does. Problem 2, drawn alone under
    ``--limit 3`` (its chunk cut there), was kept, so the samples of ``--limit 8`` resumed were not
    those of ``--limit 8`` at once (nor, the other way, ``--limit 8`` then ``--limit 3``'s those of
    ``--limit 3``, problem 2 drawn with 3); now such a unit is drawn again, and every sample
    equals the uninterrupted run's."""
    data = write_sums(tmp_path / "data", size=8)

    def run(out: Path, limit: int) -> dict[tuple[int, int], str]:
        config = seeds_config(data, out, tiny_model_dir, limit=limit, max_new_tokens=6)
        evaluate(config, generator=generator, progress=False, print_table=False)
        return {(r["index"], r["sample"]): r["completion"] for r in read_samples(out) if r["index"] < limit}

    generator = tiny_generator(seeds_config(data, tmp_path / "once", tiny_model_dir), tiny_model_dir,
                           SeedRecordingGenerator)
    once = run(tmp_path / "once", 8)
    once_calls = list(generator.sampled_calls)
    run(tmp_path / "twice", 3)
    generator.sampled_calls.clear()
    twice = run(tmp_path / "twice", 8)
    prompts = [p.prompt for p in load_benchmark("gsm8k", data).problems]
    assert generator.sampled_calls == once_calls[1:]  # the chunks [2, 3], [4, 5] and [6, 7]
    assert generator.sampled_calls[0][1] == prompts[2:4]
    assert twice == once and len(once) == 8 * 4
    keys = [(r["index"], r["sample"]) for r in read_samples(tmp_path / "twice")]
    assert len(keys) == len(set(keys))  # problem 2's samples drawn alone are gone from the file

    alone = run(tmp_path / "alone", 3)
    generator.sampled_calls.clear()
    assert run(tmp_path / "once", 3) == alone  # the chunk [2] drawn again, [0, 1] kept
    assert generator.sampled_calls[0][1] == prompts[2:3] and len(generator.sampled_calls) == 1
    generator.sampled_calls.clear()
    assert run(tmp_path / "once", 8) == once  # and [2, 3] again; problem 3's samples were kept
    assert [asked for _, asked in generator.sampled_calls] == [prompts[2:4]]


def test_records_from_before_the_seed_field_resume_as_their_runs_seed(tmp_path, tiny_model_dir):
    data = write_sums(tmp_path / "data", size=4)
    out = tmp_path / "out"
    config = seeds_config(data, out, tiny_model_dir, seed=3, greedy=True)
    generator = tiny_generator(config, tiny_model_dir)
    first = evaluate(config, generator=generator, progress=False, print_table=False)
    # the layout older versions wrote: no "seed" in the records, the seed in run.json
    old = [{key: value for key, value in record.items() if key != "seed"}
           for record in read_samples(out)]
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
    run = json.loads((out / "run.json").read_text()) | {"seed": 3}
    (out / "run.json").write_text(json.dumps(run))
    again = tiny_generator(config, tiny_model_dir)
    second = evaluate(config, generator=again, progress=False, print_table=False)
    assert again.prompts == []
    assert second.benchmarks[0].metrics == first.benchmarks[0].metrics
    assert {r["seed"] for r in read_samples(out) if not r["greedy"]} == {3}


def test_cli_seeds(tmp_path, tiny_model_dir, capsys):
    data = write_sums(tmp_path / "data", size=2)
    out = tmp_path / "out"
    base = ["eval", "--model", str(tiny_model_dir), "--data-dir", str(data), "--output-dir",
            str(out), "--quiet", "--max-new-tokens", "2", "--benchmarks", "gsm8k", "--n", "2",
            "--k", "1,2", "--device", "cpu"]
    assert main([*base, "--seeds", "0,1"]) == 0
    printed = capsys.readouterr().out
    assert "gsm8k seed=0" in printed and "gsm8k seed=1" in printed and "±" in printed
    assert json.loads((out / "results.json").read_text())["config"]["seeds"] == [0, 1]
    assert main([*base, "--seeds", "0,1,0"]) == 2
    assert "--seeds lists a seed more than once: [0]" in capsys.readouterr().err
    assert main([*base, "--seeds", "0,x"]) == 2
    assert "bad value for seeds" in capsys.readouterr().err
    assert main([*base, "--seeds", "none", "--seed", "1"]) == 0  # --seed alone again
    assert "seed=" not in capsys.readouterr().out


def test_compare_reads_only_the_problems_and_seeds_of_the_finished_evaluation(tmp_path, tiny_model_dir):
    """ict compare pairs the problems of an evaluation whose results.json is written. Its
    samples.jsonl also keeps the records of other seeds and, after a run interrupted under a
    larger --limit, of problems beyond the limit (kept for a later resume); complete_verdicts read
    them all (6 problems of 3 seeds, for results of 3 problems and 2 seeds)."""
    from ict.analysis.comparison_runs import complete_verdicts

    data, out = write_sums(tmp_path / "data"), tmp_path / "out"
    first = seeds_config(data, out, tiny_model_dir, limit=6, seeds=(0, 1, 2), num_samples=2, ks=(1,))
    evaluate(first, generator=tiny_generator(first, tiny_model_dir), progress=False, print_table=False)
    (out / "results.json").unlink()  # interrupted before its results
    second = seeds_config(data, out, tiny_model_dir, limit=3, seeds=(0, 1), num_samples=2, ks=(1,))
    evaluate(second, generator=tiny_generator(second, tiny_model_dir), progress=False, print_table=False)
    samples = read_samples(out)
    assert {r["index"] for r in samples} == set(range(6)) and {r["seed"] for r in samples} == {0, 1, 2}
    expected: dict[int, list[bool]] = {}
    for record in samples:
        if not record["greedy"] and record["index"] < 3 and record["seed"] in (0, 1):
            expected.setdefault(record["index"], []).append(record["correct"])
    assert sorted(expected) == [0, 1, 2] and all(len(verdicts) == 4 for verdicts in expected.values())
    assert complete_verdicts(out) == {"gsm8k": expected}


def test_an_interrupt_keeps_the_finished_seeds_of_the_chunk_being_generated(tmp_path, tiny_model_dir):
    """Ctrl-C while seed 2 of the one chunk is generated (all 4 problems, seeds 0,1,2): seeds 0
    and 1 of that chunk are already on disk (a seed's units are written once that seed is graded;
    they used to wait for the whole chunk, so all 8 finished units were lost), the resume samples
    seed 2 only, and its results equal an uninterrupted evaluation's."""
    data = write_sums(tmp_path / "data", size=4)

    def config(out: Path) -> EvalConfig:
        return seeds_config(data, out, tiny_model_dir, num_samples=2, ks=(1, 2), seeds=(0, 1, 2))

    class Interrupted(SeedRecordingGenerator):
        def generate(self, prompts, num_samples, greedy, seed):
            if len(self.sampled_calls) == 2:  # seeds 0 and 1 drawn: Ctrl-C in seed 2's generation
                raise KeyboardInterrupt
            return super().generate(prompts, num_samples, greedy, seed)

    out = tmp_path / "out"
    first = tiny_generator(config(out), tiny_model_dir, Interrupted)
    with pytest.raises(KeyboardInterrupt):
        evaluate(config(out), generator=first, progress=False, print_table=False)
    kept = read_samples(out)
    assert sorted((r["seed"], r["index"], r["sample"]) for r in kept) == [
        (seed, index, sample) for seed in (0, 1) for index in range(4) for sample in range(2)]
    resumed = SeedRecordingGenerator(first.model, first.tokenizer, first.config)
    result = evaluate(config(out), generator=resumed, progress=False, print_table=False)
    assert [len(prompts) for _, prompts in resumed.sampled_calls] == [4]  # seed 2 alone
    assert read_samples(out)[: len(kept)] == kept
    whole = SeedRecordingGenerator(first.model, first.tokenizer, first.config)
    reference = evaluate(config(tmp_path / "whole"), generator=whole, progress=False, print_table=False)
    assert result.benchmarks[0].per_seed == reference.benchmarks[0].per_seed
    assert result.benchmarks[0].metrics == reference.benchmarks[0].metrics

    def completions(directory: Path) -> dict[tuple[int, int, int], str]:
        records = read_samples(directory)
        table = {(r["seed"], r["index"], r["sample"]): r["completion"] for r in records}
        assert len(table) == len(records) == 3 * 4 * 2  # none twice
        return table

    assert completions(out) == completions(tmp_path / "whole")

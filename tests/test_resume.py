"""A run stopped after step k and resumed (`train(..., resume=True)`, i.e. `ict train --resume
--run-dir D`) gives bitwise what the uninterrupted run gives, on the CPU with a fixed seed
(ict/training/trainer.py: "Randomness is drawn from generators seeded by (seed, step)"): the
metrics lines (timing fields aside), the final checkpoint (weights, optimizer, random streams,
trainer state) and eval.json; for every method and the options that draw randomness or carry
state across the stop point, resumed once or twice. Two fresh runs give the same files."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from train_helpers import read_metrics, tiny_config

from ict.runs.checkpoint import latest_checkpoint
from ict.training.trainer import train

TIMING_FIELDS = {"tokens_per_second", "generation_tokens_per_second", "generation_seconds",
                 "training_seconds", "step_seconds"}
CHECKPOINT_FILES = ("model.safetensors", "optimizer.safetensors", "optimizer.json", "rng.safetensors",
                    "rng.json", "trainer_state.json")


def _quiet():
    import io

    from rich.console import Console

    return Console(file=io.StringIO())


def _outcome(run_dir: Path) -> dict[str, object]:
    """What a run must reproduce: its metrics without timing, its final checkpoint's files and
    eval.json (bytes: the key order too)."""
    final = latest_checkpoint(run_dir)
    assert final is not None
    eval_file = run_dir / "eval.json"
    return {"metrics": [{key: value for key, value in line.items() if key not in TIMING_FIELDS}
                        for line in read_metrics(run_dir)],
            "checkpoint": final.name,
            **{name: (final / name).read_bytes() for name in CHECKPOINT_FILES},
            "eval.json": eval_file.read_bytes() if eval_file.exists() else None}


def _check_resumed_equals_uninterrupted(model_dir, task, root: Path, stops: tuple[int, ...], num_steps: int,
                                        fresh_twice: bool = False, **options) -> None:
    whole = root / "whole"
    train(tiny_config(model_dir, task, whole, num_steps=num_steps, **options), console=_quiet())
    expected = _outcome(whole)
    assert [line["step"] for line in expected["metrics"]] == list(range(1, num_steps + 1))
    if fresh_twice:
        again = root / "again"
        train(tiny_config(model_dir, task, again, num_steps=num_steps, **options), console=_quiet())
        assert _outcome(again) == expected
    stopped = root / "stopped"
    for index, stop in enumerate(stops):
        train(tiny_config(model_dir, task, stopped, num_steps=stop, resume=index > 0, **options),
              console=_quiet())
    train(tiny_config(model_dir, task, stopped, num_steps=num_steps, resume=True, **options), console=_quiet())
    got = _outcome(stopped)
    for key in expected:
        assert got[key] == expected[key], key


def test_a_run_resumed_twice_across_every_stateful_option_equals_the_uninterrupted_run(
        tiny_model_dir, arithmetic_task, tmp_path, one_thread):
    """The fast representative: the random selector (its generator), shuffled mini-batches
    (2 updates of 2 mini-batches), micro-batches, the lr warm-up, the full-token warm-up, the
    periodic evaluation and the warm-up's end evaluation across both stop points, a reference
    policy (kl_coef) and the entropy bonus; stopped at steps 1 and 2 of 3."""
    _check_resumed_equals_uninterrupted(
        tiny_model_dir, arithmetic_task, tmp_path, stops=(1, 2), num_steps=3, method="random",
        updates_per_batch=2, mini_batch_size=8, micro_batch_size=4, warmup_steps=3,
        full_token_warmup_steps=2, eval_size=4, eval_every=1, kl_coef=0.05, entropy_coef=0.01)


@pytest.mark.slow  # a process start, a subprocess or a long verifier loop
@pytest.mark.parametrize("options", [
    dict(method="ict"), dict(method="ict", preset="batch"),  # ict's 10-step warm-up: the scopes without
    dict(method="ict", selector={"scope": "sequence"}, full_token_warmup_steps=0),  # it rank tokens
    dict(method="ict", selector={"scope": "group"}, full_token_warmup_steps=0),
    dict(method="grpo", overlong_buffer=4, mask_truncated_completions=True), dict(method="entropy"),
    dict(method="stapo"), dict(method="clip_cov"), dict(method="kl_cov", micro_batch_size=4),
    dict(method="random", preset="paper", full_token_warmup_steps=0), dict(method="ict", lora_rank=4),
    dict(method="random", lora_rank=4, lora_dropout=0.3, disable_dropout=False),
    dict(method="ict", full_token_warmup_steps=1, eval_size=4, dataset_size=6),
], ids=lambda options: "-".join(f"{key}={value}" for key, value in options.items()))
def test_every_method_resumed_equals_the_uninterrupted_run(tiny_model_dir, arithmetic_task, tmp_path, options,
                                                           one_thread):
    """Every registered selector (ICT's presets and scopes), LoRA (with its dropout drawing from
    torch's stream), the overlong penalty, and epochs of the prompt stream crossing the stop point;
    two fresh runs are identical."""
    _check_resumed_equals_uninterrupted(tiny_model_dir, arithmetic_task, tmp_path, stops=(1,), num_steps=3,
                                        fresh_twice=True, **options)


def test_a_run_extended_with_resume_holds_the_uninterrupted_runs_eval_json(tiny_model_dir, arithmetic_task,
                                                                          tmp_path, one_thread):
    """A run that ended at step 1 (its "after" evaluation written), extended to 3 steps with
    --resume --num-steps: eval.json kept that step-1 "after" through steps 2 and 3 (a kill then left
    it as the run's result), and ended as {before, after, after_warmup}, not the uninterrupted run's
    {before, after_warmup, after}."""
    options = dict(method="ict", full_token_warmup_steps=1, eval_size=4)
    keys: dict[str, list[tuple[int, list[str]]]] = {}

    def record(run_dir: Path):
        return lambda metrics: keys.setdefault(run_dir.name, []).append(
            (metrics["step"], list(json.loads((run_dir / "eval.json").read_text()))))

    whole, extended = tmp_path / "whole", tmp_path / "extended"
    train(tiny_config(tiny_model_dir, arithmetic_task, whole, num_steps=3, **options), console=_quiet(),
          on_step=record(whole))
    train(tiny_config(tiny_model_dir, arithmetic_task, extended, num_steps=1, **options), console=_quiet())
    assert list(json.loads((extended / "eval.json").read_text())) == ["before", "after"]
    train(tiny_config(tiny_model_dir, arithmetic_task, extended, num_steps=3, resume=True, **options),
          console=_quiet(), on_step=record(extended))
    assert keys == {"whole": [(step, ["before", "after_warmup"]) for step in (1, 2, 3)],
                    "extended": [(step, ["before", "after_warmup"]) for step in (2, 3)]}
    assert list(json.loads((extended / "eval.json").read_text())) == ["before", "after_warmup", "after"]
    assert (extended / "eval.json").read_bytes() == (whole / "eval.json").read_bytes()
    # resumed at its end (nothing left to train): its "after" stays, and is written again the same
    before = (extended / "eval.json").read_bytes()
    train(tiny_config(tiny_model_dir, arithmetic_task, extended, num_steps=3, resume=True, **options),
          console=_quiet())
    assert (extended / "eval.json").read_bytes() == before


REPEATED = [dict(method="ict", full_token_warmup_steps=0, selector={"scope": "group", "unit": "token_id"}),
            dict(method="ict", full_token_warmup_steps=0, selector={"reference": "seq_mean", "metric": "kl"}),
            dict(method="entropy"), dict(method="random")]
"""Methods that rank or draw in every step (ict's warm-up off), for the repeat in two processes."""


@pytest.mark.slow  # two process starts
def test_two_processes_with_other_hash_seeds_repeat_every_bit(tiny_model_dir, arithmetic_task, tmp_path):
    """The same runs (2 steps each) in two fresh processes with PYTHONHASHSEED 1 and 2 (a set of
    strings iterated in another order, e.g. reasoning-gym's tasks or a hash-ordered population,
    would show), one thread each: the same metrics (timing aside) and final checkpoints' bytes."""
    script = ("import io, json, sys; sys.path.insert(0, sys.argv[1]); import torch; "
              "torch.set_num_threads(1); from pathlib import Path; from rich.console import Console; "
              "from train_helpers import tiny_config; from ict.training.trainer import train\n"
              "for index, options in enumerate(json.loads(sys.argv[5])):\n"
              "    train(tiny_config(Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]) / str(index), "
              "num_steps=2, **options), console=Console(file=io.StringIO()))")
    for hash_seed in ("1", "2"):
        subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent), str(tiny_model_dir),
                        str(arithmetic_task), str(tmp_path / hash_seed), json.dumps(REPEATED)],
                       check=True, env={**os.environ, "PYTHONHASHSEED": hash_seed}, capture_output=True)
    for index in range(len(REPEATED)):
        first, second = _outcome(tmp_path / "1" / str(index)), _outcome(tmp_path / "2" / str(index))
        assert first["checkpoint"] == "step-00000002"
        for key in first:
            assert second[key] == first[key], (REPEATED[index], key)



@pytest.mark.parametrize("changed", ["train", "held-out"])
def test_a_resume_refuses_a_reasoning_gym_task_that_generated_other_questions(
        tiny_model_dir, tmp_path, monkeypatch, one_thread, changed):
    """Some reasoning-gym tasks (0.1.19: isomorphic_strings, ransom_note, ... see docs/training.md
    "Determinism") draw other questions for the same seed in another process; a resume there
    would train (or evaluate) on other data than the uninterrupted run: refused in one line.
    Simulated by another question at index 1 of the training or the held-out problems; the same
    questions resume (trainer_state.json keeps their digest)."""
    import hashlib

    import ict.data.training_data as training_data
    from ict.core.errors import UsageError

    options = dict(dataset="isomorphic_strings", dataset_size=8, eval_size=2, held_out_rule="draws",
                   prompts_per_step=2, num_generations=2, max_new_tokens=4, micro_batch_size=4,
                   generation_batch_size=4)
    run_dir = tmp_path / "run"
    train(tiny_config(tiny_model_dir, tmp_path, run_dir, num_steps=1, **options), console=_quiet())
    state = json.loads((latest_checkpoint(run_dir) / "trainer_state.json").read_text())
    generated = [*training_data.reasoning_gym_problems("isomorphic_strings", 8, 1),  # seed 1, then held out
                 *training_data.reasoning_gym_problems("isomorphic_strings", 2, 1 + 1_000_003)]
    text = json.dumps([problem.prompt for problem in generated], ensure_ascii=False)
    assert state["questions"] == hashlib.sha256(text.encode()).hexdigest()[:16]
    original = training_data.reasoning_gym_problems

    def another_process(name, size, seed, *args):
        problems = original(name, size, seed, *args)
        if (seed == 1) == (changed == "train"):
            problems[1].prompt = "Are the strings 'ab' and 'cd' isomorphic?"
        return problems

    monkeypatch.setattr(training_data, "reasoning_gym_problems", another_process)
    with pytest.raises(UsageError, match="^reasoning-gym task isomorphic_strings generated other questions "
                                         "in this process than the run in .* a resume would train on other "
                                         "data; start another --run-dir"):
        train(tiny_config(tiny_model_dir, tmp_path, run_dir, num_steps=2, resume=True, **options),
              console=_quiet())
    assert latest_checkpoint(run_dir).name == "step-00000001"
    monkeypatch.setattr(training_data, "reasoning_gym_problems", original)
    train(tiny_config(tiny_model_dir, tmp_path, run_dir, num_steps=2, resume=True, **options), console=_quiet())
    assert latest_checkpoint(run_dir).name == "step-00000002"


def _drop_questions_digest(checkpoint: Path) -> str:
    """Make ``checkpoint`` one written before the questions' digest existed (its manifest kept
    valid); return the digest it held."""
    import zlib

    state_file = checkpoint / "trainer_state.json"
    state = json.loads(state_file.read_text())
    digest = state.pop("questions")
    state_file.write_text(json.dumps(state))
    manifest = json.loads((checkpoint / "COMPLETE").read_text())
    manifest["files"]["trainer_state.json"] = {"size": state_file.stat().st_size,
                                               "crc32": zlib.crc32(state_file.read_bytes())}
    (checkpoint / "COMPLETE").write_text(json.dumps(manifest))
    return digest


def test_a_checkpoint_without_a_questions_digest_resumes_and_gets_one(tiny_model_dir, tmp_path, one_thread):
    """A checkpoint written before the digest existed resumes (nothing to check against) and the
    next one records the questions' digest."""
    options = dict(dataset="isomorphic_strings", dataset_size=8, prompts_per_step=2, num_generations=2,
                   max_new_tokens=4, micro_batch_size=4, generation_batch_size=4)
    run_dir = tmp_path / "run"
    train(tiny_config(tiny_model_dir, tmp_path, run_dir, num_steps=1, **options), console=_quiet())
    digest = _drop_questions_digest(latest_checkpoint(run_dir))
    train(tiny_config(tiny_model_dir, tmp_path, run_dir, num_steps=2, resume=True, **options), console=_quiet())
    resumed = latest_checkpoint(run_dir)
    assert resumed.name == "step-00000002"
    assert json.loads((resumed / "trainer_state.json").read_text())["questions"] == digest


def test_a_resume_refuses_a_dataset_file_edited_since_the_run_started(tiny_model_dir, arithmetic_task, tmp_path,
                                                                      one_thread):
    """A dataset file edited between a stop and a resume was not checked (the digest covered
    reasoning-gym tasks only): the resumed run trained on the other questions without a word. It
    is one line naming the file now, before anything is written (metrics.jsonl, config.yaml and
    the checkpoints as they were); the file restored, the run resumes. A checkpoint of a file's
    run written before records no digest: it resumes, and the next one records it."""
    from conftest import write_arithmetic_task

    from ict.core.errors import UsageError

    task = tmp_path / "sums.jsonl"
    task.write_bytes(arithmetic_task.read_bytes())
    run_dir = tmp_path / "run"
    options = dict(eval_size=2)
    train(tiny_config(tiny_model_dir, task, run_dir, num_steps=1, **options), console=_quiet())
    digest = json.loads((latest_checkpoint(run_dir) / "trainer_state.json").read_text())["questions"]
    original = task.read_bytes()
    write_arithmetic_task(task, seed=7)  # other sums in the same file
    written = {name: (run_dir / name).read_bytes() for name in ("metrics.jsonl", "config.yaml", "eval.json")}
    refusal = (f"dataset file {task} holds other questions than the run in {run_dir} trained on (changed since "
               "it started): a resume would train on other data; restore the file, or start another --run-dir")
    with pytest.raises(UsageError, match=f"^{re.escape(refusal)}$"):
        train(tiny_config(tiny_model_dir, task, run_dir, num_steps=2, resume=True, **options), console=_quiet())
    assert {name: (run_dir / name).read_bytes() for name in written} == written
    assert latest_checkpoint(run_dir).name == "step-00000001"
    task.write_bytes(original)
    assert _drop_questions_digest(latest_checkpoint(run_dir)) == digest  # as a checkpoint of before
    train(tiny_config(tiny_model_dir, task, run_dir, num_steps=2, resume=True, **options), console=_quiet())
    resumed = latest_checkpoint(run_dir)
    assert resumed.name == "step-00000002"
    assert json.loads((resumed / "trainer_state.json").read_text())["questions"] == digest


def test_a_resume_refuses_a_hub_dataset_that_gives_other_questions(tiny_model_dir, arithmetic_task, tmp_path,
                                                                   monkeypatch, one_thread):
    """A hub dataset whose rows changed between a stop and a resume (a new revision; the download
    simulated by rows of the test task) is one line naming it; its first rows again, it resumes."""
    import ict.data.training_data as training_data
    from ict.core.errors import UsageError

    rows = [json.loads(line) for line in arithmetic_task.read_text().splitlines()]
    served = {"rows": rows}
    monkeypatch.setattr(training_data, "hub_records", lambda dataset_id, subset, split: list(served["rows"]))
    run_dir = tmp_path / "run"
    train(tiny_config(tiny_model_dir, "someone/sums", run_dir, num_steps=1), console=_quiet())
    served["rows"] = [*rows[:-1], {"question": "what is 9 + 9 ?", "answer": "18"}]
    refusal = ("hub dataset someone/sums now gives other questions than the run in "
               f"{run_dir} trained on (a new revision): a resume would train on other data; start another --run-dir")
    with pytest.raises(UsageError, match=f"^{re.escape(refusal)}$"):
        train(tiny_config(tiny_model_dir, "someone/sums", run_dir, num_steps=2, resume=True), console=_quiet())
    served["rows"] = rows
    train(tiny_config(tiny_model_dir, "someone/sums", run_dir, num_steps=2, resume=True), console=_quiet())
    assert latest_checkpoint(run_dir).name == "step-00000002"


def test_a_run_directory_named_with_brackets_is_printed_as_written(tiny_model_dir, arithmetic_task, tmp_path,
                                                                    one_thread):
    """The console lines that name the run directory went through rich's markup: a directory
    'a[/x]' (a closing tag that closes nothing) stopped `ict train` with a MarkupError before its
    first step, and 'b[i]' printed as 'b'. A fresh run, a resume of it, and a resume that finds
    no checkpoint name each directory as written."""
    import io

    from rich.console import Console

    for name in ("a[/x]", "b[i]"):
        run_dir = tmp_path / name
        for resume in (False, True):
            output = io.StringIO()
            train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=1, resume=resume),
                  console=Console(file=output, width=400))
            text = output.getvalue()
            assert f"run directory: {run_dir}  |" in text
            if resume:
                assert f"resumed from {run_dir}/checkpoints/step-00000001 (step 1)" in text
        empty = tmp_path / "empty" / name
        empty.mkdir(parents=True)
        output = io.StringIO()
        train(tiny_config(tiny_model_dir, arithmetic_task, empty, num_steps=1, resume=True),
              console=Console(file=output, width=400))
        assert f"no complete checkpoint in {empty}; starting fresh" in output.getvalue()


def test_a_run_resumed_from_an_eval_json_without_temperatures_says_nothing_of_another_drawing(
        tiny_model_dir, arithmetic_task, tmp_path, one_thread):
    """A run sampling its held-out evaluations at eval_temperature 0.7 throughout, whose eval.json
    was written before evaluations recorded their temperature, resumed: its summary ended with
    "not comparable: ... (before greedy, ...; eval_temperature changed on a resume?)", about a
    setting that never changed."""
    import io

    from rich.console import Console

    options = dict(method="ict", full_token_warmup_steps=1, eval_size=4, eval_temperature=0.7)
    run_dir = tmp_path / "run"
    train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=1, **options), console=_quiet())
    evaluations = json.loads((run_dir / "eval.json").read_text())
    assert {name: evaluation.pop("temperature") for name, evaluation in evaluations.items()} == {
        "before": 0.7, "after": 0.7}
    (run_dir / "eval.json").write_text(json.dumps(evaluations, indent=1))  # as written before the key
    console = io.StringIO()
    train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=3, resume=True, **options),
          console=Console(file=console, width=400))
    summary = console.getvalue()
    assert "(4 problems, temperature 0.7)" in summary and "not comparable" not in summary



def test_each_held_out_evaluation_during_training_records_the_temperature_it_sampled_at(
        tiny_model_dir, arithmetic_task, tmp_path, one_thread):
    """A run evaluating every 2 steps greedily, resumed after step 2 with eval_temperature 0.7 (an
    option a resume may change): its eval_accuracy curve mixed two temperatures, and metrics.jsonl
    said of neither (config.yaml keeps the last, 0.7, for every point). Each point now names its
    own: 0 at step 2, 0.7 at steps 4 and 6, as given; the lines without an evaluation carry none."""
    options = dict(eval_size=2, eval_every=2)
    run_dir = tmp_path / "run"
    train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=2, eval_temperature=0.0, **options),
          console=_quiet())
    train(tiny_config(tiny_model_dir, arithmetic_task, run_dir, num_steps=6, resume=True, eval_temperature=0.7,
                      **options), console=_quiet())
    lines = read_metrics(run_dir)
    assert [line["step"] for line in lines] == [1, 2, 3, 4, 5, 6]
    assert [line.get("eval_temperature") for line in lines] == [None, 0.0, None, 0.7, None, 0.7]
    assert [("eval_accuracy" in line) for line in lines] == [False, True, False, True, False, True]

"""benchmarks/ict_cost.py, run tiny on the CPU: its rounds, deadlines, verdicts and failure
handling, and its pooled ratio on hand-made inputs."""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import subprocess
import sys
import time

import pytest
import torch
from benchmark_scripts import (
    ROOT,
    argparse_refusal,
    benchmark_module,
    environment_with_root,
    finite,
    table_rows,
)


def test_ict_cost_a_times_every_round_asked_and_stops_at_the_deadline_after_one():
    """(a)'s timed rounds: all ``repeats`` without a deadline; with one already passed, one round
    (never none), each row timed as often as the result says."""
    pytest.importorskip("trl")
    head_rows = benchmark_module("ict_cost_head").head_rows
    for deadline, expected in ((None, 3), (time.time() - 1.0, 1)):
        result = head_rows(8, 50, (1, 2, 4), "cpu", 3, None, deadline)
        assert result["repeats"] == expected
        assert {len(row["seconds"]) for row in result["rows"].values()} == {expected}, result["rows"]


def test_ict_cost_a_times_the_backward_in_the_forwards_tiles_beside_the_default():
    """--backward-ab's row: the same GRPO call with `LinearHead.backward_tile` replaced by the
    forward's tile while it runs (8 token tiles of 16 rows instead of one of 128 here), the same
    gradients; the library's method is back afterwards."""
    from ict.core.stats.heads import LinearHead

    section_a = benchmark_module("ict_cost_head")
    batch = benchmark_module("head_step").head_batch(8, 16, 8, 50)
    shapes: list[tuple[int, int]] = []
    original = vars(LinearHead)["backward_tile"]
    grads = []
    for context in (section_a.forward_tiles_in_backward, contextlib.nullcontext):
        with context():
            shapes.append(LinearHead.backward_tile(128, 16, 300))
            benchmark_module("head_step").ours(batch, "grpo", tile_size=(16, 300)).backward()
        grads.append((batch.hidden.grad.clone(), batch.weight.grad.clone()))
        batch.clear_grads()
    assert shapes == [(16, 300), (128, 38)] and vars(LinearHead)["backward_tile"] is original
    for mine, theirs in zip(*grads):
        torch.testing.assert_close(mine, theirs, atol=1e-6, rtol=1e-5)


def test_ict_cost_a_shuffles_each_rounds_order():
    """(a)'s rounds call the rows in their own seeded shuffled order, read back from each call's
    start, so that no row always follows the same one (a rotation, as before, kept each row's
    predecessor: TRL's head followed the same row in every round)."""
    pytest.importorskip("trl")
    section_a = benchmark_module("ict_cost_head")
    rounds = 4
    rows = section_a.head_rows(8, 50, (1, 2, 4), "cpu", rounds, None, None)["rows"]
    names = list(rows)
    assert names[:len(section_a.A_ROWS)] == list(section_a.A_ROWS)
    orders = [sorted(names, key=lambda name: rows[name]["started"][index]) for index in range(rounds)]
    for index, order in enumerate(orders):
        expected = list(names)
        random.Random(index).shuffle(expected)
        assert order == expected, (index, order)
    predecessors = {order[order.index("trl") - 1] if order.index("trl") else None for order in orders}
    assert len(predecessors) > 1, orders
    # rounds do not overlap: every call of a round starts after every call of the round before
    for index in range(1, rounds):
        assert (min(row["started"][index] for row in rows.values())
                > max(row["started"][index - 1] for row in rows.values()))


def failing_children(tmp_path) -> dict[str, str]:
    """The environment of an ict_cost.py run whose children (``--child``) exit 1 at once: a
    ``sitecustomize`` first on ``PYTHONPATH`` (an unknown model, which did it before, is now
    refused by the parent)."""
    folder = tmp_path / "failing_children"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text('import os\nimport sys\n\nif "--child" in sys.argv:\n    os._exit(1)\n')
    env = environment_with_root()
    return {**env, "PYTHONPATH": os.pathsep.join([str(folder), env["PYTHONPATH"]])}


@pytest.mark.slow  # a process start
def test_ict_cost_exits_1_when_a_section_fails(tmp_path):
    """A child that failed was printed and the script exited 0, so gpu_run.sh and gpu_recheck.sh
    reported success with a section's tables missing."""
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ict_cost.py"), "--tiny", "--device", "cpu",
                             "--sections", "a", "--models", "tiny"],
                            capture_output=True, text=True, env=failing_children(tmp_path), timeout=300)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "failed:\nsection a" in result.stderr, result.stderr[-2000:]


@pytest.mark.slow  # three process starts, each child failing at once
def test_ict_cost_never_reads_a_failed_childs_file_as_its_figures(tmp_path):
    """Every child of a model and section writes one file (``a.json``, ``c-<model>.json``) in the
    work folder, which was never removed before a child started: a child that died gave back what
    an earlier child left there (of this run, or of a run before in the same --work-dir, as
    gpu_run.sh reuses), (a) printed that stale table, and with --isolation run each failed run
    was relabelled as its variant, so two crashes printed ``ict/grpo step time 1.000 (met)``.
    Here every child fails (exits 1 at once) in a work folder holding such files: no table
    of figures, both runs recorded as errors, no verdict."""
    work = tmp_path / "work"
    work.mkdir()
    stale_row = {"label": "stale", "seconds": [0.01], "median": 0.01, "peak": 1.0, "peak_mib": [1.0], "started": [0.0]}
    (work / "a.json").write_text(json.dumps({"tiny": {
        "rows": {"trl": dict(stale_row), "ict_hidden": dict(stale_row)}, "shape": [2, 4, 16], "tokens": 128, "d": 32,
        "V": 1000, "repeats": 1, "dtype": "fp32", "origin_epoch": 0.0}}))
    (work / "c-tiny.json").write_text(json.dumps([{
        "step_times": [1.0, 1.0], "generation_seconds": [0.5, 0.5], "training_seconds": [0.5, 0.5],
        "lengths": [8.0, 8.0], "peak_mib": 1.0}]))
    report_path = tmp_path / "cost.json"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ict_cost.py"), "--tiny", "--device", "cpu",
                             "--sections", "a,c", "--models", "tiny", "--train-models", "tiny",
                             "--isolation", "run", "--rounds", "1", "--steps", "2", "--work-dir", str(work),
                             "--json", str(report_path)],
                            capture_output=True, text=True, env=failing_children(tmp_path), timeout=300)
    assert result.returncode == 1, result.stdout[-2000:]
    assert "###" not in result.stdout.replace("### (c)", ""), result.stdout[-3000:]  # no (a) table
    assert "step time" not in result.stdout, result.stdout[-3000:]
    report = json.loads(report_path.read_text())
    assert report["a"] == {} and report["verdicts"] == []
    runs = report["c"]["tiny"]["runs"]
    assert [run["variant"] for run in runs] == ["grpo", "ict"]
    assert all("the run's process failed (exit 1" in run["error"] and "step_times" not in run for run in runs), runs
    assert report["c"]["tiny"]["summary"] == {}
    assert not (work / "a.json").exists() and not (work / "c-tiny.json").exists()


@pytest.mark.slow  # (a) of a tiny model, then a signal as the second model starts
def test_ict_cost_prints_and_saves_the_models_measured_when_a_time_limit_stops_it(tmp_path):
    """A time limit (``timeout`` sends SIGTERM to the script's process group) in the middle of (a)
    lost every row: the child writes a.json after each model, but the parent died at once, before
    printing or saving anything. Now it ends the child, prints and saves the models the child
    finished and exits 1, saying it was stopped. Signalled as the second model's line appears."""
    import os
    import signal

    pytest.importorskip("trl")
    report_path = tmp_path / "cost.json"
    script = subprocess.Popen([sys.executable, str(ROOT / "benchmarks" / "ict_cost.py"), "--tiny", "--device", "cpu",
                               "--sections", "a", "--models", "tiny,1.5b", "--repeats", "200", "--json",
                               str(report_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=environment_with_root(), start_new_session=True)
    lines = []
    try:
        for line in script.stdout:
            lines.append(line)
            if line.startswith("(a) 1.5b:"):
                os.killpg(script.pid, signal.SIGTERM)
                break
        output = "".join(lines) + script.communicate(timeout=300)[0]
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(script.pid, signal.SIGKILL)
    assert any(line.startswith("(a) 1.5b:") for line in lines), output[-3000:]
    assert script.returncode == 1, output[-3000:]
    assert "### (a) LM-head statistics, tiny shape" in output, output[-3000:]
    assert "stopped by signal 15" in output, output[-3000:]
    report = json.loads(report_path.read_text())
    assert report["a"]["tiny"]["rows"]["grpo_hidden"]["median"] > 0
    assert any("stopped by signal 15" in failure for failure in report["failures"])


def test_ict_cost_a_alone_gets_the_whole_budget():
    """(a)'s deadline: a quarter of --budget beside (b) or (c), all of it alone (gpu_tile_sweep.sh
    now passes a budget below its time limit, which a quarter would have cut short), none without
    a budget."""
    a_deadline = benchmark_module("ict_cost").a_deadline
    assert a_deadline(1000.0, {"budget": 100.0, "sections": ["a"]}) == 1100.0
    assert a_deadline(1000.0, {"budget": 100.0, "sections": ["a", "c"]}) == 1025.0
    assert a_deadline(1000.0, {"budget": 0.0, "sections": ["a"]}) is None


def test_ict_cost_a_verdicts_come_with_each_rounds_ratio(capsys):
    """(a)'s GPU verdicts on a hand-made result of 3 rounds: TRL's head 10, 20, 40 ms, our GRPO
    path 11, 19, 40 ms: the verdict is the ratio of the medians, 20 / 20 = 1.000x (met), and the
    rounds' own ratios 1.1, 0.95 and 1.0 follow it (median 1.000, from 0.950 to 1.100)."""
    section_a = benchmark_module("ict_cost_head")
    rows = {name: {"label": label, "seconds": [0.01, 0.02, 0.04], "median": 0.02, "peak": 100.0}
            for name, label in section_a.A_ROWS.items()}
    rows["grpo_hidden"].update(seconds=[0.011, 0.019, 0.04])
    assert section_a.round_ratios(rows, "grpo_hidden") == pytest.approx([1.1, 0.95, 1.0])
    result = {"shape": [2, 8, 1024], "rows": rows, "tokens": 16384, "d": 1536, "V": 151936, "repeats": 3,
              "dtype": "bf16 autocast"}
    verdicts = section_a.print_a({"1.5b": result}, {"device": "cuda", "tile_size": None})
    printed = capsys.readouterr().out
    assert "1.5b: target GRPO from hidden time <= 1.0x TRL's head: 1.000x (met)" in verdicts
    assert ("target GRPO from hidden time <= 1.0x TRL's head: 1.000x (met)\n"
            "  the same in each of the 3 rounds: median 1.000, from 0.950 to 1.100") in printed
    assert "our tiles the default" in printed


@pytest.mark.slow  # a process start per section and model; ~30 s on 2 cores
def test_ict_cost_runs_tiny_on_the_cpu(tmp_path):
    pytest.importorskip("trl")
    A_ROWS = benchmark_module("ict_cost_head").A_ROWS
    report_path = tmp_path / "cost.json"
    env = environment_with_root()
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "ict_cost.py"), "--tiny", "--device", "cpu",
                             "--ict-tiles", "8x1000", "--tile-size", "8x300", "--backward-ab", "--gradient-mask-ab", "--json",
                             str(report_path)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    tables = {part[:3]: part for part in result.stdout.split("\n### ")[1:]}  # "(a)", "(b)", "(c)"
    assert set(tables) == {"(a)", "(b)", "(c)"}, result.stdout[-3000:]
    # --tile-size reaches every section: ours in (a), ICT in TRL in (b), both variants in (c)
    assert all("our tiles 8x300" in table.splitlines()[0] for table in tables.values()), result.stdout[-3000:]
    # (a): every path, with finite positive seconds and ratios and a finite memory figure
    for label in [*A_ROWS.values(), "ours ICT from hidden states, tile 8x1000",
                  "ours GRPO from hidden states, backward in the forward's tiles",
                  "ours GRPO from hidden states, no gradient mask (the backward reads back)"]:
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
    # RSS on a CPU, runs sharing one process: later runs read the memory earlier ones freed (~0)
    assert "peak memory not judged (CPU runs sharing one process" in result.stdout
    report = json.loads(report_path.read_text())
    assert set(report["a"]["tiny"]["rows"]) == {*A_ROWS, "ict_hidden_8x1000", "grpo_hidden_forward_tiles",
                                                "grpo_hidden_unmasked"}
    assert {run["variant"] for run in report["b"]["tiny"]["runs"]} == {"trl", "ict"}
    assert {run["variant"] for run in report["c"]["tiny"]["runs"]} == {"grpo", "ict"}
    for run in report["c"]["tiny"]["runs"]:
        assert len(run["generation_seconds"]) == len(run["training_seconds"]) == len(run["step_times"])
    assert {run.get("stats_tile_size") for run in report["b"]["tiny"]["runs"]} == {None, "8x300"}  # TRL: none
    assert {run["stats_tile_size"] for run in report["c"]["tiny"]["runs"]} == {"8x300"}
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


def test_ict_cost_prints_no_memory_ratio_it_does_not_judge(capsys):
    """(b) and (c) on a CPU with the runs sharing one process: a later run's resident set reads
    ~0 (the memory earlier runs freed stays held), so the tables printed ratios such as 0.105 and
    0.002 (248 against 0 MiB) that measure nothing, with the "not judged" note on (b) alone. The
    ratio is "-" there, in both, with the note; with each run in its own process (and on a GPU)
    it is the ratio, and (b) judges it."""
    ict_cost = benchmark_module("ict_cost")

    def run(variant, peak):
        return {"config": "full", "round": 0, "variant": variant, "step_times": [9.0, 1.0], "wall": [9.0, 1.0],
                "generation_seconds": [4.0, 0.5], "training_seconds": [4.0, 0.5], "lengths": [8.0, 8.0],
                "peak_mib": peak}

    for section in ("b", "c"):
        old, new = ict_cost.runs.VARIANTS[section]
        summary = ict_cost.summarize([run(new, 0.5), run(old, 248.0)], section)
        for device, isolation, shown in (("cpu", "model", "-"), ("cpu", "run", "0.002"), ("cuda", "model", "0.002")):
            settings = {"device": device, "isolation": isolation, "prompts": 2, "completions": 4, "length": 8,
                        "rounds": 1, "steps": 2, "tile_size": None}
            verdicts = ict_cost.print_train(section, "tiny", summary, settings)
            printed = capsys.readouterr().out
            (row,) = table_rows(printed, ("full", f"{new} / {old}"))
            assert row[7] == shown, (section, device, isolation, row)
            judged = "peak memory not judged" in printed
            assert judged == (shown == "-"), (section, device, isolation, printed)
            if section == "b":
                assert ("peak memory 0.002" in verdicts[0]) == (shown != "-"), verdicts


@pytest.mark.parametrize(("options", "message"), [
    (["--steps", "1"], "--steps: at least 2, not 1"),
    (["--a-shape", "2x8"], "--a-shape: PROMPTSxCOMPLETIONSxPOSITIONS"),
    (["--a-shape", "2x8xa"], "--a-shape: PROMPTSxCOMPLETIONSxPOSITIONS"),
    (["--repeats", "0"], "--repeats: at least 1, not 0"),
    (["--configs", "full,ful"], "--configs: ful unknown"),
    (["--sections", "a,d"], "--sections: d unknown"),
    (["--models", "tiny,7b"], "--models: 7b unknown (known: 0.5b, 1.5b, tiny)"),
    (["--train-models", "0.5B"], "--train-models: 0.5B unknown"),
    (["--tile-size", "0x5"], "--tile-size: tile size must be 'auto' or TOKENSxVOCAB"),
    (["--ict-tiles", "8x1000,8xq"], "--ict-tiles: tile size must be 'auto' or TOKENSxVOCAB"),
    (["--ict-tiles", "auto"], "--ict-tiles: TOKENSxVOCAB tiles (comma-separated), not 'auto'")])
def test_ict_cost_rejects_bad_options_in_one_line(options, message, monkeypatch, capsys):
    """Bad options end with argparse's one-line error (exit 2) before any child starts: before,
    --steps 1 timed each run's warm-up step as its figure, --a-shape 2x8xa raised a ValueError,
    --a-shape 2x8 failed in the child, --configs ful ran full fine-tuning labelled 'ful',
    --sections a,d ran (a) alone without a word, --models 7b started a child that died on a
    KeyError traceback, a bad --ict-tiles exited 1 blaming --tile-size, and --ict-tiles auto
    died in the child on a TypeError."""
    assert message in argparse_refusal("ict_cost", ["--device", "cpu", *options], monkeypatch, capsys)


@pytest.mark.parametrize(("options", "message"), [
    (["--steps", "1"], "--steps: at least 2, not 1"),
    (["--rounds", "0"], "--rounds: at least 1, not 0")])
def test_trl_overhead_rejects_counts_that_leave_nothing_timed(options, message, monkeypatch, capsys):
    """trl_overhead.py drops each run's first step: --steps 1 (or --rounds 0) ran every child for
    minutes and then died on a StatisticsError traceback (the median of no step); now argparse's
    one-line error (exit 2), before any child starts."""
    monkeypatch.setattr(subprocess, "run", lambda *args, **kwargs: pytest.fail("a child started"))
    assert message in argparse_refusal("trl_overhead", options, monkeypatch, capsys)


def test_trl_overhead_times_the_backwards_gpu_work_in_step_time(monkeypatch, tmp_path):
    """On a GPU TRL's ``step_time`` ends when ``Trainer.training_step`` returns, with the backward's
    kernels only queued: trl_overhead.py --device cuda timed their launches, not their work, for
    both variants. Now the device is synchronised inside it (as ict_cost.py's (b) does); a fake
    trainer on the CPU, with ``torch.cuda.synchronize`` recorded, shows the order."""
    import transformers
    import trl

    import ict.integrations.trl  # noqa: F401 - before GRPOConfig is replaced below (its config subclasses it)
    import ict.models.loading

    events: list[str] = []
    monkeypatch.setattr(transformers.Trainer, "training_step", lambda self, *args: events.append("backward queued"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args: events.append("synchronize"))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *args: 0)
    monkeypatch.setattr(ict.models.loading, "offline_default_path", lambda: tmp_path)
    monkeypatch.setattr(transformers.AutoTokenizer, "from_pretrained", lambda *args, **kwargs: None)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", lambda *args, **kwargs: None)

    class FakeTrainer:
        def __init__(self, **kwargs):
            self.state = type("State", (), {"log_history": [{"step_time": 1.0, "completions/mean_length": 4.0}]})

        def train(self):
            transformers.Trainer.training_step(self, None, None)
            events.append("step_time read")

    monkeypatch.setattr(trl, "GRPOTrainer", FakeTrainer)
    monkeypatch.setattr(trl, "GRPOConfig", lambda **kwargs: kwargs)
    trl_overhead = benchmark_module("trl_overhead")
    sys.path.insert(0, str(ROOT / "benchmarks"))  # as when run as a script: ict_cost_runs beside it
    try:
        trl_overhead.child("trl", 2, 2, 4, str(tmp_path / "out.json"), 1, "cuda", 1)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    assert events == ["backward queued", "synchronize", "step_time read"]
    assert json.loads((tmp_path / "out.json").read_text())["step_times"] == [1.0]

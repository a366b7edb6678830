"""The figures of benchmarks/ict_cost.py (its summaries, ratios, verdicts, (a)'s medians and
peaks, (b)/(c)'s pairs and time budget), gpu_clocks.py, stats_speed.py and stats_memory.py on
hand-made inputs with hand-worked numbers, each test fast (no model, no process)."""

from __future__ import annotations

import itertools
import json
import sys
import time
from types import SimpleNamespace

import pytest
from benchmark_scripts import benchmark_module, table_rows


def test_plan_pairs_alternates_the_variant_order_round_by_round():
    runs = benchmark_module("ict_cost_runs")
    assert runs.plan_pairs(["full", "lora"], 3, "b") == [
        ("full", 0, ("trl", "ict")), ("lora", 0, ("trl", "ict")), ("full", 1, ("ict", "trl")),
        ("lora", 1, ("ict", "trl")), ("full", 2, ("trl", "ict")), ("lora", 2, ("trl", "ict"))]


def test_cost_of_a_run_is_the_median_timed_wall_step_and_the_median_overhead():
    """Walls (not TRL's step_time) after each run's first: full 2, 4 and 3, 5 -> median 3.5 s a
    step; run seconds 20 and 23 less the steps after the first, 6 and 8 -> overheads 14 and 15
    (the slow first steps 10 and 9 included), median 14.5; lora alone: 50 s a step, 200 - 50 =
    150 s; an unknown config falls back to all finished runs: median of 2, 4, 3, 5, 50 = 4 and of
    14, 15, 150 = 15. An errored run counts for nothing."""
    runs = benchmark_module("ict_cost_runs")
    results = [{"config": "full", "wall": [10.0, 2.0, 4.0], "step_times": [1.0] * 3, "seconds": 20.0},
               {"config": "full", "wall": [9.0, 3.0, 5.0], "step_times": [1.0] * 3, "seconds": 23.0},
               {"config": "lora", "wall": [50.0, 50.0], "step_times": [1.0] * 2, "seconds": 200.0},
               {"config": "full", "error": "boom", "seconds": 1.0}]
    assert runs._cost(results, "full") == (3.5, 14.5)
    assert runs._cost(results, "lora") == (50.0, 150.0)
    assert runs._cost(results, "other") == (4.0, 15.0)
    assert runs._cost(results[3:], "full") is None


def test_run_pairs_shares_the_time_left_and_skips_a_pair_that_cannot_end_in_time(monkeypatch):
    """A clock that moves only as runs take 2 s + 1 s a step, 4 pairs of (c), 6 steps, deadline
    at 38 s: pair 0 in full (2 x 8 s, t = 16); pair 1: per run (38 - 16) / (2 x 3) = 3.67 s, less
    the 2 s overhead = 1.67 steps -> at least 2 (2 x 4 s, t = 24); pair 2: 14 / 4 = 3.5 s -> 2
    steps (t = 32); pair 3: 2 steps would end at 32 + 2 x 4 = 40 > 38: skipped, and recorded."""
    runs = benchmark_module("ict_cost_runs")
    now = [0.0]
    monkeypatch.setattr(runs, "time", SimpleNamespace(time=lambda: now[0]))

    def run_one(variant, config, index, steps):
        now[0] += 2.0 + steps
        return {"step_times": [1.0] * steps, "wall": [1.0] * steps}

    results = runs.run_pairs(runs.plan_pairs(["full"], 4, "c"), 6, 38.0, run_one)
    assert [(r["round"], r["variant"], len(r["step_times"])) for r in results[:-1]] == [
        (0, "grpo", 6), (0, "ict", 6), (1, "ict", 2), (1, "grpo", 2), (2, "grpo", 2), (2, "ict", 2)]
    assert [r["seconds"] for r in results[:-1]] == [8.0, 8.0, 4.0, 4.0, 4.0, 4.0]
    assert results[-1] == {"config": "full", "round": 3, "skipped": "time budget"}
    assert now[0] == 32.0
    now[0] = 0.0  # no deadline: every pair in full
    assert [len(r["step_times"]) for r in runs.run_pairs(runs.plan_pairs(["full"], 2, "c"), 6, None, run_one)] == [6] * 4


def test_run_pairs_counts_a_slow_first_step_in_the_time_a_pair_takes(monkeypatch):
    """A run takes 2 s + 10 s for its first step (compiles, warm-up) + 1 s a later step; 3 pairs
    of 6 steps, deadline 50 s. Pair 0 in full (2 x 17 s, t = 34): 1 s a step, overhead 17 - 5 = 12
    s. Pair 1 even at 2 steps takes 2 x (12 + 1) = 26 s, to t = 60: skipped, as pair 2. The
    estimate was 2 x (2 + 2 x 1) = 8 s (run time less all its steps, then 2 steps at 1 s): pair 1
    ran and the benchmark ended at 60 s, 10 s past its deadline. With a 60 s deadline it fits."""
    runs = benchmark_module("ict_cost_runs")
    now = [0.0]
    monkeypatch.setattr(runs, "time", SimpleNamespace(time=lambda: now[0]))

    def run_one(variant, config, index, steps):
        now[0] += 12.0 + (steps - 1)
        return {"step_times": [10.0] + [1.0] * (steps - 1), "wall": [10.0] + [1.0] * (steps - 1)}

    results = runs.run_pairs(runs.plan_pairs(["full"], 3, "c"), 6, 50.0, run_one)
    assert [r.get("skipped") for r in results] == [None, None, "time budget", "time budget"]
    assert now[0] == 34.0
    now[0] = 0.0
    results = runs.run_pairs(runs.plan_pairs(["full"], 3, "c"), 6, 60.0, run_one)
    assert [len(r.get("step_times", [])) for r in results] == [6, 6, 2, 2, 0]
    assert now[0] == 60.0
    now[0] = 0.0  # deadline 100: pair 1's share (100 - 34) / 4 = 16.5 s a run is 12 s + 4 further
    results = runs.run_pairs(runs.plan_pairs(["full"], 3, "c"), 6, 100.0, run_one)  # steps: 5
    assert [len(r["step_times"]) for r in results] == [6, 6, 5, 5, 6, 6]  # then (100 - 66) / 2: 6
    assert now[0] == 100.0


def test_memory_meter_on_a_cpu_reads_the_peak_of_its_region_above_its_start():
    """64 MiB touched and freed before the start is not the region's; 32 MiB touched and freed
    inside it is (the resident set's high-water mark, reset at the start, minus the resident set
    then)."""
    torch = pytest.importorskip("torch")
    runs = benchmark_module("ict_cost_runs")
    meter = runs.MemoryMeter("cpu")
    before = torch.ones(64 * 2**18)
    before += 1
    del before
    meter.start()
    if meter.base is None:
        pytest.skip("no /proc/self/clear_refs")
    assert meter.peak_mib() < 8
    meter.start()
    inside = torch.ones(32 * 2**18)
    inside += 1
    del inside
    assert 31 < meter.peak_mib() < 48


def hand_run(variant, round_index, steps, wall, generation, training, peak, compiles=None):
    """A run of (c) with a first (warm-up) step of 99 s, 80 s of wall, 50 s generating, length 4."""
    return {"config": "full", "round": round_index, "variant": variant, "step_times": [99.0, *steps],
            "wall": [80.0, *wall], "generation_seconds": [50.0, *generation],
            "training_seconds": [40.0, *training], "lengths": [4.0] + [8.0] * len(steps), "peak_mib": peak,
            "triton_compile_seconds": compiles or [9.0] + [0.0] * len(steps)}


def test_summarize_takes_medians_over_the_timed_steps_of_whole_pairs(capsys):
    """ICT: steps 1, 2 | 6 -> median 2 (mean 3); walls 1.1, 2.1 | 6.1 -> 2.1; generation 0.5, 1 | 4
    -> 1; training 0.25, 0.5 | 1 -> 0.5; rests 0.5, 1, 2 -> 1; peaks 100, 300 -> 300; compiles
    0.1 + 0.2 = 0.3 s; length 8 (the warm-up's 4 dropped). GRPO: 2, 4 | 3 -> 3; walls 3.2;
    generation 1.5; training 0.75; rest 1.5; peak 200. Round 2's ICT run has no GRPO partner (it
    failed): left out. Ratios ICT / GRPO: 2/3 = 0.667, wall 2.1/3.2 = 0.656, generation 1/1.5 and
    training 0.5/0.75 = 0.667, length 1, memory 300/200 = 1.5 (a GPU)."""
    ict_cost = benchmark_module("ict_cost")
    results = [hand_run("ict", 0, [1.0, 2.0], [1.1, 2.1], [0.5, 1.0], [0.25, 0.5], 100.0, [9.0, 0.1, 0.2]),
               hand_run("grpo", 0, [2.0, 4.0], [2.2, 4.2], [1.0, 2.0], [0.5, 1.0], 200.0),
               hand_run("grpo", 1, [3.0], [3.2], [1.5], [0.75], 150.0),
               hand_run("ict", 1, [6.0], [6.1], [4.0], [1.0], 300.0),
               hand_run("ict", 2, [100.0], [100.0], [1.0], [1.0], 999.0),
               {"config": "full", "round": 2, "variant": "grpo", "error": "boom"}]
    summary = ict_cost.summarize(results, "c")["full"]
    ict, grpo = summary["ict"], summary["grpo"]
    assert (ict["step_time"], ict["wall"], ict["generation"], ict["training"], ict["rest"]) == (2.0, 2.1, 1.0, 0.5, 1.0)
    assert (ict["length"], ict["peak_mib"], ict["runs"], ict["timed_steps"]) == (8.0, 300.0, 2, 3)
    assert ict["triton_compile_seconds"] == pytest.approx(0.3)
    assert (grpo["step_time"], grpo["wall"], grpo["generation"], grpo["training"], grpo["rest"]) == (
        3.0, 3.2, 1.5, 0.75, 1.5)
    assert grpo["peak_mib"] == 200.0
    settings = {"device": "cuda", "isolation": "model", "prompts": 2, "completions": 4, "length": 8, "rounds": 2,
                "steps": 3, "tile_size": None}
    verdicts = ict_cost.print_train("c", "tiny", {"full": summary}, settings)
    (row,) = table_rows(capsys.readouterr().out, ("full", "ict / grpo"))
    assert row[2:8] == ["0.667", "0.656", "0.667", "0.667", "1.000", "1.500"]
    assert verdicts[0] == "tiny full: ict/grpo step time 0.667 (target <= 1.05, met)"


def summary_row(step_time, peak):
    return {"step_time": step_time, "wall": float("nan"), "generation": float("nan"), "training": float("nan"),
            "rest": float("nan"), "generation_all": [], "length": 8.0, "peak_mib": peak, "runs": 2, "timed_steps": 2,
            "alloc_retries": 0, "triton_compile_seconds": 0.0, "first_step_syncs": None}


@pytest.mark.parametrize(("ict_step", "ict_peak", "time_met", "memory_met"),
                         [(1.05, 100.0, "met", "met"), (1.1, 102.0, "NOT met", "NOT met")])
def test_trl_verdicts_judge_ict_over_trl_at_their_targets(ict_step, ict_peak, time_met, memory_met):
    """(b) on a GPU: TRL 1 s and 100 MiB. ICT 1.05 s, 100 MiB: both targets met (<= 1.05, <= 1.00);
    ICT 1.1 s, 102 MiB: 1.100 and 1.020, neither."""
    ict_cost = benchmark_module("ict_cost")
    summary = {"full": {"trl": summary_row(1.0, 100.0), "ict": summary_row(ict_step, ict_peak)}}
    settings = {"device": "cuda", "isolation": "model", "prompts": 2, "completions": 4, "length": 8, "rounds": 2,
                "steps": 3, "tile_size": None}
    (verdict,) = ict_cost.print_train("b", "m", summary, settings)
    assert verdict == (f"m full: ict/trl step time {ict_step / 1.0:.3f} (target <= 1.05, {time_met}), peak memory "
                       f"{ict_peak / 100.0:.3f} ({ict_peak - 100.0:+.4f} MiB; target <= 1.00, {memory_met})")


def test_head_rows_median_and_peak_are_of_the_timed_calls(monkeypatch):
    """(a) with a clock whose every reading is later by more than the one before (call durations
    grow, so a mean is not the median) and a meter whose peaks grow call by call: each row's median
    is the middle of its 3 timed calls, its peak the largest of their peaks, the warm-up in
    neither. The deadline: a round takes ~13 readings; with time() fixed at 1000, a deadline at
    1000 + 1e-9 stops after one round, one at 1000 + 1e9 does not."""
    pytest.importorskip("trl")
    section_a = benchmark_module("ict_cost_head")
    ticks = itertools.count()
    clock = SimpleNamespace(perf_counter=lambda: next(ticks) ** 3 * 1e-6, time=lambda: 1000.0)
    monkeypatch.setattr(section_a, "time", clock)
    peaks = itertools.count(1.0)

    class Meter:
        def __init__(self, device):
            pass

        def start(self):
            pass

        def peak_mib(self):
            return next(peaks)

    monkeypatch.setattr(section_a.runs, "MemoryMeter", Meter)
    monkeypatch.setattr(section_a.runs, "free_memory", lambda device: 0.0)  # gc.collect: seconds, no figure
    result = section_a.head_rows(8, 50, (1, 2, 4), "cpu", 3, None, 1000.0 + 1e9)
    assert result["repeats"] == 3
    for row in result["rows"].values():
        seconds = row["seconds"]
        assert len(seconds) == len(row["peak_mib"]) == 3 and seconds[0] < seconds[1] < seconds[2]
        assert row["median"] == seconds[1] != sum(seconds) / 3
        assert row["peak"] == row["peak_mib"][2] > row["peak_mib"][0]
    assert section_a.head_rows(8, 50, (1, 2, 4), "cpu", 3, None, 1000.0 + 1e-9)["repeats"] == 1


def test_gpu_clocks_reads_utc_timestamps_whatever_the_local_zone(monkeypatch, tmp_path):
    """gpu_env.sh has nvidia-smi write UTC: 2026/11/27 12:00:00.250 is 1795780800.25 s since the
    epoch in any local zone. A row's median is of its calls: 0.1, 0.2, 0.6 s -> 0.2 (mean 0.3)."""
    gpu_clocks = benchmark_module("gpu_clocks")
    clocks = tmp_path / "clocks.csv"
    clocks.write_text("2026/11/27 12:00:00.250, 1980, 600.00, 50\n")
    monkeypatch.setenv("TZ", "America/New_York")
    time.tzset()
    try:
        samples = gpu_clocks.read_samples(clocks)
    finally:
        monkeypatch.undo()
        time.tzset()
    assert samples == [(1795780800.25, 1980.0, 600.0, 50.0)]
    result = {"origin_epoch": 1795780800.0,
              "rows": {"trl": {"label": "TRL", "seconds": [0.1, 0.2, 0.6], "started": [0.0, 1.0, 2.0]}}}
    table = gpu_clocks.row_clocks(result, samples)
    assert table["trl"]["median"] == 0.2 and table["trl"]["samples"] == 0


def a_row(label, median, peak):
    return {"label": label, "seconds": [median], "median": median, "peak": peak}


def test_print_a_prints_each_row_over_trls_head_and_judges_it_at_its_limit(capsys):
    """(a) on a GPU, TRL's head 2 s and 100 MiB. Model m1: ICT 3 s (1.50x, met: <= 1.5), 100 MiB
    (1.00x, met: <= 1.0), GRPO 2.02 s (1.01x, NOT met: <= 1.0). Model m2: ICT 3.1 s (1.55x, NOT
    met), 120 MiB (1.20x, NOT met). On a CPU (m3), ICT 2.4 s: 1.20x TRL's, NOT met (<= 1.0)."""
    section_a = benchmark_module("ict_cost_head")

    def result(ict_seconds, ict_peak, naive_seconds=float("nan")):
        rows = {"trl": a_row("TRL", 2.0, 100.0), "ict_hidden": a_row("ICT", ict_seconds, ict_peak),
                "grpo_hidden": a_row("GRPO", 2.02, 50.0), "naive": {"label": "naive", "seconds": [], "error": "oom"}}
        return {"shape": [2, 8, 1024], "rows": rows, "tokens": 16384, "d": 896, "V": 151936, "repeats": 1,
                "dtype": "bf16 autocast"}

    verdicts = section_a.print_a({"m1": result(3.0, 100.0), "m2": result(3.1, 120.0)},
                                 {"device": "cuda", "tile_size": None})
    printed = capsys.readouterr().out
    assert table_rows(printed, ("ICT",)) == [["ICT", "3.0000", "1.50", "100.0", "1.00"],
                                             ["ICT", "3.1000", "1.55", "120.0", "1.20"]]
    assert table_rows(printed, ("GRPO",))[0] == ["GRPO", "2.0200", "1.01", "50.0", "0.50"]
    assert table_rows(printed, ("naive",))[0][:2] == ["naive", "oom"]
    assert verdicts == ["m1: target ICT from hidden time <= 1.5x TRL's head: 1.500x (met)",
                        "m1: target ICT from hidden memory <= 1.0x TRL's head: 1.000x (met)",
                        "m1: target GRPO from hidden time <= 1.0x TRL's head: 1.010x (NOT met)",
                        "m2: target ICT from hidden time <= 1.5x TRL's head: 1.550x (NOT met)",
                        "m2: target ICT from hidden memory <= 1.0x TRL's head: 1.200x (NOT met)",
                        "m2: target GRPO from hidden time <= 1.0x TRL's head: 1.010x (NOT met)"]
    (cpu,) = section_a.print_a({"m3": result(2.4, 100.0)}, {"device": "cpu", "tile_size": None, "threads": 2})
    assert cpu.endswith(": 1.200x (NOT met)") and cpu.startswith("m3: target CPU: ICT <= 1.0x TRL's head")
    assert section_a.number(float("nan"), 2) == "-" and section_a.number(1.005, 1) == "1.0"


def test_print_a_says_when_a_row_failed_after_some_timed_calls(capsys):
    """A row out of memory in its third timed call after 2 s and 4 s: its median (3 s, 1.50x) is
    printed as the median of 2 calls, then the error (it read as a full median of 3)."""
    section_a = benchmark_module("ict_cost_head")
    rows = {"trl": a_row("TRL", 2.0, 100.0),
            "ict_hidden": {**a_row("ICT", 3.0, 90.0), "seconds": [2.0, 4.0], "error": "out of memory"},
            "grpo_hidden": a_row("GRPO", 2.0, 50.0)}
    section_a.print_a({"m": {"shape": [2, 8, 1024], "rows": rows, "tokens": 16384, "d": 896, "V": 151936,
                             "repeats": 3, "dtype": "bf16 autocast"}}, {"device": "cuda", "tile_size": None})
    printed = capsys.readouterr().out
    assert table_rows(printed, ("ICT",)) == [["ICT", "3.0000 (median of 2, then out of memory)", "1.50", "90.0", "0.90"]]


def test_stats_speed_prints_medians_and_ratios_to_the_first_case(monkeypatch, capsys):
    """--step alone, hand-made timings: GRPO 1, 2, 9 s -> median 2 (mean 4), faults 10, 20, 90 -> 20;
    ICT 3, 3, 30 -> 3, ratio to GRPO 3 / 2 = 1.50, faults 5, 7, 100 -> 7."""
    stats_speed = benchmark_module("stats_speed")
    grpo, ict = "hidden, forward + backward grpo", "hidden, forward + backward ict"
    measured = {"seconds": {grpo: [1.0, 2.0, 9.0], ict: [3.0, 3.0, 30.0]},
                "faults": {grpo: [10, 20, 90], ict: [5, 7, 100]}}
    monkeypatch.setattr(stats_speed, "time_cases", lambda args, rounds: measured)
    monkeypatch.setattr(sys, "argv", ["stats_speed.py", "--step", "--rounds", "3"])
    monkeypatch.setattr(sys, "path", list(sys.path))
    stats_speed.main()
    printed = capsys.readouterr().out
    assert table_rows(printed, ("hidden, forward + backward",)) == [
        ["hidden, forward + backward", "grpo", "2.000", "1.00", "20"],
        ["hidden, forward + backward", "ict", "3.000", "1.50", "7"]]


def test_stats_speed_against_a_baseline_alternates_the_checkouts_and_divides_by_the_baseline(
        monkeypatch, capsys, tmp_path):
    """--baseline, 3 rounds: this checkout, baseline; baseline, this; this, baseline. GRPO here 1, 2,
    9 s -> 2, the baseline's 4, 4, 5 -> 4: 0.50; ICT 6 -> 6 against 3, 3, 30 -> 3: 2.00; faults
    10, 11, 12 -> 11 here, 1, 2, 3 -> 2 there."""
    stats_speed = benchmark_module("stats_speed")
    baseline = tmp_path / "parent"
    (baseline / "ict").mkdir(parents=True)
    grpo, ict = "hidden, forward + backward grpo", "hidden, forward + backward ict"
    figures = {str(stats_speed.ROOT): {grpo: ([1.0, 2.0, 9.0], [10, 11, 12]), ict: ([6.0] * 3, [0] * 3)},
               str(baseline.resolve()): {grpo: ([4.0, 4.0, 5.0], [1, 2, 3]), ict: ([3.0, 3.0, 30.0], [0] * 3)}}
    order = []

    def run(command, capture_output, text, cwd):
        index = sum(tree == cwd for tree in order)
        order.append(cwd)
        mine = figures[cwd]
        measured = {"seconds": {case: [mine[case][0][index]] for case in mine},
                    "faults": {case: [mine[case][1][index]] for case in mine}}
        return SimpleNamespace(returncode=0, stdout=json.dumps(measured) + "\n", stderr="")

    monkeypatch.setattr(stats_speed, "subprocess", SimpleNamespace(run=run))
    monkeypatch.setattr(sys, "argv", ["stats_speed.py", "--step", "--rounds", "3", "--baseline", str(baseline)])
    stats_speed.main()
    here, there = str(stats_speed.ROOT), str(baseline.resolve())
    assert order == [here, there, there, here, here, there]
    assert table_rows(capsys.readouterr().out, ("hidden, forward + backward",)) == [
        ["hidden, forward + backward", "grpo", "2.000", "4.000", "0.50", "11", "2"],
        ["hidden, forward + backward", "ict", "6.000", "3.000", "2.00", "0", "0"]]


def test_stats_speed_times_each_case_after_one_untimed_warm_up(monkeypatch):
    """2 rounds of GRPO's and ICT's steps: 3 calls of each (the first a warm-up), 2 timings each."""
    pytest.importorskip("torch")
    stats_speed, head_step = benchmark_module("stats_speed"), benchmark_module("head_step")
    calls = []

    def ours(batch, name, source, logits):
        calls.append(name)
        return batch.hidden.sum()

    monkeypatch.setattr(head_step, "ours", ours)
    monkeypatch.setitem(sys.modules, "head_step", head_step)
    torch = pytest.importorskip("torch")
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: None)
    args = SimpleNamespace(step=True, source="hidden", rows=8, length=2, width=4, vocab=10, threads=1)
    measured = stats_speed.time_cases(args, 2)
    assert calls == ["grpo", "ict"] * 3
    assert {len(times) for kind in measured.values() for times in kind.values()} == {2}


def test_stats_memory_prints_the_extra_memory_beyond_the_input_gradients_and_its_ratio(monkeypatch, capsys):
    """V = 65,536, N = 4,096, d = 896: the input gradients take (65,536 + 4,096) x 896 x 4 bytes =
    238 MiB. Hidden: 300 MiB extra -> 62 MiB beyond them; logits: 1,300 MiB -> 1,062 MiB; the
    ratio hidden / logits 300 / 1,300 = 0.231."""
    stats_memory = benchmark_module("stats_memory")
    mib = 2**20
    rows = {"hidden": {"peak_bytes": 1000 * mib, "extra_bytes": 300 * mib, "seconds": 1.5},
            "logits": {"peak_bytes": 2000 * mib, "extra_bytes": 1300 * mib, "seconds": 2.5}}
    monkeypatch.setattr(stats_memory, "spawn", lambda variant, *rest: rows[variant])
    monkeypatch.setattr(sys, "argv", ["stats_memory.py", "--vocabs", "65536", "--positions", "4096",
                                      "--width", "896"])
    stats_memory.main()
    assert table_rows(capsys.readouterr().out, ("65,536",)) == [
        ["65,536", "hidden", "1.5", "1000", "300", "62", "0.231"],
        ["65,536", "logits", "2.5", "2000", "1300", "1062", "-"]]


def test_stats_memory_worker_measures_above_the_resident_set_before_the_call(monkeypatch):
    """The worker's extra memory is the peak less the peak before the call (the process's own,
    hundreds of MiB with torch loaded), never the whole peak."""
    torch = pytest.importorskip("torch")
    stats_memory = benchmark_module("stats_memory")
    monkeypatch.setattr(torch, "set_num_threads", lambda threads: None)
    result = stats_memory.worker("hidden", 50, 16, 8, "group_mean")
    assert 0 <= result["extra_bytes"] and result["peak_bytes"] - result["extra_bytes"] > 50 * 2**20


def test_trl_head_is_called_as_trls_grpo_trainer_calls_it():
    """head_step's TRL row: the vocabulary chunk TRL 1.16's GRPOTrainer passes (its utils'
    _CHUNKED_LOGPROB_CHUNK_SIZE), and our selection at ratio 0.1 as in (b)'s 'ict:ratio=0.1'."""
    import importlib.util
    import re
    from pathlib import Path

    spec = importlib.util.find_spec("trl")
    if spec is None or spec.origin is None:
        pytest.skip("no trl")
    source = (Path(spec.origin).parent / "trainer" / "utils.py").read_text()  # read, not imported: seconds
    (chunk,) = re.findall(r"^_CHUNKED_LOGPROB_CHUNK_SIZE = (\d+)$", source, re.MULTILINE)
    head_step = benchmark_module("head_step")
    assert head_step.TRL_VOCAB_CHUNK == int(chunk)
    assert head_step.ICT_OPTIONS == {"ratio": 0.1}

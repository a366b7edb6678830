"""The speed and agreement scripts in benchmarks/, run tiny on the CPU (stats_profile.py,
stats_speed.py, stats_agreement.py, kernel_sass.py, fast_log_bound.py; stats_memory.py's table),
and their pure helpers on hand-made inputs (sync census, Triton compile timer, device idle).
ict_cost.py: tests/test_benchmark_ict_cost.py; the GPU's shell scripts: tests/test_gpu_scripts.py."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import pytest
import torch
from benchmark_scripts import (
    BENCHMARKS,
    ROOT,
    argparse_refusal,
    benchmark_module,
    environment_with_root,
    finite,
    table_rows,
)


def test_sync_census_names_each_synchronisation_by_its_line():
    """benchmarks/sync_census.py on CPU tensors: each operator that reads a value back, once, at
    the line that ran it (``.tolist()`` too, which a CPU tensor answers without the dispatcher);
    nothing for operators that only launch work, nor, counting the device alone, for a CPU
    tensor's reads; and the copies' kinds, from the devices of their ends (no GPU needed)."""
    import inspect
    from types import SimpleNamespace

    sync_census = benchmark_module("sync_census")
    SyncCensus, _kind = sync_census.SyncCensus, sync_census._kind

    def here() -> str:
        return f"tests/test_benchmark_scripts.py:{inspect.currentframe().f_back.f_lineno} ({NAME})"

    NAME = "test_sync_census_names_each_synchronisation_by_its_line"  # noqa: N806
    x = torch.arange(6.0, requires_grad=True)
    expected = []
    with SyncCensus() as census:
        x.nonzero(); expected.append(here())  # noqa: E702
        x.sum().item(); expected.append(here())  # noqa: E702
        x.tolist(); expected.append(here())  # noqa: E702
        x[x > 2]; expected.append(here())  # noqa: E702
        torch.unique(x); expected.append(here())  # noqa: E702
        torch.tensor([5, 6]).repeat_interleave(torch.tensor([1, 2])); expected.append(here())  # noqa: E702
        (x * 2 + 1).repeat_interleave(2).sum().backward()  # no read: sizes known on the host
    assert census.counts == {("read", place): 1 for place in expected}
    assert census.total() == 6 and x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # tolist restored
    with SyncCensus(device_only=True) as census:
        x.nonzero()
        x.tolist()
    assert not census.counts
    to_copy, copy = torch.ops.aten._to_copy.default, torch.ops.aten.copy_.default
    host, device = torch.zeros(2), SimpleNamespace(device=torch.device("cuda"))
    assert _kind(to_copy, (host,), {"device": torch.device("cuda")}, True) == "copy to device"
    assert _kind(to_copy, (host,), {"device": "cuda", "non_blocking": True}, True) == "copy to device (non_blocking)"
    assert _kind(to_copy, (device,), {"device": torch.device("cpu")}, True) == "copy to host"
    assert _kind(copy, (device, host), {}, True) == "copy to device"
    assert _kind(copy, (device, host, True), {}, True) == "copy to device (non_blocking)"
    assert _kind(copy, (host, device), {}, True) == "copy to host"
    assert _kind(to_copy, (host,), {"dtype": torch.float16}, True) is None


def test_trl_step_time_includes_the_backwards_gpu_work(monkeypatch):
    """(b)'s step time is TRL's ``step_time``, taken right after ``Trainer.training_step``, whose
    backward on a GPU is only queued: it counted the backward's launches, not its GPU work. On
    CUDA, ``synchronized_training_step`` makes the Trainer's step synchronise before it returns,
    inside TRL's timing (TRL's ``GRPOTrainer.training_step`` on a bare instance, the Trainer's
    step and the device's synchronisation faked: the synchronisation comes before TRL records the
    step's time); on a CPU it changes nothing; the Trainer's step is restored afterwards."""
    trl = pytest.importorskip("trl")
    import collections

    import transformers

    runs = benchmark_module("ict_cost_runs")
    events: list[str] = []
    trainer = object.__new__(trl.GRPOTrainer)
    trainer._step, trainer._current_train_step_time = 0, 0.0
    trainer.current_gradient_accumulation_steps = 1
    trainer._metrics = {"train": collections.defaultdict(list)}

    def fake_step(self, model, inputs, num_items_in_batch):
        events.append("forward, loss, backward queued")
        return "loss"

    def fake_synchronize(device):
        events.append(f"synchronize {device}, {len(trainer._metrics['train']['step_time'])} step times recorded")

    monkeypatch.setattr(transformers.Trainer, "training_step", fake_step)
    monkeypatch.setattr(runs, "synchronize", fake_synchronize)
    for device, expected in (("cuda", ["forward, loss, backward queued", "synchronize cuda, 0 step times recorded"]),
                             ("cpu", ["forward, loss, backward queued"])):
        events.clear()
        with runs.synchronized_training_step(device):
            assert trl.GRPOTrainer.training_step(trainer, None, None, None) == "loss"
        assert events == expected, device
        assert transformers.Trainer.training_step is fake_step
    assert len(trainer._metrics["train"]["step_time"]) == 2


@pytest.mark.slow  # one tiny TRL run of 2 steps
def test_trl_run_synchronises_each_training_step(tmp_path, monkeypatch):
    """(b)'s TRL run trains inside ``synchronized_training_step``: here a tiny CPU run, the
    context told it is on CUDA and the device's synchronisation faked, synchronises once a step."""
    pytest.importorskip("trl")
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the run imports sync_census beside it
    runs = benchmark_module("ict_cost_runs")
    synchronized = runs.synchronized_training_step
    devices: list[str] = []
    monkeypatch.setattr(runs, "synchronized_training_step", lambda device: synchronized("cuda"))
    monkeypatch.setattr(runs, "synchronize", devices.append)
    model_dir = runs.ensure_model(tmp_path / "model", "tiny", "cpu")
    result = runs.trl_run(str(model_dir), "trl", "full", 2, 2, 2, 4, "cpu", tmp_path)
    assert len(result["step_times"]) == 2
    assert devices.count("cuda") == 2, devices  # the rest: the wall clock's, on the CPU


def test_triton_compiles_times_each_miss_and_restores_the_hooks():
    """ict_cost's TritonCompiles: from Triton's cache-miss hook to its post-compile hook, for each
    miss, calling the hooks it found, which it puts back afterwards (Triton calls both hooks
    with keyword arguments; a GPU calls them for real)."""
    knobs = pytest.importorskip("triton").knobs
    TritonCompiles = benchmark_module("ict_cost_runs").TritonCompiles
    seen = []
    before = (lambda **kw: seen.append("miss"), lambda **kw: seen.append("ready"))
    knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook = before
    try:
        with TritonCompiles() as compiles:
            for _ in range(2):
                knobs.runtime.jit_cache_hook(key="k", fn=None)
                time.sleep(0.01)
                knobs.runtime.jit_post_compile_hook(key="k", fn=None)
        assert compiles.count == 2 and 0.02 <= compiles.seconds < 5
        assert seen == ["miss", "ready"] * 2
        assert (knobs.runtime.jit_cache_hook, knobs.runtime.jit_post_compile_hook) == before
    finally:
        knobs.runtime.jit_cache_hook = knobs.runtime.jit_post_compile_hook = None


def test_device_idle_charges_each_gap_to_the_innermost_host_operator():
    """stats_profile's idle summary on a hand-made trace (microseconds): kernels at [20, 40],
    [35, 45] (one busy span) and [70, 90]; host operators A [0, 100] holding B [10, 30] and C
    [50, 60], and D [105, 110] on another thread. Gaps [0, 20], [45, 70], [90, 110]; the same idle
    time by the innermost phase marked."""
    stats_profile = benchmark_module("stats_profile")
    BETWEEN_OPERATORS = stats_profile.BETWEEN_OPERATORS
    OUTSIDE_PHASES = stats_profile.OUTSIDE_PHASES
    PHASE = stats_profile.PHASE
    device_idle = stats_profile.device_idle

    def span(category, name, start, end, thread=1):
        return {"ph": "X", "cat": category, "name": name, "ts": start, "dur": end - start, "tid": thread}

    events = [span("kernel", "k1", 20, 40), span("gpu_memcpy", "copy", 35, 45), span("kernel", "k3", 70, 90),
              span("cpu_op", "A", 0, 100), span("cpu_op", "B", 10, 30), span("cpu_op", "C", 50, 60),
              span("cpu_op", "D", 105, 110, thread=2), span("cuda_runtime", "cudaLaunchKernel", 12, 14),
              {"ph": "i", "cat": "cpu_op", "name": "instant", "ts": 55}]
    summary = device_idle(events)
    assert summary["gaps"] == 3
    assert summary["window_ms"] == pytest.approx(0.110) and summary["busy_ms"] == pytest.approx(0.045)
    assert summary["idle_ms"] == pytest.approx(0.065)
    assert summary["charged_ms"] == pytest.approx({"A": 0.035, "B": 0.010, "C": 0.010, "D": 0.005,
                                                    BETWEEN_OPERATORS: 0.005})
    assert list(summary["charged_ms"])[0] == "A"
    assert summary["phases_ms"] == {}  # no phase marked
    # the phases: "outer" [0, 100] holding "inner" [40, 60]; [100, 110] is outside both
    marked = events + [span("user_annotation", PHASE + "outer", 0, 100), span("user_annotation", PHASE + "inner", 40, 60),
                       span("user_annotation", "not a phase", 0, 110)]
    assert device_idle(marked)["phases_ms"] == pytest.approx({"outer": 0.040, "inner": 0.015, OUTSIDE_PHASES: 0.010})
    assert device_idle([span("cpu_op", "A", 0, 1)]) is None


def test_idle_after_reads_counts_the_gaps_from_each_copy_to_the_host_to_the_next_long_kernel():
    """stats_profile's idle after each value read back, on a hand-made trace (microseconds): a copy
    to the host [10, 12] in phase "layout", small kernels [30, 32] and [40, 44], a copy to the
    device [50, 51] (busy, but no read) and a 60 us kernel [100, 160]: idle 18 + 8 + 6 + 49 = 81 us.
    A second copy [170, 171] in "backward", a kernel [200, 202] and a third copy [230, 231] before
    any long kernel: 29 + 28 = 57 us, its window closed by that copy; the third has no long kernel
    after it (left out)."""
    stats_profile = benchmark_module("stats_profile")

    def span(category, name, start, end):
        return {"ph": "X", "cat": category, "name": name, "ts": start, "dur": end - start}

    events = [span("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 10, 12), span("kernel", "a", 30, 32),
              span("kernel", "b", 40, 44), span("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 50, 51),
              span("kernel", "product", 100, 160),
              span("gpu_memcpy", "Memcpy DtoH (Device -> Pinned)", 170, 171), span("kernel", "c", 200, 202),
              span("gpu_memcpy", "Memcpy DtoH (Device -> Pageable)", 230, 231),
              span("user_annotation", stats_profile.PHASE + "layout", 0, 100),
              span("user_annotation", stats_profile.PHASE + "backward", 165, 300)]
    reads = stats_profile.idle_after_reads(events)
    assert [name for name, _ in reads] == ["layout", "backward"]
    assert [value for _, value in reads] == pytest.approx([0.081, 0.057])


@pytest.mark.slow  # ~9 s on 2 cores
def test_stats_profile_runs_tiny_and_marks_ict_phases(tmp_path):
    """benchmarks/stats_profile.py at a tiny shape on the CPU: the three profiles and their
    synchronisation censuses, and ICT's trace holds one range per phase (which a GPU run charges the
    device's idle time to); the phases' wrappers are gone afterwards."""
    import gzip

    from ict.core.stats import tiles

    before = {name: getattr(tiles._Run, name) for name in ("__init__", "passes", "scores")}
    env = environment_with_root()
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stats_profile.py"), "--rows", "3", "--length", "8",
                             "--vocab", "1000", "--width", "16", "--trace-dir", str(tmp_path)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("synchronisations in ") == 3
    assert result.stdout.count("operators launching device work: ") == 3  # SyncCensus(launches=True)
    events = json.loads(gzip.open(tmp_path / "ict.json.gz", "rt").read())["traceEvents"]
    phases = sorted(e["name"] for e in events if e.get("cat") == "user_annotation")
    assert phases == sorted(f"phase: {name}" for name in (
        "statistics", "row layout", "statistics and score passes", "scores from their sums", "selection", "loss",
        "backward"))
    marking = benchmark_module("stats_profile").phases
    with marking():
        assert tiles._Run.passes is not before["passes"]
    assert {name: getattr(tiles._Run, name) for name in before} == before


def test_stats_profile_profiles_the_paths_asked_in_their_order(tmp_path):
    """--paths grpo,trl,grpo: our GRPO call, TRL's head, ours again, in that order (each titled),
    the repeated one's trace beside the first's; a path it does not know is a one-line error."""
    command = [sys.executable, str(ROOT / "benchmarks" / "stats_profile.py"), "--rows", "3", "--length", "8",
               "--vocab", "1000", "--width", "16", "--trace-dir", str(tmp_path)]
    result = subprocess.run([*command, "--paths", "grpo,trl,grpo"], capture_output=True, text=True,
                            env=environment_with_root(), timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    titles = [line for line in result.stdout.splitlines() if line.startswith("## ")]
    assert titles == ["## ours, GRPO from hidden states", "## TRL 1.16 fused head", "## ours, GRPO from hidden states"]
    assert {path.name for path in tmp_path.iterdir()} == {"grpo.json.gz", "trl.json.gz", "grpo-2.json.gz"}
    wrong = subprocess.run([*command, "--paths", "grpo,dapo"], capture_output=True, text=True,
                           env=environment_with_root(), timeout=60)
    assert wrong.returncode == 2 and wrong.stderr.count("\n") == 1 and "--paths" in wrong.stderr


def test_stats_speed_times_the_step_parts_side_by_side_with_a_baseline():
    """benchmarks/stats_speed.py --step at a tiny shape: GRPO's and ICT's forward + backward from
    the hidden states, alone (ICT against GRPO) and against a baseline checkout (here this one);
    from the logits against the baseline."""
    command = [sys.executable, str(BENCHMARKS / "stats_speed.py"), "--step", "--rows", "16", "--length", "8",
               "--vocab", "1000", "--width", "32", "--rounds", "2"]
    alone = subprocess.run(command, capture_output=True, text=True, env=environment_with_root(), timeout=600)
    assert alone.returncode == 0, alone.stderr[-3000:]
    (grpo,) = table_rows(alone.stdout, ("hidden, forward + backward", "grpo"))
    (ict,) = table_rows(alone.stdout, ("hidden, forward + backward", "ict"))
    assert grpo[3] == "1.00" and finite(grpo[2]) and finite(ict[2]) and finite(ict[3])
    assert all(row[4].isdigit() for row in (grpo, ict))  # median minor page faults
    paired = subprocess.run([*command, "--baseline", str(ROOT)], capture_output=True, text=True,
                            env=environment_with_root(), timeout=600)
    assert paired.returncode == 0, paired.stderr[-3000:]
    for method in ("grpo", "ict"):
        (row,) = table_rows(paired.stdout, ("hidden, forward + backward", method))
        assert all(finite(cell) for cell in row[2:5]), row
    from_logits = subprocess.run([*command, "--rounds", "1", "--source", "logits", "--baseline", str(ROOT)],
                                 capture_output=True, text=True, env=environment_with_root(), timeout=600)
    assert from_logits.returncode == 0, from_logits.stderr[-3000:]
    assert "hidden, forward" not in from_logits.stdout
    for method in ("grpo", "ict"):
        (row,) = table_rows(from_logits.stdout, ("logits, forward + backward", method))
        assert all(finite(cell) for cell in row[2:5]) and row[5].isdigit() and row[6].isdigit(), row


def test_stats_agreement_runs_tiny_and_agrees(tmp_path):
    """benchmarks/stats_agreement.py at a small shape on the CPU: the torch tiles within 1e-5 of
    its float64 computation and ICT's mask equal to float64's apart from ties."""
    report_path = tmp_path / "agreement.json"
    env = environment_with_root()
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "stats_agreement.py"), "--vocab", "211",
                             "--length", "12", "--group", "4", "--json", str(report_path)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(report_path.read_text())
    assert report["shape"] == [8, 12, 211]
    assert max(report["max_abs"]["cpu/torch - float64"].values()) < 1e-5
    assert {"group_mean:kl", "group_mean_absorbing:kl", "group_mean_loo:kl", "group_mean_loo_absorbing:kl"} <= set(
        report["max_abs"]["cpu/torch - float64"])
    assert report["masks"]["cpu/torch"]["of them not decided by a tie"] == 0
    assert "| cpu/torch - float64 |" in result.stdout


def _agreement_missed(agreement, monkeypatch, capsys) -> str:
    """stats_agreement.py's main at a small shape (V = 53, 6 positions, one group of 4): it must
    exit with its missed-target status; returns what it printed."""
    monkeypatch.setattr(sys, "argv", ["stats_agreement.py", "--vocab", "53", "--length", "6", "--group", "4",
                                      "--prompts", "1"])
    with pytest.raises(SystemExit) as stopped:
        agreement.main()
    assert stopped.value.code == agreement.MISSED
    return capsys.readouterr().out


def test_stats_agreement_misses_its_target_when_a_path_gives_nan(monkeypatch, capsys):
    """A NaN statistic on the path scored is a miss (exit 3), not skipped by ``max``: before, a NaN
    after the first figure lost every comparison, the target read 'met' and the script exited 0."""
    agreement = benchmark_module("stats_agreement")
    real = agreement.token_statistics

    def poisoned(*args, **kwargs):
        stats = real(*args, **kwargs)
        stats.entropy[1, 0] = math.nan  # row 1, position 0: a response token
        return stats

    monkeypatch.setattr(agreement, "token_statistics", poisoned)
    assert "NOT met (largest difference nan: entropy" in _agreement_missed(agreement, monkeypatch, capsys)


def test_stats_agreement_misses_its_target_when_a_mask_differs_untied(monkeypatch, capsys):
    """Every value within the target but one token of a path's ICT mask not float64's, at no tie:
    the target is missed (exit 3), and the mask table says 1 token, 1 untied."""
    agreement = benchmark_module("stats_agreement")
    real, calls = agreement.ict_mask, []

    def flipped(stats, mask, group_ids):
        selection = real(stats, mask, group_ids)
        calls.append(None)
        if len(calls) > 1:  # float64's mask is the first: each path's after it
            selection.mask[0, 0] = ~selection.mask[0, 0]
            selection.tie_decided[0, 0] = False
        return selection

    monkeypatch.setattr(agreement, "ict_mask", flipped)
    printed = _agreement_missed(agreement, monkeypatch, capsys)
    assert table_rows(printed, ("cpu/torch",))[-1][1:3] == ["1", "1"]
    assert "NOT met" in printed and "1 mask tokens differ untied" in printed


def test_head_step_gives_grpo_and_only_grpo_the_positions_its_loss_differentiates(monkeypatch):
    """GRPO's statistics get the gradient mask its trainer step gives (response positions of rows
    with a nonzero advantage: row 0's advantage 0 -> none of its positions), ICT's none."""
    import ict.core.stats as stats_module

    head_step = benchmark_module("head_step")
    batch = head_step.head_batch(4, 3, 8, 20, group_size=4)
    batch.advantages[0] = 0.0
    real, given = stats_module.token_statistics_from_hidden, []

    def spy(*args, **kwargs):
        given.append(kwargs.get("gradient_mask"))
        return real(*args, **kwargs)

    monkeypatch.setattr(stats_module, "token_statistics_from_hidden", spy)
    head_step.ours(batch, "grpo")
    head_step.ours(batch, "ict")
    expected = torch.ones(4, 3, dtype=torch.bool)
    expected[0] = False
    assert torch.equal(given[0], expected) and given[1] is None


def test_stats_agreement_largest_difference_counts_nan_as_the_largest():
    largest = benchmark_module("stats_agreement").largest_difference
    assert largest({"a": {"x": 1e-7, "y": 3e-6}, "b": {"x": 2e-6}}) == (3e-6, "a", "y")
    value, pair, name = largest({"a": {"x": 1e-7, "y": math.nan}, "b": {"x": 2e-6}})
    assert math.isnan(value) and (pair, name) == ("a", "y")


def test_kernel_sass_compiles_the_kernels_for_an_h100_here(tmp_path):
    """benchmarks/kernel_sass.py compiles the Triton kernels for sm_90 without a GPU and counts their
    loops' instructions; the group kernel's logarithms are special-function instructions (an
    exponential and two logarithms an element with the leave-one-out mean), not libdevice's
    ~25-instruction logf."""
    pytest.importorskip("triton")
    report_path = tmp_path / "sass.json"
    env = {key: value for key, value in environment_with_root().items() if key != "TRITON_INTERPRET"}
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernel_sass.py"), "--json", str(report_path)],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    ours = json.loads(report_path.read_text())["ours"]
    for label in ("ours: statistics pass", "ours: group kernel, group_mean_absorbing",
                  "ours: group kernel, leave-one-out", "ours: group kernel, group_mean_absorbing, JS + KL",
                  "ours: logit gradient (log-probs)"):
        assert f"| {label} |" in result.stdout
        assert 1 < ours[label]["per_element"] < 200 and ours[label]["registers"] <= 255, (label, ours[label])
        assert ours[label]["spill_bytes"] == 0, (label, ours[label])  # no register spilled to local memory
    assert ours["ours: group kernel, leave-one-out"]["special_per_element"] == pytest.approx(3.0, abs=0.1)
    bad = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "kernel_sass.py"), "--baseline", str(tmp_path)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert bad.returncode == 2 and "holds no ict/core/stats/triton_tiles.py" in bad.stderr


def test_fast_log_bound_is_within_the_agreement_target(tmp_path, capsys):
    """benchmarks/fast_log_bound.py: at Qwen's vocabulary the group kernel's lg2.approx moves no
    JS or KL score by more than 1e-5 nats; at uniform rows its bound is the closed form
    ln 2 * 2^-22 * log2 V * (1.5 for JS, 1 for KL) against the plain group mean."""
    fast_log_bound = benchmark_module("fast_log_bound")
    vocab = 151_936
    assert fast_log_bound.main(["--scales", "0.1,4", "--json", str(tmp_path / "bound.json")]) == 0
    report = json.loads((tmp_path / "bound.json").read_text())
    assert report["met"] and 1e-7 < report["largest"] <= 1e-5
    assert set(report["worst"]["group_mean_absorbing"]) == {"js", "kl"}
    assert set(report["worst"]["group_mean_loo"]) == {"js"}  # no leave-one-out KL kernel
    assert fast_log_bound.main(["--scales", "0", "--json", str(tmp_path / "uniform.json")]) == 0
    uniform = json.loads((tmp_path / "uniform.json").read_text())["worst"]["group_mean"]
    unit = math.log(2) * 2.0 ** -22 * math.log2(vocab)
    assert uniform["js"]["bound"] == pytest.approx(1.5 * unit, rel=1e-9)
    assert uniform["kl"]["bound"] == pytest.approx(unit, rel=1e-9)
    assert uniform["js"]["score"] == pytest.approx(0.0, abs=1e-12)
    assert fast_log_bound.main(["--group", "4", "--vocab", "1000", "--scales", "0.1", "--json",
                                str(tmp_path / "small.json")]) == 0
    assert "| group_mean_loo | js | 0.1 |" in capsys.readouterr().out


def test_head_step_losses_are_the_ones_the_benchmarks_name():
    """benchmarks/head_step.py, the step ict_cost.py (a), stats_profile.py and stats_speed.py time:
    GRPO's loss from the hidden states and from the logits, and TRL's head's, each equal
    ``sum(log_softmax(h W^T)[id] * advantage)`` computed in float64, and so do their gradients to
    the hidden states; ICT's loss is the same from both sources, and its gradient reaches only the
    rows its selection kept (about a tenth)."""
    pytest.importorskip("trl")
    head_step = benchmark_module("head_step")
    batch = head_step.head_batch(8, 6, 16, 300, group_size=4)
    hidden, weight = batch.hidden.detach().double().requires_grad_(), batch.weight.detach().double()
    log_probs = torch.log_softmax(hidden @ weight.T, dim=-1).gather(-1, batch.token_ids.unsqueeze(-1)).squeeze(-1)
    expected = (log_probs * batch.advantages.double()[:, None]).sum()
    expected.backward()
    for name, loss_of in (("grpo from hidden", lambda: head_step.ours(batch, "grpo")),
                          ("grpo from logits", lambda: head_step.ours(batch, "grpo", "logits")),
                          ("trl", lambda: head_step.trl_head(batch))):
        batch.clear_grads()
        loss = loss_of()
        loss.backward()
        assert loss.item() == pytest.approx(expected.item(), rel=1e-5), name
        torch.testing.assert_close(batch.hidden.grad.double(), hidden.grad, rtol=1e-4, atol=1e-6, msg=name)
    losses, reached = [], []
    for source in ("hidden", "logits"):
        batch.clear_grads()
        loss = head_step.ours(batch, "ict", source)
        loss.backward()
        losses.append(loss.item())
        reached.append(batch.hidden.grad.abs().sum(-1) > 0)
    assert losses[0] == pytest.approx(losses[1], rel=1e-5, abs=1e-7)
    assert torch.equal(reached[0], reached[1])
    assert 0 < reached[0].sum() <= 0.2 * reached[0].numel()


@pytest.mark.parametrize(("options", "message"), [
    (["--rounds", "0"], "--rounds: at least 1, not 0"),
    (["--baseline", "/nonexistent/checkout"], "--baseline: /nonexistent/checkout is no checkout of ict")])
def test_stats_speed_rejects_bad_options_in_one_line(options, message, monkeypatch, capsys):
    """--rounds 0 ended in a StatisticsError traceback (no median of nothing), a --baseline that
    is no checkout in a FileNotFoundError (or the child's failure): now argparse's one-line error,
    exit 2, before anything is timed."""
    assert message in argparse_refusal("stats_speed", options, monkeypatch, capsys)


def test_stats_memory_prints_no_ratio_when_the_logits_run_added_no_memory(monkeypatch, capsys):
    """stats_memory.py's hidden/logits ratio divided by the logits run's extra memory, which is 0
    when its peak RSS (a high-water mark) stayed under the one before it: a ZeroDivisionError. Now
    the row says n/a; a nonzero extra still gives the ratio (3 MiB / 4 MiB = 0.750)."""
    stats_memory = benchmark_module("stats_memory")
    extra = {"hidden": 3 * 2**20, "logits": 0}

    def spawn(variant, vocab, positions, width, reference):
        return {"peak_bytes": 2**30, "extra_bytes": extra[variant], "seconds": 0.5}

    monkeypatch.setattr(stats_memory, "spawn", spawn)
    monkeypatch.setattr(sys, "argv", ["stats_memory.py", "--vocabs", "1000"])
    stats_memory.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1,000 | hidden")]
    assert len(rows) == 1 and rows[0].endswith("| n/a (logits extra 0) |")
    extra["logits"] = 4 * 2**20
    stats_memory.main()
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 1,000 | hidden")]
    assert rows[0].endswith("| 0.750 |")


def test_generation_throughput_num_return_sequences_gives_g_completions_a_prompt_cut_at_eos(tiny_tokenizer):
    """benchmarks/generation_throughput.py's `num_return_sequences` variant: G completions for
    each prompt, each at most the cap and cut after its first EOS (id 1). It passed a pad id that
    `ict.models.rollout.truncate_at_eos` no longer takes, so its smoke test (`--steps 1 --tiny`)
    stopped in the warm-up with a TypeError."""
    from conftest import build_tiny_model

    from ict.training.config import TrainConfig

    module = benchmark_module("generation_throughput")
    model = build_tiny_model(len(tiny_tokenizer)).eval()
    prompts = ["what is 1 + 2 ?", "what is 3 + 4 ?", "what is 5 + 0 ?"]
    completions = module.num_return_sequences_rollout(model, tiny_tokenizer, prompts, 4, TrainConfig(temperature=0.7),
                                                      seed=0, max_new_tokens=16)
    assert [len(group) for group in completions] == [4, 4, 4]
    rows = [row for group in completions for row in group]
    assert all(1 <= len(row) <= 16 and 1 not in row[:-1] for row in rows), rows
    assert any(len(row) < 16 for row in rows) and all(row[-1] == 1 for row in rows if len(row) < 16), rows


def test_generation_throughput_samples_the_step_docs_benchmarks_names():
    """benchmarks/generation_throughput.py generates the step docs/benchmarks.md states (prompts x
    samples, new tokens, temperature): the offline default's, whose temperature 0.7 is not
    `ict train`'s default 1.0. It built `TrainConfig`'s defaults and sampled at 1.0 (its own
    header said "temperature 1.0" under a docstring and a table measured at 0.7)."""
    import re

    config = benchmark_module("generation_throughput").step_config()
    flat = " ".join((ROOT / "docs" / "benchmarks.md").read_text().split())
    stated = re.search(r"Hugging Face `generate` on the trainer's step \((\d+) prompts x (\d+) samples, "
                       r"<= (\d+) new tokens, temperature ([\d.]+), the same seed\)", flat)
    assert stated, "docs/benchmarks.md's rollout throughput sentence changed: update this test"
    assert (config.prompts_per_step, config.num_generations, config.max_new_tokens, config.temperature) == (
        int(stated[1]), int(stated[2]), int(stated[3]), float(stated[4]))
    assert config.dataset == "chain_sum" and config.dataset_config == {
        "min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}

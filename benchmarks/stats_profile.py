"""Where the time of ICT's statistics goes: the torch profiler over one forward + backward of
TRL 1.16's fused head and of ours from hidden states (GRPO: statistics and loss; ICT: statistics,
selection and loss; the steps of ``benchmarks/head_step.py``), at the statistics table's shape of
benchmarks/ict_cost.py (2 x 8 x 1,024 tokens, d = 896, V = 151,936, bf16 autocast on a GPU;
``--length`` shortens it). Prints each one's kernels by their own device time (CPU time where
there is no GPU)::

    PYTHONPATH=$PWD python benchmarks/stats_profile.py --rows 20

On a GPU it also prints where the device sat idle within each call: the gaps between its
kernels, copies and fills, each instant of a gap charged to the innermost operator the host was
running then (any thread), or to Python between operators; and the same idle time by the phase of
the call the host was in (``record_function`` ranges named ``phase: ...``): ICT's row layout,
statistics and score passes, scores, selection, loss and backward. Idle time charged to a phase is that
phase's host code on the critical path. After each value read back (a copy to the host, where the
host waited), the idle time until the device's next kernel of 50 us or more (or the next read):
the host's work between a sync and the refilled queue. Then, on any device, each call's
synchronisations by the line that caused them (``benchmarks/sync_census.py``: values read back,
and on a GPU the copies between host and device, which a CPU cannot show), and how many of its
operators launch device work (all but views). ``--trace-dir DIR``
writes each profile's Chrome trace there (``trl.json.gz``, ``grpo.json.gz``, ``ict.json.gz``);
``--analyze TRACE...`` prints that summary for traces written before, without profiling.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gzip
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))
import head_step  # noqa: E402
from sync_census import census_of, print_census  # noqa: E402

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")  # what keeps the device busy in a trace
BETWEEN_OPERATORS = "(Python between operators)"
PHASE = "phase: "  # the record_function ranges of phases (see phase)
OUTSIDE_PHASES = "(outside the phases)"
PATH_NAMES = {"trl": "TRL 1.16 fused head", "grpo": "ours, GRPO from hidden states",
              "ict": "ours, ICT from hidden states"}  # the calls profiled (--paths)


def innermost(spans: list[tuple[float, float, str]], instant: float, default: str) -> str:
    """The name of the shortest span ``(start, end, name)`` holding ``instant``, else ``default``."""
    covering = [span for span in spans if span[0] <= instant < span[1]]
    return min(covering, key=lambda span: span[1] - span[0])[2] if covering else default


def phase(name: str) -> record_function:
    """The profiler range of one phase of a call (``phase: <name>``, read by :func:`device_idle`)."""
    return record_function(PHASE + name)


@contextlib.contextmanager
def phases() -> Iterator[None]:
    """Within it, the statistics mark their row layout, their statistics and score passes and the
    scores from their sums as phases (the methods of ``ict.core.stats.tiles._Run`` wrapped, and
    restored after)."""
    from ict.core.stats import tiles

    wrapped = {"__init__": "row layout", "passes": "statistics and score passes",
               "scores": "scores from their sums"}
    saved = {name: getattr(tiles._Run, name) for name in wrapped}

    def marked(method: Callable[..., Any], label: str) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            with phase(label):
                return method(*args, **kwargs)
        return run

    for name, label in wrapped.items():
        setattr(tiles._Run, name, marked(saved[name], label))
    try:
        yield
    finally:
        for name, method in saved.items():
            setattr(tiles._Run, name, method)


def device_idle(events: list[dict]) -> dict | None:
    """Chrome-trace ``events`` (microseconds) -> the call's window (the first host operator's start
    to the last event's end), the device's busy and idle time in it (ms), the number of gaps, and
    the idle time charged to each innermost host operator (``cpu_op``) running during it, and to
    each innermost phase (``user_annotation`` ``phase: ...``), largest first; None without device
    or host events."""
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    device = sorted((e["ts"], e["ts"] + e["dur"]) for e in spans if e.get("cat") in DEVICE_CATEGORIES)
    host = sorted((e["ts"], e["ts"] + e["dur"], e["name"]) for e in spans if e.get("cat") == "cpu_op")
    marked = [(e["ts"], e["ts"] + e["dur"], e["name"].removeprefix(PHASE)) for e in spans
              if e.get("cat") == "user_annotation" and e["name"].startswith(PHASE)]
    if not device or not host:
        return None
    start, end = host[0][0], max(device[-1][1], max(op[1] for op in host))
    busy: list[list[float]] = []
    for first, last in device:
        if busy and first <= busy[-1][1]:
            busy[-1][1] = max(busy[-1][1], last)
        else:
            busy.append([first, last])
    gaps, cursor = [], start
    for first, last in busy:
        if first > cursor:
            gaps.append((cursor, first))
        cursor = max(cursor, last)
    if end > cursor:
        gaps.append((cursor, end))
    charged: collections.Counter[str] = collections.Counter()
    by_phase: collections.Counter[str] = collections.Counter()
    for gap_start, gap_end in gaps:
        inside = [op for op in host if op[0] < gap_end and op[1] > gap_start]
        phases_inside = [span for span in marked if span[0] < gap_end and span[1] > gap_start]
        cuts = sorted({gap_start, gap_end, *(t for span in inside + phases_inside for t in span[:2]
                                             if gap_start < t < gap_end)})
        for left, right in zip(cuts, cuts[1:]):
            middle = (left + right) / 2
            charged[innermost(inside, middle, BETWEEN_OPERATORS)] += right - left
            by_phase[innermost(phases_inside, middle, OUTSIDE_PHASES)] += right - left
    idle = sum(last - first for first, last in gaps)
    return {"window_ms": (end - start) / 1e3, "busy_ms": (end - start - idle) / 1e3, "idle_ms": idle / 1e3,
            "gaps": len(gaps), "charged_ms": {name: value / 1e3 for name, value in charged.most_common()},
            "phases_ms": {name: value / 1e3 for name, value in by_phase.most_common()} if marked else {}}


def idle_after_reads(events: list[dict], long_us: float = 50.0) -> list[tuple[str, float]]:
    """For each copy from device to host (``Memcpy DtoH``: a value read back, where the host waits),
    the device's idle time (ms) from the copy's end to the start of the next kernel of at least
    ``long_us`` microseconds (the queue refilled: e.g. the next matrix product) or of the next such
    copy, whichever comes first (so no idle time is counted twice), with the innermost
    phase the host was in at the copy's end; in the order of the copies. The host's work between a
    sync and the next long kernel is on the critical path: the device has nothing else queued."""
    spans = [e for e in events if e.get("ph") == "X" and "dur" in e]
    device = sorted((e["ts"], e["ts"] + e["dur"], e.get("cat"), e.get("name", "")) for e in spans
                    if e.get("cat") in DEVICE_CATEGORIES)
    marked = [(e["ts"], e["ts"] + e["dur"], e["name"].removeprefix(PHASE)) for e in spans
              if e.get("cat") == "user_annotation" and e["name"].startswith(PHASE)]
    found = []
    for index, (_, copy_end, category, name) in enumerate(device):
        if category != "gpu_memcpy" or "DtoH" not in name:
            continue
        later = device[index + 1:]
        stop = next((first for first, last, kind, label in later if (kind == "kernel" and last - first >= long_us)
                     or (kind == "gpu_memcpy" and "DtoH" in label)), None)  # or the next read's copy
        if stop is None:
            continue
        idle, cursor = 0.0, copy_end
        for first, last, _, _ in later:
            if first >= stop:
                break
            idle += max(0.0, first - cursor)
            cursor = max(cursor, last)
        idle += max(0.0, stop - cursor)
        found.append((innermost(marked, copy_end, OUTSIDE_PHASES), idle / 1e3))
    return found


def print_device_idle(events: list[dict], rows: int) -> None:
    summary = device_idle(events)
    if summary is None:
        print("(no device events: no idle time to show)", flush=True)
        return
    print(f"\ndevice idle within the call: {summary['idle_ms']:.2f} ms of {summary['window_ms']:.2f} ms "
          f"(busy {summary['busy_ms']:.2f} ms), {summary['gaps']} gaps; the host meanwhile (innermost "
          f"operator):\n\n| operator | idle ms | share of idle |\n|---|---|---|")
    for name, value in list(summary["charged_ms"].items())[:rows]:
        print(f"| {name[:80]} | {value:.3f} | {value / max(summary['idle_ms'], 1e-12):.1%} |")
    if summary["phases_ms"]:
        print("\nthe same idle time by the phase the host was in:\n\n| phase | idle ms | share of idle |\n|---|---|---|")
        for name, value in summary["phases_ms"].items():
            print(f"| {name} | {value:.3f} | {value / max(summary['idle_ms'], 1e-12):.1%} |")
    reads = idle_after_reads(events)
    if reads:
        print("\nafter each value read back (a copy to the host), the device's idle time until its next kernel "
              "of 50 us or more (or the next read):\n\n| phase at the read | idle ms |\n|---|---|")
        for name, value in reads:
            print(f"| {name} | {value:.3f} |")
    print(flush=True)


def read_trace(path: str) -> list[dict]:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as handle:
        trace = json.load(handle)
    return trace["traceEvents"] if isinstance(trace, dict) else trace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--width", type=int, default=896)
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--rows", type=int, default=15, help="kernels (and idle operators) printed per profile")
    parser.add_argument("--trace-dir", type=Path, help="write each profile's Chrome trace (.json.gz) here")
    parser.add_argument("--analyze", nargs="+", metavar="TRACE", help="only print the idle summary of these traces")
    parser.add_argument("--paths", default="trl,grpo,ict", help="which calls to profile, in this order "
                        "(trl, grpo, ict; a path may repeat: trl,grpo,trl asks whether the order matters)")
    args = parser.parse_args()
    paths = args.paths.split(",")
    if not paths or not set(paths) <= set(PATH_NAMES):
        parser.exit(2, f"stats_profile.py: --paths takes {', '.join(PATH_NAMES)} (comma-separated), got {args.paths!r}\n")
    if args.analyze:
        missing = [path for path in args.analyze if not Path(path).is_file()]
        if missing:
            parser.exit(2, f"stats_profile.py: no trace at {', '.join(missing)}\n")
        for path in args.analyze:
            print(f"\n## {path}")
            print_device_idle(read_trace(path), args.rows)
        return
    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    batch = head_step.head_batch(16, args.length, args.width, args.vocab, device)

    losses = {"trl": lambda: head_step.trl_head(batch, phase=phase),
              "grpo": lambda: head_step.ours(batch, "grpo", phase=phase),
              "ict": lambda: head_step.ours(batch, "ict", phase=phase)}

    def step(slug: str) -> Callable[[], None]:
        """One forward + backward of the profile ``slug``, its backward marked as a phase."""
        def run() -> None:
            loss = losses[slug]()
            with phase("backward"):
                loss.backward()
        return run

    autocast = torch.autocast("cuda", dtype=torch.bfloat16) if cuda else contextlib.nullcontext()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    if args.trace_dir:
        args.trace_dir.mkdir(parents=True, exist_ok=True)
    for index, slug in enumerate(paths):
        name, function = PATH_NAMES[slug], step(slug)
        with autocast:
            function()  # warm-up: Triton compiles, the allocator fills
        if cuda:
            torch.cuda.synchronize()
        with profile(activities=activities) as profiler, autocast, phases():
            function()
            if cuda:
                torch.cuda.synchronize()
        print(f"\n## {name}\n", flush=True)
        print(profiler.key_averages().table(sort_by=sort, row_limit=args.rows), flush=True)
        if cuda or args.trace_dir:
            repeated = slug in paths[:index]  # a second profile of one path keeps the first's trace
            trace = str((args.trace_dir or Path("/tmp")) / f"{slug}{f'-{index}' if repeated else ''}.json.gz")
            profiler.export_chrome_trace(trace)
            if cuda:
                print_device_idle(read_trace(trace), args.rows)
        batch.clear_grads()
        with autocast:
            census, cuda_warnings = census_of(function, cuda)
        print_census(name, census, cuda_warnings)
        batch.clear_grads()


if __name__ == "__main__":
    main()

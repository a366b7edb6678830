"""The GPU's clock and power during each row of ``benchmarks/ict_cost.py``'s section (a).

Joins the samples ``nvidia-smi`` wrote while the run lasted (``benchmarks/gpu_env.sh``'s
``log_clocks``: one line per 20 ms, ``timestamp (UTC), SM clock (MHz), power (W), temperature (C)``)
with each row's timed calls (each call's start, ``origin_epoch`` + ``started`` seconds, and its
``seconds``), and prints, per model and row: the timed calls, their median seconds, the samples
taken inside them, and those samples' mean SM clock, power and temperature. A row slower than TRL's
head at a lower clock ran on a slower chip; at the same clock, it did more or slower work::

    python benchmarks/gpu_clocks.py tiles_4096x32768.json gpu_clocks.csv

A sample is a row's when its timestamp falls inside one of that row's calls. NVML's power reading
is an average over its own window (up to a second), so power is a blurred figure; the SM clock is
read at the instant.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

Sample = tuple[float, float, float, float]  # epoch seconds, SM MHz, W, C


def read_samples(path: Path) -> list[Sample]:
    """``nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu --format=csv,noheader,
    nounits`` lines (timestamps ``YYYY/MM/DD HH:MM:SS.fff`` in UTC) -> samples in time order; lines
    that are not samples (nvidia-smi's messages, a line cut by the end of the run) are skipped."""
    samples = []
    for line in path.read_text().splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != 4:
            continue
        try:
            when = datetime.strptime(cells[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)
            samples.append((when.timestamp(), float(cells[1]), float(cells[2]), float(cells[3])))
        except ValueError:
            continue
    return sorted(samples)


def row_clocks(result: dict[str, Any], samples: list[Sample]) -> dict[str, dict[str, Any]]:
    """For each row of one model's (a) result: its calls, median seconds and the mean SM clock (MHz),
    power (W) and temperature (C) of the samples inside its calls (None without samples)."""
    origin = result["origin_epoch"]
    table = {}
    for name, row in result["rows"].items():
        spans = [(origin + start, origin + start + seconds)
                 for start, seconds in zip(row.get("started", []), row["seconds"])]
        inside = [sample for sample in samples if any(start <= sample[0] <= end for start, end in spans)]
        means = ([statistics.fmean(sample[i] for sample in inside) for i in (1, 2, 3)] if inside
                 else [None, None, None])
        table[name] = {"label": row["label"], "calls": len(spans),
                       "median": statistics.median(row["seconds"]) if row["seconds"] else None,
                       "samples": len(inside), "sm_mhz": means[0], "watts": means[1], "celsius": means[2]}
    return table


def cell(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("cost", type=Path, help="ict_cost.py's --json file (with section a)")
    parser.add_argument("clocks", type=Path, help="the clock log (gpu_env.sh's log_clocks)")
    args = parser.parse_args()
    for path in (args.cost, args.clocks):
        if not path.is_file():
            parser.exit(2, f"gpu_clocks.py: no file {path}\n")
    try:
        section = json.loads(args.cost.read_text())["a"]
        if not all(isinstance(result, dict) and isinstance(result.get("rows", {}), dict)
                   for result in section.values()):
            raise ValueError
    except (ValueError, KeyError, TypeError, AttributeError):
        parser.exit(2, f"gpu_clocks.py: {args.cost} is not ict_cost.py's JSON with section (a)\n")
    samples = read_samples(args.clocks)
    if not samples:
        parser.exit(2, f"gpu_clocks.py: no samples in {args.clocks}\n")
    print(f"{len(samples)} samples, {datetime.fromtimestamp(samples[0][0], timezone.utc):%H:%M:%S} to "
          f"{datetime.fromtimestamp(samples[-1][0], timezone.utc):%H:%M:%S} UTC")
    for model, result in section.items():
        if "origin_epoch" not in result or "rows" not in result:
            print(f"\n{model}: no call times in this result (ict_cost.py before they were recorded)")
            continue
        print(f"\n### {model}\n\n| path | timed calls | median seconds | samples in its calls | SM clock (MHz) "
              "| power (W) | temperature (C) |\n|---|---|---|---|---|---|---|")
        for row in row_clocks(result, samples).values():
            print(f"| {row['label']} | {row['calls']} | {cell(row['median'], 4)} | {row['samples']} | "
                  f"{cell(row['sm_mhz'], 0)} | {cell(row['watts'], 0)} | {cell(row['celsius'], 1)} |")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""`make demo` now against an earlier commit's, on this machine, one after the other.

    python benchmarks/demo_time.py [--old f4e3c6a] [--skip-old] [--threads 2]

Each side runs `ict train --config configs/demo.yaml` of its own checkout (the earlier commit from
a temporary `git worktree`, imported through PYTHONPATH with this environment's packages), alone
on the machine, and reports its wall time (model load, held-out evaluations before and after, and
training), its steps and the held-out accuracy before and after from the run's eval.json. Prints
the CPU model, the core count and the ratio of the two times. Nothing else should run meanwhile:
the two runs share the machine one after the other, not at once.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def run_demo(checkout: Path, run_dir: Path, threads: int) -> dict:
    """Time one demo run of `checkout` (its own configs/demo.yaml and ict package)."""
    environment = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": str(threads)}
    command = [sys.executable, "-m", "ict", "train", "--config", str(checkout / "configs" / "demo.yaml"),
               "--run-dir", str(run_dir), "--no-progress"]
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=checkout, env=environment, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if completed.returncode != 0:
        raise SystemExit(f"demo of {checkout} failed ({completed.returncode}): {completed.stderr[-2000:]}")
    evaluation = json.loads((run_dir / "eval.json").read_text())
    steps = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {"seconds": seconds, "steps": len(steps),
            "step_seconds": [round(step["step_seconds"], 1) for step in steps],
            "before": evaluation.get("before", {}).get("accuracy"),
            "after": evaluation.get("after", {}).get("accuracy"),
            "output_tail": completed.stdout[-3000:] + completed.stderr[-3000:]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", default="f4e3c6a", help="the earlier commit")
    parser.add_argument("--skip-old", action="store_true", help="time only the current demo")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--output", type=Path, default=None, help="write the figures as JSON here")
    args = parser.parse_args()
    results = {"cpu": cpu_model(), "cores": os.cpu_count(), "threads": args.threads}
    with tempfile.TemporaryDirectory() as scratch:
        scratch_dir = Path(scratch)
        results["current"] = run_demo(ROOT, scratch_dir / "current", args.threads)
        if not args.skip_old:
            worktree = scratch_dir / "old"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.old],
                           check=True, capture_output=True)
            try:
                results["old"] = run_demo(worktree, scratch_dir / "old-run", args.threads)
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)],
                               capture_output=True)
    print(f"CPU: {results['cpu']}, {results['cores']} cores, {args.threads} threads")
    for name in ("current", "old"):
        if name in results:
            side = results[name]
            label = "current" if name == "current" else args.old
            print(f"{label:>10}: {side['seconds'] / 60:.1f} min, {side['steps']} steps, held-out accuracy "
                  f"{side['before']} -> {side['after']}, step seconds {side['step_seconds']}")
    if "old" in results:
        print(f"time ratio current / {args.old}: {results['current']['seconds'] / results['old']['seconds']:.2f}")
    if args.output:
        args.output.write_text(json.dumps({key: value for key, value in results.items()}, indent=1))


if __name__ == "__main__":
    main()

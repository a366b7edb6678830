"""What the tests of `ict compare`'s report share: comparison directories built by hand
(tests/test_compare_report.py, test_compare_pairing.py)."""

from __future__ import annotations

import json
from pathlib import Path


def finished_run(output: Path, label: str, verdicts: dict[int, list[bool]], steps: int = 2, seed: int = 0) -> Path:
    """A run directory trained to its num_steps with a finished final evaluation (benchmark b)."""
    run = output / "runs" / label / f"seed{seed}"
    (run / "eval").mkdir(parents=True)
    (run / "config.yaml").write_text(f"method: {label}\nnum_steps: {steps}\n")
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": step, "reward_mean": 0.5}) + "\n"
                                               for step in range(1, steps + 1)))
    write_eval(run / "eval", verdicts)
    return run


def write_eval(directory: Path, verdicts: dict[int, list[bool]], finished: bool = True) -> None:
    """An `ict eval` output directory of benchmark b (results.json only when ``finished``)."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "samples.jsonl").write_text("".join(
        json.dumps({"benchmark": "b", "index": index, "correct": correct}) + "\n"
        for index, values in verdicts.items() for correct in values))
    if finished:
        (directory / "results.json").write_text(json.dumps({"config": {"ks": [1]}}))

"""What the tests of `ict compare` share: comparison directories built by hand
(tests/test_compare_report.py, test_compare_pairing.py), and for comparisons run end to end
(tests/test_compare.py, test_compare_stops.py) a tiny gsm8k file and the reward
``compare_contains_answer``."""

from __future__ import annotations

import json
from pathlib import Path

from ict.answers.rewards import register_reward


@register_reward("compare_contains_answer")
def compare_contains_answer(completion: str, problem) -> float:
    """1 when the gold answer is one of the completion's whitespace-separated words, else 0."""
    return float(problem.answer in completion.split())


def gsm8k_data_dir(path: Path) -> Path:
    """A directory ``path`` holding a six-problem gsm8k.jsonl of sums (``#### a + b``)."""
    path.mkdir(parents=True)
    with open(path / "gsm8k.jsonl", "w") as handle:
        for a, b in [(1, 2), (3, 4), (2, 2), (4, 5), (0, 3), (1, 1)]:
            handle.write(json.dumps({"question": f"what is {a} + {b} ?",
                                     "answer": f"{a} + {b} = {a + b}\n#### {a + b}"}) + "\n")
    return path


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

"""The end-of-training table of `ict compare`'s report (`ict.analysis.compare.training_end`):
which steps it averages."""

from __future__ import annotations

import csv
import json

import pytest

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_end_of_training_leaves_the_full_token_warm_up_out(tmp_path):
    """A 12-step ict run with a 5-step full-token warm-up: "the mean of the last 10 steps" took in
    3 warm-up steps (selected fraction 1.0 each) beside 7 selecting ones (0.1): 0.37, a fraction
    ict never selected. Its last 10 steps after the warm-up are averaged now (0.1, by hand), and
    its top tokens are theirs; a run that never left its warm-up keeps its last 10."""
    from ict.analysis.compare import write_report

    output = tmp_path / "cmp"
    for label, warmup in (("ict", 5), ("random", 12)):
        run = output / "runs" / label / "seed0"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(f"method: {label}\nnum_steps: 12\n")
        lines = [{"step": step, "reward_mean": step / 16, "full_token_warmup": float(step <= warmup),
                  "selected_fraction": 1.0 if step <= warmup else 0.1,
                  "top_selected_tokens": [["w" if step <= warmup else "s", 1]]} for step in range(1, 13)]
        (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    report = write_report(output, ("grpo", "random"), 20).read_text()
    rows = {row["method"]: row for row in csv.DictReader((output / "training_end.csv").open())}
    assert float(rows["ict"]["selected_fraction"]) == pytest.approx(0.1)
    assert float(rows["ict"]["reward_mean"]) == pytest.approx(sum(range(6, 13)) / 7 / 16)
    assert float(rows["random"]["selected_fraction"]) == 1.0  # never left the warm-up: its last 10
    assert float(rows["random"]["reward_mean"]) == pytest.approx(sum(range(3, 13)) / 10 / 16)
    summary = json.loads((output / "summary.json").read_text())
    assert summary["top_tokens"]["ict"]["selected"] == [["s", 7]]
    assert "The last 10 steps after the full-token warm-up" in report

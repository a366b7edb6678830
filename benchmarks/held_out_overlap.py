"""How many of a comparison's held-out questions its training runs saw.

For each pre-registered comparison of docs/results.md (its training config and seeds, its
evaluation sets), this regenerates the training problems exactly as `ict train` drew them
(`ict.data.training_data.reasoning_gym_problems`: `dataset_size` draws with the run's seed, no
held-out split: those configs set ``eval_size: 0``) and the prompts its steps sampled
(`PromptSampler(train, prompts_per_step, seed)`, batches ``0 .. num_steps - 1``), and the
evaluation set as `ict eval` loads it (`ict.data.benchmarks.load_reasoning_gym`). A question is
its reasoning-gym text. Per comparison and seed it prints:

- ``distinct``: distinct questions of the evaluation set / its size;
- ``in pool``: of those, how many the training pool holds;
- ``trained on``: of those, how many the run's steps sampled at least once.

    PYTHONPATH=$PWD python benchmarks/held_out_overlap.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from ict.data.benchmarks import load_reasoning_gym
from ict.data.training_data import PromptSampler, reasoning_gym_problems

ROOT = Path(__file__).resolve().parents[1]

COMPARISONS = (
    # (name, training config, seeds, evaluation sets)
    ("first (v1)", "configs/compare-cpu.yaml", (0, 1, 2),
     ("rg:chain_sum:min_terms=2:max_terms=2:min_digits=1:max_digits=1:size=200",)),
    ("second (v2)", "configs/compare-cpu-v2.yaml", (0, 1, 2),
     ("rg:chain_sum:min_terms=2:max_terms=3:min_digits=1:max_digits=1:size=200",)),
    ("regime probe", "configs/probe.yaml", (0,),
     ("rg:chain_sum:min_terms=2:max_terms=2:min_digits=1:max_digits=1:size=64",
      "rg:chain_sum:min_terms=3:max_terms=4:min_digits=1:max_digits=1:size=64")),
    ("third (v3)", "configs/compare-cpu-v3.yaml", (1, 2, 3),
     ("rg:chain_sum:min_terms=3:max_terms=4:min_digits=1:max_digits=1:size=200",
      "rg:chain_sum:min_terms=2:max_terms=2:min_digits=1:max_digits=1:size=64")),
)


def overlap(config: dict, seed: int, questions: list[str]) -> tuple[int, int]:
    """(held-out questions in the training pool, of those sampled by the run's steps)."""
    train = reasoning_gym_problems(config["dataset"], config.get("dataset_size", 10000), seed,
                                   config.get("dataset_config"))
    pool = {problem.entry["question"] for problem in train}
    sampler = PromptSampler(train, config["prompts_per_step"], seed)
    seen = {problem.entry["question"] for step in range(config["num_steps"]) for problem in sampler.batch(step)}
    held = set(questions)
    return len(held & pool), len(held & seen)


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print("| comparison | training config | evaluation set | seed | distinct | in pool | trained on |")
    print("|---|---|---|---|---|---|---|")
    for name, path, seeds, sets in COMPARISONS:
        config = yaml.safe_load((ROOT / path).read_text())
        for spec in sets:
            questions = [problem.entry["question"] for problem in load_reasoning_gym(spec).problems]
            distinct = len(set(questions))
            for seed in seeds:
                in_pool, trained = overlap(config, seed, questions)
                print(f"| {name} | `{path}` | `{spec.removeprefix('rg:chain_sum:')}` | {seed} | "
                      f"{distinct}/{len(questions)} | {in_pool} | {trained} |")


if __name__ == "__main__":
    main()

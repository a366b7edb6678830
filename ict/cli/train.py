"""`ict train`: options generated from `ict.training.config.TrainConfig` (one source of truth)."""

from __future__ import annotations

import argparse
from typing import Any

from ict.cli.options import add_dataclass_options, given_options
from ict.training.config import TrainConfig
from ict.training.config_loading import build_config
from ict.training.config_text import parse_key_values

# The names users of TRL / transformers expect, accepted next to ours.
ALIASES = {"run_dir": ["--output-dir"], "num_steps": ["--max-steps"]}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "train",
        help="train a model with ICT or a baseline (GRPO, 20-Entropy, STAPO, random, Clip-Cov, KL-Cov)",
        description="Train a causal LM with RL from verifiable rewards and token-selective "
        "policy updates. Every option can also be set in a YAML file (--config) or as "
        "key=value overrides after the options (dotted keys for mappings, e.g. "
        "dataset_config.max_terms=3, selector.reference=seq_mean). Precedence: defaults < "
        "--config < options < key=value. ICT's default is the paper's recipe, as three public "
        "readings of it agree (docs/method.md): the top 10% of each response by the JS divergence "
        "to the mean distribution of the prompt's G completions at the same position, the "
        "Sparse-GRPO loss (seq_mean_token_mean) and a 10-step full-token warm-up (--preset paper "
        "names it; --preset batch is the batch-ranked recipe before it).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--config", metavar="YAML", default=None,
                        help="YAML file of options (default: none)")
    add_dataclass_options(parser, TrainConfig, ALIASES)
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="option overrides, applied last (default: none)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ict.training.trainer import train

    config = build_config(args.config, given_options(TrainConfig, args), parse_key_values(args.overrides))
    train(config)
    return 0

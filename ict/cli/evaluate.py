"""`ict eval`: evaluate a model on benchmarks (pass@k, avg@n, maj@n); options generated from
`ict.evaluation.evaluate.EvalConfig` (one source of truth), then `ict.evaluation.evaluate.evaluate`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ict.cli.options import add_config_option, add_dataclass_options, options_from_args

# Short names kept from earlier versions, and the conventional ones.
ALIASES = {"num_samples": ["--n"], "ks": ["--k"]}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `eval` subcommand."""
    from ict.data.benchmark_names import REASONING_GYM_EVAL_SEED
    from ict.data.benchmarks import SUITES, available_benchmarks
    from ict.evaluation.evaluate import EvalConfig

    suites = "; ".join(f"{name} = {','.join(members)}" for name, members in SUITES.items())
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a model on math / Olympiad / commonsense benchmarks (pass@k)",
        description=(
            "Sample --n completions per problem, grade them (math-verify under a hard time bound, "
            "option letters, reasoning-gym scorers) and report unbiased pass@k, avg@n, maj@n "
            "(and greedy accuracy with --greedy) per benchmark and macro-averaged per suite; "
            "with --seeds 0,1,2 each metric is the mean over sampling seeds, shown with its std "
            "and the per-seed values. Writes samples.jsonl (every prompt, completion, extracted answer and verdict), "
            "results.json, results.csv and results.md to --output-dir; a rerun into the same "
            "directory resumes (finished problems of each seed are not generated again)."
        ),
        epilog=(
            f"Benchmarks: {', '.join(available_benchmarks())}, or rg:<task>[:key=value]... "
            f"(reasoning-gym, e.g. rg:chain_sum:max_terms=2:max_digits=1:size=100; generated with "
            f"seed {REASONING_GYM_EVAL_SEED}: problem i is reasoning-gym's draw {REASONING_GYM_EVAL_SEED} + i, "
            f"and ict train --seed s draws s .. s + dataset_size - 1). Suites: {suites}."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_option(parser, "ict eval options")
    add_dataclass_options(parser, EvalConfig, ALIASES)
    parser.add_argument("--quiet", action="store_true", help="no progress bar (default: off)")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Build an `EvalConfig` (defaults < --config < flags) and run the evaluation."""
    from ict.evaluation.evaluate import EvalConfig, evaluate
    from ict.evaluation.records import SAMPLES_FILE
    config = options_from_args(EvalConfig, args)
    try:
        evaluate(config, progress=not args.quiet,
                 log=None if args.quiet else (lambda message: print(message, file=sys.stderr)))
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM: say that the samples drawn are kept, and how to go on
        samples = config.resolved_output_dir() / SAMPLES_FILE
        if samples.is_file() and samples.stat().st_size:
            again = "rerun it without --overwrite" if config.overwrite else "rerun the same command"
            print(f"{samples} keeps the samples drawn so far: {again} to go on from them", file=sys.stderr)
        raise
    return 0

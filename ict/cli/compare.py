"""`ict compare` and `ict plot`: parse options, call `ict.analysis.compare` / `ict.analysis.plots`."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `compare` subcommand."""
    from ict.analysis.compare import CompareConfig

    defaults = CompareConfig(methods=[], seeds=[], output_dir=Path("."))
    parser = subparsers.add_parser(
        "compare", help="train methods x seeds identically, evaluate pass@k, write a report",
        description="For every method and seed: train (same prompts, same rollout seeds per "
        "seed), evaluate the final checkpoint (same problems, same sampling seed), and write "
        "DIR/report.md, results.csv, differences.csv and curves.png with paired bootstrap "
        "intervals and permutation p-values against the baselines (default grpo and random). "
        "Finished runs are reused.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--methods", default="grpo,entropy,stapo,ict,random",
                        help="comma-separated methods; options as method:key=value,key=value "
                             "(e.g. ict:reference=prev,ratio=0.2 or ict:preset=paper)")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds")
    parser.add_argument("--config", default=None, help="YAML of training options (ict train)")
    parser.add_argument("--output-dir", required=True, help="comparison directory")
    parser.add_argument("--eval-benchmarks", default=defaults.eval_benchmarks,
                        help="benchmarks for the final models (ict eval names, rg:<task>...)")
    parser.add_argument("--eval-data-dir", default=None, help="directory of benchmark files")
    parser.add_argument("--eval-n", type=int, default=defaults.eval_n,
                        help="samples per evaluation problem")
    parser.add_argument("--eval-temperature", type=float, default=defaults.eval_temperature)
    parser.add_argument("--eval-max-new-tokens", type=int, default=defaults.eval_max_new_tokens)
    parser.add_argument("--eval-limit", type=int, default=None,
                        help="first N problems of each benchmark")
    parser.add_argument("--eval-math-extraction", default="anchored",
                        choices=("anchored", "lenient"))
    parser.add_argument("--eval-answer-extraction", default=defaults.eval_answer_extraction,
                        choices=("tag", "last_number"),
                        help="reasoning-gym answers: last_number = the bare question as prompt "
                             "and the last number as answer (ict train's default); tag = "
                             "\\boxed{} or <answer> tags with the \\boxed{} instruction")
    parser.add_argument("--bootstrap-resamples", type=int, default=defaults.bootstrap_resamples)
    parser.add_argument("--baselines", default=",".join(defaults.baselines),
                        help="comma-separated method names or run labels every other run is "
                             "compared with (e.g. ict-reference=group_mean-ratio=0.1 for an "
                             "ablation)")
    parser.add_argument("--report-only", action="store_true",
                        help="rebuild the report from the run directories; train nothing")
    parser.add_argument("--train-only", action="store_true",
                        help="train every run to its final checkpoint; evaluate nothing and "
                             "write no report (a later run without it evaluates them)")
    parser.add_argument("--eval-only", action="store_true",
                        help="evaluate the runs already trained to their final step (train "
                             "nothing; safe next to a --train-only process), then the report")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="training option overrides for every run")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ict.analysis.compare import CompareConfig, parse_methods, parse_seeds, run_comparison
    from ict.training.config import parse_key_values

    config = CompareConfig(
        methods=parse_methods(args.methods), seeds=parse_seeds(args.seeds),
        output_dir=Path(args.output_dir), config_file=args.config,
        overrides=parse_key_values(args.overrides), eval_benchmarks=args.eval_benchmarks,
        eval_data_dir=args.eval_data_dir, eval_n=args.eval_n,
        eval_temperature=args.eval_temperature, eval_max_new_tokens=args.eval_max_new_tokens,
        eval_math_extraction=args.eval_math_extraction,
        eval_answer_extraction=args.eval_answer_extraction, eval_limit=args.eval_limit,
        report_only=args.report_only, train_only=args.train_only,
        eval_only=args.eval_only,
        bootstrap_resamples=args.bootstrap_resamples,
        baselines=[name.strip() for name in args.baselines.split(",") if name.strip()],
        command="ict " + shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["compare"] else "")
    report = run_comparison(config)
    print(f"report: {report}")
    return 0

"""`ict eval`: evaluate a model on benchmarks (pass@k, avg@n, maj@n); parses options, calls
`ict.evaluate.evaluate`."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ict.errors import UsageError


def _ks(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one k")
    return values


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `eval` subcommand."""
    from ict.benchmarks import REASONING_GYM_EVAL_SEED, SUITES, available_benchmarks
    from ict.evaluate import EvalConfig

    defaults = EvalConfig()
    suites = "; ".join(f"{name} = {','.join(members)}" for name, members in SUITES.items())
    parser = subparsers.add_parser(
        "eval",
        help="evaluate a model on math / Olympiad / commonsense benchmarks (pass@k)",
        description=(
            "Sample --n completions per problem, grade them (math-verify under a hard time bound, "
            "option letters, reasoning-gym scorers) and report unbiased pass@k, avg@n, maj@n "
            "(and greedy accuracy with --greedy) per benchmark and macro-averaged per suite. "
            "Writes samples.jsonl (every prompt, completion, extracted answer and verdict), "
            "results.json, results.csv and results.md to --output-dir; a rerun into the same "
            "directory resumes (finished problems are not generated again)."
        ),
        epilog=(
            f"Benchmarks: {', '.join(available_benchmarks())}, or rg:<task>[:key=value]... "
            f"(reasoning-gym, e.g. rg:chain_sum:max_terms=2:max_digits=1:size=100; generated with "
            f"seed {REASONING_GYM_EVAL_SEED}, disjoint from training seeds). Suites: {suites}."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--model", default=defaults.model,
                        help="Hugging Face id, local directory (e.g. a checkpoint of ict train), or "
                             "the offline default smollm2-135m-instruct")  # fmt: skip
    parser.add_argument("--benchmarks", default=defaults.benchmarks,
                        help="comma-separated benchmark and suite names")  # fmt: skip
    parser.add_argument("--data-dir", default=defaults.data_dir,
                        help="directory with <name>.jsonl files; None = load from the hub")  # fmt: skip
    parser.add_argument("--output-dir", default=defaults.output_dir,
                        help="where outputs go; None = runs/eval/<model>")  # fmt: skip
    parser.add_argument("--n", dest="num_samples", type=int, default=defaults.num_samples,
                        help="sampled completions per problem")  # fmt: skip
    parser.add_argument("--k", dest="ks", type=_ks, default=",".join(map(str, defaults.ks)),
                        help="comma-separated k values for pass@k (each <= n)")  # fmt: skip
    parser.add_argument("--temperature", type=float, default=defaults.temperature,
                        help="sampling temperature")  # fmt: skip
    parser.add_argument("--top-p", type=float, default=defaults.top_p, help="nucleus sampling")
    parser.add_argument("--max-new-tokens", type=int, default=defaults.max_new_tokens,
                        help="completion length limit in tokens; None = 4096 on a GPU, 512 on a "
                             "CPU")  # fmt: skip
    parser.add_argument("--batch-size", type=int, default=defaults.batch_size,
                        help="sequences per generate call (problems per call = batch / n)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=defaults.seed, help="sampling seed")
    parser.add_argument("--greedy", action="store_true",
                        help="also generate one greedy completion per problem and report its "
                             "accuracy")  # fmt: skip
    parser.add_argument("--limit", type=int, default=defaults.limit,
                        help="evaluate only the first N problems of each benchmark")  # fmt: skip
    parser.add_argument("--device", default=defaults.device, help="auto, cpu, cuda, cuda:N")
    parser.add_argument("--dtype", default=defaults.dtype, choices=("auto", "fp32", "bf16", "fp16"),
                        help="model dtype; auto = fp32 on CPU, bf16 on GPU")  # fmt: skip
    parser.add_argument("--threads", type=int, default=None,
                        help="CPU threads for torch; None = one per core (1 is much faster when "
                             "other processes load the cores)")  # fmt: skip
    parser.add_argument("--backend", default=defaults.backend, choices=("auto", "hf", "vllm"),
                        help="generation backend; auto = vLLM when installed and a GPU is present")  # fmt: skip
    parser.add_argument("--verify-timeout", type=float, default=defaults.verify_timeout,
                        help="hard time bound per math check in seconds (over it: incorrect)")  # fmt: skip
    parser.add_argument("--math-extraction", default=defaults.math_extraction,
                        choices=("anchored", "lenient"),
                        help="anchored: a math answer must be in \\boxed{} or after 'the answer "
                             "is' / 'Answer:'; lenient: math-verify's fallback to the last "
                             "formula or number also counts")  # fmt: skip
    parser.add_argument("--regrade", action="store_true",
                        help="grade the stored completions in --output-dir again with the "
                             "current rules (automatic when grading options changed)")  # fmt: skip
    parser.add_argument("--verify-workers", type=int, default=defaults.verify_workers,
                        help="math-verify worker processes; None = min(2, CPUs)")  # fmt: skip
    parser.add_argument("--system-prompt", default=defaults.system_prompt,
                        help="optional system message before each prompt")  # fmt: skip
    parser.add_argument("--overwrite", action="store_true",
                        help="discard earlier samples in --output-dir instead of resuming")  # fmt: skip
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    """Build an `EvalConfig` from the options and run the evaluation."""
    from ict.evaluate import EvalConfig, evaluate

    if args.verify_workers is not None and args.verify_workers < 1:
        raise UsageError("--verify-workers must be >= 1")
    config = EvalConfig(
        model=args.model, benchmarks=args.benchmarks, data_dir=args.data_dir,
        output_dir=args.output_dir, num_samples=args.num_samples, ks=tuple(args.ks),
        temperature=args.temperature, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size, seed=args.seed, greedy=args.greedy, limit=args.limit,
        device=args.device, dtype=args.dtype, threads=args.threads, backend=args.backend,
        verify_timeout=args.verify_timeout, verify_workers=args.verify_workers,
        math_extraction=args.math_extraction, regrade=args.regrade,
        system_prompt=args.system_prompt, overwrite=args.overwrite,
    )  # fmt: skip
    evaluate(config, progress=not args.quiet,
             log=None if args.quiet else (lambda message: print(message, file=sys.stderr)))  # fmt: skip
    return 0

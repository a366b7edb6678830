"""`ict inspect`: colour every completion token by its JS score / entropy / Renyi-2 entropy."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ict.core.errors import UsageError
from ict.core.selectors import ICT_DEFAULT_REFERENCE
from ict.core.stats import JS_REFERENCES
from ict.training.config import TrainConfig

# every JS reference but 'ref' (the inspect view loads no reference model)
JS_COLOUR_REFERENCES = tuple(name for name in JS_REFERENCES if name != "ref")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `inspect` subcommand."""
    parser = subparsers.add_parser(
        "inspect", help="token view: scores and ICT / 20-Entropy / STAPO selections per token",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--model", default=TrainConfig.model, help="model id or directory")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prompt", help="sample --n completions of this prompt")
    source.add_argument("--samples", help="JSONL of {prompt, completion} records")
    parser.add_argument("--n", type=int, default=4, help="completions per prompt (>= 2)")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--temperature", type=float, default=TrainConfig.temperature,
                        help="sampling temperature, also the statistics' (ict train's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--color", choices=("js", "entropy", "renyi2"), default="js")
    parser.add_argument("--reference", default=ICT_DEFAULT_REFERENCE, choices=JS_COLOUR_REFERENCES,
                        help="JS reference of the js colour (ICT's marks always use ICT's default, "
                             f"{ICT_DEFAULT_REFERENCE})")
    parser.add_argument("--html", default=None, help="write the self-contained HTML page here")
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ict.analysis.token_view import build_view, print_view, render_html, rollout_from_samples
    from ict.models.loading import load_model_and_tokenizer
    from ict.models.rollout import SamplingSettings, generate_completions

    if args.n < 2:
        raise UsageError("--n must be >= 2 (JS scores compare completions)")
    model, tokenizer = load_model_and_tokenizer(args.model, device="cpu")
    if args.samples:
        rollout = rollout_from_samples(tokenizer, Path(args.samples))
    else:
        sampling = SamplingSettings(args.temperature, args.max_new_tokens)
        rollout = generate_completions(model, tokenizer, [args.prompt], sampling, num_samples=args.n,
                                       seed=args.seed)
    view = build_view(model, tokenizer, rollout, temperature=args.temperature, color=args.color,
                      reference=args.reference)
    print_view(view)
    if args.html:
        Path(args.html).write_text(render_html(view), encoding="utf-8")
        print(f"html: {args.html}")
    return 0

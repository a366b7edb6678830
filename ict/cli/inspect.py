"""`ict inspect`: colour every completion token by its JS score / entropy / Renyi-2 entropy;
options generated from `ict.analysis.token_view.InspectConfig`."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ict.cli.options import add_config_option, add_dataclass_options, options_from_args
from ict.core.errors import writing_output

ALIASES = {"num_samples": ["--n"]}


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the `inspect` subcommand."""
    from ict.analysis.token_view import InspectConfig

    parser = subparsers.add_parser(
        "inspect", help="token view: scores and ICT / 20-Entropy / STAPO selections per token")
    add_config_option(parser, "ict inspect options")
    add_dataclass_options(parser, InspectConfig, ALIASES)
    parser.set_defaults(run=run)
    return parser


def run(args: argparse.Namespace) -> int:
    from ict.analysis.token_view import (
        InspectConfig,
        build_view,
        print_view,
        render_html,
        rollout_from_samples,
    )
    from ict.models.loading import load_inference_model
    from ict.models.rollout import SamplingSettings, generate_completions

    config = options_from_args(InspectConfig, args).validate()
    model, tokenizer = load_inference_model(config.model, device="cpu")  # as ict eval's (LoRA: merged)
    if config.samples:
        rollout = rollout_from_samples(tokenizer, Path(config.samples).expanduser(), config.num_prompts,
                                       config.system_prompt)
    else:
        sampling = SamplingSettings(config.temperature, config.max_new_tokens)
        rollout = generate_completions(model, tokenizer, [config.prompt], sampling,
                                       num_samples=config.num_samples, seed=config.seed,
                                       system_prompt=config.system_prompt)
    view = build_view(model, tokenizer, rollout, temperature=config.temperature, color=config.color,
                      reference=config.reference)
    print_view(view)
    if config.html:
        with writing_output("--html", config.html):
            # backslashreplace: a path's byte that is not UTF-8 (a legal Linux name; argv reads it as
            # U+DCFF) in the subtitle shows as \udcff instead of failing the page after the scoring
            Path(config.html).expanduser().write_text(render_html(view, config.source()), encoding="utf-8",
                                                      errors="backslashreplace")
        print(f"html: {config.html}")
    return 0

"""Which reading of ICT reproduces the paper's figures of its selected tokens (issue 30, item 4).

The paper (arXiv 2606.19771) reports for its top-10% tokens: mean sampled-token probability
0.18 +- 0.09, a high:low entropy ratio of 1.03 (GSM8K) / 0.99 (MATH), and an elbow of the sorted
score curve near 10%. This script samples ONE rollout per sampling temperature (``--prompts``
problems x G = ``--group-size`` completions, up to ``--max-new-tokens`` new tokens; the model
loaded as the trainer loads it, ``--model``: the offline default SmolLM2-135M-Instruct or a
checkpoint directory), computes the token statistics at the sampling temperature with all four
group references in one ``token_statistics`` call, and for every ranking scope (sequence, group,
batch; top 10%) x reference (``group_mean`` alive-only, ``group_mean_absorbing``,
``group_mean_loo``, ``group_mean_loo_absorbing``) tabulates ``ict.core.diagnostics.paper_figures``
of the selection (each selection through the library API: ``select("ict", ...)``):

- ``p(a*)``: mean +- std (population) of the selected tokens' sampled-token probability;
- ``high:low``: selected tokens above the median entropy of the batch's response tokens over
  those at or below it;
- ``p > beta``: share of the selected tokens with ``p(a*) > beta = sum p^2``;
- ``knee``: mean over responses of the Kneedle knee of the sorted score curve (``x = rank / L``;
  in brackets the share of responses with ``L >= 3`` whose curve has a knee, i.e. a point below
  the chord; a saturated plateau that drops at its end has none); the same for every scope;
- ``plateau``: mean over responses (``L >= 3``, scores not all equal) of the share of the
  response's tokens whose score, normalised to [0, 1] by the response's min and max, is >= 0.9
  (how much of a response sits on a saturated plateau);
- ``aligned``: mean over responses of the share of its tokens before its group first diverges
  (``ict.core.diagnostics.aligned_share``: the first position where not all G rows hold the
  same token id, or a row has ended); the same for every row of a rollout;
- ``agreement``: mean over response tokens of the share of the other rows of the group, alive
  at the same position, that hold the same token (``ict.core.diagnostics.token_agreement``; 1 for
  identical completions; one deviating row does not end it, unlike ``aligned``).

Prompts: ``gsm_symbolic`` problems of reasoning-gym (``create_dataset("gsm_symbolic", size,
seed)``) in the trainer's math prompt (``ict.core.problems.MATH_TEMPLATE`` in the chat template),
or ``chain_sum`` as ``configs/demo.yaml`` trains on it. Each run merges its settings into
``--json`` and rewrites ``--table`` from every setting there, so several runs (models, datasets)
build one table:

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/paper_figures.py --temperatures 0.6,0.7,1.0,0.3
    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/paper_figures.py --model /tmp/warm/checkpoints/step-00000008 \\
        --label "after 8 GRPO steps" --temperatures 1.0
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Any

import torch
from selection_anatomy import load_policy, sample_rollout

from ict.core.diagnostics import PAPER_FIGURES, aligned_share, paper_figures, token_agreement
from ict.core.selectors import SCOPES, SelectionInputs, select
from ict.core.stats import GROUP_MEAN_VARIANTS, TokenStatistics, token_statistics

DEFAULT_MODEL = "smollm2-135m-instruct"
RATIO = 0.1
PLATEAU = 0.9  # a token is on the plateau when its normalised score is >= this
CHAIN_SUM_CONFIG = "configs/demo.yaml"
PAPER_ROW = {figure[2]: figure[4] for figure in PAPER_FIGURES}


def prompts_of(dataset: str, size: int, seed: int) -> list[str]:
    """``size`` prompts: gsm_symbolic in the trainer's math prompt, or chain_sum as the demo trains."""
    if dataset == "gsm_symbolic":
        import reasoning_gym

        from ict.core.problems import MATH_TEMPLATE, render_template

        entries = reasoning_gym.create_dataset("gsm_symbolic", size=size, seed=seed)
        return [render_template(MATH_TEMPLATE, entry["question"]) for entry in entries]
    if dataset == "chain_sum":
        from ict.data.training_data import reasoning_gym_problems
        from ict.training.config_loading import build_config

        config = build_config(CHAIN_SUM_CONFIG, {}, {})
        return [str(problem.prompt) for problem in reasoning_gym_problems(
            config.dataset, size, seed, config.dataset_config, config.prompt_suffix)]
    raise ValueError(f"--dataset must be gsm_symbolic or chain_sum, got {dataset!r}")


def plateau_share(scores: torch.Tensor, response: torch.Tensor, level: float = PLATEAU) -> float:
    """Mean over responses (>= 3 tokens, scores not all equal) of the share of their tokens whose
    score normalised by the response's min and max, ``(s - min) / (max - min)``, is >= ``level``."""
    shares = []
    for row in range(scores.shape[0]):
        values = scores[row][response[row]].double()
        if values.numel() >= 3 and float(values.max()) > float(values.min()):
            normalised = (values - values.min()) / (values.max() - values.min())
            shares.append(float((normalised >= level).double().mean()))
    return sum(shares) / len(shares) if shares else math.nan


def measure(model: Any, tokenizer: Any, prompts: list[str], group_size: int, temperature: float,
            max_new_tokens: int, seed: int, unit: str = "position") -> dict[str, Any]:
    """One rollout at ``temperature``, its statistics at the same temperature, and the figures of
    every scope x reference (see the module docstring), ICT ranking ``unit`` (``position``: the
    paper's token positions; ``token_id``: the abstract's "unique tokens", each sampled id ranked
    by its mean score and selected at all its positions)."""
    from ict.core.seeding import step_seed
    from ict.models.forward import response_logits

    start = time.perf_counter()
    rollout, batch = sample_rollout(model, tokenizer, prompts, group_size, temperature, max_new_tokens,
                                    step_seed(seed, 0, 0), batch_size=len(prompts) * group_size)
    generated = time.perf_counter()
    response = batch.response_mask.bool()
    finished = torch.tensor([done for group in rollout.finished for done in group])
    group_ids = torch.arange(response.shape[0]) // group_size
    with torch.no_grad():
        logits = response_logits(model, batch)
        stats: TokenStatistics = token_statistics(logits, batch.response_ids, response, temperature,
                                                  tuple(GROUP_MEAN_VARIANTS), group_ids=group_ids,
                                                  finished=finished)
    del logits
    lengths = response.sum(dim=1).double()
    out: dict[str, Any] = {
        "temperature": temperature, "prompts": len(prompts), "group_size": group_size,
        "max_new_tokens": max_new_tokens, "mean_length": float(lengths.mean()),
        "finished_share": float(finished.double().mean()),
        "aligned_share": aligned_share(batch.response_ids, response, group_ids),
        "token_agreement": token_agreement(batch.response_ids, response, group_ids),
        "all_tokens": paper_figures(stats, response, response), "rows": [],
    }
    for scope in SCOPES:
        for reference in GROUP_MEAN_VARIANTS:
            inputs = SelectionInputs(stats, response, token_ids=batch.response_ids, group_ids=group_ids,
                                     generator=torch.Generator().manual_seed(step_seed(seed, 0, 2)))
            selection = select("ict", inputs, ratio=RATIO, reference=reference, scope=scope, unit=unit)
            out["rows"].append({"scope": scope, "reference": reference,
                                **paper_figures(stats, response, selection.mask, reference=reference),
                                "plateau_share": plateau_share(stats.js_scores[reference], response),
                                "selected": int(selection.mask.sum())})
    out["generation_seconds"] = generated - start
    out["seconds"] = time.perf_counter() - start
    return out


def _number(value: Any, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if value == "inf" or (isinstance(value, float) and math.isinf(value)):
        return "inf"
    return f"{value:.{digits}f}"


def _jsonable(value: Any) -> Any:
    """NaN -> null, inf -> "inf" (strict JSON)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None if math.isnan(value) else "inf"
    if isinstance(value, dict):
        return {key: _jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_jsonable(item) for item in value]
    return value


def table(settings: dict[str, dict[str, Any]]) -> str:
    """The markdown table of every setting: the paper's row, then per setting its 12 selections
    and the all-token row; settings of one model and dataset together (in the order first
    measured), by temperature."""
    pairs = list(dict.fromkeys((setting["model"], setting["dataset"]) for setting in settings.values()))
    settings = dict(sorted(settings.items(), key=lambda item: (
        pairs.index((item[1]["model"], item[1]["dataset"])), item[1]["temperature"])))
    lines = ["| setting | scope | reference | p(a*) mean ± std | high:low entropy | p(a*) > beta | "
             "knee (responses with one) | plateau share | aligned share | agreement |",
             "|---|---|---|---|---|---|---|---|---|---|",
             f"| paper (arXiv 2606.19771) | - | - | {PAPER_ROW['selected_token_prob_mean']} ± "
             f"{PAPER_ROW['selected_token_prob_std']} | 1.03 (GSM8K), 0.99 (MATH) | - | "
             f"{PAPER_ROW['score_knee_fraction']} | - | - | - |"]
    for label, setting in settings.items():
        aligned = f"{_number(setting['aligned_share'])} | {_number(setting['token_agreement'])}"
        for row in setting["rows"]:
            lines.append(
                f"| {label} | {row['scope']} | `{row['reference']}` | "
                f"{_number(row['selected_token_prob_mean'])} ± {_number(row['selected_token_prob_std'])} | "
                f"{_number(row['selected_high_low_entropy_ratio'])} | {_number(row['above_beta_fraction_selected'])} | "
                f"{_number(row['score_knee_fraction'])} ({_number(row['score_knee_share'])}) | "
                f"{_number(row['plateau_share'])} | {aligned} |")
        every = setting["all_tokens"]
        lines.append(f"| {label} | all tokens | - | {_number(every['all_token_prob_mean'])} ± "
                     f"{_number(every['all_token_prob_std'])} | {_number(every['selected_high_low_entropy_ratio'])} | "
                     f"{_number(every['above_beta_fraction'])} | - | - | {aligned} |")
    lines.append("")
    lines.append("| setting | model | prompts x G | cap | mean length | finished | seconds (generation) |")
    lines.append("|---|---|---|---|---|---|---|")
    for label, setting in settings.items():
        lines.append(f"| {label} | {setting['model']} | {setting['prompts']} x {setting['group_size']} | "
                     f"{setting['max_new_tokens']} | {setting['mean_length']:.1f} | "
                     f"{setting['finished_share']:.0%} | {setting['seconds']:.0f} ({setting['generation_seconds']:.0f}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="model id or checkpoint directory")
    parser.add_argument("--label", default=None, help="the model's name in the table (default: base / the path)")
    parser.add_argument("--dataset", default="gsm_symbolic", choices=("gsm_symbolic", "chain_sum"))
    parser.add_argument("--temperatures", default="0.6,0.7,1.0", help="comma-separated sampling temperatures")
    parser.add_argument("--prompts", type=int, default=8, help="problems (default 8)")
    parser.add_argument("--group-size", type=int, default=8, help="completions per problem, G (default 8)")
    parser.add_argument("--max-new-tokens", type=int, default=160)
    parser.add_argument("--seed", type=int, default=0, help="problems, sampling and tie-break seed")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--unit", default="position", choices=("position", "token_id"),
                        help="what ICT ranks: token positions (the paper's) or unique token ids "
                        "(the abstract's 'top 10%% of unique tokens'); token_id labels its rows")
    parser.add_argument("--json", default="results/paper-figures/figures.json", help="merged results")
    parser.add_argument("--table", default="results/paper-figures/table.md", help="markdown of every setting")
    args = parser.parse_args()
    start = time.perf_counter()
    model, tokenizer = load_policy(args.model, args.threads, args.seed)
    prompts = prompts_of(args.dataset, args.prompts, args.seed)
    name = args.label or ("base" if args.model == DEFAULT_MODEL else Path(args.model).name)
    path = Path(args.json)
    merged = json.loads(path.read_text()) if path.is_file() else {"settings": {}}
    for temperature in (float(value) for value in args.temperatures.split(",")):
        label = f"{name}, {args.dataset}, T={temperature}" + (
            ", unit=token_id" if args.unit == "token_id" else "")
        result = measure(model, tokenizer, prompts, args.group_size, temperature, args.max_new_tokens, args.seed,
                         args.unit)
        merged["settings"][label] = _jsonable({"model": args.model, "dataset": args.dataset, "seed": args.seed,
                                               "threads": args.threads, "unit": args.unit, **result})
        print(f"{label}: {result['seconds']:.0f} s, mean length {result['mean_length']:.1f}, "
              f"aligned share {result['aligned_share']:.3f}", flush=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(merged, indent=1) + "\n")
        Path(args.table).write_text(table(merged["settings"]))
    print(table(merged["settings"]))
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

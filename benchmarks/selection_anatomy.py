"""Where each ICT reference's top 10% lies in the responses, on rollouts of the offline default.

Draws ``--batches`` rollout batches of 8 prompts x 8 completions (cap 32 new tokens) from the
offline default model (SmolLM2-135M-Instruct, loaded as the trainer loads it) on the task of
``configs/compare-cpu.yaml`` (chain_sum), at each ``--temperatures``, exactly as training step
``0, 1, 2`` of seed 0 would (same prompts, sampling seeds and selection generators). The token
statistics are computed at the sampling temperature. For each reference it selects the top 10%
of the batch with the library API (``required_js_references("ict", options)`` ->
``token_statistics`` -> ``select("ict", ...)``; the first row uses the default options) and
prints, pooled over the batches:

- ``after shortest end``: share of the selected tokens at positions ``t >= L_min``, where the
  group's shortest completion has ended (fewer than 8 completions alive);
- ``rel. position``: mean ``t / L`` of the selected tokens (``L`` the completion's length);
- ``at top``: share of the selected scores within 1e-3 of the batch's top score (saturation);
- ``tie-decided``: share of the selections decided by a tie at the threshold
  (``Selection.tie_decided``, tolerance ``TIE_TOLERANCE`` = 1e-6), and the share a tolerance of
  1e-3 would leave to the draw (the top 10% of the same scores with ``tolerance=1e-3``);
- ``end tokens``: share of the selected tokens that end a finished completion (EOS).

The ``all tokens`` row gives the same figures over every response token (a uniform selection).

    OMP_NUM_THREADS=1 PYTHONPATH=$PWD python benchmarks/selection_anatomy.py
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass, field

import torch

from ict.core.diagnostics import selection_anatomy, token_anatomy
from ict.core.selectors import (
    SelectionInputs,
    required_js_references,
    resolve_options,
    select,
    top_fraction_selection,
)
from ict.core.stats import GROUP_MEAN_VARIANTS, response_ends, token_statistics

CONFIG = "configs/compare-cpu.yaml"
REFERENCES = (*GROUP_MEAN_VARIANTS, "prev", "seq_mean")
TOP_TOLERANCE = 1e-3


@dataclass
class Tally:
    """Pooled counts of one row of the table."""

    selected: int = 0
    after_end: int = 0
    relative: float = 0.0
    at_top: int = 0
    tie_decided: int = 0
    tie_decided_wide: int = 0
    end_tokens: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def add(self, mask: torch.Tensor, after_end: torch.Tensor, anatomy: dict, scores: torch.Tensor | None,
            response: torch.Tensor, tie: torch.Tensor | None) -> None:
        self.selected += int(mask.sum())
        self.after_end += int((mask & after_end).sum())
        self.relative += float(anatomy["relative_position"][mask].sum())
        self.end_tokens += int((mask & anatomy["end_token"]).sum())
        if scores is not None:
            top = scores[response].max()
            self.at_top += int((mask & (scores >= top - TOP_TOLERANCE)).sum())
            wide = top_fraction_selection(scores, response, 0.1, generator=torch.Generator().manual_seed(0),
                                          tolerance=TOP_TOLERANCE)
            self.tie_decided_wide += int(wide.tie_decided.sum())
        if tie is not None:
            self.tie_decided += int((tie & mask).sum())

    def row(self, name: str, scored: bool) -> str:
        n = max(self.selected, 1)
        top = f"{self.at_top / n:.2f}" if scored else "-"
        tie = f"{self.tie_decided / n:.2f} ({self.tie_decided_wide / n:.2f})" if scored else "-"
        return (f"| {name} | {self.after_end / n:.2f} | {self.relative / n:.2f} | {top} | {tie} | "
                f"{self.end_tokens / n:.2f} |")


def after_shortest_end(response: torch.Tensor, group_ids: torch.Tensor) -> torch.Tensor:
    """bool ``[B, T]``: response positions at or after the end of the group's shortest completion
    (``t >= L_min``), computed from the lengths (independently of the anatomy function)."""
    lengths = response.sum(dim=1)
    shortest = torch.stack([lengths[group_ids == group].min() for group in group_ids])
    return response & (torch.arange(response.shape[1])[None, :] >= shortest[:, None])


def load_policy(model: str, threads: int, seed: int = 0):
    """``(model, tokenizer)`` loaded as the trainer loads them (float32, CPU, eval mode), with
    ``threads`` torch threads and torch's global seed set to ``seed``."""
    from ict.models.loading import load_model_and_tokenizer

    torch.manual_seed(seed)
    torch.set_num_threads(threads)
    policy, tokenizer = load_model_and_tokenizer(model, dtype="fp32", device="cpu")
    return policy.eval(), tokenizer


def sample_rollout(model, tokenizer, prompts: list, group_size: int, temperature: float, max_new_tokens: int,
                   seed: int, top_p: float = 1.0, batch_size: int = 32, system_prompt: str | None = None,
                   shared_prefill: bool = True):
    """``(rollout, batch)``: ``group_size`` completions of each prompt sampled as the trainer samples
    them (``generate_completions``; rows prompt-major) and packed (``pack_rollout``)."""
    from ict.models.rollout import SamplingSettings, generate_completions, pack_rollout

    rollout = generate_completions(
        model, tokenizer, prompts, SamplingSettings(temperature, max_new_tokens, top_p),
        num_samples=group_size, batch_size=batch_size, seed=seed, system_prompt=system_prompt,
        shared_prefill=shared_prefill)
    return rollout, pack_rollout(rollout, tokenizer.pad_token_id)


def rollouts(temperature: float, batches: int, threads: int):
    """Yield (response_ids, response_mask, logits, group_ids, finished, step) per batch."""
    from ict.core.seeding import step_seed
    from ict.data.training_data import PromptSampler, load_training_data
    from ict.models.forward import response_logits
    from ict.training.config_loading import build_config

    config = build_config(CONFIG, {}, {"temperature": str(temperature)})
    data = load_training_data(config.dataset, dataset_config=config.dataset_config, dataset_size=config.dataset_size,
                              eval_size=config.eval_size, seed=config.seed)
    sampler = PromptSampler(data.train, config.prompts_per_step, config.seed)
    model, tokenizer = load_policy(config.model, threads, config.seed)
    for step in range(batches):
        problems = sampler.batch(step)
        rollout, batch = sample_rollout(
            model, tokenizer, [problem.prompt for problem in problems], config.num_generations, temperature,
            config.max_new_tokens, step_seed(config.seed, step, 0), config.top_p, config.generation_batch_size,
            config.system_prompt, config.generation_shared_prefill)
        with torch.no_grad():
            logits = response_logits(model, batch, config.shared_prompt_forward)
        finished = torch.tensor([done for group in rollout.finished for done in group])
        group_ids = torch.arange(batch.response_ids.shape[0]) // config.num_generations
        yield batch.response_ids, batch.response_mask, logits, group_ids, finished, step_seed(config.seed, step, 2)


def measure(temperature: float, batches: int, threads: int) -> None:
    default = resolve_options("ict")["reference"]
    rows = {"default": Tally(), **{name: Tally() for name in REFERENCES}, "all tokens": Tally()}
    mismatched = 0
    lengths: list[int] = []
    for token_ids, response, logits, group_ids, finished, selection_seed in rollouts(temperature, batches, threads):
        inferred = response_ends(response)[1]
        short = response.sum(dim=1) < response.shape[1]
        mismatched += int((inferred[short] != finished[short]).sum())  # the default's inference is exact
        lengths += response.sum(dim=1).tolist()
        after_end = after_shortest_end(response, group_ids)
        anatomy = token_anatomy(response, group_ids, finished)
        # The default through the README's API, with default options and no `finished`.
        stats = token_statistics(logits, token_ids, response, temperature, required_js_references("ict"),
                                 group_ids=group_ids)
        inputs = SelectionInputs(stats, response, token_ids=token_ids, group_ids=group_ids,
                                 generator=torch.Generator().manual_seed(selection_seed))
        selection = select("ict", inputs)
        rows["default"].add(selection.mask, after_end, anatomy, stats.js_scores[default], response,
                            selection.tie_decided)
        figures = selection_anatomy(selection.mask, response, group_ids, finished, selection.tie_decided)
        assert abs(figures["selected_partial_group_fraction"] - float((selection.mask & after_end).sum())
                   / max(int(selection.mask.sum()), 1)) < 1e-9
        stats = token_statistics(logits, token_ids, response, temperature, REFERENCES, group_ids=group_ids)
        del logits
        for name in REFERENCES:
            inputs = SelectionInputs(stats, response, token_ids=token_ids, group_ids=group_ids,
                                     generator=torch.Generator().manual_seed(selection_seed))
            selection = select("ict", inputs, reference=name)
            rows[name].add(selection.mask, after_end, anatomy, stats.js_scores[name], response,
                           selection.tie_decided)
        rows["all tokens"].add(response.bool(), after_end, anatomy, None, response, None)
    finished_share = sum(1 for length in lengths if length < 32) / len(lengths)
    print(f"\nT = {temperature}: {batches} batches x 64 completions, mean length "
          f"{sum(lengths) / len(lengths):.1f}, {finished_share:.0%} ended before the cap; "
          f"finished inferred wrongly for {mismatched} rows")
    print("| reference | after shortest end | rel. position | at top (1e-3) | tie-decided (at 1e-3) | end tokens |")
    print("|---|---|---|---|---|---|")
    for name, tally in rows.items():
        label = f"default (`{default}`, library API)" if name == "default" else f"`{name}`"
        print(tally.row(label if name != "all tokens" else "all tokens", name != "all tokens"), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--temperatures", default="1.0,0.7", help="comma-separated sampling temperatures")
    parser.add_argument("--batches", type=int, default=3, help="rollout batches per temperature (default 3)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    args = parser.parse_args()
    start = time.perf_counter()
    for temperature in (float(value) for value in args.temperatures.split(",")):
        measure(temperature, args.batches, args.threads)
    print(f"\n({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()

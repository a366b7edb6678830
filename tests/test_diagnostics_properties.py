"""Properties of the per-step diagnostics (`ict.core.diagnostics`): a step's figures do not depend
on the order of its rows, on padding added right of the responses or on how groups are labelled;
fractions lie in [0, 1]; aligned share, token agreement and the selection anatomy equal loops over the tokens."""

from __future__ import annotations

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from ict.core.diagnostics import (
    aligned_share,
    paper_figures,
    selection_anatomy,
    token_agreement,
    token_diagnostics,
    top_token_counts,
)
from ict.core.selectors import ICT_DEFAULT_REFERENCE
from ict.core.stats import TokenStatistics


@st.composite
def steps(draw):
    """A step of `groups` prompts x `size` completions, right-padded responses of random lengths,
    statistics drawn from a seeded generator (continuous: no ties at a selection threshold)."""
    groups, size, length = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 6))
    rows = groups * size
    lengths = torch.tensor(draw(st.lists(st.integers(0, length), min_size=rows, max_size=rows)))
    generator = torch.Generator().manual_seed(draw(st.integers(0, 2**31)))

    def uniform(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, generator=generator)

    return {"stats": TokenStatistics(uniform(rows, length).log(), uniform(rows, length) * 3, uniform(rows, length) * 2,
                                     {ICT_DEFAULT_REFERENCE: uniform(rows, length) * math.log(2)}),
            "response": torch.arange(length)[None] < lengths[:, None], "selected": uniform(rows, length) > 0.5,
            "advantages": torch.randn(rows, generator=generator), "finished": uniform(rows) > 0.5,
            "group_ids": torch.arange(groups).repeat_interleave(size), "ties": uniform(rows, length) > 0.7,
            "tokens": torch.randint(0, 3, (rows, length), generator=generator),
            "order": torch.randperm(rows, generator=generator), "pad": draw(st.integers(1, 3))}


def _figures(step: dict, stats: TokenStatistics, index: torch.Tensor | slice = slice(None)) -> dict[str, float]:
    response, selected, group_ids = step["response"][index], step["selected"][index], step["group_ids"][index]
    return {**token_diagnostics(stats, response, selected, step["advantages"][index]),
            **paper_figures(stats, response, selected),
            **selection_anatomy(selected, response, group_ids, step["finished"][index], step["ties"][index]),
            "aligned_share": aligned_share(step["tokens"][index], response, group_ids),
            "token_agreement": token_agreement(step["tokens"][index], response, group_ids)}


def _assert_same(first: dict[str, float], second: dict[str, float]) -> None:
    assert first.keys() == second.keys()
    for key, value in first.items():
        if math.isnan(value):
            assert math.isnan(second[key]), key
        else:
            assert math.isclose(second[key], value, rel_tol=1e-6, abs_tol=1e-9), (key, value, second[key])


def _padded(tensor: torch.Tensor, pad: int, value: float | bool) -> torch.Tensor:
    return torch.cat([tensor, torch.full((tensor.shape[0], pad), value, dtype=tensor.dtype)], dim=1)


@given(steps())
def test_the_figures_of_a_step_do_not_depend_on_the_order_of_its_rows(step):
    _assert_same(_figures(step, step["stats"]), _figures(step, step["stats"].rows(step["order"]), step["order"]))
    relabelled = {**step, "group_ids": step["group_ids"] * 7 + 3}
    _assert_same(_figures(step, step["stats"]), _figures(relabelled, step["stats"]))


@given(steps())
def test_padding_right_of_the_responses_changes_no_figure(step):
    """Padding columns hold values that would count if they were read (selected, high entropy...)."""
    pad, stats = step["pad"], step["stats"]
    wider = TokenStatistics(_padded(stats.log_probs, pad, -5.0), _padded(stats.entropy, pad, 9.0),
                            _padded(stats.renyi2, pad, 1.0),
                            {name: _padded(scores, pad, 0.6) for name, scores in stats.js_scores.items()})
    padded_step = {**step, "response": _padded(step["response"], pad, False),
                   "selected": _padded(step["selected"], pad, True), "ties": _padded(step["ties"], pad, True),
                   "tokens": _padded(step["tokens"], pad, 1)}
    _assert_same(_figures(step, stats), _figures(padded_step, wider))
    assert top_token_counts(step["tokens"], step["response"], step["selected"]) == top_token_counts(
        padded_step["tokens"], padded_step["response"], padded_step["selected"])


@given(steps())
def test_fractions_lie_in_0_1_and_alignment_agreement_and_anatomy_equal_loops_over_the_tokens(step):
    figures = _figures(step, step["stats"])
    for key, value in figures.items():
        if ("fraction" in key or "jaccard" in key or "share" in key or "position" in key) and not math.isnan(value):
            assert 0.0 <= value <= 1.0, (key, value)
    response, tokens, groups = step["response"].tolist(), step["tokens"].tolist(), step["group_ids"].tolist()
    selected = (step["selected"] & step["response"]).tolist()
    shares, partial, position = [], [], []
    for i, row in enumerate(response):
        length = sum(row)
        mates = [j for j in range(len(response)) if groups[j] == groups[i]]
        for t, alive in enumerate(row):
            if not alive:
                continue
            others = [j for j in mates if j != i and response[j][t]]
            if others:
                shares.append(sum(tokens[j][t] == tokens[i][t] for j in others) / len(others))
            if selected[i][t]:
                partial.append(float(len(others) + 1 < len(mates)))
                position.append(t / length)
    aligned = []  # a group diverges where one of its rows has no token or the rows' tokens differ
    for i, row in enumerate(response):
        mates = [j for j in range(len(response)) if groups[j] == groups[i]]
        divergence = next((t for t in range(len(row)) if not all(response[j][t] for j in mates)
                           or len({tokens[j][t] for j in mates}) > 1), len(row))
        if sum(row):
            aligned.append(min(divergence, sum(row)) / sum(row))
    expected_agreement = sum(shares) / len(shares) if shares else math.nan
    _assert_same({"aligned": figures["aligned_share"], "agreement": figures["token_agreement"],
                  "partial": figures["selected_partial_group_fraction"],
                  "position": figures["selected_relative_position"]},
                 {"aligned": sum(aligned) / len(aligned) if aligned else math.nan,
                  "agreement": expected_agreement,
                  "partial": sum(partial) / len(partial) if partial else math.nan,
                  "position": sum(position) / len(position) if position else math.nan})

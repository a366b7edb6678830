"""ICT's ablations: the score metric (js, kl, wasserstein) and the complement of the top ratio,
against an independent sort of the keyed scores."""

from __future__ import annotations

import pytest
import torch
from selection_references import exact_count, make_inputs

from ict.core.selectors import (
    ICT_DEFAULT_REFERENCE,
    SELECTORS,
    required_js_references,
    select,
    select_tokens,
)
from ict.core.stats import JS_REFERENCES


def metric_inputs(seed: int, batch: int = 4, length: int = 16):
    """make_inputs plus a kl and a wasserstein score for every reference (continuous random
    values: no ties), keyed "<reference>:<metric>" as token_statistics keys them."""
    inputs = make_inputs(seed, batch, length)
    generator = torch.Generator().manual_seed(1000 + seed)
    for reference in JS_REFERENCES:
        inputs.stats.js_scores[f"{reference}:kl"] = torch.rand(batch, length, generator=generator) * 5
        inputs.stats.js_scores[f"{reference}:wasserstein"] = torch.rand(batch, length, generator=generator)
    return inputs


def sorted_top_mask(scores: torch.Tensor, response_mask: torch.Tensor, ratio: float, per_row: bool) -> torch.Tensor:
    """Independent restatement: sort the response tokens' scores (descending) over the batch or
    each row, and keep the first ceil(ratio * N)."""
    out = torch.zeros_like(response_mask)
    populations = [[row] for row in range(scores.shape[0])] if per_row else [list(range(scores.shape[0]))]
    for rows in populations:
        cells = [(float(scores[b, t]), b, t) for b in rows for t in range(scores.shape[1]) if response_mask[b, t]]
        cells.sort(reverse=True)
        for _, b, t in cells[: exact_count(ratio, len(cells))]:
            out[b, t] = True
    return out


@pytest.mark.parametrize("metric", ["js", "kl", "wasserstein"])
@pytest.mark.parametrize("reference", [ICT_DEFAULT_REFERENCE, "group_mean_loo", "prev"])
def test_ict_metric_ranks_by_the_keyed_score(metric, reference):
    inputs = metric_inputs(7)
    key = reference if metric == "js" else f"{reference}:{metric}"
    assert required_js_references("ict", {"metric": metric, "reference": reference}) == (key,)
    mask = select_tokens("ict", inputs, reference=reference, metric=metric, scope="batch", ratio=0.2)
    assert torch.equal(mask, sorted_top_mask(inputs.stats.js_scores[key], inputs.response_mask, 0.2, False))
    del inputs.stats.js_scores[key]
    with pytest.raises(ValueError, match="not computed"):
        select_tokens("ict", inputs, reference=reference, metric=metric)


def test_ict_bad_metric_is_a_one_line_error():
    from ict.core.selectors import check_options

    assert SELECTORS["ict"].defaults["metric"] == "js" and SELECTORS["ict"].defaults["complement"] is False
    check_options("ict", {"metric": "kl"})
    check_options("ict", {"metric": "wasserstein", "complement": True})
    # a score key as the reference ranked by KL while the options said metric=js
    for options, pattern in (({"metric": "tv"}, "unknown score metric 'tv'"),
                             ({"metric": "kl", "reference": "nope"}, "unknown JS reference 'nope'"),
                             ({"reference": "group_mean_absorbing:kl"},
                              "unknown JS reference 'group_mean_absorbing:kl'")):
        with pytest.raises(ValueError, match=pattern) as error:
            check_options("ict", options)
        assert "\n" not in str(error.value)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("ratio", [0.1, 0.3])
@pytest.mark.parametrize("scope", ["batch", "sequence"])
@pytest.mark.parametrize("metric", ["js", "kl"])
def test_ict_complement_is_the_response_minus_the_top(seed, ratio, scope, metric):
    inputs = metric_inputs(seed, batch=5, length=20)
    key = ICT_DEFAULT_REFERENCE if metric == "js" else f"{ICT_DEFAULT_REFERENCE}:{metric}"
    top = sorted_top_mask(inputs.stats.js_scores[key], inputs.response_mask, ratio, scope == "sequence")
    selection = select("ict", inputs, ratio=ratio, scope=scope, metric=metric, complement=True)
    assert torch.equal(selection.mask, inputs.response_mask & ~top)
    assert not selection.tie_decided.any()
    if scope == "batch":
        n = int(inputs.response_mask.sum())
        assert int(selection.mask.sum()) == n - exact_count(ratio, n)


def test_parse_token_selector_accepts_the_metric_and_the_complement():
    from ict.integrations import parse_token_selector

    name, options = parse_token_selector("ict:metric=kl")
    assert name == "ict" and options["metric"] == "kl" and not options.get("complement", False)
    assert required_js_references(name, options) == (f"{ICT_DEFAULT_REFERENCE}:kl",)
    name, options = parse_token_selector("ict:metric=wasserstein,complement=true,ratio=0.1")
    assert (options["metric"], options["complement"], options["ratio"]) == ("wasserstein", True, 0.1)
    assert required_js_references(name, options) == (f"{ICT_DEFAULT_REFERENCE}:wasserstein",)
    with pytest.raises(ValueError, match="unknown score metric"):
        parse_token_selector("ict:metric=tv")

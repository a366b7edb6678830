"""Per-step diagnostics against hand computations on hand-built distributions."""

from __future__ import annotations

import math

import pytest
import torch

from ict.core.diagnostics import DIAGNOSTIC_KEYS, jaccard, token_diagnostics
from ict.core.selector_registry import SelectionInputs, select
from ict.core.selectors import ICT_DEFAULT_REFERENCE
from ict.core.stats import TokenStatistics, token_statistics


def test_regime_fractions_on_hand_built_distributions():
    # Row 0: p = (0.7, 0.2, 0.1): beta = 0.49 + 0.04 + 0.01 = 0.54.
    # Row 1: p = (0.25, 0.25, 0.5): beta = 0.0625 * 2 + 0.25 = 0.375.
    probabilities = torch.tensor([[[0.7, 0.2, 0.1]] * 3, [[0.25, 0.25, 0.5]] * 3])
    logits = probabilities.log()
    tokens = torch.tensor([[0, 1, 2], [2, 0, 1]])  # sampled: 0.7, 0.2, 0.1 | 0.5, 0.25, 0.25
    response = torch.tensor([[1, 1, 1], [1, 1, 0]], dtype=torch.bool)
    selected = torch.tensor([[1, 0, 0], [0, 1, 0]], dtype=torch.bool)
    stats = token_statistics(logits, tokens, response, temperature=1.0)
    out = token_diagnostics(stats, response, selected, advantages=torch.tensor([1.0, -1.0]))
    sampled = [(0.7, 0.54), (0.2, 0.54), (0.1, 0.54), (0.5, 0.375), (0.25, 0.375)]
    assert out["above_beta_fraction"] == pytest.approx(2 / 5)  # 0.7 > 0.54 and 0.5 > 0.375
    assert out["above_beta_fraction_selected"] == pytest.approx(1 / 2)  # (0, 0) yes, (1, 1) no
    assert out["log_p_over_beta"] == pytest.approx(sum(math.log(p / b) for p, b in sampled) / 5, abs=1e-5)
    assert out["log_p_over_beta_selected"] == pytest.approx(
        (math.log(0.7 / 0.54) + math.log(0.25 / 0.375)) / 2, abs=1e-5)
    assert out["selected_positive_advantage_fraction"] == pytest.approx(1 / 2)
    assert set(out) == set(DIAGNOSTIC_KEYS)


def test_entropy_split_against_the_median():
    entropy = torch.tensor([[0.1, 0.9, 0.5, 0.3], [0.8, 0.2, 0.7, 0.4]])
    stats = token_statistics(torch.zeros(2, 4, 3), torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.bool),
                             temperature=1.0)
    stats.entropy = entropy
    response = torch.ones(2, 4, dtype=torch.bool)
    selected = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    # torch.median of 8 values is the lower middle: sorted 0.1 .2 .3 .4 .5 .7 .8 .9 -> 0.4
    out = token_diagnostics(stats, response, selected, torch.tensor([0.0, 0.0]))
    assert out["selected_high_entropy_fraction"] == pytest.approx(3 / 4)  # 0.9, 0.5, 0.8 above 0.4; 0.2 not
    assert out["selected_positive_advantage_fraction"] == 0.0


def test_a_nan_entropy_makes_both_entropy_splits_nan():
    """One NaN entropy (an unselected token's) made the median NaN, every `H > m` false: the
    fraction read 0.0 (only low-entropy tokens selected) while the ratio read NaN."""
    from ict.core.diagnostics import paper_figures

    entropy = torch.tensor([[0.1, 0.9, 0.5, float("nan")], [0.8, 0.2, 0.7, 0.4]])
    response = torch.ones(2, 4, dtype=torch.bool)
    selected = torch.tensor([[0, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    stats = _stats_with(entropy, torch.full((2, 4), 0.5))
    assert math.isnan(token_diagnostics(stats, response, selected, torch.zeros(2))["selected_high_entropy_fraction"])
    assert math.isnan(paper_figures(stats, response, selected)["selected_high_low_entropy_ratio"])


def test_jaccard_with_the_reference_selections():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 10, 7, generator=generator) * 2
    tokens = torch.randint(0, 7, (4, 10), generator=generator)
    response = torch.ones(4, 10, dtype=torch.bool)
    stats = token_statistics(logits, tokens, response, temperature=1.0, js_references=(ICT_DEFAULT_REFERENCE,),
                             group_ids=torch.tensor([0, 0, 1, 1]))
    entropy_order = sorted(range(40), key=lambda i: (-float(stats.entropy.flatten()[i]), i))
    top_entropy = torch.zeros(40, dtype=torch.bool)
    top_entropy[entropy_order[:8]] = True  # ceil(0.2 * 40)
    out = token_diagnostics(stats, response, top_entropy.view(4, 10), torch.ones(4))
    assert out["jaccard_entropy20"] == 1.0
    js = stats.js_scores[ICT_DEFAULT_REFERENCE]
    top_js = {10 * row + max(range(10), key=lambda t: float(js[row, t])) for row in range(4)}  # ceil(0.1 * 10) each
    expected = len(top_js & set(entropy_order[:8])) / len(top_js | set(entropy_order[:8]))
    assert out["jaccard_ict10"] == pytest.approx(expected)
    assert jaccard(torch.zeros(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool)) != jaccard(
        torch.ones(3, dtype=torch.bool), torch.ones(3, dtype=torch.bool))  # NaN vs 1.0
    none_selected = token_diagnostics(stats, response, torch.zeros(4, 10, dtype=torch.bool), torch.ones(4))
    assert math.isnan(none_selected["above_beta_fraction_selected"])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (masks on CPU, statistics on the GPU)")
def test_masks_on_cpu_with_statistics_on_the_gpu():
    # The trainer keeps the masks and advantages on the CPU; on a GPU the statistics live there.
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 6, 5, generator=generator)
    tokens = torch.randint(0, 5, (4, 6), generator=generator)
    response = torch.ones(4, 6, dtype=torch.bool)
    selected = torch.rand(4, 6, generator=generator) > 0.5
    advantages = torch.tensor([1.0, -1.0, 0.5, -0.5])
    group_ids = torch.tensor([0, 0, 1, 1])
    on_cpu = token_diagnostics(token_statistics(logits, tokens, response, 1.0, js_references=("group_mean",),
                                                group_ids=group_ids), response, selected, advantages)
    on_gpu = token_diagnostics(token_statistics(logits.cuda(), tokens.cuda(), response.cuda(), 1.0,
                                                js_references=("group_mean",), group_ids=group_ids.cuda()),
                               response, selected, advantages)
    assert on_gpu == pytest.approx(on_cpu, abs=1e-5, nan_ok=True)
    from ict.core.diagnostics import paper_figures

    figures_cpu = paper_figures(token_statistics(logits, tokens, response, 1.0, js_references=("group_mean",),
                                                 group_ids=group_ids), response, selected, reference="group_mean")
    figures_gpu = paper_figures(token_statistics(logits.cuda(), tokens.cuda(), response.cuda(), 1.0,
                                                 js_references=("group_mean",), group_ids=group_ids.cuda()),
                                response, selected, reference="group_mean")
    assert figures_gpu == pytest.approx(figures_cpu, abs=1e-5, nan_ok=True)


def test_selection_anatomy_on_hand_built_masks():
    from ict.core.diagnostics import ANATOMY_KEYS, selection_anatomy

    # Group 0: rows 0 (length 2, finished) and 1 (length 5 = T, truncated); group 1: row 2
    # (length 3, finished) alone. T = 5.
    response = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], dtype=torch.bool)
    groups = torch.tensor([4, 4, 9])
    selected = torch.tensor([[0, 1, 0, 0, 0], [1, 0, 1, 0, 1], [0, 0, 1, 0, 0]], dtype=torch.bool)
    tie = torch.tensor([[0, 1, 0, 0, 0], [0, 0, 0, 0, 0], [0, 0, 1, 0, 0]], dtype=torch.bool)
    out = selection_anatomy(selected, response, groups, tie_decided=tie)
    assert set(out) == set(ANATOMY_KEYS)
    # Fewer than G alive: row 1 at t = 2, 3, 4 (row 0 ended); a group of one never.
    # Selected: (0,1) no, (1,0) no, (1,2) yes, (1,4) yes, (2,2) no -> 2 / 5.
    assert out["selected_partial_group_fraction"] == pytest.approx(2 / 5)
    assert out["all_partial_group_fraction"] == pytest.approx(3 / 10)
    # t / L: 1/2, 0/5, 2/5, 4/5, 2/3.
    assert out["selected_relative_position"] == pytest.approx((1 / 2 + 0 + 2 / 5 + 4 / 5 + 2 / 3) / 5)
    every = (0 + 1 / 2) + (0 + 1 + 2 + 3 + 4) / 5 + (0 + 1 + 2) / 3
    assert out["all_relative_position"] == pytest.approx(every / 10)
    # End tokens: (0, 1) and (2, 2) (finished rows); row 1 is truncated. Both selected.
    assert out["selected_end_token_fraction"] == pytest.approx(2 / 5)
    assert out["all_end_token_fraction"] == pytest.approx(2 / 10)
    assert out["selected_tie_fraction"] == pytest.approx(2 / 5)
    # Declared: row 2 not finished -> one end token.
    out = selection_anatomy(selected, response, groups, finished=torch.tensor([True, False, False]))
    assert out["selected_end_token_fraction"] == pytest.approx(1 / 5)
    assert math.isnan(out["selected_tie_fraction"])
    empty = selection_anatomy(torch.zeros_like(selected), response, groups)
    assert math.isnan(empty["selected_relative_position"]) and empty["all_relative_position"] > 0


# ---------------------------------------------------------------------------------------------
# The paper's figures (p(a*), high:low entropy, knee), top tokens, aligned share


def test_selection_anatomy_counts_only_the_selected_response_tokens() -> None:
    """Selected padding is not a selected token: rows 0 (length 2) and 1 (length 4) of one group,
    selected (0, 1), (1, 3) and padding (0, 3). Selected partial-group: (1, 3) only (row 0 ended)
    -> 1/2; relative position (1/2 + 3/4) / 2; end tokens: both -> 1 (not 1/3, 5/12, 2/3)."""
    from ict.core.diagnostics import selection_anatomy

    response = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    selected = torch.tensor([[0, 1, 0, 1], [0, 0, 0, 1]], dtype=torch.bool)
    out = selection_anatomy(selected, response, torch.tensor([0, 0]), finished=torch.tensor([True, True]))
    assert out["selected_partial_group_fraction"] == pytest.approx(1 / 2)
    assert out["selected_relative_position"] == pytest.approx((1 / 2 + 3 / 4) / 2)
    assert out["selected_end_token_fraction"] == pytest.approx(1.0)


@pytest.mark.parametrize("group_ids", [torch.tensor([4, 4]), torch.tensor([4, 4, 9, 9]), torch.tensor([[4], [4], [9]]),
                                       torch.tensor(4)])
def test_selection_anatomy_refuses_group_ids_not_of_shape_b(group_ids: torch.Tensor) -> None:
    """``group_ids`` must be ``[B]``: any other shape is a one-line ValueError naming ``[B]``, not
    torch's index_add_ / bincount error."""
    from ict.core.diagnostics import selection_anatomy

    response = torch.ones(3, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"group_ids must be \[B\] = \[3\].*got \[") as error:
        selection_anatomy(response.clone(), response, group_ids)
    assert "\n" not in str(error.value)


@pytest.mark.parametrize("finished", [torch.tensor([True]), torch.tensor([True, False]),
                                      torch.tensor([[True], [False], [True]])])
def test_selection_anatomy_refuses_finished_not_of_shape_b(finished: torch.Tensor) -> None:
    """``finished`` must be ``[B]``: a ``[1]`` or ``[B, 1]`` one used to broadcast (silently
    other end-token figures), a ``[2]`` one gave torch's size-mismatch error."""
    from ict.core.diagnostics import selection_anatomy

    response = torch.ones(3, 5, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"finished must be \[B\] = \[3\], got \["):
        selection_anatomy(response.clone(), response, torch.tensor([0, 0, 1]), finished=finished)


def test_selection_anatomy_refuses_masks_that_would_broadcast() -> None:
    """A ``[1, T]`` selection (or tie mask) used to broadcast over every row: silently wrong
    figures (the selected partial-group fraction of a one-row mask read 1.0 instead of 0.5)."""
    from ict.core.diagnostics import selection_anatomy

    response = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    groups = torch.tensor([0, 0])
    with pytest.raises(ValueError, match=r"selected_mask must be \[B, T\].*\[2, 3\], got \[1, 3\]"):
        selection_anatomy(response[1:], response, groups)
    with pytest.raises(ValueError, match=r"tie_decided must be \[B, T\]"):
        selection_anatomy(response, response, groups, tie_decided=response[1:])


def _stats_with(entropy: torch.Tensor, probabilities: torch.Tensor, scores: torch.Tensor | None = None):
    """Statistics whose sampled-token probabilities, entropies and ICT scores are set by hand."""
    from ict.core.stats import TokenStatistics

    js = {} if scores is None else {ICT_DEFAULT_REFERENCE: scores}
    return TokenStatistics(probabilities.log(), entropy, torch.zeros_like(entropy), js)


def test_a_selected_token_at_the_median_entropy_counts_as_low() -> None:
    """Both entropy splits put a token whose entropy equals the median ``m`` on the low side
    (``H > m`` is high, ``H <= m`` low): entropies 1..5, median 3, selecting 3 and 5 gives a high
    fraction 1/2 and a high:low ratio 1 (counting 3 as high would give 1 and inf)."""
    from ict.core.diagnostics import paper_figures

    entropy = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]])
    response = torch.ones(1, 5, dtype=torch.bool)
    selected = torch.tensor([[0, 0, 1, 0, 1]], dtype=torch.bool)
    stats = _stats_with(entropy, torch.full((1, 5), 0.5))
    assert token_diagnostics(stats, response, selected, torch.ones(1))["selected_high_entropy_fraction"] == 0.5
    assert paper_figures(stats, response, selected)["selected_high_low_entropy_ratio"] == 1.0


def test_jaccard_ict10_compares_with_ict_at_its_defaults_the_top_tenth_of_each_response() -> None:
    """``jaccard_ict10`` is the overlap with ICT's default selection: the top ``ceil(0.1 L)`` of
    each response by the ICT score. Two responses of 10 tokens with scores 0..9 and 10..19: the
    reference is each one's highest (9 and 19), so selecting exactly them gives 1; the step's top
    two (18, 19: a batch-wide top 10%) give 1/3, and the top four 1/5."""
    scores = torch.arange(20.0).view(2, 10)
    response = torch.ones(2, 10, dtype=torch.bool)
    stats = _stats_with(torch.ones(2, 10), torch.full((2, 10), 0.5), scores)
    each_top = (scores == 9) | (scores == 19)
    assert token_diagnostics(stats, response, each_top, torch.ones(2))["jaccard_ict10"] == 1.0
    assert token_diagnostics(stats, response, scores >= 18, torch.ones(2))["jaccard_ict10"] == pytest.approx(1 / 3)
    assert token_diagnostics(stats, response, scores >= 16, torch.ones(2))["jaccard_ict10"] == pytest.approx(1 / 5)


def test_an_ict_run_at_its_defaults_logs_jaccard_ict10_of_one() -> None:
    """What the registry's ``ict`` selector selects at its defaults is what ``jaccard_ict10``
    compares with, on responses of unequal lengths (ceil(0.1 * 7) = 1, ceil(0.1 * 12) = 2)."""
    generator = torch.Generator().manual_seed(3)
    logits = torch.randn(4, 12, 9, generator=generator) * 2
    tokens = torch.randint(0, 9, (4, 12), generator=generator)
    response = torch.ones(4, 12, dtype=torch.bool)
    response[1, 7:] = False
    response[2, 11:] = False
    stats = token_statistics(logits, tokens, response, temperature=1.0, js_references=(ICT_DEFAULT_REFERENCE,),
                             group_ids=torch.tensor([0, 0, 1, 1]))
    mask = select("ict", SelectionInputs(stats=stats, response_mask=response, group_ids=torch.tensor([0, 0, 1, 1]))).mask
    assert mask.sum(dim=1).tolist() == [2, 1, 2, 2]
    assert token_diagnostics(stats, response, mask, torch.ones(4))["jaccard_ict10"] == 1.0


def test_selected_token_probability_and_entropy_ratio_by_hand():
    from ict.core.diagnostics import PAPER_FIGURE_KEYS, paper_figures

    probabilities = torch.tensor([[0.1, 0.3, 0.5, 0.9], [0.2, 0.6, 0.4, 1.0]])
    entropy = torch.tensor([[0.1, 0.9, 0.5, 0.3], [0.8, 0.2, 0.7, 0.4]])
    response = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    selected = torch.tensor([[1, 1, 0, 1], [1, 1, 0, 1]], dtype=torch.bool)  # (1, 3) is not a response token
    out = paper_figures(_stats_with(entropy, probabilities), response, selected)
    assert set(out) == set(PAPER_FIGURE_KEYS)
    # selected p: 0.1, 0.3, 0.9, 0.2, 0.6 -> mean 0.42; population variance
    # ((-.32)^2 + (-.12)^2 + .48^2 + (-.22)^2 + .18^2) / 5 = (.1024 + .0144 + .2304 + .0484 + .0324) / 5 = .0856
    assert out["selected_token_prob_mean"] == pytest.approx(0.42)
    assert out["selected_token_prob_std"] == pytest.approx(math.sqrt(0.0856))
    # all 7 response tokens: 0.1 .3 .5 .9 .2 .6 .4 -> mean 3.0 / 7
    mean = 3.0 / 7
    values = [0.1, 0.3, 0.5, 0.9, 0.2, 0.6, 0.4]
    assert out["all_token_prob_mean"] == pytest.approx(mean)
    assert out["all_token_prob_std"] == pytest.approx(math.sqrt(sum((v - mean) ** 2 for v in values) / 7))
    # median of the 7 response entropies .1 .2 .3 .5 .7 .8 .9 -> 0.5; selected entropies
    # .1 .9 .3 | .8 .2: above 0.5 -> .9, .8 (2); at or below -> .1, .3, .2 (3)
    assert out["selected_high_low_entropy_ratio"] == pytest.approx(2 / 3)
    # beta = exp(-H2) = 1 here (renyi2 = 0): p > 1 never
    assert out["above_beta_fraction_selected"] == 0.0
    only_high = paper_figures(_stats_with(entropy, probabilities), response,
                              torch.tensor([[0, 1, 0, 0], [1, 0, 0, 0]], dtype=torch.bool))
    assert only_high["selected_high_low_entropy_ratio"] == math.inf
    assert only_high["selected_token_prob_std"] == pytest.approx(0.05)  # p 0.3 and 0.2
    nothing = paper_figures(_stats_with(entropy, probabilities), response, torch.zeros_like(response))
    assert math.isnan(nothing["selected_high_low_entropy_ratio"]) and math.isnan(nothing["selected_token_prob_mean"])
    assert math.isnan(nothing["score_knee_fraction"])  # no ICT scores given


def _perpendicular_knee(values: list[float]) -> float:
    """Independent Kneedle: the point of a descending curve farthest below the straight line from
    its first to its last point, by the perpendicular distance (cross product), on raw scores
    with x = rank / L rescaled to [0, 1] in both axes."""
    ordered = sorted(values, reverse=True)
    n = len(ordered)
    points = [((r - 1) / (n - 1), (s - ordered[-1]) / (ordered[0] - ordered[-1])) for r, s in enumerate(ordered, 1)]
    (x0, y0), (x1, y1) = points[0], points[-1]
    norm = math.hypot(x1 - x0, y1 - y0)
    # signed distance, positive below the line (the line runs from top left to bottom right)
    distance = [((x1 - x0) * (y0 - y) - (y1 - y0) * (x0 - x)) / norm for x, y in points]
    best = max(range(n), key=lambda i: (distance[i], -i))
    return (best + 1) / n


def test_score_knee_of_piecewise_linear_curves():
    from ict.core.diagnostics import paper_figures, score_knees

    t = 20
    # Row 0, L = 20: 1 -> 0.1 linearly over ranks 1..3, then 0.1 -> 0 over ranks 3..20. Below the
    # chord c_r = 1 - (r - 1) / 19 by: r = 2: 0.947 - 0.55 = 0.397; r = 3: 0.895 - 0.1 = 0.795;
    # r = 4: 0.842 - 0.094 = 0.748 -> the knee is rank 3, x = 3 / 20 = 0.15.
    row0 = [1.0, 0.55, 0.1] + [0.1 * (20 - r) / 17 for r in range(4, 21)]
    # Row 1, L = 10: 1, then 0.2 -> 0 linearly over ranks 2..10; c_r = 1 - (r - 1) / 9:
    # r = 2: 0.889 - 0.2 = 0.689, r = 3: 0.778 - 0.175 = 0.603 -> rank 2, x = 0.2.
    row1 = [1.0] + [0.2 * (10 - r) / 8 for r in range(2, 11)]
    # Row 2, L = 6: a plateau that drops at its end (saturation): concave, nowhere below the chord.
    row2 = [0.6, 0.6, 0.6, 0.6, 0.54, 0.0]
    # Row 3, L = 2: too short.
    row3 = [0.3, 0.1]
    rows = [row0, row1, row2, row3]
    scores = torch.zeros(4, t)
    response = torch.zeros(4, t, dtype=torch.bool)
    generator = torch.Generator().manual_seed(0)
    for index, row in enumerate(rows):
        shuffled = torch.tensor(row)[torch.randperm(len(row), generator=generator)]  # unsorted in time
        scores[index, : len(row)] = shuffled
        response[index, : len(row)] = True
    knees = score_knees(scores, response)
    assert knees[0].item() == pytest.approx(0.15) and knees[1].item() == pytest.approx(0.2)
    assert math.isnan(knees[2].item()) and math.isnan(knees[3].item())
    assert _perpendicular_knee(row0) == pytest.approx(0.15) and _perpendicular_knee(row1) == pytest.approx(0.2)
    out = paper_figures(_stats_with(torch.rand(4, t, generator=generator), torch.full((4, t), 0.5), scores),
                        response, response)
    assert out["score_knee_fraction"] == pytest.approx((0.15 + 0.2) / 2)
    assert out["score_knee_share"] == pytest.approx(2 / 3)  # rows 0, 1 of the three with L >= 3


def test_score_knee_of_random_curves_matches_the_perpendicular_distance():
    from ict.core.diagnostics import score_knees

    generator = torch.Generator().manual_seed(3)
    scores = torch.rand(6, 30, generator=generator) ** 4  # convex-ish: many small, few large
    lengths = [30, 25, 12, 7, 4, 3]
    response = torch.arange(30)[None, :] < torch.tensor(lengths)[:, None]
    for offset in (0.0, -2.0):  # any real scores: below the padding's values too (e.g. log-probs)
        knees = score_knees(scores + offset, response)
        for index, length in enumerate(lengths):
            expected = _perpendicular_knee(scores[index, :length].double().tolist())
            assert knees[index].item() == pytest.approx(expected), (offset, index)


def test_top_token_counts_by_hand():
    from ict.core.diagnostics import top_token_counts

    token_ids = torch.tensor([[5, 7, 5, 9, 1], [7, 7, 3, 5, 2]])
    response = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    selected = torch.tensor([[1, 1, 1, 0, 1], [0, 1, 0, 1, 0]], dtype=torch.bool)  # (0, 4) not a response token
    out = top_token_counts(token_ids, response, selected, k=2)
    # selected: 5, 7, 5 | 7, 5 -> 5 x3, 7 x2; unselected: 9 | 7, 3, 2 -> each once: ids ascending
    assert out == {"selected": [(5, 3), (7, 2)], "unselected": [(2, 1), (3, 1)]}


def test_aligned_share_by_hand():
    from ict.core.diagnostics import aligned_share

    token_ids = torch.tensor([
        [1, 2, 3, 4, 5, 0],   # group 0: rows 0, 1 agree on 3 tokens, then differ -> D = 3
        [1, 2, 3, 9, 9, 9],
        [4, 4, 0, 0, 0, 0],   # group 1: row 2 ends after 2 identical tokens -> D = 2
        [4, 4, 4, 0, 0, 0],
        [8, 0, 0, 0, 0, 0],   # group 2: differ at once -> D = 0
        [7, 0, 0, 0, 0, 0],
    ])
    lengths = torch.tensor([5, 6, 2, 3, 1, 1])
    response = torch.arange(6)[None, :] < lengths[:, None]
    shares = [3 / 5, 3 / 6, 2 / 2, 2 / 3, 0.0, 0.0]
    assert aligned_share(token_ids, response, torch.tensor([0, 0, 1, 1, 2, 2])) == pytest.approx(sum(shares) / 6)


def test_a_group_diverges_where_its_shortest_completion_ends_even_if_the_padding_matches():
    """Padding that holds the same id as the longer completion's tokens (e.g. pad = EOS) is no
    agreement: row 0 ends after 2 tokens, so D = 2 and the shares are 2/2 and 2/4."""
    from ict.core.diagnostics import aligned_share

    token_ids = torch.tensor([[4, 4, 0, 0], [4, 4, 0, 0]])
    response = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]], dtype=torch.bool)
    assert aligned_share(token_ids, response, torch.tensor([0, 0])) == pytest.approx((2 / 2 + 2 / 4) / 2)


def test_group_diagnostics_refuse_group_ids_that_do_not_cover_the_batch():
    """A ``group_ids`` shorter than the batch was read as the first rows' groups: a share over the
    rows it named (1.0 here, where row 3 disagrees: 0.0)."""
    from ict.core.diagnostics import aligned_share, token_agreement

    token_ids = torch.tensor([[1, 2, 3]] * 3 + [[9, 9, 9]])
    response = torch.ones(4, 3, dtype=torch.bool)
    assert aligned_share(token_ids, response, torch.zeros(4, dtype=torch.long)) == 0.0
    for function in (aligned_share, token_agreement):
        with pytest.raises(ValueError, match=r"^group_ids must be \[B\] = \[4\], got \[3\]"):
            function(token_ids, response, torch.zeros(3, dtype=torch.long))


def test_paper_figures_of_responses_shorter_than_a_knee_are_nan():
    """Knees need 3 tokens: a batch 0 or 2 positions wide has none (the 0-wide one raised an
    IndexError)."""
    from ict.core.diagnostics import paper_figures, score_knees

    for width in (0, 2):
        zeros, mask = torch.zeros(2, width), torch.ones(2, width, dtype=torch.bool)
        assert torch.isnan(score_knees(zeros, mask)).all() and score_knees(zeros, mask).shape == (2,)
        figures = paper_figures(TokenStatistics(zeros, zeros, zeros, {ICT_DEFAULT_REFERENCE: zeros}), mask, mask)
        assert math.isnan(figures["score_knee_fraction"]) and math.isnan(figures["score_knee_share"])


def test_a_tiny_run_logs_the_paper_figures_and_top_tokens(tiny_model_dir, arithmetic_task, tmp_path, one_thread):
    """One ICT step on the tiny model: the metrics line holds every new key; the top-token lists
    are [string, count] pairs whose counts add up to at most the selected / unselected tokens."""
    import json

    from ict.core.diagnostics import PAPER_FIGURE_KEYS, TOP_TOKEN_KEYS
    from ict.training.config import TrainConfig
    from ict.training.trainer import train

    run = tmp_path / "run"
    train(TrainConfig(model=str(tiny_model_dir), dataset=str(arithmetic_task), reward="last_number",
                      method="ict", num_steps=1, prompts_per_step=2, num_generations=4, max_new_tokens=8,
                      micro_batch_size=8, run_dir=str(run), progress=False, tensorboard=True, seed=1,
                      full_token_warmup_steps=0))
    line = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])
    assert set(PAPER_FIGURE_KEYS) <= set(line) and set(TOP_TOKEN_KEYS.values()) <= set(line)
    assert 0.0 < line["selected_token_prob_mean"] <= 1.0 and 0.0 < line["all_token_prob_mean"] <= 1.0
    assert line["score_knee_fraction"] is None or 0.0 < line["score_knee_fraction"] <= 1.0
    tokens = round(line["response_length_mean"] * 8)
    selected = sum(count for _, count in line["top_selected_tokens"])
    unselected = sum(count for _, count in line["top_unselected_tokens"])
    assert all(isinstance(text, str) and count >= 1 for text, count in
               line["top_selected_tokens"] + line["top_unselected_tokens"])
    assert 1 <= len(line["top_selected_tokens"]) <= 10 and selected + unselected <= tokens
    assert selected <= 0.1 * tokens + 8  # at most ceil(0.1 L) of each of the 8 responses


def test_token_agreement_by_hand():
    from ict.core.diagnostics import token_agreement

    token_ids = torch.tensor([
        [1, 2, 3, 0],   # group 0 (3 rows)
        [1, 2, 4, 5],
        [7, 2, 3, 0],
        [6, 6, 0, 0],   # group 1 (2 rows): row 4 alone at t = 1
        [6, 0, 0, 0],
    ])
    lengths = torch.tensor([3, 4, 3, 2, 1])
    response = torch.arange(4)[None, :] < lengths[:, None]
    # group 0, t = 0: ids 1, 1, 7 -> 1/2, 1/2, 0; t = 1: all 2 -> 1, 1, 1; t = 2: 3, 4, 3 -> 1/2, 0, 1/2;
    # t = 3: row 1 alone -> left out. Group 1, t = 0: 6, 6 -> 1, 1; t = 1: row 3 alone -> left out.
    shares = [0.5, 0.5, 0.0, 1.0, 1.0, 1.0, 0.5, 0.0, 0.5, 1.0, 1.0]
    assert token_agreement(token_ids, response, torch.tensor([0, 0, 0, 1, 1])) == pytest.approx(sum(shares) / 11)


def test_a_sampled_token_of_probability_beta_is_not_above_beta() -> None:
    """``p(a*) > beta`` is strict: a one-hot distribution (``p(a*) = beta = sum_v p_v^2 = 1``, a
    saturated confident token, ``log p + H2 = 0``) is not above beta; beside it ``p = (0.7, 0.2,
    0.1)`` with ``a* = 0`` (``0.7 > beta = 0.54``) is. Counting ties as above gave 1 instead of 1/2."""
    from ict.core.diagnostics import paper_figures

    logits = torch.tensor([[[0.0, -math.inf, -math.inf], [math.log(0.7), math.log(0.2), math.log(0.1)]]])
    tokens = torch.tensor([[0, 0]])
    response = torch.ones(1, 2, dtype=torch.bool)
    stats = token_statistics(logits, tokens, response, temperature=1.0)
    out = token_diagnostics(stats, response, response, torch.tensor([1.0]))
    assert out["above_beta_fraction"] == pytest.approx(1 / 2)
    assert out["above_beta_fraction_selected"] == pytest.approx(1 / 2)
    assert paper_figures(stats, response, response)["above_beta_fraction"] == pytest.approx(1 / 2)


def test_a_constant_score_curve_has_no_knee() -> None:
    """A response whose scores are all equal (``s_1 = s_L``: e.g. every score saturated at ln 2, or
    all 0) has no knee, though every point but the last lies below the chord in ``y = 0`` units: it
    counts among the ``L >= 3`` responses of ``score_knee_share`` as one without a knee. Beside it a
    curve 1, 0, 0, 0 has its knee at rank 2 (``x = 2/4``: below the chord by 2/3)."""
    from ict.core.diagnostics import paper_figures, score_knees

    scores = torch.tensor([[math.log(2.0)] * 5, [1.0, 0.0, 0.0, 0.0, 0.0]])
    response = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]], dtype=torch.bool)
    knees = score_knees(scores, response)
    assert math.isnan(knees[0].item()) and knees[1].item() == pytest.approx(0.5)
    out = paper_figures(_stats_with(torch.rand(2, 5), torch.full((2, 5), 0.5), scores), response, response)
    assert out["score_knee_fraction"] == pytest.approx(0.5)
    assert out["score_knee_share"] == pytest.approx(1 / 2)


def test_a_selection_mask_over_the_padding_counts_only_response_tokens() -> None:
    """The diagnostics count selected *response* tokens: a selection mask that is True at padding
    positions too (e.g. every position, GRPO's "all tokens") gives the figures of the response
    tokens alone. Two rows, p = (0.7, 0.2, 0.1) everywhere, beta = 0.54; row 0 samples 0, 1, 2
    (p = 0.7, 0.2, 0.1) with 3 response tokens, row 1 samples 0 (0.7) with 1 and padding ids 1, 1
    after it (0.2, below beta): above beta 2 of 4; advantages +1 and -1: positive 3 of 4.
    Counting the padding gave above 2/6 and positive 3/6."""
    logits = torch.tensor([math.log(0.7), math.log(0.2), math.log(0.1)]).expand(2, 3, 3).contiguous()
    tokens = torch.tensor([[0, 1, 2], [0, 1, 1]])
    response = torch.tensor([[1, 1, 1], [1, 0, 0]], dtype=torch.bool)
    stats = token_statistics(logits, tokens, torch.ones(2, 3, dtype=torch.bool), temperature=1.0)
    out = token_diagnostics(stats, response, torch.ones(2, 3, dtype=torch.bool), torch.tensor([1.0, -1.0]))
    assert out["above_beta_fraction_selected"] == pytest.approx(2 / 4)
    assert out["selected_positive_advantage_fraction"] == pytest.approx(3 / 4)
    assert out["log_p_over_beta_selected"] == pytest.approx(
        (2 * math.log(0.7 / 0.54) + math.log(0.2 / 0.54) + math.log(0.1 / 0.54)) / 4, abs=1e-5)

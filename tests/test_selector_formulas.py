"""The selectors' formulas at their boundaries, against hand values and float64 loops: Clip-Cov /
KL-Cov's centred covariance, Clip-Cov's open band and its skip of tokens the ratio clip already
clips, their count ``max(1, int(ratio N))`` of response tokens, STAPO's strict ``p < tau_p``, the
tie rule's inclusive tolerance (``|s - s_k| <= tol``, measured from the k-th largest), counts whose
float product lands an ulp above an integer (at any size), ``random``'s generator,
``unit="token_id"``'s scope and the option values ``none`` and ``yes``/``no``. Each test pins a detail that the broader tests in
``test_selectors.py`` leave free."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from selection_references import exact_count, make_inputs, reference_top_unique

from ict.core.ranking import TIE_TOLERANCE, population_rows, selection_counts, top_count
from ict.core.selectors import (
    SelectionInputs,
    linear_quantile,
    parse_selector_options,
    resolve_options,
    select,
    select_tokens,
    stapo_silenced_mask,
    token_covariance,
)
from ict.core.stats import TokenStatistics


def _inputs(log_probs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
            entropy: torch.Tensor | None = None, **extra) -> SelectionInputs:
    entropy = torch.ones_like(log_probs) if entropy is None else entropy
    return SelectionInputs(TokenStatistics(log_probs, entropy, entropy.clone()), mask, advantages, **extra)


def test_token_covariance_is_the_centred_cross_product_over_the_response_tokens() -> None:
    """``Cov_t = (lp_t - mean lp) (A_t - mean A)``, both means over the response tokens only, 0
    elsewhere: against a float64 loop, on inputs whose two means are far from 0 (dropping either
    centring, or averaging over a wrong count, moves every value)."""
    generator = torch.Generator().manual_seed(5)
    log_probs = -3.0 * torch.rand(3, 6, generator=generator) - 0.5
    advantages = torch.tensor([2.0, 0.5, -0.25])  # mean over the tokens ~1: not centred
    mask = torch.rand(3, 6, generator=generator) > 0.3
    mask[0, 0] = True
    cells = [(b, t) for b in range(3) for t in range(6) if mask[b, t]]
    mean_lp = math.fsum(float(log_probs[c]) for c in cells) / len(cells)
    mean_a = math.fsum(float(advantages[b]) for b, _ in cells) / len(cells)
    covariance = token_covariance(log_probs, advantages.unsqueeze(-1).expand(3, 6), mask)
    assert covariance.dtype == torch.float64
    for b in range(3):
        for t in range(6):
            expected = (float(log_probs[b, t]) - mean_lp) * (float(advantages[b]) - mean_a) if mask[b, t] else 0.0
            assert abs(float(covariance[b, t]) - expected) < 1e-12, (b, t)


# log p [[-1, -3], [-1, -3]] (mean -2) and A [2, -2] (mean 0): Cov = [[2, -2], [-2, 2]], exact in float64
_LOG_PROBS = torch.tensor([[-1.0, -3.0], [-1.0, -3.0]])
_ADVANTAGES = torch.tensor([2.0, -2.0])
_MASK = torch.ones(2, 2, dtype=torch.bool)


def test_clip_cov_band_is_open_at_both_ends() -> None:
    """Clip-Cov cuts tokens with ``cov_low < Cov < cov_high`` (strict): covariances equal to an end
    are never cut. With ratio 1 every token of the band is cut, so the mask is deterministic."""
    inputs = _inputs(_LOG_PROBS, _ADVANTAGES, _MASK, generator=torch.Generator().manual_seed(0))
    assert token_covariance(_LOG_PROBS, _ADVANTAGES.unsqueeze(-1).expand(2, 2), _MASK).tolist() == [
        [2.0, -2.0], [-2.0, 2.0]]
    # Cov = 2 lies on the low end of (2, 5): nothing is cut
    assert torch.equal(select_tokens("clip_cov", inputs, ratio=1.0, cov_low=2.0, cov_high=5.0), _MASK)
    # Cov = 2 lies on the high end of (-5, 2): only the two Cov = -2 tokens are cut
    kept = select_tokens("clip_cov", inputs, ratio=1.0, cov_low=-5.0, cov_high=2.0)
    assert kept.tolist() == [[True, False], [False, True]]
    # (1, 5) holds the two Cov = 2 tokens: both cut
    kept = select_tokens("clip_cov", inputs, ratio=1.0, cov_low=1.0, cov_high=5.0)
    assert kept.tolist() == [[False, True], [True, False]]


def test_clip_cov_leaves_alone_the_tokens_the_ratio_clip_already_clips() -> None:
    """A band token whose clipped surrogate term is the active one (``-A clip(r) > -A r``: r above
    1 + clip_high with A > 0, or below 1 - clip_low with A < 0) already has no gradient: Clip-Cov
    does not spend a cut on it. Band (1, 5) holds (0, 0) (A = 2) and (1, 1) (A = -2)."""
    clip_range = (0.2, 0.28)

    def kept_with(old_log_probs: torch.Tensor) -> list[list[bool]]:
        inputs = _inputs(_LOG_PROBS, _ADVANTAGES, _MASK, generator=torch.Generator().manual_seed(0),
                         old_log_probs=old_log_probs, clip_range=clip_range)
        return select_tokens("clip_cov", inputs, ratio=1.0, cov_low=1.0, cov_high=5.0).tolist()

    # (0, 0): r = e > 1.28 with A = 2 -> clipped (-2 * 1.28 > -2 e): kept; (1, 1): r = 1 -> cut
    old = _LOG_PROBS.clone()
    old[0, 0] -= 1.0
    assert kept_with(old) == [[True, True], [True, False]]
    # (1, 1): r = 1/e < 0.8 with A = -2 -> clipped (2 * 0.8 > 2 / e): kept; (0, 0): r = 1 -> cut
    old = _LOG_PROBS.clone()
    old[1, 1] += 1.0
    assert kept_with(old) == [[False, True], [True, True]]
    # (1, 1): r = e with A = -2 is not clipped (the unclipped 2 e is the larger term): cut as well
    old = _LOG_PROBS.clone()
    old[1, 1] -= 1.0
    assert kept_with(old) == [[False, True], [True, False]]
    # between the two ends (which clip_low and clip_high each bound): (0, 0) r = 1.25 <= 1.28 with
    # A = 2 is not clipped (cut); (1, 1) r = 0.75 < 0.8 with A = -2 is (kept)
    old = _LOG_PROBS.clone()
    old[0, 0] -= math.log(1.25)
    old[1, 1] -= math.log(0.75)
    assert kept_with(old) == [[False, True], [True, True]]


def test_a_non_finite_token_leaves_the_other_tokens_covariance_cut_and_penalty_alone() -> None:
    """One NaN log-prob among the response tokens: the covariance of the others uses the means of
    the finite tokens (log p: -2, A: (3 x 2 - 2 x 2) / 5 = 0.4), so Clip-Cov cuts and KL-Cov
    penalises what they would without it, and the NaN token itself is neither cut nor penalised.
    Before, the NaN made every covariance NaN: Clip-Cov silently cut nothing and KL-Cov penalised
    the first tokens by position. A NaN advantage likewise leaves its row out of the means."""
    log_probs = torch.tensor([[-1.0, -3.0, -2.0], [-1.0, -3.0, math.nan]])
    advantages = torch.tensor([2.0, -2.0])
    mask = torch.ones(2, 3, dtype=torch.bool)
    covariance = token_covariance(log_probs, advantages.unsqueeze(-1).expand(2, 3), mask)
    expected = [[1.6, -1.6, 0.0], [-2.4, 2.4]]
    assert all(abs(float(covariance[b, t]) - value) < 1e-12
               for b, row in enumerate(expected) for t, value in enumerate(row))
    assert math.isnan(float(covariance[1, 2]))

    def inputs() -> SelectionInputs:
        return _inputs(log_probs, advantages, mask, generator=torch.Generator().manual_seed(0))

    # band (1, 3) holds (0, 0) = 1.6 and (1, 1) = 2.4: both cut (ratio 1); the NaN token kept
    kept = select_tokens("clip_cov", inputs(), ratio=1.0, cov_low=1.0, cov_high=3.0)
    assert kept.tolist() == [[False, True, True], [True, False, True]]
    # int(0.34 x 6) = 2 penalised: the two largest covariances, 2.4 and 1.6
    penalty = select("kl_cov", inputs(), ratio=0.34, kl_coef=1.0).kl_penalty
    assert penalty.tolist() == [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    # ratio 1: all 6 would be penalised, but only the 5 finite tokens can be
    penalty = select("kl_cov", inputs(), ratio=1.0, kl_coef=1.0).kl_penalty
    assert penalty.tolist() == [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]
    # a NaN advantage: its row is NaN, the other two rows are _LOG_PROBS' exact [[2, -2], [-2, 2]]
    rows = torch.cat([_LOG_PROBS, torch.tensor([[-2.0, -2.0]])])
    covariance = token_covariance(rows, torch.tensor([[2.0], [-2.0], [math.nan]]).expand(3, 2),
                                  torch.ones(3, 2, dtype=torch.bool))
    assert covariance[:2].tolist() == [[2.0, -2.0], [-2.0, 2.0]] and covariance[2].isnan().all()


def test_stapo_probability_threshold_is_strict() -> None:
    """STAPO's candidates need ``p(token) < tau_p`` (strict): at ``tau_p = 1`` a token of
    probability exactly 1 (log-prob 0) is no candidate, so nothing is silenced; just above it is
    one, and the entropy quantile rule applies (0.75 quantile of 0.1..0.4 = 0.325)."""
    log_probs = torch.zeros(1, 4)
    entropy = torch.tensor([[0.1, 0.2, 0.3, 0.4]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    inputs = _inputs(log_probs, torch.tensor([1.0]), mask, entropy)
    assert torch.equal(select_tokens("stapo", inputs, tau_p=1.0), mask)
    inputs.stats.log_probs = torch.full((1, 4), math.log(0.5))
    assert select_tokens("stapo", inputs, tau_p=1.0).tolist() == [[False, False, False, True]]


def test_a_nan_entropy_token_is_never_silenced_and_leaves_the_others_threshold_alone() -> None:
    """A STAPO candidate (A > 0, p < tau_p) whose entropy is NaN is kept and stays out of the
    quantile: the other candidates (entropies 1, 2, 3, 4: 0.75 quantile = 3 + 0.25 = 3.25) are
    silenced exactly as without it (1, 2, 3). Before, the NaN made the threshold NaN and nothing
    was silenced in the whole batch."""
    log_probs = torch.full((1, 6), math.log(0.001))
    log_probs[0, 5] = math.log(0.5)  # no candidate
    mask = torch.ones(1, 6, dtype=torch.bool)
    entropy = torch.tensor([[1.0, 2.0, 3.0, 4.0, math.nan, 0.5]])
    kept = select_tokens("stapo", _inputs(log_probs, torch.tensor([1.0]), mask, entropy))
    assert kept.tolist() == [[False, False, False, True, True, True]]
    without = select_tokens("stapo", _inputs(log_probs[:, [0, 1, 2, 3, 5]], torch.tensor([1.0]),
                                             mask[:, :5], entropy[:, [0, 1, 2, 3, 5]]))
    assert without.tolist() == [[False, False, False, True, True]]


def test_linear_quantile_is_numpys_linear_quantile_at_the_boundaries() -> None:
    """:func:`linear_quantile` (STAPO's threshold) against ``numpy.quantile``'s default (linear)
    method in float64: one value, two, ties, infinities, q at 0, 1, whole and fractional ranks."""
    generator = torch.Generator().manual_seed(3)
    samples = [[2.5], [1.0, 4.0], [3.0, 3.0, 1.0, 3.0], [0.1, 0.2, 0.3, 0.4], [-math.inf, 1.0, 2.0, math.inf],
               torch.rand(1001, generator=generator).tolist(), torch.randint(0, 5, (64,), generator=generator).tolist()]
    for values in samples:
        for q in (0.0, 0.1, 0.25, 1 / 3, 0.5, 0.75, 0.999, 1.0):
            expected = float(np.quantile(np.array(values, dtype=np.float64), q))
            got = linear_quantile(torch.tensor(values, dtype=torch.float64), q)
            assert got.dtype == torch.float64 and got.dim() == 0
            assert float(got) == expected or (math.isnan(expected) and got.isnan()), (values, q)


@pytest.mark.slow  # 2^24 tokens: seconds
def test_stapo_beyond_torch_quantiles_limit_silences_below_the_exact_quantile() -> None:
    """STAPO over more candidates than ``torch.quantile`` takes (2^24; a verl mini-batch of 512 x 16
    rollouts x 8k tokens holds 2^26): the step raised "quantile() input tensor is too large". The
    candidates hold ``k / 2^24`` for ``k = 0..2^24`` (exact in float32), shuffled, beside a
    NaN-entropy candidate and a likely token of entropy 0: at q = 0.3 the rank ``0.3 * 2^24`` falls
    between ``k = 5033164`` and ``5033165``, so exactly the 5033165 tokens ``k <= 5033164`` are
    silenced, those below ``numpy.quantile``'s threshold."""
    n = (1 << 24) + 1
    shuffled = torch.arange(n) * 7919 % n  # a permutation: 7919 is prime to n = 97 * 257 * 673
    entropy = torch.cat([shuffled.float() / (1 << 24), torch.tensor([math.nan, 0.0])]).unsqueeze(0)
    log_probs = torch.full_like(entropy, math.log(1e-4))
    log_probs[0, -1] = math.log(0.5)  # no candidate: kept although its entropy is the smallest
    mask = torch.ones_like(entropy, dtype=torch.bool)
    threshold = float(np.quantile(np.arange(n, dtype=np.float64) / (1 << 24), 0.3))
    silenced = stapo_silenced_mask(log_probs, entropy, torch.ones_like(entropy), mask, 0.002, 0.3)
    assert int(silenced.sum()) == 5033165 and not silenced[0, -2:].any()
    assert torch.equal(silenced[0, :n], entropy[0, :n].double() < threshold)


def test_a_score_exactly_the_tolerance_below_the_threshold_is_tied() -> None:
    """The tie rule counts ``|s - s_k| <= tol`` as tied (inclusive): with k = 1 of [0, tol, -1]
    (float64, so the distance is exactly ``tol``), 0 and tol tie and the one kept is drawn; a
    score just beyond the tolerance does not tie."""
    kept, decided = top_count(torch.tensor([0.0, TIE_TOLERANCE, -1.0], dtype=torch.float64), 1)
    assert kept.numel() == 1 and int(kept[0]) in (0, 1)
    assert bool(decided[kept[0]]) and int(decided.sum()) == 1
    kept, decided = top_count(torch.tensor([0.0, 2.5 * TIE_TOLERANCE, -1.0], dtype=torch.float64), 1)
    assert kept.tolist() == [1] and not decided.any()


def test_the_tolerance_is_measured_from_the_kth_largest_score() -> None:
    """k = 1 of [1 + 6e-7, 1, 1 - 6e-7]: the 2nd lies within the tolerance of the largest and may be
    drawn, the 3rd (1.2e-6 below it) never is, whatever the draw (it lies within the tolerance of
    the 2nd, which is not the threshold)."""
    values = torch.tensor([1.0 + 6e-7, 1.0, 1.0 - 6e-7], dtype=torch.float64)
    kept = {tuple(top_count(values, 1, torch.Generator().manual_seed(seed))[0].tolist()) for seed in range(20)}
    assert kept == {(0,), (1,)}


def test_top_count_keeps_every_value_for_a_count_beyond_them_and_none_for_a_count_below_one() -> None:
    values = torch.tensor([3.0, 1.0, 2.0])
    assert top_count(values, 5)[0].tolist() == [0, 1, 2]
    assert top_count(values, 0)[0].tolist() == [] and top_count(values, -2)[0].tolist() == []
    kept, decided = top_count(torch.tensor([]), 3)
    assert kept.tolist() == [] and decided.shape == (0,)


def test_population_rows_of_uneven_groups_are_each_groups_rows_without_padding() -> None:
    assert [rows.tolist() for rows in population_rows("group", 5, torch.tensor([2, 0, 2, 1, 2]))] == [
        [1], [3], [0, 2, 4]]
    assert [rows.tolist() for rows in population_rows("sequence", 2)] == [[0], [1]]
    assert [rows.tolist() for rows in population_rows("batch", 3)] == [[0, 1, 2]]


def test_the_complement_reports_no_tie_decided_token_and_a_bad_unit_is_refused() -> None:
    """All scores equal: the top 10% is drawn (tie-decided), its complement reports none; an
    unknown ``unit``, or ``token_id`` without token ids, is a one-line ValueError."""
    inputs = make_inputs(1, batch=2, length=10, mask_rate=0.0)
    inputs.stats.js_scores["prev"] = torch.full((2, 10), 0.25)
    top = select("ict", inputs, reference="prev", scope="batch")
    assert int(top.mask.sum()) == 2 and torch.equal(top.tie_decided, top.mask)
    rest = select("ict", inputs, reference="prev", scope="batch", complement=True)
    assert int(rest.mask.sum()) == 18 and not rest.tie_decided.any()
    with pytest.raises(ValueError, match="unit must be 'position' or 'token_id'"):
        select("ict", inputs, reference="prev", unit="tokens")
    inputs.token_ids = None
    with pytest.raises(ValueError, match="needs token_ids"):
        select("ict", inputs, reference="prev", unit="token_id")


def test_the_complement_holds_the_response_tokens_the_top_leaves_out_and_never_padding() -> None:
    """Hand scores 0.1..0.8 over 8 response tokens of a [2, 5] batch with 2 padding positions:
    ratio 0.25 takes the top ceil(2) = 0.8 and 0.7; the complement is the other 6 response tokens,
    none of the padding."""
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 1, 1, 0]], dtype=torch.bool)
    scores = torch.tensor([[0.1, 0.8, 0.3, 0.4, 0.9], [0.5, 0.6, 0.7, 0.2, 0.95]])  # padding scores high
    inputs = _inputs(torch.zeros(2, 5), torch.ones(2), mask)
    inputs.stats.js_scores["prev"] = scores
    rest = select("ict", inputs, reference="prev", scope="batch", ratio=0.25, complement=True).mask
    assert rest.tolist() == [[True, False, True, True, False], [True, True, False, True, False]]


def test_stapo_refuses_a_quantile_outside_0_1_even_without_candidates() -> None:
    """``stapo_silenced_mask`` called directly: a quantile of 1.5 is a ValueError whether or not
    any token is a candidate (torch.quantile would only see it when one is)."""
    log_probs, mask = torch.zeros(1, 3), torch.ones(1, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=r"quantile must be in \[0, 1\], got 1.5"):
        stapo_silenced_mask(log_probs, torch.ones(1, 3), torch.ones(1, 3), mask, 0.002, 1.5)


def test_a_product_an_ulp_above_an_integer_counts_as_that_integer() -> None:
    """In float64 ``0.07 * 100`` is 7.000000000000001 and ``0.14 * 150`` is 21.000000000000004:
    ``ceil`` of those is 8 and 22, the decimal count 7 and 21."""
    assert 0.07 * 100 > 7 and 0.14 * 150 > 21
    assert selection_counts(0.07, torch.tensor([100, 200, 300])).tolist() == [7, 14, 21]
    assert selection_counts(0.14, torch.tensor([50, 150])).tolist() == [7, 21]
    inputs = make_inputs(3, batch=4, length=25, mask_rate=0.0)
    assert int(select_tokens("entropy", inputs, ratio=0.07).sum()) == exact_count(0.07, 100) == 7


def test_a_large_product_an_ulp_above_an_integer_counts_as_that_integer() -> None:
    """At a verl mini-batch's size the float64 product's ulp outgrows the absolute noise 5e-10:
    ``0.07 * 10^8`` is 7000000.000000001 (an ulp, 9.3e-10, above), whose ``ceil`` gave 7000001
    where the decimal count is 7000000. Against the exact decimal ``ceil(Fraction(ratio) n)``
    for sizes up to 2^40, with genuine fractions at those sizes (``0.1 * 2^26`` = 6710886.4); a
    small product keeps its 9 decimals."""
    assert 0.07 * 10**8 > 7 * 10**6 and 0.07 * 100 * 2**20 > 7 * 2**20
    sizes = ([10**k for k in range(13)] + [7 * 10**k for k in range(12)] + [100 * 2**k for k in range(33)]
             + [2**k + 1 for k in range(41)] + [3 * 2**k for k in range(39)])
    for ratio in (0.07, 0.1, 0.2, 0.29, 0.55, 0.57, 2e-4, 0.999, 1.0):
        assert selection_counts(ratio, torch.tensor(sizes)).tolist() == [exact_count(ratio, n) for n in sizes], ratio
    assert selection_counts(0.1, torch.tensor([1 << 26])).tolist() == [6710887]
    # the 9 decimals still hold for a small product: 1.0000000002 is 1, 1.000000002 is above it
    assert selection_counts(0.5000000001, torch.tensor([2])).tolist() == [1]
    assert selection_counts(0.500000001, torch.tensor([2])).tolist() == [2]


def _random_reference(generator: torch.Generator, mask: torch.Tensor, ratio: float) -> torch.Tensor:
    """The top ``ceil(ratio N)`` response tokens of ``torch.rand(mask.shape)`` from ``generator``."""
    scores = torch.rand(mask.shape, generator=generator).tolist()
    cells = sorted(((b, t) for b in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[b, t]),
                   key=lambda cell: -scores[cell[0]][cell[1]])
    expected = torch.zeros_like(mask)
    for cell in cells[:exact_count(ratio, len(cells))]:
        expected[cell] = True
    return expected


def test_random_reports_no_tie_decided_token_even_where_its_scores_tie() -> None:
    """``random`` ranks nothing (``Selection``'s docstring, ``tests/test_host_syncs.py``), so it
    decides nothing by a tie: it reported one tie-decided token wherever two float32 random scores
    fell within the tolerance at its threshold (seed 296: 4096 tokens, ratio 0.5), and about 2e-5
    of a long-response step's selection, in ``selected_tie_fraction``. The mask is still the top
    2048 scores (the tied pair's one winner drawn)."""
    mask = torch.ones(1, 4096, dtype=torch.bool)
    raw = torch.rand(1, 4096, generator=torch.Generator().manual_seed(296))
    scores = sorted(raw[0].tolist(), reverse=True)
    assert scores[2047] - scores[2048] <= TIE_TOLERANCE  # a tie at the threshold: two scores for one slot
    stats = TokenStatistics(torch.zeros(1, 4096), torch.zeros(1, 4096), torch.zeros(1, 4096))
    selection = select("random", SelectionInputs(stats, mask, torch.ones(1),
                                                 generator=torch.Generator().manual_seed(296)), ratio=0.5)
    assert int(selection.mask.sum()) == 2048 and float(raw[selection.mask].min()) >= scores[2048]
    assert not selection.tie_decided.any()


def test_random_draws_its_scores_from_the_inputs_generator_before_its_seed() -> None:
    """``random`` uses ``inputs.generator`` when given (the trainer's per-step generator; ``seed`` is
    then unused), else a generator seeded with ``seed``: its first draw is the scores."""
    inputs = make_inputs(4, batch=4, length=16)
    inputs.generator = torch.Generator().manual_seed(11)
    mask = select_tokens("random", inputs, ratio=0.25, seed=3)
    assert torch.equal(mask, _random_reference(torch.Generator().manual_seed(11), inputs.response_mask, 0.25))
    inputs.generator = None
    mask = select_tokens("random", inputs, ratio=0.25, seed=3)
    assert torch.equal(mask, _random_reference(torch.Generator().manual_seed(3), inputs.response_mask, 0.25))


def test_cov_selectors_take_at_least_one_token_and_count_response_tokens_only() -> None:
    """KL-Cov penalises the ``max(1, int(ratio N))`` largest-covariance tokens of the ``N`` response
    tokens (padding not counted: 8 of 16 positions at ratio 0.25 give 2, not 4; ratio 0.01 gives
    1, not 0); Clip-Cov at its default ratio 2e-4 still cuts one band token of 8."""
    log_probs = torch.tensor([[-0.1, -3.0, -0.5, -2.0, 0.0, 0.0, 0.0, 0.0],
                              [-1.0, -0.2, -4.0, -0.3, 0.0, 0.0, 0.0, 0.0]])
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[:, :4] = True
    advantages = torch.tensor([1.5, -1.0])
    cells = [(b, t) for b in range(2) for t in range(4)]
    mean_lp = math.fsum(float(log_probs[c]) for c in cells) / 8
    mean_a = math.fsum(float(advantages[b]) for b, _ in cells) / 8
    covariance = {(b, t): (float(log_probs[b, t]) - mean_lp) * (float(advantages[b]) - mean_a) for b, t in cells}
    ranked = sorted(cells, key=lambda c: -covariance[c])
    for ratio, count in ((0.25, 2), (0.01, 1)):
        inputs = _inputs(log_probs, advantages, mask)
        penalty = select("kl_cov", inputs, ratio=ratio, kl_coef=0.5).kl_penalty
        assert {c for c in cells if penalty[c] > 0} == set(ranked[:count]), ratio
        assert float(penalty.sum()) == 0.5 * count
    band = {c for c in cells if 0.1 < covariance[c] < 100.0}
    assert len(band) > 1
    inputs = _inputs(log_probs, advantages, mask, generator=torch.Generator().manual_seed(0))
    kept = select_tokens("clip_cov", inputs, cov_low=0.1, cov_high=100.0)
    cut = {c for c in cells if not kept[c]}
    assert len(cut) == 1 and cut <= band and not (kept & ~mask).any()


@pytest.mark.parametrize("scope", ["sequence", "group"])
def test_ict_by_token_id_ranks_within_its_scope(scope: str) -> None:
    """``unit="token_id"`` ranks the unique ids of each population of ``scope`` (not the batch's):
    the Python-list reference of ``selection_references``."""
    inputs = make_inputs(2, batch=4, length=12, vocab=6)
    selection = select("ict", inputs, ratio=0.3, unit="token_id", reference="prev", scope=scope)
    expected, decided = reference_top_unique(inputs.stats.js_scores["prev"], inputs.token_ids, inputs.response_mask,
                                             0.3, scope, inputs.group_ids, torch.Generator().manual_seed(3))
    assert torch.equal(selection.mask, expected) and torch.equal(selection.tie_decided, decided)
    batch = select("ict", make_inputs(2, batch=4, length=12, vocab=6), ratio=0.3, unit="token_id",
                   reference="prev", scope="batch")
    assert not torch.equal(batch.mask, expected)


def test_an_option_given_as_none_keeps_its_value_and_yes_no_are_booleans() -> None:
    """``None`` (``ratio=none`` on the command line) keeps the default or the preset's value;
    ``yes``/``no``/``1``/``0`` parse as a boolean option's true/false."""
    assert resolve_options("ict", {"ratio": None, "scope": None}, preset="batch") == resolve_options(
        "ict", preset="batch")
    assert resolve_options("ict", parse_selector_options("ict", {"ratio": "none"}))["ratio"] == 0.1
    for text, value in (("yes", True), ("no", False), ("1", True), ("0", False), ("True", True)):
        assert parse_selector_options("ict", {"complement": text}) == {"complement": value}, text


def test_stapo_compares_a_bf16_tokens_probability_with_tau_p_unrounded() -> None:
    """bf16 log-probs: a token of log-prob -6.21875 (exact in bf16) has ``p = exp(-6.21875) =
    0.0019917 < tau_p = 0.002`` (float64), so it is a candidate; with the other candidate
    (entropy 0.5) the 0.75 quantile of (0.1, 0.5) is 0.4 and it is silenced. Before, ``p`` and
    ``tau_p`` were both rounded to bf16 (0.0019989 each): ``p < tau_p`` failed and nothing was
    silenced. At ``tau_p = 0.001995`` too (bf16's ``exp`` rounds 0.0019917 up to 0.0019989)."""
    log_probs = torch.tensor([[-6.21875, -7.0, -1.0, -1.0]])
    entropy = torch.tensor([[0.1, 0.5, 1.0, 1.0]])
    mask = torch.ones(1, 4, dtype=torch.bool)
    for tau_p in (0.002, 0.001995):
        assert math.exp(-6.21875) < tau_p < math.exp(-1.0)  # the reference's candidates: the first two
        for dtype in (torch.float32, torch.bfloat16, torch.float16):
            kept = select_tokens("stapo", _inputs(log_probs.to(dtype), torch.tensor([1.0]), mask, entropy.to(dtype)),
                                 tau_p=tau_p, quantile=0.75)
            assert kept.tolist() == [[False, True, True, True]], (tau_p, dtype)


def test_clip_cov_reads_the_losss_clip_of_bf16_log_probs() -> None:
    """bf16 log-probs -1.25 and old -1.5 (both exact): ``r = exp(0.25) = 1.2840 > 1 + 0.28`` with
    A = 2, so the loss's ratio clip (float32) already clips (0, 0) and Clip-Cov keeps it, as at
    float32; the other band token (1, 1) (r = 1, A = -2) is cut. Before, ``r`` and ``1.28`` were
    both rounded to bf16 (1.28125): the clip looked inactive and (0, 0) was cut too."""
    log_probs = torch.tensor([[-1.25, -3.0], [-1.0, -3.0]])
    old = torch.tensor([[-1.5, -3.0], [-1.0, -3.0]])
    assert math.exp(-1.25 - -1.5) > 1.28  # the reference: the loss clips (0, 0)
    advantages = torch.tensor([2.0, -2.0])
    mask = torch.ones(2, 2, dtype=torch.bool)
    for dtype in (torch.float32, torch.bfloat16):
        inputs = _inputs(log_probs.to(dtype), advantages, mask, generator=torch.Generator().manual_seed(0),
                         old_log_probs=old.to(dtype), clip_range=(0.2, 0.28))
        kept = select_tokens("clip_cov", inputs, ratio=1.0, cov_low=0.5, cov_high=5.0)
        assert kept.tolist() == [[True, True], [True, False]], dtype

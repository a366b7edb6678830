"""Properties of every built-in selector through ``ict.select`` (each scope and unit it offers,
its options at their edges) and of the ranking helpers, against references written plainly from
the documented rules (``ict.core.selectors``' docstring, docs/method.md's selector table):
Python lists, ``sorted()``, ``fractions.Fraction`` and numpy. Inputs are drawn with empty rows,
holes, uneven unsorted groups, few score levels (many ties) and NaN / +-inf where they can arise."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch
from hypothesis import example, given
from hypothesis import strategies as st
from selection_references import (
    exact_count,
    reference_populations,
    reference_top_fraction,
    reference_top_unique,
)

from ict.core.ranking import (
    group_ranks,
    label_places,
    population_rows,
    run_starts,
    selection_counts,
    top_count,
)
from ict.core.selectors import ICT_DEFAULT_REFERENCE, SelectionInputs, select
from ict.core.stats import JS_REFERENCES, TokenStatistics, score_key

RATIOS = st.sampled_from([1e-9, 0.01, 0.1, 0.125, 0.2, 0.25, 0.3, 1 / 3, 0.5, 0.7, 0.9, 0.999, 1.0])
SCOPES = st.sampled_from(["batch", "sequence", "group"])


def drawn_inputs(seed: int, batch: int, length: int, levels: int, hole_rate: float, special: bool,
                 token_advantages: bool) -> SelectionInputs:
    """Random ``[batch, length]`` selector inputs: every score on ``levels`` levels (ties), a
    response mask with holes (``hole_rate``: the share of non-response positions), groups labelled
    0, 7 or 14 in any order, and, with ``special``, about 5% each of NaN, +inf and -inf in every
    statistic and 10% NaN / 5% inf advantages."""
    generator = torch.Generator().manual_seed(seed)

    def levelled(scale: float) -> torch.Tensor:
        values = torch.randint(0, levels, (batch, length), generator=generator).double() / levels * scale
        if special:
            u = torch.rand(batch, length, generator=generator)
            values[u < 0.05], values[(u >= 0.05) & (u < 0.1)], values[(u >= 0.1) & (u < 0.15)] = (
                math.nan, math.inf, -math.inf)
        return values

    mask = torch.rand(batch, length, generator=generator) >= hole_rate
    log_probs, entropy = -levelled(8.0), levelled(3.0)
    js_scores = {score_key(reference, "js"): levelled(math.log(2)) for reference in JS_REFERENCES}
    shape = (batch, length) if token_advantages else (batch,)
    advantages = torch.randint(-2, 3, shape, generator=generator).double()
    if special:
        u = torch.rand(shape, generator=generator)
        advantages[u < 0.1], advantages[(u >= 0.1) & (u < 0.15)] = math.nan, math.inf
    token_ids = torch.randint(0, 5, (batch, length), generator=generator)
    group_ids = torch.randint(0, 3, (batch,), generator=generator) * 7
    return SelectionInputs(TokenStatistics(log_probs, entropy, entropy, js_scores), mask, advantages, token_ids,
                           None, group_ids)


INPUTS = dict(seed=st.integers(0, 10**6), batch=st.integers(0, 5), length=st.integers(1, 8),
              levels=st.sampled_from([1, 2, 3, 1000]), hole_rate=st.sampled_from([0.0, 0.3, 0.9]),
              special=st.booleans(), token_advantages=st.booleans())


def advantages_of(inputs: SelectionInputs) -> torch.Tensor:
    advantages = inputs.advantages
    return advantages if advantages.dim() == 2 else advantages.unsqueeze(-1).expand_as(inputs.response_mask)


def response_positions(inputs: SelectionInputs) -> list[tuple[int, int]]:
    batch, length = inputs.response_mask.shape
    return [(b, t) for b in range(batch) for t in range(length) if inputs.response_mask[b, t]]


def reference_covariance(inputs: SelectionInputs) -> dict[tuple[int, int], float]:
    """``Cov_t = (lp_t - mean lp)(A_t - mean A)`` (numpy means) of each response token whose
    log-prob and advantage are finite; the others have none (docs/method.md)."""
    advantages = advantages_of(inputs)
    finite = [p for p in response_positions(inputs)
              if math.isfinite(float(inputs.stats.log_probs[p])) and math.isfinite(float(advantages[p]))]
    if not finite:
        return {}
    mean_lp = np.mean([float(inputs.stats.log_probs[p]) for p in finite])
    mean_a = np.mean([float(advantages[p]) for p in finite])
    return {p: (float(inputs.stats.log_probs[p]) - mean_lp) * (float(advantages[p]) - mean_a) for p in finite}


@given(**INPUTS, ratio=RATIOS, scope=SCOPES, by_id=st.booleans(), complement=st.booleans())
def test_ict_selects_each_scopes_top_fraction_and_its_complement(
        seed, batch, length, levels, hole_rate, special, token_advantages, ratio, scope, by_id, complement):
    inputs = drawn_inputs(seed, batch, length, levels, hole_rate, special, token_advantages)
    inputs.generator = torch.Generator().manual_seed(seed + 1)
    selection = select("ict", inputs, ratio=ratio, scope=scope, unit="token_id" if by_id else "position",
                       complement=complement)
    scores = inputs.stats.js_scores[ICT_DEFAULT_REFERENCE]
    keys = torch.Generator().manual_seed(seed + 1)
    if by_id:
        mask, decided = reference_top_unique(scores, inputs.token_ids, inputs.response_mask, ratio, scope,
                                             inputs.group_ids, keys)
    else:
        mask, decided = reference_top_fraction(scores, inputs.response_mask, ratio, scope, inputs.group_ids, keys)
    if complement:
        mask, decided = inputs.response_mask & ~mask, torch.zeros_like(mask)
    assert torch.equal(selection.mask, mask)
    assert torch.equal(selection.tie_decided, decided)


@given(**INPUTS, ratio=RATIOS)
def test_entropy_selects_the_batchs_top_fraction_of_entropies(
        seed, batch, length, levels, hole_rate, special, token_advantages, ratio):
    inputs = drawn_inputs(seed, batch, length, levels, hole_rate, special, token_advantages)
    inputs.generator = torch.Generator().manual_seed(seed + 1)
    selection = select("entropy", inputs, ratio=ratio)
    mask, decided = reference_top_fraction(inputs.stats.entropy, inputs.response_mask, ratio, "batch", None,
                                           torch.Generator().manual_seed(seed + 1))
    assert torch.equal(selection.mask, mask)
    assert torch.equal(selection.tie_decided, decided)
    assert int(selection.mask.sum()) == exact_count(ratio, int(inputs.response_mask.sum()))


@given(**INPUTS, ratio=RATIOS, scope=SCOPES, random_seed=st.integers(0, 2**63 - 1), from_inputs=st.booleans())
def test_random_selects_ceil_ratio_n_of_each_population_by_its_seed_whatever_the_scores(
        seed, batch, length, levels, hole_rate, special, token_advantages, ratio, scope, random_seed, from_inputs):
    inputs = drawn_inputs(seed, batch, length, levels, hole_rate, special, token_advantages)
    if from_inputs:  # the inputs' generator comes before the seed option (which then does nothing)
        inputs.generator = torch.Generator().manual_seed(random_seed)
    selection = select("random", inputs, ratio=ratio, scope=scope, seed=None if from_inputs else random_seed)
    # the documented draw: a uniform score per [B, T] position, then the tie keys, from one generator
    generator = torch.Generator().manual_seed(random_seed)
    scores = torch.rand(inputs.response_mask.shape, generator=generator)
    mask, decided = reference_top_fraction(scores, inputs.response_mask, ratio, scope, inputs.group_ids, generator)
    assert torch.equal(selection.mask, mask)
    assert torch.equal(selection.tie_decided, decided)
    for rows in reference_populations(len(inputs.response_mask), scope, inputs.group_ids):
        assert int(selection.mask[rows].sum()) == exact_count(ratio, int(inputs.response_mask[rows].sum()))
    other = drawn_inputs(seed + 7, batch, length, levels, 0.0, special, token_advantages)  # other scores
    other.response_mask, other.group_ids = inputs.response_mask, inputs.group_ids
    other.generator = torch.Generator().manual_seed(random_seed) if from_inputs else None
    again = select("random", other, ratio=ratio, scope=scope, seed=None if from_inputs else random_seed)
    assert torch.equal(again.mask, selection.mask)


@given(**INPUTS, tau_p=st.sampled_from([0.0, 0.002, 0.01, 0.5, 1.0]),
       quantile=st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0]))
def test_stapo_silences_exactly_the_low_entropy_positive_rare_tokens(
        seed, batch, length, levels, hole_rate, special, token_advantages, tau_p, quantile):
    inputs = drawn_inputs(seed, batch, length, levels, hole_rate, special, token_advantages)
    entropy = inputs.stats.entropy  # an entropy is at most log V: NaN can arise, +-inf cannot (numpy's
    entropy[entropy.isinf()] = math.nan  # quantile interpolates inf with the next value at a whole rank)
    mask = select("stapo", inputs, tau_p=tau_p, quantile=quantile).mask
    advantages = advantages_of(inputs)
    candidates = [p for p in response_positions(inputs) if float(advantages[p]) > 0
                  and math.exp(float(inputs.stats.log_probs[p])) < tau_p and not math.isnan(float(entropy[p]))]
    expected = inputs.response_mask.clone()
    if candidates:
        threshold = np.quantile([float(entropy[p]) for p in candidates], quantile)
        for p in candidates:
            expected[p] = not float(entropy[p]) < threshold
    assert torch.equal(mask, expected)


@given(**INPUTS, ratio=st.sampled_from([2e-4, 0.1, 0.29, 0.5, 1.0]),
       band=st.sampled_from([(-1.0, 1.0), (0.0, 5.0), (-5.0, 0.0), (1.0, 5.0), (-100.0, 100.0)]),
       clip=st.sampled_from([None, (0.2, 0.28), (0.0, 0.0)]))
def test_clip_cov_cuts_max_1_int_ratio_n_tokens_of_its_covariance_band_by_the_generator(
        seed, batch, length, levels, hole_rate, special, token_advantages, ratio, band, clip):
    inputs = drawn_inputs(seed, batch, length, levels, hole_rate, special, token_advantages)
    shifts = torch.tensor([0.0, 0.1, -0.1, 0.5, -0.5], dtype=torch.float64)
    inputs.old_log_probs = inputs.stats.log_probs + shifts[torch.randint(0, 5, inputs.response_mask.shape,
                                                                         generator=torch.Generator())]
    inputs.clip_range = clip
    inputs.generator = torch.Generator().manual_seed(seed)
    mask = select("clip_cov", inputs, ratio=ratio, cov_low=band[0], cov_high=band[1]).mask
    covariance = reference_covariance(inputs)
    advantages = advantages_of(inputs)

    def clipped(p: tuple[int, int]) -> bool:  # -A clip(rho) > -A rho: the ratio clip is the active term
        if clip is None:
            return False
        rho = math.exp(float(inputs.stats.log_probs[p]) - float(inputs.old_log_probs[p]))
        a = float(advantages[p])
        return -a * min(max(rho, 1 - clip[0]), 1 + clip[1]) > -a * rho

    def in_band(margin: float) -> set[tuple[int, int]]:  # a covariance of exactly 0 may round to +-6e-16
        return {p for p, value in covariance.items() if band[0] + margin < value < band[1] - margin and not clipped(p)}

    surely, maybe = in_band(1e-9), in_band(-1e-9)
    positions = response_positions(inputs)
    cut = {p for p in positions if not mask[p]}
    count = max(1, int(ratio * len(positions))) if positions else 0  # verl's count, float product and all
    assert cut <= maybe and min(count, len(surely)) <= len(cut) <= min(count, len(maybe))
    assert not (mask & ~inputs.response_mask).any()
    inputs.generator = torch.Generator().manual_seed(seed)
    assert torch.equal(select("clip_cov", inputs, ratio=ratio, cov_low=band[0], cov_high=band[1]).mask, mask)


def reference_kl_cov_penalty(inputs: SelectionInputs, ratio: float, kl_coef: float,
                             generator: torch.Generator | None) -> torch.Tensor:
    """KL-Cov's penalty with Python lists: the ``max(1, int(ratio N))`` largest ``Cov_t`` (``N``
    the response tokens), those above the k-th largest by more than 1e-6 surely, the remaining
    slots drawn among the ones within 1e-6 of it by the smallest keys, one uniform float64 key per
    ``[B, T]`` position (row-major) from ``generator`` (None: one seeded with 0)."""
    batch, length = inputs.response_mask.shape
    penalty = torch.zeros(batch, length)
    covariance = reference_covariance(inputs)
    positions = list(covariance)
    count = min(max(1, int(ratio * len(response_positions(inputs)))), len(positions))
    if not count:
        return penalty
    generator = generator or torch.Generator().manual_seed(0)
    keys = torch.rand((1, batch * length), generator=generator, dtype=torch.float64)[0].tolist()
    threshold = sorted(covariance.values(), reverse=True)[count - 1]
    sure = [p for p in positions if covariance[p] > threshold + 1e-6]
    tied = [p for p in positions if abs(covariance[p] - threshold) <= 1e-6]
    for p in sure + sorted(tied, key=lambda p: keys[p[0] * length + p[1]])[:count - len(sure)]:
        penalty[p] = kl_coef
    return penalty


@given(**INPUTS, ratio=st.sampled_from([2e-3, 0.1, 0.29, 0.5, 1.0]), kl_coef=st.sampled_from([0.0, 1.0, 2.5]),
       with_generator=st.booleans())
@example(seed=0, batch=4, length=4, levels=1, hole_rate=0.0, special=False, token_advantages=False, ratio=0.1,
         kl_coef=1.0, with_generator=True)  # every covariance ties: the draw, not the position, decides
def test_kl_cov_penalises_the_largest_covariances_ties_drawn_by_the_generator(
        seed, batch, length, levels, hole_rate, special, token_advantages, ratio, kl_coef, with_generator):
    inputs = drawn_inputs(seed, batch, length, levels, hole_rate, special, token_advantages)
    inputs.generator = torch.Generator().manual_seed(seed + 1) if with_generator else None
    selection = select("kl_cov", inputs, ratio=ratio, kl_coef=kl_coef)
    expected = reference_kl_cov_penalty(inputs, ratio, kl_coef,
                                        torch.Generator().manual_seed(seed + 1) if with_generator else None)
    assert torch.equal(selection.mask, inputs.response_mask)
    assert selection.kl_penalty.dtype == torch.float32
    assert torch.equal(selection.kl_penalty, expected)


def test_kl_cov_ties_favour_no_row_or_position():
    """Rows 2 and 3 are alike: their 10 tokens of log p = -3 and A = -1 tie for the 10 largest
    covariances. The penalty went to row 2's every time (a stable sort keeps the first positions);
    the draw now gives each row about half of them over 200 generators, the same for one seed."""
    log_probs = torch.full((4, 50), -1.1920929e-07)
    log_probs[:, ::5] = -3.0
    inputs = SelectionInputs(TokenStatistics(log_probs, torch.zeros(4, 50), torch.zeros(4, 50), {}),
                             torch.ones(4, 50, dtype=torch.bool), torch.tensor([1.0, 1.0, -1.0, -1.0]))
    per_row = torch.zeros(4)
    for seed in range(200):
        inputs.generator = torch.Generator().manual_seed(seed)
        penalty = select("kl_cov", inputs, ratio=0.05, kl_coef=1.0).kl_penalty
        assert int((penalty > 0).sum()) == 10 and not penalty[:, 1::5].any()  # only the tied tokens
        per_row += (penalty > 0).sum(dim=1)
        inputs.generator = torch.Generator().manual_seed(seed)
        assert torch.equal(select("kl_cov", inputs, ratio=0.05, kl_coef=1.0).kl_penalty, penalty)
    assert per_row[:2].tolist() == [0.0, 0.0]
    assert 800 < per_row[2] < 1200 and per_row[2] + per_row[3] == 2000  # binomial(2000, 1/2): sd 22


def test_kl_cov_ties_covariances_within_the_tie_tolerance():
    """One token to penalise (ratio 0.01 of 20); the two largest covariances, about 1.3, differ by
    4e-7 < TIE_TOLERANCE: each is drawn about half the time, the third largest (-0.3) never."""
    log_probs = torch.tensor([[0.0, -4e-7] + [-2.0] * 8, [-1.0] * 10], dtype=torch.float64)
    inputs = SelectionInputs(TokenStatistics(log_probs, torch.zeros(2, 10), torch.zeros(2, 10), {}),
                             torch.ones(2, 10, dtype=torch.bool), torch.tensor([1.0, -1.0]))
    hits = torch.zeros(2, 10)
    for seed in range(100):
        inputs.generator = torch.Generator().manual_seed(seed)
        hits += select("kl_cov", inputs, ratio=0.01, kl_coef=1.0).kl_penalty
    assert hits.sum() == 100 and hits[0, 0] + hits[0, 1] == 100 and 30 < hits[0, 0] < 70  # sd 5


@given(ids=st.lists(st.integers(-3, 3), max_size=9))
def test_group_ranks_run_starts_label_places_and_population_rows_are_sorteds(ids):
    labels = torch.tensor(ids, dtype=torch.long)
    distinct = sorted(set(ids))
    assert group_ranks(labels).tolist() == [distinct.index(label) for label in ids]
    ordered = sorted(ids)
    assert run_starts(torch.tensor(ordered, dtype=torch.long)).tolist() == [
        i == 0 or ordered[i] != ordered[i - 1] for i in range(len(ordered))]
    assert [rows.tolist() for rows in population_rows("group", len(ids), labels)] == [
        [row for row in range(len(ids)) if ids[row] == label] for label in distinct]
    assert [rows.tolist() for rows in population_rows("sequence", len(ids))] == [[row] for row in range(len(ids))]
    assert [rows.tolist() for rows in population_rows("batch", len(ids))] == [list(range(len(ids)))]
    shifted = [label + 3 for label in ordered]  # labels in [0, 7), sorted
    sizes, places = label_places(torch.tensor(shifted, dtype=torch.long), 7)
    assert sizes.tolist() == [shifted.count(label) for label in range(7)]
    assert places.tolist() == [shifted[:i].count(shifted[i]) for i in range(len(shifted))]


@given(ratio=st.decimals(min_value="0.000000001", max_value="1", places=9),
       sizes=st.lists(st.integers(0, 10**7), min_size=1, max_size=5))
@example(ratio="0.07", sizes=[100, 0, 1])
def test_selection_counts_are_the_exact_ceiling_of_a_decimal_ratio(ratio, sizes):
    assert selection_counts(float(ratio), torch.tensor(sizes)).tolist() == [
        math.ceil(Fraction(ratio) * size) for size in sizes]


@given(values=st.lists(st.sampled_from([0.0, 0.5, 0.5 + 5e-7, 1.0, 2.0, math.inf, -math.inf, math.nan]), max_size=9),
       count=st.integers(-1, 10))
def test_top_count_keeps_the_count_largest_with_ties_drawn_by_keys_seeded_with_0(values, count):
    kept, decided = top_count(torch.tensor(values, dtype=torch.float64), count)
    ranked = [math.inf if math.isnan(value) else value for value in values]  # NaN as +inf
    count = max(0, min(count, len(values)))
    expected, drawn = [], []
    if count:
        keys = torch.rand((1, len(values)), generator=torch.Generator().manual_seed(0), dtype=torch.float64)[0]
        threshold = sorted(ranked, reverse=True)[count - 1]
        sure = [i for i, value in enumerate(ranked) if value > threshold + 1e-6]
        tied = [i for i, value in enumerate(ranked) if value == threshold or abs(value - threshold) <= 1e-6]
        if len(tied) > count - len(sure):
            drawn = sorted(tied, key=lambda i: float(keys[i]))[:count - len(sure)]
            expected = sorted(sure + drawn)
        else:
            expected = sorted(sure + tied)
    assert kept.tolist() == expected
    assert decided.nonzero().flatten().tolist() == sorted(drawn)

"""The group references (``group_mean`` and its absorbing and leave-one-out variants) and the score
metrics (JS, KL, Wasserstein), against the float64 loops of ``stats_references``."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from stats_references import (
    FLOAT32_TINY,
    LN2,
    VARIANTS,
    hidden_batch,
    loop_reference_group_mean,
    loop_reference_scores,
    loop_reference_variant,
    make_batch,
    ragged_group_batch,
    reference_group_mean_js,
    reference_statistics,
    sized_group_batch,
    tile_of,
    variant_batch,
)

from ict.core.stats import token_statistics, token_statistics_from_hidden

# ---------------------------------------------------------------------------------------------
# group_mean: JS to the mean distribution of the group's rows present at the same position


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_group_mean_matches_float64_reference(temperature, chunk_size):
    # Unsorted, non-contiguous group ids: groups 7 (rows 0, 3, 5, 6), 2 (rows 1, 4), 9 (row 2 alone).
    group_ids = [7, 2, 9, 7, 2, 7, 7]
    logits, token_ids, mask, groups = ragged_group_batch(11, group_ids)
    mask[0, :] = True  # row 0 outlives the others of group 7: the last positions have one row
    mask[3, 6:] = False
    mask[5, 6:] = False
    mask[6, 6:] = False
    logits[1, :, :4] = -float("inf")  # masked vocabulary in one row
    logits[4, 2, 10:] = -float("inf")
    stats = token_statistics(
        logits, token_ids, mask, temperature, ("group_mean", "seq_mean"), tile_size=tile_of(chunk_size), group_ids=groups
    )
    expected = reference_group_mean_js(logits, mask, groups, temperature)
    torch.testing.assert_close(stats.js_scores["group_mean"].double(), expected, atol=1e-5, rtol=0)
    assert (stats.js_scores["group_mean"][2] == 0).all()  # a group of one
    assert (stats.js_scores["group_mean"][0, 6:] == 0).all()  # one completion remains
    assert stats.js_scores["group_mean"][0, :6].min() > 0
    seq_expected = reference_statistics(logits, token_ids, mask, temperature)["seq_mean"]
    torch.testing.assert_close(stats.js_scores["seq_mean"].double(), seq_expected, atol=1e-5, rtol=0)


def test_group_mean_with_a_response_mask_that_is_not_a_prefix():
    logits, token_ids, mask = make_batch(12, batch=6, length=8)
    groups = torch.tensor([1, 0, 1, 0, 1, 0])
    stats = token_statistics(logits, token_ids, mask, 1.3, ("group_mean",), tile_size=tile_of(2), group_ids=groups)
    expected = reference_group_mean_js(logits, mask, groups, 1.3)
    torch.testing.assert_close(stats.js_scores["group_mean"].double(), expected, atol=1e-5, rtol=0)


@given(ids=st.lists(st.integers(-2**40, 2**40) | st.integers(-3, 3), min_size=1, max_size=12),
       rows=st.lists(st.lists(st.booleans(), min_size=4, max_size=4), min_size=1, max_size=12))
def test_the_group_layout_ranks_groups_and_finds_ends_as_unique_and_nonzero_do(ids, rows):
    """`group_ranks` (sync-free) equals `torch.unique`'s inverse, and `response_ends` (dense) the
    last response position that `nonzero` finds in each row (-1 for none)."""
    from ict.core.ranking import group_ranks
    from ict.core.stats.rows import response_ends

    group_ids = torch.tensor(ids)
    assert group_ranks(group_ids).tolist() == torch.unique(group_ids, return_inverse=True)[1].tolist()
    mask = torch.tensor(rows)
    last, finished = response_ends(mask)
    expected = [max((t for t in range(4) if row[t]), default=-1) for row in rows]
    assert last.tolist() == expected and finished.tolist() == [0 <= end < 3 for end in expected]


@given(
    seed=st.integers(0, 10_000),
    group_ids=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    vocab=st.integers(2, 40),
    scale=st.floats(0.1, 20.0),
    chunk_size=st.integers(1, 8),
)
def test_group_mean_properties(seed, group_ids, vocab, scale, chunk_size):
    logits, token_ids, mask, groups = ragged_group_batch(seed, group_ids, length=6, vocab=vocab, scale=scale)
    stats = token_statistics(logits, token_ids, mask, 1.0, ("group_mean",), tile_size=tile_of(chunk_size), group_ids=groups)
    scores = stats.js_scores["group_mean"]
    assert scores.min() >= 0 and scores.max() <= LN2
    assert (scores[~mask] == 0).all()
    torch.testing.assert_close(scores.double(), reference_group_mean_js(logits, mask, groups, 1.0), atol=1e-5, rtol=0)
    # Identical rows in one group: every row equals the group mean, so JS = 0.
    same = logits[:1].expand_as(logits).clone()
    full = torch.ones_like(mask)
    same_stats = token_statistics(same, token_ids, full, 1.0, ("group_mean",), tile_size=tile_of(chunk_size),
                                  group_ids=torch.zeros_like(groups))
    assert same_stats.js_scores["group_mean"].abs().max() <= 1e-6


def test_group_mean_needs_group_ids():
    logits, token_ids, mask = make_batch(13)
    with pytest.raises(ValueError, match="group_ids"):
        token_statistics(logits, token_ids, mask, js_references=("group_mean",), temperature=1.0)
    with pytest.raises(ValueError, match="group_ids"):
        token_statistics(logits, token_ids, mask, js_references=("group_mean",), group_ids=torch.zeros(2), temperature=1.0)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_group_mean_matches_a_second_float64_reference(seed, temperature, chunk_size):
    logits, token_ids, mask, group_ids = sized_group_batch(seed)
    stats = token_statistics(logits, token_ids, mask, temperature, ("group_mean",),
                             tile_size=tile_of(chunk_size), group_ids=group_ids)
    expected = loop_reference_group_mean(logits, mask, group_ids, temperature)
    assert torch.allclose(stats.js_scores["group_mean"].double(), expected, atol=1e-5)


def test_group_mean_lone_position_and_group_of_one_score_zero():
    logits, token_ids, _ = make_batch(5, batch=3, length=5)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 0, 0, 0], [1, 1, 1, 0, 0]], dtype=torch.bool)
    group_ids = torch.tensor([0, 0, 1])  # row 2 is a group of one
    js = token_statistics(logits, token_ids, mask, js_references=("group_mean",),
                          group_ids=group_ids, temperature=1.0).js_scores["group_mean"]
    assert torch.all(js[0, 2:] == 0)  # row 1 stopped: row 0 is alone from position 2 on
    assert torch.all(js[2] == 0)
    assert torch.all(js[:2, :2] > 0)


def test_group_mean_identical_rows_score_zero_and_needs_group_ids():
    logits, token_ids, mask = make_batch(6, batch=1)
    logits = logits.expand(4, -1, -1).clone()
    mask = mask.expand(4, -1).clone()
    token_ids = token_ids.expand(4, -1).clone()
    js = token_statistics(logits, token_ids, mask, js_references=("group_mean",),
                          group_ids=torch.zeros(4, dtype=torch.long), temperature=1.0).js_scores["group_mean"]
    assert js.abs().max() < 1e-6
    with pytest.raises(ValueError, match="group_ids"):
        token_statistics(logits, token_ids, mask, js_references=("group_mean",), temperature=1.0)


# ---------------------------------------------------------------------------------------------
# group_mean variants: absorbing finished rows and leave-one-out


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_group_mean_variants_match_float64_loops(variant, seed, temperature, chunk_size):
    logits, token_ids, mask, group_ids, _ = variant_batch(seed)
    absorbing, leave_one_out = VARIANTS[variant]
    expected = loop_reference_variant(logits, token_ids, mask, group_ids, temperature, absorbing, leave_one_out)
    stats = token_statistics(logits, token_ids, mask, temperature, (variant,), tile_size=tile_of(chunk_size),
                             group_ids=group_ids)
    torch.testing.assert_close(stats.js_scores[variant].double(), expected, atol=2e-5, rtol=0)
    lone = (group_ids == 5).nonzero()[0, 0]  # the group of one
    assert (stats.js_scores[variant][lone] == 0).all()


@pytest.mark.parametrize("chunk_size", [2, None])
def test_all_variants_together_with_prev_and_an_explicit_finished(chunk_size):
    """Several group variants in one call (the first in the first pass, the others in passes of
    their own; with prev, all in their own), and ``finished`` given: the row of length 4 ended
    early but is declared truncated, so it is not absorbed."""
    logits, token_ids, mask, group_ids, row = variant_batch(4)
    finished = mask[:, -1].logical_not()
    finished[row] = False
    finished_list = finished.tolist()
    default = loop_reference_variant(logits, token_ids, mask, group_ids, 0.9, True, False)
    assert not torch.allclose(default, loop_reference_variant(logits, token_ids, mask, group_ids, 0.9, True,
                                                              False, finished_list))
    for extra in ((), ("prev", "seq_mean")):
        references = (*VARIANTS, *extra)
        stats = token_statistics(logits, token_ids, mask, 0.9, references, tile_size=tile_of(chunk_size),
                                 group_ids=group_ids, finished=finished)
        for variant, (absorbing, leave_one_out) in VARIANTS.items():
            expected = loop_reference_variant(logits, token_ids, mask, group_ids, 0.9, absorbing, leave_one_out,
                                              finished_list)
            torch.testing.assert_close(stats.js_scores[variant].double(), expected, atol=2e-5, rtol=0)


def test_absorbing_point_masses_by_hand():
    """Two rows of one group, vocabulary 2. Row 0: one token, the end token 1 (finished). Row 1 at
    t = 1 has p = (1, 0). Absorbing: the mean at t = 1 is q = ((1, 0) + (0, 1)) / 2, m = (3/4, 1/4),
    JS = H(m) - H(q)/2 = h(1/4) - ln 2 / 2; leave-one-out absorbing: the other is (0, 1), JS = ln 2;
    alive-only: 0 (alone)."""
    logits = torch.tensor([[[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]],
                           [[0.0, 0.0], [0.0, -float("inf")], [0.0, 0.0]]])
    token_ids = torch.tensor([[1, 0, 0], [0, 0, 0]])
    mask = torch.tensor([[True, False, False], [True, True, False]])
    groups = torch.zeros(2, dtype=torch.long)
    stats = token_statistics(logits, token_ids, mask, 1.0, tuple(VARIANTS), group_ids=groups)
    assert stats.js_scores["group_mean"][1, 1] == 0
    assert stats.js_scores["group_mean_loo"][1, 1] == 0
    expected = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75)) - LN2 / 2
    assert stats.js_scores["group_mean_absorbing"][1, 1].item() == pytest.approx(expected, abs=1e-6)
    assert stats.js_scores["group_mean_loo_absorbing"][1, 1].item() == pytest.approx(LN2, abs=1e-6)
    # At t = 0 both rows are uniform: every variant scores 0.
    for variant in VARIANTS:
        assert stats.js_scores[variant][:, 0].abs().max() < 1e-6
    # Declared truncated, row 0 is not absorbed: row 1 is alone at t = 1.
    stats = token_statistics(logits, token_ids, mask, 1.0, tuple(VARIANTS), group_ids=groups,
                             finished=torch.tensor([False, False]))
    assert all(stats.js_scores[variant][1, 1] == 0 for variant in VARIANTS)


def test_absorbing_removes_the_alive_count_cap():
    """8 rows, one-hot-like distributions on 8 distinct tokens: alive-only JS is capped by the rows
    alive (h((n+1)/2n) - h(1/n)/2: 0.497 for 8, 0.216 for 2); with 6 rows finished, absorbing
    keeps the mean over 8 rows."""
    def h(x):
        return -(x * math.log(x) + (1 - x) * math.log(1 - x))

    def cap(n):
        return h((n + 1) / (2 * n)) - h(1 / n) / 2

    assert cap(8) == pytest.approx(0.4969, abs=1e-4) and cap(2) == pytest.approx(0.2158, abs=1e-4)
    vocab, length = 16, 4
    logits = torch.full((8, length, vocab), -60.0)
    for row in range(8):
        logits[row, :, row] = 60.0  # a point mass on token `row` at every position
    token_ids = torch.arange(8)[:, None].expand(8, length).clone() + 8  # ends on tokens 8..15
    mask = torch.ones(8, length, dtype=torch.bool)
    mask[2:, 2:] = False  # rows 2-7 end at t = 1 (finished); rows 0-1 are truncated at the cap
    stats = token_statistics(logits, token_ids, mask, 1.0, tuple(VARIANTS), group_ids=torch.zeros(8))
    assert stats.js_scores["group_mean"][0, 0].item() == pytest.approx(cap(8), abs=1e-5)
    assert stats.js_scores["group_mean"][0, 3].item() == pytest.approx(cap(2), abs=1e-5)
    assert stats.js_scores["group_mean_absorbing"][0, 3].item() == pytest.approx(cap(8), abs=1e-5)
    # Leave-one-out: the others never hold the row's token: JS = ln 2 at every position.
    assert stats.js_scores["group_mean_loo"][0].min().item() == pytest.approx(LN2, abs=1e-5)
    assert stats.js_scores["group_mean_loo_absorbing"][0].min().item() == pytest.approx(LN2, abs=1e-5)


@pytest.mark.parametrize("chunk_size", [1, None])
def test_hidden_path_supports_every_variant(chunk_size):
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(22, batch=6)
    groups = torch.tensor([3, 1, 3, 1, 3, 3])
    logits = hidden.double() @ weight.double().T + lm_bias.double()
    stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 0.8, tuple(VARIANTS), groups,
                                         lm_bias, tile_size=tile_of(chunk_size))
    for variant, (absorbing, leave_one_out) in VARIANTS.items():
        expected = loop_reference_variant(logits, token_ids, mask, groups, 0.8, absorbing, leave_one_out)
        torch.testing.assert_close(stats.js_scores[variant].double(), expected, atol=2e-5, rtol=0)


def test_finished_must_be_one_flag_per_row():
    logits, token_ids, mask, group_ids, _ = variant_batch(0)
    with pytest.raises(ValueError, match="finished"):
        token_statistics(logits, token_ids, mask, js_references=("group_mean_absorbing",), group_ids=group_ids,
                         finished=torch.ones(3, dtype=torch.bool), temperature=1.0)
    with pytest.raises(ValueError, match="group_ids"):
        token_statistics(logits, token_ids, mask, js_references=("group_mean_loo",), temperature=1.0)


# ---------------------------------------------------------------------------------------------
# Score metrics: kl and wasserstein (= total variation under the 0-1 ground metric)


@pytest.mark.parametrize("metric", ["kl", "wasserstein"])
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.3])
@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_group_variant_metrics_match_float64_loops(metric, variant, temperature, chunk_size):
    """variant_batch has finished and truncated (right-padded) rows, a group of one and -inf
    logits, so the absorbed point masses and the zero entries of leave-one-out means occur."""
    logits, token_ids, mask, group_ids, _ = variant_batch(1)
    key = f"{variant}:{metric}"
    stats = token_statistics(logits, token_ids, mask, temperature, (key,), tile_size=tile_of(chunk_size),
                             group_ids=group_ids)
    expected = loop_reference_scores(logits, token_ids, mask, group_ids, temperature, variant, metric)
    torch.testing.assert_close(stats.js_scores[key].double(), expected, atol=1e-5, rtol=1e-6)
    assert set(stats.js_scores) == {key}
    lone = (group_ids == 5).nonzero()[0, 0]  # the group of one
    assert (stats.js_scores[key][lone] == 0).all()
    assert (stats.js_scores[key][~mask] == 0).all()
    if metric == "wasserstein":
        assert stats.js_scores[key].max() <= 1.0


@pytest.mark.parametrize("seed", [0, 2, 3])
@pytest.mark.parametrize("chunk_size", [2, None])
def test_every_metric_of_every_reference_in_one_call(seed, chunk_size):
    """All references x all metrics at once (prev forces every group variant into a pass of its
    own; the other layout puts the first group variant in the first pass), with ``finished``
    given and temperature 0.8; JS keeps the bare reference name."""
    logits, token_ids, mask, group_ids, row = variant_batch(seed)
    reference_logits = torch.randn_like(logits) * 2
    finished = mask[:, -1].logical_not()
    finished[row] = False  # ended early but declared truncated: not absorbed
    for references in ((*VARIANTS, "seq_mean", "prev", "ref"), (*VARIANTS, "seq_mean", "ref")):
        keys = [reference if metric == "js" else f"{reference}:{metric}"
                for reference in references for metric in ("js", "kl", "wasserstein")]
        stats = token_statistics(logits, token_ids, mask, 0.8, keys, reference_logits, tile_size=tile_of(chunk_size),
                                 group_ids=group_ids, finished=finished)
        assert list(stats.js_scores) == keys
        for reference in references:
            for metric in ("js", "kl", "wasserstein"):
                key = reference if metric == "js" else f"{reference}:{metric}"
                expected = loop_reference_scores(logits, token_ids, mask, group_ids, 0.8, reference, metric,
                                                 finished.tolist(), reference_logits)
                torch.testing.assert_close(stats.js_scores[key].double(), expected, atol=2e-5, rtol=1e-6,
                                           msg=lambda text, key=key: f"{key}: {text}")


@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_hidden_path_metrics_match_float64_loops(chunk_size):
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(24, batch=6)
    groups = torch.tensor([3, 1, 3, 1, 3, 3])
    logits = hidden.double() @ weight.double().T + lm_bias.double()
    keys = [f"{variant}:{metric}" for variant in VARIANTS for metric in ("kl", "wasserstein")]
    keys += ["seq_mean:kl", "prev:wasserstein"]
    stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, 0.7, keys, groups, lm_bias,
                                         tile_size=tile_of(chunk_size))
    for key in keys:
        reference, metric = key.split(":")
        expected = loop_reference_scores(logits, token_ids, mask, groups, 0.7, reference, metric)
        torch.testing.assert_close(stats.js_scores[key].double(), expected, atol=1e-5, rtol=1e-6)
        assert not stats.js_scores[key].requires_grad


def test_leave_one_out_kl_keeps_small_means_precise():
    """Row 0 puts almost all its mass on token 0 where the other row of its group has ~1.5e-6:
    KL to the leave-one-out mean is ~13.4 nats and needs that small mean to relative precision
    (the group sum minus row 0 rounds it by ~1e-7 absolute, ~1% here: a 0.01 nat error)."""
    logits = torch.zeros(2, 1, 5)
    logits[0, 0, 0] = 12.0
    logits[1, 0, 0] = -12.0
    token_ids = torch.zeros(2, 1, dtype=torch.long)
    mask = torch.ones(2, 1, dtype=torch.bool)
    groups = torch.zeros(2, dtype=torch.long)
    for variant in ("group_mean_loo", "group_mean_loo_absorbing", "group_mean", "group_mean_absorbing"):
        key = f"{variant}:kl"
        stats = token_statistics(logits, token_ids, mask, 1.0, (key,), group_ids=groups)
        expected = loop_reference_scores(logits, token_ids, mask, groups, 1.0, variant, "kl")
        torch.testing.assert_close(stats.js_scores[key].double(), expected, atol=1e-5, rtol=1e-6)
        if variant.startswith("group_mean_loo"):
            assert expected[0, 0] > 13.0


def test_kl_of_twenty_nats_holds_float32_precision_at_a_large_vocabulary():
    """Leave-one-out KL between random rows at V = 151,936 reaches ~17-20 nats, where ``log q`` is
    ~-20: a relative rounding of ``p``'s normaliser (~1e-7) alone would move the cross term by
    ~2e-6. The scores divide it by the accumulated mass, summed in float64 (Partials): every KL
    within 3e-6 of float64 (2.3e-6 here, of which up to 9.5e-7 is the float32 result's own
    rounding; the sums in float32, without the mass: 3.6e-6)."""
    generator = torch.Generator().manual_seed(0)
    groups_of, length, vocab = 8, 6, 151936
    logits = torch.randn(2 * groups_of, length, vocab, generator=generator) * 4.0
    token_ids = torch.randint(0, vocab, (2 * groups_of, length), generator=generator)
    mask = torch.ones(2 * groups_of, length, dtype=torch.bool)
    mask[0, 4:] = False  # a completion that ends early: point masses for the absorbing means
    groups = torch.arange(2 * groups_of) // groups_of
    keys = [f"{variant}:kl" for variant in VARIANTS]
    stats = token_statistics(logits, token_ids, mask, 1.0, tuple(keys), group_ids=groups, backend="torch")
    largest = 0.0
    for key in keys:
        expected = loop_reference_scores(logits, token_ids, mask, groups, 1.0, key.split(":")[0], "kl")
        difference = (stats.js_scores[key].double() - expected)[mask].abs().max()
        assert difference <= 3e-6, (key, float(difference))
        largest = max(largest, float(expected.max()))
    assert largest > 16.0


def test_known_values_of_kl_and_wasserstein():
    """prev of two disjoint one-hots: TV = 1 (every unit of mass moves, at cost 1) and KL is the
    documented clamp value -log(float32 tiny) = 87.34 nats; identical rows score 0."""
    logits = torch.full((1, 3, 4), -float("inf"))
    logits[0, 0, 0] = 0.0
    logits[0, 1, 3] = 0.0
    logits[0, 2, 3] = 0.0
    stats = token_statistics(logits, torch.tensor([[0, 3, 3]]), torch.ones(1, 3, dtype=torch.bool), 1.0,
                             ("prev:kl", "prev:wasserstein"))
    assert stats.js_scores["prev:wasserstein"][0].tolist() == pytest.approx([0.0, 1.0, 0.0], abs=1e-6)
    assert stats.js_scores["prev:kl"][0].tolist() == pytest.approx([0.0, -math.log(FLOAT32_TINY), 0.0], abs=1e-4)


def test_score_keys_and_bad_metrics():
    from ict.core.stats import SCORE_METRICS, needs_groups, score_key, split_score_key

    assert SCORE_METRICS == ("js", "kl", "wasserstein")
    assert score_key("group_mean_absorbing") == "group_mean_absorbing"
    assert score_key("group_mean_absorbing", "kl") == "group_mean_absorbing:kl"
    assert split_score_key("prev:wasserstein") == ("prev", "wasserstein")
    assert split_score_key("prev") == ("prev", "js")
    assert needs_groups(["group_mean_loo:kl"]) and not needs_groups(["seq_mean:kl"])
    with pytest.raises(ValueError, match="unknown score metric 'tv'"):
        score_key("prev", "tv")
    logits, token_ids, mask, group_ids, _ = variant_batch(0)
    for bad, pattern in (("group_mean:tv", "unknown score metric"), ("nope:kl", "unknown JS reference"),
                         ("group_mean:js", "bare reference name")):
        with pytest.raises(ValueError, match=pattern) as error:
            token_statistics(logits, token_ids, mask, js_references=(bad,), group_ids=group_ids, temperature=1.0)
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="group_ids"):
        token_statistics(logits, token_ids, mask, js_references=("group_mean_absorbing:kl",), temperature=1.0)
    with pytest.raises(ValueError, match="'ref'"):
        token_statistics(logits, token_ids, mask, js_references=("ref:kl",), temperature=1.0)
    hidden, weight, _, hidden_ids, hidden_mask = hidden_batch(25)
    with pytest.raises(ValueError, match="'ref'"):
        token_statistics_from_hidden(hidden, weight, hidden_ids, hidden_mask, js_references=("ref:wasserstein",), temperature=1.0)

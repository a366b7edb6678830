"""Every population ranked at once (``ict.core.ranking`` through the selectors' top-fraction and
top-unique-id selections) equals each population ranked alone with Python lists, ties drawn on
the same generator."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from selection_references import exact_count, reference_top_fraction, reference_top_unique


@given(
    seed=st.integers(0, 10_000),
    batch=st.integers(0, 7),
    length=st.integers(1, 12),
    ratio=st.sampled_from([0.05, 0.1, 0.25, 0.5, 0.9, 1.0]),
    scope=st.sampled_from(["batch", "sequence", "group"]),
    levels=st.sampled_from([2, 3, 1000]),
    with_generator=st.booleans(),
)
def test_top_fraction_selection_ranks_every_population_at_once_as_each_alone(
        seed, batch, length, ratio, scope, levels, with_generator):
    # few score levels make ties (and draws) common; NaN, +-inf and near-ties within the tolerance
    from ict.core.selectors import top_fraction_selection

    generator = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, levels, (batch, length), generator=generator).float() / levels
    scores += (torch.rand(batch, length, generator=generator) < 0.1) * 5e-7
    special = torch.rand(batch, length, generator=generator)
    scores[special < 0.03] = float("nan")
    scores[(special >= 0.03) & (special < 0.05)] = float("inf")
    scores[(special >= 0.05) & (special < 0.07)] = float("-inf")
    mask = torch.rand(batch, length, generator=generator) > 0.3
    group_ids = torch.randint(0, 3, (batch,), generator=generator) * 10  # uneven, unsorted groups
    ours = top_fraction_selection(scores, mask, ratio, scope, group_ids,
                                  torch.Generator().manual_seed(seed + 1) if with_generator else None)
    expected, expected_decided = reference_top_fraction(
        scores, mask, ratio, scope, group_ids, torch.Generator().manual_seed(seed + 1) if with_generator else None)
    assert torch.equal(ours.mask, expected)
    assert torch.equal(ours.tie_decided, expected_decided)


@given(
    seed=st.integers(0, 10_000),
    batch=st.integers(0, 7),
    length=st.integers(1, 12),
    vocab=st.sampled_from([3, 8, 50]),
    ratio=st.sampled_from([0.05, 0.1, 0.25, 0.5, 0.9, 1.0]),
    scope=st.sampled_from(["batch", "sequence", "group"]),
    levels=st.sampled_from([2, 3, 1000]),
    with_generator=st.booleans(),
)
def test_top_unique_token_selection_ranks_every_population_at_once_as_each_alone(
        seed, batch, length, vocab, ratio, scope, levels, with_generator):
    from ict.core.selectors import top_unique_token_selection

    generator = torch.Generator().manual_seed(seed)
    scores = torch.randint(0, levels, (batch, length), generator=generator).float() / levels
    scores[torch.rand(batch, length, generator=generator) < 0.03] = float("nan")
    token_ids = torch.randint(0, vocab, (batch, length), generator=generator)
    mask = torch.rand(batch, length, generator=generator) > 0.3
    group_ids = torch.randint(0, 3, (batch,), generator=generator) * 10  # uneven, unsorted groups
    ours = top_unique_token_selection(scores, token_ids, mask, ratio, scope, group_ids,
                                      torch.Generator().manual_seed(seed + 1) if with_generator else None)
    expected, expected_decided = reference_top_unique(
        scores, token_ids, mask, ratio, scope, group_ids,
        torch.Generator().manual_seed(seed + 1) if with_generator else None)
    assert torch.equal(ours.mask, expected)
    assert torch.equal(ours.tie_decided, expected_decided)


def test_ranking_by_id_refuses_ids_its_keys_cannot_hold_and_accepts_their_ends():
    """Each (population, id) key holds the id in 33 bits: an id outside ``[-2^32, 2^32)`` at a
    response position would run into the population's bits (ranked with another population's ids);
    it is refused in one line, read with the table's width (no read of its own). Outside the
    response mask any id is ignored, and the range's ends are ranked as ids."""
    from ict.core.ranking import top_unique_token_selection

    mask = torch.tensor([[True, True, False], [True, True, True]])
    scores = torch.tensor([[0.9, 0.1, 0.0], [0.8, 0.2, 0.5]])
    ends = torch.tensor([[-(1 << 32), 7, 1 << 40], [(1 << 32) - 1, 7, 3]])  # 2^40 lies outside the mask
    selection = top_unique_token_selection(scores, ends, mask, 0.5, "sequence")
    assert selection.mask.tolist() == [[True, False, False], [True, False, True]]  # ceil(0.5 U) of U = 2, 3 ids
    for outside in (1 << 32, -(1 << 32) - 1):
        ids = ends.clone()
        ids[1, 2] = outside
        with pytest.raises(ValueError, match=r"token_ids must lie in \[-2\^32, 2\^32\) to be ranked by id: 1 "):
            top_unique_token_selection(scores, ids, mask, 0.5, "sequence")


@given(
    numerator=st.integers(1, 1_000_000),
    sizes=st.lists(st.integers(0, 1_000_000), min_size=1, max_size=8),
)
def test_selection_counts_are_the_exact_decimal_counts_on_the_device(numerator, sizes):
    """`selection_counts` (float64, on the tensor's device) equals ``ceil(ratio n)`` computed in
    exact rationals for every ratio of at most 6 decimals and n up to 10^6, where a product lands
    on an integer (0.1 x 30) or within 1e-6 of one; and equals the host's `selection_count`."""
    from ict.core.ranking import selection_count, selection_counts

    ratio = numerator / 1_000_000
    counts = selection_counts(ratio, torch.tensor(sizes))
    assert counts.dtype == torch.long
    assert counts.tolist() == [exact_count(ratio, size) for size in sizes]
    assert [selection_count(ratio, size) for size in sizes] == counts.tolist()


@pytest.mark.parametrize("ratio", [1e-12, 1e-300, 5e-324])
def test_a_tiny_ratio_still_selects_one_token_of_a_population(ratio):
    """``ceil(ratio n)`` of a positive product is at least 1 even where the product lies within
    the count's noise of 0 (it used to round to 0 tokens); an empty population still gets 0."""
    from ict.core.ranking import selection_counts

    assert selection_counts(ratio, torch.tensor([0, 1, 20, 10**6])).tolist() == [0, 1, 1, 1]


def test_tie_keys_are_the_generators_uniform_float64_draw():
    """``tie_keys``: ``torch.rand(shape, float64)`` from the generator (a new one seeded with 0
    without one), on the values' device."""
    from ict.core.ranking import tie_keys

    expected = torch.rand((3, 5), generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert torch.equal(tie_keys((3, 5), torch.device("cpu")), expected)
    generator = torch.Generator().manual_seed(7)
    twin = torch.Generator().manual_seed(7)
    assert torch.equal(tie_keys((2, 4), "cpu", generator), torch.rand((2, 4), generator=twin, dtype=torch.float64))
    assert torch.equal(generator.get_state(), twin.get_state())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_tie_keys_reach_the_device_from_a_host_generator():
    """A CPU generator's keys land on the CUDA device (through pinned memory), equal to its draw;
    a CUDA generator's are drawn there."""
    from ict.core.ranking import tie_keys

    device = torch.device("cuda")
    keys = tie_keys((4, 6), device, torch.Generator().manual_seed(3))
    assert keys.device.type == "cuda"
    expected = torch.rand((4, 6), generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    assert torch.equal(keys.cpu(), expected)
    on_device = tie_keys((4, 6), device, torch.Generator(device=device).manual_seed(3))
    assert on_device.device.type == "cuda" and on_device.dtype == torch.float64

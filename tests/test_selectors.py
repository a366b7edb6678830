"""Selectors: counts, subsets, ties, edge cases, and agreement with the peers' rules."""

from __future__ import annotations

import math
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from selection_references import exact_count, make_inputs

from ict.core.selectors import (
    ICT_DEFAULT_REFERENCE,
    SELECTORS,
    SelectionInputs,
    register_selector,
    required_js_references,
    select_tokens,
)
from ict.core.stats import JS_REFERENCES, TokenStatistics


@given(
    seed=st.integers(0, 1000),
    ratio=st.sampled_from([0.01, 0.05, 0.1, 0.2, 0.3, 0.5, 0.999, 1.0]),
    name=st.sampled_from(["entropy", "ict", "random"]),
    batch=st.integers(1, 5),
    length=st.integers(1, 30),
)
def test_top_fraction_selectors_select_exactly_ceil_ratio_n(seed, ratio, name, batch, length):
    inputs = make_inputs(seed, batch, length)
    scope = {"scope": "batch"} if name == "ict" else {}  # ict's default ranks each response
    mask = select_tokens(name, inputs, ratio=ratio, **scope)
    n = int(inputs.response_mask.sum())
    assert mask.dtype == torch.bool
    assert not (mask & ~inputs.response_mask).any()
    assert int(mask.sum()) == exact_count(ratio, n)


def test_ratio_edge_cases():
    inputs = make_inputs(length=10, mask_rate=-1.0)  # every token is a response token: N = 40
    assert int(select_tokens("ict", inputs, ratio=1.0).sum()) == 40
    assert int(select_tokens("ict", inputs, ratio=0.001, scope="batch").sum()) == 1  # fewer than 1/ratio: one
    assert int(select_tokens("entropy", inputs, ratio=0.1).sum()) == 4  # 0.1 * 40 is 4, not 5
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match=r"ratio must be in \(0, 1\]"):
            select_tokens("ict", inputs, ratio=bad)
    empty = make_inputs()
    empty.response_mask = torch.zeros_like(empty.response_mask)
    for name in SELECTORS:
        assert not select_tokens(name, empty).any()


def _tied_inputs(values, seed=0):
    """One row of scores ``values`` as both entropy and every JS score; token ids all distinct."""
    scores = torch.tensor([values], dtype=torch.float32)
    inputs = make_inputs(seed, batch=1, length=len(values), mask_rate=-1.0)
    inputs.stats.entropy = scores.clone()
    inputs.stats.js_scores = {name: scores.clone() for name in JS_REFERENCES}
    inputs.token_ids = torch.arange(len(values)).view(1, -1)
    return inputs


def _run(kind, inputs, ratio):
    from ict.core.selectors import select

    if kind == "ict_token_id":
        return select("ict", inputs, ratio=ratio, unit="token_id")
    return select(kind, inputs, ratio=ratio)


@pytest.mark.parametrize("kind", ["all", "random"])
def test_a_selector_that_ranks_nothing_decides_nothing_by_a_tie(kind):
    # all scores equal (every token tied), yet these selectors do not rank: tie_decided is all False
    from ict.core.selectors import select

    inputs = _tied_inputs([1.0] * 12, 0)
    selection = select(kind, inputs) if kind == "all" else select(kind, inputs, ratio=0.25)
    assert selection.tie_decided is not None and selection.tie_decided.shape == selection.mask.shape
    assert selection.mask.any() and not selection.tie_decided.any()


@pytest.mark.parametrize("kind", ["entropy", "ict", "ict_token_id"])
def test_ties_at_the_threshold_are_drawn_at_random_and_reported(kind):
    # k = 3 of 12, all tied: 3 tokens drawn, all decided by a tie; the draw follows the generator.
    masks = []
    for seed in range(200):
        selection = _run(kind, _tied_inputs([1.0] * 12, seed), 0.25)
        assert int(selection.mask.sum()) == 3
        assert torch.equal(selection.tie_decided, selection.mask)
        again = _run(kind, _tied_inputs([1.0] * 12, seed), 0.25)
        assert torch.equal(again.mask, selection.mask)  # deterministic given the generator
        masks.append(selection.mask[0].double())
    frequency = torch.stack(masks).mean(0)  # each position expects 3/12 = 0.25
    assert frequency.min() > 0.12 and frequency.max() < 0.38
    assert frequency[:6].mean() == pytest.approx(0.25, abs=0.05)  # no pull towards the start
    # Hand-built: 2.0 is above the threshold (1.0) by more than the tolerance, so it is kept and
    # not tie-decided; 2 slots remain for the four values within 1e-6 of 1.0 (near-ties
    # included); 0.5 is never kept.
    values = [1.0, 0.5, 1.0 + 5e-7, 2.0, 1.0 - 5e-7, 1.0]
    for seed in range(20):
        selection = _run(kind, _tied_inputs(values, seed), 0.5)
        mask, tie = selection.mask[0].tolist(), selection.tie_decided[0].tolist()
        assert mask[3] and not tie[3] and not mask[1]
        assert sum(mask[i] for i in (0, 2, 4, 5)) == 2 and tie == [m and i != 3 for i, m in enumerate(mask)]
    # Distinct scores (gaps > tolerance): no tie, the top ones. The tie keys are drawn all the
    # same, one float64 per token (so that whether a tie draws is never read back from the
    # device): the generator moves on by exactly that draw.
    inputs = _tied_inputs([0.3, 0.1, 0.2, 0.4], 0)
    expected = torch.Generator().manual_seed(0)
    expected.set_state(inputs.generator.get_state())
    torch.rand((1, 4), generator=expected, dtype=torch.float64)
    selection = _run(kind, inputs, 0.5)
    assert selection.mask[0].tolist() == [True, False, False, True] and not selection.tie_decided.any()
    assert torch.equal(inputs.generator.get_state(), expected.get_state())
    # Enough room for every tied value: kept, no draw, not tie-decided.
    selection = _run(kind, _tied_inputs([1.0, 1.0, 0.0, 0.0], 0), 0.5)
    assert selection.mask[0].tolist() == [True, True, False, False] and not selection.tie_decided.any()


def test_top_count_without_a_generator_is_deterministic_and_ranks_nan_and_inf_first():
    from ict.core.selectors import top_count

    values = torch.ones(10)
    first, tie = top_count(values, 4)
    second, _ = top_count(values, 4)
    assert torch.equal(first, second) and int(tie.sum()) == 4
    values = torch.tensor([0.5, float("nan"), float("inf"), 2.0, float("-inf")])
    keep, tie = top_count(values, 3)
    assert sorted(keep.tolist()) == [1, 2, 3] and not tie.any()
    keep, tie = top_count(torch.full((6,), float("nan")), 2)
    assert keep.numel() == 2 and int(tie.sum()) == 2
    keep, tie = top_count(torch.tensor([float("-inf")] * 3 + [1.0]), 2)
    assert 3 in keep.tolist() and keep.numel() == 2 and int(tie.sum()) == 1


def reference_20_entropy_mask(entropy: torch.Tensor, response_mask: torch.Tensor, top_ratio: float) -> torch.Tensor:
    """The 20-Entropy reference rule, restated: batch-global top-k over response tokens, k = ceil."""
    values = entropy.flatten()[response_mask.flatten()]
    out = torch.zeros(entropy.numel(), dtype=torch.bool)
    if values.numel() == 0:
        return out.view_as(entropy)
    k = max(1, int(values.numel() * top_ratio + 0.9999))
    positions = response_mask.flatten().nonzero().squeeze(1)
    out[positions[torch.topk(values, k).indices]] = True
    return out.view_as(entropy)


def trl_quantile_mask(entropy: torch.Tensor, response_mask: torch.Tensor, quantile: float) -> torch.Tensor:
    """TRL's get_high_entropy_mask rule, restated: entropy >= quantile over the non-pad entropies."""
    threshold = torch.quantile(entropy[response_mask].float(), quantile)
    return (entropy >= threshold) & response_mask


@pytest.mark.parametrize("seed", range(20))
def test_entropy_selector_equals_the_20_entropy_reference(seed):
    inputs = make_inputs(seed, batch=3, length=int(5 + seed * 3))
    ours = select_tokens("entropy", inputs, ratio=0.2)
    assert torch.equal(ours, reference_20_entropy_mask(inputs.stats.entropy, inputs.response_mask, 0.2))
    # TRL's quantile rule picks the same tokens when entropies are distinct ...
    assert torch.equal(ours, trl_quantile_mask(inputs.stats.entropy, inputs.response_mask, 0.8))


def test_trls_own_top_entropy_quantile_keeps_our_count_only_when_the_ratio_is_one_over_an_integer():
    """TRL 1.16's own ``get_high_entropy_mask`` as its ``_compute_loss`` calls it for
    ``top_entropy_quantile = q`` (threshold ``1 - q``), on distinct entropies: the top
    ``1 + floor(q (N - 1))`` tokens, ours at ``ratio = q`` for every ``N`` when ``q`` is 0.2 or 0.1,
    but 2 tokens where we keep ``ceil(0.3 * 7) = 3`` (docs/method.md claimed the counts always agree)."""
    pytest.importorskip("trl")
    from types import SimpleNamespace

    from trl import GRPOTrainer

    one_process = SimpleNamespace(accelerator=SimpleNamespace(
        pad_across_processes=lambda tensor, dim, pad_index: tensor, gather=lambda tensor: tensor))
    for q, n, theirs_count, ours_count in [(0.2, n, math.ceil(0.2 * n - 1e-9), None) for n in range(1, 41)] + [
            (0.1, n, math.ceil(0.1 * n - 1e-9), None) for n in range(1, 41)] + [(0.3, 7, 2, 3), (0.3, 4, 1, 2)]:
        entropy = torch.randperm(n, generator=torch.Generator().manual_seed(n)).float().view(1, n) / n
        mask = torch.ones(1, n, dtype=torch.bool)
        theirs = GRPOTrainer.get_high_entropy_mask(one_process, entropy, mask, 1 - q)
        inputs = make_inputs(0, batch=1, length=n, mask_rate=-1.0)
        inputs.stats.entropy = entropy
        ours = select_tokens("entropy", inputs, ratio=q)
        assert int(theirs.sum()) == theirs_count == 1 + math.floor(q * (n - 1) + 1e-9), (q, n)
        assert int(ours.sum()) == (theirs_count if ours_count is None else ours_count), (q, n)
        assert (theirs & ~ours).sum() == 0  # the top ones: TRL's are ours, or fewer of them


def test_trl_quantile_rule_differs_by_ties_and_normaliser():
    inputs = make_inputs(0, batch=1, length=10, mask_rate=-1.0)
    inputs.stats.entropy = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.9, 0.9, 0.9]])
    ours = select_tokens("entropy", inputs, ratio=0.2)
    theirs = trl_quantile_mask(inputs.stats.entropy, inputs.response_mask, 0.8)
    # ... but a tie at the threshold: we keep exactly k = 2 (drawn among the tied), TRL keeps all 3.
    assert int(ours.sum()) == 2 and int(theirs.sum()) == 3
    assert int(ours[0, -3:].sum()) == 2
    # Normaliser: our token_mean divides by the selected count, TRL's by all response tokens.
    per_token = torch.arange(10.0).view(1, 10)
    ours_loss = (per_token * ours).sum() / ours.sum()
    trl_loss = (per_token * ours).sum() / inputs.response_mask.sum()
    assert ours_loss / trl_loss == pytest.approx(10 / 2)


def test_stapo_rule_on_hand_built_cases():
    # One sequence with positive advantage, one with negative.
    log_probs = torch.log(
        torch.tensor(
            [
                [0.001, 0.001, 0.001, 0.001, 0.5, 0.0015],
                [0.001, 0.001, 0.5, 0.9, 0.9, 0.9],
            ]
        )
    )
    entropy = torch.tensor([[0.1, 0.2, 0.3, 0.4, 0.05, 2.0], [0.1, 0.1, 0.1, 0.1, 0.1, 0.1]])
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[0, 3] = False  # not a response token: never a candidate
    inputs = SelectionInputs(
        stats=TokenStatistics(log_probs, entropy, entropy.clone()),
        response_mask=mask,
        advantages=torch.tensor([1.0, -1.0]),
    )
    kept = select_tokens("stapo", inputs)
    # Candidates: row 0 positions 0, 1, 2, 5 (A > 0, p < 0.002); entropies 0.1, 0.2, 0.3, 2.0.
    threshold = torch.quantile(torch.tensor([0.1, 0.2, 0.3, 2.0], dtype=torch.float64), 0.75).item()
    assert threshold == pytest.approx(0.3 + 0.25 * 1.7)
    silenced = {(0, 0), (0, 1), (0, 2)}  # entropies below the threshold; position 5 (2.0) is kept
    expected = mask.clone()
    for position in silenced:
        expected[position] = False
    assert torch.equal(kept, expected)
    # No candidates (all advantages negative): nothing silenced.
    inputs.advantages = torch.tensor([-1.0, -1.0])
    assert torch.equal(select_tokens("stapo", inputs), mask)
    # tau_p raised above every probability makes every positive-advantage response token a candidate.
    inputs.advantages = torch.tensor([1.0, -1.0])
    assert int((mask & ~select_tokens("stapo", inputs, tau_p=1.0)).sum()) == 3


def test_ict_uses_the_requested_reference():
    inputs = make_inputs(3)
    for reference in ("seq_mean", "prev", "ref"):
        mask = select_tokens("ict", inputs, reference=reference, scope="batch")
        expected = reference_20_entropy_mask(inputs.stats.js_scores[reference], inputs.response_mask, 0.1)
        assert torch.equal(mask, expected)
    assert required_js_references("ict", {"reference": "prev"}) == ("prev",)
    # the documented default (docs/method.md): JS to the absorbing group mean
    assert required_js_references("ict") == ("group_mean_absorbing",)
    # The alive-only mean of the first comparison stays reachable by its old name.
    assert required_js_references("ict", {"reference": "group_mean"}) == ("group_mean",)
    assert required_js_references("entropy") == ()
    del inputs.stats.js_scores["prev"]
    with pytest.raises(ValueError, match="not computed"):
        select_tokens("ict", inputs, reference="prev")


def test_ict_sequence_scope_ranks_each_sequence():
    inputs = make_inputs(4, batch=5, length=20)
    mask = select_tokens("ict", inputs, ratio=0.2, scope="sequence", reference="seq_mean")
    for row in range(5):
        n = int(inputs.response_mask[row].sum())
        assert int(mask[row].sum()) == exact_count(0.2, n)
        scores = inputs.stats.js_scores["seq_mean"][row]
        if 0 < mask[row].sum() < n:
            assert scores[mask[row]].min() >= scores[inputs.response_mask[row] & ~mask[row]].max()


def test_ict_token_id_unit_selects_top_unique_ids_by_mean_score():
    inputs = make_inputs(5, batch=3, length=25, vocab=9)
    mask = select_tokens("ict", inputs, ratio=0.3, unit="token_id", reference="seq_mean", scope="batch")
    ids = inputs.token_ids[inputs.response_mask]
    scores = inputs.stats.js_scores["seq_mean"][inputs.response_mask]
    means = {int(i): scores[ids == i].double().mean().item() for i in ids.unique()}
    chosen = sorted(means, key=lambda i: -means[i])[: exact_count(0.3, len(means))]
    expected = inputs.response_mask & torch.isin(inputs.token_ids, torch.tensor(chosen))
    assert torch.equal(mask, expected)


def test_random_selector_is_seeded():
    inputs = make_inputs(6)
    inputs.generator = None
    first = select_tokens("random", inputs, seed=7)
    assert torch.equal(first, select_tokens("random", inputs, seed=7))
    assert not torch.equal(first, select_tokens("random", inputs, seed=8, ratio=0.1))


def test_unknown_names_and_options_are_errors():
    inputs = make_inputs()
    with pytest.raises(ValueError, match="unknown selector"):
        select_tokens("nope", inputs)
    with pytest.raises(ValueError, match="has no option"):
        select_tokens("entropy", inputs, reference="prev")
    from ict.core.selectors import check_options

    for seed in (2**64, -(2**63) - 1):  # passed the checks, then overflowed in torch.Generator
        with pytest.raises(ValueError, match=r"random's seed must be an integer in \[-2\^63, 2\^64\)"):
            check_options("random", {"seed": seed})
    check_options("random", {"seed": 2**64 - 1})


def test_users_can_register_a_selector():
    @register_selector("first_token_test", defaults={})
    def select_first_token(inputs):
        mask = torch.zeros_like(inputs.response_mask)
        mask[:, 0] = inputs.response_mask[:, 0]
        return mask

    try:
        inputs = make_inputs()
        assert torch.equal(select_tokens("first_token_test", inputs)[:, 0], inputs.response_mask[:, 0])

        @register_selector("outside_test")
        def select_outside(inputs):
            return torch.ones_like(inputs.response_mask)

        with pytest.raises(ValueError, match="outside the response mask"):
            select_tokens("outside_test", inputs)
    finally:
        SELECTORS.pop("first_token_test", None)
        SELECTORS.pop("outside_test", None)


# ---------------------------------------------------------------------------------------------
# Scopes, populations, presets, option parsing, plugins, STAPO's strict rule, Clip-Cov, KL-Cov

from ict.core.selectors import (  # noqa: E402
    Selection,
    get_preset,
    load_plugin,
    parse_selector_options,
    ranking_population,
    resolve_options,
    select,
)


def test_group_scope_ranks_each_group_alone():
    inputs = make_inputs(11, batch=6, length=12)
    inputs.group_ids = torch.tensor([3, 1, 3, 1, 7, 7])
    mask = select_tokens("ict", inputs, ratio=0.25, scope="group")
    scores = inputs.stats.js_scores[ICT_DEFAULT_REFERENCE]
    for label in (1, 3, 7):
        rows = [row for row in range(6) if int(inputs.group_ids[row]) == label]
        cells = [(row, t) for row in rows for t in range(12) if inputs.response_mask[row, t]]
        # independent rule: sort by (-score, row-major position), keep ceil(0.25 n)
        cells.sort(key=lambda cell: (-float(scores[cell]), cell))
        keep = set(cells[: exact_count(0.25, len(cells))])
        got = {(row, t) for row in rows for t in range(12) if mask[row, t]}
        assert got == keep


@pytest.mark.parametrize("name", sorted(["all", "entropy", "stapo", "ict", "random", "clip_cov", "kl_cov"]))
def test_selection_on_a_population_equals_selection_on_the_batch(name):
    """A selector given exactly its ranking population returns the same mask as on the whole
    batch: what lets the trainer select per micro-batch when micro-batches hold populations."""
    inputs = make_inputs(12, batch=6, length=10)
    options = {"scope": "group"} if name in ("ict", "random") else {}
    population = ranking_population(name, options)
    if population == "batch":
        pytest.skip("a batch-population selector must see the whole batch: nothing to split")
    full = select_tokens(name, inputs, **options)
    parts = population_rows_for_test(population, inputs)
    for rows in parts:
        part = SelectionInputs(
            stats=TokenStatistics(*(getattr(inputs.stats, f)[rows] for f in ("log_probs", "entropy", "renyi2")),
                                  js_scores={k: v[rows] for k, v in inputs.stats.js_scores.items()}),
            response_mask=inputs.response_mask[rows], advantages=inputs.advantages[rows],
            token_ids=inputs.token_ids[rows], group_ids=inputs.group_ids[rows])
        assert torch.equal(select_tokens(name, part, **options), full[rows])


def population_rows_for_test(population, inputs):
    batch = inputs.response_mask.shape[0]
    if population in ("token", "sequence"):
        return [torch.tensor([row]) for row in range(batch)]
    return [torch.tensor([row for row in range(batch) if int(inputs.group_ids[row]) == label])
            for label in inputs.group_ids.unique().tolist()]


def test_ranking_populations_come_from_the_registry():
    assert ranking_population("all") == "token"
    assert ranking_population("entropy") == "batch"
    assert ranking_population("stapo") == "batch"
    assert ranking_population("ict") == "sequence"  # the paper's per-response percentile
    assert ranking_population("ict", {"scope": "batch"}) == "batch"
    assert ranking_population("random", {"scope": "group"}) == "batch"  # one draw over the batch
    with pytest.raises(ValueError, match="scope must be one of"):
        select_tokens("ict", make_inputs(), scope="micro")


def test_paper_preset_and_option_parsing():
    preset = get_preset("ict", "paper")
    assert preset.selector_options["reference"] == "group_mean_absorbing"  # the reading docs/method.md chose
    assert preset.selector_options["scope"] == "sequence"
    assert preset.train_options["aggregation"] == "seq_mean_token_mean"
    assert resolve_options("ict", {"ratio": 0.2}, preset="paper") == {
        "ratio": 0.2, "reference": "group_mean_absorbing", "unit": "position", "scope": "sequence",
        "metric": "js", "complement": False}
    with pytest.raises(ValueError, match="no preset"):
        resolve_options("entropy", preset="paper")
    assert parse_selector_options("ict", {"ratio": "0.2", "reference": "prev"}) == {"ratio": 0.2, "reference": "prev"}
    assert parse_selector_options("random", {"seed": "7"}) == {"seed": 7}
    with pytest.raises(ValueError, match="is not a float"):
        parse_selector_options("ict", {"ratio": "lots"})
    with pytest.raises(ValueError, match="accepted: ratio"):
        parse_selector_options("entropy", {"ratioo": "0.1"})


def test_random_paper_preset_is_icts_recipe_with_a_random_score():
    """random:preset=paper differs from ict only in the score: ICT's per-response scope and
    training options, and each response gets exactly ceil(0.1 * its length) random tokens."""
    from ict.core.selectors import method_train_options

    assert resolve_options("random", preset="paper") == {"ratio": 0.1, "seed": None, "scope": "sequence"}
    assert method_train_options("random", "paper") == {"aggregation": "seq_mean_token_mean",
                                                       "full_token_warmup_steps": 10}
    assert method_train_options("random", "paper") == method_train_options("ict")
    inputs = make_inputs(5, batch=6, length=23, mask_rate=0.2)
    mask = select_tokens("random", inputs, **resolve_options("random", preset="paper"))
    for row in range(6):
        length = int(inputs.response_mask[row].sum())
        assert int(mask[row].sum()) == exact_count(0.1, length)
    assert not (mask & ~inputs.response_mask).any()


def test_a_plugin_file_registers_a_selector(tmp_path):
    plugin = tmp_path / "my_selector.py"
    plugin.write_text(
        "from ict.core.selectors import register_selector\n"
        "@register_selector('last_token_plugin', defaults={'keep': 1})\n"
        "def select_last(inputs, keep):\n"
        "    '''Keep the last response token of each row.'''\n"
        "    mask = inputs.response_mask.clone()\n"
        "    mask[:, :-keep] = False\n"
        "    return mask\n")
    try:
        load_plugin(str(plugin))
        inputs = make_inputs(mask_rate=-1.0)
        mask = select_tokens("last_token_plugin", inputs)
        assert mask[:, -1].all() and not mask[:, :-1].any()
        assert SELECTORS["last_token_plugin"].description == "Keep the last response token of each row."
    finally:
        SELECTORS.pop("last_token_plugin", None)
    with pytest.raises(ValueError, match="cannot import plugin"):
        load_plugin("no_such_module_for_ict")


def test_stapo_candidates_need_strictly_positive_advantage():
    """Zero-advantage low-probability tokens are not candidates: counting them (A >= 0) would
    change the entropy quantile and so which positive-advantage tokens are silenced."""
    log_probs = torch.log(torch.full((2, 4), 0.001))
    entropy = torch.tensor([[0.1, 0.2, 0.3, 0.4], [0.05, 0.06, 0.07, 0.08]])
    mask = torch.ones(2, 4, dtype=torch.bool)
    inputs = SelectionInputs(stats=TokenStatistics(log_probs, entropy, entropy.clone()),
                             response_mask=mask, advantages=torch.tensor([1.0, 0.0]))
    kept = select_tokens("stapo", inputs)
    # A > 0: candidates are row 0 only; quantile 0.75 of [0.1..0.4] = 0.325 -> silence 0.1, 0.2, 0.3.
    strict = mask.clone()
    strict[0, :3] = False
    assert torch.equal(kept, strict)
    # A >= 0 would add row 1 (entropies 0.05-0.08): quantile of 8 values = 0.2125 silences
    # 0.1, 0.2 and all of row 1, keeping (0, 2): a different mask.
    threshold = torch.quantile(entropy.flatten().double(), 0.75)
    non_strict = mask & ~(entropy.double() < threshold)
    assert not torch.equal(non_strict, strict)


def hand_covariance(log_probs, advantages, mask):
    cells = [(b, t) for b in range(mask.shape[0]) for t in range(mask.shape[1]) if mask[b, t]]
    mean_lp = sum(float(log_probs[c]) for c in cells) / len(cells)
    mean_a = sum(float(advantages[c[0]]) for c in cells) / len(cells)
    return {c: (float(log_probs[c]) - mean_lp) * (float(advantages[c[0]]) - mean_a) for c in cells}


def test_kl_cov_penalises_the_largest_covariance_tokens():
    log_probs = torch.tensor([[-0.1, -3.0, -0.5, -2.0], [-1.0, -0.2, -4.0, -0.3]])
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]], dtype=torch.bool)
    advantages = torch.tensor([1.5, -1.0])
    inputs = SelectionInputs(TokenStatistics(log_probs, torch.ones(2, 4), torch.ones(2, 4)), mask, advantages)
    selection = select("kl_cov", inputs, ratio=0.3, kl_coef=0.5)
    covariance = hand_covariance(log_probs, advantages, mask)
    top = sorted(covariance, key=lambda c: -covariance[c])[: max(1, int(0.3 * 7))]  # 2 tokens
    expected = torch.zeros(2, 4)
    for cell in top:
        expected[cell] = 0.5
    assert isinstance(selection, Selection)
    assert torch.equal(selection.mask, mask)
    assert torch.equal(selection.kl_penalty, expected)


def test_clip_cov_cuts_random_tokens_within_the_covariance_band():
    log_probs = torch.tensor([[-0.1, -3.0, -0.5, -2.0, -6.0], [-1.0, -0.2, -4.0, -0.3, -5.0]])
    mask = torch.ones(2, 5, dtype=torch.bool)
    advantages = torch.tensor([2.0, -2.0])
    inputs = SelectionInputs(TokenStatistics(log_probs, torch.ones(2, 5), torch.ones(2, 5)), mask, advantages,
                             generator=torch.Generator().manual_seed(0))
    covariance = hand_covariance(log_probs, advantages, mask)
    band = {c for c, v in covariance.items() if 0.5 < v < 5.0}
    kept = select_tokens("clip_cov", inputs, ratio=0.2, cov_low=0.5, cov_high=5.0)
    cut = {(b, t) for b in range(2) for t in range(5) if mask[b, t] and not kept[b, t]}
    assert len(cut) == min(max(1, int(0.2 * 10)), len(band)) and cut <= band
    # A band that holds no token cuts nothing.
    assert torch.equal(select_tokens("clip_cov", inputs, cov_low=100.0, cov_high=200.0), mask)


@given(seed=st.integers(0, 1000), batch=st.integers(1, 5), length=st.integers(1, 20),
       mask_rate=st.sampled_from([0.0, 0.3, 0.9]))
def test_every_built_in_selector_keeps_within_the_response_mask(seed, batch, length, mask_rate):
    """`select` checks only the masks of selectors registered elsewhere (a host sync); the built-in
    ones, with their defaults and every preset, and ICT at every scope and unit, must stay within
    the response mask by themselves."""
    inputs = make_inputs(seed, batch, length, mask_rate=mask_rate)
    for name, selector in SELECTORS.items():
        assert selector.built_in, name
        variants = [{}, *(preset.selector_options for preset in selector.presets.values())]
        if name == "ict":
            variants += [{"scope": scope, "unit": unit} for scope in ("sequence", "group", "batch")
                         for unit in ("position", "token_id")]
        for options in variants:
            mask = select_tokens(name, inputs, **options)
            assert mask.dtype == torch.bool and mask.shape == inputs.response_mask.shape, (name, options)
            assert not (mask & ~inputs.response_mask).any(), (name, options)


@pytest.mark.parametrize("name,options,message", [
    ("ict", {"complement": "no"}, "option complement must be true or false, got 'no'"),
    ("ict", {"ratio": math.nan}, "option ratio must be a finite number"),
    ("ict", {"reference": 3}, "option reference must be text"),
    ("kl_cov", {"kl_coef": -1.0}, "option kl_coef must be >= 0"),
    ("kl_cov", {"kl_coef": math.inf}, "option kl_coef must be a finite number"),
    ("stapo", {"tau_p": math.nan}, "option tau_p must be a finite number"),
    ("stapo", {"quantile": 1.5}, "option quantile must be in [0, 1]"),
    ("stapo", {"tau_p": 1.5}, "option tau_p must be in [0, 1]"),  # a probability threshold
    ("entropy", {"ratio": True}, "option ratio must be a finite number"),
    ("random", {"seed": math.inf}, "option seed must be a finite number, got inf"),
    ("kl_cov", {"kl_coef": 0.0}, None),
    ("stapo", {"tau_p": 1.0, "quantile": 0.0}, None),
])
def test_a_selector_option_of_the_wrong_kind_or_range_is_refused(name, options, message):
    """Options given from Python are checked as the command line's are: the default's kind (a
    string would read as a true `complement`) and the option's range (a negative KL-Cov
    coefficient rewards moving away from the old policy). A range's ends are allowed."""
    if message is None:
        select_tokens(name, make_inputs(), **options)
        return
    with pytest.raises(ValueError, match=re.escape(message)):
        select_tokens(name, make_inputs(), **options)


def test_an_option_range_is_the_selectors_own():
    """A plugin's option named like a built-in's (``quantile``) is not held to the built-in's
    range; ranges are declared per selector, and one for an option the selector lacks is refused."""
    from ict.core.selectors import SELECTORS, register_selector

    try:
        @register_selector("quantile_plugin", defaults={"quantile": 0.5})
        def keep_all(inputs, quantile):
            """Keep every response token."""
            return inputs.response_mask.bool()

        assert select_tokens("quantile_plugin", make_inputs(), quantile=2.0).equal(make_inputs().response_mask.bool())
        with pytest.raises(ValueError, match="ranges given for 'tau', which is not one of its options"):
            register_selector("bad_ranges", defaults={"quantile": 0.5}, ranges={"tau": (0.0, 1.0)})
    finally:
        SELECTORS.pop("quantile_plugin", None)


@pytest.mark.parametrize("field,value,message", [
    ("group_ids", torch.tensor([0, 0, 1]), "group_ids must be [B] = [4], got [3]"),
    ("group_ids", torch.zeros(4, 1, dtype=torch.long), "group_ids must be [B] = [4], got [4, 1]"),
    ("advantages", torch.ones(1), "advantages must be [B] = [4] or [B, T] = [4, 16], got [1]"),
    ("token_ids", torch.zeros(4, 15, dtype=torch.long), "token_ids must be [B, T] = [4, 16]"),
])
def test_selection_inputs_of_the_wrong_shape_are_refused(field, value, message):
    """A `group_ids` shorter than the batch left its last rows out of every group (never selected);
    inputs torch would broadcast, or fail on deep inside, are one ValueError naming the input."""
    inputs = make_inputs()
    setattr(inputs, field, value)
    with pytest.raises(ValueError, match=re.escape(message)):
        select_tokens("ict", inputs, scope="group", ratio=0.5)


def test_a_misspelt_reference_is_named_as_unknown_not_as_one_to_compute():
    """`reference="group_maen"` said "pass js_references=('group_maen',)", a name that does not
    exist; it is now the unknown-reference error listing the real ones."""
    with pytest.raises(ValueError, match="unknown JS reference 'group_maen'; choose from group_mean"):
        select_tokens("ict", make_inputs(), reference="group_maen")

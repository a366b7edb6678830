"""Token statistics against plain float64 full-softmax formulas written here."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from ict.core.stats import token_statistics, token_statistics_from_hidden


def _tile(tokens: int | None) -> tuple[int, int] | None:
    """A tile of ``tokens`` rows by 5 vocabulary ids (no test vocabulary is a multiple of 5), or
    None for the device's default tile."""
    return None if tokens is None else (tokens, 5)

LN2 = math.log(2.0)


def reference_distributions(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.double() / temperature, dim=-1)


def reference_entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1)


def reference_js(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """JS via its KL definition (not the entropy identity the code uses)."""
    m = 0.5 * (p + q)

    def kl(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.where(a > 0, a * (a.log() - b.log()), torch.zeros_like(a)).sum(-1)

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def reference_statistics(logits, token_ids, mask, temperature, reference_logits=None):
    p = reference_distributions(logits, temperature)
    batch, length, _ = p.shape
    mask_d = mask.double()
    out = {
        "log_probs": torch.log_softmax(logits.double() / temperature, -1).gather(-1, token_ids[..., None])[..., 0]
        * mask_d,
        "entropy": reference_entropy(p) * mask_d,
        "renyi2": -torch.log((p**2).sum(-1)) * mask_d,
    }
    seq_mean = torch.zeros(batch, length, dtype=torch.float64)
    prev = torch.zeros(batch, length, dtype=torch.float64)
    for b in range(batch):
        positions = [t for t in range(length) if mask[b, t]]
        if not positions:
            continue
        mean = p[b, positions].mean(0)
        for index, t in enumerate(positions):
            seq_mean[b, t] = reference_js(p[b, t], mean)
            if index > 0:
                prev[b, t] = reference_js(p[b, t], p[b, positions[index - 1]])
    out["seq_mean"] = seq_mean
    out["prev"] = prev
    if reference_logits is not None:
        out["ref"] = reference_js(p, reference_distributions(reference_logits, temperature)) * mask_d
    return out


def make_batch(seed: int, batch=3, length=9, vocab=37, scale=3.0):
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(batch, length, vocab, generator=generator) * scale
    token_ids = torch.randint(0, vocab, (batch, length), generator=generator)
    mask = torch.rand(batch, length, generator=generator) > 0.25
    mask[0, 0] = True
    return logits, token_ids, mask


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
@pytest.mark.parametrize("chunk_size", [1, 4, None])
def test_matches_full_softmax_reference(temperature, chunk_size):
    logits, token_ids, mask = make_batch(0)
    reference_logits = torch.randn_like(logits) * 2
    stats = token_statistics(
        logits, token_ids, mask, temperature, ("seq_mean", "prev", "ref"), reference_logits, tile_size=_tile(chunk_size)
    )
    expected = reference_statistics(logits, token_ids, mask, temperature, reference_logits)
    for name in ("log_probs", "entropy", "renyi2"):
        torch.testing.assert_close(getattr(stats, name).double(), expected[name], atol=1e-5, rtol=0)
    for name in ("seq_mean", "prev", "ref"):
        torch.testing.assert_close(stats.js_scores[name].double(), expected[name], atol=1e-5, rtol=0)


@given(
    seed=st.integers(0, 10_000),
    batch=st.integers(1, 4),
    length=st.integers(1, 12),
    vocab=st.integers(2, 64),
    scale=st.floats(0.1, 20.0),
    temperature=st.floats(0.3, 2.0),
)
def test_properties_on_random_batches(seed, batch, length, vocab, scale, temperature):
    logits, token_ids, mask = make_batch(seed, batch, length, vocab, scale)
    stats = token_statistics(logits, token_ids, mask, temperature, ("seq_mean", "prev"), tile_size=_tile(5))
    expected = reference_statistics(logits, token_ids, mask, temperature)
    torch.testing.assert_close(stats.entropy.double(), expected["entropy"], atol=1e-5, rtol=0)
    torch.testing.assert_close(stats.js_scores["seq_mean"].double(), expected["seq_mean"], atol=1e-5, rtol=0)
    torch.testing.assert_close(stats.js_scores["prev"].double(), expected["prev"], atol=1e-5, rtol=0)
    for scores in stats.js_scores.values():
        assert scores.min() >= 0 and scores.max() <= LN2
    assert (stats.renyi2 <= stats.entropy + 1e-5).all()
    outside = ~mask
    for tensor in (stats.log_probs, stats.entropy, stats.renyi2, *stats.js_scores.values()):
        assert (tensor[outside] == 0).all()


def test_masked_vocabulary_and_extreme_logits_stay_finite():
    logits, token_ids, mask = make_batch(1, vocab=40, scale=1e4)
    logits[:, :, :10] = -float("inf")
    token_ids = token_ids.clamp(min=10)
    logits[0, 0, 10:] = 1e4  # a flat distribution over the finite entries
    stats = token_statistics(logits, token_ids, mask, 0.7, ("seq_mean", "prev"))
    for tensor in (stats.log_probs, stats.entropy, stats.renyi2, *stats.js_scores.values()):
        assert torch.isfinite(tensor).all()
    assert stats.entropy[0, 0].item() == pytest.approx(math.log(30), abs=1e-5)
    expected = reference_statistics(logits, token_ids, mask, 0.7)
    torch.testing.assert_close(stats.entropy.double(), expected["entropy"], atol=1e-4, rtol=0)
    torch.testing.assert_close(stats.js_scores["prev"].double(), expected["prev"], atol=1e-4, rtol=0)


def test_bfloat16_logits_are_computed_in_float32():
    logits, token_ids, mask = make_batch(2)
    low = logits.bfloat16()
    stats = token_statistics(low, token_ids, mask, 1.0, ("seq_mean",))
    expected = reference_statistics(low.float(), token_ids, mask, 1.0)
    assert stats.entropy.dtype == torch.float32
    torch.testing.assert_close(stats.entropy.double(), expected["entropy"], atol=1e-5, rtol=0)
    torch.testing.assert_close(stats.js_scores["seq_mean"].double(), expected["seq_mean"], atol=1e-5, rtol=0)


def test_known_values_of_js():
    # Two disjoint one-hot distributions: JS = ln 2; identical ones: 0.
    logits = torch.full((1, 2, 4), -float("inf"))
    logits[0, 0, 0] = 0.0
    logits[0, 1, 3] = 0.0
    stats = token_statistics(logits, torch.tensor([[0, 3]]), torch.ones(1, 2, dtype=torch.bool), 1.0, ("prev",))
    assert stats.js_scores["prev"][0].tolist() == pytest.approx([0.0, LN2], abs=1e-6)
    assert stats.entropy[0].tolist() == pytest.approx([0.0, 0.0], abs=1e-6)


def test_log_prob_gradient_matches_autograd_reference():
    logits, token_ids, mask = make_batch(3)
    logits[1, :, :5] = -float("inf")
    weights = torch.randn(logits.shape[:2], dtype=torch.float64)
    ours = logits.clone().requires_grad_()
    stats = token_statistics(ours, token_ids, mask, 0.8, tile_size=_tile(3))
    (stats.log_probs.double() * weights).sum().backward()
    theirs = logits.double().clone().requires_grad_()
    log_p = torch.log_softmax(theirs / 0.8, -1).gather(-1, token_ids[..., None])[..., 0]
    (log_p * mask * weights).sum().backward()
    torch.testing.assert_close(ours.grad.double(), theirs.grad, atol=1e-5, rtol=0)


def test_entropy_gradient_when_asked_for():
    logits, token_ids, mask = make_batch(4)
    weights = torch.randn(logits.shape[:2], dtype=torch.float64)
    ours = logits.clone().requires_grad_()
    stats = token_statistics(ours, token_ids, mask, 1.3, differentiable_entropy=True)
    (stats.entropy.double() * weights).sum().backward()
    theirs = logits.double().clone().requires_grad_()
    (reference_entropy(torch.softmax(theirs / 1.3, -1)) * mask * weights).sum().backward()
    torch.testing.assert_close(ours.grad.double(), theirs.grad, atol=1e-5, rtol=0)
    assert not token_statistics(logits.requires_grad_(), token_ids, mask, temperature=1.0).entropy.requires_grad


def test_log_prob_and_entropy_gradients_together():
    """The loss with an entropy bonus back-propagates through both outputs at once."""
    logits, token_ids, mask = make_batch(5)
    logits[0, :, :7] = -float("inf")
    log_prob_weights = torch.randn(logits.shape[:2], dtype=torch.float64)
    entropy_weights = torch.randn(logits.shape[:2], dtype=torch.float64)
    ours = logits.clone().requires_grad_()
    stats = token_statistics(ours, token_ids, mask, 0.7, differentiable_entropy=True, tile_size=_tile(2))
    ((stats.log_probs.double() * log_prob_weights).sum()
     + (stats.entropy.double() * entropy_weights).sum()).backward()
    theirs = logits.double().clone().requires_grad_()
    log_p = torch.log_softmax(theirs / 0.7, -1)
    probabilities = log_p.exp()
    # -sum p log p with 0 log 0 = 0, written so that autograd gives no nan at -inf logits
    entropy = -(probabilities * torch.where(probabilities > 0, log_p, 0.0)).sum(-1)
    picked = log_p.gather(-1, token_ids[..., None])[..., 0]
    ((picked * log_prob_weights + entropy * entropy_weights) * mask).sum().backward()
    assert torch.isfinite(ours.grad).all()
    torch.testing.assert_close(ours.grad.double(), theirs.grad, atol=1e-5, rtol=0)


def test_statistics_other_than_log_probs_build_no_graph():
    logits, token_ids, mask = make_batch(5)
    stats = token_statistics(logits.requires_grad_(), token_ids, mask, 1.0, ("seq_mean", "prev"))
    assert stats.log_probs.requires_grad
    assert not stats.entropy.requires_grad and not stats.renyi2.requires_grad
    assert not any(scores.requires_grad for scores in stats.js_scores.values())


def test_bad_inputs_raise_clear_errors():
    logits, token_ids, mask = make_batch(6)
    with pytest.raises(ValueError, match="unknown JS reference"):
        token_statistics(logits, token_ids, mask, js_references=("nope",), temperature=1.0)
    with pytest.raises(ValueError, match="reference_logits"):
        token_statistics(logits, token_ids, mask, js_references=("ref",), temperature=1.0)
    with pytest.raises(ValueError, match="temperature"):
        token_statistics(logits, token_ids, mask, temperature=0.0)
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        token_statistics(logits, token_ids[:, :-1], mask, temperature=1.0)


def test_empty_response_gives_zeros():
    logits, token_ids, _ = make_batch(7)
    mask = torch.zeros(token_ids.shape, dtype=torch.bool)
    stats = token_statistics(logits.requires_grad_(), token_ids, mask, 1.0, ("seq_mean", "prev"))
    assert stats.entropy.abs().sum() == 0 and stats.js_scores["seq_mean"].abs().sum() == 0
    stats.log_probs.sum().backward()
    assert logits.grad.abs().sum() == 0


def reference_group_mean_js(logits, mask, group_ids, temperature):
    """float64 loop: JS of p_{i,t} to the mean of p_{j,t} over rows j of i's group with mask[j, t]."""
    p = reference_distributions(logits, temperature)
    batch, length, _ = p.shape
    out = torch.zeros(batch, length, dtype=torch.float64)
    for i in range(batch):
        for t in range(length):
            if not mask[i, t]:
                continue
            members = [j for j in range(batch) if group_ids[j] == group_ids[i] and mask[j, t]]
            mean = torch.stack([p[j, t] for j in members]).mean(0)
            out[i, t] = reference_js(p[i, t], mean)
    return out


def ragged_group_batch(seed: int, group_ids, length=10, vocab=31, scale=3.0):
    """Logits with ragged completion lengths (a prefix mask per row, some rows end early)."""
    generator = torch.Generator().manual_seed(seed)
    batch = len(group_ids)
    logits = torch.randn(batch, length, vocab, generator=generator) * scale
    token_ids = torch.randint(0, vocab, (batch, length), generator=generator)
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return logits, token_ids, mask, torch.tensor(group_ids)


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
        logits, token_ids, mask, temperature, ("group_mean", "seq_mean"), tile_size=_tile(chunk_size), group_ids=groups
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
    stats = token_statistics(logits, token_ids, mask, 1.3, ("group_mean",), tile_size=_tile(2), group_ids=groups)
    expected = reference_group_mean_js(logits, mask, groups, 1.3)
    torch.testing.assert_close(stats.js_scores["group_mean"].double(), expected, atol=1e-5, rtol=0)


@given(
    seed=st.integers(0, 10_000),
    group_ids=st.lists(st.integers(0, 3), min_size=1, max_size=6),
    vocab=st.integers(2, 40),
    scale=st.floats(0.1, 20.0),
    chunk_size=st.integers(1, 8),
)
def test_group_mean_properties(seed, group_ids, vocab, scale, chunk_size):
    logits, token_ids, mask, groups = ragged_group_batch(seed, group_ids, length=6, vocab=vocab, scale=scale)
    stats = token_statistics(logits, token_ids, mask, 1.0, ("group_mean",), tile_size=_tile(chunk_size), group_ids=groups)
    scores = stats.js_scores["group_mean"]
    assert scores.min() >= 0 and scores.max() <= LN2
    assert (scores[~mask] == 0).all()
    torch.testing.assert_close(scores.double(), reference_group_mean_js(logits, mask, groups, 1.0), atol=1e-5, rtol=0)
    # Identical rows in one group: every row equals the group mean, so JS = 0.
    same = logits[:1].expand_as(logits).clone()
    full = torch.ones_like(mask)
    same_stats = token_statistics(same, token_ids, full, 1.0, ("group_mean",), tile_size=_tile(chunk_size),
                                  group_ids=torch.zeros_like(groups))
    assert same_stats.js_scores["group_mean"].abs().max() <= 1e-6


def test_group_mean_needs_group_ids():
    logits, token_ids, mask = make_batch(13)
    with pytest.raises(ValueError, match="group_ids"):
        token_statistics(logits, token_ids, mask, js_references=("group_mean",), temperature=1.0)
    with pytest.raises(ValueError, match="group_ids"):
        token_statistics(logits, token_ids, mask, js_references=("group_mean",), group_ids=torch.zeros(2), temperature=1.0)


def hidden_batch(seed: int, batch=4, length=7, width=6, vocab=29, bias=True):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, length, width, generator=generator)
    weight = torch.randn(vocab, width, generator=generator)
    lm_bias = torch.randn(vocab, generator=generator) if bias else None
    token_ids = torch.randint(0, vocab, (batch, length), generator=generator)
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return hidden, weight, lm_bias, token_ids, mask


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_hidden_path_matches_float64_reference_and_logits_path(bias, chunk_size):
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(21, bias=bias)
    groups = torch.tensor([3, 1, 3, 1])
    temperature = 0.8
    references = ("group_mean", "seq_mean", "prev")
    lp_weights = torch.randn(mask.shape, dtype=torch.float64)
    entropy_weights = torch.randn(mask.shape, dtype=torch.float64)

    ours = [hidden.clone().requires_grad_(), weight.clone().requires_grad_()]
    if bias:
        ours.append(lm_bias.clone().requires_grad_())
    stats = token_statistics_from_hidden(
        ours[0], ours[1], token_ids, mask, temperature, references, group_ids=groups,
        lm_head_bias=ours[2] if bias else None, differentiable_entropy=True, tile_size=_tile(chunk_size),
    )
    ((stats.log_probs.double() * lp_weights).sum() + (stats.entropy.double() * entropy_weights).sum()).backward()

    # Independent float64 reference: full logits, full softmax, autograd.
    theirs = [tensor.double().clone().requires_grad_() for tensor in ([hidden, weight] + ([lm_bias] if bias else []))]
    logits64 = theirs[0] @ theirs[1].T + (theirs[2] if bias else 0.0)
    log_p = torch.log_softmax(logits64 / temperature, -1)
    probabilities = log_p.exp()
    entropy = -(probabilities * torch.where(probabilities > 0, log_p, 0.0)).sum(-1)
    picked = log_p.gather(-1, token_ids[..., None])[..., 0]
    ((picked * lp_weights + entropy * entropy_weights) * mask).sum().backward()
    expected = reference_statistics(logits64.detach(), token_ids, mask, temperature)
    for name in ("log_probs", "entropy", "renyi2"):
        torch.testing.assert_close(getattr(stats, name).double(), expected[name], atol=1e-5, rtol=0)
    for name in ("seq_mean", "prev"):
        torch.testing.assert_close(stats.js_scores[name].double(), expected[name], atol=1e-5, rtol=0)
    torch.testing.assert_close(
        stats.js_scores["group_mean"].double(),
        reference_group_mean_js(logits64.detach(), mask, groups, temperature), atol=1e-5, rtol=0,
    )
    for mine, reference in zip(ours, theirs):
        torch.testing.assert_close(mine.grad.double(), reference.grad, atol=1e-5, rtol=0)

    # And equal to the logits path on the same float32 logits (values and gradients).
    hidden_l, weight_l = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    logits32 = hidden_l @ weight_l.T + (lm_bias if bias else 0.0)
    via_logits = token_statistics(logits32, token_ids, mask, temperature, references, group_ids=groups,
                                  differentiable_entropy=True, tile_size=_tile(chunk_size))
    ((via_logits.log_probs.double() * lp_weights).sum() + (via_logits.entropy.double() * entropy_weights).sum()).backward()
    for name in ("log_probs", "entropy", "renyi2"):
        torch.testing.assert_close(getattr(stats, name), getattr(via_logits, name), atol=1e-5, rtol=0)
    for name in references:
        torch.testing.assert_close(stats.js_scores[name], via_logits.js_scores[name], atol=1e-5, rtol=0)
    torch.testing.assert_close(ours[0].grad, hidden_l.grad, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours[1].grad, weight_l.grad, atol=1e-5, rtol=0)


def test_hidden_path_log_prob_gradient_only_and_no_graph_for_scores():
    hidden, weight, _, token_ids, mask = hidden_batch(22, bias=False)
    ours_h, ours_w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    stats = token_statistics_from_hidden(ours_h, ours_w, token_ids, mask, 1.0, ("prev",), tile_size=_tile(2))
    assert not stats.entropy.requires_grad and not stats.js_scores["prev"].requires_grad
    stats.log_probs.sum().backward()
    theirs_h, theirs_w = hidden.double().requires_grad_(), weight.double().requires_grad_()
    log_p = torch.log_softmax(theirs_h @ theirs_w.T, -1).gather(-1, token_ids[..., None])[..., 0]
    (log_p * mask).sum().backward()
    torch.testing.assert_close(ours_h.grad.double(), theirs_h.grad, atol=1e-5, rtol=0)
    torch.testing.assert_close(ours_w.grad.double(), theirs_w.grad, atol=1e-5, rtol=0)


def test_hidden_path_bad_inputs():
    hidden, weight, _, token_ids, mask = hidden_batch(23)
    with pytest.raises(ValueError, match="'ref'"):
        token_statistics_from_hidden(hidden, weight, token_ids, mask, js_references=("ref",), temperature=1.0)
    with pytest.raises(ValueError, match=r"\[V, d\]"):
        token_statistics_from_hidden(hidden, weight[:, :-1], token_ids, mask, temperature=1.0)
    with pytest.raises(ValueError, match="group_ids"):
        token_statistics_from_hidden(hidden, weight, token_ids, mask, js_references=("group_mean",), temperature=1.0)
    with pytest.raises(ValueError, match="lm_head_bias"):
        token_statistics_from_hidden(hidden, weight, token_ids, mask, lm_head_bias=torch.zeros(3), temperature=1.0)


# ---------------------------------------------------------------------------------------------
# group_mean: JS to the mean distribution of the group's rows present at the same position


def loop_reference_group_mean(logits, mask, group_ids, temperature):
    """Plain float64 loops: for each row and position, the mean of p over the group's rows that
    have a response token at that position; fewer than two such rows score 0."""
    p = reference_distributions(logits, temperature)
    batch, length, _ = p.shape
    out = torch.zeros(batch, length, dtype=torch.float64)
    for b in range(batch):
        members = [j for j in range(batch) if int(group_ids[j]) == int(group_ids[b])]
        for t in range(length):
            if not mask[b, t]:
                continue
            present = [j for j in members if mask[j, t]]
            if len(present) < 2:
                continue
            mean = torch.stack([p[j, t] for j in present]).mean(0)
            out[b, t] = reference_js(p[b, t], mean)
    return out


def sized_group_batch(seed: int, groups=(3, 2, 1), length=7, vocab=23, scale=3.0):
    """Rows of several groups (a group of one included), ragged right-padded lengths, shuffled
    group labels, and some -inf logits."""
    generator = torch.Generator().manual_seed(seed)
    labels = [label for label, size in zip((7, 2, 5, 11), groups) for _ in range(size)]
    order = torch.randperm(len(labels), generator=generator)
    group_ids = torch.tensor(labels)[order]
    batch = len(labels)
    logits = torch.randn(batch, length, vocab, generator=generator) * scale
    logits[torch.rand(batch, length, vocab, generator=generator) < 0.2] = float("-inf")
    logits[..., 0] = logits[..., 0].nan_to_num(neginf=0.0)  # every row keeps a finite logit
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    token_ids = torch.randint(0, vocab, (batch, length), generator=generator)
    return logits, token_ids, mask, group_ids


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_group_mean_matches_a_second_float64_reference(seed, temperature, chunk_size):
    logits, token_ids, mask, group_ids = sized_group_batch(seed)
    stats = token_statistics(logits, token_ids, mask, temperature, ("group_mean",),
                             tile_size=_tile(chunk_size), group_ids=group_ids)
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


VARIANTS = {  # name -> (absorbing, leave_one_out), restated here
    "group_mean": (False, False),
    "group_mean_absorbing": (True, False),
    "group_mean_loo": (False, True),
    "group_mean_loo_absorbing": (True, True),
}


def row_ends(mask, finished=None):
    """Each row's last response position (None: no response token) and whether it finished
    (default: it ends before the last column)."""
    batch, length = mask.shape
    last = [max((t for t in range(length) if mask[b, t]), default=None) for b in range(batch)]
    if finished is None:
        finished = [last[b] is not None and last[b] < length - 1 for b in range(batch)]
    return last, finished


def group_reference_mean(p, mask, token_ids, group_ids, finished, last, i, t, absorbing, leave_one_out):
    """Mean of the contributors to row i's group reference at t (float64 [V]), or None when there
    is none other than i: every row j of i's group with a response token at t (j != i for
    leave-one-out) and, when absorbing, every finished row j whose last response position
    e_j < t, as a one-hot on token_ids[j, e_j]."""
    batch, _, vocab = p.shape
    contributors = []
    for j in range(batch):
        if int(group_ids[j]) != int(group_ids[i]) or (leave_one_out and j == i):
            continue
        if mask[j, t]:
            contributors.append(p[j, t])
        elif absorbing and finished[j] and last[j] is not None and last[j] < t:
            point = torch.zeros(vocab, dtype=torch.float64)
            point[int(token_ids[j, last[j]])] = 1.0
            contributors.append(point)
    if len(contributors) < (1 if leave_one_out else 2):
        return None
    return torch.stack(contributors).mean(0)


def loop_reference_variant(logits, token_ids, mask, group_ids, temperature, absorbing, leave_one_out,
                           finished=None):
    """Plain float64 loops. Contributors to row i's reference at t: every row j of i's group with
    a response token at t (j != i for leave-one-out) and, when absorbing, every finished row j whose
    last response position e_j < t, as a one-hot on token_ids[j, e_j]. Finished (default): the row
    ends before the last column. No contributor other than i itself: 0."""
    p = reference_distributions(logits, temperature)
    batch, length, vocab = p.shape
    last, finished = row_ends(mask, finished)
    out = torch.zeros(batch, length, dtype=torch.float64)
    for i in range(batch):
        for t in range(length):
            if not mask[i, t]:
                continue
            q = group_reference_mean(p, mask, token_ids, group_ids, finished, last, i, t, absorbing,
                                     leave_one_out)
            if q is not None:
                out[i, t] = reference_js(p[i, t], q)
    return out


def variant_batch(seed: int, length=8, vocab=19):
    """Groups of 2, 1 and 4 rows (labels 2, 5, 7, shuffled over the rows); ragged lengths, in
    label order 3, 8 | 5 | 2, 8, 4, 3: one row of groups 2 and 7 is truncated (it reaches the
    last column), the others end early (finished); -inf logits; two rows of group 7 end on the
    same token. Returns the batch and the row of length 4."""
    logits, token_ids, _, group_ids = sized_group_batch(seed, groups=(4, 2, 1), length=length, vocab=vocab)
    order = torch.argsort(group_ids, stable=True)  # rows in label order
    lengths = torch.empty(len(group_ids), dtype=torch.long)
    lengths[order] = torch.tensor([3, length, 5, 2, length, 4, 3])
    mask = torch.arange(length)[None, :] < lengths[:, None]
    token_ids[order[3], 1] = token_ids[order[6], 2]
    return logits, token_ids, mask, group_ids, int(order[5])


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_group_mean_variants_match_float64_loops(variant, seed, temperature, chunk_size):
    logits, token_ids, mask, group_ids, _ = variant_batch(seed)
    absorbing, leave_one_out = VARIANTS[variant]
    expected = loop_reference_variant(logits, token_ids, mask, group_ids, temperature, absorbing, leave_one_out)
    stats = token_statistics(logits, token_ids, mask, temperature, (variant,), tile_size=_tile(chunk_size),
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
        stats = token_statistics(logits, token_ids, mask, 0.9, references, tile_size=_tile(chunk_size),
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
                                         lm_bias, tile_size=_tile(chunk_size))
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


FLOAT32_TINY = torch.finfo(torch.float32).tiny  # the documented clamp inside log q


def reference_kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """float64 KL(p || q) = sum_{p_v > 0} p_v (log p_v - log max(q_v, tiny32)), over the last dim."""
    log_q = q.clamp_min(FLOAT32_TINY).log()
    return torch.where(p > 0, p * (torch.where(p > 0, p, 1.0).log() - log_q), torch.zeros_like(p)).sum(-1)


def reference_wasserstein(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """float64 1-Wasserstein under the 0-1 ground metric: total variation 1/2 sum |p - q|."""
    return 0.5 * (p - q).abs().sum(-1)


REFERENCE_METRICS = {"js": reference_js, "kl": reference_kl, "wasserstein": reference_wasserstein}


def loop_reference_scores(logits, token_ids, mask, group_ids, temperature, reference, metric, finished=None,
                          reference_logits=None):
    """Plain float64 loops over rows and positions, with the whole [B, T, V] softmax: ``metric``
    of p_{i,t} to the reference q_{i,t} as the stats module docstring defines it. Group variants:
    contributors are the rows j of i's group with a response token at t (j != i for
    leave-one-out) and, when absorbing, every finished row j (default: ends before the last
    column) with last position e_j < t, as a one-hot on token_ids[j, e_j]; no contributor other
    than i: 0. seq_mean: mean of p over i's response positions. prev: p at i's previous response
    position (none: 0). ref: the reference logits' softmax."""
    p = reference_distributions(logits, temperature)
    divergence = REFERENCE_METRICS[metric]
    batch, length, vocab = p.shape
    last, finished = row_ends(mask, finished)
    out = torch.zeros(batch, length, dtype=torch.float64)
    for i in range(batch):
        positions = [t for t in range(length) if mask[i, t]]
        for index, t in enumerate(positions):
            if reference in VARIANTS:
                absorbing, leave_one_out = VARIANTS[reference]
                q = group_reference_mean(p, mask, token_ids, group_ids, finished, last, i, t, absorbing,
                                         leave_one_out)
                if q is None:
                    continue
            elif reference == "seq_mean":
                q = torch.stack([p[i, s] for s in positions]).mean(0)
            elif reference == "prev":
                if index == 0:
                    continue
                q = p[i, positions[index - 1]]
            else:
                q = reference_distributions(reference_logits, temperature)[i, t]
            out[i, t] = divergence(p[i, t], q)
    return out


@pytest.mark.parametrize("metric", ["kl", "wasserstein"])
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("temperature", [1.0, 0.7, 1.3])
@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_group_variant_metrics_match_float64_loops(metric, variant, temperature, chunk_size):
    """variant_batch has finished and truncated (right-padded) rows, a group of one and -inf
    logits, so the absorbed point masses and the zero entries of leave-one-out means occur."""
    logits, token_ids, mask, group_ids, _ = variant_batch(1)
    key = f"{variant}:{metric}"
    stats = token_statistics(logits, token_ids, mask, temperature, (key,), tile_size=_tile(chunk_size),
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
        stats = token_statistics(logits, token_ids, mask, 0.8, keys, reference_logits, tile_size=_tile(chunk_size),
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
                                         tile_size=_tile(chunk_size))
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

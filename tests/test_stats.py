"""Token statistics (log-probs, entropies, JS to a row's own references) from logits and from
hidden states, against the plain float64 full-softmax formulas of ``stats_references``."""

from __future__ import annotations

import math
import os
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from stats_references import (
    LN2,
    hidden_batch,
    make_batch,
    reference_entropy,
    reference_group_mean_js,
    reference_statistics,
    tile_of,
)

from ict.core.stats import (
    scores_from_hidden_given_normalisers,
    token_statistics,
    token_statistics_from_hidden,
)


@pytest.mark.parametrize("temperature", [1.0, 0.6, 1.7])
@pytest.mark.parametrize("chunk_size", [1, 4, None])
def test_matches_full_softmax_reference(temperature, chunk_size):
    logits, token_ids, mask = make_batch(0)
    reference_logits = torch.randn_like(logits) * 2
    stats = token_statistics(
        logits, token_ids, mask, temperature, ("seq_mean", "prev", "ref"), reference_logits, tile_size=tile_of(chunk_size)
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
    stats = token_statistics(logits, token_ids, mask, temperature, ("seq_mean", "prev"), tile_size=tile_of(5))
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


def test_entropies_hold_float32_precision_at_a_large_vocabulary():
    """At V = 151,936 with logits ~ N(0, 4^2), Shannon and Renyi-2 entropy within 1e-6 of float64
    on the torch folds (the sum of squares as a dot product; as ``vector_norm(x) ** 2`` Renyi-2
    was off by 5.5e-6 here)."""
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 8, 151936, generator=generator) * 4.0
    token_ids = torch.randint(0, 151936, (4, 8), generator=generator)
    mask = torch.ones(4, 8, dtype=torch.bool)
    stats = token_statistics(logits, token_ids, mask, 1.0, (), backend="torch")
    p = torch.softmax(logits.double(), dim=-1)
    entropy = -(p * p.log()).sum(-1)
    renyi2 = -(p * p).sum(-1).log()
    assert float((stats.entropy.double() - entropy).abs().max()) <= 1e-6
    assert float((stats.renyi2.double() - renyi2).abs().max()) <= 1e-6


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
    stats = token_statistics(ours, token_ids, mask, 0.8, tile_size=tile_of(3))
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
    stats = token_statistics(ours, token_ids, mask, 0.7, differentiable_entropy=True, tile_size=tile_of(2))
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
    with pytest.raises(ValueError, match=r"temperature must be a finite number >= 1e-06, got 1e-30"):
        token_statistics(logits, token_ids, mask, temperature=1e-30)  # was NaN for logits of 1e9
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        token_statistics(logits, token_ids[:, :-1], mask, temperature=1.0)


def test_empty_response_gives_zeros():
    logits, token_ids, _ = make_batch(7)
    mask = torch.zeros(token_ids.shape, dtype=torch.bool)
    stats = token_statistics(logits.requires_grad_(), token_ids, mask, 1.0, ("seq_mean", "prev"))
    assert stats.entropy.abs().sum() == 0 and stats.js_scores["seq_mean"].abs().sum() == 0
    stats.log_probs.sum().backward()
    assert logits.grad.abs().sum() == 0


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("chunk_size", [1, 3, None])
def test_hidden_path_matches_float64_reference_and_logits_path(bias, chunk_size):
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(21, bias=bias)
    groups = torch.tensor([3, 1, 3, 1])
    temperature = 0.8
    references = ("group_mean", "seq_mean", "prev")
    generator = torch.Generator().manual_seed(21)  # not the global RNG: the test alone draws the same
    lp_weights = torch.randn(mask.shape, dtype=torch.float64, generator=generator)
    entropy_weights = torch.randn(mask.shape, dtype=torch.float64, generator=generator)

    ours = [hidden.clone().requires_grad_(), weight.clone().requires_grad_()]
    if bias:
        ours.append(lm_bias.clone().requires_grad_())
    stats = token_statistics_from_hidden(
        ours[0], ours[1], token_ids, mask, temperature, references, group_ids=groups,
        lm_head_bias=ours[2] if bias else None, differentiable_entropy=True, tile_size=tile_of(chunk_size),
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
    # gradients of order 3 summed over 28 float32 positions: 1e-5 relative as well as absolute
    for mine, reference in zip(ours, theirs):
        torch.testing.assert_close(mine.grad.double(), reference.grad, atol=1e-5, rtol=1e-5)

    # And equal to the logits path on the same float32 logits (values and gradients).
    hidden_l, weight_l = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    logits32 = hidden_l @ weight_l.T + (lm_bias if bias else 0.0)
    via_logits = token_statistics(logits32, token_ids, mask, temperature, references, group_ids=groups,
                                  differentiable_entropy=True, tile_size=tile_of(chunk_size))
    ((via_logits.log_probs.double() * lp_weights).sum() + (via_logits.entropy.double() * entropy_weights).sum()).backward()
    for name in ("log_probs", "entropy", "renyi2"):
        torch.testing.assert_close(getattr(stats, name), getattr(via_logits, name), atol=1e-5, rtol=0)
    for name in references:
        torch.testing.assert_close(stats.js_scores[name], via_logits.js_scores[name], atol=1e-5, rtol=0)
    torch.testing.assert_close(ours[0].grad, hidden_l.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours[1].grad, weight_l.grad, atol=1e-5, rtol=1e-5)


def test_hidden_path_log_prob_gradient_only_and_no_graph_for_scores():
    hidden, weight, _, token_ids, mask = hidden_batch(22, bias=False)
    ours_h, ours_w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    stats = token_statistics_from_hidden(ours_h, ours_w, token_ids, mask, 1.0, ("prev",), tile_size=tile_of(2))
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


@pytest.mark.parametrize("references", [(), ("group_mean_absorbing",)])
@pytest.mark.parametrize("bad_id", [-100, 11])
def test_a_token_id_outside_the_vocabulary_at_a_response_position_is_refused(references, bad_id):
    """A response position's id outside [0, V) (e.g. -100, an ignore index) would give log p = -inf
    and a point mass on no id: one ValueError, from logits and from hidden states, in sequence and
    in group order. The same id at a position outside the response mask is never read."""
    torch.manual_seed(0)
    batch, length, width, vocab = 4, 5, 6, 11
    hidden, weight = torch.randn(batch, length, width), torch.randn(vocab, width)
    logits = hidden @ weight.T
    token_ids = torch.randint(0, vocab, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[0, 3:] = False
    group_ids = torch.tensor([0, 0, 1, 1])
    token_ids[0, 4] = bad_id  # outside the response: read by nothing
    clean = token_statistics(logits, token_ids, mask, 1.0, references, group_ids=group_ids, backend="torch")
    assert torch.isfinite(clean.log_probs[mask]).all()
    token_ids[2, 1] = bad_id
    with pytest.raises(ValueError, match=r"token_ids must be in \[0, 11\) at response positions: 1 position\(s\) hold"):
        token_statistics(logits, token_ids, mask, 1.0, references, group_ids=group_ids, backend="torch")
    with pytest.raises(ValueError, match="token_ids must be in"):
        token_statistics_from_hidden(hidden, weight, token_ids, mask, 1.0, references, group_ids=group_ids,
                                     backend="torch")


@pytest.mark.parametrize("case,message", [
    ("integer hidden", "hidden must be a floating-point tensor, got torch.int64"),
    ("bool logits", "logits must be a floating-point tensor, got torch.bool"),
    ("float token ids", "token_ids must be an integer tensor, got torch.float32"),
    ("infinite temperature", "temperature must be a finite number >= 1e-06, got inf"),
    ("no temperature", "temperature must be a finite number >= 1e-06, got None"),
    ("a string of references", "js_references must be a sequence of score keys, e.g. ('seq_mean',)"),
    ("a tile of one size", "tile_size must be two positive integers (tokens, vocab), got (4,)"),
    ("a tile as text", "tile_size must be two positive integers (tokens, vocab), got '4x8'"),
    ("no vocabulary", "the vocabulary must have at least one id, got V = 0"),
    ("bool reference logits", "reference_logits must be a floating-point tensor, got torch.bool"),
    ("no references", "js_references must be a sequence of score keys (strings), got None"),
    ("a number as a reference", "js_references must be a sequence of score keys (strings), got [3]"),
    ("group ids as a list", "group_ids must be a tensor, got list"),
    ("a row_index with a mask of another shape", "token_ids (2, 3) and response_mask (2, 2) must both be [B, T]"),
])
def test_inputs_of_the_wrong_kind_are_refused_in_one_line(case, message):
    """Integer hidden states made the compute dtype an integer (log-probs off by nats), bool logits
    read differently by the two backends, float ids were truncated, an infinite temperature gave
    a uniform distribution on one backend and NaN on the other, and a string of references was
    read letter by letter; bool reference logits were read differently by the backends too, and
    the rest were tracebacks from deep inside (a TypeError, AttributeErrors, a broadcast
    RuntimeError): each is one ValueError instead."""
    torch.manual_seed(0)
    hidden, weight = torch.randn(2, 3, 4), torch.randn(7, 4)
    token_ids, mask = torch.randint(0, 7, (2, 3)), torch.ones(2, 3, dtype=torch.bool)
    logits = hidden @ weight.T
    call = {
        "integer hidden": lambda: token_statistics_from_hidden(hidden.long(), weight, token_ids, mask, 1.0),
        "bool logits": lambda: token_statistics(logits > 0, token_ids, mask, 1.0),
        "float token ids": lambda: token_statistics(logits, token_ids.float(), mask, 1.0),
        "infinite temperature": lambda: token_statistics(logits, token_ids, mask, math.inf),
        "no temperature": lambda: token_statistics(logits, token_ids, mask, None),
        "a string of references": lambda: token_statistics(logits, token_ids, mask, 1.0, "seq_mean"),
        "a tile of one size": lambda: token_statistics(logits, token_ids, mask, 1.0, tile_size=(4,)),
        "a tile as text": lambda: token_statistics(logits, token_ids, mask, 1.0, tile_size="4x8"),
        "no vocabulary": lambda: token_statistics_from_hidden(hidden, weight[:0], token_ids, mask, 1.0),
        "bool reference logits": lambda: token_statistics(logits, token_ids, mask, 1.0, ("ref",),
                                                          reference_logits=logits > 0),
        "no references": lambda: token_statistics(logits, token_ids, mask, 1.0, None),
        "a number as a reference": lambda: token_statistics(logits, token_ids, mask, 1.0, [3]),
        "group ids as a list": lambda: token_statistics(logits, token_ids, mask, 1.0, ("group_mean",),
                                                        group_ids=[0, 0]),
        "a row_index with a mask of another shape": lambda: token_statistics(
            logits.reshape(6, 7), token_ids, mask[:, :2], 1.0, row_index=torch.arange(6).reshape(2, 3)),
    }[case]
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_a_row_index_outside_the_logits_is_refused(backend, monkeypatch):
    """With ``row_index``, a response position pointing outside the ``[R, V]`` logits made the
    Triton kernels read memory past them (values such as -1e33) and torch raise a bare IndexError:
    one ValueError on both backends; a padding position may point anywhere."""
    if backend == "triton":
        pytest.importorskip("triton")
        if os.environ.get("TRITON_INTERPRET") != "1":
            pytest.skip("the triton backend on CPU tensors needs TRITON_INTERPRET=1 before triton is imported")
    torch.manual_seed(0)
    logits = torch.randn(20, 37)
    token_ids = torch.randint(0, 37, (4, 5))
    mask = torch.ones(4, 5, dtype=torch.bool)
    mask[3, 4] = False
    row_index = torch.arange(20).reshape(4, 5)
    row_index[3, 4] = 99  # padding: never read
    token_statistics(logits, token_ids, mask, 1.0, backend=backend, row_index=row_index)
    for bad in (20, -1):
        row_index[1, 1] = bad
        with pytest.raises(ValueError, match=r"row_index must be in \[0, 20\) .* 1 position\(s\) are not"):
            token_statistics(logits, token_ids, mask, 1.0, backend=backend, row_index=row_index)


@pytest.mark.parametrize("tile", [(3, 5), None])
def test_renyi2_from_given_normalisers_without_any_score_asked(tile):
    """The score pass alone still runs when no score is asked: it sums the rows' ``sum_v p_v^2``,
    so Renyi-2 is the float64 ``-log sum_v p_v^2`` (not ``-log 0 = inf``) and the rows' mass is 1."""
    hidden, weight, lm_bias, token_ids, mask = hidden_batch(4)
    logits = hidden.double() @ weight.double().T + lm_bias.double()
    expected = reference_statistics(logits, token_ids, mask, 0.8)
    log_z = torch.logsumexp(logits / 0.8, dim=-1).float()
    scores, renyi2, deviation = scores_from_hidden_given_normalisers(
        hidden, weight, token_ids, mask, 0.8, (), log_z, expected["entropy"].float(), lm_head_bias=lm_bias,
        tile_size=tile)
    assert scores == {}
    assert deviation < 1e-5
    torch.testing.assert_close(renyi2.double(), expected["renyi2"], atol=1e-5, rtol=0)

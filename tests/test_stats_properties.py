"""Properties of the token statistics (both backends, from logits and from hidden states) on drawn
batches, each against the plain float64 loops of ``stats_references`` written from the formulas
of the :mod:`ict.core.stats` docstring: drawn groups (sizes 1..5, interleaved or not), response
masks (empty rows, right and left padding, holes), ``finished`` given or inferred, temperatures,
tile sizes that divide neither V nor the rows, peaked logits, ``-inf`` entries and input dtypes;
gradients against float64 autograd; invariances to 1e-6 (row order, tiles, a constant per row)."""

from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from stats_references import (
    FLOAT32_TINY,
    LN2,
    VARIANTS,
    loop_reference_scores,
    reference_statistics,
)

from ict.core.stats import (
    scores_from_hidden_given_normalisers,
    token_statistics,
    token_statistics_from_hidden,
)

HAS_TRITON = importlib.util.find_spec("triton") is not None
METRICS = ("js", "kl", "wasserstein")
REFERENCES = (*VARIANTS, "seq_mean", "prev", "ref")
KEYS = tuple(reference if metric == "js" else f"{reference}:{metric}" for reference in REFERENCES
             for metric in METRICS)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
          "float64": torch.float64}


def drawn_keys(keys: tuple[str, ...], most: int = 3) -> st.SearchStrategy[list[str]]:
    """Up to ``most`` of ``keys`` a call (the float64 loops of all 21 a call take seconds; every key
    is drawn within the example budget)."""
    return st.lists(st.sampled_from(keys), min_size=1, max_size=most, unique=True)


@st.composite
def batches(draw, max_vocab: int = 13, max_length: int = 6):
    """A drawn batch: ``(group_ids [B], mask [B, T] bool, finished [B] bool or None, V, seed)``."""
    sizes = draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))
    labels = [label for label, size in zip((7, 2, 5), sizes) for _ in range(size)]
    if draw(st.booleans()):  # interleaved groups
        labels = draw(st.permutations(labels))
    batch = len(labels)
    length = draw(st.integers(1, max_length))
    rows = []
    for _ in range(batch):
        kind = draw(st.sampled_from(["right", "left", "holes", "empty", "full"]))
        if kind == "empty":
            rows.append([False] * length)
        elif kind == "full":
            rows.append([True] * length)
        elif kind == "right":
            size = draw(st.integers(1, length))
            rows.append([t < size for t in range(length)])
        elif kind == "left":
            size = draw(st.integers(1, length))
            rows.append([t >= length - size for t in range(length)])
        else:
            rows.append(draw(st.lists(st.booleans(), min_size=length, max_size=length)))
    mask = torch.tensor(rows, dtype=torch.bool).reshape(batch, length)
    finished = None
    if draw(st.booleans()):
        finished = torch.tensor(draw(st.lists(st.booleans(), min_size=batch, max_size=batch)))
    vocab = draw(st.integers(2, max_vocab))
    seed = draw(st.integers(0, 2**16))
    return torch.tensor(labels), mask, finished, vocab, seed


def drawn_logits(seed: int, shape: tuple[int, int, int], scale: float, masked: float,
                 fill: float = float("-inf")) -> torch.Tensor:
    """``randn * scale`` with a fraction ``masked`` of entries ``fill`` (masked vocabulary: ``-inf``
    or a dtype's lowest number; every row keeps one other)."""
    generator = torch.Generator().manual_seed(seed)
    logits = torch.randn(shape, generator=generator, dtype=torch.float64) * scale
    if masked:
        drop = torch.rand(shape, generator=generator) < masked
        keep = torch.randint(0, shape[-1], shape[:2], generator=generator)
        drop.scatter_(-1, keep[..., None], False)
        logits[drop] = fill
    return logits


def token_ids_of(seed: int, shape: tuple[int, int], vocab: int, logits: torch.Tensor | None = None,
                 fill: float = float("-inf")) -> torch.Tensor:
    """Drawn token ids ``[B, T]``; with ``logits`` and a finite ``fill``, none on an entry ``fill``
    (its log-prob is ``fill / T``, which float32 rounds to ``-inf`` at ``T < 1``, as documented:
    a sampler never draws it), but the row's most likely id."""
    token_ids = torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed + 1))
    if logits is None or fill == float("-inf"):
        return token_ids
    masked = logits.gather(-1, token_ids[..., None])[..., 0] == fill
    return torch.where(masked, logits.argmax(dim=-1), token_ids)


def assert_matches_float64(stats, logits64, token_ids, mask, group_ids, temperature, keys, finished,
                           reference_logits64=None, atol=2e-5):
    """``stats`` equal the float64 loops of the formulas over ``logits64`` (the logits the library
    saw, as float64)."""
    expected = reference_statistics(logits64, token_ids, mask, temperature)
    expected["log_probs"] = torch.where(mask, expected["log_probs"], 0.0)
    for name in ("log_probs", "entropy", "renyi2"):
        torch.testing.assert_close(getattr(stats, name).double(), expected[name], atol=atol, rtol=1e-5,
                                   msg=lambda text, name=name: f"{name}: {text}")
    for key in keys:
        reference, _, metric = key.partition(":")
        want = loop_reference_scores(logits64, token_ids, mask, group_ids, temperature, reference, metric or "js",
                                     finished=None if finished is None else finished.tolist(),
                                     reference_logits=reference_logits64)
        torch.testing.assert_close(stats.js_scores[key].double(), want, atol=atol, rtol=1e-5,
                                   msg=lambda text, key=key: f"{key}: {text}")


def assert_ranges(stats, mask):
    """JS in [0, ln 2], KL in [0, -log tiny], TV in [0, 1], H2 <= H, and 0 outside the response."""
    for key, scores in stats.js_scores.items():
        metric = key.partition(":")[2] or "js"
        high = {"js": LN2, "kl": -math.log(FLOAT32_TINY), "wasserstein": 1.0}[metric]
        assert scores.min() >= 0 and scores.max() <= high, key
    assert (stats.renyi2 <= stats.entropy + 1e-6).all()
    for tensor in (stats.log_probs, stats.entropy, stats.renyi2, *stats.js_scores.values()):
        assert (tensor[~mask] == 0).all()


@given(batch=batches(), scale=st.sampled_from([0.1, 1.0, 4.0, 30.0, 1000.0]), masked=st.sampled_from([0.0, 0.3]),
       lowest=st.booleans(), temperature=st.sampled_from([0.5, 1.0, 1.7]), tokens=st.integers(1, 7),
       vocab_tile=st.integers(1, 14), dtype=st.sampled_from(list(DTYPES)), keys=drawn_keys(KEYS))
def test_logits_path_matches_float64_on_drawn_batches(batch, scale, masked, lowest, temperature, tokens, vocab_tile,
                                                      dtype, keys):
    group_ids, mask, finished, vocab, seed = batch
    shape = (*mask.shape, vocab)
    fill = torch.finfo(DTYPES[dtype]).min if lowest else float("-inf")
    logits = drawn_logits(seed, shape, scale, masked, fill).to(DTYPES[dtype])
    reference_logits = drawn_logits(seed + 2, shape, 2.0, masked).to(DTYPES[dtype])
    token_ids = token_ids_of(seed, mask.shape, vocab, logits, fill)
    stats = token_statistics(logits, token_ids, mask, temperature, keys, reference_logits, tile_size=(tokens, vocab_tile),
                             backend="torch", group_ids=group_ids, finished=finished)
    assert_matches_float64(stats, logits.double(), token_ids, mask, group_ids, temperature, keys, finished,
                           reference_logits.double())
    assert_ranges(stats, mask)


def drawn_head(seed: int, batch: int, length: int, vocab: int, width: int, scale: float, bias: bool, dtype):
    """Hidden states ``[B, T, d]``, a head ``[V, d]`` and a bias ``[V]`` (or None) in ``dtype``."""
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, length, width, generator=generator) * scale ** 0.5
    weight = torch.randn(vocab, width, generator=generator) * scale ** 0.5 / width ** 0.5
    lm_bias = torch.randn(vocab, generator=generator) if bias else None
    return tuple(None if tensor is None else tensor.to(dtype) for tensor in (hidden, weight, lm_bias))


def head_logits(hidden, weight, lm_bias) -> torch.Tensor:
    """float64 of the logits the head's tiles hold: the product in the inputs' dtype (exact float64
    for float32 and float64 inputs, the tiles' rounding for half precision)."""
    if hidden.dtype in (torch.float32, torch.float64):
        logits = hidden.double() @ weight.double().T
        return logits if lm_bias is None else logits + lm_bias.double()
    flat = hidden.flatten(0, 1)
    product = flat @ weight.T if lm_bias is None else torch.addmm(lm_bias, flat, weight.T)
    return product.double().unflatten(0, hidden.shape[:2])


@given(batch=batches(), scale=st.sampled_from([0.1, 1.0, 8.0]), temperature=st.sampled_from([0.5, 1.0, 1.7]),
       tokens=st.integers(1, 7), vocab_tile=st.integers(1, 14), dtype=st.sampled_from(list(DTYPES)),
       bias=st.booleans(), keys=drawn_keys(KEYS[:-3]))
def test_hidden_path_matches_float64_on_drawn_batches(batch, scale, temperature, tokens, vocab_tile, dtype, bias,
                                                      keys):
    group_ids, mask, finished, vocab, seed = batch
    hidden, weight, lm_bias = drawn_head(seed, *mask.shape, vocab, 4, scale, bias, DTYPES[dtype])
    token_ids = token_ids_of(seed, mask.shape, vocab)
    stats = token_statistics_from_hidden(hidden, weight, token_ids, mask, temperature, keys, group_ids, lm_bias,
                                         tile_size=(tokens, vocab_tile), backend="torch", finished=finished)
    assert_matches_float64(stats, head_logits(hidden, weight, lm_bias), token_ids, mask, group_ids, temperature,
                           keys, finished)
    assert_ranges(stats, mask)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@settings(max_examples=10)  # the interpreter: ~1-3 s an example
# a finished row's end token (id 3) lies in the second vocabulary tile of 2 ids: the group kernel
# must count its point mass in that tile only (its columns run past the tile's end)
@example(batch=(torch.tensor([7, 7]), torch.tensor([[True, False, False], [True, True, True]]), None, 5, 1),
         scale=1.0, masked=0.0, lowest=False, temperature=1.7, tokens=2, vocab_tile=2, dtype="float32", hidden=False,
         keys=["group_mean_absorbing", "group_mean_loo_absorbing:wasserstein"])
@given(batch=batches(max_vocab=9, max_length=4), scale=st.sampled_from([0.1, 4.0, 30.0]),
       masked=st.sampled_from([0.0, 0.3]), lowest=st.booleans(), temperature=st.sampled_from([0.5, 1.7]),
       tokens=st.integers(1, 5), vocab_tile=st.integers(1, 10), dtype=st.sampled_from(list(DTYPES)),
       hidden=st.booleans(), keys=drawn_keys(KEYS, most=8))
def test_triton_backend_matches_float64_on_drawn_batches(batch, scale, masked, lowest, temperature, tokens,
                                                         vocab_tile, dtype, hidden, keys):
    group_ids, mask, finished, vocab, seed = batch
    token_ids = token_ids_of(seed, mask.shape, vocab)
    options = dict(tile_size=(tokens, vocab_tile), backend="triton", finished=finished)
    if hidden:
        head = drawn_head(seed, *mask.shape, vocab, 4, scale / 4, True, DTYPES[dtype])
        keys = [key for key in keys if not key.startswith("ref")]  # no ref from hidden states
        stats = token_statistics_from_hidden(head[0], head[1], token_ids, mask, temperature, keys, group_ids,
                                             head[2], **options)
        assert_matches_float64(stats, head_logits(*head), token_ids, mask, group_ids, temperature, keys, finished)
    else:
        fill = torch.finfo(DTYPES[dtype]).min if lowest else float("-inf")
        logits = drawn_logits(seed, (*mask.shape, vocab), scale, masked, fill).to(DTYPES[dtype])
        reference_logits = drawn_logits(seed + 2, logits.shape, 2.0, masked, fill).to(DTYPES[dtype])
        token_ids = token_ids_of(seed, mask.shape, vocab, logits, fill)
        stats = token_statistics(logits, token_ids, mask, temperature, keys, reference_logits, group_ids=group_ids,
                                 **options)
        assert_matches_float64(stats, logits.double(), token_ids, mask, group_ids, temperature, keys, finished,
                               reference_logits.double())
    assert_ranges(stats, mask)


def float64_loss(logits64, token_ids, mask, temperature, log_prob_weights, entropy_weights):
    """``sum_(b,t) mask (w_lp log p(y) + w_H H(p))`` by float64 autograd of the plain formula."""
    log_p = torch.log_softmax(logits64 / temperature, dim=-1)
    p = log_p.exp()
    entropy = -(p * torch.where(p > 0, log_p, 0.0)).sum(-1)
    picked = log_p.gather(-1, token_ids[..., None])[..., 0]
    return ((picked * log_prob_weights + entropy * entropy_weights) * mask).sum()


GRADIENT_CASES = dict(batch=batches(), scale=st.sampled_from([0.1, 1.0, 8.0]), masked=st.sampled_from([0.0, 0.3]),
                      temperature=st.sampled_from([0.5, 1.0, 1.7]), tokens=st.integers(1, 7),
                      vocab_tile=st.integers(1, 14), hidden=st.booleans(), bias=st.booleans(),
                      silent=st.integers(0, 2), given_mask=st.booleans())


@given(**GRADIENT_CASES)
def test_gradients_match_float64_autograd(**case):
    assert_gradients_match_float64("torch", **case)


@pytest.mark.skipif(not HAS_TRITON, reason="triton is not installed")
@settings(max_examples=6)  # the interpreter: ~1-3 s an example
@given(**GRADIENT_CASES)
def test_triton_gradients_match_float64_autograd(**case):
    assert_gradients_match_float64("triton", **case)


def assert_gradients_match_float64(backend, batch, scale, masked, temperature, tokens, vocab_tile, hidden, bias,
                                   silent, given_mask):
    """d/d(logits) or d/d(hidden, weight, bias) of a random combination of log_probs and entropy;
    ``silent`` rows (every ``silent``-th from the first, 0: none) have no gradient, and the gradient
    mask (when given) marks exactly the positions with a nonzero weight."""
    group_ids, mask, finished, vocab, seed = batch
    generator = torch.Generator().manual_seed(seed + 3)
    log_prob_weights = torch.randn(mask.shape, generator=generator, dtype=torch.float64)
    entropy_weights = torch.randn(mask.shape, generator=generator, dtype=torch.float64)
    if silent:
        log_prob_weights[::silent + 1] = 0.0
        entropy_weights[::silent + 1] = 0.0
    token_ids = token_ids_of(seed, mask.shape, vocab)
    options = dict(tile_size=(tokens, vocab_tile), backend=backend, finished=finished, differentiable_entropy=True,
                   gradient_mask=(log_prob_weights != 0) if given_mask else None)
    if hidden:
        inputs = drawn_head(seed, *mask.shape, vocab, 4, scale, bias, torch.float32)
        inputs = tuple(tensor for tensor in inputs if tensor is not None)
        leaves = [tensor.clone().requires_grad_() for tensor in inputs]
        stats = token_statistics_from_hidden(leaves[0], leaves[1], token_ids, mask, temperature, ("group_mean",),
                                             group_ids, leaves[2] if bias else None, **options)
        exact = [tensor.double().requires_grad_() for tensor in inputs]
        logits64 = exact[0] @ exact[1].T + (exact[2] if bias else 0.0)
    else:
        inputs = (drawn_logits(seed, (*mask.shape, vocab), scale, masked).float(),)
        leaves = [inputs[0].clone().requires_grad_()]
        stats = token_statistics(leaves[0], token_ids, mask, temperature, ("group_mean",), group_ids=group_ids,
                                 **options)
        exact = [inputs[0].double().requires_grad_()]
        logits64 = exact[0]
    ((stats.log_probs.double() * log_prob_weights).sum() + (stats.entropy.double() * entropy_weights).sum()).backward()
    float64_loss(logits64, token_ids, mask, temperature, log_prob_weights, entropy_weights).backward()
    for leaf, want in zip(leaves, exact):
        assert leaf.grad is not None and torch.isfinite(leaf.grad).all()
        # normwise: float32 rounds each element to ~1e-7 of the tensor's largest (scale 8 at T = 0.5:
        # a gradient of ~8 whose element of ~0 came out 4.4e-5 on a CPU with AVX-512/AMX kernels)
        torch.testing.assert_close(leaf.grad.double(), want.grad, rtol=1e-5,
                                   atol=2e-5 * max(1.0, float(want.grad.abs().max())))


@given(batch=batches(), scale=st.sampled_from([0.1, 1.0, 8.0]), masked=st.sampled_from([0.0, 0.3]),
       temperature=st.sampled_from([0.5, 1.0, 1.7]), keys=drawn_keys(KEYS), data=st.data())
def test_row_order_tiles_and_a_constant_per_row_change_nothing(batch, scale, masked, temperature, keys, data):
    """Permuting the rows (with their group ids, masks and finished flags) permutes the outputs;
    another tile size gives the same numbers; a constant added to a position's logits changes
    nothing (logits on a grid of 1/64 and integer constants, so the shift itself is exact). 1e-6."""
    group_ids, mask, finished, vocab, seed = batch
    shape = (*mask.shape, vocab)
    logits = (drawn_logits(seed, shape, scale, masked) * 64).round() / 64
    logits = logits.float()
    reference_logits = ((drawn_logits(seed + 2, shape, 2.0, masked) * 64).round() / 64).float()
    token_ids = token_ids_of(seed, mask.shape, vocab)
    tile = (data.draw(st.integers(1, 7)), data.draw(st.integers(1, 14)))

    def stats_of(logits, reference_logits, token_ids, mask, group_ids, finished, tile):
        return token_statistics(logits, token_ids, mask, temperature, keys, reference_logits, tile_size=tile,
                                backend="torch", group_ids=group_ids, finished=finished)

    def assert_same(ours, theirs):
        for name in ("log_probs", "entropy", "renyi2"):
            torch.testing.assert_close(getattr(ours, name), getattr(theirs, name), atol=1e-6, rtol=1e-6,
                                       msg=lambda text, name=name: f"{name}: {text}")
        for key in keys:
            # rtol: a KL score reaches ~80 nats, where float32's ulp is 8e-6
            torch.testing.assert_close(ours.js_scores[key], theirs.js_scores[key], atol=1e-6, rtol=1e-6,
                                       msg=lambda text, key=key: f"{key}: {text}")

    base = stats_of(logits, reference_logits, token_ids, mask, group_ids, finished, tile)
    # another tile size
    other = (data.draw(st.integers(1, 7)), data.draw(st.integers(1, 14)))
    assert_same(stats_of(logits, reference_logits, token_ids, mask, group_ids, finished, other), base)
    # permuted rows
    order = torch.tensor(data.draw(st.permutations(range(mask.shape[0]))), dtype=torch.long)
    permuted = stats_of(logits[order], reference_logits[order], token_ids[order], mask[order], group_ids[order],
                        None if finished is None else finished[order], tile)
    assert_same(permuted, base.rows(order))
    # a constant per position, to both models' logits
    generator = torch.Generator().manual_seed(seed + 5)
    shift = torch.randint(-8, 9, mask.shape, generator=generator).float()[..., None]
    assert_same(stats_of(logits + shift, reference_logits - shift, token_ids, mask, group_ids, finished, tile), base)


@given(batch=batches(), scale=st.sampled_from([0.1, 1.0, 8.0]), temperature=st.sampled_from([0.5, 1.0, 1.7]),
       tokens=st.integers(1, 7), vocab_tile=st.integers(1, 14), bias=st.booleans(),
       keys=drawn_keys(KEYS[:-3], most=6))
def test_scores_given_normalisers_equal_the_full_computation(batch, scale, temperature, tokens, vocab_tile, bias,
                                                            keys):
    """Given float64's log Z and H of the head's logits, the score pass alone gives the scores and
    Renyi-2 of :func:`token_statistics_from_hidden` (and of float64), with a mass of 1 a row."""
    group_ids, mask, finished, vocab, seed = batch
    hidden, weight, lm_bias = drawn_head(seed, *mask.shape, vocab, 4, scale, bias, torch.float32)
    token_ids = token_ids_of(seed, mask.shape, vocab)
    options = dict(tile_size=(tokens, vocab_tile), backend="torch", finished=finished)
    full = token_statistics_from_hidden(hidden, weight, token_ids, mask, temperature, keys, group_ids, lm_bias,
                                        **options)
    logits64 = head_logits(hidden, weight, lm_bias)
    log_z = torch.logsumexp(logits64 / temperature, dim=-1).float()
    expected = reference_statistics(logits64, token_ids, mask, temperature)
    scores, renyi2, deviation = scores_from_hidden_given_normalisers(
        hidden, weight, token_ids, mask, temperature, keys, log_z, expected["entropy"].float(), group_ids, lm_bias,
        **options)
    assert deviation < 1e-5
    torch.testing.assert_close(renyi2.double(), expected["renyi2"], atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(renyi2, full.renyi2, atol=2e-5, rtol=1e-5)
    for key in keys:
        torch.testing.assert_close(scores[key], full.js_scores[key], atol=2e-5, rtol=1e-5,
                                   msg=lambda text, key=key: f"{key}: {text}")


def test_the_float64_reference_of_a_subnormal_probability_is_finite():
    """float64 gives p = (1, 4.9e-324) at logits (0, -745): the reference JS to (1, 0) was ``inf``
    (its mean's ``4.9e-324 / 2`` rounds to 0, and ``log 0``), where the library's float32 gives 0."""
    logits = torch.tensor([[[0.0, -745.0], [0.0, float("-inf")]]])
    token_ids, mask = torch.zeros(1, 2, dtype=torch.long), torch.ones(1, 2, dtype=torch.bool)
    stats = token_statistics(logits, token_ids, mask, 1.0, ("prev", "seq_mean"), backend="torch")
    for reference in ("prev", "seq_mean"):
        want = loop_reference_scores(logits.double(), token_ids, mask, None, 1.0, reference, "js")
        assert torch.isfinite(want).all() and float(want.abs().max()) < 1e-300
        torch.testing.assert_close(stats.js_scores[reference].double(), want, atol=1e-12, rtol=0)

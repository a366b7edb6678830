"""Independent float64 references for the token statistics (full softmax, loops over rows and
positions, written from the formulas) and the batches the tests score with them
(``tests/test_stats.py``, ``test_group_scores.py``, ``test_tiles.py``)."""

from __future__ import annotations

import math

import torch


def tile_of(tokens: int | None) -> tuple[int, int] | None:
    """A tile of ``tokens`` rows by 5 vocabulary ids (no test vocabulary is a multiple of 5), or
    None for the device's default tile."""
    return None if tokens is None else (tokens, 5)


LN2 = math.log(2.0)


def reference_distributions(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    return torch.softmax(logits.double() / temperature, dim=-1)


def reference_entropy(p: torch.Tensor) -> torch.Tensor:
    return -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(-1)


def reference_js(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """JS via its KL definition (not the entropy identity the code uses), with ``log m = log(p + q)
    - ln 2``: ``m = (p + q) / 2`` itself rounds to 0 where ``p`` or ``q`` is float64's smallest
    subnormal (peaked logits), and ``log 0`` made the score ``inf``."""
    log_m = (p + q).log() - LN2

    def kl(a: torch.Tensor) -> torch.Tensor:
        return torch.where(a > 0, a * (a.log() - log_m), torch.zeros_like(a)).sum(-1)

    return 0.5 * kl(p) + 0.5 * kl(q)


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


def hidden_batch(seed: int, batch=4, length=7, width=6, vocab=29, bias=True):
    generator = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, length, width, generator=generator)
    weight = torch.randn(vocab, width, generator=generator)
    lm_bias = torch.randn(vocab, generator=generator) if bias else None
    token_ids = torch.randint(0, vocab, (batch, length), generator=generator)
    lengths = torch.randint(1, length + 1, (batch,), generator=generator)
    mask = torch.arange(length)[None, :] < lengths[:, None]
    return hidden, weight, lm_bias, token_ids, mask


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

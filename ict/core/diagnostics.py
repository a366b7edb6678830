"""Per-step diagnostics of which tokens a method updates and why: pure tensor math, no models.

Every method logs them, computed once per step on the step's statistics (``[N, T]``, all
micro-batches together), so they cost no extra pass over the vocabulary.

- Regime (the paper's section 3.1): with ``beta = sum_v p_v^2 = exp(-H2)``, a policy-gradient push
  on the sampled token ``a*`` concentrates the distribution (lowers H2, toward collapse) when
  ``p(a*) > beta`` and flattens it (toward explosion) when ``p(a*) < beta``.
  ``above_beta_fraction[_selected]``: share of response [selected] tokens with ``p(a*) > beta``;
  ``log_p_over_beta[_selected]``: mean of ``log p(a*) - log beta = log_prob + renyi2`` (nats).
- ``selected_high_entropy_fraction``: share of the selected tokens whose entropy is above the
  median entropy of the step's response tokens (the paper reports about 0.5 for ICT: it is not
  an entropy filter).
- ``jaccard_entropy20`` / ``jaccard_ict10``: Jaccard overlap ``|S & R| / |S | R|`` of the
  method's selection ``S`` with what 20-Entropy (top 20% entropy over the step) and ICT at its
  defaults (``ICT_PAPER_SELECTOR_OPTIONS``: the top 10% of each response, ``ceil(0.1 L)`` of its
  ``L`` tokens, by ``ICT_DEFAULT_REFERENCE``) would select on the same tokens (ties drawn with a
  generator seeded with 0), so an ICT run at its defaults logs 1 but where a tie decides (its
  selection draws ties with the run's generator).
- ``selected_positive_advantage_fraction``: share of the selected tokens that lie in completions
  with positive advantage (the paper's A.3.4: high-JS tokens sit in positive-advantage
  completions although the score uses no reward).

All values are floats; NaN where undefined (no selected token, no JS scores).

:func:`selection_anatomy` says *where* in the responses a selection lies (issue 22):

- ``selected_partial_group_fraction``: share of the selected tokens at positions where fewer
  than G completions of their group are alive (``G`` = the group's rows, ``alive`` = has a
  response token at that position); with right-padded responses, the positions at or after
  the end of the group's shortest completion (``t >= L_min``);
- ``selected_relative_position``: mean of ``t / L`` over the selected tokens, ``t`` the 0-based
  index of the token among its completion's response tokens and ``L`` their number (a uniform
  selection gives ``(L - 1) / 2L``, a little under 0.5);
- ``selected_end_token_fraction``: share of the selected tokens that are end tokens (at the
  last response position of a *finished* completion, as :func:`ict.core.stats.response_ends`
  defines it);
- ``selected_tie_fraction``: share of the selected tokens decided by a tie at the selection
  threshold (``Selection.tie_decided``; NaN when not given).

Each ``*_fraction`` / ``*_position`` also has an ``all_`` twin over every response token (the
value a uniform selection would have).

:func:`paper_figures` gives the paper's figures of its selected tokens (``PAPER_FIGURES``; its
A.4.1 and section 3.1), for any selection; ``p(a*) = exp(log_prob)`` is the probability of the
sampled token under the temperature-scaled policy:

- ``selected_token_prob_mean`` / ``selected_token_prob_std``: mean and standard deviation
  (population, ``ddof = 0``) of ``p(a*)`` over the selected tokens (the paper: 0.18 +- 0.09);
  ``all_token_prob_mean`` / ``all_token_prob_std`` over every response token;
- ``selected_high_low_entropy_ratio``: ``#{selected: H > m} / #{selected: H <= m}`` with ``m``
  the median entropy of the step's response tokens (all of them, selected or not; the lower
  middle value for an even count, as ``torch.median``); the paper reports 1.03 (GSM8K) and 0.99
  (MATH). ``inf`` when every selected token lies above ``m`` (JSON null), NaN when none is
  selected or an entropy is NaN (then ``m`` is; so is ``f``). ``selected_high_entropy_fraction``
  ``f`` above is the same split: ratio ``f / (1 - f)``;
- ``above_beta_fraction_selected`` / ``above_beta_fraction``: share with ``p(a*) > beta`` (as above);
- ``score_knee_fraction``: the knee of each response's sorted score curve (Kneedle). For a response
  with ``L >= 3`` tokens, sort its ICT scores descending, ``s_1 >= ... >= s_L`` (the score the
  registry's ``ict`` selector ranks by default, ``ICT_DEFAULT_REFERENCE``), and put
  ``x_r = r / L`` (``r = 1..L``, so ``x`` in ``(0, 1]``), ``y_r = (s_r - s_L) / (s_1 - s_L)`` in
  ``[0, 1]``. The chord from ``(x_1, 1)`` to ``(x_L, 0)`` is ``c_r = 1 - (r - 1) / (L - 1)``; the
  knee is ``x_r*`` at ``r* = argmax_r (c_r - y_r)``, the point farthest below the chord (the
  perpendicular distance is proportional, so the same point; the first on a tie). The figure is
  the mean of ``x_r*`` over the responses that have a knee: ``L >= 3``, ``s_1 > s_L`` and some
  point more than 1e-9 below the chord. A straight or concave curve (a plateau of saturated
  scores that drops at its end) has none; ``score_knee_share`` is the share of the ``L >= 3``
  responses that have one. The paper reports an elbow near 0.10.

:func:`top_token_counts` gives the most frequent selected and unselected token ids (the trainer
logs their decoded strings as ``top_selected_tokens`` / ``top_unselected_tokens``: lists of
``[string, count]``, the only non-numeric diagnostics). :func:`aligned_share` says how long the
G completions of a prompt stay identical, :func:`token_agreement` how alike they are.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ict.core.selectors import ICT_DEFAULT_REFERENCE, ICT_PAPER_SELECTOR_OPTIONS, top_fraction_mask
from ict.core.stats import TokenStatistics, check_token_shapes, response_ends

DIAGNOSTIC_KEYS = (
    "above_beta_fraction",
    "above_beta_fraction_selected",
    "log_p_over_beta",
    "log_p_over_beta_selected",
    "selected_high_entropy_fraction",
    "jaccard_entropy20",
    "jaccard_ict10",
    "selected_positive_advantage_fraction",
)


def _mean(values: Tensor, mask: Tensor) -> float:
    return float(values[mask].double().mean()) if bool(mask.any()) else math.nan


def jaccard(first: Tensor, second: Tensor) -> float:
    """``|A & B| / |A | B|`` of two bool masks (NaN when both are empty)."""
    union = int((first | second).sum())
    return int((first & second).sum()) / union if union else math.nan


def above_beta(stats: TokenStatistics) -> Tensor:
    """bool ``[N, T]``: ``p(a*) > beta = exp(-H2)``, i.e. ``log_prob + renyi2 > 0`` (float64)."""
    return (stats.log_probs.detach().double() + stats.renyi2.detach().double()) > 0


def entropy_median(entropy: Tensor, response: Tensor) -> float:
    """The median entropy of the response tokens (``torch.median``: the lower middle value for an
    even count; NaN without response tokens, or when one is NaN): the high / low split of the
    entropy diagnostics, which are NaN without it."""
    return float(entropy[response].median()) if bool(response.any()) else math.nan


def token_diagnostics(
    stats: TokenStatistics,
    response_mask: Tensor,
    selected_mask: Tensor,
    advantages: Tensor,
) -> dict[str, float]:
    """The diagnostics of the module docstring for one step.

    ``stats`` fields and masks are ``[N, T]``; ``advantages`` is ``[N]`` (one per completion).
    ``jaccard_ict10`` needs ``stats.js_scores[ICT_DEFAULT_REFERENCE]``.
    """
    device = stats.log_probs.device  # the masks may come from another device (e.g. CPU)
    response = response_mask.to(device).bool()
    selected = selected_mask.to(device).bool() & response
    advantages = advantages.to(device)
    log_probs = stats.log_probs.detach().float()
    log_p_over_beta = log_probs + stats.renyi2.float()  # log p(a*) - log beta, beta = exp(-H2)
    above = above_beta(stats)
    entropy = stats.entropy.detach().float()
    median = entropy_median(entropy, response)
    positive = (advantages.reshape(-1, 1) > 0).expand_as(response)
    out = {
        "above_beta_fraction": _mean(above.float(), response),
        "above_beta_fraction_selected": _mean(above.float(), selected),
        "log_p_over_beta": _mean(log_p_over_beta, response),
        "log_p_over_beta_selected": _mean(log_p_over_beta, selected),
        "selected_high_entropy_fraction": math.nan if math.isnan(median) else _mean((entropy > median).float(),
                                                                                    selected),
        "jaccard_entropy20": math.nan,
        "jaccard_ict10": math.nan,
        "selected_positive_advantage_fraction": _mean(positive.float(), selected),
    }
    if bool(response.any()):
        out["jaccard_entropy20"] = jaccard(selected, top_fraction_mask(entropy, response, 0.2, "batch"))
        scores = stats.js_scores.get(ICT_DEFAULT_REFERENCE)
        if scores is not None:
            ict = top_fraction_mask(scores, response, ICT_PAPER_SELECTOR_OPTIONS["ratio"],
                                    ICT_PAPER_SELECTOR_OPTIONS["scope"])  # ICT's own default selection
            out["jaccard_ict10"] = jaccard(selected, ict)
    return out


ANATOMY_FIGURES = (  # (title, unit, selected key, all-token key or None): one per anatomy figure
    ("fewer than G alive", "fraction of tokens", "selected_partial_group_fraction",
     "all_partial_group_fraction"),
    ("relative position t/L", "mean over tokens", "selected_relative_position", "all_relative_position"),
    ("end tokens", "fraction of tokens", "selected_end_token_fraction", "all_end_token_fraction"),
    ("decided by a tie", "fraction of selected tokens", "selected_tie_fraction", None),
)
ANATOMY_KEYS = (*(figure[2] for figure in ANATOMY_FIGURES),
                *(figure[3] for figure in ANATOMY_FIGURES if figure[3] is not None))


def token_anatomy(response_mask: Tensor, group_ids: Tensor, finished: Tensor | None = None) -> dict[str, Tensor]:
    """Per-token anatomy, each ``[B, T]``: ``partial_group`` (bool: fewer than G rows of the group
    alive at that position), ``relative_position`` (float64 ``t / L``, 0 outside the response) and
    ``end_token`` (bool: the last response token of a finished row). ``group_ids`` and ``finished``
    must be ``[B]`` (ValueError otherwise)."""
    response = response_mask.bool()
    check_token_shapes(response.shape, {}, {"group_ids": group_ids, "finished": finished})  # [1] would broadcast
    _, rank = torch.unique(group_ids.to(response.device), return_inverse=True)
    num_groups = int(rank.max()) + 1 if rank.numel() else 0
    group_size = torch.bincount(rank, minlength=num_groups)
    alive = torch.zeros(num_groups, response.shape[1], dtype=torch.long, device=response.device)
    alive.index_add_(0, rank, response.long())
    partial = response & (alive[rank] < group_size[rank].unsqueeze(-1))
    index = response.long().cumsum(dim=1) - 1
    length = response.sum(dim=1, keepdim=True).clamp(min=1)
    relative = torch.where(response, index.double() / length.double(), torch.zeros((), dtype=torch.float64))
    last, done = response_ends(response, finished)
    end = torch.zeros_like(response)
    rows = done.nonzero(as_tuple=True)[0]
    end[rows, last[rows]] = True
    return {"partial_group": partial, "relative_position": relative, "end_token": end}


def selection_anatomy(
    selected_mask: Tensor,
    response_mask: Tensor,
    group_ids: Tensor,
    finished: Tensor | None = None,
    tie_decided: Tensor | None = None,
) -> dict[str, float]:
    """The anatomy figures of the module docstring for one selection (``ANATOMY_KEYS``).

    Masks are ``[B, T]``; ``group_ids`` ``[B]`` labels the completions of one prompt;
    ``finished`` ``[B]`` (optional) as in :func:`ict.core.stats.response_ends`. Other shapes of
    the masks, ``group_ids`` or ``finished`` are a ValueError (none is broadcast).
    """
    response = response_mask.bool()
    # [1, T] would broadcast to every row
    check_token_shapes(response.shape, {"selected_mask": selected_mask, "tie_decided": tie_decided})
    selected = selected_mask.to(response.device).bool() & response
    anatomy = token_anatomy(response, group_ids, finished)
    out = {}
    for name, values in (("partial_group_fraction", anatomy["partial_group"].double()),
                         ("relative_position", anatomy["relative_position"]),
                         ("end_token_fraction", anatomy["end_token"].double())):
        out[f"selected_{name}"] = _mean(values, selected)
        out[f"all_{name}"] = _mean(values, response)
    out["selected_tie_fraction"] = (math.nan if tie_decided is None else
                                    _mean((tie_decided.to(response.device).bool() & selected).double(), selected))
    return {key: out[key] for key in ANATOMY_KEYS}


# ---------------------------------------------------------------------------------------------
# The paper's figures of its selected tokens

PAPER_FIGURES = (  # (title, unit, selected key, all-token key or None, the paper's value or None)
    ("p(a*) mean", "probability", "selected_token_prob_mean", "all_token_prob_mean", "0.18"),
    ("p(a*) std", "probability", "selected_token_prob_std", "all_token_prob_std", "0.09"),
    ("high:low entropy", "ratio of counts, median split", "selected_high_low_entropy_ratio", None,
     "1.03 (GSM8K), 0.99 (MATH)"),
    ("p(a*) > beta", "fraction of tokens", "above_beta_fraction_selected", "above_beta_fraction", None),
    ("score knee", "rank / L of the sorted score", "score_knee_fraction", None, "~0.10"),
    ("responses with a knee", "fraction of responses", "score_knee_share", None, None),
)
"""One home for the paper's figures: titles, units, metrics keys and the paper's values."""
PAPER_FIGURE_KEYS = tuple(dict.fromkeys(key for figure in PAPER_FIGURES for key in figure[2:4] if key))
TOP_TOKEN_KEYS = {"selected": "top_selected_tokens", "unselected": "top_unselected_tokens"}
"""metrics keys of the most frequent selected / unselected token strings (lists of [string, count])"""
TOP_TOKENS = 10
KNEE_TOLERANCE = 1e-9  # how far below the chord a point must lie to count as a knee (y units)


def _std(values: Tensor, mask: Tensor) -> float:
    """Population standard deviation (``ddof = 0``) of ``values[mask]`` (NaN when empty)."""
    return float(values[mask].double().std(correction=0)) if bool(mask.any()) else math.nan


def score_knees(scores: Tensor, response_mask: Tensor, tolerance: float = KNEE_TOLERANCE) -> Tensor:
    """Per response, the knee ``x_r*`` of its sorted score curve (module docstring), float64 ``[B]``.

    ``scores`` and ``response_mask`` are ``[B, T]``. NaN for a response without a knee (fewer
    than 3 tokens, constant scores, or no point more than ``tolerance`` below the chord).
    """
    response = response_mask.bool()
    if response.shape[1] < 3:  # no response has 3 tokens (and a [B, 0] one has no column to gather)
        return torch.full(response.shape[:1], math.nan, dtype=torch.float64, device=scores.device)
    values = torch.where(response, scores.detach().double(), torch.full((), -math.inf, dtype=torch.float64,
                                                                        device=scores.device))
    ordered = values.sort(dim=1, descending=True).values  # the L real scores first
    length = response.sum(dim=1)
    rank = torch.arange(1, response.shape[1] + 1, device=scores.device, dtype=torch.float64)
    last = ordered.gather(1, (length - 1).clamp(min=0).unsqueeze(1))
    first = ordered[:, :1]
    span = first - last
    valid_rank = rank.unsqueeze(0) <= length.unsqueeze(1)
    y = torch.where(valid_rank, (ordered - last) / span.clamp(min=1e-300), torch.zeros((), dtype=torch.float64,
                                                                                        device=scores.device))
    steps = (length - 1).clamp(min=1).double().unsqueeze(1)
    below = torch.where(valid_rank, 1.0 - (rank - 1.0) / steps - y,
                        torch.full((), -math.inf, dtype=torch.float64, device=scores.device))
    best, index = below.max(dim=1)  # the first maximal point
    has_knee = (length >= 3) & (span.squeeze(1) > 0) & (best > tolerance)
    knee = (index.double() + 1.0) / length.clamp(min=1).double()
    return torch.where(has_knee, knee, torch.full((), math.nan, dtype=torch.float64, device=scores.device))


def paper_figures(
    stats: TokenStatistics,
    response_mask: Tensor,
    selected_mask: Tensor,
    reference: str | None = None,
) -> dict[str, float]:
    """The paper's figures of a selection (``PAPER_FIGURE_KEYS``; formulas in the module docstring).

    ``stats`` fields and masks are ``[N, T]`` (one step, all rows). The knee uses
    ``stats.js_scores[reference]`` (default ``ICT_DEFAULT_REFERENCE``, ICT's default score; NaN when absent).
    """
    device = stats.log_probs.device
    response = response_mask.to(device).bool()
    selected = selected_mask.to(device).bool() & response
    probability = stats.log_probs.detach().double().exp()
    above = above_beta(stats)
    entropy = stats.entropy.detach().float()
    median = entropy_median(entropy, response)
    high = int((selected & (entropy > median)).sum())
    low = int((selected & (entropy <= median)).sum())
    ratio = math.nan if math.isnan(median) else high / low if low else (math.inf if high else math.nan)
    out = {
        "selected_token_prob_mean": _mean(probability, selected),
        "all_token_prob_mean": _mean(probability, response),
        "selected_token_prob_std": _std(probability, selected),
        "all_token_prob_std": _std(probability, response),
        "selected_high_low_entropy_ratio": ratio,
        "above_beta_fraction_selected": _mean(above.double(), selected),
        "above_beta_fraction": _mean(above.double(), response),
        "score_knee_fraction": math.nan,
        "score_knee_share": math.nan,
    }
    scores = stats.js_scores.get(reference or ICT_DEFAULT_REFERENCE)
    if scores is not None:
        knees = score_knees(scores, response)
        eligible = response.sum(dim=1) >= 3
        found = ~knees.isnan()
        if bool(found.any()):
            out["score_knee_fraction"] = float(knees[found].mean())
        if bool(eligible.any()):
            out["score_knee_share"] = float(found[eligible].double().mean())
    return {key: out[key] for key in PAPER_FIGURE_KEYS}


def top_token_counts(
    token_ids: Tensor, response_mask: Tensor, selected_mask: Tensor, k: int = TOP_TOKENS,
) -> dict[str, list[tuple[int, int]]]:
    """The ``k`` most frequent token ids among the selected and among the unselected response
    tokens: ``{"selected": [(id, count), ...], "unselected": [...]}``, by count descending, then
    id ascending. All inputs ``[N, T]``."""
    response = response_mask.bool()
    selected = selected_mask.to(response.device).bool() & response
    out = {}
    for name, mask in (("selected", selected), ("unselected", response & ~selected)):
        ids, counts = torch.unique(token_ids.to(response.device)[mask], return_counts=True)  # ids ascending
        order = torch.sort(-counts, stable=True).indices[:k]
        out[name] = [(int(ids[i]), int(counts[i])) for i in order]
    return out


def aligned_share(token_ids: Tensor, response_mask: Tensor, group_ids: Tensor) -> float:
    """Mean over responses of the share of each response's tokens before its group first diverges.

    A group *diverges* at the first position ``D`` where not all of its G rows have a response
    token, or where they do not all hold the same token id (``D = 0`` when they differ at once);
    a response of ``L`` tokens contributes ``min(D, L) / L``. Inputs ``[B, T]`` and ``[B]``;
    responses without tokens are left out (NaN when none has one).
    """
    check_token_shapes(response_mask.shape, {"token_ids": token_ids}, {"group_ids": group_ids})
    response = response_mask.bool()
    tokens = token_ids.to(response.device)
    _, rank = torch.unique(group_ids.to(response.device), return_inverse=True)
    shares = []
    for group in range(int(rank.max()) + 1 if rank.numel() else 0):
        rows = (rank == group).nonzero(as_tuple=True)[0]
        alive = response[rows].all(dim=0)
        same = (tokens[rows] == tokens[rows[0]]).all(dim=0)
        split = (~(alive & same)).nonzero(as_tuple=True)[0]
        divergence = int(split[0]) if split.numel() else response.shape[1]
        for row in rows.tolist():
            length = int(response[row].sum())
            if length:
                shares.append(min(divergence, length) / length)
    return sum(shares) / len(shares) if shares else math.nan


def token_agreement(token_ids: Tensor, response_mask: Tensor, group_ids: Tensor) -> float:
    """Mean over response tokens ``(i, t)`` of the share of the other rows of ``i``'s group alive at
    ``t`` that hold the same token id there: ``#{j != i alive at t: y_j,t = y_i,t} / #{j != i alive
    at t}`` (tokens with no other row alive left out; NaN when none is left). 1 for identical
    completions, about ``sum_v p_v^2`` for independent draws. Inputs ``[B, T]`` and ``[B]``.
    Unlike :func:`aligned_share` one deviating row does not end the agreement of the others."""
    check_token_shapes(response_mask.shape, {"token_ids": token_ids}, {"group_ids": group_ids})
    response = response_mask.bool()
    tokens = token_ids.to(response.device)
    _, rank = torch.unique(group_ids.to(response.device), return_inverse=True)
    total, count = 0.0, 0
    for group in range(int(rank.max()) + 1 if rank.numel() else 0):
        rows = (rank == group).nonzero(as_tuple=True)[0]
        alive = response[rows]  # [G, T]
        both = alive.unsqueeze(1) & alive.unsqueeze(0)  # [G, G, T]
        same = (tokens[rows].unsqueeze(1) == tokens[rows].unsqueeze(0)) & both
        others = alive.sum(dim=0, keepdim=True) - 1  # [1, T]
        matches = same.sum(dim=1) - alive.long()  # [G, T], the row itself left out
        counted = alive & (others > 0)
        total += float((matches.double() / others.clamp(min=1).double())[counted].sum())
        count += int(counted.sum())
    return total / count if count else math.nan

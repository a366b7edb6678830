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
  method's selection ``S`` with what 20-Entropy (top 20% entropy over the step) and ICT (top 10%
  by its default JS reference, ``ICT_DEFAULT_REFERENCE``, over the step) would select on the
  same tokens (ties drawn with a generator seeded with 0).
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
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ict.core.selectors import ICT_DEFAULT_REFERENCE, top_fraction_mask
from ict.core.stats import TokenStatistics, response_ends

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
    above = log_p_over_beta > 0
    entropy = stats.entropy.detach().float()
    median = float(entropy[response].median()) if bool(response.any()) else math.nan
    positive = (advantages.reshape(-1, 1) > 0).expand_as(response)
    out = {
        "above_beta_fraction": _mean(above.float(), response),
        "above_beta_fraction_selected": _mean(above.float(), selected),
        "log_p_over_beta": _mean(log_p_over_beta, response),
        "log_p_over_beta_selected": _mean(log_p_over_beta, selected),
        "selected_high_entropy_fraction": _mean((entropy > median).float(), selected),
        "jaccard_entropy20": math.nan,
        "jaccard_ict10": math.nan,
        "selected_positive_advantage_fraction": _mean(positive.float(), selected),
    }
    if bool(response.any()):
        out["jaccard_entropy20"] = jaccard(selected, top_fraction_mask(entropy, response, 0.2, "batch"))
        scores = stats.js_scores.get(ICT_DEFAULT_REFERENCE)
        if scores is not None:
            out["jaccard_ict10"] = jaccard(selected, top_fraction_mask(scores, response, 0.1, "batch"))
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
    ``end_token`` (bool: the last response token of a finished row)."""
    response = response_mask.bool()
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
    ``finished`` ``[B]`` (optional) as in :func:`ict.core.stats.response_ends`.
    """
    response = response_mask.bool()
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

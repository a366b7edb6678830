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
  by JS to the group mean over the step) would select on the same tokens.
- ``selected_positive_advantage_fraction``: share of the selected tokens that lie in completions
  with positive advantage (the paper's A.3.4: high-JS tokens sit in positive-advantage
  completions although the score uses no reward).

All values are floats; NaN where undefined (no selected token, no JS scores).
"""

from __future__ import annotations

import math

from torch import Tensor

from ict.core.selectors import top_fraction_mask
from ict.core.stats import TokenStatistics

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
    ``jaccard_ict10`` needs ``stats.js_scores["group_mean"]``.
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
        scores = stats.js_scores.get("group_mean")
        if scores is not None:
            out["jaccard_ict10"] = jaccard(selected, top_fraction_mask(scores, response, 0.1, "batch"))
    return out

"""Names of the JS references and score metrics, their keys, and :class:`TokenStatistics`."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from torch import Tensor

GROUP_MEAN_VARIANTS: dict[str, tuple[bool, bool]] = {  # name -> (absorbing, leave_one_out)
    "group_mean": (False, False),
    "group_mean_absorbing": (True, False),
    "group_mean_loo": (False, True),
    "group_mean_loo_absorbing": (True, True),
}
"""The references that compare a row with its group at the same position (they need
``group_ids`` and whole groups in one call)."""
JS_REFERENCES = (*GROUP_MEAN_VARIANTS, "seq_mean", "prev", "ref")
SCORE_METRICS = ("js", "kl", "wasserstein")
"""How a row's distribution is compared with its reference (package docstring): Jensen-Shannon,
KL(p || q), and 1-Wasserstein under the 0-1 ground metric (= total variation)."""

LN2 = math.log(2.0)
TINY = torch.finfo(torch.float32).tiny
"""float32's smallest normal number: ``log max(q, TINY)`` keeps a KL score finite."""
KL_MAX = -math.log(TINY)  # 87.34 nats: KL with log max(q, tiny) never exceeds it


def score_key(reference: str, metric: str = "js") -> str:
    """The ``js_scores`` key of ``metric`` (one of :data:`SCORE_METRICS`) to ``reference``: the bare
    reference name for ``"js"``, else ``"<reference>:<metric>"`` (e.g. ``"group_mean_absorbing:kl"``).
    ValueError (one line) for an unknown reference, a score key included (``reference="group_mean:kl"``
    would rank by KL under ``metric="js"``), or metric."""
    if reference not in JS_REFERENCES:
        raise ValueError(f"unknown JS reference {reference!r}; choose from {', '.join(JS_REFERENCES)}")
    if metric not in SCORE_METRICS:
        raise ValueError(f"unknown score metric {metric!r}; choose from {', '.join(SCORE_METRICS)}")
    return reference if metric == "js" else f"{reference}:{metric}"


def split_score_key(name: str) -> tuple[str, str]:
    """``(reference, metric)`` of a score key (:func:`score_key`'s inverse); ValueError (one line)
    for an unknown reference or metric, and for ``"<reference>:js"`` (JS is the bare name)."""
    reference, colon, metric = name.partition(":")
    if reference not in JS_REFERENCES:
        raise ValueError(f"unknown JS reference {reference!r}; choose from {', '.join(JS_REFERENCES)}")
    if not colon:
        return reference, "js"
    if metric == "js":
        raise ValueError(f"score {name!r}: a JS score is keyed by the bare reference name {reference!r}")
    if metric not in SCORE_METRICS:
        raise ValueError(f"unknown score metric {metric!r} in {name!r}; choose from {', '.join(SCORE_METRICS)}")
    return reference, metric


def needs_groups(js_references: Sequence[str]) -> bool:
    """Whether any of ``js_references`` (score keys) is a group reference (needs ``group_ids`` and
    whole groups)."""
    return any(name.partition(":")[0] in GROUP_MEAN_VARIANTS for name in js_references)


def needs_reference_logits(js_references: Sequence[str]) -> bool:
    """Whether any of ``js_references`` (score keys) compares with the reference model (``ref``,
    any metric): its logits must then be given."""
    return any(name.partition(":")[0] == "ref" for name in js_references)


@dataclass
class TokenStatistics:
    """Per-position statistics, each ``[B, T]`` float32, zero outside the response mask."""

    log_probs: Tensor
    entropy: Tensor
    renyi2: Tensor
    js_scores: dict[str, Tensor] = field(default_factory=dict)

    def detached(self) -> TokenStatistics:
        """The same statistics without gradients."""
        return TokenStatistics(self.log_probs.detach(), self.entropy.detach(), self.renyi2.detach(),
                               {name: scores.detach() for name, scores in self.js_scores.items()})

    def rows(self, index: Tensor | slice) -> TokenStatistics:
        """The statistics of the rows ``index`` of the batch."""
        return TokenStatistics(self.log_probs[index], self.entropy[index], self.renyi2[index],
                               {name: scores[index] for name, scores in self.js_scores.items()})

    @staticmethod
    def concat(parts: Sequence[TokenStatistics]) -> TokenStatistics:
        """Row-wise concatenation of statistics with equal ``T`` and the same JS references."""
        return TokenStatistics(
            torch.cat([part.log_probs for part in parts]), torch.cat([part.entropy for part in parts]),
            torch.cat([part.renyi2 for part in parts]),
            {name: torch.cat([part.js_scores[name] for part in parts]) for name in parts[0].js_scores})


def check_token_shapes(shape: tuple[int, ...], per_token: dict[str, Tensor | None],
                       per_sequence: dict[str, Tensor | None] | None = None,
                       advantages: Tensor | None = None) -> None:
    """One-line ValueError unless each tensor of ``per_token`` is ``[B, T]`` = ``shape``, each of
    ``per_sequence`` ``[B]``, and ``advantages`` ``[B]`` or ``[B, T]`` (None: not given), for the
    consumers of :class:`TokenStatistics` (the selectors, the loss): nothing broadcast."""
    shape = tuple(shape)
    for name, tensor in {**per_token, **(per_sequence or {})}.items():
        if tensor is not None and not isinstance(tensor, Tensor):
            raise ValueError(f"{name} must be a tensor, got {type(tensor).__name__}")
    for name, tensor in per_token.items():
        if tensor is not None and tuple(tensor.shape) != shape:
            raise ValueError(f"{name} must be [B, T] = {list(shape)}, got {list(tensor.shape)}")
    for name, tensor in (per_sequence or {}).items():
        if tensor is not None and tuple(tensor.shape) != shape[:1]:
            raise ValueError(f"{name} must be [B] = {list(shape[:1])}, got {list(tensor.shape)}")
    if advantages is not None and tuple(advantages.shape) not in (shape[:1], shape):
        raise ValueError(f"advantages must be [B] = {list(shape[:1])} or [B, T] = {list(shape)}, "
                         f"got {list(advantages.shape)}")


@dataclass
class Partials:
    """Sums over the vocabulary of one reference's scores, accumulated tile by tile, ``[N]`` each
    (rows in processing order): ``mixture = sum_v -m_v log m_v`` with ``m = (p + q) / 2``,
    ``reference_entropy = sum_v -q_v log q_v``, ``variation = sum_v |p_v - q_v|`` (float32), and
    for ``kl`` ``cross = sum_v p_v log max(q_v, TINY)`` and ``mass = sum_v p_v`` (float64: KL
    scores reach ~20 nats, where float32's rounding of these sums alone would exceed 1e-5)."""

    mixture: Tensor
    reference_entropy: Tensor
    cross: Tensor
    variation: Tensor
    mass: Tensor

    @staticmethod
    def zeros(num_rows: int, device: torch.device) -> Partials:
        def zeros(dtype: torch.dtype) -> Tensor:
            return torch.zeros(num_rows, dtype=dtype, device=device)

        return Partials(zeros(torch.float32), zeros(torch.float32), zeros(torch.float64), zeros(torch.float32),
                        zeros(torch.float64))

    def view(self, part: slice) -> Partials:
        """The rows ``part`` (views: accumulating into them accumulates here)."""
        return Partials(self.mixture[part], self.reference_entropy[part], self.cross[part], self.variation[part],
                        self.mass[part])


def scores_from_partials(partials: Partials, entropy: Tensor, metrics: Sequence[str],
                         reference_entropy: Tensor | None = None) -> dict[str, Tensor]:
    """Each of ``metrics`` from a reference's :class:`Partials` and ``entropy = H(p)`` ``[N]``:

    - ``js  = H(m) - H(p) / 2 - H(q) / 2``, clamped to [0, ln 2] (``H(q)``: ``reference_entropy``
      when given, else the accumulated one);
    - ``kl  = -H(p) - sum_v p_v log max(q_v, TINY) / sum_v p_v``, clamped to [0, KL_MAX]: the
      division by the accumulated mass (1 up to rounding) takes the rounding of ``p``'s
      normaliser out of the cross term, which ``log q`` of ~-20 would otherwise magnify;
    - ``wasserstein = TV(p, q) = 1/2 sum_v |p_v - q_v|``, clamped to [0, 1].
    """
    scores: dict[str, Tensor] = {}
    if "js" in metrics:
        entropy_q = partials.reference_entropy if reference_entropy is None else reference_entropy
        scores["js"] = (partials.mixture - 0.5 * entropy - 0.5 * entropy_q).clamp_(0.0, LN2)
    if "kl" in metrics:
        cross = torch.where(partials.mass > 0, partials.cross / partials.mass, partials.cross)
        scores["kl"] = (-entropy - cross).clamp_(0.0, KL_MAX).float()
    if "wasserstein" in metrics:
        scores["wasserstein"] = (0.5 * partials.variation).clamp_(0.0, 1.0)
    return scores

"""The configuration of :mod:`ict.integrations.trl` and its construction-time checks: TRL's
``GRPOConfig`` plus ict's token-selection fields (:class:`ICTGRPOConfig`), the tested TRL range
and the one-line refusals that need no trainer."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from packaging.version import Version
from trl import GRPOConfig

from ict.core.errors import is_integer
from ict.core.selector_registry import ranking_population, required_js_references
from ict.core.selectors import method_train_options
from ict.core.stats import needs_groups, needs_reference_logits, parse_tile_size
from ict.integrations import parse_token_selector, ranks_within_groups
from ict.integrations.trl_loss import (
    OURS_AGGREGATION,
    TRL_CLIPPED_LOSS_TYPES,
    TRL_LOSS_TYPE_OF,
    TRL_LOSS_TYPES,
)

SELECTION_DENOMINATORS = ("ours", "trl")
TRL_IMPORTANCE_SAMPLING_LEVELS = ("token", "sequence")
TRL_SCALE_REWARDS = ("group", "batch", "none")  # and True / False, GRPOConfig's aliases of group / none
TESTED_TRL = ("1.16.0", "1.17")  # >= first, < second


def check_trl_version(version: str) -> None:
    """Raise one line unless ``TESTED_TRL[0] <= version < TESTED_TRL[1]``: the integration
    overrides TRL's private ``_compute_loss`` / ``get_high_entropy_mask``, which change freely."""
    low, high = TESTED_TRL
    if not Version(low) <= Version(version) < Version(high):
        raise ValueError(f"ict.integrations.trl is tested with TRL >={low},<{high}; installed TRL {version} "
                         f"(pip install 'trl>={low},<{high}')")


@dataclass
class ICTGRPOConfig(GRPOConfig):
    """``GRPOConfig`` plus ict's token selection (every other field is TRL's)."""

    token_selector: str = field(
        default="ict",
        metadata={"help": "Registered ict selector and options, 'name:key=value,...'; unset options take "
                  "the registry's defaults (e.g. 'ict' (the paper's recipe: top 10% of each completion "
                  "by JS to the group mean), 'ict:preset=batch', 'entropy:ratio=0.2', 'all')."},
    )
    loss_type: str | None = field(  # type: ignore[assignment]
        default=None,
        metadata={"help": "TRL's loss_type; None: the one that gives the method's aggregation (registry, "
                  "with selection_denominator='ours'): 'grpo' (seq_mean_token_mean, the paper's "
                  "Sparse-GRPO) for ict and the paper presets (e.g. 'random:preset=paper'), TRL's "
                  "default 'dapo' (token_mean) otherwise."},
    )
    full_token_warmup_steps: int | None = field(
        default=None,
        metadata={"help": "The first N optimizer steps (TRL's global_step) update every completion token; "
                  "None: the method's (registry: 10 for ict, the paper's warm-up; 0 otherwise)."},
    )
    selection_denominator: str = field(
        default="ours",
        metadata={"help": "'ours': the loss is ict's policy_loss on the selected tokens; 'trl': TRL's "
                  "completion-token denominators (TRL's top_entropy_quantile convention)."},
    )
    stats_tile_size: str = field(
        default="auto",
        metadata={"help": "Token x vocabulary tile of ict's token statistics: 'auto' (follows the device: "
                  "4096x32768 for the Triton kernels on a GPU, 256x8192 in torch on a CPU) or "
                  "'TOKENSxVOCAB', e.g. '1024x32768'."},
    )

    def __post_init__(self) -> None:
        name, _, preset = parse_token_selector(self.token_selector, with_preset=True)
        method = method_train_options(name, preset)
        if self.loss_type is None:
            self.loss_type = TRL_LOSS_TYPE_OF[method["aggregation"]]
        refusal = option_refusal(self)
        if refusal:
            raise ValueError(refusal)
        if self.full_token_warmup_steps is None:
            self.full_token_warmup_steps = method["full_token_warmup_steps"]
        check_warmup_steps(self.full_token_warmup_steps)
        super().__post_init__()
        refusal = selection_refusal(self) or entropy_bonus_refusal(self)
        if refusal:
            raise ValueError(refusal)


def option_refusal(config: Any) -> str | None:
    """The one-line refusal of a ``loss_type`` or ``importance_sampling_level`` TRL does not know
    (TRL checks them only in the first step's loss) or a ``scale_rewards`` (checked only after the
    first generation), a ``selection_denominator`` other than 'ours' / 'trl' or a
    ``stats_tile_size`` that is not a tile size (read at every loss), or None."""
    if config.loss_type not in TRL_LOSS_TYPES:
        return f"loss_type must be one of {', '.join(TRL_LOSS_TYPES)} (or None), got {config.loss_type!r}"
    if config.importance_sampling_level not in TRL_IMPORTANCE_SAMPLING_LEVELS:
        return f"importance_sampling_level must be 'token' or 'sequence', got {config.importance_sampling_level!r}"
    if config.scale_rewards not in (*TRL_SCALE_REWARDS, True, False):
        return (f"scale_rewards must be one of {', '.join(TRL_SCALE_REWARDS)} (or True / False), "
                f"got {config.scale_rewards!r}")
    if config.selection_denominator not in SELECTION_DENOMINATORS:
        return f"selection_denominator must be 'ours' or 'trl', got {config.selection_denominator!r}"
    try:
        parse_tile_size(config.stats_tile_size)
    except ValueError as error:  # its message does not name the option
        return f"stats_tile_size: {error}"
    return None


def trainer_refusal(config: Any) -> str | None:
    """The config's refusals again, for the trainer (a config's fields can change after its
    checks): :func:`option_refusal`, :func:`selection_refusal`, :func:`entropy_bonus_refusal`."""
    return option_refusal(config) or selection_refusal(config) or entropy_bonus_refusal(config)


def needs_whole_groups(js_references: tuple[str, ...], population: str) -> bool:
    """Whether a selector needs all G rows of a prompt together: a group JS reference, or a
    group ranking population."""
    return needs_groups(js_references) or population == "group"


def selection_refusal(config: Any) -> str | None:
    """The one-line refusal of a token selector that TRL cannot run as configured, or None:
    ``top_entropy_quantile`` below 1 (a second token picker), a selector that needs whole groups
    (a group reference or a ``scope=group`` ranking, :func:`ict.integrations.ranks_within_groups`)
    with ``steps_per_generation != 1`` (TRL shuffles a group over micro-batches), the 'ref' JS
    reference (no reference logits inside TRL), Clip-Cov under GSPO's sequence-level ratio clip
    (``importance_sampling_level="sequence"``: it spares the tokens a token-level clip cuts) or
    under TRL's two-sided clip ``delta`` (it also cuts the tokens of ratio > delta and negative
    advantage, which Clip-Cov would spend its cuts on), and ``selection_denominator="ours"`` with a
    loss type outside :data:`OURS_AGGREGATION`. Checked by the config and again by the trainer
    (:func:`trainer_refusal`)."""
    name, options = parse_token_selector(config.token_selector)
    js_references = required_js_references(name, options)
    if config.top_entropy_quantile < 1.0:
        return "top_entropy_quantile and token_selector both pick tokens; leave top_entropy_quantile at 1.0"
    whole_groups = needs_whole_groups(js_references, ranking_population(name, options)) or ranks_within_groups(
        name, options)
    if whole_groups and config.steps_per_generation != 1:
        return (f"token_selector {name!r} needs whole groups in each micro-batch (TRL shuffles a group over "
                "micro-batches): set steps_per_generation=1 and leave generation_batch_size unset (it sets "
                "steps_per_generation); gradient_accumulation_steps may stay")
    if needs_reference_logits(js_references):
        return "the 'ref' JS reference is not supported inside TRL; use group_mean, seq_mean or prev"
    if (name == "clip_cov" and config.importance_sampling_level == "sequence"
            and config.loss_type in TRL_CLIPPED_LOSS_TYPES):
        return ("token_selector 'clip_cov' spares the tokens PPO's token-level ratio clip cuts, but "
                "importance_sampling_level='sequence' clips whole sequences; use importance_sampling_level='token'")
    if name == "clip_cov" and config.delta is not None and config.loss_type in TRL_CLIPPED_LOSS_TYPES:
        return (f"token_selector 'clip_cov' spares the tokens PPO's ratio clip cuts, but delta={config.delta} also "
                "cuts those of ratio > delta with a negative advantage; leave delta None")
    if config.selection_denominator == "ours" and config.loss_type not in OURS_AGGREGATION:
        return (f"selection_denominator='ours' is not defined for loss_type={config.loss_type!r} "
                f"(defined for {', '.join(OURS_AGGREGATION)}); use selection_denominator='trl'")
    return None


def entropy_bonus_refusal(config: Any) -> str | None:
    """The one-line refusal of TRL's entropy bonus (``entropy_coef != 0`` or
    ``use_adaptive_entropy``) under ``selection_denominator="ours"`` with grpo/sapo, or None.

    TRL 1.16 takes the bonus as ``sum(H * mask * w) / sum(mask * w)`` with ``w`` the weight
    :meth:`ICTGRPOTrainer.get_high_entropy_mask` returns (its ``effective_mask``). Under "ours"
    grpo/sapo's ``w = selected * n_b / n_sel_b * B / S`` varies by completion, so the bonus
    (and the adaptive controller's entropy) is a mean weighted by ``n_b / n_sel_b``, not the mean
    entropy of the selected tokens TRL documents; the other loss types' ``w`` is one constant
    per micro-batch (the mean is exact) and "trl"'s is 0/1."""
    bonus = getattr(config, "entropy_coef", 0.0) != 0.0 or bool(getattr(config, "use_adaptive_entropy", False))
    if bonus and config.selection_denominator == "ours" and config.loss_type in ("grpo", "sapo"):
        return (f"entropy_coef / use_adaptive_entropy with loss_type={config.loss_type!r} and "
                "selection_denominator='ours': TRL's entropy bonus would weigh the selected tokens by ict's "
                "per-completion loss weights (not their mean entropy); use selection_denominator='trl' or "
                "loss_type 'dapo' or 'bnpo'")
    return None


def check_warmup_steps(value: Any) -> None:
    """Raise one line unless ``value`` is an int >= 0 (not a bool, float or NaN: ``int()`` would
    cut 2.5 to 2, True to 1, 0.9 to 0)."""
    if not is_integer(value) or value < 0:
        raise ValueError(f"full_token_warmup_steps must be None or an integer >= 0, got {value!r}")


def sharded_head_refusal(config: Any, fsdp_plugin: Any = None, deepspeed_plugin: Any = None) -> str | None:
    """The one-line refusal of FSDP (1 and 2) and DeepSpeed ZeRO-3, whose LM-head weight is
    sharded (TRL gathers it inside its fused head; the integration is untested there), or None."""
    fsdp_config = getattr(config, "fsdp_config", None) or {}
    requested = bool(getattr(config, "fsdp", None)) or fsdp_plugin is not None or (
        os.environ.get("ACCELERATE_USE_FSDP", "false").lower() in ("1", "true"))
    if requested:
        version = (fsdp_config.get("version") or fsdp_config.get("fsdp_version")
                   or getattr(fsdp_plugin, "fsdp_version", None) or os.environ.get("FSDP_VERSION", "1"))
        return (f"ict.integrations.trl does not support FSDP (fsdp_version={version}): the LM head is sharded and "
                "this mode is untested; use DDP or DeepSpeed ZeRO-1/2")
    if getattr(deepspeed_plugin, "zero_stage", 0) == 3:
        return ("ict.integrations.trl does not support DeepSpeed ZeRO-3: the LM head is partitioned and this mode "
                "is untested; use DeepSpeed ZeRO-1/2 or DDP")
    return None

"""Record what ict's verl plug-in selected inside a real verl run, for ``check_masks.py``.

Loaded in every verl process through ``VERL_USE_EXTERNAL_MODULES`` (after
``ict.integrations.verl``); active only where ``ICT_VERL_DUMP_DIR`` is set. It wraps
:func:`ict.integrations.verl.select_mini_batch` (the one place the plug-in selects; the engine hook
looks it up by name at call time) and writes, for each selection, ``<dir>/select_<pid>_<n>.pt``:
the selector spec, the training step, whether it was the full-token warm-up, the seed of the
generator that breaks ties at the selection threshold, the clip range, the aggregation, each micro-batch's detached statistics (log-probs, entropy, Renyi-2, JS scores),
response mask, advantages, old log-probs, token ids and uids, and the mask, KL penalty and loss
scale the plug-in handed to verl's loss. At most ``ICT_VERL_DUMP_LIMIT`` (default 8) files per
process. Nothing here changes what is trained.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import torch

from ict.integrations import verl as ict_verl

_counter = itertools.count()


def _scores_record(part: Any) -> dict[str, Any]:
    stats = part.stats
    return {
        "log_probs": stats.log_probs.detach().cpu(),
        "entropy": stats.entropy.detach().cpu(),
        "renyi2": stats.renyi2.detach().cpu(),
        "js_scores": {key: value.detach().cpu() for key, value in stats.js_scores.items()},
        "response_mask": part.response_mask.cpu(),
        "advantages": part.advantages.cpu(),
        "old_log_probs": part.old_log_probs.cpu(),
        "token_ids": part.token_ids.cpu(),
        "uids": [str(uid) for uid in part.uids],
    }


def _dumping_select_mini_batch(parts: list[Any], actor_config: Any, dp_group: Any = None,
                               step: int = 0) -> list[Any]:
    """``select_mini_batch``, then a record of its inputs and outputs (see the module docstring)."""
    # the seed of the generator this selection draws its ties with (ict_verl._next_selection_seed)
    counter = ict_verl._selections
    index = counter["index"] if counter["step"] == step else 0
    seed = ict_verl.selection_seed(getattr(actor_config.policy_loss, "ict_seed", 0), step, index)
    results = _original(parts, actor_config, dp_group, step)
    directory = os.environ.get("ICT_VERL_DUMP_DIR")
    limit = int(os.environ.get("ICT_VERL_DUMP_LIMIT", "8"))
    index = next(_counter)
    if not directory or index >= limit:
        return results
    policy = actor_config.policy_loss
    options = ict_verl.method_options(policy)
    loss_config = ict_verl.loss_config_of(actor_config, actor_config.loss_agg_mode)
    world = ict_verl._world(dp_group)
    record = {
        "selector": policy.ict_selector,
        "step": int(step),
        "warmup": int(step) < int(options["full_token_warmup_steps"]),
        "world_size": world,
        "rank": torch.distributed.get_rank(dp_group) if world > 1 else 0,
        "generator_seed": seed,
        "clip_range": (loss_config.clip_low, loss_config.clip_high),
        "aggregation": loss_config.aggregation,
        "parts": [_scores_record(part) for part in parts],
        "masks": [result.selection.mask.detach().cpu() for result in results],
        "kl_penalty": [None if result.selection.kl_penalty is None
                       else result.selection.kl_penalty.detach().cpu() for result in results],
        "scales": [float(result.scale) for result in results],
    }
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    torch.save(record, path / f"select_{os.getpid()}_{index:03d}.pt")
    return results


_original = getattr(ict_verl.select_mini_batch, "_ict_original", ict_verl.select_mini_batch)
_dumping_select_mini_batch._ict_original = _original  # type: ignore[attr-defined]
ict_verl.select_mini_batch = _dumping_select_mini_batch

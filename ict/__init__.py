"""ict: RL with verifiable rewards and token-selective policy updates.

The method core, pure tensor functions shared by every backend::

    from ict import token_statistics, select_tokens, policy_loss, group_advantages, pass_at_k

The package is layered (each imports only the ones before it): `ict.core` (math and plain
types), `ict.answers` (answer checking and rewards), `ict.data`, `ict.training`,
`ict.evaluation`, `ict.integrations` (TRL, verl), `ict.analysis`, `ict.experiments`, `ict.cli`.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

from ict.core.loss import PolicyLossConfig, group_advantages, policy_loss
from ict.core.metrics import pass_at_k, pass_at_k_table
from ict.core.selectors import (
    SELECTORS,
    Selection,
    SelectionInputs,
    register_selector,
    required_js_references,
    select,
    select_tokens,
)
from ict.core.stats import SCORE_METRICS, TokenStatistics, score_key, token_statistics

__version__ = "0.1.0"

MOVED_MODULES = {
    "ict.stats": "ict.core.stats", "ict.selectors": "ict.core.selectors",
    "ict.loss": "ict.core.loss", "ict.metrics": "ict.core.metrics",
    "ict.diagnostics": "ict.core.diagnostics", "ict.significance": "ict.core.significance",
    "ict.errors": "ict.core.errors", "ict.problems": "ict.core.problems",
    "ict.options": "ict.core.options", "ict.profiling": "ict.core.profiling",
    "ict.extraction": "ict.answers.extraction", "ict.gold": "ict.answers.gold",
    "ict.verify": "ict.answers.verify", "ict.grading": "ict.answers.grading",
    "ict.rewards": "ict.answers.rewards",
    "ict.benchmarks": "ict.data.benchmarks", "ict.hub": "ict.data.hub",
    "ict.rollout": "ict.models.rollout",
    "ict.forward": "ict.models.forward", "ict.trainer": "ict.training.trainer",
    "ict.checkpoint": "ict.runs.checkpoint", "ict.config": "ict.training.config",
    "ict.reporting": "ict.runs.reporting",
    "ict.evaluate": "ict.evaluation.evaluate", "ict.eval_records": "ict.evaluation.records",
    "ict.eval_results": "ict.evaluation.results",
    "ict.compare": "ict.experiments.compare", "ict.plots": "ict.analysis.plots",
    "ict.inspect_tokens": "ict.analysis.token_view",
    "ict.training.models": "ict.models.loading", "ict.training.rollout": "ict.models.rollout",
    "ict.training.forward": "ict.models.forward", "ict.training.checkpoint": "ict.runs.checkpoint",
    "ict.training.reporting": "ict.runs.reporting",
}
"""Module paths before the moves into subpackages -> where they live now (``ict.data`` is now the
package, which re-exports the training-data names). ``import ict.stats`` still works, with a
DeprecationWarning; the old paths are removed in ict 0.3.0 (:data:`MOVED_MODULES_REMOVED_IN`).
``ict.models`` is now the package of model loading, rollout and forward pass (it was an alias of
``ict.training.models``, now ``ict.models.loading``)."""
MOVED_MODULES_REMOVED_IN = "0.3.0"


class _MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Resolves an old module path to the module object at its new path (one object, two names)."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ANN001
        if fullname not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):  # noqa: ANN001
        import warnings

        warnings.warn(f"{spec.name} moved to {MOVED_MODULES[spec.name]}; the old path is removed in ict "
                      f"{MOVED_MODULES_REMOVED_IN}", DeprecationWarning, stacklevel=2)
        module = importlib.import_module(MOVED_MODULES[spec.name])
        spec.loader_state = module.__spec__
        return module

    def exec_module(self, module) -> None:  # noqa: ANN001
        """Nothing to run; the import system set ``__spec__`` to the old path's: restore it."""
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(_MovedModuleFinder())

__all__ = [
    "SCORE_METRICS",
    "SELECTORS",
    "PolicyLossConfig",
    "Selection",
    "SelectionInputs",
    "TokenStatistics",
    "group_advantages",
    "pass_at_k",
    "pass_at_k_table",
    "policy_loss",
    "register_selector",
    "required_js_references",
    "score_key",
    "select",
    "select_tokens",
    "token_statistics",
]

"""ict: RL with verifiable rewards and token-selective policy updates.

The method core, pure tensor functions shared by every backend::

    from ict import token_statistics, select_tokens, policy_loss, group_advantages, pass_at_k
"""

from ict.loss import PolicyLossConfig, group_advantages, policy_loss
from ict.metrics import pass_at_k, pass_at_k_table
from ict.selectors import (
    SELECTORS,
    SelectionInputs,
    register_selector,
    required_js_references,
    select_tokens,
)
from ict.stats import TokenStatistics, token_statistics

__version__ = "0.1.0"

__all__ = [
    "SELECTORS",
    "PolicyLossConfig",
    "SelectionInputs",
    "TokenStatistics",
    "group_advantages",
    "pass_at_k",
    "pass_at_k_table",
    "policy_loss",
    "register_selector",
    "required_js_references",
    "select_tokens",
    "token_statistics",
]

"""Integrations of ict's token selectors into other RL trainers.

- :mod:`ict.integrations.trl`: a ``trl.GRPOTrainer`` subclass (``pip install 'ict[trl]'``).

Each integration imports its engine lazily, so ``import ict`` never needs TRL or verl.
"""

"""Problems in: training data (reasoning-gym, JSON-lines/parquet files, the hub), the benchmark
registry and the hub check. Imports `ict.core` and `ict.answers` (gold normalisation)."""

from ict.data.rows import read_records
from ict.data.training_data import (
    PromptSampler,
    TrainingData,
    load_training_data,
    reasoning_gym_problems,
    records_to_problems,
)

__all__ = [
    "PromptSampler",
    "TrainingData",
    "load_training_data",
    "read_records",
    "reasoning_gym_problems",
    "records_to_problems",
]

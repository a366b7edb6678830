"""A run's records below the trainer and the evaluation: checkpoints (atomic, resumable) and the
run directory's files and console lines (metrics.jsonl, environment.jsonl, eval.json, progress,
summary, curves). Imports only `ict.core`."""

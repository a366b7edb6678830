"""A run's records below the trainer and the evaluation: checkpoints (atomic, resumable) and the
run directory's files and console lines (metrics.jsonl, environment.jsonl, eval.json, progress,
summary, curves), the rules by which an `ict eval` samples.jsonl record counts (`samples`), and a
run's stop request on Ctrl-C or SIGTERM. Imports only `ict.core`."""

"""Held-out evaluation: sampling n completions per problem, grading, pass@k with intervals, and
the per-problem records and result files. Imports `ict.core`, `ict.answers`, `ict.data` and the
model and rollout parts of `ict.training`."""

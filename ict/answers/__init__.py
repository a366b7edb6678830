"""Answer checking: extraction from completions, gold-answer normalisation, math-verify in a
worker process, grading by problem kind, and the reward registry. Imports `ict.core` only."""

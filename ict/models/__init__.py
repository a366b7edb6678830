"""Models below the trainer and the evaluation: loading (Hugging Face ids, local directories, the
offline default), generation (rollouts with Hugging Face `generate` or vLLM) and the forward pass
that gives the response logits or hidden states. Imports `ict.core`, and `ict.data`'s hub check."""

"""Our trainer: models, rollouts, the forward pass, the run loop, checkpoints, the resolved
configuration and run reports. Wires `ict.core`, `ict.answers` and `ict.data`."""

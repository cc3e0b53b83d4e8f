"""The continuous-batching engine: the step, its scheduler, the forward, sampling and outputs."""

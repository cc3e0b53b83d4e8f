"""OpenAI's audio endpoints on speech workers (no mlx, no audio decoding here: the worker does it)."""

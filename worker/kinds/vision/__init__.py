"""Vision models (mlx-vlm) inside the continuous-batching engine."""

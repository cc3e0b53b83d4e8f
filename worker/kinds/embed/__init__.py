"""The embedding worker kind: sentence encoders through mlx-embeddings, batched."""

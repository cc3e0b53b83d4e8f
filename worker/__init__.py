"""rapid-mlx worker package."""

"""rapid-mlx protocol package."""

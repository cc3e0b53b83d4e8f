"""rapid-mlx gateway package."""

"""rapid-mlx cache package."""

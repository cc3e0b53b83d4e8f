"""Tiny embedded demo model of rapid-mlx: synthetic data, tokenizer build and training."""

"""Benchmarks of rapid-mlx against mlx_lm.server (see bench/README.md)."""

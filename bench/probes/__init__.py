"""Focused measurements of one part of rapid-mlx (see bench/README.md, "Probes")."""

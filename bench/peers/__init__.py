"""Comparisons with other tools: mlx-lm, sentence-transformers, faster-whisper, mlx-vlm, grammar libraries."""

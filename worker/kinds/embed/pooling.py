"""Sentence-transformers poolings over a padded batch, and L2 normalization (in MLX)."""

from __future__ import annotations

import mlx.core as mx


def pool(hidden: mx.array, mask: mx.array, mode: str) -> mx.array:
    """Pool HIDDEN (batch, seq, dim) over the real tokens of MASK (batch, seq) as MODE says."""
    m = mask.astype(hidden.dtype)[..., None]
    if mode == "cls":
        return hidden[:, 0]
    if mode == "lasttoken":  # right padding: the last real token of each row
        last = mask.astype(mx.int32).sum(axis=1) - 1
        return mx.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
    if mode == "max":
        return mx.where(m > 0, hidden, mx.array(-1e9, hidden.dtype)).max(axis=1)
    total = (hidden * m).sum(axis=1)
    count = mx.maximum(m.sum(axis=1), 1e-9)
    if mode == "mean_sqrt_len":
        return total / mx.sqrt(count)
    return total / count  # mean


def normalize(x: mx.array) -> mx.array:
    """Rows scaled to unit L2 norm (as torch.nn.functional.normalize, eps 1e-12)."""
    norm = mx.sqrt((x * x).sum(axis=-1, keepdims=True))
    return x / mx.maximum(norm, 1e-12)


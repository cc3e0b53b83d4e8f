"""The floating dtype a model computes in."""

from __future__ import annotations

from typing import Any

import mlx.core as mx


def model_dtype(model: Any) -> mx.Dtype:
    """The floating dtype of the model's weights (float32 when it has none)."""
    from mlx.utils import tree_flatten

    params: list[tuple[str, mx.array]] = tree_flatten(model.parameters())  # type: ignore[assignment]
    for _, p in params:
        if p.dtype in (mx.float32, mx.float16, mx.bfloat16):
            return p.dtype
    return mx.float32

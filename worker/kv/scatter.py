"""How the KV store and the state pool write rows: MLX's scatter, unless the worker gives its own."""

from __future__ import annotations

from collections.abc import Callable

import mlx.core as mx

# (array (N, C), rows (R,), values (R, C)) -> the written array
PutRows = Callable[[mx.array, mx.array, mx.array], mx.array]


def scatter_rows(dst: mx.array, rows: mx.array, values: mx.array) -> mx.array:
    """DST with ROWS set to VALUES through MLX's scatter (in DST's buffer when nothing else
    holds it when the write is evaluated, else into a copy of all of DST)."""
    dst[rows] = values
    return dst

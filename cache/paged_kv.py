"""Paged KV storage for every layer: full-precision pages, or K8V4 (8-bit keys, 4-bit values).

Pages live in row arrays of shape (slots * kv_heads, ...): slot = page * page_size + offset and
row = slot * kv_heads + head, so one gather by a (B, H, L) row table yields attention's (B, H, L, D)
layout directly, with no transpose copy. K8V4 quantizes group-wise along
head_dim with mx.quantize (affine) and keeps scales and biases in float16, so a token costs
(D + D/2 + 8*D/group) bytes per KV head per layer instead of 4*D in float16.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import mlx.core as mx

KEY_BITS = 8
VALUE_BITS = 4


class QuantizedPages(NamedTuple):
    """Gathered quantized pages of one layer: packed weights, scales, biases (B, H, L, .)."""

    w: mx.array
    scales: mx.array
    biases: mx.array
    bits: int
    group_size: int


@dataclass(frozen=True)
class KVFormat:
    """Shape and encoding of the pages."""

    num_layers: int
    num_kv_heads: int
    head_dim: int
    page_size: int
    dtype: mx.Dtype
    kind: str = "k8v4"  # or "none"
    group_size: int = 32

    def bytes_per_token_per_layer(self) -> int:
        """KV bytes one token costs in one layer."""
        h, d = self.num_kv_heads, self.head_dim
        if self.kind == "none":
            return 2 * h * d * self.dtype.size
        meta = 2 * 2 * (d // self.group_size)  # float16 scale + bias per group
        return h * (d * KEY_BITS // 8 + meta) + h * (d * VALUE_BITS // 8 + meta)

    def bytes_per_page(self) -> int:
        """KV bytes of one page across all layers."""
        return self.bytes_per_token_per_layer() * self.page_size * self.num_layers


def k8v4_supported(head_dim: int, group_size: int) -> bool:
    """True when group-wise quantization fits the head dimension."""
    return head_dim % group_size == 0 and head_dim >= group_size


class PagedKVStore:
    """The page arrays of every layer; writes by slot, gathers by slot table."""

    def __init__(self, fmt: KVFormat, num_pages: int) -> None:
        self.fmt = fmt
        self.num_pages = num_pages
        slots = num_pages * fmt.page_size
        h, d = fmt.num_kv_heads, fmt.head_dim
        self.k: list[list[mx.array]] = []
        self.v: list[list[mx.array]] = []
        for _ in range(fmt.num_layers):
            if fmt.kind == "none":
                self.k.append([mx.zeros((slots * h, d), dtype=fmt.dtype)])
                self.v.append([mx.zeros((slots * h, d), dtype=fmt.dtype)])
            else:
                self.k.append(self._quantized_arrays(slots, KEY_BITS))
                self.v.append(self._quantized_arrays(slots, VALUE_BITS))
        mx.eval(self.k, self.v)

    def _quantized_arrays(self, slots: int, bits: int) -> list[mx.array]:
        h, d, g = self.fmt.num_kv_heads, self.fmt.head_dim, self.fmt.group_size
        return [mx.zeros((slots * h, d * bits // 32), dtype=mx.uint32),
                mx.zeros((slots * h, d // g), dtype=mx.float16),
                mx.zeros((slots * h, d // g), dtype=mx.float16)]

    def write(self, layer: int, rows: mx.array, keys: mx.array, values: mx.array) -> None:
        """Store keys/values (R, D) at ROWS (R,) (one row per token and KV head)."""
        if self.fmt.kind == "none":
            self.k[layer][0][rows] = keys.astype(self.fmt.dtype)
            self.v[layer][0][rows] = values.astype(self.fmt.dtype)
            return
        for arrays, x, bits in ((self.k[layer], keys, KEY_BITS), (self.v[layer], values, VALUE_BITS)):
            w, s, b = mx.quantize(x, group_size=self.fmt.group_size, bits=bits)
            arrays[0][rows] = w
            arrays[1][rows] = s.astype(mx.float16)
            arrays[2][rows] = b.astype(mx.float16)

    def gather(self, layer: int, table: mx.array, dtype: mx.Dtype
               ) -> tuple[mx.array, mx.array] | tuple[QuantizedPages, QuantizedPages]:
        """Keys and values at the rows of TABLE (B, H, L), as (B, H, L, D) or quantized pages."""
        if self.fmt.kind == "none":
            return self.k[layer][0][table], self.v[layer][0][table]
        g = self.fmt.group_size

        def pages(arrays: list[mx.array], bits: int) -> QuantizedPages:
            w, s, b = (a[table] for a in arrays)
            return QuantizedPages(w, s.astype(dtype), b.astype(dtype), bits, g)

        return pages(self.k[layer], KEY_BITS), pages(self.v[layer], VALUE_BITS)

    def arrays(self) -> list[mx.array]:
        """Every page array (to materialize pending writes)."""
        return [a for arrays in (*self.k, *self.v) for a in arrays]

    def nbytes(self) -> int:
        """Bytes held by all page arrays."""
        return sum(a.nbytes for arrays in (*self.k, *self.v) for a in arrays)

"""Attention over paged KV: the cache objects mlx-lm layers write through, and K8V4 attention.

mlx-lm attention layers call ``cache.update_and_fetch(k, v)`` then
``scaled_dot_product_attention(q, k, v, cache=..., mask=...)``. Our per-layer ``PagedView`` writes
the new keys/values into pages and returns the gathered pages; for K8V4 those are quantized
pages, and ``install()`` routes them to ``quantized_attention``, which multiplies the queries
against the 8-bit keys and the 4-bit values with ``mx.quantized_matmul`` (no dequantized copy).
"""

from __future__ import annotations

import sys
from typing import Any

import mlx.core as mx
import numpy as np

from cache.paged_kv import PagedKVStore, QuantizedPages


class PagedBatch:
    """Slot tables of one forward pass: row b is fed lengths[b] tokens at positions starts[b]..

    Rows shorter than the longest are right-padded; their padding tokens write to the scratch
    page and only padding queries can see them.
    """

    def __init__(self, store: PagedKVStore, block_tables: list[list[int]], starts: list[int],
                 lengths: list[int], dtype: mx.Dtype) -> None:
        p = store.fmt.page_size
        n = max(lengths)
        self.store = store
        self.dtype = dtype
        self.n = n
        self.starts = starts
        self.single = len(starts) == 1
        length = max(starts) + n
        width = -(-length // p)
        pages = np.zeros((len(starts), width), dtype=np.int64)  # page 0: scratch, never allocated
        for row, bt in enumerate(block_tables):
            used = min(len(bt), width)
            pages[row, :used] = bt[:used]
        table = (pages[:, :, None] * p + np.arange(p)).reshape(len(starts), -1)[:, :length]
        starts_np = np.array(starts)
        cols = starts_np[:, None] + np.arange(n)
        writes = np.take_along_axis(table, np.minimum(cols, length - 1), axis=1)
        writes[np.arange(n)[None, :] >= np.array(lengths)[:, None]] = 0  # padding -> scratch
        heads = np.arange(store.fmt.num_kv_heads)
        h = len(heads)
        self.write_rows = mx.array((writes.reshape(-1, 1) * h + heads).reshape(-1))
        self.table = mx.array(table[:, None, :] * h + heads[None, :, None])  # (B, H, L) rows
        self.offset: Any = starts[0] if self.single else mx.array(starts)
        q_pos = mx.array(starts)[:, None, None, None] + mx.arange(n)[None, None, :, None]
        self.k_pos = mx.arange(length)[None, None, None, :]
        self.q_pos = q_pos
        self.mask = self.k_pos <= q_pos  # padding sits beyond each row's last query

    def views(self) -> list[PagedView]:
        """One cache object per layer for the model call."""
        return [PagedView(self, layer) for layer in range(self.store.fmt.num_layers)]


class PagedView:
    """One layer's cache as an mlx-lm attention layer sees it."""

    def __init__(self, batch: PagedBatch, layer: int) -> None:
        self.batch = batch
        self.layer = layer
        self.offset = batch.offset

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Any, Any]:
        """Write the new keys/values (B, H, N, D) into pages; return every row's gathered KV."""
        b = self.batch
        bsz, heads, n, dim = keys.shape
        flat_k = keys.transpose(0, 2, 1, 3).reshape(bsz * n * heads, dim)
        flat_v = values.transpose(0, 2, 1, 3).reshape(bsz * n * heads, values.shape[-1])
        b.store.write(self.layer, b.write_rows, flat_k, flat_v)
        return b.store.gather(self.layer, b.table, b.dtype)

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None) -> Any:
        """Causal mask over each row's own positions (optionally windowed)."""
        b = self.batch
        quantized = b.store.fmt.kind != "none"
        if window_size is not None:
            return b.mask & (b.k_pos > b.q_pos - window_size)
        if b.single and not quantized and not return_array:
            return None if n == 1 else "causal"
        return b.mask

    @property
    def state(self) -> tuple[()]:
        """Paged caches have no per-request state for mlx-lm to save."""
        return ()

    def is_trimmable(self) -> bool:
        """mlx-lm never trims our caches."""
        return False


def quantized_attention(queries: mx.array, keys: QuantizedPages, values: QuantizedPages,
                        scale: float, mask: Any) -> mx.array:
    """Softmax attention of queries (B, Hq, N, D) over quantized keys and values.

    Decode (one query per row) multiplies against the packed pages with mx.quantized_matmul.
    Prompt chunks dequantize the gathered pages and use the fused attention kernel: with many
    queries per row that is about 4x faster on CPU than quantized matmuls.
    """
    bsz, n_q, n, dim = queries.shape
    if n > 1:
        k = mx.dequantize(keys.w, keys.scales, keys.biases, group_size=keys.group_size,
                          bits=keys.bits)
        v = mx.dequantize(values.w, values.scales, values.biases, group_size=values.group_size,
                          bits=values.bits)
        return mx.fast.scaled_dot_product_attention(queries, k, v, scale=scale, mask=mask)
    n_kv = keys.w.shape[1]
    rep = n_q // n_kv
    q = (queries * scale).reshape(bsz, n_kv, rep, n, dim)
    kw, ks, kb = (x[:, :, None] for x in (keys.w, keys.scales, keys.biases))
    scores = mx.quantized_matmul(q, kw, ks, kb, transpose=True, group_size=keys.group_size,
                                 bits=keys.bits)
    if isinstance(mask, mx.array):
        scores = mx.where(mask[:, :, None], scores, mx.finfo(scores.dtype).min)
    elif mask == "causal":
        length = scores.shape[-1]
        causal = mx.arange(length)[None, :] <= (mx.arange(n) + length - n)[:, None]
        scores = mx.where(causal, scores, mx.finfo(scores.dtype).min)
    probs = mx.softmax(scores, axis=-1, precise=True)
    vw, vs, vb = (x[:, :, None] for x in (values.w, values.scales, values.biases))
    out = mx.quantized_matmul(probs, vw, vs, vb, transpose=False, group_size=values.group_size,
                              bits=values.bits)
    return out.reshape(bsz, n_q, n, -1)


_installed: dict[str, Any] = {}


def install() -> None:
    """Route quantized pages to quantized_attention in every loaded mlx-lm model module."""
    import mlx_lm.models.base as base

    original = _installed.setdefault("original", base.scaled_dot_product_attention)

    def sdpa(queries: mx.array, keys: Any, values: Any, cache: Any, scale: float, mask: Any,
             sinks: Any = None) -> mx.array:
        if isinstance(keys, QuantizedPages):
            if sinks is not None:
                raise ValueError("K8V4 pages do not support attention sinks; use --kv-cache-turboquant none")
            return quantized_attention(queries, keys, values, scale, mask)
        result: mx.array = original(queries, keys, values, cache=cache, scale=scale, mask=mask,
                                    sinks=sinks)
        return result

    for name, module in list(sys.modules.items()):
        if name.startswith("mlx_lm.models.") and getattr(
                module, "scaled_dot_product_attention", None) is original:
            module.scaled_dot_product_attention = sdpa  # type: ignore[attr-defined]

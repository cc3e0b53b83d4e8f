"""K8V4 prefill chunks that start their rows: pages read from the floats the chunk quantized.

A prefill chunk from position 0 (no cached prefix) reads each query's older pages quantized,
which used to mean writing them, gathering them back from the pool and dequantizing. The floats
are those of dequantizing the quantize outputs the chunk has just computed, in the order it
wrote them, so attention reads them from there (no gathers), and each query's own page straight
from the centered keys (the window holds only new keys: no tail gather or select). The same
floats fill the working set for the chunk's full pages (worker/kv/working.py), so the rows'
first decode step has nothing to load. Later readers (a prefix hit, a decode step) still see the
same quantized pages, so cold and prefix-hit answers stay identical.
"""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx
import numpy as np

from worker.kv.paged_kv import PagedKVStore


def starts_rows(starts: np.ndarray, bucket: bool) -> bool:
    """True for a chunk whose rows all start at position 0 (and not a compiled step's batch)."""
    return not bucket and not starts.any()


class Fill(NamedTuple):
    """Which rows of a chunk's dequantized keys/values (B*H*n, D) go to which working-set rows."""

    src: mx.array  # rows of the chunk's output, head-major like attention's (B, H, n, D)
    dst: mx.array  # rows of the store's tail arrays (working-set slots)


def plan_fill(store: PagedKVStore, block_tables: list[list[int]], lengths: list[int], n: int
              ) -> Fill | None:
    """Working-set slots for the full pages a fresh chunk writes (None: no set, or no room).

    Row b of the chunk (n positions, right-padded) fills its first lengths[b] // page_size pages.
    Call after the batch forgot the copies of the pages it writes.
    """
    work = store.work
    p, h = store.fmt.page_size, store.fmt.num_kv_heads
    full = [(b, page, j) for b, bt in enumerate(block_tables) for j, page in
            enumerate(bt[: lengths[b] // p])]
    if not work.slots or not full or len(full) > work.slots:
        return None
    rows, pages, cols = (np.array(x, dtype=np.int64) for x in zip(*full, strict=True))
    if work.acquire(np.unique(pages)) is None:
        return None
    at, heads = np.arange(p)[:, None], np.arange(h)[None, :]  # a page's rows: slot-major
    src = rows[:, None, None] * h * n + heads * n + cols[:, None, None] * p + at
    dst = (store.tail_pages + work.slot_of[pages])[:, None, None] * p * h + at * h + heads
    return Fill(mx.array(src.reshape(-1)), mx.array(dst.reshape(-1)))


def fill(store: PagedKVStore, layer: int, plan: Fill | None, keys: mx.array, values: mx.array
         ) -> None:
    """Write a fresh chunk's dequantized full pages (KEYS/VALUES (B, H, n, D)) to the working set."""
    if plan is not None:
        d = keys.shape[-1]
        store.write_tail(layer, plan.dst, keys.reshape(-1, d)[plan.src],
                         values.reshape(-1, d)[plan.src])


def head_major(rows: np.ndarray, heads: int) -> mx.array:
    """Pool rows of slots ROWS (B, n) for every KV head, in attention's order (B, H, n)."""
    return mx.array((rows[:, None, :] * heads + np.arange(heads)[None, :, None]).reshape(-1))

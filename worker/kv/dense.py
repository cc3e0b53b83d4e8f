"""Decode steps read keys/values from a dense per-batch cache instead of gathering every page.

A decode batch's attention used to gather each row's whole KV from the page pool every step,
per layer: ``k[table]`` with a (B, H, L) row table (full-precision pages), or the K8V4 working
set's float rows. On this CPU that gather cost a few ms per step at 32 rows on stories260K.
Here a decode batch (plain or compiled; ``Forward`` asks for it on small models) keeps, per
layer, (B * H * cap, D) arrays holding exactly what that gather would return for positions
0..cap of every row (cap grows by ``CHUNK``, by padding, and does not shrink while rows decode).
Each step writes the new token's keys/values there (one scatter per layer, beside the usual page
write, so pages, the radix cache and preemption are unchanged) and attention reads a
(B, H, L, D) slice of it: the same shapes and the same floats the gather gave, so the same bits.

The cache belongs to the ``Forward`` whose decode steps read it (one per store: the target's,
a draft model's); every batch writing that store's pages is handed it. The engine frees its
caches' arrays when no row runs; the worker status shows the bytes they hold. They come out of
the KV memory budget: at most what the store's pool leaves of it (``spare_bytes``, and at most
``BUDGET``); a step whose cache would not fit gathers pages.

Rows are refilled from the pages (the old gather, for those rows only) when they are new to the
batch, and when a page they read was written by another batch (prefill, verify, a step not
reading the cache: any ``PagedBatch`` that is not such a step marks the pages it writes). For
K8V4, a row whose last page was just completed re-reads that page only (it now reads its
dequantized float copy, not the full-precision tail). Rows that stay keep their place (a
membership change moves them with one gather of whole rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import NamedTuple

import mlx.core as mx
import numpy as np

from worker.kv.paged_kv import PagedKVStore
from worker.kv.rows import copy_rows

CHUNK = 256  # key positions the cache grows by (few shapes)
# only models up to this size use it: it paid on stories260K (1 MB, dispatch-bound: 0.76x /
# 0.89x the CPU per token at 8 / 32 rows joining and leaving) and, once page writes
# were in place and the products per row, on the Qwen3 bench model (116 MB, K8V4:
# served 1.15x / 1.23x the tokens/s at 8 / 32 streams; before those it measured 0.98x / 1.07x
# the CPU). Larger models were not measured (bench/README.md)
MAX_WEIGHT_BYTES = 256 << 20
# decode batches from this many rows use it: at 1-2 rows the page gather is cheap and the cache's
# read-back and scatter cost more (stories260K, dense / gather wall per step, medians of 11
# rounds: 1.16 at 1 row, 1.11 at 2, 0.90 at 4, 0.92 at 8; dense and gather engines in turns)
MIN_ROWS = 4
# bytes of dense keys and values over all layers; above it, or above the store's spare bytes
# (what its pool leaves of --kv-cache-memory), steps gather pages
BUDGET = 1 << 30
ENABLED = True  # tests compare against the gather with this off


class DensePlan(NamedTuple):
    """What one decode step does to the dense cache of every layer."""

    rows: int  # B
    cap: int  # positions per dense row
    length: int  # L: key positions attention reads
    fresh: bool  # start from zeros (new shape) instead of the last step's arrays
    old_rows: int  # rows of the last step's arrays
    old_cap: int  # their positions per row (smaller: padded to cap)
    perm: mx.array | None  # (B,) last step's dense row of each row (rows that moved)
    refresh: tuple[mx.array, mx.array] | None  # (source rows, dense rows) refilled from pages
    write: mx.array  # (B * H,) dense rows of the new token, (b, h) order


class DenseCache:
    """One store's dense decode cache and what it holds."""

    def __init__(self, store: PagedKVStore) -> None:
        self.fmt = store.fmt
        self.quantized = store.quantized
        self.heads = store.fmt.num_kv_heads
        self.put_rows = store.put_rows  # row writes: the store's (in place on the CPU)
        self.k: list[mx.array | None] = [None] * store.fmt.num_layers
        self.v: list[mx.array | None] = [None] * store.fmt.num_layers
        self.ready: list[DensePlan | None] = [None] * store.fmt.num_layers  # plan applied last
        self.rows, self.cap = 0, 0
        self.pages = np.zeros((0, 0), dtype=np.int64)  # (rows, W) page ids of each dense row
        self.lens = np.zeros(0, dtype=np.int64)  # positions held per dense row
        self.dirty = np.zeros(store.num_pages, dtype=bool)  # written by other batches since
        self.applied = 0  # layers the last plan was applied to
        self.plan: DensePlan | None = None
        self.nbytes = 0  # of the dense keys and values (all layers) the last plan holds
        self.peak_bytes = 0  # the most they held
        self.refilled = 0  # rows refilled from pages so far (stats, tests)
        self.pages_refreshed = 0  # K8V4: filled pages re-read from their float copies
        self.steps = 0
        self.budget = min(BUDGET, store.spare_bytes)  # the most its arrays may hold

    def reset(self) -> None:
        """Forget everything and free the arrays (the next step refills every row)."""
        if not self.rows:  # holds nothing (no plan, no arrays)
            return
        self.rows, self.cap, self.nbytes = 0, 0, 0
        self.k = [None] * len(self.k)
        self.v = [None] * len(self.v)
        self.ready = [None] * len(self.v)
        self.plan = None

    def written(self, slots: np.ndarray) -> None:
        """Pages of pool SLOTS were written by a batch that is not a dense decode step."""
        if self.rows:
            self.dirty[(slots // self.fmt.page_size).reshape(-1)] = True


def pays_for(model: object) -> bool:
    """True when MODEL's decode steps should use the dense cache (small, dispatch-bound)."""
    from worker.cpu.blas import weight_bytes

    return weight_bytes(model) <= MAX_WEIGHT_BYTES


def plan_dense(cache: DenseCache, pages: np.ndarray, starts: np.ndarray, length: int,
               source: Callable[[], np.ndarray]) -> DensePlan | None:
    """Plan a decode step of rows at positions STARTS over PAGES (B, W) reading LENGTH keys.

    SOURCE gives the (B, H, L) rows of the arrays the gather reads (pool or K8V4 tail arrays).
    None when the step gathers pages as before (the cache is off, the batch has fewer than
    MIN_ROWS rows, or the cache would be too large).
    """
    fmt = cache.fmt
    bsz, h, p = len(starts), fmt.num_kv_heads, fmt.page_size
    if not ENABLED or bsz < MIN_ROWS:
        cache.reset()
        return None
    # the cap only grows while rows decode: a long row leaving must not make the next one
    # rebuild every row
    cap = max(-(-length // CHUNK) * CHUNK, cache.cap if cache.rows else 0)
    size = fmt.num_layers * bsz * h * cap * (fmt.head_dim + fmt.v_dim) * fmt.dtype.size
    if size > cache.budget:
        cache.reset()
        return None
    if cache.plan is not None and cache.applied != fmt.num_layers:  # a step that did not run
        cache.reset()
    fresh = cache.rows == 0
    old = np.full(bsz, -1, dtype=np.int64) if fresh else _match(cache, pages, starts, p)
    refill = np.flatnonzero(old < 0)
    # K8V4: a kept row whose last page just filled reads that page's float copy now
    page = np.flatnonzero((old >= 0) & (starts % p == 0)) if cache.quantized else refill[:0]
    perm = None
    if not fresh and (bsz != cache.rows or not np.array_equal(old[old >= 0],
                                                              np.flatnonzero(old >= 0))):
        perm = mx.array(np.maximum(old, 0))
    refresh = None
    if len(refill) or len(page):
        table = source()  # (B, H, L)
        src, dst = [], []
        for rows, lo in ((refill, np.zeros(len(refill), dtype=np.int64)), (page, starts[page] - p)):
            if len(rows):
                pos = lo[:, None] + np.arange(table.shape[-1] if rows is refill else p)
                src.append(np.take_along_axis(table[rows], pos[:, None, :], axis=2).reshape(-1))
                dst.append(((rows[:, None, None] * h + np.arange(h)[None, :, None]) * cap
                            + pos[:, None, :]).reshape(-1))
        refresh = (mx.array(np.concatenate(src)), mx.array(np.concatenate(dst)))
        cache.refilled += len(refill)
        cache.pages_refreshed += len(page)
    heads = np.arange(h)
    write = ((np.arange(bsz)[:, None] * h + heads[None, :]) * cap + starts[:, None]).reshape(-1)
    plan = DensePlan(bsz, cap, length, fresh, cache.rows, cache.cap, perm, refresh,
                     mx.array(write))
    cache.rows, cache.cap, cache.plan, cache.applied = bsz, cap, plan, 0
    cache.nbytes, cache.peak_bytes = size, max(cache.peak_bytes, size)
    cache.pages = pages.copy()
    cache.lens = starts + 1
    cache.dirty[:] = False
    cache.steps += 1
    return plan


def _match(cache: DenseCache, pages: np.ndarray, starts: np.ndarray, p: int) -> np.ndarray:
    """Each row's dense row in the last step (-1: refill it from the pages)."""
    bsz = len(starts)
    old = np.full(bsz, -1, dtype=np.int64)
    width = cache.pages.shape[1]
    if bsz == cache.rows and np.array_equal(starts, cache.lens) and pages.shape[1] >= width:
        keep = _unchanged(cache, pages[:, :width], starts, p)
        old[keep] = np.flatnonzero(keep)
        return old
    last = {}
    for d in range(cache.rows):  # d: a dense row
        if cache.lens[d] > 0:
            last[int(cache.pages[d, (cache.lens[d] - 1) // p])] = d
    for b in range(bsz):
        s = int(starts[b])
        if s == 0:
            continue
        row = last.get(int(pages[b, (s - 1) // p]))
        used = (s - 1) // p + 1
        if row is None or cache.lens[row] != s or used > pages.shape[1] or used > width:
            continue
        if np.array_equal(cache.pages[row, :used], pages[b, :used]) and not cache.dirty[
                pages[b, :used]].any():
            old[b] = row
    return old


def _unchanged(cache: DenseCache, pages: np.ndarray, starts: np.ndarray, p: int) -> np.ndarray:
    """Mask of rows whose pages up to their last position are the dense row's, none dirty."""
    used = np.arange(pages.shape[1])[None, :] < ((starts - 1) // p + 1)[:, None]
    same = ~np.any(used & (pages != cache.pages), axis=1)
    dirty = np.any(used & cache.dirty[pages], axis=1)
    keep: np.ndarray = same & ~dirty & (starts > 0)
    return keep


def apply_dense(cache: DenseCache, layer: int, plan: DensePlan, source_k: mx.array,
                source_v: mx.array, new_k: mx.array | None, new_v: mx.array | None,
                rows: mx.array | None = None) -> tuple[mx.array, mx.array]:
    """Update LAYER's dense arrays for this step; return keys/values (B, H, L, D) to attend.

    SOURCE_K/V are the arrays the gather reads (refills read them), NEW_K/V the step's
    keys/values (B * H, D) as stored there, or (None) SOURCE's rows ROWS (B * H,) hold them.
    """
    h = cache.heads
    out = []
    prepare = cache.ready[layer] is not plan  # a batch run twice (tests) moves rows once
    cache.ready[layer] = plan
    for arrays, src, new in ((cache.k, source_k, new_k), (cache.v, source_v, new_v)):
        a = _prepared(cache, arrays[layer], plan, src) if prepare else arrays[layer]
        assert a is not None
        if new is None:
            assert rows is not None
            a = arrays[layer] = copy_rows(cache.put_rows, a, plan.write, src, rows)
        else:
            a = arrays[layer] = cache.put_rows(a, plan.write, new.astype(src.dtype))
        out.append(a.reshape(plan.rows, h, plan.cap, -1)[:, :, : plan.length])
    cache.applied += 1
    return out[0], out[1]


def prepare_dense(cache: DenseCache, plan: DensePlan, sources: list[tuple[mx.array, mx.array]]
                  ) -> DensePlan:
    """Move and refill every layer's rows now (before a compiled step); the plan left to apply.

    SOURCES: each layer's (keys, values) arrays the gather reads.
    """
    left = plan._replace(fresh=False, perm=None, refresh=None, old_rows=plan.rows,
                         old_cap=plan.cap)
    for layer, (src_k, src_v) in enumerate(sources):
        if cache.ready[layer] is not plan:
            cache.k[layer] = _prepared(cache, cache.k[layer], plan, src_k)
            cache.v[layer] = _prepared(cache, cache.v[layer], plan, src_v)
        cache.ready[layer] = left
    return left


def _prepared(cache: DenseCache, a: mx.array | None, plan: DensePlan, src: mx.array
              ) -> mx.array:
    """One dense array with the plan's rows moved and refilled (not yet this step's token)."""
    d, heads = src.shape[-1], cache.heads
    if plan.fresh or a is None:
        return _refilled(cache, mx.zeros((plan.rows * heads * plan.cap, d), dtype=src.dtype),
                         plan, src)
    if plan.old_cap != plan.cap:
        a = mx.pad(a.reshape(plan.old_rows, heads, plan.old_cap, d),
                   [(0, 0), (0, 0), (0, plan.cap - plan.old_cap), (0, 0)]).reshape(-1, d)
    if plan.perm is not None:
        a = a.reshape(plan.old_rows, -1)[plan.perm].reshape(-1, d)
    return _refilled(cache, a, plan, src)


def _refilled(cache: DenseCache, a: mx.array, plan: DensePlan, src: mx.array) -> mx.array:
    """A with the plan's refilled positions read from SRC (one node with the native write)."""
    if plan.refresh is not None:
        a = copy_rows(cache.put_rows, a, plan.refresh[1], src, plan.refresh[0])
    return a


def dense_status(caches: Iterable[DenseCache | None]) -> dict[str, int]:
    """The dense decode caches in the worker status (None: a forward without one): bytes they
    hold now, at most so far and at most allowed (what the KV pages leave of their budget),
    decode steps that read them."""
    held = [c for c in caches if c is not None]
    return {"kv_dense_cache_bytes": sum(c.nbytes for c in held),
            "kv_dense_cache_peak_bytes": sum(c.peak_bytes for c in held),
            "kv_dense_cache_budget_bytes": sum(c.budget for c in held),
            "kv_dense_cache_steps": sum(c.steps for c in held)}

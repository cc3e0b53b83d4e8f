"""Slot tables of one forward pass over paged KV, and the per-layer cache objects mlx-lm calls.

mlx-lm attention layers call ``cache.update_and_fetch(k, v)`` then
``scaled_dot_product_attention(q, k, v, cache=..., mask=...)``. ``PagedView`` writes the new
keys/values into pages and returns either the gathered full-precision pages (the plain path) or
a ``LayerKV`` handle that ``worker.engine.attention`` turns into paged attention: K8V4 pages, the
full-precision tail window, and cascade attention over a prefix every row shares.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import mlx.core as mx
import numpy as np

from worker.kv import fresh as kv_fresh
from worker.kv.dense import DenseCache, DensePlan, apply_dense, plan_dense
from worker.kv.paged_kv import PagedKVStore
from worker.kv.state_view import StateRows
from worker.kv.working import DecodePlan, flush_tail, plan_decode, plan_flush, write_decode

CASCADE_MIN_PAGES = 2  # shared pages below this are attended per row


class PagedBatch:
    """Row b is fed lengths[b] tokens at positions starts[b]..; shorter rows are right-padded.

    Padding tokens write to the scratch page (page 0) and only padding queries can see them.
    With ``tails`` (K8V4), row b also keeps its current page in full precision in tail page
    tails[b]. With ``cascade``, the leading pages every row shares (all before any row's first
    query) are attended once for all rows. With ``bucket`` (a compiled decode step), the keys
    are padded to a bucket of pages, masked, so that steps repeat shapes, and every value the
    model reads is an array (no Python ints). The K8V4 window keeps its width: padding it would
    change the float rounding of its scores (BLAS computes the last N % 4 columns apart).
    ``dense`` is the store's dense decode cache (worker/kv/dense.py; ``Forward``'s, on small
    models): a decode batch attends it, compiled or not, unless ``gather`` (it gathers pages as
    before); a batch that does not attend it marks there the pages it writes.
    A store with a windowed layer group (worker/kv/window_group.py) needs ``window_tables``,
    that group's block tables: its layers read ``window``, a batch of the same rows over them.
    """

    def __init__(self, store: PagedKVStore, block_tables: list[list[int]], starts: list[int],
                 lengths: list[int], dtype: mx.Dtype, tails: list[int] | None = None,
                 cascade: bool = False, bucket: bool = False, dense: DenseCache | None = None,
                 gather: bool = False, window_tables: list[list[int]] | None = None,
                 windowed: bool = False) -> None:
        p = store.fmt.page_size
        heads = np.arange(store.fmt.num_kv_heads)
        h = len(heads)
        n = max(lengths)
        self.store, self.dtype, self.n, self.lengths = store, dtype, n, lengths
        self.states: StateRows | None = None  # a hybrid model's recurrent rows (set by its caller)
        self.single = len(starts) == 1 and not bucket
        self.bucket = bucket  # a compiled step's batch: nothing may be evaluated while tracing
        self.quantized = store.quantized
        length = max(starts) + n
        if bucket:
            length = key_bucket(-(-length // p)) * p
        width = -(-length // p)
        pages = np.zeros((len(starts), width), dtype=np.int64)  # page 0: scratch, never allocated
        for row, bt in enumerate(block_tables):
            used = min(len(bt), width)
            pages[row, :used] = bt[:used]
        table = (pages[:, :, None] * p + np.arange(p)).reshape(len(starts), -1)[:, :length]
        starts_np, lengths_np = np.array(starts), np.array(lengths)
        cols = starts_np[:, None] + np.arange(n)
        writes = np.take_along_axis(table, np.minimum(cols, length - 1), axis=1)
        writes[np.arange(n)[None, :] >= lengths_np[:, None]] = 0  # padding -> scratch
        self.write_rows = mx.array((writes.reshape(-1, 1) * h + heads).reshape(-1))
        self._table = table  # (B, L) pool slots (tables below; K8V4 decode reads its plan's)
        self.offset: Any = starts[0] if self.single else mx.array(starts)
        # built in numpy, so that they enter the step as data, not as graph nodes to evaluate
        q_pos = cols.astype(np.int32)[:, None, :, None]
        k_pos = np.arange(length, dtype=np.int32)[None, None, None, :]
        self._q_pos = q_pos
        self.q_pos, self.k_pos = mx.array(q_pos), mx.array(k_pos)
        self.mask = mx.array(k_pos <= q_pos)  # padding sits beyond each row's last query
        # keys and values of different widths (MLA) reach the model as arrays: no cascade
        cascade = cascade and not store.fmt.split
        self.shared = _shared_pages(pages, min(starts) // p) * p if cascade else 0
        self.tails = tails if self.quantized and tails is not None else None
        self.work: DecodePlan | None = None  # K8V4 decode batches (worker/kv/working.py)
        self.flush: tuple[mx.array, mx.array] | None = None  # K8V4: deferred page writes
        self.decode_tail = False
        self.fresh = False  # K8V4 chunk starting its rows: reads its own writes (kv_fresh.py)
        self.fill: kv_fresh.Fill | None = None  # and fills the working set with its full pages
        if self.tails is not None:
            tails_np = np.array(self.tails)
            # decode: each row's own page is all in its tail page once this token is written there;
            # a verify batch (n > 1) qualifies while every row's positions stay short of its
            # page's last slot (so it completes no page: a rollback never meets a requantized page)
            self.decode_tail = len(set(self.tails)) == len(self.tails) and (
                int(tails_np.min()) > 0) and (n == 1 or int((starts_np % p).max()) + n <= p - 1)
            self.work = plan_decode(store, pages, writes, starts_np, tails_np, self.decode_tail,
                                    self.shared, self.write_rows, length)
            if self.work is None:
                self.flush = plan_flush(store, pages, starts_np, tails_np)
                self.fresh = kv_fresh.starts_rows(starts_np, bucket)
                if self.fresh:
                    self.fresh_rows = kv_fresh.head_major(writes, h)
                    if dtype == store.fmt.dtype:  # the floats a working-set load would give
                        self.fill = kv_fresh.plan_fill(store, block_tables, lengths, n)
            if self.work is None or not self.work.dense:  # the window: quantized reads only
                self._plan_tail(p, h, heads, starts_np, lengths_np, tails_np)
        # plain decode steps attend a dense per-batch copy of the KV (worker/kv/dense.py)
        self.dense_cache = dense
        self.dense: DensePlan | None = None
        if dense is not None and n == 1 and not gather and (not self.quantized or (
                self.work is not None and self.work.dense)):
            self.dense = plan_dense(dense, pages, starts_np, length, self._dense_source)
        if dense is not None and self.dense is None:
            dense.written(writes)
        self.window: PagedBatch | None = None
        if store.window_pages and not windowed:  # WINDOWED: this is the group's batch
            assert window_tables is not None, "a windowed layer group needs its block tables"
            assert dense is None and not self.quantized, "windowed groups: full precision, gather"
            self.window = PagedBatch(store, window_tables, starts, lengths, dtype,
                                     cascade=cascade, bucket=bucket, gather=gather, windowed=True)

    def _dense_source(self) -> np.ndarray:
        """(B, H, L) rows of what this decode batch's gather would read (pool or tail arrays)."""
        if not self.quantized:
            return self._rows
        assert self.work is not None and self.work.rows is not None  # a dense plan has them
        return self.work.rows

    def attend_dense(self, layer: int, source_k: mx.array, source_v: mx.array,
                     new_k: mx.array | None = None, new_v: mx.array | None = None,
                     rows: mx.array | None = None) -> tuple[mx.array, mx.array]:
        """LAYER's keys/values (B, H, L, D) from the dense decode cache, this step's token in:
        NEW_K/V, or (None) the SOURCE rows ROWS (``kv_dense.apply_dense``)."""
        assert self.dense is not None and self.dense_cache is not None
        return apply_dense(self.dense_cache, layer, self.dense, source_k, source_v, new_k, new_v,
                           rows)

    def _plan_tail(self, p: int, h: int, heads: np.ndarray, starts: np.ndarray,
                   lengths: np.ndarray, tails: np.ndarray) -> None:
        """Tables of the full-precision window: each row's current page up to its last query."""
        n = self.n
        base = starts // p * p
        off = starts - base
        w = np.arange(int(off.max()) + n)
        if not self.fresh:  # a fresh chunk's window is its new keys in order (update_and_fetch)
            from_tail = w[None, :] < off[:, None]  # (B, W): written by earlier steps
            tail_rows = np.where(from_tail, tails[:, None] * p + w[None, :], 0)
            new_idx = np.clip(w[None, :] - off[:, None], 0, n - 1) + np.arange(len(starts))[:, None] * n
            self.from_tail = mx.array(from_tail[:, None, :, None])
            self.tail_rows = mx.array(tail_rows[:, None, :] * h + heads[None, :, None])
            self.new_rows = mx.array(new_idx[:, None, :] * h + heads[None, :, None])
        window_pos = (base[:, None] + w[None, :])[:, None, None, :]  # (B,1,1,W)
        self.window_pos = mx.array(window_pos)
        self.window_mask = mx.array((window_pos <= self._q_pos)
                                    & (window_pos // p == self._q_pos // p))
        pos = starts[:, None] + np.arange(n)
        keep = (np.arange(n)[None, :] < lengths[:, None]) & (
            pos >= (starts + lengths)[:, None] // p * p)
        slots = np.where(keep, tails[:, None] * p + pos % p, 0)
        self.tail_write_rows = kv_fresh.head_major(slots, h) if self.fresh else mx.array(
            (slots.reshape(-1, 1) * h + heads).reshape(-1))

    @cached_property
    def _rows(self) -> np.ndarray:
        """Pool rows of every row's positions (B, H, L)."""
        heads = np.arange(self.store.fmt.num_kv_heads)
        return self._table[:, None, :] * len(heads) + heads[None, :, None]

    @cached_property
    def older(self) -> mx.array:
        """K8V4: keys a query reads quantized (pages before its own)."""
        p = self.store.fmt.page_size
        return self.k_pos // p < self.q_pos // p

    @cached_property
    def table(self) -> mx.array:
        """Pool rows of every row's positions 0..L (B, H, L)."""
        return mx.array(self._rows)

    @cached_property
    def shared_table(self) -> mx.array:
        """Pool rows of the shared prefix (1, H, S)."""
        return mx.array(self._rows[:1, :, : self.shared])

    @cached_property
    def rest_table(self) -> mx.array:
        """Pool rows after the shared prefix (B, H, L - S)."""
        return mx.array(self._rows[:, :, self.shared :])

    def views(self) -> list[Any]:
        """One cache object per model layer for the model call: attention layers' pages, and a
        hybrid model's recurrent layers' states (``states``) where those layers sit."""
        attention = self.store.fmt.num_layers
        pool = self.store.states
        if self.window is not None:
            windowed = self.store.window_layers
            return [PagedView(self.window if layer in windowed else self, layer)
                    for layer in range(attention)]
        if pool is None:
            return [PagedView(self, layer) for layer in range(attention)]
        assert self.states is not None, "a hybrid model's batch needs its state rows"
        recurrent = pool.layout.layers
        views: list[Any] = []
        pages = 0
        for i in range(attention + len(recurrent)):
            if i in recurrent:
                views.append(self.states.views(recurrent.index(i)))
            else:
                views.append(PagedView(self, pages))
                pages += 1
        return views


def key_bucket(pages: int) -> int:
    """Key pages of a compiled decode step: a power of two up to 8, then multiples of 8."""
    if pages <= 8:
        return 1 << (pages - 1).bit_length()
    return -(-pages // 8) * 8


def _shared_pages(pages: np.ndarray, limit: int) -> int:
    """Leading page columns identical in every row (at most LIMIT), if enough to be worth it."""
    if pages.shape[0] < 2:
        return 0
    same = np.all(pages == pages[:1], axis=0) & (pages[0] != 0)
    count = int(np.argmin(same)) if not same.all() else len(same)
    count = min(count, limit)
    return count if count >= CASCADE_MIN_PAGES else 0


@dataclass
class LayerKV:
    """What attention needs of one layer: the batch, the layer, the full-precision window."""

    batch: PagedBatch
    layer: int
    window_k: mx.array | None = None
    window_v: mx.array | None = None
    dense: bool = False  # K8V4 decode reading float page copies (batch.work's tables)
    pages: tuple[mx.array, mx.array] | None = None  # a fresh chunk's pages as floats (B, H, n, D)
    keys: mx.array | None = None  # (B, H, L, D) from the dense decode cache (batch.dense)
    values: mx.array | None = None

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(rows, KV heads, key positions, head dim): what mlx-vlm layers read of keys."""
        fmt = self.batch.store.fmt
        return (self.batch.q_pos.shape[0], fmt.num_kv_heads, self.batch.k_pos.shape[-1],
                fmt.head_dim)


class PagedView:
    """One layer's cache as an mlx-lm attention layer sees it."""

    def __init__(self, batch: PagedBatch, layer: int) -> None:
        self.batch = batch
        self.layer = layer
        self.offset = batch.offset

    def update_and_fetch(self, keys: mx.array, values: mx.array) -> tuple[Any, Any]:
        """Write the new keys/values (B, H, N, D) into pages; return what attention reads."""
        b = self.batch
        if b.fresh:
            return self._fresh(keys, values)
        bsz, heads, n, dim = keys.shape
        if n == 1:  # (B, H, 1, D) rows are already in (B, 1, H, D) order: no Transpose node
            flat_k = keys.reshape(bsz * heads, dim)
            flat_v = values.reshape(bsz * heads, values.shape[-1])
        else:
            flat_k = keys.transpose(0, 2, 1, 3).reshape(bsz * n * heads, dim)
            flat_v = values.transpose(0, 2, 1, 3).reshape(bsz * n * heads, values.shape[-1])
        if b.work is not None:  # a decode step's (B, H, 1, D) are centered as they are
            held, window = write_decode(
                b.store, self.layer, b.work, keys if n == 1 else flat_k,
                values if n == 1 else flat_v, b.dtype)
            if b.dense is not None:  # the new rows as the tail holds them (no gather)
                k_tail, v_tail = b.store.k_tail[self.layer], b.store.v_tail[self.layer]
                # held None: written centered in one node each, copied from the tail's rows
                new_k, new_v = held if held is not None else (None, None)
                dk, dv = b.attend_dense(self.layer, k_tail, v_tail, new_k, new_v,
                                        rows=b.work.tail_rows)
                kv = LayerKV(b, self.layer, dense=True, keys=dk, values=dv)
                return kv, kv
            kv = LayerKV(b, self.layer, *window) if window else LayerKV(b, self.layer, dense=True)
            return kv, kv
        flush_tail(b.store, self.layer, b.flush, flat_k)
        stored_k, stored_v = b.store.write(self.layer, b.write_rows, flat_k, flat_v)
        if b.dense is not None:  # full-precision pages
            dk, dv = b.attend_dense(self.layer, b.store.k[self.layer][0],
                                    b.store.v[self.layer][0], stored_k, stored_v)
            if b.shared:
                kv = LayerKV(b, self.layer, keys=dk, values=dv)
                return kv, kv
            return dk, dv
        if b.tails is not None:
            old_k, old_v = b.store.gather_tail(self.layer, b.tail_rows)
            window_k = mx.where(b.from_tail, old_k, stored_k[b.new_rows])
            window_v = mx.where(b.from_tail, old_v, stored_v[b.new_rows])
            b.store.write_tail(self.layer, b.tail_write_rows, stored_k, stored_v)
            kv = LayerKV(b, self.layer, window_k.astype(b.dtype), window_v.astype(b.dtype))
            return kv, kv
        if b.quantized or b.shared:
            kv = LayerKV(b, self.layer)
            return kv, kv
        return b.store.gather(self.layer, b.table, b.dtype)

    def _fresh(self, keys: mx.array, values: mx.array) -> tuple[LayerKV, LayerKV]:
        """A K8V4 chunk from position 0 (B, H, n, D): write it; its pages and window as floats."""
        b = self.batch
        stored_k, stored_v, deq_k, deq_v = b.store.write_dequantized(
            self.layer, b.fresh_rows, keys, values, b.dtype)
        d = keys.shape[-1]
        b.store.write_tail(self.layer, b.tail_write_rows, stored_k.reshape(-1, d),
                           stored_v.reshape(-1, d))
        kv_fresh.fill(b.store, self.layer, b.fill, deq_k, deq_v)
        kv = LayerKV(b, self.layer, stored_k.astype(b.dtype), stored_v.astype(b.dtype),
                     pages=(deq_k, deq_v))
        return kv, kv

    start_position = 0  # llama4 reads a chunked cache's first kept position (all are kept)

    def maybe_trim_front(self) -> None:
        """Paged chunked layers keep every position (llama4 trims its own cache here)."""

    def make_mask(self, n: int, return_array: bool = False, window_size: int | None = None,
                  chunk_size: int | None = None) -> Any:
        """Causal mask over each row's own positions (optionally windowed, or chunked: keys of
        the query's own chunk of CHUNK_SIZE positions)."""
        b = self.batch
        if window_size is not None:
            return b.mask & (b.k_pos > b.q_pos - window_size)
        if chunk_size is not None:
            return b.mask & (b.k_pos // chunk_size == b.q_pos // chunk_size)
        if b.single and not b.quantized and not return_array:
            return None if n == 1 else "causal"
        return b.mask

    @property
    def state(self) -> tuple[()]:
        """Paged caches have no per-request state for mlx-lm to save."""
        return ()

    def is_trimmable(self) -> bool:
        """mlx-lm never trims our caches."""
        return False

"""K8V4 decode steps read float copies of full pages (the working set) instead of quantized ones.

On this CPU, ``mx.quantized_matmul`` and ``mx.dequantize`` are several times slower than the
float matmul of the same shape, so a decode step that reads every older page quantized pays that
every step, although a full page never changes. Here a decode batch (one token per row, each row
with its own tail page) gets a plan: the older pages it reads are given slots in the store's
``WorkingSet`` (dequantized once, the first time a running row reads them, with exactly the
floats ``mx.dequantize`` gives), and one (B, H, L) table indexes the store's tail arrays: older
positions at their page's float copy, the row's own page at its full-precision tail. Attention
then reads plain float keys and values, as with full-precision pages. The prefix cache and idle
pages stay K8V4; when a batch's pages do not fit in the working set it reads them quantized.
"""

from __future__ import annotations

from typing import NamedTuple

import mlx.core as mx
import numpy as np

from worker.kv.paged_kv import PagedKVStore
from worker.kv.rows import write_centered


class DecodePlan(NamedTuple):
    """What a K8V4 decode batch writes and reads besides the model's keys/values."""

    tail_rows: mx.array  # (B*H,) tail rows of each row's new token
    tail_ids: mx.array  # (B,) each row's tail page
    tail_width: int  # positions of a tail page the batch reads (quantized reads only)
    table: mx.array | None  # (B, H, L) rows of the tail arrays to read; None: read quantized
    shared_table: mx.array | None  # (1, H, S) the prefix every row shares (cascade)
    rest_table: mx.array | None  # (B, H, L - S) the rest of each row
    load: tuple[mx.array, mx.array] | None  # page rows to dequantize, and their float rows
    write_rows: mx.array  # (B*H,) pool rows of the new tokens (written when not deferred)
    complete: tuple[mx.array, mx.array] | None  # tail and pool rows of the pages filled now
    fresh: mx.array | None = None  # working-set rows of the pages filled now (complete's order)
    filled: np.ndarray | None = None  # those pages (ids), given copies by ``requantize``
    rows: np.ndarray | None = None  # (B, H, L) ``whole_table`` in numpy (the dense cache's refills)

    @property
    def dense(self) -> bool:
        """True when attention reads the float tables (the working set), not quantized pages."""
        return self.table is not None or self.rest_table is not None

    def whole_table(self) -> mx.array:
        """(B, H, L) rows of every row's keys: the table, or the shared prefix's before the rest's."""
        if self.table is not None:
            return self.table
        assert self.shared_table is not None and self.rest_table is not None
        shared, rest = self.shared_table, self.rest_table
        return mx.concatenate([mx.broadcast_to(shared, (rest.shape[0], *shared.shape[1:])), rest],
                              axis=-1)


def plan_flush(store: PagedKVStore, pages: np.ndarray, starts: np.ndarray, tails: np.ndarray
               ) -> tuple[mx.array, mx.array] | None:
    """Tail and pool rows of each row's current page up to its start (other batches' plan).

    Decode steps write a page's quantized rows only once it is full (``write_decode``); a batch
    that is not such a step first quantizes what the tail holds of each row's current page.
    """
    p, h = store.fmt.page_size, store.fmt.num_kv_heads
    off = starts % p
    rows = np.flatnonzero(off)
    if not len(rows):
        return None
    current = pages[rows, starts[rows] // p]
    r, j = np.nonzero(np.arange(p * h)[None, :] < (off[rows] * h)[:, None])  # slot-major rows
    return mx.array(tails[rows][r] * p * h + j), mx.array(current[r] * p * h + j)


def plan_decode(store: PagedKVStore, pages: np.ndarray, writes: np.ndarray, starts: np.ndarray,
                tails: np.ndarray, decode: bool, shared: int, write_rows: mx.array,
                length: int) -> DecodePlan | None:
    """Forget copies of the pages this batch writes; for a decode batch, plan its reads.

    A decode batch feeds each row one token, or (a speculative verify) n tokens that stay in
    the row's current page short of its last slot. PAGES (B, W) are the rows' page ids (0: none),
    WRITES (B, n) the slots the batch writes (0: padding), STARTS each row's first position, TAILS
    its tail page, SHARED the positions every row shares, LENGTH the key positions the batch
    reads (a compiled step's bucket: those past a row's are masked).
    """
    p, h = store.fmt.page_size, store.fmt.num_kv_heads
    work = store.work
    if work.slots:
        work.forget((writes // p).reshape(-1))  # repeated pages are fine
    if not decode:
        return None
    heads = np.arange(h)
    own = starts % p
    n = writes.shape[1]  # tokens per row (a speculative verify feeds several, in one page)
    fed = own[:, None] + np.arange(n)
    slot = np.where(writes != 0, tails[:, None] * p + fed, fed)  # padding: the scratch tail
    tail_rows = (slot[:, :, None] * h + heads).reshape(-1)
    block = np.arange(p * h)
    done = np.flatnonzero(own == p - 1)  # rows whose token fills their page
    complete = None
    if len(done):
        complete = (mx.array((tails[done, None] * p * h + block).reshape(-1)),
                    mx.array((pages[done, starts[done] // p][:, None] * p * h + block).reshape(-1)))
    if not work.slots:
        return DecodePlan(mx.array(tail_rows), mx.array(tails), int(own.max()) + n,
                          None, None, None, None, write_rows, complete)
    # while no row enters a new page, none fills one and no copy changed, the tables are the
    # last step's
    key = (pages.shape, pages.tobytes(), tails.tobytes(), (starts // p).tobytes(), length, shared)
    if not len(done) and work.memo is not None and work.memo[0] == (key, work.version):
        last: DecodePlan = work.memo[1]
        return last._replace(tail_rows=mx.array(tail_rows), write_rows=write_rows,
                             complete=complete)
    plan = DecodePlan(mx.array(tail_rows), mx.array(tails), int(own.max()) + n,
                      None, None, None, None, write_rows, complete)
    cols = np.arange(pages.shape[1])[None, :]
    current = (starts // p)[:, None]
    older = cols < current
    # the pages filled now get their copies too, from this step's quantize (the next step
    # reads them as older pages; ``requantize`` writes both)
    filled = pages[done, starts[done] // p]  # distinct, read by no row, just forgotten
    got = work.acquire(np.concatenate([np.unique(pages[older]), filled]))
    if got is None:
        return plan
    first = store.tail_pages  # working-set slot s is page first + s of the tail arrays
    float_pages = np.where(older, first + work.slot_of[pages],
                           np.where(cols == current, tails[:, None], 0))  # 0: scratch tail
    slots = (float_pages[:, :, None] * p + np.arange(p)).reshape(len(starts), -1)[:, :length]
    rows = slots[:, None, :] * h + heads[None, :, None]  # (B, H, L)
    loaded, at = got
    load = fresh = None
    if len(filled):  # all missing, acquired last: the last slots given
        fresh = mx.array(((first + at[-len(filled):])[:, None] * p * h + block).reshape(-1))
        loaded, at = loaded[: -len(filled)], at[: -len(filled)]
    if len(loaded):
        load = (mx.array((loaded[:, None] * p * h + block).reshape(-1)),
                mx.array(((first + at)[:, None] * p * h + block).reshape(-1)))
    # tail_width 0: dense reads take no window, and a compiled step's key must not vary with it
    if shared:
        plan = plan._replace(shared_table=mx.array(rows[:1, :, :shared]),
                             rest_table=mx.array(rows[:, :, shared:]), tail_width=0, rows=rows)
    else:
        plan = plan._replace(table=mx.array(rows), tail_width=0, rows=rows)
    work.memo = ((key, work.version), plan)
    return plan._replace(load=load, fresh=fresh, filled=filled if fresh is not None else None)


def write_decode(store: PagedKVStore, layer: int, plan: DecodePlan, keys: mx.array,
                 values: mx.array, dtype: mx.Dtype
                 ) -> tuple[tuple[mx.array, mx.array] | None, tuple[mx.array, mx.array] | None]:
    """Write one layer's new keys/values (B*H, D) (or a decode step's (B, H, 1, D)) in the tail;
    load pages into the working set.

    A page's quantized rows are written when the page fills, from the tail (quantization is
    per row, so the bits are those of token-by-token writes), when the keys are already in the
    pages' dtype; else token by token. Returns the keys/values as the tail now holds them (the
    rows ``plan.tail_rows`` would gather; None when they were centered and written in one native
    node each: read them there), and the tail window (B, H, W, D) when the batch reads older
    pages quantized, else None (attention reads ``plan``'s tables).
    """
    held: tuple[mx.array, mx.array] | None = None
    if _deferred(store, keys):
        if not _centered_tail(store, layer, plan.tail_rows, keys, values):
            stored_k, stored_v = store.center(layer, keys, values)
            store.write_tail(layer, plan.tail_rows, stored_k, stored_v)
            held = stored_k, stored_v
        if plan.complete is not None:
            store.requantize(layer, *plan.complete, plan.fresh)
    else:
        stored_k, stored_v = store.write(layer, plan.write_rows, keys, values)
        store.write_tail(layer, plan.tail_rows, stored_k, stored_v)
        held = stored_k, stored_v
        if plan.complete is not None and plan.fresh is not None:
            store.load_work(layer, plan.complete[1], plan.fresh)
    if plan.load is not None:
        store.load_work(layer, *plan.load)
    tail_dtype = store.fmt.dtype
    if held is not None:
        held = held[0].astype(tail_dtype), held[1].astype(tail_dtype)
    if plan.dense:
        return held, None
    window_k, window_v = store.gather_tail_pages(layer, plan.tail_ids, plan.tail_width)
    return held, (window_k.astype(dtype), window_v.astype(dtype))


def _centered_tail(store: PagedKVStore, layer: int, rows: mx.array, keys: mx.array,
                   values: mx.array) -> bool:
    """Write a decode step's keys/values (B, H, 1, D) centered into the tail at ROWS, each in
    one native node (no Subtract node); False when the store's writer cannot (the caller
    centers with MLX's ops)."""
    if keys.ndim != 4 or keys.shape[2] != 1:
        return False
    d, dv = keys.shape[-1], values.shape[-1]
    k_tail = write_centered(store.put_rows, store.k_tail[layer], rows, keys.reshape(-1, d),
                            store.k_center[layer])
    v_tail = write_centered(store.put_rows, store.v_tail[layer], rows, values.reshape(-1, dv),
                            store.v_center[layer])
    if k_tail is None or v_tail is None:  # (an unused node is dropped before it is encoded)
        return False
    store.k_tail[layer], store.v_tail[layer] = k_tail, v_tail
    return True


def flush_tail(store: PagedKVStore, layer: int, flush: tuple[mx.array, mx.array] | None,
               keys: mx.array) -> None:
    """Quantize a batch's ``plan_flush`` rows (what decode steps deferred) into the pages."""
    if flush is not None and _deferred(store, keys):
        store.requantize(layer, *flush)


def _deferred(store: PagedKVStore, keys: mx.array) -> bool:
    """Decode steps defer quantized writes when centering keeps the keys' dtype (the tail's)."""
    return keys.dtype == store.fmt.dtype


def working_set_status(store: PagedKVStore) -> dict[str, int]:
    """The K8V4 working set in the worker status: float-copy slots, slots in use, page loads
    so far, and batches refused (they read the quantized pages instead)."""
    work = store.work
    return {"kv_working_set_pages": store.work_pages,
            "kv_working_set_pages_used": int((work.page_of >= 0).sum()),
            "kv_working_set_loads": work.loads, "kv_working_set_refused": work.refused}

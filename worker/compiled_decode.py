"""The decode forward compiled with ``mx.compile``, one function per shape bucket.

The page arrays go in as inputs and come out as outputs (never captured: MLX would copy a
captured array it sees written). Every per-step array of the ``PagedBatch`` (page tables,
masks, RoPE offsets) is an input too; its Python values (the shared-prefix and window widths)
and all shapes pick the compiled function. After the call the store holds the new page arrays
and nothing else refers to the old ones, so MLX still writes the pages in place.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from cache.paged_kv import PagedKVStore
from worker.paged_batch import PagedBatch

# PagedBatch attributes that are arrays a decode step reads (those a batch has)
ARRAYS = ("write_rows", "offset", "q_pos", "k_pos", "mask", "table", "older", "shared_table",
          "rest_table", "window_pos", "window_mask", "decode_tail_rows", "tail_ids")
# rows up to which steps run compiled (RAPID_MLX_COMPILE_DECODE_MAX_ROWS): on stories260K the
# compiled step was faster at 1 and 8 rows and slower at 32 (bench.compile_decode)
MAX_ROWS = 8
KEEP = 64  # compiled functions kept (least recently used dropped; MLX frees their traces)
Run = Callable[[mx.array, PagedBatch], mx.array]


def compile_decode() -> bool:
    """True when decode steps run compiled (RAPID_MLX_COMPILE_DECODE=1)."""
    return os.environ.get("RAPID_MLX_COMPILE_DECODE", "0") == "1"


def _pool(store: PagedKVStore) -> list[Any]:
    return [store.k, store.v, store.k_tail, store.v_tail, store.k_center, store.v_center]


class CompiledDecode:
    """Decode steps through compiled functions keyed by shapes and the batch's Python values."""

    def __init__(self, run: Run, store: PagedKVStore) -> None:
        self.run = run  # the model over a batch: tokens (B, 1), batch -> logits (B, V)
        self.store = store
        self.fns: dict[tuple[Any, ...], Callable[..., Any]] = {}
        self.max_rows = int(os.environ.get("RAPID_MLX_COMPILE_DECODE_MAX_ROWS", MAX_ROWS))

    def fits(self, batch: PagedBatch) -> bool:
        """True when the compiled step covers this batch (decode, full-precision pages, few rows)."""
        return batch.n == 1 and not batch.single and len(batch.lengths) <= self.max_rows and (
            batch.tails is None)

    def __call__(self, tokens: mx.array, batch: PagedBatch) -> mx.array:
        """Logits (B, V) of one decode step; the store's page arrays become the step's outputs."""
        if batch.shared:
            _ = batch.shared_table, batch.rest_table
        else:
            _ = batch.table
        names = tuple(a for a in ARRAYS if isinstance(batch.__dict__.get(a), mx.array))
        arrays = [batch.__dict__[a] for a in names]
        key = (names, tuple(a.shape for a in arrays), tokens.shape, batch.shared)
        fn = self.fns.pop(key, None)
        if fn is None:
            fn = mx.compile(self._traced(batch, names))
            if len(self.fns) >= KEEP:
                del self.fns[next(iter(self.fns))]
        self.fns[key] = fn
        # MLX picks a write's output buffer when it encodes the step: a page array the step
        # before is still writing would be copied whole, so wait for those writes first
        mx.eval(self.store.arrays())
        pool = _pool(self.store)
        out, k, v, k_tail, v_tail = fn(tokens, arrays, pool)
        del pool
        store = self.store
        for layer in range(len(store.k)):
            store.k[layer][:] = k[layer]
            store.v[layer][:] = v[layer]
        store.k_tail[:] = k_tail
        store.v_tail[:] = v_tail
        return out  # type: ignore[no-any-return]

    def _traced(self, template: PagedBatch, names: tuple[str, ...]) -> Callable[..., Any]:
        """The step as a function of (tokens, the batch's arrays, the page arrays)."""
        run, store = self.run, self.store
        template = copy.copy(template)

        def step(tokens: mx.array, arrays: list[mx.array], pool: list[Any]) -> Any:
            proxy = copy.copy(store)
            proxy.k = [list(a) for a in pool[0]]
            proxy.v = [list(a) for a in pool[1]]
            proxy.k_tail, proxy.v_tail = list(pool[2]), list(pool[3])
            proxy.k_center, proxy.v_center = list(pool[4]), list(pool[5])
            batch = copy.copy(template)
            batch.store = proxy
            for name, a in zip(names, arrays, strict=True):
                setattr(batch, name, a)
            known = set(batch.__dict__)
            out = run(tokens, batch)
            lazy = [a for a in batch.__dict__ if a not in known]
            if lazy:  # computed while tracing: it would be baked into the function as a constant
                raise RuntimeError(f"compiled decode step read {lazy} without passing them in")
            return out, proxy.k, proxy.v, proxy.k_tail, proxy.v_tail

        return step

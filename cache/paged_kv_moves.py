"""K8V4 page loads and completions of every layer, each in one compiled call.

A compiled decode step (worker/compiled_decode.py) runs a batch's page loads (``load_work``:
full pages dequantized into the working set) before its function and its page completions
(``requantize``: a filled tail page quantized into the pool) after it, since their row counts
change from step to step. Uncompiled, each costs ~14 small ops per layer on the host; here each
is one ``mx.compile``d function over all layers, keyed by the row count, which the plan pads to
a power of two pages (repeating a page: the same values written twice to the same rows). As in
the step, the page arrays go in and come out, so MLX writes them in place.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from cache.paged_kv import PagedKVStore

KEEP = 32  # compiled functions kept per kind


class PageMoves:
    """``load_work`` and ``requantize`` of every layer of a K8V4 store, compiled per row count."""

    def __init__(self, store: PagedKVStore) -> None:
        self.store = store
        self.fns: dict[tuple[str, int], Callable[..., Any]] = {}

    def load(self, rows: mx.array, work_rows: mx.array) -> None:
        """Dequantize the page ROWS (R,) into the float rows WORK_ROWS (R,), every layer."""
        store = self.store
        k_tail, v_tail = self._fn("load", rows.shape[0])(
            rows, work_rows, store.k, store.v, store.k_tail, store.v_tail)
        store.k_tail[:] = k_tail
        store.v_tail[:] = v_tail

    def complete(self, tail_rows: mx.array, rows: mx.array) -> None:
        """Quantize the tail's TAIL_ROWS (R,) into the pages at ROWS (R,), every layer."""
        store = self.store
        k, v = self._fn("complete", rows.shape[0])(
            tail_rows, rows, store.k, store.v, store.k_tail, store.v_tail)
        for layer in range(len(k)):
            store.k[layer][:] = k[layer]
            store.v[layer][:] = v[layer]

    def _fn(self, kind: str, rows: int) -> Callable[..., Any]:
        fn = self.fns.pop((kind, rows), None)
        if fn is None:
            fn = mx.compile(_traced(self.store, kind))
            if len(self.fns) >= KEEP:
                del self.fns[next(iter(self.fns))]
        self.fns[(kind, rows)] = fn
        return fn


def _traced(store: PagedKVStore, kind: str) -> Callable[..., Any]:
    """The store's per-layer method over every layer, as a function of the page arrays."""

    def moves(src: mx.array, dst: mx.array, k: list[list[mx.array]], v: list[list[mx.array]],
              k_tail: list[mx.array], v_tail: list[mx.array]) -> Any:
        proxy = copy.copy(store)
        proxy.k, proxy.v = [list(a) for a in k], [list(a) for a in v]
        proxy.k_tail, proxy.v_tail = list(k_tail), list(v_tail)
        for layer in range(len(k)):
            if kind == "load":
                proxy.load_work(layer, src, dst)
            else:
                proxy.requantize(layer, src, dst)
        return (proxy.k_tail, proxy.v_tail) if kind == "load" else (proxy.k, proxy.v)

    return moves

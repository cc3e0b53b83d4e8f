"""The decode forward compiled with ``mx.compile``, one function per shape bucket.

The page arrays go in as inputs and come out as outputs (never captured: MLX would copy a
captured array it sees written). Every per-step array of the ``PagedBatch`` (page tables,
masks, RoPE offsets) is an input too, and so is every array of a K8V4 batch's working-set plan
(``DecodePlan``: tail rows, float tables); their shapes and the batch's Python values (the
shared-prefix width) pick the compiled function. A K8V4 step's page loads (``load_work``) run
before the function and its page completions (``requantize``) after it, so the function only
writes the new token's tail rows and its shape set stays small. Its row writes are the store's
(``PagedKVStore.put_rows``: the native write in place, a K8V4 tail's centering in the same
node, and the dense cache's copies from the tail in one node each). A batch reading the dense
decode cache (worker/kv/dense.py) passes its dense arrays in and out the same way; its rows are
moved and refilled before the function, which only appends the new token. After the call the
store holds the new page arrays and nothing else refers to the old ones, so MLX still writes in
place.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from worker.kv.dense import prepare_dense
from worker.kv.paged_batch import PagedBatch
from worker.kv.paged_kv import PagedKVStore
from worker.kv.working import DecodePlan

# DecodePlan fields that are arrays the compiled step reads (loads and completions run outside)
PLAN_ARRAYS = ("tail_rows", "tail_ids", "table", "shared_table", "rest_table", "write_rows")
KEEP = 64  # compiled functions kept (least recently used dropped; MLX frees their traces)
Run = Callable[[mx.array, PagedBatch], mx.array]


class WritesPages(Exception):
    """Raised while tracing when the step would write quantized pages (not deferred writes)."""


def _pool(store: PagedKVStore, rows: int) -> list[Any]:
    """The store's arrays a step of ROWS reads: pages (none for K8V4: a compiled K8V4 step
    reads and writes the float tail arrays only), tails, and the centers in each shape a step
    uses (shaped here, not in the step's graph)."""
    centers = [store.k_center, store.v_center, store.k_center_rows, store.v_center_rows,
               store.v_center_heads, store.value_addends(rows) if store.quantized else []]
    if store.quantized:
        return [[], [], store.k_tail, store.v_tail, *centers]
    return [store.k, store.v, store.k_tail, store.v_tail, *centers]


DENSE_AT = 10  # the dense cache's arrays follow the store's in a step's inputs


class CompiledDecode:
    """Decode steps through compiled functions keyed by shapes and the batch's Python values."""

    def __init__(self, run: Run, store: PagedKVStore, max_rows: int) -> None:
        self.run = run  # the model over a batch: tokens (B, 1), batch -> logits (B, V)
        self.store = store
        self.fns: dict[tuple[Any, ...], Callable[..., Any] | None] = {}  # None: never compiles
        self.max_rows = max_rows  # larger decode batches run the plain step (compile_mode.py)

    def fits(self, batch: PagedBatch) -> bool:
        """True when the compiled step covers this batch: decode, few rows, and full-precision
        pages or a K8V4 batch reading the working set's float copies."""
        return batch.n == 1 and not batch.single and len(batch.lengths) <= self.max_rows and (
            not batch.quantized or (batch.work is not None and batch.work.dense))

    def __call__(self, tokens: mx.array, batch: PagedBatch) -> mx.array | None:
        """Logits (B, V) of one decode step; the store's page arrays become the step's outputs.

        None when this batch's step cannot compile (the plain step must run it).
        """
        store, plan = self.store, batch.work
        if plan is not None:  # pages enter the working set before the step, fill after it
            if plan.load is not None:
                for layer in range(len(store.k)):
                    store.load_work(layer, *plan.load)
            batch.work = plan._replace(load=None, complete=None)
        cache = batch.dense_cache
        if batch.dense is not None and cache is not None:  # rows moved and refilled before
            sources = list(zip(store.k_tail, store.v_tail, strict=True)) if store.quantized else [
                (k[0], v[0]) for k, v in zip(store.k, store.v, strict=True)]
            batch.dense = prepare_dense(cache, batch.dense, sources)
        names, arrays = batch_inputs(batch)
        work = [] if batch.work is None else [
            (k, a) for k, a in zip(PLAN_ARRAYS, (getattr(batch.work, f) for f in PLAN_ARRAYS),
                                   strict=True) if a is not None]
        arrays += [a for _, a in work]
        dense: list[Any] = [[], []]
        if batch.dense is not None and cache is not None:  # the dense arrays go in and out
            arrays.append(batch.dense.write)
            dense = [list(cache.k), list(cache.v)]
        # key[2][0]: the rows (tests and the warm-up read it)
        # key[-1]: the dense arrays' shapes (tests read it); the query heads shape the addends
        key = (names, tuple(a.shape for a in arrays), tokens.shape, batch.shared,
               store.query_heads if store.quantized else 0, tuple(k for k, _ in work),
               tuple(a.shape for a in dense[0]))
        if key in self.fns and self.fns[key] is None:
            batch.work = plan
            return None
        fn = self._function(key, lambda: self._traced(batch, names, tuple(k for k, _ in work)))
        try:
            out, k, v, k_tail, v_tail, dense_k, dense_v = self._apply(fn, tokens, arrays, dense)
        except WritesPages:
            self.fns[key] = None
            batch.work = plan
            return None
        self.fns[key] = fn
        self._write_back(k, v, k_tail, v_tail)
        if cache is not None and dense_k:
            cache.k[:], cache.v[:] = dense_k, dense_v
            cache.applied = len(dense_k)
        if plan is not None and plan.complete is not None:
            # the filled pages' copies are not written here: a tail write after the function
            # would copy the tail arrays (its outputs); the next step loads them instead
            if plan.filled is not None:
                store.work.cancel(plan.filled)
            for layer in range(len(store.k)):
                store.requantize(layer, *plan.complete)
        return out  # type: ignore[no-any-return]

    def _function(self, key: tuple[Any, ...], make: Callable[[], Callable[..., Any]]
                  ) -> Callable[..., Any]:
        """KEY's compiled function, out of the LRU (the caller puts it back), or MAKE's compiled."""
        fn = self.fns.pop(key, None)
        if fn is None:
            fn = mx.compile(make())
            if len(self.fns) >= KEEP:
                del self.fns[next(iter(self.fns))]
        return fn

    def _apply(self, fn: Callable[..., Any], tokens: mx.array, arrays: list[mx.array],
               dense: list[Any] | None = None) -> Any:
        """FN's outputs on (TOKENS, ARRAYS, the store's page arrays and the DENSE cache's),
        once their writes are done."""
        dense = [[], []] if dense is None else dense
        # MLX picks a write's output buffer when it encodes the step: a page array the step
        # before is still writing would be copied whole, so wait for those writes first
        mx.eval(self.store.arrays(), dense)
        return fn(tokens, arrays, _pool(self.store, tokens.shape[0]) + dense)

    def _write_back(self, k: list[Any], v: list[Any], k_tail: list[mx.array],
                    v_tail: list[mx.array]) -> None:
        """The step's output page arrays become the store's (nothing else keeps the old ones)."""
        store = self.store
        for layer in range(len(k)):  # none for K8V4 (its quantized pages are not inputs)
            store.k[layer][:] = k[layer]
            store.v[layer][:] = v[layer]
        store.k_tail[:] = k_tail
        store.v_tail[:] = v_tail

    def _traced(self, template: PagedBatch, names: tuple[str, ...], work: tuple[str, ...]
                ) -> Callable[..., Any]:
        """The step as a function of (tokens, the batch's and plan's arrays, the page arrays)."""
        run, store = self.run, self.store
        template = copy.copy(template)
        plan: DecodePlan | None = template.work

        def step(tokens: mx.array, arrays: list[mx.array], pool: list[Any]) -> Any:
            proxy = copy.copy(store)  # its row writes too: the native one is a node here also
            proxy.k = [list(a) for a in pool[0]]
            proxy.v = [list(a) for a in pool[1]]
            proxy.k_tail, proxy.v_tail = list(pool[2]), list(pool[3])
            proxy.k_center, proxy.v_center = list(pool[4]), list(pool[5])
            proxy.k_center_rows, proxy.v_center_rows = list(pool[6]), list(pool[7])
            proxy.v_center_heads = list(pool[8])  # empty until made outside a trace
            proxy.center_cache = None  # nothing is evaluated in a trace
            rows, heads = tokens.shape[0], store.query_heads
            proxy.addend_inputs = {(layer, rows, heads): a for layer, a in enumerate(pool[9])}
            if store.quantized:
                proxy.write_quantized = _refuse  # type: ignore[method-assign,assignment]
            batch = copy.copy(template)
            batch.store = proxy
            if template.window is not None:  # the windowed layer group's batch
                batch.window = copy.copy(template.window)
                batch.window.store = proxy
            for name, a in zip(names, arrays[: len(names)], strict=True):
                owner, attr = (batch.window, name[len(WINDOW):]) if name.startswith(WINDOW) else (
                    batch, name)
                setattr(owner, attr, a)
            if plan is not None:
                given: dict[str, Any] = dict.fromkeys(PLAN_ARRAYS)
                given.update(zip(work, arrays[len(names):len(names) + len(work)], strict=True))
                batch.work = plan._replace(**given)
            cache = None
            if template.dense is not None and template.dense_cache is not None:
                cache = copy.copy(template.dense_cache)
                cache.k, cache.v = list(pool[DENSE_AT]), list(pool[DENSE_AT + 1])
                batch.dense_cache = cache
                batch.dense = template.dense._replace(write=arrays[-1])
            known = set(batch.__dict__)
            known_window = set(batch.window.__dict__) if batch.window is not None else set()
            out = run(tokens, batch)
            lazy = [a for a in batch.__dict__ if a not in known]
            if batch.window is not None:
                lazy += [a for a in batch.window.__dict__ if a not in known_window]
            if lazy:  # computed while tracing: it would be baked into the function as a constant
                raise RuntimeError(f"compiled decode step read {lazy} without passing them in")
            return (out, proxy.k, proxy.v, proxy.k_tail, proxy.v_tail,
                    cache.k if cache else [], cache.v if cache else [])

        return step


def batch_inputs(batch: PagedBatch) -> tuple[tuple[str, ...], list[mx.array]]:
    """The names and arrays of BATCH's per-step arrays, its page tables computed first (a
    full-precision batch builds them lazily: inside a trace they would become constants; a batch
    reading the dense cache needs none); a windowed layer group's batch's follow, named
    ``WINDOW`` + attribute."""
    if not batch.quantized and batch.dense is None:
        if batch.shared:
            _ = batch.shared_table, batch.rest_table
        if not batch.shared or batch.store.kinds.windowed:  # windowed layers read whole rows
            _ = batch.table
    names = tuple(k for k, a in batch.__dict__.items() if isinstance(a, mx.array))
    arrays = [batch.__dict__[a] for a in names]
    if batch.window is not None:
        more, extra = batch_inputs(batch.window)
        names += tuple(WINDOW + k for k in more)
        arrays += extra
    return names, arrays


WINDOW = "window."  # batch_inputs' prefix of the windowed group's batch's arrays


def _refuse(*_: Any) -> None:
    raise WritesPages("a K8V4 step writing quantized pages does not compile")

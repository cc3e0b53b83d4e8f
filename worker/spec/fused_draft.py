"""The draft model's greedy decode steps of one proposal, fused into one compiled function.

Drafting k tokens took k compiled decode steps, each with its host work (batch tables, the
function lookup, a wait for the last step's page writes, sampling) and its own dispatch; on a
dispatch-bound draft that overhead was most of the cost (a draft step 0.45x a target step while
its compute is ~10x smaller). Here the k steps' batches are planned up front and one compiled
function runs them back to back, each step's argmax feeding the next, writing the draft's
full-precision pages as ``CompiledDecode`` does (page arrays in and out, never captured).
Greedy rows only: a sampled row's proposals need their q.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from cache.paged_kv import PagedKVStore
from worker.paged_batch import PagedBatch

KEEP = 64  # compiled functions kept (least recently used dropped)
Run = Callable[[mx.array, PagedBatch], mx.array]


class FusedDraft:
    """Greedy draft steps (k per call) through compiled functions keyed by the batches' shapes."""

    def __init__(self, run: Run, store: PagedKVStore, cascade: bool, dtype: mx.Dtype) -> None:
        self.run = run  # the model over one decode batch: tokens (B, 1), batch -> logits (B, V)
        self.store = store
        self.cascade = cascade
        self.dtype = dtype
        self.fns: dict[tuple[Any, ...], Callable[..., Any]] = {}

    def __call__(self, tokens: mx.array, pages: list[list[int]], starts: list[int], steps: int
                 ) -> mx.array:
        """(B, STEPS) greedy proposals: row b is fed TOKENS[b] at STARTS[b], then its proposals.

        The pages must hold every written position; the store's page arrays become outputs.
        """
        store = self.store
        assert not store.quantized
        batches = [PagedBatch(store, pages, [s + i for s in starts], [1] * len(starts), self.dtype,
                              cascade=self.cascade, bucket=True) for i in range(steps)]
        names: list[tuple[str, ...]] = []
        arrays: list[mx.array] = []
        for batch in batches:
            if batch.shared:
                _ = batch.shared_table, batch.rest_table
            else:
                _ = batch.table
            own = tuple(k for k, a in batch.__dict__.items() if isinstance(a, mx.array))
            names.append(own)
            arrays += [batch.__dict__[k] for k in own]
        key = (tuple(names), tuple(a.shape for a in arrays), tokens.shape,
               tuple(b.shared for b in batches))
        fn = self.fns.pop(key, None)
        if fn is None:
            fn = mx.compile(self._traced(batches, names))
            if len(self.fns) >= KEEP:
                del self.fns[next(iter(self.fns))]
        self.fns[key] = fn
        mx.eval(store.arrays())  # see CompiledDecode: pending page writes would be copied whole
        out, k, v = fn(tokens, arrays, [store.k, store.v])
        for layer in range(len(k)):
            store.k[layer][:] = k[layer]
            store.v[layer][:] = v[layer]
        return out  # type: ignore[no-any-return]

    def _traced(self, templates: list[PagedBatch], names: list[tuple[str, ...]]
                ) -> Callable[..., Any]:
        """The steps as a function of (tokens, every batch's arrays, the page arrays)."""
        run, store = self.run, self.store
        templates = [copy.copy(t) for t in templates]

        def steps(tokens: mx.array, arrays: list[mx.array], pool: list[Any]) -> Any:
            proxy = copy.copy(store)
            proxy.k = [list(a) for a in pool[0]]
            proxy.v = [list(a) for a in pool[1]]
            at, toks, out = 0, tokens, []
            for template, own in zip(templates, names, strict=True):
                batch = copy.copy(template)
                batch.store = proxy
                for name, a in zip(own, arrays[at: at + len(own)], strict=True):
                    setattr(batch, name, a)
                at += len(own)
                known = set(batch.__dict__)
                logits = run(toks[:, None], batch)
                if set(batch.__dict__) - known:
                    raise RuntimeError("a fused draft step computed batch arrays while tracing")
                toks = mx.argmax(logits, axis=-1).astype(tokens.dtype)
                out.append(toks)
            return mx.stack(out, axis=1), proxy.k, proxy.v

        return steps

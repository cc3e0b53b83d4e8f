"""The draft model's greedy decode steps of one proposal, fused into one compiled function.

Drafting k tokens took k compiled decode steps, each with its host work (batch tables, the
function lookup, a wait for the last step's page writes, sampling) and its own dispatch; on a
dispatch-bound draft that overhead was most of the cost (a draft step 0.45x a target step while
its compute is ~10x smaller). Here the k steps' batches are planned up front and one compiled
function runs them back to back, each step's argmax feeding the next. The machinery is
``CompiledDecode``'s (every batch array an input, page arrays in and out, one function per
shape key, each step traced as its decode step is); only the chaining is here.
Greedy rows only: a sampled row's proposals need their q.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx

from worker.engine.compiled_decode import CompiledDecode, Run, batch_inputs
from worker.kv.dense import DenseCache
from worker.kv.paged_batch import PagedBatch
from worker.kv.paged_kv import PagedKVStore


class FusedDraft(CompiledDecode):
    """Greedy draft steps (k per call) through compiled functions keyed by the batches' shapes."""

    def __init__(self, run: Run, store: PagedKVStore, cascade: bool, dtype: mx.Dtype,
                 dense: DenseCache | None = None) -> None:
        """DENSE: the store's dense decode cache (the steps gather pages and mark their writes)."""
        # rows: the caller's limit (the drafter asks the compiled verify's ``takes``)
        super().__init__(run, store, max_rows=0)
        self.cascade = cascade
        self.dtype = dtype
        self.dense = dense

    def __call__(self, tokens: mx.array, pages: list[list[int]], starts: list[int],  # type: ignore[override]
                 steps: int) -> mx.array:
        """(B, STEPS) greedy proposals: row b is fed TOKENS[b] at STARTS[b], then its proposals.

        The pages must hold every written position; the store's page arrays become outputs.
        """
        assert not self.store.quantized
        batches = [PagedBatch(self.store, pages, [s + i for s in starts], [1] * len(starts),
                              self.dtype, cascade=self.cascade, bucket=True, dense=self.dense,
                              gather=True) for i in range(steps)]
        names: list[tuple[str, ...]] = []
        arrays: list[mx.array] = []
        for batch in batches:
            own, given = batch_inputs(batch)
            names.append(own)
            arrays += given
        key = (tuple(names), tuple(a.shape for a in arrays), tokens.shape,
               tuple(b.shared for b in batches))
        fn = self._function(key, lambda: self._chained(batches, names))
        self.fns[key] = fn
        out, k, v, k_tail, v_tail = self._apply(fn, tokens, arrays)
        self._write_back(k, v, k_tail, v_tail)
        return out  # type: ignore[no-any-return]

    def _chained(self, batches: list[PagedBatch], names: list[tuple[str, ...]]
                 ) -> Callable[..., Any]:
        """The steps as one function of (tokens, every batch's arrays, the page arrays)."""
        steps = [self._traced(b, own, ()) for b, own in zip(batches, names, strict=True)]
        sizes = [len(own) for own in names]

        def chained(tokens: mx.array, arrays: list[mx.array], pool: list[Any]) -> Any:
            at, toks, out = 0, tokens, []
            for step, n in zip(steps, sizes, strict=True):
                logits, k, v, k_tail, v_tail, _, _ = step(toks[:, None], arrays[at: at + n], pool)
                pool = [k, v, k_tail, v_tail, *pool[4:]]  # the next step reads these writes
                at += n
                toks = mx.argmax(logits, axis=-1).astype(tokens.dtype)
                out.append(toks)
            return mx.stack(out, axis=1), *pool[:4]

        return chained

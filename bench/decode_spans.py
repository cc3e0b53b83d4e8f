"""Exclusive timing spans over one decode step, ours and mlx-lm's, for bench.profile_decode.

In "split" mode the spans put ``mx.eval`` barriers where a category's work ends (the layer's
keys/values, the cache update, attention's output, the logits, the sampled tokens), so compute is
charged to the category that built it; that removes the overlap of host and compute, so the sum
is larger than the overlapped wall time. In "wall" mode only graph building, the page tables and
the time the host blocks in ``mx.eval``/``mx.async_eval`` ("sync") are split out.
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import mlx.core as mx
from mlx.utils import tree_flatten

T = TypeVar("T")
COLUMNS = ["build", "tables", "model", "kv", "attention", "sampling", "sync", "scheduling"]


class Spans:
    """Exclusive seconds per category: a span's children are not counted in it."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self._stack: list[float] = []  # children's seconds of each open span

    @contextmanager
    def span(self, name: str) -> Iterator[None]:
        """Charge the block's time, minus its child spans', to NAME."""
        self._stack.append(0.0)
        t0 = time.perf_counter()
        try:
            yield
        finally:
            elapsed = time.perf_counter() - t0
            children = self._stack.pop()
            self.seconds[name] += elapsed - children
            if self._stack:
                self._stack[-1] += elapsed

    def reset(self) -> None:
        """Forget what was timed (after warm-up)."""
        self.seconds.clear()


def _arrays(x: Any) -> list[mx.array]:
    """Every mx.array in X (tuples, LayerKV handles, quantized pages)."""
    if isinstance(x, mx.array):
        return [x]
    if isinstance(x, (tuple, list)):
        return [a for y in x for a in _arrays(y)]
    fields = getattr(x, "__dict__", None)
    if fields is not None:
        return [a for k, v in fields.items() if k != "batch" for a in _arrays(v)]
    return []


def _patch(obj: Any, name: str, make: Callable[[Any], Any], undo: list[Callable[[], None]]) -> None:
    original = getattr(obj, name)
    setattr(obj, name, make(original))
    undo.append(lambda: setattr(obj, name, original))


@contextmanager
def instrument(spans: Spans, model: Any, cache_classes: list[type], split: bool) -> Iterator[None]:
    """Patch attention and the caches' update_and_fetch of MODEL's module (split mode only)."""
    undo: list[Callable[[], None]] = []
    if not split:  # the host blocked on compute: MLX throttles async_eval, readback waits
        def blocking(original: Any) -> Any:
            def run(*args: Any) -> Any:
                with spans.span("sync"):
                    return original(*args)
            return run

        _patch(mx, "eval", blocking, undo)
        _patch(mx, "async_eval", blocking, undo)
    if split:
        layers = getattr(getattr(model, "model", model), "layers", [])
        module = sys.modules[type(layers[0].self_attn).__module__]

        def attention(original: Any) -> Any:
            def sdpa(queries: mx.array, keys: Any, values: Any, *args: Any, **kw: Any) -> Any:
                with spans.span("model"):
                    mx.eval(queries)
                with spans.span("attention"):
                    out = original(queries, keys, values, *args, **kw)
                    mx.eval(out)
                return out
            return sdpa

        def update(original: Any) -> Any:
            def update_and_fetch(self: Any, keys: mx.array, values: mx.array) -> Any:
                with spans.span("model"):
                    mx.eval(keys, values)
                with spans.span("kv"):
                    out = original(self, keys, values)
                    store = getattr(getattr(self, "batch", None), "store", None)
                    state: list[tuple[str, Any]] = tree_flatten(  # type: ignore[assignment]
                        getattr(self, "state", ()))
                    mx.eval(_arrays(out), *(store.arrays() if store is not None else []),
                            *[a for _, a in state])
                return out
            return update_and_fetch

        _patch(module, "scaled_dot_product_attention", attention, undo)
        for cls in cache_classes:
            _patch(cls, "update_and_fetch", update, undo)
    try:
        yield
    finally:
        for u in reversed(undo):
            u()


def timed_sampler(spans: Spans, sampler: Callable[[mx.array], T], split: bool
                  ) -> Callable[[mx.array], T]:
    """SAMPLER charging the logits' remaining compute to model, its own to sampling."""
    def sample(logits: mx.array) -> T:
        if not split:
            return sampler(logits)
        with spans.span("model"):
            mx.eval(logits)
        with spans.span("sampling"):
            out = sampler(logits)
            mx.eval(out)
        return out
    return sample

"""Layer kinds of a model's attention: full, sliding window, chunked.

mlx-lm models say what each layer keeps in the caches ``make_cache`` returns: ``KVCache`` (full
attention: every earlier position), ``RotatingKVCache(max_size=W)`` (a sliding window: the last
W positions, gpt-oss's and Gemma 3's local layers) and ``ChunkedKVCache(chunk_size=C)`` (Llama
4's chunked attention: the positions of the query's own chunk of C). ``LayerKinds`` keeps that
per layer; the page accounting (``needed_from``) and the status (``held_pages``) read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FULL, SLIDING, CHUNKED = "full", "sliding", "chunked"
ATTENTION_CACHES = {"KVCache": FULL, "RotatingKVCache": SLIDING, "ChunkedKVCache": CHUNKED}
RECURRENT_CACHES = {"ArraysCache"}  # a hybrid model's recurrent layers (worker/kv/state_pool.py)


class UnknownCache(Exception):
    """A layer's cache is not one of the attention caches the paged engine serves."""


@dataclass(frozen=True)
class LayerKinds:
    """Per layer: its kind and its window (sliding) or chunk (chunked) size, 0 for full."""

    kinds: tuple[str, ...]
    sizes: tuple[int, ...]

    @property
    def windowed(self) -> bool:
        """True when some layer sees only part of the context."""
        return any(k != FULL for k in self.kinds)

    @property
    def counts(self) -> dict[str, int]:
        """Layers of each kind present."""
        out: dict[str, int] = {}
        for k in self.kinds:
            out[k] = out.get(k, 0) + 1
        return out

    def needed_from(self, layer: int, position: int) -> int:
        """The first position LAYER's query at POSITION (or any later one) can attend."""
        kind, size = self.kinds[layer], self.sizes[layer]
        if kind == SLIDING:
            return max(position - size + 1, 0)
        if kind == CHUNKED:
            return position // size * size
        return 0

    def window_start(self, position: int) -> int:
        """The first position any windowed layer's query at POSITION or later attends (the
        earliest page windowed layers still need)."""
        starts = [self.needed_from(i, position) for i, k in enumerate(self.kinds) if k != FULL]
        return min(starts) if starts else 0

    def held_pages(self, pages: int, position: int, page_size: int) -> dict[str, int]:
        """Pages each kind needs of a sequence holding PAGES whose next query is at POSITION:
        full layers all of them, windowed layers those from ``window_start`` on."""
        held = {FULL: pages} if FULL in self.kinds else {}
        for kind in (SLIDING, CHUNKED):
            starts = [self.needed_from(i, position) for i, k in enumerate(self.kinds) if k == kind]
            if starts:
                held[kind] = max(pages - min(starts) // page_size, 0)
        return held


def layer_kinds(model: Any, layers: int) -> LayerKinds:
    """MODEL's attention layers' kinds from its ``make_cache`` (every layer full without one;
    a hybrid model's recurrent layers are not attention layers)."""
    make_cache = getattr(model, "make_cache", None)
    if make_cache is None:
        return LayerKinds((FULL,) * layers, (0,) * layers)
    caches = [c for c in make_cache() if type(c).__name__ not in RECURRENT_CACHES]
    if len(caches) != layers:  # no per-layer caches said (a vision wrapper): every layer full
        return LayerKinds((FULL,) * layers, (0,) * layers)
    names = [type(c).__name__ for c in caches]
    unknown = sorted({n for n in names if n not in ATTENTION_CACHES})
    if unknown:
        raise UnknownCache(f"model uses {sorted(set(names))} caches; only attention KV caches "
                           "(KVCache, RotatingKVCache, ChunkedKVCache) are supported by the "
                           "paged engine")
    kinds = tuple(ATTENTION_CACHES[n] for n in names)
    sizes = tuple(int(getattr(c, "max_size", 0) or 0) if k == SLIDING
                  else int(getattr(c, "chunk_size", 0) or 0) if k == CHUNKED else 0
                  for c, k in zip(caches, kinds, strict=True))
    return LayerKinds(kinds, sizes)


def kinds_status(kinds: LayerKinds, rows: list[tuple[int, int]], page_size: int
                 ) -> dict[str, Any]:
    """The worker status fields of the layer kinds over running ROWS (pages held, next
    position): layers and window per kind, and the pages each kind's layers need of the rows
    (a windowed kind: only the pages its window still sees; what the rows hold is
    ``kv_pages_held_by_kind``: with a windowed layer group, worker/kv/window_group.py, about
    as many, else every page of the rows)."""
    layers: dict[str, dict[str, int]] = {}
    for kind, size in zip(kinds.kinds, kinds.sizes, strict=True):
        entry = layers.setdefault(kind, {"layers": 0, "window": size})
        entry["layers"] += 1
    needed: dict[str, int] = dict.fromkeys(layers, 0)
    for pages, position in rows:
        for kind, count in kinds.held_pages(pages, position, page_size).items():
            needed[kind] += count
    return {"kv_layer_kinds": layers, "kv_pages_needed_by_kind": needed}
